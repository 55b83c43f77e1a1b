"""The incremental solver both rankings share: ``(I - alpha P^T) y = b`` kept solved across epochs.

``P = D^-1 A`` is the row-normalised adjacency of a :class:`~pulsegraph.compute.resident.ResidentGraph`,
with all-zero rows for dangling vertices (so ``P`` is substochastic and nothing
dense appears in the system). The right-hand side ``b`` is 1 for every vertex
in the snapshot and 0 for the others: all ones outside window mode (then ``b``
is never stored and costs nothing), and in window mode 0 for a vertex that has
left the window (no live edge, no attributes). Both rankings are this one solve:

* PageRank with damping ``alpha``, dangling mass spread uniformly and uniform
  teleport, is ``y / sum(y)`` (the dangling mass only rescales the solution; Del
  Corso, Gulli and Romani 2005). So a new vertex, or a vertex that becomes
  dangling, changes a few entries of the system instead of every one. With a
  0/1 ``b`` it is PageRank of the present subgraph (teleport and dangling mass
  spread over the present vertices only): an absent vertex has no edge, so
  nothing flows into it, and its ``y`` is exactly 0.
* TunkRank with retweet probability ``p`` is ``(y - b) / p`` for ``alpha = p``
  (see :mod:`pulsegraph.compute.tunkrank`).

The solver keeps ``y`` and its residual ``r = b + alpha P^T y - y`` on the device.
A vertex entering or leaving the snapshot changes ``b`` there by ``+-1``, and ``r``
by the same at that vertex only (:meth:`ResidualSolver.set_rhs`): no sweep.
An epoch's change to a row of ``P`` changes ``r`` only at that row's old and new
out-neighbours (``retract`` before the graph changes, ``reinstate`` after), so
after an epoch ``r`` is small and local. Then one of

* ``krylov``: GMRES (Saad and Schultz 1986) on ``(I - alpha P^T) e = r``, warm-started
  from the previous epoch's ``y``; one matrix-vector product (a sweep over every
  edge) per step (BiCGSTAB, tried first, took as long with one product more).
  Power iteration crawls at the rate of the eigenvalues of ``alpha P^T`` nearest
  ``alpha`` in modulus; real graphs have few *distinct* such eigenvalues (closed
  cycles give exact roots of unity, however many there are), and a Krylov method
  removes each distinct one in a step or two: on R-MAT 1M a solve to 1e-7 takes
  ~12 products against ~97 sweeps. Written with ``xp`` calls only, so it runs
  unchanged on CuPy, and so that it stops on the L1 norm the error bound needs
  (SciPy's and cupyx's ``gmres`` stop on a 2-norm). An epoch that goes straight to
  it skips ``retract``/``reinstate`` (``forget``): one sweep recomputes ``r``,
  cheaper than pushing the changed rows twice.
* ``power``: warm-started power iteration, i.e. Jacobi sweeps over every edge,
  ``y += r; r = alpha P^T r``, from the previous epoch's ``y``; or
* ``push``: a residual push over a dynamic frontier (Gauss-Southwell in the
  manner of Ohsaka et al., KDD 2015, vectorised a frontier at a time): each round
  moves the residual of the vertices holding the most of it into ``y`` and onto
  their out-neighbours, leaving untouched only vertices whose residuals together
  stay below half the stopping budget. When a frontier's edges reach
  ``dense_switch`` of the graph the residual is everywhere, and the epoch ends
  with the solver's sweep method (``krylov`` for large ``alpha``) from where the
  pushes left it.

The stopping rule bounds the error, not the change: since ``||(I - alpha P^T)^-1||_1
<= 1 / (1 - alpha)``, ``||y* - y||_1 <= ||r||_1 / (1 - alpha)``; each ranking turns
that into its own L1 bound (``target``). A Krylov method's recurrence residual drifts from
the true one in floating point, so a Krylov solve stops only on the *true* residual
``b + alpha P^T y - y``, recomputed (one more sweep) when the recurrence says it is
done: the bound stays proven. Running out of rounds raises
:class:`~pulsegraph.compute.exceptions.PowerIterationFailedConvergence`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from pulsegraph.compute.exceptions import PowerIterationFailedConvergence
from pulsegraph.compute.resident import ResidentGraph

log = logging.getLogger(__name__)

# Frontier rounds keep at most this share of the stopping budget as residual left unpushed;
# the rest of the budget absorbs what the pushes themselves leave behind.
UNPUSHED_SHARE = 0.5
# Sweeps of an incremental epoch go on to this share of the budget: the residual they leave is
# spread over every vertex, and later epochs need headroom under the budget to leave it where it is
# and push only their own, local residual. Fewer sweeps each time would mean sweeps every epoch.
SWEEP_HEADROOM = 0.5
# Below this damping a sweep alone cuts the residual by 1/alpha >= 2x, and a Krylov basis plus the
# check of the true residual do not pay (TunkRank, p = 0.05: 3-4 sweeps).
KRYLOV_MIN_ALPHA = 0.5
# GMRES stops on its recurrence residual at this share of the goal, so that the true residual,
# which rounding moves a little away from it, passes the check the first time.
KRYLOV_RECURRENCE_SHARE = 0.5
# GMRES keeps this many basis vectors (n floats each) before it restarts; a from-scratch solve of
# R-MAT graphs to 1e-7 takes 11-13, an incremental epoch 8-10.
KRYLOV_RESTART = 20
# Arnoldi orthogonalises a new vector once more when one pass of Gram-Schmidt cancelled more than
# this share of its norm ("twice is enough": Daniel, Gragg, Kaufman and Stewart 1976, 1/sqrt(2)).
REORTHOGONALIZE = 0.7071
# A Krylov cycle that leaves the true residual above this share of where it began has stalled
# (breakdown, or float32 rounding at the floor of what it can resolve): sweeps finish the job.
KRYLOV_STALL = 0.5


@dataclass(frozen=True)
class SolveStats:
    method: str  # "scratch", "power", "krylov" or "push"
    iterations: int  # full sweeps (matrix-vector products) + frontier rounds
    sweeps: int  # full sweeps among them (a Krylov solve's products, and its residual checks)
    edges_read: int  # stored entries read by sweeps and pushes
    residual: float  # ||r||_1 at the end


class ResidualSolver:
    def __init__(
        self,
        graph: ResidentGraph,
        alpha: float,
        target: Callable[[float, float], float],
        max_iter: int,
        name: str,
        tol: float,
        dense_switch: float = 0.25,
    ) -> None:
        self.g = graph
        self.be = graph.be
        self.alpha = alpha
        # (sum(y), sum(b)) -> the ||r||_1 at which the result is within tolerance; sum(b) is the number of
        # vertices in the snapshot (all of them outside window mode).
        self.target = target
        self.max_iter = max_iter
        self.name = name
        self.tol = tol  # what ``target`` encodes; for the error message
        self.dense_switch = dense_switch
        xp = self.be.xp
        self.y = xp.zeros(0, dtype=graph.dtype)
        self.r = xp.zeros(0, dtype=graph.dtype)
        # The right-hand side: None means all ones (outside window mode: no array, no extra work).
        self.b: Any = None
        self.bsum = 0.0  # sum(b) while ``b`` is kept, exact (a count of 0/1 entries)
        self._compactions = graph.compactions
        self._stale = False  # the graph changed without retract: ``r`` must be recomputed
        # What an epoch whose residual is everywhere runs: Krylov where sweeps alone would crawl.
        self.sweep_method = "krylov" if alpha >= KRYLOV_MIN_ALPHA else "power"

    @property
    def n(self) -> int:
        return len(self.y)

    # -- keeping the residual right as the graph changes ------------------------------------------

    def grow(self, present=None) -> None:
        """New vertices start at ``y = b``: the exact value of a vertex nobody links to yet
        (1/n of the mass before renormalising). Their residual comes from the rows that now reach them.

        ``present``: host booleans, one per new vertex, their ``b`` (window mode; the first call with it
        turns ``b`` on, the vertices before it being all present). Without it new vertices are present
        outside window mode and absent in it (:meth:`set_rhs` may bring them in later)."""
        xp = self.be.xp
        extra = self.g.n - self.n
        if present is not None and self.b is None:
            self.b = xp.ones(self.n, dtype=self.g.dtype)
            self.bsum = float(self.n)
        if extra <= 0:
            return
        if self.b is None:
            tail = xp.ones(extra, dtype=self.g.dtype)
        else:
            if present is None:
                tail = xp.zeros(extra, dtype=self.g.dtype)
            else:
                host = np.asarray(present[:extra], dtype=bool)
                tail = self.be.asarray(host, dtype=self.g.dtype)
                self.bsum += float(np.count_nonzero(host))
            self.b = xp.concatenate([self.b, tail])
        self.y = xp.concatenate([self.y, tail.copy()])
        self.r = xp.concatenate([self.r, xp.zeros(extra, dtype=self.g.dtype)])

    def set_rhs(self, ids, present) -> None:
        """``b[ids] = present`` (host arrays, ids distinct and below ``n``): vertices that entered or left
        the snapshot. ``r = b + alpha P^T y - y`` moves by the change at those vertices only."""
        if len(ids) == 0:
            return
        xp = self.be.xp
        if self.b is None:
            self.b = xp.ones(self.n, dtype=self.g.dtype)
            self.bsum = float(self.n)
        host = np.asarray(present, dtype=bool)
        idx = self.be.asarray(np.asarray(ids, dtype=np.int64))
        new = self.be.asarray(host, dtype=self.g.dtype)
        change = new - self.b[idx]
        self.b[idx] = new
        self.bsum += float(change.sum())
        if not self._stale:
            self.r[idx] += change

    def _rhs(self):
        """``b`` for arithmetic: the scalar 1 outside window mode."""
        return 1.0 if self.b is None else self.b

    def present_mask(self, v):
        """``v`` with the entries of absent vertices set to exactly 0 (``v`` itself outside window mode)."""
        return v if self.b is None else self.be.xp.where(self.b > 0, v, 0.0)

    def retract(self, rows) -> None:
        """Before the rows change: take their current contribution ``alpha y_u P[u, :]`` out of ``r``."""
        self._push_rows(rows, -1.0)

    def reinstate(self, rows) -> None:
        """After the rows changed: put their new contribution into ``r``."""
        self._push_rows(rows, 1.0)

    def forget(self) -> None:
        """Instead of ``retract``: the next solve recomputes ``r`` with one sweep. Cheaper than pushing
        the changed rows twice when that solve sweeps the whole graph anyway."""
        self._stale = True

    def _push_rows(self, rows, sign: float) -> None:
        if len(rows) == 0 or self._stale:
            return
        coef = (sign * self.alpha) * self.y[rows] * self.g.inv_out[rows]
        self.g.push(rows, coef, self.r)

    def recompute_residual(self, settle_sources: bool = False) -> int:
        """``r = b + alpha P^T y - y`` from scratch: one sweep, clears any drift of the running residual.

        ``settle_sources``: then push the residual of every vertex with no in-flow, which sets a vertex
        nobody links to at its exact ``y = b`` for good. Sweeps do that by themselves; a Krylov solve
        leaves such a vertex merely within the tolerance, and it would show as a tiny influence."""
        flow = self.g.pull(self.g.inv_out * self.y)
        self.r = self._rhs() + self.alpha * flow - self.y
        read = self._stored()
        if settle_sources:
            xp = self.be.xp
            rows = xp.nonzero((flow == 0) & (self.r != 0))[0]
            if len(rows):
                delta = self.r[rows]
                self.y[rows] += delta
                self.r[rows] = 0.0
                read += self.g.push(rows, self.alpha * delta * self.g.inv_out[rows], self.r)
        return read

    def _stored(self) -> int:
        return self.g.nnz + self.g.overlay_nnz

    # -- solving ----------------------------------------------------------------------------------

    def scratch(self, method: str | None = None) -> SolveStats:
        """From ``y = b`` (``krylov`` or ``power``: the solver's own by default); what an epoch costs
        without the previous result."""
        xp = self.be.xp
        self.y = xp.ones(self.g.n, dtype=self.g.dtype) if self.b is None else self.b.copy()
        read = self.recompute_residual()
        self._compactions = self.g.compactions
        self._stale = False
        stats = self.converge(read, method, headroom=1.0)
        return SolveStats("scratch", stats.iterations, stats.sweeps, stats.edges_read, stats.residual)

    def converge(self, read: int = 0, method: str | None = None, headroom: float = 1.0, it: int = 0) -> SolveStats:
        """Full-graph iterations (``krylov`` or ``power``) from the current ``y`` and ``r`` until
        ``||r||_1 <= headroom * target``."""
        method = method or self.sweep_method
        if self._nothing_present():
            return SolveStats(method, it, 0, read, 0.0)
        if method == "krylov":
            return self._krylov_until_done(method, read, headroom, it)
        if method == "power":
            return self._sweep_until_done(method, read, headroom, it)
        raise ValueError(f"unknown method {method!r}")

    def solve(self, method: str) -> SolveStats:
        read = 0
        if self._stale or self.g.compactions != self._compactions:
            # Changed without retract, or the base was rebuilt (a good moment to drop the running
            # residual's rounding drift).
            read += self.recompute_residual()
            self._compactions = self.g.compactions
            self._stale = False
        if method in ("power", "krylov", "sweep"):
            # "sweep": whichever full-graph method suits this solver's damping.
            return self.converge(read, None if method == "sweep" else method, SWEEP_HEADROOM)
        if method == "push":
            return self._push_until_done(read)
        raise ValueError(f"unknown method {method!r}")

    def _residual(self) -> tuple[float, float]:
        xp = self.be.xp
        return float(xp.abs(self.r).sum()), self.target(float(self.y.sum()), self._bsum())

    def _nothing_present(self) -> bool:
        """Every vertex has left the window: the solution is exactly 0 (whose tolerance, relative to
        sum(y), no rounding residual could meet), so set it rather than iterate."""
        if self.b is None or self.bsum > 0:
            return False
        self.y[:] = 0.0
        self.r[:] = 0.0
        return True

    def _bsum(self) -> float:
        return float(self.n) if self.b is None else self.bsum

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

    def _krylov_until_done(self, method: str, read: int, headroom: float = 1.0, it: int = 0) -> SolveStats:
        """GMRES cycles from the current ``(y, r)``, each ended by recomputing the true residual,
        until that residual meets ``headroom * target``; sweeps take over if a cycle stalls."""
        start = it
        res, goal = self._residual()
        while res > headroom * goal:
            before = res
            it, read = self._gmres(it, read, KRYLOV_RECURRENCE_SHARE * headroom)
            if it >= self.max_iter:  # no product left to check the true residual with
                raise self._failed(it, *self._residual())
            read += self.recompute_residual(settle_sources=True)
            it += 1
            res, goal = self._residual()
            if res > headroom * goal and res > KRYLOV_STALL * before:
                log.debug("%s: GMRES stalled at residual %.3g (goal %.3g); finishing with sweeps", self.name, res, goal)
                done = self._sweep_until_done(method, read, headroom, it)
                return SolveStats(method, done.iterations, done.iterations - start, done.edges_read, done.residual)
        return SolveStats(method, it, it - start, read, res)

    def _gmres(self, it: int, read: int, share: float) -> tuple[int, int]:
        """One GMRES(``KRYLOV_RESTART``) cycle on ``(I - alpha P^T) e = r`` from ``e = 0`` (Saad and Schultz
        1986; Arnoldi by classical Gram-Schmidt, two matrix-vector products of the basis per step,
        done again where it cancelled). The Arnoldi process runs on ``M = alpha P^T``, not on the
        system's matrix ``I - M``: both span the same Krylov space, and ``(I - M) V = V - M V`` gives
        the system's Hessenberg matrix from ``M``'s for free, but ``(I - M) v_k`` is mostly ``v_k``
        itself, so orthogonalising it cancels most of its norm and took the second Gram-Schmidt pass
        at every step (R-MAT 1M: 30 of 30), while ``M v_k`` is mostly new. Adds ``e`` to ``y`` and
        leaves the recurrence residual in ``r``. Stops when that
        residual's L1 norm is at most ``share * target``; the 2-norm of the small least-squares
        problem is a lower bound of it, so the L1 norm is only formed once that bound passes."""
        xp = self.be.xp
        m = min(KRYLOV_RESTART, self.max_iter - it)
        beta = float(xp.linalg.norm(self.r))
        if m <= 0 or beta == 0.0 or not np.isfinite(beta):
            return it, read
        stored = self._stored()
        scale = self.alpha * self.g.inv_out  # M v = P^T (alpha D^-1 v): alpha folded in, one pass less a step
        basis = xp.empty((m + 1, self.n), dtype=self.r.dtype)
        basis[0] = self.r / beta
        sums = np.zeros(m + 1)  # sum of each basis vector: sum(y) after the update, for the goal
        sums[0] = float(basis[0].sum())
        h = np.zeros((m + 1, m))
        ysum = float(self.y.sum())
        k = 0
        z: np.ndarray = np.zeros(0)
        rhs: np.ndarray = np.zeros(1)
        while k < m:
            w = self.g.pull(scale * basis[k])  # one sweep over every edge
            it += 1
            read += stored
            v = basis[: k + 1]
            c = v @ w
            w -= c @ v
            hn = float(xp.linalg.norm(w))
            ch = self.be.to_host(c)
            # ||w|| before the pass, by Pythagoras over the orthonormal basis: one pass over n saved.
            if hn < REORTHOGONALIZE * float(np.sqrt(hn * hn + ch @ ch)):  # cancellation: once more (DGKS)
                c2 = v @ w
                w -= c2 @ v
                ch = ch + self.be.to_host(c2)
                hn = float(xp.linalg.norm(w))
            # (I - M) v_k = v_k - V c - hn v_{k+1}: the Hessenberg column of the system's matrix.
            h[: k + 1, k] = -ch
            h[k, k] += 1.0
            h[k + 1, k] = -hn
            k += 1
            rhs = np.zeros(k + 1)
            rhs[0] = beta
            z = np.linalg.lstsq(h[: k + 1, :k], rhs, rcond=None)[0]
            left = rhs - h[: k + 1, :k] @ z  # the residual in the basis's coordinates
            goal = self.target(ysum + float(sums[:k] @ z), self._bsum())
            if hn == 0.0 or not np.isfinite(hn):
                break  # the space is invariant: z solves the system
            basis[k] = w / hn
            sums[k] = float(basis[k].sum())
            if float(np.linalg.norm(left)) <= share * goal:
                r = self.be.asarray(left, dtype=self.r.dtype) @ basis[: k + 1]
                if float(xp.abs(r).sum()) <= share * goal:
                    break
        if k:
            self.y += self.be.asarray(z, dtype=self.y.dtype) @ basis[:k]
            self.r = self.be.asarray(rhs - h[: k + 1, :k] @ z, dtype=self.r.dtype) @ basis[: k + 1]
        return it, read

    def _push_until_done(self, read: int) -> SolveStats:
        xp = self.be.xp
        it = sweeps = 0
        if self._nothing_present():
            return SolveStats("push", 0, 0, read, 0.0)
        total = self._stored()
        while True:
            a = xp.abs(self.r)
            res = float(a.sum())
            goal = self.target(float(self.y.sum()), self._bsum())
            if res <= goal:
                return SolveStats("push", it, sweeps, read, res)
            if it == self.max_iter:
                raise self._failed(it, res, goal)
            it += 1
            frontier = self._frontier(a, UNPUSHED_SHARE * goal)
            work = int(self.g.out_degree[frontier].sum())
            if work >= self.dense_switch * total:
                # The residual is everywhere: solve it down, with headroom for the epochs to come.
                done = self.converge(read, None, SWEEP_HEADROOM, it - 1)
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


class SolvedRanking:
    """What PageRank and TunkRank share: a :class:`ResidualSolver` on the resident graph, driven
    through its epoch lifecycle. Subclasses set ``self.solver`` and define ``scores``."""

    solver: ResidualSolver

    def scores(self):
        """The ranking's scores on the device, one per vertex (defined by each ranking)."""
        raise NotImplementedError

    def initialize(self, method: str | None = None) -> SolveStats:
        """From scratch on the graph as it is (``krylov`` or ``power``; the solver's choice by default)."""
        self.solver.grow()
        return self.solver.scratch(method)

    def retract(self, rows) -> None:
        self.solver.grow()
        self.solver.retract(rows)

    def forget(self) -> None:
        """The graph changes without ``retract``: the next ``update`` re-solves from one sweep's residual."""
        self.solver.forget()

    def update(self, rows, method: str) -> SolveStats:
        """After the graph absorbed an epoch: fold the changed rows back in and re-solve."""
        self.solver.grow()
        self.solver.reinstate(rows)
        return self.solver.solve(method)
