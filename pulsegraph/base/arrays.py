"""NumPy helpers that every stage's hot paths share.

:func:`unique` is ``np.unique`` for the 1-D integer arrays of ids, slots and
offsets the stages pass around. NumPy 2.3 and later answer a plain
``np.unique`` of integers from a hash table, and on arrays like ours (millions
of ids, most of them distinct) that is 20-50 times slower than sorting: 2 M
int64 ids took ~2 s against ~65 ms by sorting (NumPy 2.4.6, this project's 2-core
machine), and a windowed epoch's merge and landmark repair spent a third of
their time there. Sorting gives the same answer, sorted, on every NumPy.
"""

from __future__ import annotations

import numpy as np


def unique(a) -> np.ndarray:
    """The sorted distinct values of ``a``, as ``np.unique(a)`` (flattened), by sorting for integers."""
    a = np.asarray(a)
    if a.dtype.kind not in "iub" or a.size < 2:
        return np.unique(a)
    s = np.sort(a, axis=None)
    keep = np.empty(len(s), dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def gather_ranges(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions ``starts[i] .. starts[i] + counts[i] - 1`` for every i, and for each the i it came from."""
    total = int(counts.sum()) if len(counts) else 0
    if total == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z
    owner = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    offs = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    return np.repeat(starts.astype(np.int64), counts) + offs, owner


# Below this many indexes per target entry, np.add.at's own loop beats a bincount over the whole target.
_BINCOUNT_SHARE = 1 / 16


def add_at(target: np.ndarray, idx: np.ndarray, step) -> None:
    """``np.add.at(target, idx, step)`` for an integer ``target`` and integer steps (a scalar or one per
    index). ``np.add.at`` runs ~10x slower than a ``bincount`` per index (64 against 7 ms for 500 k
    indexes into 2.8 M counts, NumPy 2.4.6); a bincount costs the whole target, so it serves the
    batches with indexes enough to pay for that. Sums stay exact: float64 holds the counts' integers."""
    idx = np.asarray(idx)
    if len(idx) < _BINCOUNT_SHARE * len(target):
        np.add.at(target, idx, step)
        return
    if np.ndim(step) == 0:
        sums = np.bincount(idx, minlength=len(target)) * int(step)
    else:
        sums = np.rint(np.bincount(idx, weights=step, minlength=len(target)))
    target += sums.astype(target.dtype)


def weighted_percentiles(values: np.ndarray, weights: np.ndarray, qs: tuple[float, ...]) -> list[float]:
    """The ``qs`` quantiles of ``values``, each counted ``weights`` times (the lowest value at or past each)."""
    if len(values) == 0:
        return [0.0 for _ in qs]
    order = np.argsort(values)
    v, w = values[order], weights[order]
    cum = np.cumsum(w) / w.sum()
    return [float(v[min(int(np.searchsorted(cum, q)), len(v) - 1)]) for q in qs]
