"""PageRank: weighted, damping 0.85, dangling mass spread uniformly.

Owns the algorithm only; the graph comes in as a SciPy CSR adjacency matrix
``A[src, dst] = weight``. :func:`pagerank_reference` is the slow, obvious
implementation over plain dicts that tests hold the fast one against.
No Ray here: this module runs wherever NumPy and SciPy do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from compute.exceptions import PowerIterationFailedConvergence

DAMPING = 0.85
# L1 change between iterations on ranks that sum to 1; 1e-10 keeps the ranks
# within 1e-8 of the fixed point even on slowly mixing graphs.
DEFAULT_TOL = 1e-10
# At damping 0.85 the error shrinks at least 0.85x per step: 1e-10 needs ~140 steps.
DEFAULT_MAX_ITER = 1000


@dataclass(frozen=True)
class RankResult:
    scores: np.ndarray
    iterations: int
    error: float


def pagerank(
    adjacency: sp.csr_matrix,
    alpha: float = DAMPING,
    tol: float = DEFAULT_TOL,
    max_iter: int = DEFAULT_MAX_ITER,
    x0: np.ndarray | None = None,
) -> RankResult:
    """Power iteration on ``adjacency`` (n x n, rows are sources, values are non-negative weights)."""
    n = adjacency.shape[0]
    if n == 0:
        return RankResult(np.zeros(0), 0, 0.0)
    out = np.asarray(adjacency.sum(axis=1)).ravel()
    dangling = out == 0
    inv = np.zeros(n)
    inv[~dangling] = 1.0 / out[~dangling]
    # x_{k+1} = alpha * (P^T x_k + dangling mass / n) + (1 - alpha) / n, with P = D^-1 A.
    pt = (sp.diags(inv) @ adjacency).T.tocsr()
    x = np.full(n, 1.0 / n) if x0 is None else x0 / x0.sum()
    teleport = (1.0 - alpha) / n
    err = np.inf
    for it in range(1, max_iter + 1):
        nxt = alpha * (pt @ x + x[dangling].sum() / n) + teleport
        err = float(np.abs(nxt - x).sum())
        x = nxt
        if err < tol:
            return RankResult(x, it, err)
    raise PowerIterationFailedConvergence("pagerank", max_iter, err, tol)


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
