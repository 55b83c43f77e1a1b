"""The incremental solver both rankings share: ``(I - alpha P^T) y = 1`` kept solved across epochs.

``P = D^-1 A`` is the row-normalised adjacency of a :class:`~compute.resident.ResidentGraph`,
with all-zero rows for dangling vertices (so ``P`` is substochastic and nothing
dense appears in the system). Both rankings are this one solve:

* PageRank with damping ``alpha``, dangling mass spread uniformly and uniform
  teleport, is ``y / sum(y)`` (the dangling mass only rescales the solution; Del
  Corso, Gulli and Romani 2005). So a new vertex, or a vertex that becomes
  dangling, changes a few entries of the system instead of every one.
* TunkRank with retweet probability ``p`` is ``(y - 1) / p`` for ``alpha = p``
  (see :mod:`compute.tunkrank`).

The solver keeps ``y`` and its residual ``r = 1 + alpha P^T y - y`` on the device.
An epoch's change to a row of ``P`` changes ``r`` only at that row's old and new
out-neighbours (``retract`` before the graph changes, ``reinstate`` after), so
after an epoch ``r`` is small and local. Then either

* ``power``: warm-started power iteration, i.e. Jacobi sweeps over every edge,
  ``y += r; r = alpha P^T r``, from the previous epoch's ``y``; or
* ``push``: a residual push over a dynamic frontier (Gauss-Southwell in the
  manner of Ohsaka et al., KDD 2015, vectorised a frontier at a time): each round
  moves the residual of the vertices holding the most of it into ``y`` and onto
  their out-neighbours, leaving untouched only vertices whose residuals together
  stay below half the stopping budget. When a frontier's edges reach
  ``dense_switch`` of the graph, the round is a full sweep instead.

The stopping rule bounds the error, not the change: since ``||(I - alpha P^T)^-1||_1
<= 1 / (1 - alpha)``, ``||y* - y||_1 <= ||r||_1 / (1 - alpha)``; each ranking turns
that into its own L1 bound (``target``). Running out of rounds raises
:class:`~compute.exceptions.PowerIterationFailedConvergence`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from compute.exceptions import PowerIterationFailedConvergence
from compute.resident import ResidentGraph

# Frontier rounds keep at most this share of the stopping budget as residual left unpushed;
# the rest of the budget absorbs what the pushes themselves leave behind.
UNPUSHED_SHARE = 0.5
# Sweeps of an incremental epoch go on to this share of the budget: the residual they leave is
# spread over every vertex, and later epochs need headroom under the budget to leave it where it is
# and push only their own, local residual. Fewer sweeps each time would mean sweeps every epoch.
SWEEP_HEADROOM = 0.5


@dataclass(frozen=True)
class SolveStats:
    method: str  # "scratch", "power" or "push"
    iterations: int  # full sweeps + frontier rounds
    sweeps: int  # full sweeps among them
    edges_read: int  # stored entries read by sweeps and pushes
    residual: float  # ||r||_1 at the end


class ResidualSolver:
    def __init__(
        self,
        graph: ResidentGraph,
        alpha: float,
        target: Callable[[float, int], float],
        max_iter: int,
        name: str,
        tol: float,
        dense_switch: float = 0.25,
    ) -> None:
        self.g = graph
        self.be = graph.be
        self.alpha = alpha
        self.target = target  # (sum(y), n) -> the ||r||_1 at which the result is within tolerance
        self.max_iter = max_iter
        self.name = name
        self.tol = tol  # what ``target`` encodes; for the error message
        self.dense_switch = dense_switch
        xp = self.be.xp
        self.y = xp.zeros(0, dtype=graph.dtype)
        self.r = xp.zeros(0, dtype=graph.dtype)
        self._compactions = graph.compactions

    @property
    def n(self) -> int:
        return len(self.y)

    # -- keeping the residual right as the graph changes ------------------------------------------

    def grow(self) -> None:
        """New vertices start at ``y = 1``: the exact value of a vertex nobody links to yet
        (1/n of the mass before renormalising). Their residual comes from the rows that now reach them."""
        xp = self.be.xp
        extra = self.g.n - self.n
        if extra > 0:
            self.y = xp.concatenate([self.y, xp.ones(extra, dtype=self.g.dtype)])
            self.r = xp.concatenate([self.r, xp.zeros(extra, dtype=self.g.dtype)])

    def retract(self, rows) -> None:
        """Before the rows change: take their current contribution ``alpha y_u P[u, :]`` out of ``r``."""
        self._push_rows(rows, -1.0)

    def reinstate(self, rows) -> None:
        """After the rows changed: put their new contribution into ``r``."""
        self._push_rows(rows, 1.0)

    def _push_rows(self, rows, sign: float) -> None:
        if len(rows) == 0:
            return
        coef = (sign * self.alpha) * self.y[rows] * self.g.inv_out[rows]
        self.g.push(rows, coef, self.r)

    def recompute_residual(self) -> int:
        """``r = 1 + alpha P^T y - y`` from scratch: one sweep, clears any drift of the running residual."""
        self.r = 1.0 + self.alpha * self.g.pull(self.g.inv_out * self.y) - self.y
        return self._stored()

    def _stored(self) -> int:
        return self.g.nnz + self.g.overlay_nnz

    # -- solving ----------------------------------------------------------------------------------

    def scratch(self) -> SolveStats:
        """From ``y = 1`` by full sweeps; what an epoch costs without the previous result."""
        xp = self.be.xp
        self.y = xp.ones(self.g.n, dtype=self.g.dtype)
        read = self.recompute_residual()
        self._compactions = self.g.compactions
        return self._sweep_until_done("scratch", read)

    def solve(self, method: str) -> SolveStats:
        read = 0
        if self.g.compactions != self._compactions:
            # The base was rebuilt: a good moment to drop the running residual's rounding drift.
            read += self.recompute_residual()
            self._compactions = self.g.compactions
        if method == "power":
            return self._sweep_until_done("power", read, SWEEP_HEADROOM)
        if method == "push":
            return self._push_until_done(read)
        raise ValueError(f"unknown method {method!r}")

    def _residual(self) -> tuple[float, float]:
        xp = self.be.xp
        return float(xp.abs(self.r).sum()), self.target(float(self.y.sum()), self.n)

    def _sweep(self) -> int:
        self.y += self.r
        self.r = self.alpha * self.g.pull(self.g.inv_out * self.r)
        return self._stored()

    def _sweep_until_done(self, method: str, read: int, headroom: float = 1.0, it: int = 0) -> SolveStats:
        """Full sweeps until ``||r||_1 <= headroom * target`` (``it`` rounds already spent)."""
        res, goal = self._residual()
        start = it
        while res > headroom * goal:
            if it == self.max_iter:
                raise self._failed(it, res, goal)
            read += self._sweep()
            it += 1
            res, goal = self._residual()
        return SolveStats(method, it, it - start, read, res)

    def _failed(self, it: int, res: float, goal: float) -> PowerIterationFailedConvergence:
        # The error bound in the tolerance's own terms: ``goal`` is the residual that means ``tol``.
        return PowerIterationFailedConvergence(self.name, it, self.tol * res / max(goal, 1e-300), self.tol)

    def _push_until_done(self, read: int) -> SolveStats:
        xp = self.be.xp
        it = sweeps = 0
        total = self._stored()
        while True:
            a = xp.abs(self.r)
            res = float(a.sum())
            goal = self.target(float(self.y.sum()), self.n)
            if res <= goal:
                return SolveStats("push", it, sweeps, read, res)
            if it == self.max_iter:
                raise self._failed(it, res, goal)
            it += 1
            frontier = self._frontier(a, UNPUSHED_SHARE * goal)
            work = int(self.g.out_degree[frontier].sum())
            if work >= self.dense_switch * total:
                # The residual is everywhere: sweep it down, with headroom for the epochs to come.
                done = self._sweep_until_done("push", read, SWEEP_HEADROOM, it - 1)
                return SolveStats("push", done.iterations, done.sweeps, done.edges_read, done.residual)
            delta = self.r[frontier]
            self.y[frontier] += delta
            self.r[frontier] = 0.0
            read += self.g.push(frontier, self.alpha * delta * self.g.inv_out[frontier], self.r)
            read += len(frontier)

    def _frontier(self, a, budget: float):
        """Vertices with ``|r| >= theta``, ``theta`` a power of two as high as possible while the
        residual left below it sums to at most ``budget``: a histogram over binary exponents, O(n)."""
        xp = self.be.xp
        nz = a[a > 0]
        if len(nz) == 0:
            return xp.zeros(0, dtype=np.int64)
        expo = xp.floor(xp.log2(nz)).astype(np.int64)
        lo = int(expo.min())
        mass = xp.cumsum(xp.bincount(expo - lo, weights=nz))
        k = int(xp.searchsorted(mass, budget, side="right"))
        theta = float(2.0 ** (lo + k))
        return xp.nonzero(a >= theta)[0]
