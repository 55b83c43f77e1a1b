"""The applications' adjacency, kept across epochs and updated from each epoch's edge changes.

Owns :class:`AppAdjacency`, the tables the applications read: the distinct (src, dst) pairs of
every live edge type out and in (each with its count of live typed edges, and the distinct
degrees), and, per edge type asked for, its live edges with their multiplicity and first add
time (K-exposure's edge lists and first-seen index). Each is a :class:`~pulsegraph.compute.apps.rowtable.RowTable`
(a base CSR with an overlay of the entries added since, rebuilt when the overlay grows: the work
per epoch follows the change). Only the first epoch and a full delta (after a restore) build from
the graph's columns.

Must not touch the rank engine; reads the graph's live edges (:class:`~pulsegraph.compute.apps.view.LiveGraph`)
only to build from scratch.
"""

from __future__ import annotations

import logging

import numpy as np
import scipy.sparse as sp

from pulsegraph.base.arrays import add_at
from pulsegraph.compute.apps.rowtable import (
    COMPACT_FRACTION,
    COMPACT_MIN,
    RowTable,
    pack,
    unpack,
)
from pulsegraph.compute.changes import EdgeChanges
from pulsegraph.compute.exceptions import ComputeError
from pulsegraph.compute.apps.view import LiveGraph
from pulsegraph.snapshots.growable import Column

__all__ = ["COMPACT_FRACTION", "COMPACT_MIN", "AppAdjacency", "RowTable", "pack"]

log = logging.getLogger(__name__)


class AppAdjacency:
    """What the applications read of the live graph, kept from epoch to epoch (see the module docstring).

    ``out`` holds (src, dst) -> live typed edges of the pair, ``inn`` the same pairs keyed (dst, src);
    a pair is there while at least one of its typed edges is live. Per edge type asked for through
    :meth:`typed`, a table of its live edges (src, dst), with (multiplicity, first add time) when
    they were asked for. With ``pairs`` False (applications that read typed edges only, in an actor of their
    own) the pair tables and degrees stay empty: asking for them is a bug."""

    pairs = True  # the default of an adjacency pickled before it could go without them

    def __init__(self, compact_fraction: float = COMPACT_FRACTION, compact_min: int = COMPACT_MIN,
                 pairs: bool = True) -> None:
        self._kw: dict = {"compact_fraction": compact_fraction, "compact_min": compact_min}
        self.pairs = pairs
        self.n = 0
        # A pair's count of live typed edges is at most the number of edge types (int16 ids).
        self.out = RowTable({"count": np.int16}, **self._kw)
        self.inn = RowTable(**self._kw)  # liveness only: the counts are read from ``out``
        self._out_deg = Column(np.int32)  # distinct pairs out of each vertex
        self._in_deg = Column(np.int32)
        self._typed: dict[str, RowTable] = {}  # by type name: the tables asked for so far
        self.builds = 0  # from the graph's columns (first epoch, full deltas); for tests

    @classmethod
    def from_graph(cls, g: LiveGraph, **kw) -> AppAdjacency:
        adj = cls(**kw)
        adj.rebuild(g)
        return adj

    # -- from scratch ---------------------------------------------------------------------------

    def rebuild(self, g: LiveGraph) -> None:
        """Every table from the graph's columns (the typed ones asked for so far, too)."""
        self.builds += 1
        self.n = g.n
        if self.pairs:
            self._rebuild_pairs(g)
        for name in list(self._typed):
            self._typed[name] = self._typed_from(g, name, bool(self._typed[name].dtypes))

    def _rebuild_pairs(self, g: LiveGraph) -> None:
        n = g.n
        src, dst, _ = g.live()
        # SciPy's COO -> CSR is a counting sort by row (O(edges + vertices)), then a sort within rows.
        m = sp.csr_matrix((np.ones(len(src), dtype=np.int32), (src, dst)), shape=(n, n))
        m.sum_duplicates()
        m.sort_indices()
        t = m.T.tocsr()
        t.sort_indices()
        self.out = RowTable.from_csr(m.indptr, m.indices, {"count": m.data.astype(np.int16)}, **self._kw)
        self.inn = RowTable.from_csr(t.indptr, t.indices, **self._kw)
        self._out_deg, self._in_deg = Column(np.int32), Column(np.int32)
        self._out_deg.extend(np.diff(m.indptr).astype(np.int32))
        self._in_deg.extend(np.diff(t.indptr).astype(np.int32))

    def _typed_from(self, g: LiveGraph, etype: str, values: bool) -> RowTable:
        """The live edges of one type, gathered from the shards' columns (with their multiplicity and
        first add time when ``values``)."""
        s, d, m, f = g.live_of_type(etype)
        cols = {"mult": m.astype(np.int64), "first": f.astype(np.float64)} if values else {}
        return RowTable.from_entries(g.n, s, d, cols, **self._kw)

    # -- each epoch -----------------------------------------------------------------------------

    def apply(self, g: LiveGraph, changes: EdgeChanges, before: EdgeChanges) -> None:
        """Fold in what an epoch (or several merged) changed: ``changes`` and, slot for slot, ``before``."""
        self._grow(g.n)
        if not len(changes):
            return
        if self.pairs:
            self._apply_pairs(changes, before)
        for name in list(self._typed):
            self._apply_typed(g, name, changes)

    def _apply_pairs(self, changes: EdgeChanges, before: EdgeChanges) -> None:
        step = (changes.mult > 0).astype(np.int64) - (before.mult > 0).astype(np.int64)
        moved = np.flatnonzero(step)
        if not len(moved):
            return
        # Rows are edges, not slots (pulsegraph.compute.changes.by_edge: a reused slot comes as two rows), so a
        # row's before and after name one pair and the new state's pair is the row's either way.
        keys, inv = np.unique(pack(changes.src[moved], changes.dst[moved]), return_inverse=True)
        diff = np.bincount(inv, weights=step[moved], minlength=len(keys)).astype(np.int64)
        keys, diff = keys[diff != 0], diff[diff != 0]
        found = self.out.find(keys)
        old = self.out.value(found, "count", 0).astype(np.int64)
        new = old + diff
        if (new < 0).any():
            raise ComputeError("a pair lost more live edges than the applications' adjacency held: the edge changes "
                               "do not follow the kept state (a bug; a full delta rebuilds it)")
        live = new > 0
        count = new.astype(np.int16)
        self.out.assign(keys, live, {"count": count}, found)
        rows, cols = unpack(keys)
        back = pack(cols, rows)
        order = np.argsort(back)
        self.inn.assign(back[order], live[order])
        went = (old == 0).astype(np.int32) - (~live).astype(np.int32)
        add_at(self._out_deg.view, rows, went)
        add_at(self._in_deg.view, cols, went)

    def _apply_typed(self, g: LiveGraph, etype: str, changes: EdgeChanges) -> None:
        t = g.type_id(etype)
        if t is None:
            return
        if changes.first_ts is None:
            # Hand-made changes without first add times: gather the type again rather than guess them.
            log.debug("edge changes carry no first add times: rebuilding the %s edges", etype)
            self._typed[etype] = self._typed_from(g, etype, bool(self._typed[etype].dtypes))
            return
        sel = np.flatnonzero(changes.etype == t)
        if not len(sel):
            return
        keys = pack(changes.src[sel], changes.dst[sel])
        # One state per edge is expected; keep the last if the same edge came twice.
        keys, last = np.unique(keys[::-1], return_index=True)
        sel = sel[len(sel) - 1 - last]
        table = self._typed[etype]
        values = {"mult": changes.mult[sel].astype(np.int64), "first": changes.first_ts[sel].astype(np.float64)}
        table.assign(keys, changes.mult[sel] > 0, {k: values[k] for k in table.dtypes})

    def _grow(self, n: int) -> None:
        if n <= self.n:
            return
        pairs = (self.out, self.inn) if self.pairs else ()
        for deg in (self._out_deg, self._in_deg) if self.pairs else ():
            deg.extend(np.zeros(n - len(deg), dtype=np.int32))
        for table in (*pairs, *self._typed.values()):
            table.grow(n)
        self.n = n

    # -- reading --------------------------------------------------------------------------------

    def typed(self, g: LiveGraph, etype: str, values: bool = True) -> RowTable:
        """The live edges of ``etype`` (built from the graph on first use, kept from then on), with the
        value columns ``mult`` and ``first`` when ``values``: a type read only as pairs (K-exposure's
        mentions) keeps no values (16 bytes an edge)."""
        table = self._typed.get(etype)
        if table is None or (values and not table.dtypes):
            table = self._typed[etype] = self._typed_from(g, etype, values)
        table.grow(self.n)
        return table

    def out_degree(self) -> np.ndarray:
        """Distinct pairs out of each vertex (a view: read only)."""
        self.require_pairs()
        return self._out_deg.view[: self.n]

    def in_degree(self) -> np.ndarray:
        self.require_pairs()
        return self._in_deg.view[: self.n]

    def require_pairs(self) -> None:
        if not self.pairs:
            raise ComputeError("an application read the distinct pairs of an adjacency kept without them (a bug: "
                               "its reads_pairs is False)")

    def nbytes(self) -> int:
        return (self.out.nbytes() + self.inn.nbytes() + sum(t.nbytes() for t in self._typed.values())
                + self._out_deg.nbytes + self._in_deg.nbytes)
