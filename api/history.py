"""Per-vertex arrays of the applications (component labels, landmark distances) as of any retained epoch.

Each epoch brings a whole ``rows x n`` array, or a patch of the one before
(:class:`~pulsegraph.compute.apps.base.Patch`: the entries that changed, written in place);
keeping one per retained epoch would cost ``rows * n`` per epoch. Like
:class:`~pulsegraph.api.graph.GraphHistory`, this keeps the newest array whole and, per
retained epoch, an undo record: the entries that epoch changed and their values
before it, and the width (vertex count) before it (or the whole previous array
when its row count changed, e.g. landmarks re-chosen while the graph is young).
Columns of vertices new in an epoch need no undo entries: as of an earlier epoch
they read as ``fill``. A read applies the undo records of the epochs after the
one asked for, newest first, to the few entries it needs.

An epoch's undo record goes into its result archive file with the epoch
(:meth:`undo_record`) and, once the epoch is cold, is read memory-mapped from
there (:meth:`map_undo`): the retained history of these arrays costs disk, not
memory, as the graph view's does.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable

import numpy as np

from pulsegraph.compute.apps.base import PATCH_COL_BITS as _COL_BITS
from pulsegraph.compute.apps.base import PATCH_COL_MASK as _COL_MASK
from pulsegraph.compute.apps.base import Patch

log = logging.getLogger(__name__)


class ArrayHistory:
    def __init__(self, retain: int, fill: int) -> None:
        self.retain = retain
        self.fill = fill  # the value of entries of vertices that did not exist yet
        self._lock = threading.Lock()
        self._fresh()

    def _fresh(self) -> None:
        """Nothing pushed yet."""
        self.epoch = 0
        self._first = 0  # the first epoch pushed: nothing before it is known
        # The newest array: the first columns of ``_buf``, whose columns past them hold ``fill`` (a patch
        # that brings new vertices writes them in place, not into a copy of every row).
        self._current: np.ndarray | None = None
        self._buf: np.ndarray | None = None
        # The first epoch whose patch did not apply (it patched an epoch this history never got): from it
        # on nothing is known until a whole array comes. None: no gap.
        self._gap: int | None = None
        # epoch -> (keys sorted (row << 32 | col), values before the epoch, width before the epoch)
        # or the whole previous array
        self._undo: collections.OrderedDict[int, tuple | np.ndarray] = collections.OrderedDict()
        # The epoch of the last undo record dropped: the records still retained go back to it, not to the
        # oldest one's epoch - 1 (a ranked epoch that merged sealed ones goes back past them). 0: none yet.
        self._floor = 0

    def push(self, epoch: int, array: np.ndarray | Patch) -> bool:
        """Keep ``array`` as of ``epoch``: the whole array, or a :class:`~pulsegraph.compute.apps.base.Patch` of the
        newest one kept. False when a patch does not apply (it patches an epoch this history missed):
        nothing from ``epoch`` on is known then until a whole array comes, which the caller asks for."""
        with self._lock:
            prev = self._current
            if prev is not None and epoch <= self.epoch:
                return True  # an epoch already kept (the feed may hand one over twice)
            if isinstance(array, Patch):
                return self._patch(epoch, array)
            array = np.atleast_2d(array)
            if self._gap is not None:
                # The epochs between the last one kept and this one are not known: history starts again.
                log.warning("per-vertex history starts again at epoch %d (epochs %d..%d unknown)", epoch, self._gap, epoch - 1)
                self._undo.clear()
                self._gap, prev = None, None
            if prev is not None:
                if prev.shape[0] != array.shape[0] or prev.shape[1] > array.shape[1]:
                    undo: tuple | np.ndarray = prev
                else:
                    width = prev.shape[1]
                    r, c = np.nonzero(prev != array[:, :width])
                    undo = ((r.astype(np.int64) << _COL_BITS) | c, prev[r, c], width)
                self._keep_undo(epoch, undo)
            if prev is None:
                self._first = epoch
            self._buf = self._current = array
            self.epoch = epoch
            return True

    def _patch(self, epoch: int, patch: Patch) -> bool:
        """:meth:`push` of a patch (under the lock)."""
        prev, buf = self._current, self._buf
        rows, width = patch.shape
        if prev is None or buf is None or self._gap is not None or patch.base != self.epoch \
                or rows != prev.shape[0] or width < prev.shape[1]:
            if self._gap is None:
                # Holding nothing yet is how a restart after a crash begins when the compute stage was read back
                # whole (a checkpoint with --checkpoint-whole-every): its first patches are of its own epoch, and
                # the whole arrays it sends next start this history. Missing an epoch after holding one is a fault.
                report = log.info if prev is None else log.error
                report("per-vertex history got a patch of epoch %d for epoch %d but holds epoch %d: unknown "
                       "from epoch %d until a whole array comes", patch.base, epoch, self.epoch, epoch)
                self._gap = epoch
            return False
        old = prev.shape[1]
        if width > buf.shape[1]:
            # Room for a quarter more vertices: a growing graph copies the rows once in a while, not each epoch.
            buf = np.full((rows, width + width // 4 + 1024), self.fill, dtype=prev.dtype)
            buf[:, :old] = prev
            self._buf = buf
        cur = buf[:, :width]
        known = (patch.keys & _COL_MASK) < old  # new vertices' columns need no undo entry
        keys = patch.keys[known]
        before = cur[keys >> _COL_BITS, keys & _COL_MASK]
        changed = before != patch.values[known]
        # The undo record goes in before the entries change: a reader that saw a new value finds it.
        self._keep_undo(epoch, (keys[changed], before[changed], old))
        patch.write(cur)
        self._current = cur
        self.epoch = epoch
        return True

    def _keep_undo(self, epoch: int, undo: tuple | np.ndarray) -> None:
        self._undo[epoch] = undo
        while len(self._undo) > self.retain:
            self._floor, _ = self._undo.popitem(last=False)

    def forget_before(self, epoch: int) -> None:
        """Drop the undo records that only serve epochs before ``epoch`` (that of epoch ``u`` gives the
        epoch pushed before ``u``)."""
        with self._lock:
            while self._undo and next(iter(self._undo)) <= epoch:
                self._floor, _ = self._undo.popitem(last=False)

    def undo_record(self, epoch: int) -> dict[str, np.ndarray] | None:
        """The undo record of ``epoch`` (the newest pushed) as arrays, for the result archive to keep."""
        with self._lock:
            u = self._undo.get(epoch) if epoch == self.epoch else None
            if u is None:
                return None
            if isinstance(u, np.ndarray):
                return {"whole": u}
            keys, old, width = u
            return {"keys": keys, "old": old, "width": np.array([width], dtype=np.int64)}

    def map_undo(self, epoch: int, arrays: dict[str, np.ndarray]) -> bool:
        """Read the undo record of ``epoch`` from ``arrays`` from now on (the same values, memory-mapped
        from the archive). False (nothing changed) when it is not retained or the arrays are not its own."""
        with self._lock:
            u = self._undo.get(epoch)
            if u is None:
                return False
            if isinstance(u, np.ndarray):
                whole = arrays.get("whole")
                if whole is None or whole.shape != u.shape:
                    return False
                self._undo[epoch] = np.asanyarray(whole)
                return True
            keys, old = arrays.get("keys"), arrays.get("old")
            if keys is None or old is None or len(keys) != len(u[0]) or len(old) != len(u[1]):
                return False
            if len(keys):
                self._undo[epoch] = (np.asanyarray(keys), np.asanyarray(old), u[2])
            return True

    def state(self) -> dict:
        """The newest array and where each retained undo record is (its epoch: the record is in the epoch's result
        archive file), for :meth:`load_state` after a restart."""
        with self._lock:
            return {"epoch": self.epoch, "first": self._first, "floor": self._floor, "gap": self._gap,
                    "current": self._current, "undo": [[e, isinstance(u, np.ndarray)] for e, u in self._undo.items()]}

    def load_state(self, state: dict, undo_of: Callable[[int], dict | None]) -> bool:
        """Take back what :meth:`state` gave, the undo records read through ``undo_of(epoch)`` (the arrays the
        archive keeps with the epoch, as :meth:`undo_record` gave them). False, and nothing changed, when one is
        missing."""
        undo: collections.OrderedDict[int, tuple | np.ndarray] = collections.OrderedDict()
        for epoch, whole in state["undo"]:
            got = undo_of(epoch) or {}
            if whole and got.get("whole") is not None:
                undo[epoch] = np.asanyarray(got["whole"])
            elif not whole and all(got.get(k) is not None for k in ("keys", "old", "width")):
                undo[epoch] = (np.asanyarray(got["keys"]), np.asanyarray(got["old"]), int(got["width"][0]))
            else:
                return False
        current = None if state["current"] is None else np.array(state["current"])
        with self._lock:
            self._current = self._buf = current
            self._undo, self._gap = undo, state["gap"]
            self.epoch, self._first, self._floor = int(state["epoch"]), int(state["first"]), int(state["floor"])
        return True

    def roll_back(self, below: int) -> bool:
        """Undo the epochs from ``below`` on (a restart's pipeline publishes them again, maybe with other arrays:
        :mod:`pulsegraph.api.viewfile`): the newest array is then that of the newest epoch before them. False, and
        nothing changed, when the history cannot go back that far (it began with one of them)."""
        with self._lock:
            if self._current is None or self.epoch < below:
                return True
            if self._first >= below:
                return False
            cur = np.array(self._current)  # a copy: a reader may hold the array
            while self._undo and next(reversed(self._undo)) >= below:
                _, u = self._undo.popitem()
                if isinstance(u, np.ndarray):
                    cur = np.array(u)
                    continue
                keys, old, width = u
                cur[keys >> _COL_BITS, keys & _COL_MASK] = old
                cur = cur[:, :width]
            self._current = self._buf = np.ascontiguousarray(cur)
            self.epoch = next(reversed(self._undo)) if self._undo else self._first
            if self._gap is not None and self._gap >= below:
                self._gap = None
        return True

    def clear(self) -> None:
        """Forget everything (see :meth:`pulsegraph.api.graph.GraphHistory.clear`)."""
        with self._lock:
            self._fresh()

    def covers(self, epoch: int) -> bool:
        """Whether the arrays as of ``epoch`` can be given: from the first epoch pushed, or the one the
        oldest undo record still retained goes back to, to the newest, but none from a gap on."""
        with self._lock:
            if self._current is None or (self._gap is not None and epoch >= self._gap):
                return False
            return epoch >= max(self._first, self._floor)

    def at(self, epoch: int, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """The entries (rows[i], cols[i]) as of ``epoch`` (``fill`` beyond the array)."""
        rows = np.asarray(rows, dtype=np.int64)
        cols = np.asarray(cols, dtype=np.int64)
        with self._lock:
            arr = self._current
            if arr is None:
                return np.full(len(cols), self.fill)
        # Read without the lock while a patch may be written in place; the undo records are taken after
        # the read, so the record of any patch whose new values it saw is among them and puts them back.
        out, shape = self._read(arr, rows, cols)
        with self._lock:
            undos = [(e, u) for e, u in reversed(self._undo.items()) if e > epoch]
        for _, u in undos:
            if isinstance(u, np.ndarray):
                out, shape = self._read(u, rows, cols)
                continue
            keys, old, width = u
            out[cols >= width] = self.fill  # vertices that did not exist yet
            if not len(keys):
                continue
            want = (rows << _COL_BITS) | cols
            i = np.minimum(np.searchsorted(keys, want), len(keys) - 1)
            hit = keys[i] == want
            out[hit] = old[i[hit]]
        return out

    def _read(self, arr: np.ndarray, rows: np.ndarray, cols: np.ndarray):
        ok = (rows < arr.shape[0]) & (cols < arr.shape[1])
        out = np.full(len(cols), self.fill, dtype=arr.dtype)
        out[ok] = arr[rows[ok], cols[ok]]
        return out, arr.shape

    def row(self, epoch: int, row: int, n: int) -> np.ndarray:
        """The first ``n`` entries of one row as of ``epoch``."""
        cols = np.arange(n, dtype=np.int64)
        return self.at(epoch, np.full(n, row, dtype=np.int64), cols)
