"""The driver's half of one ranking's partitioned solve: :class:`~pulsegraph.compute.incremental.ResidualSolver`'s
control flow, each vector operation a call to the partitions, each scalar a reduction of their answers.

Same constants, same stopping rule, same targets as the single process; the Hessenberg matrix of a GMRES
cycle and its small least-squares problem live here. Must not touch a vector: it has none.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from pulsegraph.compute.exceptions import PowerIterationFailedConvergence
from pulsegraph.compute.incremental import (
    KRYLOV_MIN_ALPHA,
    KRYLOV_RECURRENCE_SHARE,
    KRYLOV_RESTART,
    KRYLOV_STALL,
    REORTHOGONALIZE,
    SWEEP_HEADROOM,
    UNPUSHED_SHARE,
)

log = logging.getLogger(__name__)

Result = tuple[str, int, int, float]  # (method, iterations, sweeps, ||r||_1 at the end)


class Driver(Protocol):
    """What a solver needs of its engine: the port's rounds, counted, and the stored entries."""

    stored: int

    def call(self, op: str, *args: Any) -> list[Any]:
        """Every partition runs ``op(*args)`` (one round)."""

    def exchange(self, send: str, receive: str, *args: Any) -> list[Any]:
        """An exchange of messages and the receivers' answers (one round)."""


class DistributedSolver:
    """The driver's half of one ranking's solve: :class:`~pulsegraph.compute.incremental.ResidualSolver`'s
    control flow, with every vector operation a call to the partitions and every scalar a reduction."""

    def __init__(self, engine: Driver, name: str, alpha: float, target, max_iter: int, tol: float,
                 dense_switch: float) -> None:
        self.e = engine
        self.name = name
        self.alpha = alpha
        self.target = target
        self.max_iter = max_iter
        self.tol = tol
        self.dense_switch = dense_switch
        self.sweep_method = "krylov" if alpha >= KRYLOV_MIN_ALPHA else "power"
        self.bsum = 0.0
        self.window = False

    def _each(self, op: str, *args):
        return self.e.call(op, self.name, *args)

    def _exchange(self, send: str, receive: str, *args):
        return self.e.exchange(send, receive, self.name, *args)

    def _residual(self) -> tuple[float, float]:
        ans = self._each("residual")
        return sum(a[0] for a in ans), self.target(sum(a[1] for a in ans), self.bsum)

    def _failed(self, it: int, res: float, goal: float) -> PowerIterationFailedConvergence:
        return PowerIterationFailedConvergence(self.name, it, self.tol * res / max(goal, 1e-300), self.tol)

    def _nothing_present(self) -> bool:
        if not self.window or self.bsum > 0:
            return False
        self._each("zero")
        return True

    def recompute(self, settle: bool = False) -> tuple[float, float]:
        """``r = b + alpha P^T y - y`` from one distributed sweep; answers ``(||r||_1, target)``."""
        ans = self._exchange("sweep_send", "sweep_receive", "y", 0, settle)
        res, ysum = sum(a[0] for a in ans), sum(a[1] for a in ans)
        if settle and sum(a[2] for a in ans):
            got = self._exchange("settle_send", "sparse_receive")
            res, ysum = sum(a[0] for a in got), sum(a[1] for a in got)
        return res, self.target(ysum, self.bsum)

    def scratch(self, method: str | None) -> Result:
        self._each("scratch_init")
        self.recompute()
        _, it, sweeps, res = self.converge(method, 1.0)
        return "scratch", it, sweeps, res

    def solve(self, method: str, recompute: bool) -> Result:
        if recompute:
            self.recompute()
        if method in ("power", "krylov", "sweep"):
            return self.converge(None if method == "sweep" else method, SWEEP_HEADROOM)
        if method == "push":
            return self._push_until_done()
        raise ValueError(f"unknown method {method!r}")

    def converge(self, method: str | None, headroom: float, it: int = 0) -> Result:
        method = method or self.sweep_method
        if self._nothing_present():
            return method, it, 0, 0.0
        if method == "krylov":
            return self._krylov_until_done(method, headroom, it)
        if method == "power":
            return self._sweep_until_done(method, headroom, it)
        raise ValueError(f"unknown method {method!r}")

    def _sweep_until_done(self, method: str, headroom: float, it: int) -> Result:
        res, goal = self._residual()
        start = it
        while res > headroom * goal:
            if it == self.max_iter:
                raise self._failed(it, res, goal)
            ans = self._exchange("sweep_send", "sweep_receive", "r", 0, False)
            it += 1
            res, goal = sum(a[0] for a in ans), self.target(sum(a[1] for a in ans), self.bsum)
        return method, it, it - start, res

    def _krylov_until_done(self, method: str, headroom: float, it: int) -> Result:
        start = it
        res, goal = self._residual()
        while res > headroom * goal:
            before = res
            it = self._gmres(it, KRYLOV_RECURRENCE_SHARE * headroom)
            if it >= self.max_iter:
                raise self._failed(it, *self._residual())
            res, goal = self.recompute(settle=True)
            it += 1
            if res > headroom * goal and res > KRYLOV_STALL * before:
                log.debug("%s: GMRES stalled at residual %.3g (goal %.3g); finishing with sweeps", self.name, res, goal)
                _, done, _, res = self._sweep_until_done(method, headroom, it)
                return method, done, done - start, res
        return method, it, it - start, res

    def _gmres(self, it: int, share: float) -> int:
        """One GMRES(:data:`KRYLOV_RESTART`) cycle as :meth:`ResidualSolver._gmres` runs it, on partitioned
        basis vectors: the driver keeps the Hessenberg matrix and solves the small least-squares problem."""
        m = min(KRYLOV_RESTART, self.max_iter - it)
        if m <= 0:
            return it
        ans = self._each("krylov_begin", m)
        beta, ysum = math.sqrt(sum(a[0] for a in ans)), sum(a[1] for a in ans)
        if beta == 0.0 or not np.isfinite(beta):
            self._each("krylov_end", 0, None, None)
            return it
        sums = np.zeros(m + 1)
        sums[0] = sum(a[0] for a in self._each("krylov_extend", 0, beta, None))
        h = np.zeros((m + 1, m))
        k = 0
        z: np.ndarray = np.zeros(0)
        rhs: np.ndarray = np.zeros(1)
        while k < m:
            c = np.sum(self._exchange("sweep_send", "sweep_receive", "basis", k, False), axis=0)
            it += 1
            hn = math.sqrt(max(sum(self._each("krylov_orth", k, c)), 0.0))
            ch = c
            if hn < REORTHOGONALIZE * float(np.sqrt(hn * hn + ch @ ch)):
                c2 = np.sum(self._each("krylov_dots", k), axis=0)
                hn = math.sqrt(max(sum(self._each("krylov_orth", k, c2)), 0.0))
                ch = ch + c2
            h[: k + 1, k] = -ch
            h[k, k] += 1.0
            h[k + 1, k] = -hn
            k += 1
            rhs = np.zeros(k + 1)
            rhs[0] = beta
            z = np.linalg.lstsq(h[: k + 1, :k], rhs, rcond=None)[0]
            left = rhs - h[: k + 1, :k] @ z
            goal = self.target(ysum + float(sums[:k] @ z), self.bsum)
            if hn == 0.0 or not np.isfinite(hn):
                break
            check = float(np.linalg.norm(left)) <= share * goal
            got = self._each("krylov_extend", k, hn, left if check else None)
            sums[k] = sum(a[0] for a in got)
            if check and sum(a[1] for a in got) <= share * goal:
                break
        if k:
            self._each("krylov_end", k, z, rhs - h[: k + 1, :k] @ z)
        else:
            self._each("krylov_end", 0, None, None)
        return it

    def _push_until_done(self) -> Result:
        it = 0
        if self._nothing_present():
            return "push", 0, 0, 0.0
        total = self.e.stored
        stats = self._each("push_stats")
        while True:
            res, ysum = sum(s[0] for s in stats), sum(s[1] for s in stats)
            goal = self.target(ysum, self.bsum)
            if res <= goal:
                return "push", it, 0, res
            if it == self.max_iter:
                raise self._failed(it, res, goal)
            it += 1
            theta, work = frontier(stats, UNPUSHED_SHARE * goal)
            if work >= self.dense_switch * total:
                _, done, sweeps, res = self.converge(None, SWEEP_HEADROOM, it - 1)
                return "push", done, sweeps, res
            stats = self._exchange("push_send", "push_receive", theta)


def frontier(stats: Sequence[tuple], budget: float) -> tuple[float, float]:
    """The push threshold ``theta`` from the partitions' histograms (``_frontier`` of the single process on
    their sum): a power of two as high as possible while the residual below it sums to at most
    ``budget``; and the stored entries of the rows at or above it."""
    parts = [(s[2], s[3], s[4]) for s in stats if s[2] is not None]
    if not parts:
        return math.inf, 0.0
    lo = min(p[0] for p in parts)
    size = max(p[0] + len(p[1]) for p in parts) - lo
    mass, work = np.zeros(size), np.zeros(size)
    for plo, pm, pw in parts:
        mass[plo - lo: plo - lo + len(pm)] += pm
        work[plo - lo: plo - lo + len(pw)] += pw
    k = int(np.searchsorted(np.cumsum(mass), budget, side="right"))
    return float(2.0 ** (lo + k)), float(work[k:].sum())
