"""PageRank: weighted, damping 0.85, dangling mass spread uniformly, uniform teleport.

Owns the algorithm: :class:`PageRank` keeps its solution on a
:class:`~pulsegraph.compute.resident.ResidentGraph` and updates it each epoch (see
:mod:`pulsegraph.compute.incremental` for the two methods); :func:`pagerank` is the one-shot
form on a SciPy CSR ``A[src, dst] = weight``; :func:`pagerank_reference` is the
slow, obvious implementation over plain dicts that tests hold the fast ones
against. No Ray, no msgspec here: this module runs wherever NumPy and SciPy
(or CuPy) do.

Tolerance: the published ranks sum to 1 and lie within ``tol`` (L1) of the exact
fixed point; the bound is proved from the residual, not guessed from the change
between two iterations.
"""

from __future__ import annotations

import functools

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from pulsegraph.compute.backend import Backend, numpy_backend
from pulsegraph.compute.exceptions import PowerIterationFailedConvergence
from pulsegraph.compute.incremental import ResidualSolver, SolvedRanking
from pulsegraph.compute.resident import ResidentGraph

DAMPING = 0.85
# L1 error of ranks that sum to 1. 1e-7 is far below any difference a reader of a
# top-k list can see, and it is what the incremental methods are held to.
DEFAULT_TOL = 1e-7
# At damping 0.85 the residual shrinks at least 0.85x per sweep: 1e-12 from scratch needs ~190.
DEFAULT_MAX_ITER = 1000


@dataclass(frozen=True)
class RankResult:
    scores: np.ndarray
    iterations: int
    error: float


def pagerank_target(alpha: float, tol: float):
    """The residual at which ``y / sum(y)`` is within ``tol`` (L1) of PageRank.

    With ``e = y* - y``, ``||y/S - y*/S*||_1 <= 2 ||e||_1 / S*`` and ``||e||_1 <= ||r||_1 / (1 - alpha)``;
    ``S* >= S - ||e||_1``, so asking ``2 ||r||_1 / ((1 - alpha) S) <= tol`` (with tol << 1) suffices."""

    # A partial of a module function, not a closure: a stage written whole (a clean stop) pickles it.
    return functools.partial(_pagerank_target, alpha, tol)


def _pagerank_target(alpha: float, tol: float, ysum: float, n: float) -> float:
    return tol * (1.0 - alpha) * ysum / 2.0 * (1.0 - tol)


class PageRank(SolvedRanking):
    """The incremental algorithm object the compute actor drives, one per ranked graph."""

    name = "pagerank"

    def __init__(
        self, graph: ResidentGraph, alpha: float = DAMPING, tol: float = DEFAULT_TOL,
        max_iter: int = DEFAULT_MAX_ITER, dense_switch: float = 0.25,
    ) -> None:
        self.solver = ResidualSolver(graph, alpha, pagerank_target(alpha, tol), max_iter, self.name, tol, dense_switch)

    def scores(self):
        """Ranks on the device, summing to 1 (over the vertices in the snapshot; 0 for the others, and
        all 0 when none is)."""
        y = self.solver.present_mask(self.solver.y)
        if not len(y):
            return y
        total = y.sum()  # stays on the device: no sync here
        return y / self.solver.be.xp.where(total > 0, total, 1.0)


def pagerank(
    adjacency: sp.csr_matrix,
    alpha: float = DAMPING,
    tol: float = DEFAULT_TOL,
    max_iter: int = DEFAULT_MAX_ITER,
    x0: np.ndarray | None = None,
    backend: Backend | None = None,
) -> RankResult:
    """PageRank of ``adjacency`` (n x n, rows are sources, non-negative weights) from scratch,
    or warm-started from ranks ``x0``; GMRES on the device (see :mod:`pulsegraph.compute.incremental`)."""
    be = backend or numpy_backend()
    n = adjacency.shape[0]
    if n == 0:
        return RankResult(np.zeros(0), 0, 0.0)
    g = ResidentGraph.from_scipy(adjacency, be)
    algo = PageRank(g, alpha, tol, max_iter)
    if x0 is None:
        stats = algo.initialize()
    else:
        s = algo.solver
        s.grow()
        # Ranks fix y only up to scale: y* = x* / s with s = (alpha * dangling mass + 1 - alpha) / n,
        # the uniform part of x* - alpha P^T x*. Pick the scale that leaves no uniform residual.
        x = be.asarray(np.asarray(x0, dtype=np.float64) / np.sum(x0), dtype=g.dtype)
        uniform = float((x - alpha * g.pull(g.inv_out * x)).sum()) / n
        s.y = x / uniform if uniform > 0 else x * n
        read = s.recompute_residual() + g.nnz
        stats = s.converge(read)
    return RankResult(be.to_host(algo.scores()), stats.iterations, stats.residual)


def pagerank_reference(
    nodes: list, edges: dict[tuple, float], alpha: float = DAMPING, tol: float = 1e-13, max_iter: int = 10_000
) -> dict:
    """The textbook definition over dicts, one vertex at a time. Slow; for tests only."""
    n = len(nodes)
    out: dict = {v: 0.0 for v in nodes}
    into: dict = {v: [] for v in nodes}
    for (s, d), w in edges.items():
        out[s] += w
        into[d].append((s, w))
    x = {v: 1.0 / n for v in nodes}
    for _ in range(max_iter):
        dangling = sum(x[v] for v in nodes if out[v] == 0)
        nxt = {
            v: (1 - alpha) / n + alpha * (dangling / n + sum(x[s] * w / out[s] for s, w in into[v])) for v in nodes
        }
        err = sum(abs(nxt[v] - x[v]) for v in nodes)
        x = nxt
        if err < tol:
            return x
    raise PowerIterationFailedConvergence("pagerank_reference", max_iter, err, tol)
