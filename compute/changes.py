"""The edges an epoch changed: :class:`EdgeChanges`, slot for slot as shards report them, and
:func:`by_edge`, which makes the rows edge for edge.

Owned by the compute stage's graph (:mod:`pulsegraph.compute.graph` makes them from the shards'
deltas); the applications, the results and the API's graph view read them. Plain arrays, nothing
else: no ids, shards or actors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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


def _rows(c: EdgeChanges, idx: np.ndarray) -> EdgeChanges:
    return EdgeChanges(c.src[idx], c.dst[idx], c.etype[idx], c.mult[idx], c.weight[idx],
                       None if c.first_ts is None else c.first_ts[idx])


def _nothing_at(c: EdgeChanges) -> EdgeChanges:
    """The edges of ``c`` with no multiplicity, weight or add time: an edge that is not there."""
    k = len(c)
    return EdgeChanges(c.src, c.dst, c.etype, np.zeros(k, np.int64), np.zeros(k, np.int64), np.full(k, np.inf))


def by_edge(after: EdgeChanges, before: EdgeChanges, moved: bool = True) -> tuple[EdgeChanges, EdgeChanges]:
    """Slot-for-slot (after, before) turned into edge-for-edge rows: each row's before and after name
    the same (src, dst, type), and each edge is one row.

    A slot whose before held another edge (slot reuse, window mode) splits into that edge going to
    nothing and the new edge coming from nothing; a fresh slot's before (all zeros) takes the new
    edge's key. With ``moved`` (window mode: an edge can leave a dead slot and come back in another
    within one batch) rows of the same edge merge: its before is the slot that was live before (a
    shard keeps at most one live slot per edge), its after the slot live after, else any. Outside
    window mode edges keep their slots, and only the fresh slots' keys are set."""
    other = (before.src != after.src) | (before.dst != after.dst) | (before.etype != after.etype)
    empty = (before.mult == 0) & (before.weight == 0)
    split = other & ~empty
    fresh = np.flatnonzero(other & empty)
    if len(fresh):
        before = _rows(before, np.arange(len(before)))  # copies: the fresh rows take the new key
        before.src[fresh], before.dst[fresh], before.etype[fresh] = after.src[fresh], after.dst[fresh], after.etype[fresh]
    if split.any():
        keep = np.flatnonzero(~split)
        cut = np.flatnonzero(split)
        old = _rows(before, cut)
        new = _rows(after, cut)
        after = EdgeChanges.concat([_rows(after, keep), _nothing_at(old), new])
        before = EdgeChanges.concat([_rows(before, keep), old, _nothing_at(new)])
    if not moved or len(after) < 2:
        return after, before
    order = np.lexsort((after.etype, after.dst, after.src))
    s, d, t = after.src[order], after.dst[order], after.etype[order]
    starts = np.flatnonzero(np.concatenate([[True], (s[1:] != s[:-1]) | (d[1:] != d[:-1]) | (t[1:] != t[:-1])]))
    if len(starts) == len(after):
        return after, before
    group = np.repeat(np.arange(len(starts)), np.diff(np.concatenate([starts, [len(order)]])))

    def pick(c: EdgeChanges) -> EdgeChanges:
        # Per edge the row whose state is live (at most one), else the first.
        live = (c.mult[order] > 0).astype(np.int64)
        best = np.lexsort((-live, group))  # by group, live first
        first = best[np.searchsorted(group[best], np.arange(len(starts)))]
        return _rows(c, order[first])

    return pick(after), pick(before)
