"""Approximate shortest paths by landmarks: BFS distances to and from the top vertices by TunkRank.

The landmarks are the top ``count`` vertices by TunkRank. They are re-chosen only
when more than ``drift`` of them have left the top set (so the distances, and
the API's history of them, stay put while the ranking jitters); a landmark that
stays keeps its distances, a new one gets a fresh BFS.

Distances are hop counts over every live edge, directed (``INF``: unreachable).
Per epoch, with the pairs that appeared and went:

* a gone pair (s, d) can only lengthen distances, and only for a landmark whose
  BFS tree may have used it (``from[d] == from[s] + 1``, or ``to[s] == to[d] + 1``):
  those landmark directions are recomputed by a fresh BFS on the new graph;
* a new pair can only shorten distances: the others relax from its endpoint
  outwards, frontier by frontier, until nothing improves.

The estimate of d(a, b) is ``min over l of to_l[a] + from_l[b]``: never below the
true distance, and equal to it when a shortest path passes a landmark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from compute.apps.base import INF, AppDelta, AppGraph, Application, Neighbors

# Published distances are uint16; a hop count this large (or INF) reads as unreachable.
UNREACHABLE = np.uint16(65535)


def bfs(adj: Neighbors, source: int, n: int) -> np.ndarray:
    """Hop distances from ``source`` along ``adj``'s rows (int32, ``INF`` where unreachable)."""
    dist = np.full(n, INF, dtype=np.int32)
    if not 0 <= source < n:
        return dist
    dist[source] = 0
    frontier = np.array([source], dtype=np.int64)
    level = 0
    while len(frontier):
        level += 1
        nbrs, _ = adj.neighbors(frontier)
        nbrs = np.unique(nbrs[dist[nbrs] == INF])
        dist[nbrs] = level
        frontier = nbrs
    return dist


def relax(adj: Neighbors, dist: np.ndarray, seeds: np.ndarray, seed_dist: np.ndarray) -> None:
    """Lower ``dist`` in place where the new paths through ``seeds`` (reached at ``seed_dist``) are shorter."""
    better = seed_dist < dist[seeds]
    if not better.any():
        return
    seeds, seed_dist = seeds[better], seed_dist[better]
    np.minimum.at(dist, seeds, seed_dist.astype(np.int32))
    frontier = np.unique(seeds)
    while len(frontier):
        nbrs, owner = adj.neighbors(frontier)
        cand = dist[frontier][owner] + 1
        improves = cand < dist[nbrs]
        if not improves.any():
            break
        nbrs, cand = nbrs[improves], cand[improves]
        np.minimum.at(dist, nbrs, cand.astype(np.int32))
        frontier = np.unique(nbrs)


def _buffer(rows: int, n: int) -> np.ndarray:
    """``INF`` distances for ``rows`` landmarks with room for ``n`` vertices and a quarter more: a growing
    graph's new vertices then cost their own columns, not a copy of every landmark's row each epoch."""
    return np.full((rows, n + n // 4 + 1024), INF, dtype=np.int32)


def _room(buf: np.ndarray, n: int) -> np.ndarray:
    """``buf`` while it has room for ``n`` vertices, else a larger copy (columns past the graph hold ``INF``)."""
    if buf.shape[1] >= n:
        return buf
    out = _buffer(len(buf), n)
    out[:, : buf.shape[1]] = buf
    return out


@dataclass
class LandmarkState:
    ids: np.ndarray  # int64[L]: the landmark vertex ids, best TunkRank first when chosen
    from_buf: np.ndarray  # int32[L, capacity]: hops from landmark l to v in the first n columns, INF past them
    to_buf: np.ndarray  # the same, from v to landmark l
    n: int
    rechosen: bool = False

    @property
    def dist_from(self) -> np.ndarray:
        """int32[L, n]: hops from landmark l to v (a view: writes go to the state)."""
        return self.from_buf[:, : self.n]

    @property
    def dist_to(self) -> np.ndarray:
        """int32[L, n]: hops from v to landmark l (a view)."""
        return self.to_buf[:, : self.n]


class Landmarks(Application):
    name = "landmarks"

    def __init__(self, count: int = 16, drift: float = 0.25, score: str = "tunkrank") -> None:
        self.count = count
        self.drift = drift
        self.score = score
        self.bfs_runs = 0  # for tests: how many landmark directions were recomputed from scratch

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

    def _fresh(self, graph: AppGraph, l: int) -> tuple[np.ndarray, np.ndarray]:
        self.bfs_runs += 2
        return bfs(graph.out, l, graph.n), bfs(graph.inn, l, graph.n)

    def initialize(self, graph: AppGraph) -> LandmarkState:
        ids = self.choose(graph)
        L, n = len(ids), graph.n
        state = LandmarkState(ids, _buffer(L, n), _buffer(L, n), n, True)
        dist_from, dist_to = state.dist_from, state.dist_to
        for i, l in enumerate(ids.tolist()):
            dist_from[i], dist_to[i] = self._fresh(graph, l)
        return state

    def update(self, graph: AppGraph, delta: AppDelta, previous: LandmarkState) -> LandmarkState:
        n = graph.n
        # Updated in place (the contract allows it): new vertices are the INF columns past the old n.
        state = LandmarkState(previous.ids, _room(previous.from_buf, n), _room(previous.to_buf, n), n)
        dist_from, dist_to = state.dist_from, state.dist_to
        ids = previous.ids
        top = self.choose(graph)
        rechosen = False
        if len(ids) < min(self.count, len(top)) or np.count_nonzero(~np.isin(ids, top)) > self.drift * max(len(ids), 1):
            keep = {int(l): i for i, l in enumerate(ids.tolist())}
            state = LandmarkState(top, _buffer(len(top), n), _buffer(len(top), n), n)
            new_from, new_to = state.dist_from, state.dist_to
            fresh = np.zeros(len(top), dtype=bool)
            for j, l in enumerate(top.tolist()):
                if l in keep:
                    new_from[j], new_to[j] = dist_from[keep[l]], dist_to[keep[l]]
                else:
                    new_from[j], new_to[j] = self._fresh(graph, l)
                    fresh[j] = True
            ids, dist_from, dist_to, rechosen = top, new_from, new_to, True
        else:
            fresh = np.zeros(len(ids), dtype=bool)
        ds, dd = delta.deleted()
        is_, id_ = delta.inserted()
        for j, l in enumerate(ids.tolist()):
            if fresh[j]:
                continue
            df, dt = dist_from[j], dist_to[j]
            if len(ds) and bool(np.any((df[ds] < INF) & (df[dd] == df[ds] + 1))):
                self.bfs_runs += 1
                dist_from[j] = bfs(graph.out, l, n)
            elif len(is_):
                relax(graph.out, df, id_, df[is_] + 1)
            if len(ds) and bool(np.any((dt[dd] < INF) & (dt[ds] == dt[dd] + 1))):
                self.bfs_runs += 1
                dist_to[j] = bfs(graph.inn, l, n)
            elif len(is_):
                relax(graph.inn, dt, is_, dt[id_] + 1)
        state.rechosen = rechosen
        return state

    def publish(self, state: LandmarkState) -> dict:
        def small(d: np.ndarray) -> np.ndarray:
            return np.minimum(d, UNREACHABLE).astype(np.uint16)  # distances are never negative

        return {"ids": state.ids.astype(np.int32), "from": small(state.dist_from), "to": small(state.dist_to)}


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
        nb = np.unique(neighbors(cur))
        closer = nb[dist_of(nb) == d - 1] if len(nb) else nb
        if not len(closer):
            raise ValueError(f"no neighbor of {cur} is {d - 1} hops from the landmark")
        cur = int(closer[0])
        path.append(cur)
        d -= 1
    return path
