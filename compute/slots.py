"""The merge view's edges: every shard's edge slots, each slot's edge in global ids, held where the compute stage says.

Owns :class:`EdgeSlots` (one column set per shard, indexed by the shard's edge slot, so a delta is applied with a
few scatter writes and no search), :class:`SlotWrites` (what one shard's delta of one epoch writes there, its
endpoints and types already in global ids) and :class:`PartitionSlots`, the same calls over the compute
partitions: shard ``s``'s slots are partition ``s % P``'s, so with ``--compute-partitions`` above 1 no process
holds every edge's slot (~40 B per live edge that the compute actor held alone). The vertex side of a merge
(global ids, attributes, which shards hold each id) stays in :class:`~pulsegraph.compute.graph.GlobalGraph`,
which translates each delta before its slots take it and gets back, per shard, the changed slots' states
after and before the batch. Must not know ids, names or shards' local ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from pulsegraph.base.arrays import unique
from pulsegraph.compute.changes import EdgeChanges
from pulsegraph.snapshots.growable import Column


# A slot's columns, in EdgeChanges' order.
COLUMNS = ("src", "dst", "etype", "mult", "weight", "first_ts")


class ShardSlots:
    """One shard's slots. (Pickles of earlier versions also carry its ``local_to_global``: the graph takes it.)"""

    def __init__(self) -> None:
        self.src = Column(np.int32)
        self.dst = Column(np.int32)
        self.etype = Column(np.int16)
        self.mult = Column(np.int32, wide=np.int64)  # int64 by contract; narrow until a value needs it
        self.weight = Column(np.int64)
        self.first_ts = Column(np.float64)  # earliest add time of the edge (+inf: none)

    def grow(self, slots: int) -> None:
        extra = slots - len(self.src)
        if extra > 0:
            for c in (self.src, self.dst, self.etype, self.mult, self.weight):
                c.extend(np.zeros(extra, dtype=c.view.dtype))
            self.first_ts.extend(np.full(extra, np.inf))

    def state(self, slots: np.ndarray) -> EdgeChanges:
        """The edges in ``slots`` as they are now (copies)."""
        return EdgeChanges(*(getattr(self, name).view[slots] for name in COLUMNS))

    def live(self) -> np.ndarray:
        return np.flatnonzero(self.mult.view > 0)

    def write(self, w: SlotWrites) -> None:
        if w.full:
            # The shard names its whole state anew: every edge the delta does not name is gone.
            self.mult.view[:] = 0
            self.weight.view[:] = 0
        if not len(w.slot):
            return
        s, e = w.slot, w.edges
        self.grow(int(s.max()) + 1)
        self.src.view[s] = e.src
        self.dst.view[s] = e.dst
        self.etype.view[s] = e.etype
        self.mult.put(s, e.mult)
        self.weight.view[s] = e.weight
        if e.first_ts is not None:
            self.first_ts.view[s] = e.first_ts

    def nbytes(self) -> int:
        return sum(c.view.nbytes for c in (self.src, self.dst, self.etype, self.mult, self.weight, self.first_ts))


@dataclass
class SlotWrites:
    """One shard's delta of one epoch as its slots take it: the slots it names and, row for row, their edges'
    new states, endpoints and types in global ids (``edges.first_ts`` None: the delta carried none);
    ``full``: the delta names the shard's whole state, so its other slots hold no edge from now on."""

    shard: int
    slot: np.ndarray
    edges: EdgeChanges
    full: bool = False


# Per shard, the slots a batch changed: their edges' states after it and, row for row, before it.
Merged = dict[int, tuple[EdgeChanges, EdgeChanges]]


class SlotStore(Protocol):
    """Where the merge view's slots are: :class:`EdgeSlots` in this process, or :class:`PartitionSlots`."""

    def merge(self, epochs: list[list[SlotWrites]]) -> Merged: ...

    def columns(self, names: tuple[str, ...], types: np.ndarray | None = None, live: bool = True) -> dict[int, tuple[np.ndarray, ...]]: ...

    def nbytes(self) -> int: ...


class EdgeSlots:
    """The slots of the shards given to one holder (all of them in the compute stage's own process)."""

    def __init__(self) -> None:
        self._shards: dict[int, ShardSlots] = {}

    def merge(self, epochs: list[list[SlotWrites]]) -> Merged:
        """Write the deltas of consecutive epochs (oldest first), per shard in that order; returns, per shard,
        the slots they named (and, where a delta names its shard whole, the slots live before it), each once,
        as they are after the last epoch and before the first."""
        by_shard: dict[int, list[SlotWrites]] = {}
        for writes in epochs:
            for w in writes:
                by_shard.setdefault(w.shard, []).append(w)
        out: Merged = {}
        for sh, ws in by_shard.items():
            named = [w.slot for w in ws if len(w.slot)]
            se = self._shards.get(sh)
            if se is not None and any(w.full for w in ws):
                named.append(se.live())  # their edges may be gone
            if se is None:
                se = self._shards[sh] = ShardSlots()
            if not named:
                for w in ws:
                    se.write(w)
                continue
            slots = named[0] if len(named) == 1 else unique(np.concatenate(named))
            se.grow(int(slots.max()) + 1)
            before = se.state(slots)
            for w in ws:
                se.write(w)
            out[sh] = (se.state(slots), before)
        return out

    def adopt(self, shards: dict[int, ShardSlots]) -> None:
        """Hold the slots of ``shards`` too (what another holder had, or a graph pickled before the store was one)."""
        self._shards.update(shards)

    def split(self, holders: int) -> list[dict[int, ShardSlots]]:
        """This store's shards, by the holder ``shard % holders`` that :class:`PartitionSlots` gives them."""
        out: list[dict[int, ShardSlots]] = [{} for _ in range(holders)]
        for sh, se in self._shards.items():
            out[sh % holders][sh] = se
        return out

    def columns(self, names: tuple[str, ...], types: np.ndarray | None = None, live: bool = True) -> dict[int, tuple[np.ndarray, ...]]:
        """Per shard, the columns ``names`` (copies) of its slots whose edge is live (``live``: a multiplicity above 0;
        else every slot) and of the type ids ``types`` (None: all): what a reader of the whole graph reads,
        without copying the columns it does not."""
        out = {}
        for sh, se in self._shards.items():
            keep = se.mult.view > 0 if live else np.ones(len(se.src), dtype=bool)
            if types is not None:
                keep &= np.isin(se.etype.view, types)
            out[sh] = tuple(getattr(se, name).view[keep] for name in names)
        return out

    def nbytes(self) -> int:
        return sum(se.nbytes() for se in self._shards.values())


class PartitionSlots:
    """:class:`SlotStore` over the compute partitions of a :class:`~pulsegraph.compute.partitioned.PartitionedEngine`
    (``engine.port``: in this process or Ray actors): each partition's :class:`EdgeSlots` holds the slots of
    the shards ``s`` with ``s % P`` its index, and each merge is one round of calls, side by side. The changed
    slots' states come back to the caller, which routes them on (ranking, applications, the API)."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine  # pickled with the stage, and so the same engine as the stage's after a read-back

    @classmethod
    def adopting(cls, engine: Any, local: EdgeSlots) -> PartitionSlots:
        """The partitions' store, handed the slots ``local`` held (a stage written whole before they moved)."""
        engine.port.each_own("adopt_slots", [(part,) for part in local.split(engine.port.parts)])
        return cls(engine)

    def _of(self, shard: int) -> int:
        return shard % self._engine.port.parts

    def merge(self, epochs: list[list[SlotWrites]]) -> Merged:
        port = self._engine.port
        mine: list[list[list[SlotWrites]]] = [[[] for _ in epochs] for _ in range(port.parts)]
        for e, writes in enumerate(epochs):
            for w in writes:
                mine[self._of(w.shard)][e].append(w)
        out: Merged = {}
        for part in port.each_own("merge_slots", [(m,) for m in mine]):
            out.update(part)
        return out

    def columns(self, names: tuple[str, ...], types: np.ndarray | None = None, live: bool = True) -> dict[int, tuple[np.ndarray, ...]]:
        out: dict[int, tuple[np.ndarray, ...]] = {}
        for part in self._engine.port.each("slot_columns", names, types, live):
            out.update(part)
        return out

    def nbytes(self) -> int:
        return 0  # the partitions hold them: they count them in theirs
