"""A set of distinct ``(row, col)`` entries with value columns, kept across epochs: the storage of the applications' adjacency.

A table is a base (a row pointer and its entries' cols, int32 and sorted within each row: a CSR,
built at compaction and never written after) with an alive flag and value columns per base
entry, plus an overlay of entries added since, keyed ``row << 32 | col`` and sorted. An epoch
marks the base entries it removes dead, revives or rewrites the ones it re-adds, and inserts the
rest into the overlay: a binary search within the entry's row of the base and one in the overlay
per changed entry, and one copy of the overlay. A base entry costs 4 bytes of col and 1 of alive
flag. (A sorted int64 key per entry, the layout before, cost 8 and let one ``searchsorted`` find
it. The search within rows, in NumPy rounds, made the tables' share of an epoch ~27% slower in a
replay of the growing stream, for 23% less memory: ~12 bytes per live edge over the four tables;
BENCHMARKS.md.) When the overlay and the dead entries pass ``compact_fraction`` of the base, the
table is rebuilt from its own entries in O(entries + vertices): amortized, the work per epoch
follows the change.

Everything is flat arrays (no per-vertex Python objects), so a CuPy path can hold the bases on
the device as they are (searchsorted, gathers and masks have CuPy equivalents) and keep the
overlay's inserts on the host, as :mod:`pulsegraph.compute.resident` does with its overlay. Knows nothing
of graphs, epochs or applications.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from pulsegraph.base.arrays import gather_ranges, unique

# Entries are keyed by row << 32 | col: vertex ids stay below 2**31 (as in pulsegraph.compute.resident).
_SHIFT = np.int64(32)
_LOW = np.int64(0xFFFFFFFF)
# The overlay (and the dead base entries) may reach this share of the base before a rebuild.
# A rebuild costs O(entries + vertices); at a quarter, a stream that adds 2% of the graph an
# epoch rebuilds every ~12 epochs (BENCHMARKS.md: every 7-11 at 1.5-3.1 M edges), and the
# overlay copied on each insert stays a small part of an epoch.
COMPACT_FRACTION = 0.25
# Below this many overlay and dead entries a rebuild is never worth it (a few ms of searches).
COMPACT_MIN = 8192
# A frontier at least 1/16 of the rows reads the overlay through a per-row pointer built once
# (O(rows)) rather than two binary searches per frontier row.
_DENSE_FRONTIER = 16


def pack(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    return (np.asarray(rows, dtype=np.int64) << _SHIFT) | np.asarray(cols, dtype=np.int64)


def unpack(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (rows, cols) of :func:`pack`'s keys."""
    return keys >> _SHIFT, keys & _LOW


def _pack_rows(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """:func:`pack` of int64 ``rows`` and int32 ``cols`` in one new array (8 bytes an entry, not three)."""
    keys = rows << _SHIFT
    keys |= cols
    return keys


class Found(NamedTuple):
    """Where keys are in a :class:`RowTable`, key by key (-1: not there)."""

    base: np.ndarray  # position of a live base entry
    dead: np.ndarray  # position of a dead base entry
    overlay: np.ndarray  # position of an overlay entry
    where: np.ndarray  # where a key neither in the base nor the overlay would go in the overlay


class RowTable:
    """Distinct ``(row, col)`` entries with value columns, read row by row (see the module docstring).

    The base is a row pointer and the entries' cols (int32, sorted within each row: a lookup is a
    binary search within its row, a frontier row's entries are one range). ``ptr`` and ``col`` of a
    base are never written once built (a compaction replaces them), so a reader on another thread
    may keep them; ``alive`` and the value columns change in place."""

    def __init__(self, values: dict[str, type | np.dtype] | None = None, compact_fraction: float = COMPACT_FRACTION,
                 compact_min: int = COMPACT_MIN) -> None:
        self.dtypes = {k: np.dtype(v) for k, v in (values or {}).items()}
        self.compact_fraction = compact_fraction
        self.compact_min = compact_min
        self.n = 0  # rows addressable; the base covers the first len(ptr) - 1 of them
        self.ptr = np.zeros(1, dtype=np.int64)
        self.col = np.zeros(0, dtype=np.int32)
        self.alive = np.zeros(0, dtype=bool)
        self.vals = {k: np.zeros(0, dtype=dt) for k, dt in self.dtypes.items()}
        self.dead = 0
        self.ov_key = np.zeros(0, dtype=np.int64)
        self.ov_vals = {k: np.zeros(0, dtype=dt) for k, dt in self.dtypes.items()}
        self._ov_ptr: np.ndarray | None = None  # per-row pointer into the overlay, built on a dense frontier
        self.compactions = 0

    # -- building -----------------------------------------------------------------------------

    @classmethod
    def from_entries(cls, n: int, rows: np.ndarray, cols: np.ndarray, values: dict[str, np.ndarray] | None = None,
                     **kw) -> RowTable:
        """A table of distinct entries (any order) over ``n`` rows."""
        t = cls({k: v.dtype for k, v in (values or {}).items()}, **kw)
        rows, cols = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
        order = np.argsort(pack(rows, cols), kind="stable")
        t._set_base(n, np.bincount(rows, minlength=n), cols[order], {k: np.asarray(v)[order] for k, v in (values or {}).items()})
        return t

    @classmethod
    def from_csr(cls, indptr: np.ndarray, indices: np.ndarray, values: dict[str, np.ndarray] | None = None,
                 **kw) -> RowTable:
        """A table of a CSR's entries (distinct, cols sorted within rows) over its rows."""
        t = cls({k: v.dtype for k, v in (values or {}).items()}, **kw)
        t.n = len(indptr) - 1
        t.ptr = np.asarray(indptr, dtype=np.int64)
        t.col = np.asarray(indices, dtype=np.int32)
        t.alive = np.ones(len(t.col), dtype=bool)
        t.vals = {k: np.asarray(v, dtype=t.dtypes[k]) for k, v in (values or {}).items()}
        return t

    def _set_base(self, n: int, counts: np.ndarray, cols: np.ndarray, vals: dict[str, np.ndarray]) -> None:
        """The base from the entries per row (``counts``, over at most ``n`` rows), their cols in
        (row, col) order and their values; the overlay is emptied."""
        self.n = max(self.n, n, len(counts))
        self.ptr = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(counts, out=self.ptr[1 : len(counts) + 1])
        self.ptr[len(counts) + 1 :] = self.ptr[len(counts)]
        self.col = np.asarray(cols, dtype=np.int32)
        self.alive = np.ones(len(cols), dtype=bool)
        self.vals = {k: np.asarray(vals[k], dtype=dt) for k, dt in self.dtypes.items()}
        self.dead = 0
        self.ov_key = np.zeros(0, dtype=np.int64)
        self.ov_vals = {k: np.zeros(0, dtype=dt) for k, dt in self.dtypes.items()}
        self._ov_ptr = None

    def grow(self, n: int) -> None:
        """Make rows up to ``n - 1`` addressable (rows past the base have no base entries)."""
        if n > self.n:
            self.n = n
            self._ov_ptr = None

    @property
    def nnz(self) -> int:
        """Live entries."""
        return len(self.col) - self.dead + len(self.ov_key)

    @property
    def overlay(self) -> int:
        return len(self.ov_key)

    # -- finding ------------------------------------------------------------------------------

    def find(self, keys: np.ndarray) -> Found:
        """Where each key is (see :class:`Found`): one binary search in the base, one in the overlay for
        the keys the base does not hold."""
        base = np.full(len(keys), -1, dtype=np.int64)
        dead = np.full(len(keys), -1, dtype=np.int64)
        if len(self.col):
            rows, cols = keys >> _SHIFT, keys & _LOW
            pos, end = self._lower_bound(rows, cols)
            hit = pos < end
            hit[hit] = self.col[pos[hit]] == cols[hit]
            at = pos[hit]
            live = self.alive[at]
            base[np.flatnonzero(hit)[live]] = at[live]
            dead[np.flatnonzero(hit)[~live]] = at[~live]
        over = np.full(len(keys), -1, dtype=np.int64)
        where = np.zeros(len(keys), dtype=np.int64)
        # A key is never both in the base (alive or dead) and in the overlay: a dead one comes back in place.
        rest = np.flatnonzero((base < 0) & (dead < 0))
        if len(rest) and len(self.ov_key):
            pos = np.searchsorted(self.ov_key, keys[rest])
            where[rest] = pos
            hit = pos < len(self.ov_key)
            hit[hit] = self.ov_key[pos[hit]] == keys[rest[hit]]
            over[rest[hit]] = pos[hit]
        return Found(base, dead, over, where)

    def _lower_bound(self, rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per (row, col): the position of the row's first base entry whose col is not below ``col``
        (the row's end where there is none), and the row's end. A binary search within each row, all
        rows at once: as many rounds as the longest row searched has bits."""
        nb = len(self.ptr) - 1
        lo = self.ptr[np.minimum(rows, nb)]  # a row past the base: an empty range at the end
        end = self.ptr[np.minimum(rows + 1, nb)]
        col = self.col
        todo = np.flatnonzero(lo < end)
        # The searches still open, packed: a round is one gather from the cols and a few passes over
        # the open ones, which are set aside as they finish (a key in a short row after a round or two).
        a, b, c = lo[todo], end[todo], cols[todo]
        while len(todo):
            mid = (a + b) >> 1
            below = col[mid] < c
            a = np.where(below, mid + 1, a)
            b = np.where(below, b, mid)
            done = a >= b
            if done.any():
                lo[todo[done]] = a[done]
                left = ~done
                todo, a, b, c = todo[left], a[left], b[left], c[left]
        return lo, end

    def value(self, found: Found, name: str, default) -> np.ndarray:
        """The ``name`` value at positions from :meth:`find` (``default`` where there is no live entry)."""
        out = np.full(len(found.base), default, dtype=self.dtypes[name])
        b, o = found.base >= 0, found.overlay >= 0
        out[b] = self.vals[name][found.base[b]]
        out[o] = self.ov_vals[name][found.overlay[o]]
        return out

    def get(self, rows: np.ndarray, cols: np.ndarray, name: str, default) -> np.ndarray:
        """The ``name`` value of each (row, col) entry (``default`` where there is none)."""
        return self.value(self.find(pack(rows, cols)), name, default)

    # -- changing -----------------------------------------------------------------------------

    def assign(self, keys: np.ndarray, live: np.ndarray, values: dict[str, np.ndarray] | None = None,
               found: Found | None = None) -> None:
        """Distinct, sorted ``keys`` become live with ``values`` (every column) where ``live``, and go (if
        there) where not; ``found``: :meth:`find` of the same keys, when the caller has it already."""
        if not len(keys):
            return
        values = values or {}
        f = self.find(keys) if found is None else found
        self.grow(int((keys >> _SHIFT).max()) + 1)
        # Base entries die and come back in place (their slot stays until the next compaction).
        b = np.flatnonzero(f.base >= 0)
        if len(b):
            at, on = f.base[b], live[b]
            self.alive[at[~on]] = False
            self.dead += int(np.count_nonzero(~on))
            for k in self.dtypes:
                self.vals[k][at[on]] = values[k][b[on]]
        d = np.flatnonzero((f.dead >= 0) & live)
        if len(d):
            at = f.dead[d]
            self.alive[at] = True
            self.dead -= len(at)
            for k in self.dtypes:
                self.vals[k][at] = values[k][d]
        o = np.flatnonzero(f.overlay >= 0)
        drop = np.zeros(0, dtype=np.int64)
        if len(o):
            on = live[o]
            for k in self.dtypes:
                self.ov_vals[k][f.overlay[o[on]]] = values[k][o[on]]
            drop = f.overlay[o[~on]]  # sorted, as the keys are
        new = np.flatnonzero((f.base < 0) & (f.dead < 0) & (f.overlay < 0) & live)
        if len(drop) or len(new):
            # Insertion points were taken before the drops: each moves down by the drops before it.
            at = f.where[new] - np.searchsorted(drop, f.where[new])
            self.ov_key = np.insert(np.delete(self.ov_key, drop), at, keys[new])
            for k in self.dtypes:
                self.ov_vals[k] = np.insert(np.delete(self.ov_vals[k], drop), at, values[k][new])
            self._ov_ptr = None
        if len(self.ov_key) + self.dead > max(self.compact_min, self.compact_fraction * len(self.col)):
            self.compact()

    def upsert(self, rows: np.ndarray, cols: np.ndarray, values: dict[str, np.ndarray] | None = None) -> None:
        """Set distinct entries live with ``values`` (every column of the table)."""
        keys = pack(rows, cols)
        order = np.argsort(keys)
        self.assign(keys[order], np.ones(len(rows), dtype=bool), {k: np.asarray(v)[order] for k, v in (values or {}).items()})

    def remove(self, rows: np.ndarray, cols: np.ndarray) -> None:
        """Drop entries (those not there are ignored)."""
        keys = unique(pack(rows, cols))
        self.assign(keys, np.zeros(len(keys), dtype=bool), {k: np.zeros(len(keys), dt) for k, dt in self.dtypes.items()})

    def compact(self) -> None:
        """Rebuild the base from the live entries: no overlay, nothing dead. Counts per row from the row
        pointer, the dead entries and the overlay, and one array of keys to place the overlay: a row per
        entry and the keys made from it, four arrays in fresh pages, were most of a compaction."""
        nb = len(self.ptr) - 1
        counts = np.zeros(self.n, dtype=np.int64)
        counts[:nb] = np.diff(self.ptr)
        cols, vals = self.col, [self.vals[k] for k in self.dtypes]
        if self.dead:
            dead_at = np.flatnonzero(~self.alive)
            counts[:nb] -= np.bincount(np.searchsorted(self.ptr, dead_at, side="right") - 1, minlength=nb)
            keep = self.alive
            cols, vals = cols[keep], [v[keep] for v in vals]
        elif not len(self.ov_key):
            vals = [v.copy() for v in vals]  # values change in place; the cols of a base never do
        if len(self.ov_key):
            keys = np.repeat(np.arange(nb, dtype=np.int64) << _SHIFT, counts[:nb])  # the live entries' rows...
            keys |= cols  # ... and cols: one new array
            at = np.searchsorted(keys, self.ov_key)
            del keys
            rows = self.ov_key >> _SHIFT
            cols = np.insert(cols, at, (self.ov_key & _LOW).astype(np.int32))
            vals = [np.insert(v, at, self.ov_vals[k]) for v, k in zip(vals, self.dtypes)]
            counts += np.bincount(rows, minlength=self.n)
        self._set_base(self.n, counts, cols, dict(zip(self.dtypes, vals)))
        self.compactions += 1

    # -- reading ------------------------------------------------------------------------------

    @property
    def extent(self) -> int:
        """What a read of every row would take: the base's entries, dead ones too, and the overlay's."""
        return len(self.col) + len(self.ov_key)

    def reach(self, frontier: np.ndarray) -> np.ndarray:
        """The base entries of each frontier row, its dead ones counted: what :meth:`neighbors` reads of it, but for
        the overlay's (a bounded share of the base: ``compact_fraction``), left out so that this costs two gathers."""
        f = np.asarray(frontier, dtype=np.int64)
        nb = len(self.ptr) - 1
        return self.ptr[np.minimum(f + 1, nb)] - self.ptr[np.minimum(f, nb)]

    def neighbors(self, frontier: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The cols of the live entries of every frontier row (int64, in no particular order), and for
        each the position in ``frontier`` it came from."""
        f = np.asarray(frontier, dtype=np.int64)
        nb = len(self.ptr) - 1
        starts = self.ptr[np.minimum(f, nb)]
        pos, owner = gather_ranges(starts, self.ptr[np.minimum(f + 1, nb)] - starts)
        if self.dead and len(pos):
            keep = self.alive[pos]
            pos, owner = pos[keep], owner[keep]
        cols = self.col[pos].astype(np.int64)
        if not len(self.ov_key) or not len(f):
            return cols, owner
        if self._ov_ptr is None and len(f) * _DENSE_FRONTIER >= self.n:
            ptr = np.zeros(self.n + 1, dtype=np.int64)
            np.cumsum(np.bincount(self.ov_key >> _SHIFT, minlength=self.n), out=ptr[1:])
            self._ov_ptr = ptr
        if self._ov_ptr is not None:
            lo, hi = self._ov_ptr[f], self._ov_ptr[f + 1]
        else:
            lo, hi = np.searchsorted(self.ov_key, f << _SHIFT), np.searchsorted(self.ov_key, (f + 1) << _SHIFT)
        opos, oown = gather_ranges(lo, hi - lo)
        if not len(opos):
            return cols, owner
        return np.concatenate([cols, self.ov_key[opos] & _LOW]), np.concatenate([owner, oown])

    def _merged(self, *names: str) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """(rows (int64), cols (int32), [values of each name]) of every live entry, sorted by (row, col),
        as new arrays. The whole table is read here anyway, so the base's keys are made for once (8
        bytes an entry, while it runs) and place the overlay with one ``searchsorted``."""
        rows = np.repeat(np.arange(len(self.ptr) - 1, dtype=np.int64), np.diff(self.ptr))
        cols, vals = self.col, [self.vals[k] for k in names]
        if self.dead:
            keep = self.alive
            rows, cols, vals = rows[keep], cols[keep], [v[keep] for v in vals]
        elif not len(self.ov_key):
            cols, vals = cols.copy(), [v.copy() for v in vals]
        if len(self.ov_key):
            at = np.searchsorted(_pack_rows(rows, cols), self.ov_key)
            rows = np.insert(rows, at, self.ov_key >> _SHIFT)
            cols = np.insert(cols, at, (self.ov_key & _LOW).astype(np.int32))
            vals = [np.insert(v, at, self.ov_vals[k]) for v, k in zip(vals, names)]
        return rows, cols, vals

    def entries(self, *names: str) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """(rows, cols, [values of each name]) of every live entry, sorted by (row, col), as new int64
        rows and cols."""
        rows, cols, vals = self._merged(*names)
        return rows, cols.astype(np.int64), vals

    def csr(self, n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(indptr over ``n`` rows, cols) of the live entries, cols (int32) sorted within rows. Neither
        is written afterwards: the cols may be the base's own (never written once built)."""
        n = self.n if n is None else n
        nb = len(self.ptr) - 1
        if not self.dead and not len(self.ov_key) and n >= nb:
            return np.concatenate([self.ptr, np.full(n - nb, self.ptr[-1], dtype=np.int64)]), self.col
        rows, cols, _ = self._merged()
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n), out=ptr[1:])
        return ptr, cols

    def nbytes(self) -> int:
        arrays: list[np.ndarray] = [self.ptr, self.col, self.alive, self.ov_key, *self.vals.values(), *self.ov_vals.values()]
        return sum(a.nbytes for a in arrays) + (self._ov_ptr.nbytes if self._ov_ptr is not None else 0)
