"""The order of a ranking, as the API serves it: each vertex's rank, the top, how many ranks are proven,
and the movers between two epochs. Pure functions of score and rank arrays; the store
(:mod:`pulsegraph.api.store`) computes them once per epoch, the routes and the results topic read them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pulsegraph.compute.results import EpochResult

# How much of each ranking is served by /v1/rank/top; `k` is bounded by it.
TOP_CACHE = 1000


def rank_order(scores: np.ndarray, present: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(vertex ids best first, 1-based rank per vertex id); ties break by vertex id, so the order is stable.
    ``present`` (window mode): vertices outside the snapshot come after every vertex in it."""
    if present is not None:
        order = np.lexsort((-scores, ~np.asarray(present, dtype=bool)[: len(scores)]))
    else:
        order = np.argsort(-scores, kind="stable")
    ranks = np.empty(len(scores), dtype=np.int32)
    ranks[order] = np.arange(1, len(scores) + 1, dtype=np.int32)
    return order, ranks


def top_of(ranks: np.ndarray) -> np.ndarray:
    """The vertex ids of the first TOP_CACHE ranks, best first, from a rank per vertex id."""
    ranks = np.asarray(ranks)
    k = min(TOP_CACHE, len(ranks))
    if not k:
        return np.zeros(0, dtype=np.int64)
    best = np.argpartition(ranks, k - 1)[:k] if k < len(ranks) else np.arange(len(ranks))
    return best[np.argsort(ranks[best])]


def certified_ranks(scores_best_first: np.ndarray, bound: float | None) -> int:
    """How many leading ranks of a ranking are in a proven order: every score is within ``bound`` of its
    exact value (an L1 bound bounds each entry too), so two neighbours whose scores differ by more than
    twice it are in the exact order. The first ``m`` ranks are certified when each of their ``m - 1`` gaps
    is; with no bound, none is."""
    s = np.asarray(scores_best_first, dtype=np.float64)
    if bound is None or not len(s):
        return 0
    weak = np.flatnonzero((s[:-1] - s[1:]) <= 2.0 * bound)
    return int(weak[0]) + 1 if len(weak) else len(s)


def movers_of(from_ranks: np.ndarray, to_ranks: np.ndarray, k: int, held: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rising ids, falling ids, change per id) between two epochs' 1-based ranks, over the vertices both
    hold: at most ``k`` each, most places moved first, ties by the newer rank (so the answer is stable).
    ``held`` (window mode): per vertex id, is it in both snapshots; the others did not move."""
    n = min(len(from_ranks), len(to_ranks))
    r1, r2 = np.asarray(from_ranks)[:n].astype(np.int64), np.asarray(to_ranks)[:n].astype(np.int64)
    change = r1 - r2
    if held is not None:
        change = np.where(np.asarray(held[:n], dtype=bool), change, 0)

    def pick(sign: int) -> np.ndarray:
        c = change * sign
        cand = np.flatnonzero(c > 0)
        if len(cand) > k:
            cand = cand[np.argpartition(-c[cand], k - 1)[:k]]
        return cand[np.lexsort((r2[cand], -c[cand]))]

    return pick(1), pick(-1), change


def held_in_both(a: EpochResult, b: EpochResult) -> np.ndarray | None:
    """Per vertex id, is it in both epochs' snapshots (window mode); None when neither carries presence."""
    pa, pb = getattr(a, "present", None), getattr(b, "present", None)
    if pa is None and pb is None:
        return None
    n = min(a.known_vertices(), b.known_vertices())

    def held(r: EpochResult, p: np.ndarray | None) -> np.ndarray:
        return np.asarray(p[:n], dtype=bool) if p is not None else np.arange(n) < r.vertices

    return held(a, pa) & held(b, pb)


def mover_items(from_ranks: np.ndarray, to_ranks: np.ndarray, scores: np.ndarray, names: Sequence[str], k: int,
                held: np.ndarray | None = None) -> tuple[list[dict], list[dict]]:
    """The movers form ``{"vertex", "from_rank", "to_rank", "change", "score"}`` of :func:`movers_of`
    (``score``: in the newer epoch), rising and falling; /v1/movers and the results topic answer it."""
    rising, falling, change = movers_of(from_ranks, to_ranks, k, held)

    def items(ids: np.ndarray) -> list[dict]:
        return [
            {"vertex": names[v], "from_rank": int(from_ranks[v]), "to_rank": int(to_ranks[v]), "change": int(change[v]), "score": float(scores[v])}
            for v in ids.tolist()
        ]

    return items(rising), items(falling)
