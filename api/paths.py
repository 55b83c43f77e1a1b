"""``/v1/paths``: the landmark estimate of a distance, its path, and a budgeted bidirectional BFS that confirms it.

Reads only the store: landmark distances as of the epoch (:class:`~pulsegraph.api.history.ArrayHistory`)
and the graph as of the epoch (:class:`~pulsegraph.api.graph.GraphHistory`), so an answer
is about one epoch throughout.
"""

from __future__ import annotations

import numpy as np

from pulsegraph.api.queries import app_result
from pulsegraph.api.store import EpochView, ResultStore
from pulsegraph.compute.apps.landmarks import (
    UNREACHABLE,
    LandmarksResult,
    descend,
    estimate,
)

# How many vertices the confirming BFS may expand when the server is not told otherwise: each is one
# neighbors lookup (~10 us), so the worst case stays around 20 ms per request.
DEFAULT_PATH_BFS_BUDGET = 2000


def _nbrs(store: ResultStore, epoch: int, direction: str):
    def get(v: int) -> np.ndarray:
        return store.graph.neighbors(v, direction, epoch)[0].astype(np.int64)

    return get


def bidirectional_bfs(store: ResultStore, epoch: int, a: int, b: int, budget: int) -> int | None:
    """The true distance a -> b (-1: no path), or None when it is not settled within ``budget`` expanded vertices."""
    if a == b:
        return 0
    df, db = {a: 0}, {b: 0}
    ff, fb = [a], [b]
    lf = lb = 0
    spent = 0
    while ff and fb:
        forward = len(ff) <= len(fb)
        frontier, dist, other = (ff, df, db) if forward else (fb, db, df)
        level = (lf if forward else lb) + 1
        nxt, best = [], None
        # The vertices the budget lets it expand, read in one go (one call per part of a partitioned view).
        expand = frontier[: budget - spent]
        for ends in store.graph.neighbors_many(expand, "out" if forward else "in", epoch):
            for w in ends[0].tolist():
                if w in other:
                    total = level + other[w]
                    best = total if best is None else min(best, total)
                if w not in dist:
                    dist[w] = level
                    nxt.append(w)
        spent += len(expand)
        if len(expand) < len(frontier):
            return None
        if best is not None:
            return best
        if forward:
            ff, lf = nxt, level
        else:
            fb, lb = nxt, level
    return -1  # settled: no path at all


def find_path(store: ResultStore, view: EpochView, a: int, b: int, budget: int) -> dict:
    e = view.result.epoch
    store.graph.require(e)
    names = store.names
    if a == b:
        return {"epoch": e, "src": names[a], "dst": names[b], "estimate": 0, "via": None, "path": [names[a]], "exact": True, "distance": 0}
    lm = app_result(view, LandmarksResult)
    ids = lm.ids if lm is not None else np.zeros(0, np.int32)
    rows = np.arange(len(ids), dtype=np.int64)
    est, j = (None, None)
    if len(ids):
        est, j = estimate(store.landmarks_to.at(e, rows, np.full(len(ids), a)), store.landmarks_from.at(e, rows, np.full(len(ids), b)))
    path: list[int] = []
    if est is not None:
        row_to = lambda vs: store.landmarks_to.at(e, np.full(len(vs), j), vs)  # noqa: E731
        row_from = lambda vs: store.landmarks_from.at(e, np.full(len(vs), j), vs)  # noqa: E731
        first = descend(a, row_to, _nbrs(store, e, "out"))
        second = descend(b, row_from, _nbrs(store, e, "in"))
        path = first + second[::-1][1:]
    settled = bidirectional_bfs(store, e, a, b, budget) if budget > 0 else None
    distance = None if settled is None or settled < 0 else settled
    exact = est is not None and distance is not None and distance == est
    return {
        "epoch": e, "src": names[a], "dst": names[b], "estimate": est,
        "via": names[int(ids[j])] if j is not None else None,
        "path": [names[v] for v in path], "exact": exact, "distance": distance,
    }


__all__ = ["DEFAULT_PATH_BFS_BUDGET", "UNREACHABLE", "bidirectional_bfs", "find_path"]
