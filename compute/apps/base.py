"""What an application sees of one sealed epoch, and the small contract every application keeps.

:class:`AppGraph` is the live graph as CSR over distinct (src, dst) pairs of every
edge type (out and in), plus typed pair lists on demand; :class:`AppDelta` is what
the epoch did to it, pair by pair: pairs that may have appeared and pairs that
may have gone (a pair with another live type counts as gone too: conservative,
never wrong). Built once per epoch by the runner and shared by the applications.
Must not touch the rank engine or the shards.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from compute.graph import EdgeChanges, GlobalGraph

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
    counts = indptr[frontier + 1] - starts
    total = int(counts.sum())
    if total == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z
    owner = np.repeat(np.arange(len(frontier)), counts)
    offs = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    return indices[np.repeat(starts, counts) + offs], owner


@dataclass
class AppGraph:
    """The live graph of an epoch as the applications read it."""

    g: GlobalGraph
    epoch: int
    out_indptr: np.ndarray
    out_indices: np.ndarray
    in_indptr: np.ndarray
    in_indices: np.ndarray
    scores: dict[str, np.ndarray] = field(default_factory=dict)
    # Built on first use, for this epoch only (an AppGraph is built per epoch).
    _typed: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)
    _first_index: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # sorted (src << 32 | dst), first add time

    @property
    def n(self) -> int:
        return self.g.n

    @classmethod
    def build(cls, g: GlobalGraph, epoch: int, scores: dict[str, np.ndarray] | None = None) -> "AppGraph":
        src, dst, _ = g._live()
        n = g.n
        oi, ox = csr_pairs(n, src, dst)
        ii, ix = csr_pairs(n, dst, src)
        return cls(g, epoch, oi, ox, ii, ix, dict(scores or {}))

    def _edges(self, etype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(src, dst, multiplicity, first add time) of the live edges of one type, gathered from the
        shards once per epoch (empty when the type is unknown)."""
        got = self._typed.get(etype)
        if got is None:
            parts = []
            if etype in self.g.types:
                t = self.g.types.index(etype)
                for se in self.g._shards.values():
                    keep = (se.mult.view > 0) & (se.etype.view == t)
                    parts.append((
                        se.src.view[keep].astype(np.int64), se.dst.view[keep].astype(np.int64),
                        se.mult.view[keep], se.first_ts.view[keep],
                    ))
            if parts:
                s, d, m, f = (np.concatenate(c) for c in zip(*parts))
            else:
                s = d = m = np.zeros(0, np.int64)
                f = np.zeros(0, np.float64)
            got = self._typed[etype] = (s, d, m, f)
        return got

    def typed(self, etype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(src, dst, multiplicity) of the live edges of one type (empty when the type is unknown)."""
        s, d, m, _ = self._edges(etype)
        return s, d, m

    def first_seen(self, etype: str, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """The earliest add time of each live (src, dst) edge of ``etype`` (+inf where unknown)."""
        out = np.full(len(src), np.inf)
        if etype not in self.g.types or not len(src):
            return out
        index = self._first_index.get(etype)
        if index is None:  # once per epoch and type: the live edges sorted by key
            s, d, _, f = self._edges(etype)
            keys = (s << 32) | d
            order = np.argsort(keys)
            index = self._first_index[etype] = (keys[order], f[order])
        keys, first = index
        want = (src.astype(np.int64) << 32) | dst.astype(np.int64)
        pos = np.minimum(np.searchsorted(keys, want), max(len(keys) - 1, 0))
        hit = (len(keys) > 0) & (keys[pos] == want) if len(keys) else np.zeros(len(want), dtype=bool)
        out[hit] = first[pos[hit]]
        return out


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


class Application(abc.ABC):
    """One algorithm over the sealed epochs. ``previous`` is what the last call returned; the state may be
    updated in place, and :meth:`publish` makes the host copies an :class:`~compute.results.EpochResult` carries."""

    name: str = ""

    @abc.abstractmethod
    def initialize(self, graph: AppGraph) -> Any:
        """The state from scratch on ``graph``."""

    @abc.abstractmethod
    def update(self, graph: AppGraph, delta: AppDelta, previous: Any) -> Any:
        """The state after ``delta``, from ``previous``; must equal :meth:`initialize` on ``graph``."""

    @abc.abstractmethod
    def publish(self, state: Any) -> Any:
        """Host copies of what the API serves (plain dicts and NumPy arrays)."""
