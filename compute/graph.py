"""The compute stage's whole-graph view, merged from the shards' epoch deltas.

Owns the global vertex ids (:class:`pulsegraph.compute.ids.VertexIds`: epoch by epoch, the
vertices an epoch adds in name order, so independent of the shard count and the
batching), each shard's local ids' global ids, and the per-vertex columns. Each slot's
edge is in a :class:`~pulsegraph.compute.slots.SlotStore` (``slots``): in this process, or
over the compute partitions, which then hold them and not this process; a merge translates
each delta to global ids and hands it there. It builds the CSR matrices the algorithms run
on. It must not reach back into shards: deltas are all it sees.

Windows (``--window T``): a shard may hand a slot whose edge died (nothing of it
left in the window) to a different ``(src, dst, type)``, so a slot's endpoints
are not fixed. :meth:`GlobalGraph.apply_epochs` therefore answers per *edge*,
not per slot: a reused slot becomes two rows (the old edge going to nothing,
the new one coming from nothing), and an edge that moved slots within the
batch is one row. Everything downstream (degrees, the ranked adjacency, the
applications, the API's graph view) may then assume that a row's before and
after name the same edge. In window mode the graph also keeps which vertices
are in the snapshot (a live edge, or attributes written inside the window),
from the vertices each merge touched, never from a scan.
With a window, an id that no shard has held for ``reuse_after`` seconds of event
time (the watermark the deltas carry) is given back and reused (see
:mod:`pulsegraph.compute.ids`); the merge keeps which shards hold each.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from pulsegraph.base.arrays import add_at, unique
from pulsegraph.compute.changes import EdgeChanges, by_edge
from pulsegraph.compute.ids import NameChanges, NameIndex, VertexIds
from pulsegraph.compute.slots import COLUMNS, EdgeSlots, ShardSlots, SlotStore, SlotWrites
from pulsegraph.snapshots.attrs import attr_columns
from pulsegraph.snapshots.delta import EpochDelta, weight_of
from pulsegraph.snapshots.growable import Column

# Where graphs pickled by earlier versions (a clean stop's checkpoint) name their shards' columns.
_ShardEdges = ShardSlots


class GlobalGraph:
    # The vertices whose attributes the last merge wrote (a class default: a graph pickled before it had none).
    attr_written: np.ndarray = np.zeros(0, dtype=np.int64)

    def __init__(self, windowed: bool = False, reuse_after: float | None = None) -> None:
        self.ids = VertexIds(reuse_after)
        self.types: list[str] = []
        self._type_index: dict[str, int] = {}
        # Per shard, the global id of each of its local ids (-1: none); each slot's edge is in ``slots``.
        self._l2g: dict[int, Column] = {}
        self.slots: SlotStore = EdgeSlots()
        # Kept up to date by every merge (see _count), so an epoch never scans the whole graph for them.
        self._live_count = 0
        self._attr_touched: list[np.ndarray] = []  # written by the merge under way
        self._out = Column(np.int32)
        self._in = Column(np.int32)
        # Presence (window mode only; outside it every vertex touched so far is in the snapshot).
        self.windowed = windowed
        # Of the attributes, which vertices have any and their last_seen (what the deltas carry): the
        # attributes themselves are the shards' (~70 bytes a vertex kept here once).
        self._has_attrs = Column(np.bool_)
        self._last_seen = Column(np.float64)
        self._present = Column(np.bool_)  # in the snapshot: a live edge, or non-null attributes
        self._present_count = 0
        # Vertices below the previous merge's vertex count whose presence flipped in the last merge
        # (the rankings shift their right-hand side there; newer vertices they take from the mask).
        self.flips = np.zeros(0, dtype=np.int64)
        self._switched = self.flips  # flips of a switch to window mode, not yet reported by a merge

    @property
    def names(self) -> list[str]:
        """Vertex names by global id ("" for an id given back and not reused yet), decoded: a new list each time
        (the stage itself reads them through :attr:`index` and :meth:`name_changes`)."""
        return self.ids.names

    @property
    def index(self) -> NameIndex:
        """Global id by vertex name."""
        return self.ids.index

    @property
    def reuse_after(self) -> float | None:
        return self.ids.reuse_after

    @property
    def n(self) -> int:
        return len(self.ids)

    def set_windowed(self, windowed: bool) -> None:
        """Switch presence on or off; switching on recomputes the mask once from the degrees and
        attributes (``flips`` then names every known vertex that is absent)."""
        if windowed == self.windowed:
            return
        self.windowed = windowed
        self._present = Column(np.bool_)
        self._present_count = 0
        self.flips = np.zeros(0, dtype=np.int64)
        if windowed:
            self._sync_columns()
            out, inn = self.degrees()
            present = (out > 0) | (inn > 0) | self._has_attrs.view[: self.n]
            self._present.extend(present)
            self._present_count = int(np.count_nonzero(present))
            # Until now every vertex counted as present: the absent ones flip (reported with the next merge too).
            self.flips = self._switched = np.flatnonzero(~present).astype(np.int64)

    @property
    def reusing(self) -> bool:
        """Are ids given back and reused (window mode with ``reuse_after``)."""
        return self.windowed and self.reuse_after is not None

    @property
    def present_count(self) -> int:
        """Vertices in the snapshot: in window mode those with a live edge or attributes, else all."""
        return self._present_count if self.windowed else self.n

    def present(self) -> np.ndarray | None:
        """Per vertex, is it in the snapshot (a read-only view); None outside window mode (all are)."""
        if not self.windowed:
            return None
        v = self._present.view[: self.n]
        v.flags.writeable = False
        return v

    def ids_state(self) -> dict:
        """What fixes the global ids (see :meth:`VertexIds.state`) and the edge types in id order."""
        return {**self.ids.state(), "types": list(self.types)}

    @classmethod
    def restore_ids(cls, state: dict, reuse_after: float | None = None) -> "GlobalGraph":
        """An empty graph that gives the checkpointed names and types their old ids again; the shards'
        first deltas after a restore then fill it. Ids that consumers (the API) already hold stay valid."""
        g = cls()
        g.ids = VertexIds.restore(state, reuse_after)
        g.types = list(state["types"])
        g._type_index = {t: i for i, t in enumerate(g.types)}
        return g

    def name_changes(self, after: int, known: int) -> NameChanges:
        """See :meth:`VertexIds.name_changes`."""
        return self.ids.name_changes(after, known)

    def forget_renames(self, upto: int) -> None:
        self.ids.forget_renames(upto)

    def apply(self, delta: EpochDelta) -> EdgeChanges:
        """Merge one shard's delta; returns its edge changes in global ids."""
        return self.apply_with_previous(delta)[0]

    def apply_with_previous(self, delta: EpochDelta) -> tuple[EdgeChanges, EdgeChanges]:
        """Merge one shard's delta; returns its edge changes and, row for row, the state those
        edges had before (zeros for new edges), so a consumer can apply the difference."""
        return self.apply_epochs([[delta]])

    def apply_epochs(self, epochs: list[list[EpochDelta]]) -> tuple[EdgeChanges, EdgeChanges]:
        """Merge the deltas of one or more consecutive epochs, oldest first. Returns the edges they
        changed, each once, with its state after the last of them and, row for row, its state
        before the first (zeros for new edges): what the epochs did together. Rows are edges, not
        slots (see :func:`~pulsegraph.compute.changes.by_edge`): a row's before and after always name the same edge."""
        writes: list[list[SlotWrites]] = []
        # Epoch by epoch, the vertices new in an epoch in name order: global ids are a pure function of
        # the epoch vectors, the same however the epochs were batched, however many shards cut them and
        # in every generation of the pipeline (the API keeps them across relaunches and restarts).
        for deltas in epochs:
            epoch = max((d.epoch for d in deltas), default=0)
            if self.reusing:
                self._give_back(epoch, max((d.watermark for d in deltas if d.watermark is not None), default=None))
            # Every name the epoch's deltas introduce has its id before any delta is merged.
            gids = self.ids.ids_of([n for d in deltas for n in d.new_names], epoch)
            at = np.cumsum([0] + [len(d.new_names) for d in deltas]).tolist()
            order = sorted(range(len(deltas)), key=lambda k: deltas[k].shard)
            writes.append([self._merge(deltas[k], epoch, gids[at[k] : at[k + 1]]) for k in order])
            if deltas and all(d.full for d in deltas):
                self.ids.restored_holders(epoch)
        merged = self.slots.merge(writes)
        order = sorted(merged)
        after = EdgeChanges.concat([merged[sh][0] for sh in order])
        was = EdgeChanges.concat([merged[sh][1] for sh in order])
        after, was = by_edge(after, was, moved=self.windowed)
        touched = self._count(was, after)
        self._update_presence(touched)
        return after, was

    def _give_back(self, epoch: int, watermark: float | None) -> None:
        """Give back the ids whose wait is over (:meth:`VertexIds.give_back`), with their attributes. Held
        by no shard means no edge and no attributes; the attributes (written epoch by epoch) check once
        more, not the degrees: a merge counts them after its last epoch, so the ids would depend on the batching."""
        self._sync_columns()
        with_attrs = self._has_attrs.view
        self._last_seen.view[self.ids.give_back(epoch, watermark, lambda ids: with_attrs[ids])] = 0.0

    def _merge(self, delta: EpochDelta, epoch: int, gids: np.ndarray) -> SlotWrites:
        """Apply one shard's delta to the vertices (``gids``: the global id of each of its new names); returns
        what its slots take, endpoints and types in global ids."""
        l2g = self._l2g.setdefault(delta.shard, Column(np.int64))
        if delta.full:
            # The shard names its whole state anew: the mappings it had end here (and its slots' edges: SlotWrites.full).
            mapped = l2g.view
            self.ids.hold(mapped[mapped >= 0], -1, epoch)
            l2g = self._l2g[delta.shard] = Column(np.int64)
        if len(delta.new_ids):
            need = int(delta.new_ids.max()) + 1 - len(l2g)
            if need > 0:
                l2g.extend(np.full(need, -1, dtype=np.int64))
            old = l2g.view[delta.new_ids]
            self.ids.hold(old[old >= 0], -1, epoch)  # a local id introduced again (normally the same vertex)
            l2g.view[delta.new_ids] = gids
            self.ids.hold(gids, 1, epoch)
        if len(delta.attr_ids):
            # Tens of thousands a delta where every tweet rewrites its author: in bulk, not one by one.
            self._sync_columns()
            attr_gids = l2g.view[delta.attr_ids]
            self._has_attrs.view[attr_gids] = delta.attr_set
            self._last_seen.view[attr_gids] = delta.attr_seen
            self._attr_touched.append(attr_gids)
        # Types interned only where edges come (the order of first use fixes their ids, as it always did).
        tmap = np.array([self._type_id(t) for t in delta.types] if len(delta.e_slot) else [], dtype=np.int16)
        # Endpoints through the ids as they are now: after the delta's new ids, before its releases.
        edges = EdgeChanges(
            l2g.view[delta.e_src].astype(np.int32), l2g.view[delta.e_dst].astype(np.int32), tmap[delta.e_type],
            delta.e_mult, delta.e_weight, delta.e_first_ts if len(delta.e_first_ts) == len(delta.e_slot) else None,
        )
        out = SlotWrites(delta.shard, delta.e_slot, edges, delta.full)
        if len(delta.released):
            # After the edges: the delta's last rows of the released ids' edges still name them.
            mapped = l2g.view[delta.released]
            l2g.view[delta.released] = -1
            self.ids.hold(mapped[mapped >= 0], -1, epoch)
        return out

    def _sync_columns(self) -> None:
        """Per-vertex columns as long as the vertex ids (new vertices: no degree, no attributes)."""
        n = self.n
        for col in (self._out, self._in, self._has_attrs, self._last_seen):
            if len(col) < n:
                col.extend(np.zeros(n - len(col), dtype=col.view.dtype))

    def _count(self, before: EdgeChanges, after: EdgeChanges) -> np.ndarray:
        """Keep the live edge count and the degrees from what changed, not from a scan of the graph;
        returns the vertices whose degree moved. Retractions go by the edge's ends *before* and
        additions by its ends *after*, so this holds even for rows of a reused slot."""
        was, now = before.mult > 0, after.mult > 0
        self._live_count += int(np.count_nonzero(now)) - int(np.count_nonzero(was))
        same = (before.src == after.src) & (before.dst == after.dst)
        gone, came = was & ~(now & same), now & ~(was & same)
        self._sync_columns()
        for deg, b_end, a_end in ((self._out, before.src, after.src), (self._in, before.dst, after.dst)):
            add_at(deg.view, b_end[gone], -1)
            add_at(deg.view, a_end[came], 1)
        return np.concatenate([before.src[gone], before.dst[gone], after.src[came], after.dst[came]]).astype(np.int64)

    def _update_presence(self, touched: np.ndarray) -> None:
        """Presence of the vertices a merge touched (their degrees moved, their attributes were written)
        and of the vertices new since the last merge; ``flips`` names the older ones that changed."""
        attr_touched = np.concatenate(self._attr_touched).astype(np.int64) if self._attr_touched else np.zeros(0, np.int64)
        self._attr_touched, self.attr_written = [], attr_touched
        if not self.windowed:
            return
        self._sync_columns()
        old = len(self._present)
        if old < self.n:
            self._present.extend(np.zeros(self.n - old, dtype=bool))
        ids = unique(np.concatenate([touched, attr_touched, np.arange(old, self.n, dtype=np.int64)]))
        now = (self._out.view[ids] > 0) | (self._in.view[ids] > 0) | self._has_attrs.view[ids]
        prev = self._present.view[ids]
        self._present_count += int(np.count_nonzero(now)) - int(np.count_nonzero(prev))
        flipped = (now != prev) & (ids < old)
        self._present.view[ids] = now
        self.flips = np.union1d(self._switched, ids[flipped]) if len(self._switched) else ids[flipped]
        self._switched = np.zeros(0, dtype=np.int64)

    def type_mask(self, types: tuple[str, ...] | None) -> np.ndarray:
        """Boolean per type id: is it among ``types`` (None: every type)."""
        if types is None:
            return np.ones(len(self.types), dtype=bool)
        return np.array([t in types for t in self.types], dtype=bool)

    def _type_id(self, name: str) -> int:
        t = self._type_index.get(name)
        if t is None:
            t = self._type_index[name] = len(self.types)
            self.types.append(name)
        return t

    def type_id(self, name: str) -> int | None:
        """The id of edge type ``name`` in :attr:`types` and in every ``etype`` column, None if never seen."""
        return self._type_index.get(name)

    def _live_columns(self, names: tuple[str, ...], types: np.ndarray | None) -> tuple[np.ndarray, ...]:
        """The columns ``names`` of the live edges of type ids ``types`` (None: all), in shard order."""
        parts = self.slots.columns(names, types)
        cols = [parts[sh] for sh in sorted(parts)]
        return tuple(np.concatenate(c) for c in zip(*cols)) if cols else ()

    def live_of_type(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(src, dst, multiplicity, first add time) of the live edges of type ``name`` (empty if none)."""
        t = self._type_index.get(name)
        cols = self._live_columns(("src", "dst", "mult", "first_ts"), np.array([t], dtype=np.int16)) if t is not None else ()
        if not cols:
            z = np.zeros(0, np.int64)
            return z, z, z, np.zeros(0, np.float64)
        src, dst, mult, first = cols
        return src, dst, mult, first

    def live(self, types: tuple[str, ...] | None = None):
        """(src, dst, weight) of edges with multiplicity > 0, of ``types`` (None: all)."""
        wanted = None
        if types is not None:
            wanted = np.array([self._type_index[t] for t in types if t in self._type_index], dtype=np.int16)
        cols = self._live_columns(("src", "dst", "weight"), wanted)
        if not cols:
            z = np.zeros(0, dtype=np.int32)
            return z, z, np.zeros(0, dtype=np.int64)
        src, dst, w = cols
        return src, dst, w

    def weight_differences(
        self, changes: EdgeChanges, before: EdgeChanges, types: tuple[str, ...] | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(src, dst, dw)``: what the epoch did to :meth:`adjacency` in fixed-point units, pair by pair
        (repeats to be summed). An edge counts ``max(weight, 0)`` while its multiplicity is above 0."""
        mask = self.type_mask(types)

        def contribution(c: EdgeChanges) -> np.ndarray:
            ranked = mask[c.etype] if len(c) else np.zeros(0, dtype=bool)
            return np.where(ranked & (c.mult > 0), np.maximum(c.weight, 0), 0).astype(np.int64)

        src = np.concatenate([before.src, changes.src]).astype(np.int64)
        dst = np.concatenate([before.dst, changes.dst]).astype(np.int64)
        dw = np.concatenate([-contribution(before), contribution(changes)])
        keep = dw != 0
        return src[keep], dst[keep], dw[keep]

    def adjacency(self, types: tuple[str, ...] | None = None) -> sp.csr_matrix:
        """n x n CSR, ``A[s, d]`` = summed weight of live (s, d, t) edges over ``types``; negative sums count as 0."""
        src, dst, w = self.live(types)
        weights = np.maximum(weight_of(w), 0.0)
        return sp.csr_matrix((weights, (src, dst)), shape=(self.n, self.n))

    def degrees(self) -> tuple[np.ndarray, np.ndarray]:
        """Live (src, dst, type) edges out of and into each vertex, over all types (copies)."""
        n = self.n
        out = np.zeros(n, dtype=np.int32)
        inn = np.zeros(n, dtype=np.int32)
        out[: len(self._out)] = self._out.view
        inn[: len(self._in)] = self._in.view
        return out, inn

    def last_seen(self, ids: np.ndarray) -> np.ndarray:
        """The ``last_seen`` attribute of each of ``ids`` as the shards sent it (0 where none)."""
        self._sync_columns()
        return self._last_seen.view[ids].copy()

    def __setstate__(self, state: dict) -> None:
        """A graph pickled whole before the attributes stayed on the shards kept an ``AttrTable``: its
        ``last_seen`` values become the column (a clean stop's checkpoint of the version before goes on)."""
        table = state.pop("attrs", None)
        shards = state.pop("_shards", None)
        self.__dict__.update(state)
        if shards is not None:  # before the slots were a store of their own: the shards' columns carried the ids
            self._l2g = {sh: se.__dict__.pop("local_to_global") for sh, se in shards.items()}
            self.slots = EdgeSlots()
            self.slots.adopt(shards)
        if table is not None:
            self._last_seen = Column(np.float64)
            self._sync_columns()
            ids = np.array(table.ids(), dtype=np.int64)
            if len(ids):
                self._last_seen.view[ids] = attr_columns([table.raw(int(i)) for i in ids])[1]

    def live_edges(self) -> int:
        return self._live_count

    def whole_changes(self) -> EdgeChanges:
        """Every live edge as it is now, one row each (a shard keeps one live slot per edge, and an edge is
        its source's shard's), in shard order: the changes of an epoch published whole, for a consumer that
        cannot take the next epoch's changes over what it holds (after a restore of a stage written whole)."""
        cols = self._live_columns(COLUMNS, None)
        return EdgeChanges(*cols) if cols else EdgeChanges.empty()

    def snapshot(self) -> dict:
        """The whole graph by name, in the same form as a shard's snapshot. Where slots were reused an
        edge may sit in a dead slot and a live one; the live one is the edge. In window mode, as on the
        shards, a slot with nothing left in the window (multiplicity and weight 0, no add time) holds
        no edge, and the vertices are those in the snapshot, each with ``None`` for attributes: those are
        the shards' alone."""
        edges: dict[tuple[str, str, str], tuple[int, int]] = {}
        first: dict[tuple[str, str, str], float] = {}
        names = self.names
        for cols in self.slots.columns(COLUMNS, live=False).values():
            for s, d, t, m, w, f in zip(*cols):
                key = (names[s], names[d], self.types[t])
                if m <= 0 and edges.get(key, (0, 0))[0] > 0:
                    continue
                if self.windowed and m == 0 and w == 0 and f == np.inf:
                    continue  # a released slot
                edges[key], first[key] = (int(m), int(w)), float(f)
        present = self.present()
        vertices = {name: None for i, name in enumerate(names) if present is None or present[i]}
        return {"vertices": vertices, "edges": edges, "first_ts": first}

