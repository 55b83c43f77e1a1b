"""A shard's edges: append-only slots of (src, dst, type) with a signed multiplicity and a weight sum.

Owns the packed edge key and the index over it (a :class:`~pulsegraph.base.keyindex.KeyIndex`: an epoch's
new and released edges cost what they are, not a copy of the index), and the slots a sliding window
gives back (released slots are taken by new edges first). :mod:`pulsegraph.snapshots.store` builds a shard on it.
"""

from __future__ import annotations

import numpy as np

from pulsegraph.base.arrays import unique
from pulsegraph.base.edgekey import pack, unpack
from pulsegraph.base.keyindex import KeyIndex
from pulsegraph.snapshots.growable import Column

# The index holds packed edge keys (pulsegraph.base.edgekey): 67M local vertices and 4096 edge
# types per shard; the shard's interners refuse more (pulsegraph.snapshots.store).


class EdgeTable:
    """Append-only edge slots plus a key index; slot ids never move."""

    def __init__(self) -> None:
        self.src = Column(np.int32)
        self.dst = Column(np.int32)
        self.etype = Column(np.int16)
        self.mult = Column(np.int32, wide=np.int64)  # int64 by contract; narrow until a sum needs it
        self.weight = Column(np.int64)
        # The earliest event time among the edge's adds (+inf before any): min commutes, so it is a
        # pure function of the epoch vector like the sums. K-exposure orders adopters by it.
        self.first_ts = Column(np.float64)
        self._index = KeyIndex()  # edge key -> slot, for the slots held
        self._free = np.zeros(0, dtype=np.int64)  # released slots (sorted), taken by new edges first
        # Per type id: has a slot ever held an edge of it. Kept as edges arrive, so that naming the
        # types in use costs the types, not a count over every slot each epoch.
        self._type_seen = np.zeros(0, dtype=bool)

    def __len__(self) -> int:
        return len(self.src)

    def apply(self, src, dst, etype, dmult, dweight, ts=None, rows: bool = False):
        """Add signed multiplicities and weights (and fold the adds' ``ts`` into ``first_ts``); returns the
        touched slots (and, with ``rows``, the slot of each input row too). New edges take released
        slots first, lowest first, then new ones."""
        if len(src) == 0:
            z = np.zeros(0, dtype=np.int64)
            return (z, z) if rows else z
        keys = pack(src, dst, etype)
        order = np.argsort(keys, kind="stable")
        sk = keys[order]
        starts = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]])
        uniq = sk[starts]
        dm = np.add.reduceat(dmult[order].astype(np.int64), starts)
        dw = np.add.reduceat(dweight[order].astype(np.int64), starts)
        adds_ts = np.full(len(keys), np.inf) if ts is None else np.where(dmult > 0, ts, np.inf)
        dt = np.minimum.reduceat(adds_ts[order].astype(np.float64), starts)

        held = self._index.get(uniq)
        found = held >= 0
        old = held[found]
        self.mult.put(old, self.mult.view[old] + dm[found])  # ``old`` is distinct; int32 + int64 sums in int64
        self.weight.view[old] += dw[found]
        self.first_ts.view[old] = np.minimum(self.first_ts.view[old], dt[found])

        new = ~found
        n_new = int(new.sum())
        reused, self._free = self._free[:n_new], self._free[n_new:]
        fresh = np.concatenate([reused, np.arange(len(self), len(self) + n_new - len(reused), dtype=np.int64)])
        nk = uniq[new]
        new_src, new_dst, new_types = unpack(nk)
        cols = (
            (self.src, new_src),
            (self.dst, new_dst),
            (self.etype, new_types),
            (self.mult, dm[new]), (self.weight, dw[new]), (self.first_ts, dt[new]),
        )
        k = len(reused)
        for col, values in cols:
            col.put(reused, values[:k])
            col.extend(values[k:])
        self._index.put(nk, fresh, absent=True)
        self._see_types(new_types)
        touched = np.concatenate([old, fresh])
        if not rows:
            return touched
        slot_of = np.empty(len(uniq), dtype=np.int64)
        slot_of[found], slot_of[new] = old, fresh
        row_slots = np.empty(len(keys), dtype=np.int64)
        row_slots[order] = slot_of[np.cumsum(np.r_[True, sk[1:] != sk[:-1]]) - 1]
        return touched, row_slots

    def _see_types(self, etype: np.ndarray) -> None:
        if not len(etype):
            return
        top = int(etype.max()) + 1
        if top > len(self._type_seen):
            self._type_seen = np.concatenate([self._type_seen, np.zeros(top - len(self._type_seen), dtype=bool)])
        self._type_seen[etype] = True

    def types_seen(self) -> np.ndarray:
        """The type ids of the edges this table has held since it was made or loaded, sorted. In window
        mode that may name a type whose every slot was released and taken by other types since: harmless,
        as a delta's types are matched by name downstream."""
        return np.flatnonzero(self._type_seen)

    def release(self, slots: np.ndarray) -> None:
        """Give ``slots`` (edges with nothing left: multiplicity and weight 0) back for new edges to take;
        their keys leave the index. Only the window frees slots: without one an edge is forever."""
        if not len(slots):
            return
        slots = unique(slots.astype(np.int64))
        self._index.discard(pack(self.src.view[slots], self.dst.view[slots], self.etype.view[slots]))
        self.mult.view[slots] = 0
        self.weight.view[slots] = 0
        self.first_ts.view[slots] = np.inf
        self._free = np.union1d(self._free, slots)

    def load(self, cols: dict) -> None:
        """Columns saved by a checkpoint, slots as they were; the key index is rebuilt (without the released slots)."""
        for name in ("src", "dst", "etype", "mult", "weight", "first_ts"):
            getattr(self, name).extend(cols[name])
        self._free = np.asarray(cols.get("free", np.zeros(0)), dtype=np.int64)
        self._see_types(self.etype.view)
        keys = pack(self.src.view, self.dst.view, self.etype.view)
        held = np.ones(len(keys), dtype=bool)
        held[self._free] = False
        slots = np.flatnonzero(held)
        order = np.argsort(keys[slots], kind="stable")
        self._index = KeyIndex.from_sorted(keys[slots][order], slots[order].astype(np.int64))

    def held(self) -> np.ndarray:
        """The slots that hold an edge (all but the released ones)."""
        held = np.ones(len(self), dtype=bool)
        held[self._free] = False
        return np.flatnonzero(held)

    def columns(self, copy: bool = True) -> dict:
        """For a checkpoint: the columns (copies, unless ``copy`` is false: views to pickle at once)
        and the released slots."""
        cols = {c: getattr(self, c).view.copy() if copy else getattr(self, c).view for c in ("src", "dst", "etype", "mult", "weight", "first_ts")}
        cols["free"] = self._free.copy()
        return cols

    def live(self) -> int:
        return int(np.count_nonzero(self.mult.view > 0))

    @property
    def nbytes(self) -> int:
        cols = (self.src, self.dst, self.etype, self.mult, self.weight, self.first_ts)
        return sum(c.nbytes for c in cols) + self._index.nbytes
