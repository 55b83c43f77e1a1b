"""The ranking engine: the resident graph and the incremental algorithms on it, one epoch at a time.

Owns the per-epoch sequence (grow, retract the changed rows, absorb the
changes, re-solve each algorithm by the method the delta's size calls for) and
the timing of it. Takes changes as host arrays of per-pair weight differences
in fixed-point units; results stay on the device until :meth:`RankEngine.host_scores`.
Imports neither Ray nor the snapshot stage, so a GPU box with only
CuPy/NumPy/SciPy can run it (bench/gpu_check.sh does).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from pulsegraph.base.arrays import unique
from pulsegraph.compute.backend import Backend, get_backend
from pulsegraph.compute.incremental import SolveStats
from pulsegraph.compute.pagerank import DAMPING, DEFAULT_MAX_ITER, DEFAULT_TOL, PageRank
from pulsegraph.compute.resident import ResidentGraph
from pulsegraph.compute.tunkrank import DEFAULT_P, TunkRank

log = logging.getLogger(__name__)

# float32 carries 7 digits; summed over a million ranks, errors below ~1e-5 L1 are rounding, not convergence.
FLOAT32_TOL = 1e-5


def ceil_significant(x: float, digits: int = 2) -> float:
    """``x`` rounded up to ``digits`` significant digits: still a bound, and one that two solves of the same
    graph (whose sums differ in their last digits) state alike."""
    if x <= 0 or not math.isfinite(x):
        return x
    scale = 10.0 ** (math.floor(math.log10(x)) - digits + 1)
    return float(f"{math.ceil(x / scale * (1 - 1e-12)) * scale:.{digits}g}")


@dataclass(frozen=True)
class RankConfig:
    device: str = "auto"
    dtype: str = "float64"
    tol: float = DEFAULT_TOL
    max_iter: int = DEFAULT_MAX_ITER
    damping: float = DAMPING
    tunkrank_p: float = DEFAULT_P
    # Epochs that change at most this share of the stored pairs start with a residual push (which
    # hands over to a Krylov solve once its frontier is dense); bigger ones go straight to the
    # solver's full-graph method: warm-started GMRES, or power iteration at small damping. Measured on
    # R-MAT 1M (bench/rank.py): push is as fast or faster up to 0.01% at tol 1e-3..1e-7, GMRES from 0.1%.
    push_max_delta: float = 0.0001
    # The overlay of changes is folded into the base CSR past this share of it.
    compact_fraction: float = 0.05
    # A push round whose frontier reads this share of the edges runs as a full sweep instead:
    # a gathered push costs a few times a streamed sweep per edge.
    dense_switch: float = 0.25

    @classmethod
    def from_settings(cls, settings) -> "RankConfig":
        """From the settings' fields (``pulsegraph.settings.Settings``, or a dict of some of them);
        duck-typed so that the compute stage never imports the wiring."""
        get = settings.get if isinstance(settings, dict) else lambda k: getattr(settings, k, None)
        given: dict[str, Any] = {k: get(v) for k, v in RANK_SETTINGS.items() if get(v) is not None}
        return cls(**given)

    def replace(self, **kw) -> "RankConfig":
        return RankConfig(**{**{f.name: getattr(self, f.name) for f in fields(self)}, **kw})


# The settings field behind each RankConfig field: the one place the two are mapped.
RANK_SETTINGS = {
    "device": "device", "dtype": "rank_dtype", "tol": "pagerank_tol", "max_iter": "pagerank_max_iter",
    "tunkrank_p": "tunkrank_p", "push_max_delta": "rank_push_max_delta", "compact_fraction": "rank_compact_fraction",
}


@dataclass(frozen=True)
class AlgoRun:
    stats: SolveStats
    ms: float


class RankEngine:
    def __init__(self, config: RankConfig | None = None, backend: Backend | None = None) -> None:
        c = config or RankConfig()
        if c.dtype == "float32" and c.tol < FLOAT32_TOL:
            log.warning("float32 ranks cannot reach tol %.1g; using %.1g", c.tol, FLOAT32_TOL)
            c = c.replace(tol=FLOAT32_TOL)
        self.config = c
        self.be = backend or get_backend(c.device)  # type: ignore[arg-type]
        self.graph = ResidentGraph(self.be, np.dtype(c.dtype), c.compact_fraction)
        self.algorithms = {
            "pagerank": PageRank(self.graph, c.damping, c.tol, c.max_iter, c.dense_switch),
            "tunkrank": TunkRank(self.graph, c.tunkrank_p, c.tol, c.max_iter, c.dense_switch),
        }
        self.graph_ms = 0.0
        log.info("ranking on %s (%s)", self.be.name, c.dtype)

    def choose(self, changed_pairs: int) -> str:
        stored = self.graph.nnz + self.graph.overlay_nnz
        if changed_pairs > self.config.push_max_delta * max(stored, 1):
            return "sweep"
        return "push"

    def update(
        self, n: int, src: np.ndarray, dst: np.ndarray, dweight: np.ndarray, method: str | None = None,
        present: np.ndarray | None = None, flips: np.ndarray | None = None,
    ) -> dict[str, AlgoRun]:
        """Absorb one epoch: ``n`` vertices now, ``A[src, dst] += dweight`` (host arrays), and re-rank.

        Window mode: ``present`` is the host mask of the vertices in the snapshot (only its entries for
        new vertices and for ``flips``, the older vertices whose presence changed, are read), and the
        rankings are those of the present subgraph (see :mod:`pulsegraph.compute.incremental`)."""
        be = self.be
        t0 = time.perf_counter()
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        # The sorts of an epoch's changes run where the graph lives (on a GPU: ~60 ms of host sorting a
        # 500 k-change epoch, on the device ~1 ms).
        if be.is_gpu:
            s_dev = be.asarray(src)
            rows = be.xp.unique(s_dev)
            changed = len(be.xp.unique((s_dev << 32) | be.asarray(dst))) if len(src) else 0
        else:
            rows = unique(src)
            changed = len(unique((src << 32) | dst)) if len(src) else 0
        method = method or self.choose(changed)
        self.graph.grow(n)
        retract_ms = {}
        for name, algo in self.algorithms.items():
            t = time.perf_counter()
            if present is not None:
                s = algo.solver
                old = s.n
                s.grow(present[old:n])
                moved = np.asarray(flips if flips is not None else np.zeros(0, np.int64), dtype=np.int64)
                moved = moved[moved < old]
                s.set_rhs(moved, present[moved])
            if method == "push":
                algo.retract(rows)
            else:
                algo.forget()  # a full-graph solve recomputes the residual in one sweep
            retract_ms[name] = time.perf_counter() - t
        t1 = time.perf_counter()
        self.graph.apply(src, dst, dweight)
        be.synchronize()
        self.graph_ms = (time.perf_counter() - t1 + (t1 - t0) - sum(retract_ms.values())) * 1000.0
        runs = {}
        for name, algo in self.algorithms.items():
            t = time.perf_counter()
            stats = algo.update(rows, method)
            be.synchronize()
            runs[name] = AlgoRun(stats, (time.perf_counter() - t + retract_ms[name]) * 1000.0)
        return runs

    def rescore(self) -> dict[str, AlgoRun]:
        """Every algorithm from scratch on the graph as it is (what an epoch costs without history)."""
        runs = {}
        for name, algo in self.algorithms.items():
            t = time.perf_counter()
            stats = algo.initialize()
            self.be.synchronize()
            runs[name] = AlgoRun(stats, (time.perf_counter() - t) * 1000.0)
        return runs

    def scores(self, name: str):
        return self.algorithms[name].scores()

    def error_bounds(self, scores: dict[str, np.ndarray]) -> dict[str, float]:
        """The L1 error each ranking's host scores are proven within: what the stopping rule guarantees,
        a function of the tolerance (and, for TunkRank, of the scores' sum) only, so that an epoch ranked
        again after a recovery states the same bound (up to the sum's last digits)."""
        tol = self.config.tol
        out = {}
        for name, s in scores.items():
            if name == "pagerank":
                out[name] = tol  # the published ranks sum to 1 and are within tol (L1) of PageRank
            elif name == "tunkrank":  # within tol times the scores' sum, and at most tol below a sum of 1
                out[name] = ceil_significant(tol * max(float(np.sum(s)), 1.0))
        return out

    def host_scores(self) -> dict[str, np.ndarray]:
        """The one copy to the host, when an epoch is published."""
        return {name: self.be.to_host(algo.scores()) for name, algo in self.algorithms.items()}
