"""What a shard keeps to expire a sliding window exactly: its contributions, by event time.

With ``--window T`` the snapshot ``S_e`` holds exactly the transactions below
``V_e`` whose event time ``t`` satisfies ``W_e - T < t <= W_e`` (``W_e``: the
epoch's watermark, see :mod:`pulsegraph.snapshots.coordinator`). An edge's multiplicity,
weight sum and earliest add time are then sums and a minimum over its
contributions *inside* the window, so a shard must remember each contribution
until it leaves: :class:`TimeLog` holds them, in buckets of event time, and
hands back those at or below a bound in one call. The bound only grows (the
watermark is a maximum over a growing set), so what leaves never comes back and
a bucket below the bound is dropped whole; only the bucket the bound falls in
is split. Memory is the window's contributions, not the graph's history.

Buckets are an implementation detail, not part of the definition: every
contribution leaves exactly when the bound passes its own time.
"""

from __future__ import annotations

import math

import numpy as np

from pulsegraph.base.arrays import unique

# Buckets per window: the bound splits one of them per epoch (a sort of ~1/32 of the window's
# contributions), and a lookup of the earliest adds visits them oldest first.
BUCKETS_PER_WINDOW = 32


class TimeLog:
    """Rows ``(ts, key, sign, weight)`` kept until a bound passes their ``ts``.

    ``key`` is what a row belongs to (an edge slot, a vertex id); ``sign`` is +1 for
    an add, -1 for a removal (0 for rows that only mark a time, such as attribute
    writes); ``weight`` is signed fixed point.
    """

    COLUMNS = (("ts", np.float64), ("key", np.int64), ("sign", np.int8), ("weight", np.int64))

    def __init__(self, window: float) -> None:
        if not window > 0:
            raise ValueError(f"window must be positive, not {window!r}")
        self.window = float(window)
        self.width = self.window / BUCKETS_PER_WINDOW
        # bucket -> list of column tuples; a bucket is joined into one tuple (sorted by ts) when read.
        self._buckets: dict[int, list[tuple[np.ndarray, ...]]] = {}
        self._rows = 0

    def __len__(self) -> int:
        return self._rows

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for chunks in self._buckets.values() for chunk in chunks for c in chunk)

    def _bucket_of(self, ts: np.ndarray) -> np.ndarray:
        return np.floor(ts / self.width).astype(np.int64)

    def add(self, ts: np.ndarray, key: np.ndarray, sign: np.ndarray, weight: np.ndarray) -> None:
        if len(ts) == 0:
            return
        cols = (
            np.asarray(ts, dtype=np.float64), np.asarray(key, dtype=np.int64),
            np.asarray(sign, dtype=np.int8), np.asarray(weight, dtype=np.int64),
        )
        b = self._bucket_of(cols[0])
        order = np.argsort(b, kind="stable")
        sb = b[order]
        starts = np.flatnonzero(np.r_[True, sb[1:] != sb[:-1]])
        ends = np.r_[starts[1:], len(sb)]
        for s, e in zip(starts.tolist(), ends.tolist()):
            rows = order[s:e]
            self._buckets.setdefault(int(sb[s]), []).append(tuple(c[rows] for c in cols))
        self._rows += len(ts)

    def _joined(self, bucket: int) -> tuple[np.ndarray, ...]:
        chunks = self._buckets[bucket]
        if len(chunks) > 1 or not _sorted(chunks[0][0]):
            cols = [np.concatenate(c) for c in zip(*chunks)] if len(chunks) > 1 else list(chunks[0])
            order = np.argsort(cols[0], kind="stable")
            chunks[:] = [tuple(c[order] for c in cols)]
        return chunks[0]

    def expire(self, bound: float) -> tuple[np.ndarray, ...]:
        """Remove and return (as columns ``ts, key, sign, weight``) every row with ``ts <= bound``."""
        if not self._buckets or not math.isfinite(bound):
            return tuple(np.zeros(0, dtype=d) for _, d in self.COLUMNS)
        last = int(np.floor(bound / self.width))
        out = []
        for b in sorted(k for k in self._buckets if k <= last):
            cols = self._joined(b)
            cut = int(np.searchsorted(cols[0], bound, side="right"))
            if cut == 0:
                continue
            out.append(tuple(c[:cut] for c in cols))
            if cut == len(cols[0]):
                del self._buckets[b]
            else:
                self._buckets[b] = [tuple(c[cut:] for c in cols)]
        if not out:
            return tuple(np.zeros(0, dtype=d) for _, d in self.COLUMNS)
        got = tuple(np.concatenate(c) for c in zip(*out))
        self._rows -= len(got[0])
        return got

    def earliest_adds(self, keys: np.ndarray) -> np.ndarray:
        """Per key of ``keys`` (unique), the smallest ``ts`` among its rows with ``sign > 0`` (+inf: none).

        Buckets are visited oldest first and cover disjoint time ranges, so a key's first bucket
        with an add holds its earliest one, and the walk stops once every key is found."""
        keys = np.asarray(keys, dtype=np.int64)
        out = np.full(len(keys), np.inf)
        if not len(keys):
            return out
        order = np.argsort(keys)
        sorted_keys = keys[order]
        missing = np.ones(len(keys), dtype=bool)  # by position in sorted_keys
        for b in sorted(self._buckets):
            ts, key, sign, _ = self._joined(b)
            pos = np.searchsorted(sorted_keys, key)
            pos_c = np.minimum(pos, len(sorted_keys) - 1)
            hit = (sorted_keys[pos_c] == key) & (sign > 0)
            hit[hit] = missing[pos_c[hit]]
            if hit.any():
                # Rows are sorted by ts within the bucket: the first hit of each key is its earliest.
                p, t = pos_c[hit], ts[hit]
                first = np.unique(p, return_index=True)[1]
                out[order[p[first]]] = t[first]
                missing[p[first]] = False
                if not missing.any():
                    break
        return out

    def state(self) -> dict:
        return {
            "window": self.window,
            "buckets": {b: self._joined(b) for b in list(self._buckets)},
        }

    @classmethod
    def restore(cls, st: dict) -> "TimeLog":
        log = cls(st["window"])
        for b, cols in st["buckets"].items():
            log._buckets[int(b)] = [tuple(np.asarray(c) for c in cols)]
            log._rows += len(cols[0])
        return log


def _sorted(a: np.ndarray) -> bool:
    return len(a) < 2 or bool(np.all(a[1:] >= a[:-1]))


def drop_late(edge_parts: list, vertex_parts: list, bound: float) -> tuple[list, list, dict[str, np.ndarray]]:
    """Split off the rows whose event time is at or below ``bound``: they never enter the window.
    Every row of a transaction carries the transaction's time, so a transaction is late whole.
    Returns the parts left and, per partition, the offsets of the late transactions."""
    late: dict[str, list[np.ndarray]] = {}
    out = []
    for parts, ts_col in ((edge_parts, 6), (vertex_parts, 2)):
        kept = []
        for name, cols in parts:
            old = cols[ts_col] <= bound
            if old.any():
                late.setdefault(name, []).append(cols[0][old])
                cols = [c[~old] for c in cols]
            if len(cols[0]):
                kept.append((name, cols))
        out.append(kept)
    return out[0], out[1], {p: unique(np.concatenate(o)) for p, o in late.items()}
