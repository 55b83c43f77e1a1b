"""The compute stage's whole-graph view, merged from the shards' epoch deltas.

Owns the global vertex ids (dense, append-only; epoch by epoch, the vertices an
epoch adds in name order, so independent of the shard count and the batching)
and one column set per shard indexed by the shard's edge slot, so a delta is
applied with a few scatter writes and no search. It builds the CSR matrices the
algorithms run on. It must not reach back into shards: deltas are all it sees.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from snapshots.attrs import AttrTable, encode
from snapshots.delta import EpochDelta, weight_of
from snapshots.growable import Column


@dataclass
class EdgeChanges:
    """Edges whose state changed in an epoch, in global vertex ids and global type ids, with their new
    absolute multiplicity and fixed-point weight sum. An edge is (src, dst, type): it lives on one shard.
    ``first_ts`` (the earliest add time, for the applications) is None where the changes were made
    without it; the compute stage leaves it out of the results it publishes."""

    src: np.ndarray
    dst: np.ndarray
    etype: np.ndarray
    mult: np.ndarray
    weight: np.ndarray
    first_ts: np.ndarray | None = None

    @classmethod
    def empty(cls) -> "EdgeChanges":
        z = np.zeros(0, dtype=np.int32)
        return cls(z, z, np.zeros(0, np.int16), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64))

    @classmethod
    def concat(cls, parts: list["EdgeChanges"]) -> "EdgeChanges":
        if not parts:
            return cls.empty()
        src, dst, etype, mult, weight = (np.concatenate(c) for c in zip(*((p.src, p.dst, p.etype, p.mult, p.weight) for p in parts)))
        firsts = [p.first_ts for p in parts if p.first_ts is not None]
        first = np.concatenate(firsts) if len(firsts) == len(parts) else None
        return cls(src, dst, etype, mult, weight, first)

    def __len__(self) -> int:
        return len(self.src)


class _ShardEdges:
    def __init__(self) -> None:
        self.local_to_global = Column(np.int64)
        self.src = Column(np.int32)
        self.dst = Column(np.int32)
        self.etype = Column(np.int16)
        self.mult = Column(np.int64)
        self.weight = Column(np.int64)
        self.first_ts = Column(np.float64)  # earliest add time of the edge (+inf: none)

    def grow(self, slots: int) -> None:
        extra = slots - len(self.src)
        if extra > 0:
            for c in (self.src, self.dst, self.etype, self.mult, self.weight):
                c.extend(np.zeros(extra, dtype=c.view.dtype))
            self.first_ts.extend(np.full(extra, np.inf))

    def state(self, slots: np.ndarray) -> "EdgeChanges":
        """The edges in ``slots`` as they are now (copies)."""
        return EdgeChanges(
            self.src.view[slots], self.dst.view[slots], self.etype.view[slots],
            self.mult.view[slots], self.weight.view[slots], self.first_ts.view[slots],
        )


class GlobalGraph:
    def __init__(self) -> None:
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.attrs = AttrTable()  # encoded, as the shards send them
        self.types: list[str] = []
        self._type_index: dict[str, int] = {}
        self._shards: dict[int, _ShardEdges] = {}
        # Kept up to date by every merge (see _count), so an epoch never scans the whole graph for them.
        self._live_count = 0
        self._out = Column(np.int32)
        self._in = Column(np.int32)

    @property
    def n(self) -> int:
        return len(self.names)

    def ids_state(self) -> dict:
        """What fixes the global ids: vertex names and edge types in id order (see :meth:`restore_ids`)."""
        return {"names": list(self.names), "types": list(self.types)}

    @classmethod
    def restore_ids(cls, state: dict) -> "GlobalGraph":
        """An empty graph that gives the checkpointed names and types their old ids again; the shards'
        first deltas after a restore then fill it. Ids that consumers (the API) already hold stay valid."""
        g = cls()
        g.names = list(state["names"])
        g.index = {name: i for i, name in enumerate(g.names)}
        g.types = list(state["types"])
        g._type_index = {t: i for i, t in enumerate(g.types)}
        return g

    def apply(self, delta: EpochDelta) -> EdgeChanges:
        """Merge one shard's delta; returns its edge changes in global ids."""
        return self.apply_with_previous(delta)[0]

    def apply_with_previous(self, delta: EpochDelta) -> tuple[EdgeChanges, EdgeChanges]:
        """Merge one shard's delta; returns its edge changes and, slot for slot, the state those
        edges had before (zeros for new slots), so a consumer can apply the difference."""
        return self.apply_epochs([[delta]])

    def apply_epochs(self, epochs: list[list[EpochDelta]]) -> tuple[EdgeChanges, EdgeChanges]:
        """Merge the deltas of one or more consecutive epochs, oldest first. Returns the edges they
        changed, each once, with its state after the last of them and, slot for slot, its state
        before the first (zeros for new slots): what the epochs did together."""
        by_shard: dict[int, list[np.ndarray]] = {}
        for deltas in epochs:
            for d in deltas:
                if len(d.e_slot):
                    by_shard.setdefault(d.shard, []).append(d.e_slot)
        slots = {sh: (s[0] if len(s) == 1 else np.unique(np.concatenate(s))) for sh, s in by_shard.items()}
        before = {}
        for sh, sl in slots.items():
            se = self._shards.setdefault(sh, _ShardEdges())
            se.grow(int(sl.max()) + 1)
            before[sh] = se.state(sl)
        # Epoch by epoch, the vertices new in an epoch in name order: global ids are a pure function of
        # the epoch vectors, the same however the epochs were batched, however many shards cut them and
        # in every generation of the pipeline (the API keeps them across relaunches and restarts).
        for deltas in epochs:
            index = self.index
            for name in sorted({n for d in deltas for n in d.new_names if n not in index}):
                index[name] = len(self.names)
                self.names.append(name)
            for d in sorted(deltas, key=lambda d: d.shard):
                self._merge(self._shards.setdefault(d.shard, _ShardEdges()), d)
        changes = []
        for sh in sorted(slots):
            after = self._shards[sh].state(slots[sh])
            self._count(before[sh], after)
            changes.append(after)
        return EdgeChanges.concat(changes), EdgeChanges.concat([before[sh] for sh in sorted(slots)])

    def _merge(self, se: "_ShardEdges", delta: EpochDelta) -> None:
        if len(delta.new_ids):
            ids = se.local_to_global
            need = int(delta.new_ids.max()) + 1 - len(ids)
            if need > 0:
                ids.extend(np.full(need, -1, dtype=np.int64))
            gids = np.empty(len(delta.new_ids), dtype=np.int64)
            for i, name in enumerate(delta.new_names):
                g = self.index.get(name)
                if g is None:
                    g = self.index[name] = len(self.names)
                    self.names.append(name)
                gids[i] = g
            ids.view[delta.new_ids] = gids
        for lid, attrs in zip(delta.attr_ids.tolist(), delta.attrs):
            self.attrs.put(int(se.local_to_global.view[lid]), attrs if isinstance(attrs, bytes) else encode(attrs))
        if len(delta.e_slot):
            tmap = np.array([self._type_id(t) for t in delta.types], dtype=np.int16)
            se.grow(int(delta.e_slot.max()) + 1)
            l2g = se.local_to_global.view
            s = delta.e_slot
            se.src.view[s] = l2g[delta.e_src]
            se.dst.view[s] = l2g[delta.e_dst]
            se.etype.view[s] = tmap[delta.e_type]
            se.mult.view[s] = delta.e_mult
            se.weight.view[s] = delta.e_weight
            if len(delta.e_first_ts) == len(s):
                se.first_ts.view[s] = delta.e_first_ts

    def _count(self, before: EdgeChanges, after: EdgeChanges) -> None:
        """Keep the live edge count and the degrees from what changed, not from a scan of the graph."""
        was, now = before.mult > 0, after.mult > 0
        self._live_count += int(np.count_nonzero(now)) - int(np.count_nonzero(was))
        step = now.astype(np.int32) - was.astype(np.int32)
        moved = step != 0
        for deg, ends in ((self._out, after.src), (self._in, after.dst)):
            if len(deg) < self.n:
                deg.extend(np.zeros(self.n - len(deg), dtype=np.int32))
            np.add.at(deg.view, ends[moved], step[moved])

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

    def _live(self, types: tuple[str, ...] | None = None):
        """(src, dst, weight) of edges with multiplicity > 0, of ``types`` (None: all)."""
        wanted = None
        if types is not None:
            wanted = np.array([self._type_index[t] for t in types if t in self._type_index], dtype=np.int16)
        parts = []
        for se in self._shards.values():
            keep = se.mult.view > 0
            if wanted is not None:
                keep &= np.isin(se.etype.view, wanted)
            parts.append((se.src.view[keep], se.dst.view[keep], se.weight.view[keep]))
        if not parts:
            z = np.zeros(0, dtype=np.int32)
            return z, z, np.zeros(0, dtype=np.int64)
        src, dst, w = (np.concatenate(c) for c in zip(*parts))
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
        src, dst, w = self._live(types)
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

    def live_edges(self) -> int:
        return self._live_count

    def snapshot(self) -> dict:
        """The whole graph by name, in the same form as a shard's snapshot."""
        edges, first = {}, {}
        for se in self._shards.values():
            cols = (se.src.view, se.dst.view, se.etype.view, se.mult.view, se.weight.view, se.first_ts.view)
            for s, d, t, m, w, f in zip(*cols):
                key = (self.names[s], self.names[d], self.types[t])
                edges[key], first[key] = (int(m), int(w)), float(f)
        vertices = {name: self.attrs.get(i) for i, name in enumerate(self.names)}
        return {"vertices": vertices, "edges": edges, "first_ts": first}
