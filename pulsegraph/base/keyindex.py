"""A sorted index of distinct ``uint64`` keys, each with an ``int32`` value, that takes a batch of
inserts or deletions in time that follows the batch, not the index.

One sorted array pays a copy of the whole index for every batch put in or taken out
(``np.insert``/``np.delete``, or a merge and a filter): the shards' edge index and the API's graph
view did that every epoch, so an epoch's work and its transient arrays grew with the graph, not with
what changed. Here the keys lie in a few sorted runs, largest first, in the manner of a
log-structured merge tree:

* a batch of new keys is a run of its own; the newest run merges into the one before it while that
  one is at most :data:`FACTOR` times its size, so there are ~log_FACTOR(n / batch) runs and a key is
  copied that many times over its life;
* a lookup is one ``searchsorted`` per run;
* a deleted key is marked dead where it lies (a tombstone). Merges leave the dead behind, and once
  the dead come to :data:`DEAD_SHARE` of the live keys every run is merged into one.

A key is in one run at most, dead or alive: a key put over its tombstone is revived in place, so no
merge ever meets a key twice. Without values (``values=False``) it is a sorted set; a multimap such
as an adjacency (vertex -> slots) packs both into the key, ``vertex << 32 | slot``, and asks for a
:meth:`KeyIndex.range`.

Values are int32: what the index maps to is a slot of a column (an edge's, in a shard and in the API's
graph view), and a column never holds 2**31 of them in one process. The four bytes that int64 took are
4 of the ~100 a live edge costs in each of those processes; a larger value raises ``ValueError``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pulsegraph.base.arrays import unique

# The newest run merges into the one before it while that one is at most FACTOR times its size.
FACTOR = 4
# Every run is merged into one (the tombstones dropped) once the dead reach this share of the live keys.
DEAD_SHARE = 0.25
# ... and at least this many: a small index is not rewritten for a handful of deletions.
MIN_DEAD = 4096

VALUE = np.int32
_NONE = np.zeros(0, VALUE)


def _values(vals) -> np.ndarray:
    """``vals`` as the index holds them; raises ValueError for one that int32 cannot hold."""
    vals = np.asarray(vals)
    if len(vals) and (int(vals.max()) > np.iinfo(VALUE).max or int(vals.min()) < np.iinfo(VALUE).min):
        raise ValueError(f"a KeyIndex value must fit in int32 (a slot), not {int(vals.max())}")
    return vals.astype(VALUE, copy=False)


def _take(vals: np.ndarray, sel) -> np.ndarray:
    """``vals[sel]``; a set's values stay empty (a run is never empty, so a map's never are)."""
    return vals[sel] if len(vals) else vals


@dataclass
class _Run:
    keys: np.ndarray  # uint64, sorted, distinct
    vals: np.ndarray  # int32 (empty for a set)
    dead: np.ndarray  # bool
    n_dead: int = 0

    def alive(self) -> tuple[np.ndarray, np.ndarray]:
        """The keys not dead, and their values."""
        if not self.n_dead:
            return self.keys, self.vals
        keep = ~self.dead
        return self.keys[keep], _take(self.vals, keep)


class KeyIndex:
    """Distinct sorted uint64 keys with an int32 value each (or none: a set)."""

    def __init__(self, values: bool = True) -> None:
        self._values = values
        self._runs: list[_Run] = []
        self._live = 0
        self._dead = 0

    @classmethod
    def from_sorted(cls, keys: np.ndarray, vals: np.ndarray | None = None) -> KeyIndex:
        """An index of ``keys`` (sorted, distinct) and their ``vals``, in one run."""
        idx = cls(values=vals is not None)
        idx._append(np.asarray(keys, np.uint64), _NONE if vals is None else _values(vals))
        return idx

    def state(self) -> dict:
        """The index as plain arrays (its runs as they lie, tombstones included), for :meth:`from_state`."""
        runs = [{"keys": r.keys, "vals": r.vals, "dead": r.dead, "n_dead": r.n_dead} for r in self._runs]
        return {"values": self._values, "live": self._live, "dead": self._dead, "runs": runs}

    @classmethod
    def from_state(cls, state: dict) -> KeyIndex:
        """The index :meth:`state` gave, its arrays copied (they may be a read-only map of a file)."""
        idx = cls(values=bool(state["values"]))
        idx._runs = [_Run(np.array(r["keys"], np.uint64), np.array(r["vals"], VALUE), np.array(r["dead"], bool), int(r["n_dead"]))
                     for r in state["runs"]]
        idx._live, idx._dead = int(state["live"]), int(state["dead"])
        return idx

    def __len__(self) -> int:
        return self._live

    @property
    def runs(self) -> int:
        return len(self._runs)

    @property
    def nbytes(self) -> int:
        return sum(r.keys.nbytes + r.vals.nbytes + r.dead.nbytes for r in self._runs)

    def _find(self, keys: np.ndarray):
        """Per run, (run, positions of the keys it holds, the indexes in ``keys`` of those), dead or alive."""
        if not self._runs:
            return
        # Sorted queries let searchsorted start each search where the last one ended: on a run of
        # millions that is several times faster than random probes.
        order = None if len(keys) < 2 or bool(np.all(keys[1:] >= keys[:-1])) else np.argsort(keys, kind="stable")
        sk = keys if order is None else keys[order]
        for r in self._runs:
            p = np.searchsorted(r.keys, sk)
            pc = np.minimum(p, len(r.keys) - 1)
            if order is not None:
                back = np.empty_like(pc)
                back[order] = pc
                pc = back
            at = np.flatnonzero(r.keys[pc] == keys)
            if len(at):
                yield r, pc[at], at

    def get(self, keys) -> np.ndarray:
        """The value of each key (0 in a set); -1 where it is not held."""
        keys = np.asarray(keys, np.uint64)
        out = np.full(len(keys), -1, np.int64)
        for r, pos, at in self._find(keys):
            alive = ~r.dead[pos]
            out[at[alive]] = r.vals[pos[alive]] if self._values else 0
        return out

    def contains(self, keys) -> np.ndarray:
        keys = np.asarray(keys, np.uint64)
        out = np.zeros(len(keys), bool)
        for r, pos, at in self._find(keys):
            out[at] = ~r.dead[pos]
        return out

    def put(self, keys, vals=None, absent: bool = False) -> None:
        """Hold ``keys`` (distinct) with ``vals``: a key held already takes its new value, a dead one is
        revived where it lies, the others come in as a new run. ``absent``: the caller knows that no
        key is held (it has just looked them up); then they are searched for only when the index has
        dead keys to revive, and an index without deletions (a shard's edges outside window mode) takes
        new keys without a search."""
        keys = np.asarray(keys, np.uint64)
        if not len(keys):
            return
        vals = _values(vals) if self._values else _NONE
        rest = np.ones(len(keys), bool)
        for r, pos, at in (() if absent and not self._dead else self._find(keys)):
            rest[at] = False
            revived = int(np.count_nonzero(r.dead[pos]))
            r.dead[pos] = False
            r.n_dead -= revived
            self._dead -= revived
            self._live += revived
            if self._values:
                r.vals[pos] = vals[at]
        new_keys, new_vals = keys[rest], _take(vals, rest)
        if len(new_keys):
            # Not a stable sort: the keys are distinct, so there are no ties to keep in order, and on 20 M
            # random keys (the adjacency of a restart's whole epoch) it took 3.8 s against 1.35.
            order = np.argsort(new_keys)
            self._append(new_keys[order], _take(new_vals, order))
            self._settle()

    def discard(self, keys, vals=None) -> None:
        """Stop holding ``keys``; ones not held are ignored. With ``vals`` (one per key, a map only), only
        the keys held with that value: one search where a lookup and a discard would take two."""
        keys = np.asarray(keys, np.uint64)
        if not len(keys):
            return
        want = None if vals is None else np.asarray(vals, np.int64)
        for r, pos, at in self._find(keys):
            if want is not None:
                pos = pos[r.vals[pos] == want[at]]
            pos = pos[~r.dead[pos]]
            pos = unique(pos)  # a key given twice dies once
            r.dead[pos] = True
            r.n_dead += len(pos)
            self._dead += len(pos)
            self._live -= len(pos)
        if self._dead >= max(MIN_DEAD, DEAD_SHARE * self._live):
            self.compact()

    def range(self, lo: int, hi: int | None) -> tuple[np.ndarray, np.ndarray]:
        """The keys held in ``[lo, hi)`` (``hi`` None: to the last key), sorted, and their values (empty for a set)."""
        ks, vs = [], []
        for r in self._runs:
            a = int(np.searchsorted(r.keys, np.uint64(lo)))
            b = len(r.keys) if hi is None else int(np.searchsorted(r.keys, np.uint64(hi)))
            if a == b:
                continue
            alive = ~r.dead[a:b]
            ks.append(r.keys[a:b][alive])
            vs.append(_take(r.vals[a:b], alive))
        if not ks:
            return np.zeros(0, np.uint64), _NONE
        keys, vals = np.concatenate(ks), np.concatenate(vs)
        if len(ks) > 1:
            order = np.argsort(keys, kind="stable")
            keys, vals = keys[order], _take(vals, order)
        return keys, vals

    def span(self, lo: int, hi: int | None) -> int:
        """How many keys :meth:`range` reads for ``[lo, hi)`` (``hi`` None: to the last key): those held, and
        the dead ones not yet compacted (an upper bound on what it returns, at two binary searches per run)."""
        return sum((len(r.keys) if hi is None else int(np.searchsorted(r.keys, np.uint64(hi))))
                   - int(np.searchsorted(r.keys, np.uint64(lo))) for r in self._runs)

    def items(self) -> tuple[np.ndarray, np.ndarray]:
        """Every key held, sorted, and its value (empty for a set); compacts the index first."""
        self.compact()
        if not self._runs:
            return np.zeros(0, np.uint64), _NONE
        r = self._runs[0]
        return r.keys, r.vals

    def compact(self) -> None:
        """Merge every run into one, without the dead."""
        while len(self._runs) > 1:
            self._merge_last()
        if self._runs and self._runs[0].n_dead:
            r = self._runs.pop()
            self._dead -= r.n_dead
            self._append(*r.alive(), counted=True)

    def _append(self, keys: np.ndarray, vals: np.ndarray, counted: bool = False) -> None:
        if not len(keys):
            return
        self._runs.append(_Run(keys, vals, np.zeros(len(keys), bool)))
        if not counted:
            self._live += len(keys)

    def _settle(self) -> None:
        runs = self._runs
        while len(runs) > 1 and len(runs[-2].keys) <= FACTOR * len(runs[-1].keys):
            self._merge_last()

    def _merge_last(self) -> None:
        """Merge the newest run into the one before it, leaving their dead behind."""
        b = self._runs.pop()
        a = self._runs.pop()
        self._dead -= a.n_dead + b.n_dead
        (ka, va), (kb, vb) = a.alive(), b.alive()
        # A merge by position: each of the newer run's keys goes where searchsorted puts it in the
        # older one, shifted by the keys before it; the older run's keys fill the rest in order. No
        # sort, and no permutation array as long as both runs.
        at = np.searchsorted(ka, kb) + np.arange(len(kb))
        rest = np.ones(len(ka) + len(kb), bool)
        rest[at] = False
        keys = np.empty(len(rest), np.uint64)
        keys[at], keys[rest] = kb, ka
        vals = _NONE
        if self._values:
            vals = np.empty(len(rest), VALUE)
            vals[at], vals[rest] = vb, va
        self._append(keys, vals, counted=True)
