"""The API process's own copy of the graph, kept from each epoch's edge changes, for neighbors as of any retained epoch.

Owns nothing but what :attr:`pulsegraph.compute.results.EpochResult.edge_changes` carries:
edges in global vertex ids with their new *absolute* multiplicity and
fixed-point weight, so applying an epoch twice is harmless. It never calls an
actor and never reaches into the compute stage's internals.

Layout (all NumPy, no Python object per edge):

* **Slots.** Every edge ``(src, dst, type)`` gets a slot when it first appears.
  An edge with nothing left (multiplicity and weight 0: removed, or expired
  from a window) keeps its slot while a retained epoch may still see it live,
  that is until the undo record of the last epoch that changed it leaves the
  retention; then the slot is freed (its key leaves the index and the
  adjacency) and the next new edge takes it. So the slots follow the live
  edges plus what changed within the retention, not every edge ever seen.
  Per slot: ``src``, ``dst`` (int32), ``etype`` (int16), ``mult`` (int32 until a
  multiplicity needs int64: :mod:`pulsegraph.snapshots.growable`), ``weight`` (int64): the
  state as of the newest applied epoch, and the last epoch that changed it
  (int32: 68 years of an epoch a second). 26 bytes per edge.
* **Key index.** The edge key packed into one uint64 (src 26 bits, dst 26 bits,
  type 12 bits) with its slot, in a :class:`~pulsegraph.base.keyindex.KeyIndex`: a batch
  of changes finds its slots with a ``searchsorted`` per run, and the new and
  freed edges cost what they are, not a copy of the index (which, as one sorted
  array, made every epoch's work and transient memory grow with the graph).
  13 bytes per edge (the slot is an int32).
* **Adjacency.** The key index sorts by source first, so the out-edges of a
  vertex are already one range of it. The in-edges are one range of
  ``dst << 32 | slot`` in one more (value-less) key index. A slot is freed only
  once no retained epoch sees its edge live, so the edges of a vertex as of a
  retained epoch are a subset of its slots now. 9 bytes per edge (an index by
  source as well, as before, cost 9 more and the updates of a third index).
* **Undo records.** Per retained epoch, the slots it changed (sorted) and their
  state *before* it (once the epoch is cold, read from its result archive file,
  memory-mapped: :meth:`GraphHistory.map_undo`). The state of a few slots as of epoch ``E`` is the current
  state with the undo records of epochs ``> E`` applied, newest first; a
  neighbors query touches only the slots of one vertex. 20 bytes per change.

Vertex ids above 2**26 (67 M) or more than 4096 edge types do not fit the
packed key and raise :class:`GraphCapacityError` loudly.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pulsegraph.api.exceptions import NotFound
from pulsegraph.base.edgekey import MAX_TYPES, MAX_VERTICES, pack, src_range
from pulsegraph.base.errors import PulsegraphError
from pulsegraph.base.keyindex import KeyIndex
from pulsegraph.base.rwlock import ReadWriteLock
from pulsegraph.compute.changes import EdgeChanges
from pulsegraph.snapshots.growable import Column

log = logging.getLogger(__name__)

# A vertex's edges one way: (other end, type, multiplicity, weight), one entry per live edge. Out-edges come by
# (other end, type); in-edges by slot, where an edge happened to land (parts of a partitioned view number theirs
# apart): a reader whose answer depends on the order orders them itself (api.queries.heaviest).
Edges = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
# The per-slot columns (GraphHistory.state).
_COLUMNS = ("src", "dst", "etype", "mult", "weight", "changed")


class GraphCapacityError(PulsegraphError):
    """The graph outgrew the packed edge key; raised in the feed thread, never by a request."""


def _adjacent(ends: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """The adjacency key of each (vertex at one end, slot): the vertex's edges are one range of keys."""
    return (ends.astype(np.uint64) << np.uint64(32)) | slots.astype(np.uint64)


def _slots_fit(keys: KeyIndex, by_dst: KeyIndex, more: list, n: int) -> bool:
    """Whether every slot the indexes, the undo records (``more``: :class:`_Undo` or arrays) name is below ``n``."""
    parts = [r["vals"] for r in keys.state()["runs"]] + [r["keys"] & np.uint64(0xFFFFFFFF) for r in by_dst.state()["runs"]]
    parts += [u.slots if isinstance(u, _Undo) else u for u in more]
    return all(not len(p) or (int(p.max()) < n and int(p.min()) >= 0) for p in parts)


def _last_of_each(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``keys``, sorted, and the row of the last occurrence of each. One change per edge per
    epoch is what the compute stage sends (its rows are edges); the last holds if a producer sent more.
    That case alone takes the stable sort, 2.5x the time of the one an edge once needs (at 20 M keys,
    the whole graph of the first epoch after a restart: 5.2 s against 1.9)."""
    order = np.argsort(keys)
    ordered = keys[order]
    if len(ordered) < 2 or bool((ordered[1:] != ordered[:-1]).all()):
        return ordered, order
    distinct, first = np.unique(keys[::-1], return_index=True)
    return distinct, len(keys) - 1 - first


def require_kept(epoch: int, newest: int, kept_from: int) -> None:
    """Raise :class:`~pulsegraph.api.exceptions.NotFound` unless a view whose newest epoch is ``newest`` (0: none
    applied) and which keeps the graph from ``kept_from`` on gives the graph as of ``epoch``."""
    if newest == 0:
        # Nothing applied yet: after a restart the epochs taken back are served before the pipeline's first
        # epoch brings the graph, and an empty view would answer them with no edges at all.
        raise NotFound(
            f"the graph as of epoch {epoch} is not kept (none is yet: it comes with the pipeline's first epoch); "
            "epochs from before a crash keep their scores, not their edges",
            code="graph_not_retained",
        )
    if epoch < kept_from:
        raise NotFound(
            f"the graph as of epoch {epoch} is not kept (kept: {kept_from}..{newest}); "
            "epochs from before a crash keep their scores, not their edges",
            code="graph_not_retained",
        )


def check_capacity(ch: EdgeChanges) -> None:
    """Raise :class:`GraphCapacityError` for changes the packed edge key cannot hold."""
    if len(ch) and (int(ch.src.max()) >= MAX_VERTICES or int(ch.dst.max()) >= MAX_VERTICES or int(ch.etype.max()) >= MAX_TYPES):
        raise GraphCapacityError(
            f"the API's graph view holds at most {MAX_VERTICES} vertices and {MAX_TYPES} edge types. "
            "Operator action: widen the packed key in api/graph.py"
        )


@dataclass
class _Undo:
    epoch: int
    slots: np.ndarray  # sorted
    mult: np.ndarray  # state before this epoch
    weight: np.ndarray
    # The first epoch its changes cover: ``epoch`` itself, or the first of the sealed epochs merged into
    # it. Undone, it gives the graph as of ``since - 1``.
    since: int


@dataclass
class Neighbor:
    vertex: int
    etype: int
    mult: int
    weight: int


class GraphHistory:
    """The graph as of the newest applied epoch, plus undo records for the retained ones."""

    remote = False  # a read is a lookup here (pulsegraph.api.graphparts: a call to another process)

    def __init__(self, retain: int = 120) -> None:
        self.retain = retain
        self._lock = ReadWriteLock()  # written by the feed thread only; read from the loop and worker threads
        self._fresh()

    def _fresh(self) -> None:
        """An empty view: no edge, no epoch applied."""
        self.src = Column(np.int32)
        self.dst = Column(np.int32)
        self.etype = Column(np.int16)
        self.mult = Column(np.int32, wide=np.int64)  # int64 by contract; narrow until a value needs it
        self.weight = Column(np.int64)
        self.changed = Column(np.int32)  # per slot: the last epoch that changed it
        self._free = np.zeros(0, np.int64)  # freed slots (sorted), taken by new edges first
        self._keys = KeyIndex()  # edge key -> slot
        self._by_dst = KeyIndex(values=False)  # dst << 32 | slot (out-edges: a range of ``_keys``)
        self._undo: collections.deque[_Undo] = collections.deque()
        self.epoch = 0
        self._first = 0  # the first epoch applied: nothing before it can be rebuilt (0: none yet)
        # Epochs whose changes were never seen (the feed fell behind the compute actor's buffer of
        # results): edges changed only in those epochs are missing from this view until they change again.
        self.missed_epochs = 0

    def wants_whole(self) -> bool:
        """Never: this view loses nothing it held (a :class:`~pulsegraph.api.graphparts.PartitionedGraph` can)."""
        return False

    @property
    def slots(self) -> int:
        """Slots in use or free: the length of the per-slot columns."""
        return len(self.src)

    @property
    def held(self) -> int:
        """Slots that hold an edge (not free)."""
        return len(self.src) - len(self._free)

    @property
    def nbytes(self) -> int:
        cols = (self.src, self.dst, self.etype, self.mult, self.weight, self.changed)
        index = (self._keys, self._by_dst)
        undo = sum(u.slots.nbytes + u.mult.nbytes + u.weight.nbytes for u in self._undo)
        return sum(c.nbytes for c in cols) + sum(i.nbytes for i in index) + self._free.nbytes + undo

    def apply(self, epoch: int, changes: EdgeChanges | None, full: bool = False, since: int | None = None) -> None:
        """Apply one epoch's changes; epochs must come in increasing order (older or repeated ones are ignored).

        ``full``: the changes are the whole graph (the first epoch after a restore from a checkpoint);
        every edge they do not name is gone, and no epoch before counts as missed. ``since``: the
        first epoch the changes cover (default ``epoch``; earlier when sealed epochs were merged
        into this one).
        """
        if epoch <= self.epoch:
            return
        covered_from = epoch if since is None else since
        if self.epoch:
            # Changes are absolute states, so ones that cover epochs this view has too (a restart's pipeline merging
            # epochs it publishes again: pulsegraph.api.viewfile) apply the same; undone, they give this view's epoch.
            covered_from = max(covered_from, self.epoch + 1)
        if covered_from != self.epoch + 1 and not full:
            log.error("graph view missed epochs %d..%d; neighbors may lack edges changed only then", self.epoch + 1, covered_from - 1)
            self.missed_epochs += covered_from - self.epoch - 1
        ch = changes if changes is not None else EdgeChanges.empty()
        check_capacity(ch)
        keys = pack(ch.src, ch.dst, ch.etype)
        # Worked out before the write lock: the feed thread is the only writer, so what it reads here cannot
        # change under it, and readers (the event loop's among them) wait only for the writes below.
        keys, idx = _last_of_each(keys)
        mult, weight = ch.mult[idx], ch.weight[idx]
        slots = self._keys.get(keys)
        fresh = slots < 0
        # The ends and type of the new edges only: an edge the view has keeps its own (a whole epoch over a full
        # view is mostly those: 10 bytes an edge less in the take-in's peak).
        at = idx[fresh]
        src, dst, et = ch.src[at], ch.dst[at], ch.etype[at]
        n_new = int(fresh.sum())
        reused, free = self._free[:n_new], self._free[n_new:]
        base = self.slots
        k = len(reused)
        new_slots = np.concatenate([reused, np.arange(base, base + n_new - k, dtype=np.int64)])
        slots[fresh] = new_slots
        if full:
            # Freed slots and new ones hold nothing, so the edges live now and not named are the ones gone.
            # A mask, not np.setdiff1d: that sorts both sides, 33 s of the 58 the first epoch after a
            # restart took here at 23 M edges.
            held = (self.mult.view != 0) | (self.weight.view != 0)
            held[slots[slots < base]] = False
            gone = np.flatnonzero(held)
            del held
            if self.epoch:
                # Over a view that holds a graph (a relaunch, or a restart that took the view back), most of a whole
                # epoch's edges are as they were: only those that differ change, and only they get an undo entry
                # (20 bytes each: the whole graph's otherwise) and this epoch as their last change. Left out before
                # the edges gone are added (those all differ), so no copy of the whole epoch's rows is made.
                differs = fresh.copy()  # a new edge, in a freed slot or a new one, is written whatever it holds
                old = ~fresh
                differs[old] = (self.mult.view[slots[old]] != mult[old]) | (self.weight.view[slots[old]] != weight[old])
                slots, mult, weight = slots[differs], mult[differs], weight[differs]
            slots = np.concatenate([slots, gone])
            mult = np.concatenate([mult, np.zeros(len(gone), np.int64)])
            weight = np.concatenate([weight, np.zeros(len(gone), np.int64)])
        if self.epoch == 0:
            # The first epoch applied: no graph before it is ever rebuilt (_kept_from), so its undo record
            # keeps only the slots it leaves empty, which _release frees once it leaves the retention (there
            # are none from the compute stage). At a restart that is the whole graph's 20 bytes per edge
            # not kept, in memory and in the epoch's archive file, and its sort not made.
            s = np.sort(slots[(mult == 0) & (weight == 0)])
        else:
            s = np.sort(slots)
        with self._lock.write():
            self._free = free
            if n_new:
                # Freed slots hold nothing (multiplicity and weight 0): the undo record below keeps
                # exactly that as the new edge's state before this epoch.
                for col, values in ((self.src, src), (self.dst, dst), (self.etype, et)):
                    col.view[reused] = values[:k]
                    col.extend(values[k:])
                for col in (self.mult, self.weight, self.changed):
                    col.extend(np.zeros(n_new - k, np.int64))
                self._keys.put(keys[fresh], new_slots, absent=True)
                # A new slot's adjacency key is new too: a freed slot's left with its edge.
                self._by_dst.put(_adjacent(dst, new_slots), absent=True)
            self._undo.append(_Undo(epoch, s, self.mult.view[s].copy(), self.weight.view[s].copy(), covered_from))
            self.mult.put(slots, mult)
            self.weight.view[slots] = weight
            self.changed.view[slots] = epoch
            while len(self._undo) > self.retain:
                self._release(self._undo.popleft())
            if self.epoch == 0:
                self._first = epoch
            self.epoch = epoch

    def state(self) -> dict:
        """The view as of its newest epoch, as plain arrays, for :meth:`load_state` after a restart; of each retained
        undo record only where it lies (its epoch, the first epoch it covers, its length): the record itself is
        in the epoch's result archive file. Called when no epoch is being applied (the feed has stopped)."""
        with self._lock.read():
            return {
                "epoch": self.epoch, "first": self._first, "missed": self.missed_epochs, "free": self._free,
                "columns": {name: getattr(self, name).view for name in _COLUMNS},
                "keys": self._keys.state(), "by_dst": self._by_dst.state(),
                "undo": [[u.epoch, u.since, len(u.slots)] for u in self._undo],
            }

    def load_state(self, state: dict, undo_of: Callable[[int], dict | None]) -> bool:
        """Take back the view :meth:`state` gave (its arrays copied), its undo records read through ``undo_of(epoch)``
        (the arrays the result archive keeps with the epoch, memory-mapped). False, and nothing changed, when a
        record is missing or is not the one the view had."""
        undo: collections.deque[_Undo] = collections.deque()
        for epoch, since, n in state["undo"]:
            got = undo_of(epoch) or {}
            s, m, w = (got.get(k) for k in ("slots", "mult", "weight"))
            if s is None or m is None or w is None or not len(s) == len(m) == len(w) == n:
                return False
            undo.append(_Undo(epoch, np.asanyarray(s), np.asanyarray(m), np.asanyarray(w), since))
        columns = {name: Column.from_array(a, np.int64 if name == "mult" else None) for name, a in state["columns"].items()}
        keys, by_dst = KeyIndex.from_state(state["keys"]), KeyIndex.from_state(state["by_dst"])
        # Served before the file's digest is read (pulsegraph.api.viewfile): a slot past the columns would be an
        # IndexError in a read, so every slot is checked to fit (a pass over the indexes, ~50 ms at 20 M edges).
        n = len(columns["src"])
        if any(len(c) != n for c in columns.values()) or not _slots_fit(keys, by_dst, [*undo, state["free"]], n):
            return False
        with self._lock.write():
            for name, col in columns.items():
                setattr(self, name, col)
            self._keys, self._by_dst, self._undo = keys, by_dst, undo
            self._free = np.array(state["free"], np.int64)
            self.epoch, self._first, self.missed_epochs = int(state["epoch"]), int(state["first"]), int(state["missed"])
        return True

    def clear(self) -> None:
        """Forget everything: the view taken back at a start was not the history the pipeline recovered."""
        with self._lock.write():
            self._fresh()

    def forget_before(self, epoch: int) -> None:
        """Drop the undo records that only serve epochs before ``epoch`` (the record of epoch ``u`` gives
        the graph as of ``u - 1``), freeing the slots of edges only those epochs saw live."""
        with self._lock.write():
            while self._undo and self._undo[0].epoch <= epoch:
                self._release(self._undo.popleft())

    def undo_record(self, epoch: int) -> dict[str, np.ndarray] | None:
        """The undo record of ``epoch`` as arrays, for the result archive to keep with it: the newest applied, or one
        the view had already when a restart's pipeline publishes that epoch again (:mod:`pulsegraph.api.viewfile`),
        whose new archive file must hold it for the next start to take the view back."""
        with self._lock.read():
            u = next((u for u in reversed(self._undo) if u.epoch <= epoch), None)
            if u is None or u.epoch != epoch:
                return None
            return {"slots": u.slots, "mult": u.mult, "weight": u.weight}

    def undo_epochs(self) -> list[int]:
        """The epochs whose undo records are retained, oldest first."""
        with self._lock.read():
            return [u.epoch for u in self._undo]

    def map_undo(self, epoch: int, arrays: dict[str, np.ndarray]) -> bool:
        """Read the undo record of ``epoch`` from ``arrays`` from now on: the same values, memory-mapped
        from the archive, so the retained history costs disk, not memory. False (nothing changed) when
        the record is not retained or the arrays are not its own."""
        with self._lock.write():
            for u in self._undo:
                if u.epoch != epoch:
                    continue
                s, m, w = (np.asanyarray(arrays.get(k, np.zeros(0))) for k in ("slots", "mult", "weight"))
                if not (len(s) == len(m) == len(w) == len(u.slots)):
                    return False
                if len(s):
                    u.slots, u.mult, u.weight = s, m, w
                return True
            return False

    def _release(self, dropped: _Undo) -> None:
        """Free the slots whose edge has nothing left and whose last change was the epoch of ``dropped``,
        an undo record that just left the retention: no retained epoch can see their edge live any
        more (a later change would have a later undo record). Caller holds the lock."""
        s = dropped.slots
        if not len(s):
            return
        s = s[(self.changed.view[s] == dropped.epoch) & (self.mult.view[s] == 0) & (self.weight.view[s] == 0)]
        if not len(s):
            return
        src, dst = self.src.view[s], self.dst.view[s]
        self._keys.discard(pack(src, dst, self.etype.view[s]))
        self._by_dst.discard(_adjacent(dst, s))
        self._free = np.union1d(self._free, s)

    @property
    def kept_from(self) -> int:
        """The oldest epoch whose graph this view can give: the first one applied, or the one before
        the first epoch the oldest undo record still retained covers (0: none yet)."""
        with self._lock.read():
            return self._kept_from()

    def _kept_from(self) -> int:
        # Not ``epoch - 1``: a ranked epoch that merged sealed ones (ranking fell behind) undoes them all,
        # back to the epoch ranked before it.
        return max(self._first, self._undo[0].since - 1) if self._undo else self._first

    def require(self, epoch: int) -> None:
        """Raise :class:`~pulsegraph.api.exceptions.NotFound` for an epoch older than this view keeps (one served
        from the result archive after a restart), and for any before the view has taken an epoch in, rather
        than answer with a later graph or an empty one."""
        with self._lock.read():
            self._require(epoch)

    def _require(self, epoch: int) -> None:
        require_kept(epoch, self.epoch, self._kept_from())

    def neighbors(self, vertex: int, direction: str, epoch: int | None = None) -> Edges:
        """(other end, type, multiplicity, weight) of the live edges of ``vertex`` as of ``epoch`` (None: newest);
        see :meth:`require` for epochs it does not keep."""
        with self._lock.read():
            got = self._neighbors(vertex, direction, epoch, None)
        assert got is not None  # no bound: always read
        return got

    def neighbors_many(self, vertices: list[int], direction: str, epoch: int | None = None) -> list[Edges]:
        """:meth:`neighbors` of each of ``vertices`` (a search's frontier), under one hold of the lock."""
        with self._lock.read():
            got = [self._neighbors(v, direction, epoch, None) for v in vertices]
        return [g for g in got if g is not None]  # no bound: every one is read

    def neighbors_now(self, vertex: int, direction: str, epoch: int | None, most: int) -> Edges | None:
        """:meth:`neighbors` for a caller that must not wait, the event loop: None, without waiting, while an
        epoch is being applied (it holds the lock for as long as that takes) or when the vertex has more than
        ``most`` edges that way (its read is O(degree))."""
        if not self._lock.try_read():
            return None
        try:
            return self._neighbors(vertex, direction, epoch, most)
        finally:
            self._lock.release_read()

    @property
    def writing(self) -> bool:
        """An epoch is being written into the view (or is about to be): :meth:`neighbors_now` declines."""
        return self._lock.writer

    def _neighbors(self, vertex: int, direction: str, epoch: int | None, most: int | None) -> Edges | None:
        if epoch is not None:
            self._require(epoch)
        lo, hi = src_range(vertex) if direction == "out" else (vertex << 32, (vertex + 1) << 32)
        index = self._keys if direction == "out" else self._by_dst
        if most is not None and index.span(lo, hi) > most:
            return None
        if direction == "out":
            _, slots = index.range(lo, hi)
            cand = slots.astype(np.int64)
        else:
            keys, _ = index.range(lo, hi)
            cand = (keys & np.uint64(0xFFFFFFFF)).astype(np.int64)
        mult = self.mult.view[cand].astype(np.int64)  # undo records may be wider than the column
        weight = self.weight.view[cand].copy()
        if epoch is not None and epoch < self.epoch:
            for u in reversed(self._undo):
                if u.epoch <= epoch:
                    break
                if not len(u.slots) or not len(cand):
                    continue
                i = np.searchsorted(u.slots, cand)
                ic = np.minimum(i, len(u.slots) - 1)
                hit = u.slots[ic] == cand
                mult[hit] = u.mult[ic[hit]]
                weight[hit] = u.weight[ic[hit]]
        other = (self.dst if direction == "out" else self.src).view[cand]
        et = self.etype.view[cand]
        live = mult > 0
        return other[live], et[live], mult[live], weight[live]
