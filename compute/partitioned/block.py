"""One ranking's vectors in one compute partition, and the per-block arithmetic of its solver.

``y`` and ``b`` per owned vertex; ``ext`` is ``r`` followed by the outbox of the partition's ghosts (zero
between operations, so a push writes owned and remote residual in one pass); the Krylov basis's block
while a GMRES cycle runs. Everything here is local: the partition reduces and exchanges.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pulsegraph.compute.backend import Backend


class RankBlock:
    """One ranking's vectors in a partition: ``y`` and ``b`` per owned vertex, ``ext`` = ``r`` then the
    ghosts' outbox (zero between operations), and the Krylov basis while a GMRES cycle runs."""

    def __init__(self, alpha: float, be: Backend, dtype) -> None:
        self.alpha = alpha
        self.be = be
        self.dtype = dtype
        xp = be.xp
        self.y = xp.zeros(0, dtype=dtype)
        self.ext = xp.zeros(0, dtype=dtype)
        self.b: Any = None
        self.bsum = 0.0
        self.stale = False
        self.compactions = 0
        self.basis: Any = None
        self.w: Any = None
        self.settle: Any = None
        self.read = 0  # stored entries read, since the driver last took the counters
        self.dense = 0  # values sent in sweeps
        self.sparse = 0  # values sent by pushes

    @property
    def k(self) -> int:
        return len(self.y)

    @property
    def r(self):
        return self.ext[: self.k]

    def fit(self, size: int) -> None:
        """``ext`` to the local space's size; the outbox is zero at rest, so only ``r`` is kept."""
        if len(self.ext) != size:
            new = self.be.xp.zeros(size, dtype=self.dtype)
            new[: self.k] = self.ext[: self.k]
            self.ext = new

    def rhs(self):
        return 1.0 if self.b is None else self.b

    def bcount(self) -> float:
        return float(self.k) if self.b is None else self.bsum

    def grow(self, k: int, present=None) -> None:
        """As :meth:`ResidualSolver.grow`: new vertices start at ``y = b``, their residual 0 (the room past
        ``k`` in ``ext`` is zero)."""
        xp = self.be.xp
        extra = k - self.k
        if present is not None and self.b is None:
            self.b = xp.ones(self.k, dtype=self.dtype)
            self.bsum = float(self.k)
        if extra <= 0:
            return
        if self.b is None:
            tail = xp.ones(extra, dtype=self.dtype)
        else:
            if present is None:
                tail = xp.zeros(extra, dtype=self.dtype)
            else:
                host = np.asarray(present[:extra], dtype=bool)
                tail = self.be.asarray(host, dtype=self.dtype)
                self.bsum += float(np.count_nonzero(host))
            self.b = xp.concatenate([self.b, tail])
        self.y = xp.concatenate([self.y, tail.copy()])

    def set_rhs(self, idx: np.ndarray, present: np.ndarray) -> None:
        """As :meth:`ResidualSolver.set_rhs`, on local indices."""
        if len(idx) == 0:
            return
        xp = self.be.xp
        if self.b is None:
            self.b = xp.ones(self.k, dtype=self.dtype)
            self.bsum = float(self.k)
        d = self.be.asarray(np.asarray(idx, dtype=np.int64))
        new = self.be.asarray(np.asarray(present, dtype=bool), dtype=self.dtype)
        change = new - self.b[d]
        self.b[d] = new
        self.bsum += float(change.sum())
        if not self.stale:
            self.ext[d] += change

    def l1_and_sum(self) -> tuple[float, float]:
        return float(self.be.xp.abs(self.r).sum()), float(self.y.sum())

    # -- GMRES: this block of the basis ---------------------------------------------------------------

    def krylov_begin(self, m: int) -> tuple[float, float]:
        """A basis of ``m + 1`` blocks; ``w = r``. Answers ``(||r||_2^2, sum y)`` of this block."""
        self.basis = self.be.xp.empty((m + 1, self.k), dtype=self.dtype)
        self.w = self.r.copy()
        return float(self.w @ self.w), float(self.y.sum())

    def krylov_extend(self, j: int, hn: float, left) -> tuple[float, float | None]:
        """``v_j = w / hn``; answers its sum, and with ``left`` (the least-squares residual in the basis's
        coordinates) this block's part of ``||V left||_1``, the recurrence residual's L1 norm."""
        self.basis[j] = self.w / hn
        total = float(self.basis[j].sum())
        if left is None:
            return total, None
        r = self.be.asarray(left, dtype=self.dtype) @ self.basis[: j + 1]
        return total, float(self.be.xp.abs(r).sum())

    def krylov_dots(self, j: int) -> np.ndarray:
        """This block of ``V^T w``."""
        return self.be.to_host(self.basis[: j + 1] @ self.w)

    def krylov_orth(self, j: int, c) -> float:
        """``w -= V c`` (Gram-Schmidt with the reduced ``c``); answers this block of ``||w||_2^2``."""
        self.w -= self.be.asarray(c, dtype=self.dtype) @ self.basis[: j + 1]
        return float(self.w @ self.w)

    def krylov_end(self, k: int, z, rcoef) -> None:
        """``y += V z``, ``r = V rcoef`` (the recurrence residual), and the basis dropped."""
        if k:
            self.y += self.be.asarray(z, dtype=self.dtype) @ self.basis[:k]
            self.ext[: self.k] = self.be.asarray(rcoef, dtype=self.dtype) @ self.basis[: k + 1]
        self.basis = self.w = None

    # -- the frontier ---------------------------------------------------------------------------------

    def histogram(self, out_degree) -> tuple[float, float, int | None, np.ndarray | None, np.ndarray | None]:
        """``||r||_1``, ``sum y``, and the residual by binary exponent from ``lo`` up: its mass, and the
        stored entries of its rows (None: no residual), for the driver to sum over the partitions."""
        xp = self.be.xp
        a = xp.abs(self.r)
        res, ysum = float(a.sum()), float(self.y.sum())
        nzi = xp.nonzero(a > 0)[0]
        if len(nzi) == 0:
            return res, ysum, None, None, None
        nz = a[nzi]
        expo = xp.floor(xp.log2(nz)).astype(np.int64)
        lo = int(expo.min())
        mass = self.be.to_host(xp.bincount(expo - lo, weights=nz))
        work = self.be.to_host(xp.bincount(expo - lo, weights=out_degree[nzi].astype(np.float64)))
        return res, ysum, lo, mass, work
