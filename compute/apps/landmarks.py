"""Approximate shortest paths by landmarks: BFS distances to and from the top vertices by TunkRank.

The landmarks are the top ``count`` vertices by TunkRank. They are re-chosen only
when more than ``drift`` of them have left the top set (so the distances, and
the API's history of them, stay put while the ranking jitters); a landmark that
stays keeps its distances, a new one gets a fresh BFS.

Distances are hop counts over every live edge, directed, kept as uint16 (``UNREACHABLE``:
none; a path of that many hops or more reads as none, as the published distances always
did): 16 landmarks both ways cost 64 bytes a vertex, where int32 cost 128.
Per epoch, with the pairs that appeared and went:

* a gone pair (s, d) can only lengthen distances, and only where a shortest path
  may have used it (``from[d] == from[s] + 1``, or ``to[s] == to[d] + 1``): such a
  vertex keeps its distance if another vertex one hop nearer still leads to it;
  the ones that do not (and, level by level, the ones that hung on them alone)
  lose their distances and get them back by relaxing from the vertices around
  them that kept theirs (:func:`repair`, in the manner of Ramalingam and Reps
  1996). The work follows the region the deletions cut off, not the graph: on a
  windowed graph edges expire every epoch, and a fresh BFS of every landmark
  each epoch was most of the compute stage's time;
* a new pair can only shorten distances: the others relax from its endpoint
  outwards, frontier by frontier, until nothing improves.

The estimate of d(a, b) is ``min over l of to_l[a] + from_l[b]``: never below the
true distance, and equal to it when a shortest path passes a landmark.

An epoch publishes the distances it wrote (a :class:`~pulsegraph.compute.apps.base.Patch` of the
epoch published before), not 64 bytes a vertex: at 3 M vertices the whole arrays
were three quarters of every result the compute actor put in Ray's object store and
the API copied and compared. Whole arrays go out when the landmarks are chosen anew,
when the patch would name more than :data:`PATCH_SHARE` of the entries, and when a
consumer asks (:meth:`Landmarks.resend_whole`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from pulsegraph.base.arrays import unique
from pulsegraph.compute.apps.base import (
    AppDelta,
    AppGraph,
    Application,
    AppResult,
    Neighbors,
    Patch,
    neighbors_in_slices,
)

# Distances are uint16, in the state and as published; this value (the largest) is "no path".
HOPS = np.uint16
UNREACHABLE = HOPS(65535)
# An epoch's distances go out as a patch (10 bytes an entry: key and value) while it names at most this
# share of the entries; past it, as the whole arrays (2 bytes an entry): about as many bytes to send by
# then, and a copy to apply rather than a scatter.
PATCH_SHARE = 0.125


def _plus_one(d: np.ndarray) -> np.ndarray:
    """Hops one further, in int32: ``UNREACHABLE + 1`` must not wrap round to 0 in uint16."""
    return d.astype(np.int32) + 1


def bfs(adj: Neighbors, source: int, n: int) -> np.ndarray:
    """Hop distances from ``source`` along ``adj``'s rows (uint16, ``UNREACHABLE`` where there is no path,
    or a path of ``UNREACHABLE`` hops or more): :func:`bfs_many` of one source."""
    return bfs_many(adj, np.array([source], dtype=np.int64), n)[0]


# A level with more vertices than this share of the graph is read back from a pass over n instead of
# sorted (m log m): on a live feed's graph, whose edges expire and come every epoch, the landmarks' BFS
# runs every epoch, and sorting its big levels was most of an epoch's time.
_SCAN_SHARE = 1 / 32

# Sources traversed together by :func:`bfs_many`: one bit each in a uint64 per vertex.
_LANES = 64


def bfs_many(adj: Neighbors, sources: np.ndarray, n: int, out: np.ndarray | None = None) -> np.ndarray:
    """:func:`bfs` from each of ``sources``, one row each (uint16), in one traversal for up to 64 of them;
    into ``out`` (``len(sources)`` rows of ``n``, every entry ``UNREACHABLE``) when given.

    Multi-source BFS (Then et al., "The More the Merrier", VLDB 2014): every vertex carries a bit per source
    that has reached it, and a level expands each vertex once for all the sources that reached it at the
    level before, so the rows reached by many sources (a small-world graph's core: all of them, a hop or two
    apart) are read once per level instead of once per source. From 16 sources over a skewed 10 M-edge
    graph it read 3.4 edges per edge, where 16 BFS read up to 16 (1.7-2.1x as fast, in NumPy); in the
    whole-graph epoch of a replay the landmarks took 0.9-1.4 s where they took 4.5-4.9.
    """
    sources = np.asarray(sources, dtype=np.int64)
    dist = np.full((len(sources), n), UNREACHABLE, dtype=HOPS) if out is None else out
    for lo in range(0, len(sources), _LANES):
        _bfs_lanes(adj, sources[lo:lo + _LANES], n, dist[lo:lo + _LANES])
    return dist


def _bfs_lanes(adj: Neighbors, sources: np.ndarray, n: int, dist: np.ndarray) -> None:
    """:func:`bfs_many` for at most 64 sources, into their rows ``dist`` (all ``UNREACHABLE``)."""
    # The narrowest mask that holds a bit per source: 16 landmarks move 2 bytes a vertex, not 8.
    mask: Any = next(t for t in (np.uint8, np.uint16, np.uint32, np.uint64) if np.iinfo(t).bits >= len(sources))
    seen = np.zeros(n, dtype=mask)  # bit i: source i has reached the vertex
    lanes = [(i, int(s)) for i, s in enumerate(sources.tolist()) if 0 <= s < n]
    for i, s in lanes:
        dist[i, s] = 0
        seen[s] |= mask(1 << i)
    frontier = unique(np.array([s for _, s in lanes], dtype=np.int64))
    reached = seen[frontier]  # what each frontier vertex passes on: the sources that reached it last level
    gained = np.zeros(n, dtype=mask)
    one = mask(1)
    level = 0
    while len(frontier):
        level += 1
        if level >= UNREACHABLE:
            break  # what is further away reads as unreachable (uint16 hops)
        found: list[np.ndarray] = []  # the vertices reached anew, per slice of the frontier's rows
        for nbrs, owner in neighbors_in_slices(adj, frontier):
            bits = reached[owner] & ~seen[nbrs]
            new = bits != 0
            nbrs, bits = nbrs[new], bits[new]
            np.bitwise_or.at(gained, nbrs, bits)
            found.append(nbrs)
        if not any(len(f) for f in found):
            break
        scan = sum(len(f) for f in found) > _SCAN_SHARE * n
        frontier = np.flatnonzero(gained) if scan else unique(_joined(found))
        del found
        reached = gained[frontier]
        gained[frontier] = 0
        seen[frontier] |= reached
        for i, _ in lanes:
            dist[i, frontier[(reached >> mask(i)) & one != 0]] = level


def _joined(slices: list[np.ndarray]) -> np.ndarray:
    """The slices' arrays as one (no copy for the one slice of a frontier read whole)."""
    return slices[0] if len(slices) == 1 else np.concatenate(slices)


def relax(adj: Neighbors, dist: np.ndarray, seeds: np.ndarray, seed_dist: np.ndarray, written: list | None = None) -> None:
    """Lower ``dist`` in place where the new paths through ``seeds`` (reached at ``seed_dist``, in int32 so
    that a seed past ``UNREACHABLE`` stays past it) are shorter. ``written`` gets the vertices lowered."""
    better = seed_dist < dist[seeds]
    if not better.any():
        return
    seeds, seed_dist = seeds[better], seed_dist[better]
    np.minimum.at(dist, seeds, seed_dist.astype(dist.dtype))
    frontier = unique(seeds)
    while len(frontier):
        if written is not None:
            written.append(frontier)
        # The frontier's distances as the level starts; a slice lowering one of them (a path it closes) only
        # adds that vertex to the next level, as a whole read would.
        start = _plus_one(dist[frontier])
        lowered: list[np.ndarray] = []
        for nbrs, owner in neighbors_in_slices(adj, frontier):
            cand = start[owner]
            improves = cand < dist[nbrs]  # a candidate of UNREACHABLE hops or more never improves
            nbrs, cand = nbrs[improves], cand[improves]
            np.minimum.at(dist, nbrs, cand.astype(dist.dtype))
            lowered.append(nbrs)
        frontier = unique(_joined(lowered))


def repair(fwd: Neighbors, back: Neighbors, dist: np.ndarray, suspects: np.ndarray, written: list | None = None) -> int:
    """Fix ``dist`` (hops along ``fwd``, as before some pairs were deleted) in place for the graph as it
    is now. ``suspects``: the vertices that lost a pair from a vertex one hop nearer; ``back`` reads a
    vertex's predecessors along ``fwd``. Returns how many vertices lost their distance and were re-derived;
    ``written`` gets them, and the vertices the relaxing after it lowered.

    Levels are settled nearest first, so a vertex's predecessors one hop nearer are final when it is
    looked at: it keeps its distance exactly when one of them kept its own (by induction on the
    distance, every vertex that kept a supporting predecessor is still at its old distance)."""
    cand = unique(suspects)
    cand = cand[(dist[cand] > 0) & (dist[cand] < UNREACHABLE)]  # the landmark itself and the unreachable never lose
    if not len(cand):
        return 0
    detached = np.zeros(len(dist), dtype=bool)
    pending: dict[int, list[np.ndarray]] = {}
    for level in unique(dist[cand]).tolist():
        pending[level] = [cand[dist[cand] == level]]
    lost_all = []
    while pending:
        level = min(pending)
        c = unique(np.concatenate(pending.pop(level)))
        c = c[~detached[c]]
        if not len(c):
            continue
        supported = np.zeros(len(c), dtype=bool)
        for preds, owner in neighbors_in_slices(back, c):
            supported[owner[(dist[preds] == level - 1) & ~detached[preds]]] = True
        lost = c[~supported]
        if not len(lost):
            continue
        detached[lost] = True
        lost_all.append(lost)
        for children, _ in neighbors_in_slices(fwd, lost):
            children = children[(dist[children] == level + 1) & ~detached[children]]
            if len(children):
                pending.setdefault(level + 1, []).append(children)
    if not lost_all:
        return 0
    gone = np.concatenate(lost_all)
    dist[gone] = UNREACHABLE
    if written is not None:
        written.append(gone)
    # Back from the vertices around the cut-off region that kept their distances (each slice relaxes all the way:
    # the distances only come down, to the same ones in any order).
    for preds, owner in neighbors_in_slices(back, gone):
        ok = dist[preds] < UNREACHABLE
        if ok.any():
            relax(fwd, dist, gone[owner[ok]], _plus_one(dist[preds[ok]]), written)
    return len(gone)


def _buffer(rows: int, n: int) -> np.ndarray:
    """``UNREACHABLE`` distances for ``rows`` landmarks with room for ``n`` vertices and a quarter more: a
    growing graph's new vertices then cost their own columns, not a copy of every landmark's row each epoch."""
    return np.full((rows, n + n // 4 + 1024), UNREACHABLE, dtype=HOPS)


def _room(buf: np.ndarray, n: int) -> np.ndarray:
    """``buf`` while it has room for ``n`` vertices, else a larger copy (columns past the graph hold ``UNREACHABLE``)."""
    if buf.shape[1] >= n:
        return buf
    out = _buffer(len(buf), n)
    out[:, : buf.shape[1]] = buf
    return out


@dataclass
class LandmarkState:
    ids: np.ndarray  # int64[L]: the landmark vertex ids, best TunkRank first when chosen
    from_buf: np.ndarray  # uint16[L, capacity]: hops from landmark l to v in the first n columns, UNREACHABLE past them
    to_buf: np.ndarray  # the same, from v to landmark l
    n: int
    rechosen: bool = False
    epoch: int = 0  # the epoch this state is as of
    # Since the state of epoch ``base`` (the one published before): per landmark, the vertices whose distance
    # to it and from it the update wrote. None: every landmark's distances are new (chosen, re-chosen).
    base: int | None = None
    written_to: list[list[np.ndarray]] | None = None
    written_from: list[list[np.ndarray]] | None = None

    @property
    def dist_from(self) -> np.ndarray:
        """uint16[L, n]: hops from landmark l to v (a view: writes go to the state)."""
        return self.from_buf[:, : self.n]

    @property
    def dist_to(self) -> np.ndarray:
        """uint16[L, n]: hops from v to landmark l (a view)."""
        return self.to_buf[:, : self.n]


@dataclass(frozen=True)
class LandmarksResult(AppResult):
    """Hops (uint16; UNREACHABLE: none) between each landmark and every vertex: ``dist_to[l, v]`` from v
    to landmark l, ``dist_from[l, v]`` from l to v; ``ids``: the landmarks' vertex ids."""

    PER_VERTEX: ClassVar[tuple[str, ...]] = ("dist_to", "dist_from")
    ids: np.ndarray
    dist_to: np.ndarray | Patch | None
    dist_from: np.ndarray | Patch | None


class Landmarks(Application):
    name = "landmarks"
    result = LandmarksResult

    def __init__(self, count: int = 16, drift: float = 0.25, score: str = "tunkrank") -> None:
        self.count = count
        self.drift = drift
        self.score = score
        self.bfs_runs = 0  # for tests: how many landmark directions were recomputed from scratch
        self.repaired = 0  # for tests and benchmarks: vertices whose distance a deletion took and repair re-derived
        self._whole = False  # the next publish sends whole arrays (resend_whole)

    def choose(self, graph: AppGraph) -> np.ndarray:
        """The top ``count`` vertices by the score, ties by id (those with no edge at all are no use)."""
        n = graph.n
        scores = graph.scores.get(self.score)
        if scores is None or len(scores) < n:
            scores = graph.in_degree().astype(np.float64)  # before any ranking: in-degree
        scores = np.asarray(scores[:n], dtype=np.float64)
        has_edge = (graph.out_degree() + graph.in_degree()) > 0
        cand = np.flatnonzero(has_edge)
        s = scores[cand]
        if len(cand) > 4 * self.count:
            # Only the candidates at least as good as the count-th best can be chosen (ties at it all stay,
            # for the order by id): a partition instead of a sort of every vertex each epoch.
            kth = np.partition(s, len(s) - self.count)[len(s) - self.count]
            if np.isfinite(kth):
                keep = s >= kth
                cand, s = cand[keep], s[keep]
        order = cand[np.lexsort((cand, -s))]
        return order[: self.count].astype(np.int64)

    def _fresh(self, graph: AppGraph, landmarks: np.ndarray, dist_from: np.ndarray | None = None,
               dist_to: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Distances from and to each of ``landmarks`` (one row each; into the rows given, all
        ``UNREACHABLE``), two traversals for all of them."""
        self.bfs_runs += 2 * len(landmarks)
        return bfs_many(graph.out, landmarks, graph.n, dist_from), bfs_many(graph.inn, landmarks, graph.n, dist_to)

    def initialize(self, graph: AppGraph) -> LandmarkState:
        ids = self.choose(graph)
        L, n = len(ids), graph.n
        state = LandmarkState(ids, _buffer(L, n), _buffer(L, n), n, True, graph.epoch)
        self._fresh(graph, ids, state.dist_from, state.dist_to)
        return state

    def update(self, graph: AppGraph, delta: AppDelta, previous: LandmarkState) -> LandmarkState:
        n = graph.n
        # Updated in place (the contract allows it): new vertices are the UNREACHABLE columns past the old n.
        state = LandmarkState(previous.ids, _room(previous.from_buf, n), _room(previous.to_buf, n), n, epoch=graph.epoch)
        dist_from, dist_to = state.dist_from, state.dist_to
        ids = previous.ids
        top = self.choose(graph)
        rechosen = False
        if len(ids) < min(self.count, len(top)) or np.count_nonzero(~np.isin(ids, top)) > self.drift * max(len(ids), 1):
            keep = {int(l): i for i, l in enumerate(ids.tolist())}
            state = LandmarkState(top, _buffer(len(top), n), _buffer(len(top), n), n, epoch=graph.epoch)
            new_from, new_to = state.dist_from, state.dist_to
            fresh = np.zeros(len(top), dtype=bool)
            for j, l in enumerate(top.tolist()):
                if l in keep:
                    new_from[j], new_to[j] = dist_from[keep[l]], dist_to[keep[l]]
                else:
                    fresh[j] = True
            if fresh.any():
                new_from[fresh], new_to[fresh] = self._fresh(graph, top[fresh])
            ids, dist_from, dist_to, rechosen = top, new_from, new_to, True
        else:
            fresh = np.zeros(len(ids), dtype=bool)
        ds, dd = delta.deleted()
        is_, id_ = delta.inserted()
        w_from: list[list[np.ndarray]] = [[] for _ in range(len(ids))]
        w_to: list[list[np.ndarray]] = [[] for _ in range(len(ids))]
        for j, l in enumerate(ids.tolist()):
            if fresh[j]:
                continue
            df, dt = dist_from[j], dist_to[j]
            if len(ds):
                self.repaired += repair(graph.out, graph.inn, df, dd[(df[ds] < UNREACHABLE) & (df[dd] == _plus_one(df[ds]))], w_from[j])
                self.repaired += repair(graph.inn, graph.out, dt, ds[(dt[dd] < UNREACHABLE) & (dt[ds] == _plus_one(dt[dd]))], w_to[j])
            if len(is_):
                relax(graph.out, df, id_, _plus_one(df[is_]), w_from[j])
                relax(graph.inn, dt, is_, _plus_one(dt[id_]), w_to[j])
        state.rechosen = rechosen
        if not rechosen:
            state.base, state.written_to, state.written_from = previous.epoch, w_to, w_from
        return state

    def publish(self, state: LandmarkState) -> LandmarksResult:
        """The epoch's distances: a patch of the epoch published before, or the whole arrays. Lets go of
        what the update wrote (once published, a second publish of the state sends whole arrays)."""
        ids = state.ids.astype(np.int32)
        base, written_to, written_from = state.base, state.written_to or [], state.written_from or []
        state.base = state.written_to = state.written_from = None
        if base is not None and not self._whole:
            limit = int(PATCH_SHARE * state.dist_to.size)
            to = Patch.of(base, state.dist_to, written_to, limit)
            frm = Patch.of(base, state.dist_from, written_from, limit) if to is not None else None
            if to is not None and frm is not None:
                return LandmarksResult(ids, to, frm)
        self._whole = False
        # Copies: the state is updated in place by the next epoch, and already in the published form.
        return LandmarksResult(ids, state.dist_to.copy(), state.dist_from.copy())

    def resend_whole(self) -> None:
        self._whole = True


def estimate(to_a: np.ndarray, from_b: np.ndarray) -> tuple[int | None, int | None]:
    """``(min over l of to_l[a] + from_l[b], the index of that l)`` from the rows of two vertices
    (published uint16 distances); ``(None, None)`` when no landmark connects them. Ties: the first landmark."""
    to_a = np.asarray(to_a, dtype=np.int64)
    from_b = np.asarray(from_b, dtype=np.int64)
    ok = (to_a < UNREACHABLE) & (from_b < UNREACHABLE)
    if not ok.any():
        return None, None
    total = np.where(ok, to_a + from_b, np.iinfo(np.int64).max)
    j = int(np.argmin(total))
    return int(total[j]), j


def descend(start: int, dist_of: Callable[[np.ndarray], np.ndarray], neighbors: Callable[[int], np.ndarray]) -> list[int]:
    """A shortest path down a BFS distance field: from ``start`` step to a neighbor one hop closer (the smallest id
    among them) until distance 0. ``dist_of(ids)`` reads the field, ``neighbors(v)`` the graph in the walking direction.
    Raises ValueError when the field and the graph disagree (they must be of the same epoch)."""
    path = [start]
    cur = start
    d = int(dist_of(np.array([cur]))[0])
    while d > 0:
        nb = unique(neighbors(cur))
        closer = nb[dist_of(nb) == d - 1] if len(nb) else nb
        if not len(closer):
            raise ValueError(f"no neighbor of {cur} is {d - 1} hops from the landmark")
        cur = int(closer[0])
        path.append(cur)
        d -= 1
    return path
