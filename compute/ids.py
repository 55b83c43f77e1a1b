"""The compute stage's global vertex ids: name to id and back, and, with a window, ids given back and reused.

Ids are dense. Epoch by epoch, the vertices new in an epoch get theirs in name
order, so ids are a pure function of the epoch vectors (the same whatever the
shard count, the batching or the relaunch; the API keeps them across all three).

Reused ids (window mode, ``reuse_after`` H seconds of event time):
:class:`VertexIds` counts, per id, the shards whose local ids map to it (a shard
ends a mapping with its delta's ``released``, decided on its applied state
only). An id that no shard has held since an epoch whose watermark is H or more
below the current epoch's (so it has had no edge and no attributes all that
time) is given back: its name leaves the index, and the next epoch's new names
take the given-back ids lowest first, still in name order. The delay is counted
on the watermark, not in epochs or wall time: the watermark is a pure function of
the epoch vector, so ids stay one too, and the delay does not stretch when
epochs come slower under load (which would keep more ids exactly when the
service is busiest). The id space follows the window instead of every vertex
ever seen. To every algorithm a reused id is a vertex that was absent and came
back. :meth:`VertexIds.name_changes` tells a consumer what the names did; it must
keep no epoch whose watermark is H or more below the newest one's
(:attr:`pulsegraph.compute.results.EpochResult.reuse_after`).
"""

from __future__ import annotations

import collections
import heapq
import math
from dataclasses import dataclass, field
from typing import Callable

import msgspec
import numpy as np

from pulsegraph.base.arrays import add_at, unique
from pulsegraph.snapshots.growable import Column
from pulsegraph.snapshots.nametable import NameTable


class NameIndex:
    """Name -> id of the names a :class:`~pulsegraph.snapshots.nametable.NameTable` holds (shared, not copied): the
    mapping methods for single names, :meth:`lookup` for a batch at array speed."""

    def __init__(self, table: NameTable) -> None:
        self.table = table

    @classmethod
    def of(cls, names: list[str]) -> NameIndex:
        """The index of ``names`` by id (``""``: no name there), in a table of its own: how a stage pickled whole
        before the names were packed rebuilds its index (:meth:`VertexIds.__setstate__` then keeps that table)."""
        return cls(NameTable.of([name or None for name in names]))

    def __len__(self) -> int:
        return self.table.held

    def lookup(self, names: list[str]) -> np.ndarray:
        """The id of each name (int64), -1 where it is not held."""
        return self.table.lookup(names)

    def get(self, name: str, default: int | None = None) -> int | None:
        i = int(self.lookup([name])[0])
        return default if i < 0 else i

    def __contains__(self, name: str) -> bool:
        return self.get(name) is not None

    def __getitem__(self, name: str) -> int:
        i = self.get(name)
        if i is None:
            raise KeyError(name)
        return i


@dataclass
class NameChanges:
    """What the vertex names did since a consumer last looked (see :meth:`VertexIds.name_changes`).

    Apply ``ids``/``renamed`` in order (an id may appear more than once: the last one holds), then
    ``names`` as the names of ids ``start``, ``start + 1``, ... (the ids added since, or with
    ``start == 0`` every id: the consumer's copy was too old to patch). An empty name means the id
    names no vertex now (given back, not reused yet)."""

    start: int
    names: list[str]
    ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    renamed: list[str] = field(default_factory=list)

    def then(self, later: NameChanges) -> NameChanges:
        """These changes followed by ``later`` (which starts where these leave a consumer), as one: what
        applying both in turn does. ``later``'s renames of ids these add are made in their names."""
        if later.start == 0:
            return later
        end = self.start + len(self.names)
        if later.start != end:
            raise ValueError(f"changes from id {later.start} cannot follow changes up to id {end}")
        names = list(self.names)
        ours = later.ids >= self.start
        for i, name in zip((later.ids[ours] - self.start).tolist(), [n for n, o in zip(later.renamed, ours.tolist()) if o]):
            names[i] = name
        names.extend(later.names)
        older = ~ours
        return NameChanges(
            self.start, names, np.concatenate([self.ids, later.ids[older]]).astype(np.int64),
            self.renamed + [n for n, o in zip(later.renamed, older.tolist()) if o],
        )


class VertexIds:
    def __init__(self, reuse_after: float | None = None) -> None:
        # The names by id, packed (~35 bytes a name of ~10, hash index included, where a list of strings and its
        # index cost ~80): the compute actor holds every vertex's. An id given back and not reused yet has none.
        self.table = NameTable()
        self.index = NameIndex(self.table)
        self.reuse_after = float(reuse_after) if reuse_after else None
        # The watermark of the epoch being merged (set by give_back, which runs first in each epoch).
        self._watermark = float("-inf")
        # Per id, the shards mapping a local id to it, and the epoch that count fell to 0 (-1: held);
        # the ids at 0 in that order, in chunks (epoch, its watermark, ids) (stale ids are skipped), and
        # the given-back ones.
        self._holders = Column(np.int32)
        self._gone_since = Column(np.int64)
        self._waiting: collections.deque[tuple[int, float, np.ndarray]] = collections.deque()
        self._free: list[int] = []  # a heap: reused lowest first
        # Names of existing ids that changed, as (epoch, ids, names) (given back: "", reused: the new
        # name), for consumers' copies, until the consumer has them (forget_renames) or they outnumber
        # the ids (then every name is no more to send); changes at or below _renames_floor are gone.
        self._renames: collections.deque[tuple[int, np.ndarray, list[str]]] = collections.deque()
        self._renames_floor = 0
        self._renamed = 0  # entries in _renames

    def __len__(self) -> int:
        return len(self.table)

    @property
    def names(self) -> list[str]:
        """Every id's name ("" for one given back and not reused yet), decoded: a new list each time."""
        return self._names_from(0)

    def _names_from(self, start: int) -> list[str]:
        return [name or "" for name in self.table.take(np.arange(start, len(self.table), dtype=np.int64))]

    def __setstate__(self, state: dict) -> None:
        """Ids pickled whole (a stage written whole) before the names were packed kept a list of them."""
        names = state.pop("names", None)
        self.__dict__.update(state)
        if names is not None:  # its index came back as NameIndex.of(names): a table of those names
            self.table = self.index.table

    def name(self, names: list[str], epoch: int) -> np.ndarray:
        """Give new ``names`` ids, in the order given: given-back ids first (lowest first), then new ones.
        Returns the ids given."""
        # The first names take the ids given back, lowest first; the rest new ids, in one run (all of
        # them outside window mode, where nothing is given back).
        reused = [heapq.heappop(self._free) for _ in range(min(len(self._free), len(names)))]
        start = len(self.table)
        given = np.concatenate([np.array(reused, dtype=np.int64),
                                np.arange(start, start + len(names) - len(reused), dtype=np.int64)])
        self.table.add(names, given)
        if reused:
            self._log_renames(epoch, np.array(reused, dtype=np.int64), names[: len(reused)])
        return given

    def ids_of(self, names: list[str], epoch: int) -> np.ndarray:
        """The id of each of ``names`` (repeats allowed), the ones without one named first (in name
        order, by :meth:`name`): one lookup for the whole batch."""
        ids = self.index.lookup(names)
        absent = np.flatnonzero(ids < 0).tolist()
        if absent:
            missing = sorted({names[k] for k in absent})
            given = dict(zip(missing, self.name(missing, epoch).tolist()))
            ids[absent] = [given[names[k]] for k in absent]
        return ids

    def hold(self, ids: np.ndarray, delta: int, epoch: int) -> None:
        """``delta`` (+1/-1) more shards hold each of ``ids`` (repeats count); ids no shard holds any
        more start waiting to be given back."""
        if not len(ids):
            return
        self._sync()
        add_at(self._holders.view, ids, delta)
        if delta > 0:
            self._gone_since.view[ids] = -1
            return
        if self.reuse_after is None:
            return  # nothing is given back: nothing waits
        gone = unique(ids[self._holders.view[ids] == 0])
        self._wait(gone, epoch)

    def give_back(self, epoch: int, watermark: float | None, busy: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """Start merging ``epoch`` (its ``watermark``: None keeps the last one). The ids no shard has held
        since an epoch with a watermark ``reuse_after`` or more below this one are given back: their
        names leave the index, the ids go to the next new names. Ones a shard holds again, or that
        ``busy`` (ids -> bool per id) says still have an edge or attributes, stay."""
        if watermark is not None:
            self._watermark = max(self._watermark, float(watermark))
        if self.reuse_after is None:
            return np.zeros(0, np.int64)
        if self._waiting and math.isnan(self._waiting[-1][1]):
            # Restored from a checkpoint that kept no watermarks: those ids wait from this epoch on.
            self._waiting = collections.deque((e, self._watermark if math.isnan(w) else w, i) for e, w, i in self._waiting)
        bound = self._watermark - self.reuse_after
        due: list[np.ndarray] = []
        while self._waiting and self._waiting[0][1] <= bound:
            since, _, chunk = self._waiting.popleft()
            due.append(chunk[self._gone_since.view[chunk] == since])  # not held again since
        # unique: an id can wait in two chunks of one epoch (let go, held again, let go in one merge).
        out = unique(np.concatenate(due)) if due else np.zeros(0, np.int64)
        if len(out):
            out = out[~busy(out)]
        if len(out):
            self._gone_since.view[out] = -1
            # The whole batch at once: the shards release the vertices the window emptied in bursts of ~10**5.
            self.table.remove(out)
            self._free.extend(out.tolist())
            heapq.heapify(self._free)
            self._log_renames(epoch, out, [""] * len(out))
        return out

    def restored_holders(self, epoch: int) -> None:
        """After every shard sent its whole state (a restore): the named ids no shard holds and not
        already waiting were held when the checkpoint was written (else they would be waiting or given
        back), so they wait from this epoch, as they would have without the restart."""
        if self.reuse_after is None:
            return
        self._sync()
        n = len(self.table)
        named = np.ones(n, dtype=bool)
        named[self.table.unnamed()] = False
        gone = np.flatnonzero(named & (self._holders.view[:n] == 0) & (self._gone_since.view[:n] < 0))
        self._wait(gone, epoch)

    def name_changes(self, after: int, known: int) -> NameChanges:
        """For a consumer that has the names of ids below ``known`` as of epoch ``after``: what makes its
        copy equal to :attr:`names` now."""
        if after < self._renames_floor:
            return NameChanges(0, self._names_from(0))
        newer = [(e_ids, e_names) for epoch, e_ids, e_names in self._renames if epoch > after]
        if not newer:
            return NameChanges(known, self._names_from(known))
        ids = np.concatenate([e_ids for e_ids, _ in newer])
        renamed = [name for _, e_names in newer for name in e_names]
        below = np.flatnonzero(ids < known)
        return NameChanges(known, self._names_from(known), ids[below], [renamed[k] for k in below.tolist()])

    def forget_renames(self, upto: int) -> None:
        """The consumer has the names as of epoch ``upto``: the changes up to it need not be kept."""
        while self._renames and self._renames[0][0] <= upto:
            self._drop_oldest_renames()

    def _log_renames(self, epoch: int, ids: np.ndarray, names: list[str]) -> None:
        # Kept for a consumer however far behind it is, but no more of them than there are ids: past
        # that, sending every name is cheaper (a bound on memory where no consumer pulls). Not bound by
        # the reuse delay: a consumer that pulls less often than the delay would get every name at
        # every pull.
        self._renames.append((epoch, ids, names))
        self._renamed += len(ids)
        while self._renamed > len(self.table):
            self._drop_oldest_renames()

    def _drop_oldest_renames(self) -> None:
        epoch, ids, _ = self._renames.popleft()
        self._renames_floor = epoch
        self._renamed -= len(ids)

    def state(self) -> dict:
        """What a checkpoint keeps: the names in id order (the table's arrays, copied: the checkpoint is written
        while the stage goes on), the given-back ids and those waiting to be (epoch and id, and the epoch's
        watermark; how many shards hold each id comes back with the shards' first deltas)."""
        chunks = [(e, w, ids[self._gone_since.view[ids] == e]) for e, w, ids in self._waiting]
        waiting = np.concatenate([np.stack([np.full(len(ids), e, np.int64), ids], axis=1) for e, _, ids in chunks] or [np.zeros((0, 2), np.int64)])
        marks = np.concatenate([np.full(len(ids), w, np.float64) for _, w, ids in chunks] or [np.zeros(0)])
        names = {k: np.array(v) for k, v in self.table.state().items()}
        return {"names": names, "free": np.array(sorted(self._free), dtype=np.int64),
                "waiting": waiting, "waiting_since": marks}

    @classmethod
    def restore(cls, state: dict, reuse_after: float | None = None) -> "VertexIds":
        """The ids of :meth:`state` (``state["epoch"]``: the checkpoint's, before which no rename is kept)."""
        ids = cls(reuse_after)
        names = state["names"]
        if isinstance(names, dict):
            ids.table = NameTable.from_state(names)
        else:  # a checkpoint written before the names were packed: one MessagePack array of them ("": no name)
            listed = msgspec.msgpack.decode(names) if isinstance(names, bytes) else names
            ids.table = NameTable.of([name or None for name in listed])
        ids.index = NameIndex(ids.table)
        ids._sync()
        ids._free = [int(i) for i in state.get("free", ())]
        heapq.heapify(ids._free)
        waiting = np.asarray(state.get("waiting", np.zeros((0, 2), np.int64))).reshape(-1, 2)
        marks = np.asarray(state.get("waiting_since", np.full(len(waiting), np.nan)), dtype=np.float64)
        if len(waiting):
            # Saved in waiting order: each run of one epoch (and its watermark) is a chunk again.
            starts = np.flatnonzero(np.r_[True, waiting[1:, 0] != waiting[:-1, 0]])
            for a, b in zip(starts.tolist(), [*starts[1:].tolist(), len(waiting)]):
                ids._waiting.append((int(waiting[a, 0]), float(marks[a]), waiting[a:b, 1].copy()))
            ids._gone_since.view[waiting[:, 1]] = waiting[:, 0]
        ids._renames_floor = int(state.get("epoch", 0))
        return ids

    def _wait(self, ids: np.ndarray, epoch: int) -> None:
        """``ids`` (unique) are held by no shard from ``epoch`` on: they wait from its watermark."""
        if len(ids):
            self._gone_since.view[ids] = epoch
            self._waiting.append((epoch, self._watermark, np.asarray(ids, dtype=np.int64)))

    def _sync(self) -> None:
        n = len(self.table)
        if len(self._holders) < n:
            self._holders.extend(np.zeros(n - len(self._holders), dtype=np.int32))
        if len(self._gone_since) < n:
            self._gone_since.extend(np.full(n - len(self._gone_since), -1, dtype=np.int64))
