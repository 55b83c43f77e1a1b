"""TunkRank: Kineograph's user influence, incremental, on the same resident graph as PageRank.

Definition (Tunkelang 2009, as Kineograph computes it)::

    Influence(X) = sum over followers Y of X of (1 + p * Influence(Y)) / |Following(Y)|

Direction: an edge ``Y -> X`` means *Y follows X*. On the tweets feed that is
"Y mentions X": Y's attention goes to X, and X's words reach Y, who passes them
on with retweet probability ``p``. So the followers of X are X's in-neighbours,
and ``|Following(Y)|`` is Y's out-degree. Edges carry weights (how often Y
mentioned X), and ``|Following(Y)|`` generalises to Y's out-weight: each follower
splits one unit of attention over whom it follows in proportion to the weights;
with unit weights this is the definition above, word for word. A vertex that
follows nobody passes nothing on.

With ``P = D^-1 A`` as in :mod:`pulsegraph.compute.incremental`, ``I = P^T (1 + p I)``.
Setting ``g = 1 + p I`` gives ``g = 1 + p P^T g``: the same system as PageRank's
with damping ``p``, so ``I = (g - 1) / p`` and the incremental machinery is shared.
In window mode the system's right-hand side is 1 only for the vertices in the
snapshot (:mod:`pulsegraph.compute.incremental`): ``I = (g - b) / p``, the same on them, and
an absent vertex (no edge) has ``g = 0`` and influence 0.

Tolerance: the L1 error of the scores is at most ``tol`` times their sum (the
scores are not normalised; below a sum of 1, at most ``tol``).
"""

from __future__ import annotations

import functools

import numpy as np
import scipy.sparse as sp

from pulsegraph.compute.backend import Backend, numpy_backend
from pulsegraph.compute.exceptions import PowerIterationFailedConvergence
from pulsegraph.compute.incremental import ResidualSolver, SolvedRanking
from pulsegraph.compute.pagerank import DEFAULT_MAX_ITER, DEFAULT_TOL, RankResult
from pulsegraph.compute.resident import ResidentGraph

# Tunkelang's retweet probability; Kineograph leaves it a parameter. Small p makes
# influence mostly "how many people listen to you" and converges in a few sweeps.
DEFAULT_P = 0.05


def tunkrank_target(p: float, tol: float):
    """``||I* - I||_1 = ||g* - g||_1 / p <= ||r||_1 / ((1 - p) p)``; asked to be within
    ``tol * max(sum(I), 1)``, with ``sum(I) = (sum(g) - sum(b)) / p`` (``n`` here is ``sum(b)``: the
    vertices in the snapshot)."""

    # A partial of a module function, not a closure: a stage written whole (a clean stop) pickles it.
    return functools.partial(_tunkrank_target, p, tol)


def _tunkrank_target(p: float, tol: float, gsum: float, n: float) -> float:
    return tol * (1.0 - p) * max(gsum - n, p) * (1.0 - tol)


class TunkRank(SolvedRanking):
    name = "tunkrank"

    def __init__(
        self, graph: ResidentGraph, p: float = DEFAULT_P, tol: float = DEFAULT_TOL,
        max_iter: int = DEFAULT_MAX_ITER, dense_switch: float = 0.25,
    ) -> None:
        if not 0.0 < p < 1.0:
            raise ValueError(f"TunkRank needs 0 < p < 1, got {p}")
        self.p = p
        self.solver = ResidualSolver(graph, p, tunkrank_target(p, tol), max_iter, self.name, tol, dense_switch)

    def scores(self):
        """Influence on the device (not normalised; 0 for a vertex nobody follows, or not in the snapshot)."""
        s = self.solver
        return s.present_mask((s.y - s._rhs()) / self.p)


def tunkrank(
    adjacency: sp.csr_matrix, p: float = DEFAULT_P, tol: float = DEFAULT_TOL, max_iter: int = DEFAULT_MAX_ITER,
    backend: Backend | None = None,
) -> RankResult:
    """TunkRank of ``adjacency`` (``A[y, x] > 0``: y follows x) from scratch."""
    be = backend or numpy_backend()
    if adjacency.shape[0] == 0:
        return RankResult(np.zeros(0), 0, 0.0)
    algo = TunkRank(ResidentGraph.from_scipy(adjacency, be), p, tol, max_iter)
    stats = algo.initialize()
    return RankResult(be.to_host(algo.scores()), stats.iterations, stats.residual)


def tunkrank_reference(
    nodes: list, edges: dict[tuple, float], p: float = DEFAULT_P, tol: float = 1e-14, max_iter: int = 10_000
) -> dict:
    """The definition over dicts, iterated to its fixed point. Slow; for tests only.
    ``edges[(y, x)] = w``: y follows x with weight w."""
    following = {v: 0.0 for v in nodes}
    followers: dict = {v: [] for v in nodes}
    for (y, x), w in edges.items():
        following[y] += w
        followers[x].append((y, w))
    infl = {v: 0.0 for v in nodes}
    for _ in range(max_iter):
        nxt = {x: sum((1 + p * infl[y]) * w / following[y] for y, w in followers[x]) for x in nodes}
        err = sum(abs(nxt[v] - infl[v]) for v in nodes)
        infl = nxt
        if err < tol:
            return infl
    raise PowerIterationFailedConvergence("tunkrank_reference", max_iter, err, tol)
