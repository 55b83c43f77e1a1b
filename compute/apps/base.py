"""What an application sees of one sealed epoch, and the small contract every application keeps.

:class:`AppGraph` is the live graph as the applications read it: the distinct (src, dst)
pairs of every edge type, out and in, row by row, their distinct degrees, and typed edge
lists with their first add times, all from an :class:`~pulsegraph.compute.apps.adjacency.AppAdjacency`
that the runner keeps across epochs and updates from each epoch's changes (``build`` makes
one from scratch: the reference the tests compare with). :class:`AppDelta` is what the epoch
did, edge by edge: edges that went live and edges that went (a pair with another live type
counts as gone too: conservative, never wrong). Its rows are edges, never slots (see
:func:`pulsegraph.compute.changes.by_edge`: with a window a shard reuses the slots of expired edges), so a row's
before and after always name one (src, dst, type). Must not touch the rank engine or the shards.
"""

from __future__ import annotations

import abc
import dataclasses
from dataclasses import dataclass, field
from collections.abc import Iterator
from typing import Any, ClassVar, Protocol

import numpy as np
import scipy.sparse as sp

from pulsegraph.base.arrays import gather_ranges
from pulsegraph.compute.apps.adjacency import AppAdjacency
from pulsegraph.compute.changes import EdgeChanges
from pulsegraph.compute.apps.view import LiveGraph

INF = np.int32(2**30)


def csr_pairs(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, indices) of the distinct pairs, neighbors sorted."""
    m = sp.csr_matrix((np.ones(len(src), dtype=np.int8), (src, dst)), shape=(n, n))
    m.sum_duplicates()
    m.sort_indices()
    return m.indptr.astype(np.int64), m.indices.astype(np.int64)


def expand(indptr: np.ndarray, indices: np.ndarray, frontier: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The neighbors of every frontier vertex, and for each the position in ``frontier`` it came from."""
    starts = indptr[frontier]
    pos, owner = gather_ranges(starts, indptr[frontier + 1] - starts)
    return indices[pos], owner


# The most entries one read of a frontier's rows takes (``neighbors_in_slices``): ~30 bytes of arrays an entry
# while it is worked on. A level of a traversal through a graph's core reads nearly every edge: read whole, the 16
# landmarks' BFS peaked 452 MiB above its distances at 13 M edges, 176 in slices (``bench.structures landmark-bfs``).
READ_ENTRIES = 1 << 21


class Neighbors(Protocol):
    """Rows of a graph read a frontier at a time (a :class:`~pulsegraph.compute.apps.adjacency.RowTable`, a :class:`CSR`)."""

    def neighbors(self, frontier: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The neighbors of every frontier vertex (int64, any order), and for each its position in ``frontier``."""
        ...

    @property
    def extent(self) -> int:
        """What reading every row takes."""
        ...

    def reach(self, frontier: np.ndarray) -> np.ndarray:
        """About what reading each frontier row takes."""
        ...


def neighbors_in_slices(adj: Neighbors, frontier: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """:meth:`Neighbors.neighbors` of ``frontier`` as consecutive slices of its rows, each reading about
    :data:`READ_ENTRIES` entries at most (a row with more is a slice of its own); positions are in ``frontier``.
    One read where the whole graph is not more (nothing to work out for the many small frontiers of a repair)."""
    f = np.asarray(frontier, dtype=np.int64)
    if len(f) <= 1 or adj.extent <= READ_ENTRIES:
        yield adj.neighbors(f)
        return
    ends = np.cumsum(adj.reach(f))
    if ends[-1] <= READ_ENTRIES:
        yield adj.neighbors(f)
        return
    cuts = np.searchsorted(ends, np.arange(READ_ENTRIES, int(ends[-1]), READ_ENTRIES, dtype=np.int64), side="right")
    bounds = np.unique(np.concatenate([[0], cuts, [len(f)]]))
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        nbrs, owner = adj.neighbors(f[lo:hi])
        yield nbrs, owner + lo


@dataclass(frozen=True)
class CSR:
    """Plain CSR arrays as :class:`Neighbors`."""

    indptr: np.ndarray
    indices: np.ndarray

    def neighbors(self, frontier: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        nbrs, owner = expand(self.indptr, self.indices, np.asarray(frontier, dtype=np.int64))
        return nbrs.astype(np.int64), owner

    @property
    def extent(self) -> int:
        return len(self.indices)

    def reach(self, frontier: np.ndarray) -> np.ndarray:
        f = np.asarray(frontier, dtype=np.int64)
        return self.indptr[f + 1] - self.indptr[f]


@dataclass
class AppGraph:
    """The live graph of an epoch as the applications read it (a view of the kept adjacency: valid
    for this epoch only, as the adjacency changes in place with the next)."""

    g: LiveGraph
    epoch: int
    adjacency: AppAdjacency
    scores: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return self.g.n

    @classmethod
    def build(cls, g: LiveGraph, epoch: int, scores: dict[str, np.ndarray] | None = None) -> AppGraph:
        """From scratch, from the graph's columns (the runner keeps one across epochs instead)."""
        return cls(g, epoch, AppAdjacency.from_graph(g), dict(scores or {}))

    @property
    def out(self) -> Neighbors:
        """Distinct out-neighbors over every live edge type."""
        self.adjacency.require_pairs()
        return self.adjacency.out

    @property
    def inn(self) -> Neighbors:
        """Distinct in-neighbors over every live edge type."""
        self.adjacency.require_pairs()
        return self.adjacency.inn

    def out_degree(self) -> np.ndarray:
        """Distinct out-neighbors of each vertex (read only)."""
        return self.adjacency.out_degree()

    def in_degree(self) -> np.ndarray:
        return self.adjacency.in_degree()

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """(src, dst) of every distinct live pair, sorted."""
        self.adjacency.require_pairs()
        rows, cols, _ = self.adjacency.out.entries()
        return rows, cols

    def typed_first(self, etype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(src, dst, multiplicity, first add time) of the live edges of one type, sorted by (src, dst),
        as new arrays (empty when the type is unknown)."""
        src, dst, (mult, first) = self.adjacency.typed(self.g, etype).entries("mult", "first")
        return src, dst, mult, first

    def typed(self, etype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(src, dst, multiplicity) of the live edges of one type (empty when the type is unknown)."""
        src, dst, (mult,) = self.adjacency.typed(self.g, etype).entries("mult")
        return src, dst, mult

    def typed_csr(self, etype: str) -> tuple[np.ndarray, np.ndarray]:
        """(indptr, indices) of the live edges of one type by source, destinations sorted within a row;
        neither is written afterwards (a recount on another thread may keep them)."""
        return self.adjacency.typed(self.g, etype, values=False).csr(self.n)

    def typed_neighbors(self, etype: str, src: np.ndarray) -> np.ndarray:
        """The destinations of the live ``etype`` edges out of ``src`` (repeats where several share one)."""
        nbrs, _ = self.adjacency.typed(self.g, etype, values=False).neighbors(src)
        return nbrs

    def first_seen(self, etype: str, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """The earliest add time of each live (src, dst) edge of ``etype`` (+inf where unknown)."""
        if self.g.type_id(etype) is None or not len(src):
            return np.full(len(src), np.inf)
        return self.adjacency.typed(self.g, etype).get(src, dst, "first", np.inf)


@dataclass
class AppDelta:
    """What one epoch changed: edge changes (new absolute state) and, slot for slot, the state before."""

    changes: EdgeChanges
    before: EdgeChanges
    types: list[str]
    new_vertices: int = 0  # ids from n - new_vertices on are new in this epoch
    full: bool = False  # the changes are the whole graph (first epoch after a restore)

    def _went(self, live_after: bool, etype: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        c, b = self.changes, self.before
        if not len(c):
            z = np.zeros(0, dtype=np.int64)
            return z, z
        was, now = b.mult > 0, c.mult > 0
        keep = (now & ~was) if live_after else (was & ~now)
        if etype is not None:
            t = self.types.index(etype) if etype in self.types else -1
            keep &= c.etype == t
        return c.src[keep].astype(np.int64), c.dst[keep].astype(np.int64)

    def inserted(self, etype: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Edges that went live this epoch (of ``etype``, or any type)."""
        return self._went(True, etype)

    def deleted(self, etype: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Edges that stopped being live this epoch."""
        return self._went(False, etype)

    def touched(self, etype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(src, dst, multiplicity before, after) of the changed edges of one type; multiplicities floored at 0."""
        c, b = self.changes, self.before
        t = self.types.index(etype) if etype in self.types else -1
        keep = c.etype == t
        return (
            c.src[keep].astype(np.int64), c.dst[keep].astype(np.int64),
            np.maximum(b.mult[keep], 0), np.maximum(c.mult[keep], 0),
        )


# A patch's keys: row << 32 | column (vertex ids stay below 2**31, rows are a few landmarks).
PATCH_COL_BITS = np.int64(32)
PATCH_COL_MASK = np.int64((1 << 32) - 1)


@dataclass(frozen=True)
class Patch:
    """A per-vertex field (``rows x width``) given as its change since an earlier epoch's published one:
    what an application publishes in place of the whole array when an epoch changes a few of its entries
    (landmark distances move where edges came and went, not everywhere).

    ``base`` is the epoch whose published array (or patch) this applies to: a consumer applies it only
    to that epoch's array, widened to ``shape`` with the field's fill (columns of vertices new since
    ``base``), and asks for the whole array again when it does not hold that epoch's (it missed a result:
    :meth:`~pulsegraph.compute.apps.runner.Applications.resend_whole`). ``keys`` (int64, ascending, distinct:
    ``row << 32 | column``) are the entries that may have changed, ``values`` what they hold now."""

    base: int
    shape: tuple[int, int]
    keys: np.ndarray
    values: np.ndarray

    @classmethod
    def of(cls, base: int, array: np.ndarray, written: list[list[np.ndarray]], limit: int | None = None) -> Patch | None:
        """The entries of ``array`` (rows x width) in the columns ``written[row]`` holds (arrays of them, in
        any order, repeats allowed); None when they are more than ``limit``."""
        width = array.shape[1]
        seen = np.zeros(width, dtype=bool)  # one row's columns at a time: a pass over width, not a sort
        parts, count = [], 0
        for r, cols in enumerate(written):
            if not cols:
                continue
            for c in cols:
                seen[c] = True
            at = np.flatnonzero(seen)
            seen[at] = False
            count += len(at)
            if limit is not None and count > limit:
                return None
            parts.append((np.int64(r) << PATCH_COL_BITS) | at)
        keys = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)  # ascending: rows in order
        return cls(base, (int(array.shape[0]), int(width)), keys, array[keys >> PATCH_COL_BITS, keys & PATCH_COL_MASK])

    def write(self, out: np.ndarray) -> None:
        """Write the changed entries into ``out``: the base's array widened to :attr:`shape` (or wider)."""
        out[self.keys >> PATCH_COL_BITS, self.keys & PATCH_COL_MASK] = self.values

    def applied_to(self, base: np.ndarray, fill: int) -> np.ndarray:
        """The whole array this stands for, from ``base`` (the array as of epoch :attr:`base`; a copy)."""
        out = np.full(self.shape, fill, dtype=base.dtype)
        out[:, : base.shape[1]] = base
        self.write(out)
        return out


@dataclass(frozen=True)
class AppResult:
    """What an application publishes for one epoch (a frozen dataclass of host arrays and numbers).
    :attr:`PER_VERTEX` names the fields with one entry per vertex id: the big ones, which the API keeps
    as undo records beside the graph (``pulsegraph.api.store``) and leaves out of archived epochs (``pulsegraph.api.archive``);
    an application declares them here, in its result, and nowhere else. A per-vertex field holds the whole
    array or a :class:`Patch` of the one the application published before."""

    PER_VERTEX: ClassVar[tuple[str, ...]] = ()

    def without_per_vertex(self) -> AppResult:
        """This result with its per-vertex fields left out (None): what an archived epoch keeps."""
        return dataclasses.replace(self, **{f: None for f in self.PER_VERTEX}) if self.PER_VERTEX else self

    def per_vertex(self) -> dict[str, np.ndarray | Patch]:
        """The per-vertex fields that are there, by name."""
        return {f: getattr(self, f) for f in self.PER_VERTEX if getattr(self, f) is not None}


class Application(abc.ABC):
    """One algorithm over the sealed epochs. ``previous`` is what the last call returned; the state may be
    updated in place, and :meth:`publish` makes the host copies an :class:`~pulsegraph.compute.results.EpochResult` carries
    (an instance of :attr:`result`)."""

    name: str = ""
    result: type[AppResult] = AppResult
    # What of the graph it reads besides the typed edge tables: the distinct pairs (AppGraph.out, inn, the degrees),
    # the vertex names. Where the applications run in actors of their own, one that reads neither holds neither.
    reads_pairs: bool = True
    reads_names: bool = False

    @abc.abstractmethod
    def initialize(self, graph: AppGraph) -> Any:
        """The state from scratch on ``graph``."""

    @abc.abstractmethod
    def update(self, graph: AppGraph, delta: AppDelta, previous: Any) -> Any:
        """The state after ``delta``, from ``previous``; must equal :meth:`initialize` on ``graph``."""

    @abc.abstractmethod
    def publish(self, state: Any) -> AppResult:
        """Host copies of what the API serves, as this application's :attr:`result`."""

    def resend_whole(self) -> None:
        """Publish whole per-vertex arrays next time, not patches: a consumer lost the chain of them."""
