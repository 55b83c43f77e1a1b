"""The shard's graph store: a commutative edge table and last-writer-wins vertices, in NumPy columns.

Owns the state of one shard and the buffer of transactions not yet covered by
an epoch. It must not know about Ray, sources or the coordinator: the actor in
:mod:`pulsegraph.snapshots.shard` wraps it.

Why the state is a pure function of the epoch vector:
* an edge (src, dst, type) carries a signed multiplicity and a fixed-point
  weight sum; ``add_edge`` adds, ``remove_edge`` subtracts, so any order of the
  same updates gives the same integers;
* vertex attributes are last-writer-wins by (ts, partition, offset, index in
  the transaction), a total order that does not depend on arrival order;
* a vertex exists once an applied update touched it;
* a transaction (partition, offset) is buffered at most once and applied once,
  when the first epoch with ``offset < V[partition]`` comes.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from pulsegraph.base.arrays import unique
from pulsegraph.base.edgekey import MAX_TYPES, MAX_VERTICES
from pulsegraph.ingest.batch import ShardBatch
from pulsegraph.snapshots.attrs import NULL, AttrTable, Stamps, attr_columns, decode, encode, encoded
from pulsegraph.snapshots.checkpoint import dumps, loads
from pulsegraph.snapshots.delta import EpochDelta, ShardSummary
from pulsegraph.snapshots.edges import EdgeTable
from pulsegraph.snapshots.exceptions import EpochOrderError
from pulsegraph.snapshots.growable import Column
from pulsegraph.snapshots.interner import Interner
from pulsegraph.snapshots.window import TimeLog, drop_late


class _PartitionBuffer:
    """Transactions of one partition received but not yet covered by an epoch, as column chunks."""

    def __init__(self) -> None:
        self.edges: list[tuple[np.ndarray, ...]] = []  # (off, src, dst, type, sign, weight, ts)
        self.vertices: list[tuple[np.ndarray, ...]] = []  # (off, vid, ts, seq, encoded attrs as an object array)
        self.offsets = np.zeros(0, dtype=np.int64)  # sorted offsets of buffered transactions

    def size(self) -> int:
        return len(self.offsets)


def _take_below(chunks: list[tuple[np.ndarray, ...]], high: int) -> tuple[list[np.ndarray] | None, list]:
    """Split column chunks (offsets first) into the rows with ``offset < high`` and the rest."""
    if not chunks:
        return None, []
    cols = [np.concatenate(c) for c in zip(*chunks)] if len(chunks) > 1 else list(chunks[0])
    take = cols[0] < high
    if take.all():
        return cols, []
    rest = [c[~take] for c in cols]
    return [c[take] for c in cols], [tuple(rest)] if len(rest[0]) else []


# With a window, every this many epochs a shard gives back the local ids of the vertices the window
# emptied (a pass over the held edge slots: ~10 ms at a million slots, so not every epoch).
RECYCLE_EVERY = 16


class ShardStore:
    def __init__(self, shard: int, window: float | None = None, recycle_every: int = RECYCLE_EVERY) -> None:
        self.shard = shard
        self.recycle_every = recycle_every
        self.recycled = 0  # local ids given back so far
        # With a window (seconds), what each edge and vertex holds comes only from the transactions
        # whose event time is inside (watermark - window, watermark]; see pulsegraph.snapshots.window.
        self.window = window
        self._contrib = TimeLog(window) if window else None  # edge contributions: key = slot
        self._writes = TimeLog(window) if window else None  # attribute writes: key = vertex id
        self._rows = Column(np.int32)  # per slot: its contributions inside the window
        self._adds = Column(np.int32)  # per slot: the adds among them
        self.late = 0  # transactions applied after their time had left the window (never entered)
        self.vertices = Interner(MAX_VERTICES, "vertices")
        self.types = Interner(MAX_TYPES, "edge types")
        self.exists = Column(np.bool_)
        self.attrs = AttrTable()
        self._stamps = Stamps()
        self.edges = EdgeTable()
        self.applied: dict[str, int] = {}
        self.epoch = 0
        self.transactions = 0
        self._buffers: dict[str, _PartitionBuffer] = {}
        self._resend_all = False  # after a restore: the next delta is the whole shard

    # -- receiving ----------------------------------------------------------
    def receive(self, batch: ShardBatch) -> int:
        """Buffer a batch; transactions already applied or already buffered are dropped. Returns how many were kept."""
        ids = self._intern(batch.names)
        types = self.types.ids(batch.types).astype(np.int16)
        e_part = np.asarray(batch.e_part, dtype=np.int32)
        e_off = np.asarray(batch.e_off, dtype=np.int64)
        v_part = np.asarray(batch.v_part, dtype=np.int32)
        v_off = np.asarray(batch.v_off, dtype=np.int64)
        e_src = ids[batch.e_src]
        e_dst = ids[batch.e_dst]
        e_type = types[batch.e_type]
        v_id = ids[batch.v_id]
        e_sign = np.asarray(batch.e_sign, dtype=np.int8)
        e_w = np.asarray(batch.e_weight, dtype=np.int64)
        e_ts = np.asarray(batch.e_ts, dtype=np.float64)
        v_ts = np.asarray(batch.v_ts, dtype=np.float64)
        v_attrs = np.empty(len(batch.v_attrs), dtype=object)
        v_attrs[:] = batch.v_attrs
        kept = 0
        for pi, name in enumerate(batch.partitions):
            buf = self._buffers.setdefault(name, _PartitionBuffer())
            em, vm = e_part == pi, v_part == pi
            offs = unique(np.concatenate([e_off[em], v_off[vm]]))
            fresh = offs[offs >= self.applied.get(name, 0)]
            if len(buf.offsets) and len(fresh) and fresh[0] <= buf.offsets[-1]:
                fresh = fresh[~np.isin(fresh, buf.offsets)]
            if len(fresh) == 0:
                continue
            if len(fresh) < len(offs):
                em &= np.isin(e_off, fresh)
                vm &= np.isin(v_off, fresh)
            if em.any():
                buf.edges.append((e_off[em], e_src[em], e_dst[em], e_type[em], e_sign[em], e_w[em], e_ts[em]))
            if vm.any():
                voff = v_off[vm]
                buf.vertices.append((voff, v_id[vm], v_ts[vm], _run_index(voff), v_attrs[vm]))
            # ``fresh`` is sorted, distinct and holds no buffered offset (above), so the union is a
            # concatenation, sorted only when a partition's offsets came out of order. (np.union1d
            # hashed every buffered offset again on each batch: a seventh of a shard's time.)
            out_of_order = len(buf.offsets) and fresh[0] < buf.offsets[-1]
            buf.offsets = np.concatenate([buf.offsets, fresh])
            if out_of_order:
                buf.offsets.sort()
            kept += len(fresh)
        return kept

    def _intern(self, names: list[str]) -> np.ndarray:
        ids = self.vertices.ids(names)
        if len(self.vertices.names) > len(self.exists):
            self.exists.extend(np.zeros(len(self.vertices.names) - len(self.exists), dtype=np.bool_))
        return ids

    # -- applying -----------------------------------------------------------
    def apply(self, epoch: int, vector: dict[str, int], watermark: float | None = None) -> tuple[ShardSummary, EpochDelta]:
        """Apply every buffered transaction with ``offset < vector[partition]``; return what changed.

        With a window, ``watermark`` is the epoch's W_e: transactions at or below ``W_e - window``
        do not enter (late), and contributions that fell to or below it leave."""
        self._check_order(epoch, vector)
        edge_parts, vertex_parts, txs = self._take(vector)
        bound = None
        late: dict[str, np.ndarray] = {}
        expired = np.zeros(0, dtype=np.int64)
        if self.window:
            if watermark is None:
                raise EpochOrderError(f"shard {self.shard}: epoch {epoch} has no watermark, and the shard has a window")
            bound = float(watermark) - self.window
            edge_parts, vertex_parts, late = drop_late(edge_parts, vertex_parts, bound)
            self.late += sum(len(o) for o in late.values())
            expired = self._expire_edges(bound)
        if edge_parts:
            off, src, dst, typ, sign, w, ts = (np.concatenate(c) for c in zip(*(cols for _, cols in edge_parts)))
            dw = w * sign
            touched, slots = self.edges.apply(src, dst, typ, sign.astype(np.int64), dw, ts, rows=True)
            if self._contrib is not None:
                self._count_rows(slots, sign)
                self._contrib.add(ts, slots, sign, dw)
        else:
            src = dst = np.zeros(0, dtype=np.int32)
            touched = np.zeros(0, dtype=np.int64)
        if len(expired):
            touched = unique(np.concatenate([touched, expired]))

        winners, partition_names, n_vertex_rows = _last_writers(vertex_parts)
        vids = np.concatenate([t[1] for _, t in vertex_parts]) if vertex_parts else np.zeros(0, dtype=np.int32)
        touched_v = unique(np.concatenate([src, dst, vids]))
        newly = touched_v[~self.exists.view[touched_v]]
        self.exists.view[newly] = True
        full = self._resend_all
        if full:
            self._resend_all = False
            newly = np.flatnonzero(self.exists.view)
            touched = self.edges.held()  # a released slot's ids may have been given back since
        changed_all = set(self.attrs.ids()) if full else set()
        changed = changed_all | self._write_attrs(winners, partition_names, bound)
        for name, high in vector.items():
            self.applied[name] = max(high, self.applied.get(name, 0))
        self.epoch = epoch
        self.transactions += txs
        e = self.edges
        attr_ids = np.array(sorted(changed), dtype=np.int32)
        # Downstream ids are a pure function of the epochs: new vertices in name order, and only
        # the edge types applied so far, in name order (interning order depends on arrival).
        new_names = cast(list[str], self.vertices.names.take(newly))  # every id an applied update names is in use
        # Python's sort of the strs: NumPy's of an object array took 4x as long (a tenth of apply).
        order = sorted(range(len(new_names)), key=new_names.__getitem__)
        newly, new_names = newly[order], [new_names[k] for k in order]
        types = cast(list[str], self.types.names.tolist())  # edge types are never given back
        used = e.types_seen()
        used = used[np.argsort(np.array([types[t] for t in used], dtype=object), kind="stable")]
        type_map = np.zeros(len(types), dtype=np.int16)
        type_map[used] = np.arange(len(used), dtype=np.int16)
        attr_set, attr_seen = attr_columns([self.attrs.raw(i) or NULL for i in attr_ids.tolist()])
        delta = EpochDelta(
            shard=self.shard,
            epoch=epoch,
            types=[types[t] for t in used],
            new_ids=newly.astype(np.int32),
            new_names=new_names,
            attr_ids=attr_ids,
            attr_set=attr_set,
            attr_seen=attr_seen,
            e_slot=touched,
            e_src=e.src.view[touched].copy(),
            e_dst=e.dst.view[touched].copy(),
            e_type=type_map[e.etype.view[touched]],
            e_mult=e.mult.view[touched].astype(np.int64),
            e_weight=e.weight.view[touched].copy(),
            e_first_ts=e.first_ts.view[touched].copy(),
            full=full,
            watermark=None if watermark is None else float(watermark),
            released=self._released() if self.window and epoch % self.recycle_every == 0 else np.zeros(0, np.int32),
        )
        if self.window and epoch % self.recycle_every == 0:
            self._recycle()
        summary = ShardSummary(
            shard=self.shard,
            epoch=epoch,
            transactions=txs,
            updates=len(src) + n_vertex_rows,
            live_edges=e.live(),
            buffered=sum(b.size() for b in self._buffers.values()),
            late=late,
            delta_bytes=delta.nbytes,
        )
        return summary, delta

    def _write_attrs(self, winners: dict, partition_names: list, bound: float | None) -> set[int]:
        """Store the attribute writes that win over the stored ones (and, with a window, let those
        written at or below ``bound`` expire); the vertices whose attributes changed."""
        newer = self._stamps.newer(winners, partition_names)
        vid = winners["vid"][newer]
        ids = vid.tolist()
        self.attrs.put_many(ids, encoded(winners["attrs"][newer].tolist()))
        changed = set(ids)
        self._stamps.put_many({k: v[newer] for k, v in winners.items() if k != "attrs"}, partition_names)
        if self._writes is not None and bound is not None:
            self._writes.add(winners["ts"][newer], vid, np.zeros(len(vid), np.int8), np.zeros(len(vid), np.int64))
            changed.update(self._expire_attrs(bound))
        return changed

    def _check_order(self, epoch: int, vector: dict[str, int]) -> None:
        if epoch <= self.epoch:
            raise EpochOrderError(f"shard {self.shard}: epoch {epoch} after epoch {self.epoch}")
        for name, high in self.applied.items():
            if vector.get(name, 0) < high:
                raise EpochOrderError(f"shard {self.shard}: vector shrinks for {name}: {vector.get(name, 0)} < {high}")

    def _take(self, vector: dict[str, int]) -> tuple[list, list, int]:
        """Out of the buffers: the rows of every transaction below ``vector``, as (partition, columns)
        for edges and for vertices, and how many transactions they are."""
        edge_parts, vertex_parts, txs = [], [], 0
        for name, high in vector.items():
            buf = self._buffers.get(name)
            if buf is None or not buf.size():
                continue
            txs += int(np.searchsorted(buf.offsets, high))
            buf.offsets = buf.offsets[buf.offsets >= high]
            taken, buf.edges = _take_below(buf.edges, high)
            if taken is not None and len(taken[0]):
                edge_parts.append((name, taken))
            taken, buf.vertices = _take_below(buf.vertices, high)
            if taken is not None and len(taken[0]):
                vertex_parts.append((name, taken))
        return edge_parts, vertex_parts, txs

    # -- the window ---------------------------------------------------------
    def _count_rows(self, slots: np.ndarray, sign: np.ndarray, step: int = 1) -> None:
        """Keep, per slot, how many of its contributions (and adds) are inside the window."""
        n = len(self.edges)
        for col in (self._rows, self._adds):
            if len(col) < n:
                col.extend(np.zeros(n - len(col), dtype=np.int32))
        np.add.at(self._rows.view, slots, step)
        np.add.at(self._adds.view, slots[sign > 0], step)

    def _expire_edges(self, bound: float) -> np.ndarray:
        """Take the contributions at or below ``bound`` out of their edges; returns the slots they touched.
        An edge whose earliest add left gets the earliest add still inside; an edge with nothing left
        inside gives its slot back."""
        assert self._contrib is not None
        ts, slots, sign, dw = self._contrib.expire(bound)
        if not len(ts):
            return np.zeros(0, dtype=np.int64)
        e = self.edges
        e.mult.add(slots, -sign.astype(np.int64))
        np.add.at(e.weight.view, slots, -dw)
        self._count_rows(slots, sign, -1)
        touched = unique(slots)
        first_gone = unique(slots[sign > 0])
        first_gone = first_gone[e.first_ts.view[first_gone] <= bound]
        e.first_ts.view[first_gone] = np.inf
        still = first_gone[self._adds.view[first_gone] > 0]
        e.first_ts.view[still] = self._contrib.earliest_adds(still)
        e.release(touched[self._rows.view[touched] == 0])
        return touched

    def _expire_attrs(self, bound: float) -> set[int]:
        """Vertices whose winning attribute write left the window lose their attributes."""
        assert self._writes is not None
        _, vids, _, _ = self._writes.expire(bound)
        vids = unique(vids)
        if not len(vids):
            return set()
        stamps = self._stamps
        gone = vids[(stamps.part.view[vids] >= 0) & (stamps.ts.view[vids] <= bound)]
        for v in gone.tolist():
            self.attrs.clear(v)
        stamps.clear(gone)
        return set(gone.tolist())

    def _released(self) -> np.ndarray:
        """End the introduction of the local ids whose vertex the window emptied: introduced (``exists``),
        no edge slot held, no attributes. At fixed epochs and on applied state only (not the buffer), so
        every run reaching an epoch releases the same; :meth:`_recycle` later reuses the ids themselves,
        once no buffered transaction names them either."""
        gone = np.flatnonzero(self.exists.view & ~self._held_vertices(len(self.exists)))
        self.exists.view[gone] = False
        return gone.astype(np.int32)

    def _held_vertices(self, n: int) -> np.ndarray:
        """Per local id below ``n``: is it an end of a held edge slot, or does it have attributes."""
        used = np.zeros(n, dtype=bool)
        e = self.edges
        held = e.held()
        used[e.src.view[held]] = True
        used[e.dst.view[held]] = True
        used[np.asarray(self.attrs.ids(), dtype=np.int64)] = True
        return used

    def _recycle(self) -> None:
        """Give back the local ids of vertices the window emptied: no edge slot held (live, or with a
        contribution still inside), no attributes, no buffered transaction naming them. Their names
        leave the interner, so a shard holds the vertices of the window, not every vertex ever seen.

        Invisible downstream: a local id never leaves the shard except in a delta that introduces it
        by name first (``new_ids``/``new_names``), an id given back here was released in a delta
        before (:meth:`_released`), and a vertex that comes back is introduced again, under whatever
        id it gets. Runs after the epoch's delta is built, so that delta still names the released
        ids' edges (their last, dead rows) with the vertices they belonged to."""
        n = len(self.vertices.names)
        used = self._held_vertices(n)
        used[: len(self.exists)] |= self.exists.view  # still introduced downstream (see _released)
        for buf in self._buffers.values():
            for chunk in buf.edges:
                used[chunk[1]] = True
                used[chunk[2]] = True
            for chunk in buf.vertices:
                used[chunk[1]] = True
        used[self.vertices.free_ids()] = True  # released already
        gone = np.flatnonzero(~used)
        if not len(gone):
            return
        self.vertices.release(gone)
        self._stamps.clear(gone)
        self.recycled += len(gone)

    def present(self) -> np.ndarray:
        """Local ids in S_e: with a window, the ends of a live edge and the vertices with attributes;
        without one, every vertex an applied update touched."""
        if not self.window:
            return np.flatnonzero(self.exists.view)
        e = self.edges
        live = e.mult.view > 0
        with_attrs = np.array(self.attrs.ids(), dtype=np.int64)
        return unique(np.concatenate([e.src.view[live], e.dst.view[live], with_attrs]).astype(np.int64))

    # -- checkpoints --------------------------------------------------------
    def state(self) -> list:
        """The applied state (never the buffer: the source replays it from the vector) as the chunks of a
        checkpoint payload (:func:`pulsegraph.snapshots.checkpoint.dumps`). The columns go out of band, as views,
        uncopied: nothing changes them until the caller has written the chunks."""
        e = self.edges
        return dumps(
            {
                "shard": self.shard,
                "epoch": self.epoch,
                "applied": dict(self.applied),
                "transactions": self.transactions,
                "vertices": self.vertices.encoded(),
                "recycled": self.recycled,
                "recycle_every": self.recycle_every,
                "types": self.types.names.tolist(),
                "exists": self.exists.view,
                "attrs": self.attrs.state(),
                "stamps": self._stamps.state(),
                "edges": e.columns(copy=False),
                "window": None if self._contrib is None else {
                    "contributions": self._contrib.state(), "writes": self._writes.state() if self._writes is not None else None,
                    "rows": self._rows.view, "adds": self._adds.view, "late": self.late,
                },
            },
        )

    @classmethod
    def restore(cls, payload: bytes | list | dict, resend_all: bool = True) -> "ShardStore":
        """A store in the state :meth:`state` saved (the file's payload, the chunks themselves, or what they
        load into: :func:`~pulsegraph.snapshots.checkpoint.load_verified`'s, one copy fewer); its next
        delta carries everything, so a downstream stage that starts empty is rebuilt by it, unless
        ``resend_all`` is False: the downstream stage was restored whole at this very epoch."""
        st = payload if isinstance(payload, dict) else loads(payload if isinstance(payload, bytes) else b"".join(payload))
        w = st.get("window")
        # The release cadence decides which epochs release ids (and so the global ids): the saved one.
        store = cls(st["shard"], w["contributions"]["window"] if w else None, st.get("recycle_every", RECYCLE_EVERY))
        if w:
            store._contrib = TimeLog.restore(w["contributions"])
            store._writes = TimeLog.restore(w["writes"])
            store._rows.extend(w["rows"])
            store._adds.extend(w["adds"])
            store.late = w["late"]
        store.epoch, store.applied, store.transactions = st["epoch"], st["applied"], st["transactions"]
        store.vertices.load(st["vertices"])
        store.types.ids(st["types"])
        store.recycled = st.get("recycled", 0)
        store.exists.extend(st["exists"])
        if isinstance(st["attrs"], dict):  # a checkpoint from before the compact form: dicts by id
            for i, attrs in st["attrs"].items():
                store.attrs.put(i, encode(attrs))
            for i, stamp in st["stamps"].items():
                store._stamps.put(i, stamp)
        else:
            store.attrs.load(st["attrs"])
            store._stamps.load(st["stamps"])
        store.edges.load(st["edges"])
        store._resend_all = resend_all
        return store

    # -- reading ------------------------------------------------------------
    def status(self) -> dict:
        """What the shard actor reports: its place in the epochs and what it holds."""
        return {
            "shard": self.shard,
            "epoch": self.epoch,
            "applied": dict(self.applied),
            "vertices": int(self.exists.view.sum()),
            "names": len(self.vertices),
            "recycled": self.recycled,
            "edges": len(self.edges),
            "live_edges": self.edges.live(),
            "edge_bytes": self.edges.nbytes,
            "window_rows": len(self._contrib) if self._contrib is not None else 0,
            "late": self.late,
        }

    def snapshot(self) -> dict:
        """The applied state by name: ``{"vertices": {name: attrs|None}, "edges": {(s, d, t): (mult, weight)}}``
        (and ``first_ts``: {(s, d, t): earliest add time})."""
        names, types, e = self.vertices.names.tolist(), self.types.names.tolist(), self.edges
        verts = {names[i]: decode(self.attrs.raw(int(i))) for i in self.present()}
        slots = e.held()
        keys = [(names[s], names[d], types[t]) for s, d, t in zip(e.src.view[slots], e.dst.view[slots], e.etype.view[slots])]
        edges = {k: (int(m), int(w)) for k, m, w in zip(keys, e.mult.view[slots], e.weight.view[slots])}
        first = {k: float(f) for k, f in zip(keys, e.first_ts.view[slots])}
        return {"vertices": verts, "edges": edges, "first_ts": first}


def _run_index(offsets: np.ndarray) -> np.ndarray:
    """0, 1, 2... within each run of equal offsets: the order of updates inside one transaction."""
    if len(offsets) == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.r_[True, offsets[1:] != offsets[:-1]]
    run_start = np.maximum.accumulate(np.where(starts, np.arange(len(offsets)), 0))
    return np.arange(len(offsets)) - run_start


def _last_writers(parts: list[tuple[str, list[np.ndarray]]]) -> tuple[dict[str, np.ndarray], list[str], int]:
    """Per vertex, the row with the greatest stamp (ts, partition, offset, seq) among ``parts``
    (partition name, [off, vid, ts, seq, attrs] columns): the winners' columns (``part`` indexes
    the sorted partition names returned beside them) and the row count.

    Only each vertex's winner of the epoch is compared with its stored stamp: the same
    result as comparing every row in turn. Rows with equal stamps keep the first, as a
    row-by-row strict ``>`` would.
    """
    if not parts:
        z = np.zeros(0, dtype=np.int64)
        return {"vid": z, "ts": np.zeros(0), "part": z, "off": z, "seq": z, "attrs": np.zeros(0, dtype=object)}, [], 0
    names = sorted({name for name, _ in parts})
    rank = {name: i for i, name in enumerate(names)}
    off, vid, ts, seq, attrs = (np.concatenate(c) for c in zip(*(cols for _, cols in parts)))
    prank = np.concatenate([np.full(len(cols[0]), rank[name], dtype=np.int64) for name, cols in parts])
    n = len(vid)
    order = np.lexsort((-np.arange(n), seq, off, prank, ts, vid))  # the last key sorts first
    sv = vid[order]
    last = order[np.r_[sv[1:] != sv[:-1], True]]
    cols = {"vid": vid[last].astype(np.int64), "ts": ts[last], "part": prank[last], "off": off[last], "seq": seq[last], "attrs": attrs[last]}
    return cols, names, n
