""":class:`PartitionedEngine`: :class:`~pulsegraph.compute.engine.RankEngine`'s epochs over P compute partitions,
driven through a :class:`~pulsegraph.compute.partitioned.base.PartitionPort`; :class:`InProcessPartitions`,
the port as plain method calls (what the tests and the bench use); :func:`make_rank_engine`, which keeps
P = 1 on today's engine.

Owns the epoch's sequence (route, prepare, choose, absorb with one exchange, solve each ranking) and its
figures: sweeps, values exchanged, rounds of the port, milliseconds. Must not import Ray.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pulsegraph.compute.backend import Backend, get_backend
from pulsegraph.compute.engine import FLOAT32_TOL, RankConfig, RankEngine, ceil_significant
from pulsegraph.compute.incremental import SolveStats
from pulsegraph.compute.pagerank import pagerank_target
from pulsegraph.compute.partitioned.base import ModuloOwner, Owner, PartChanges, PartitionPort
from pulsegraph.compute.partitioned.partition import RankPartition
from pulsegraph.compute.partitioned.solver import DistributedSolver
from pulsegraph.compute.tunkrank import tunkrank_target

log = logging.getLogger(__name__)


class InProcessPartitions:
    """:class:`PartitionPort` by plain method calls on :class:`RankPartition` objects in this process."""

    def __init__(self, partitions: Sequence[RankPartition]) -> None:
        self.partitions = list(partitions)

    @property
    def parts(self) -> int:
        return len(self.partitions)

    def _op(self, part: RankPartition, op: str):
        if op not in RankPartition.OPS:
            raise ValueError(f"no partition operation {op!r}")
        return getattr(part, op)

    def each(self, op: str, *args: Any) -> list[Any]:
        return [self._op(p, op)(*args) for p in self.partitions]

    def each_own(self, op: str, args: Sequence[tuple]) -> list[Any]:
        return [self._op(p, op)(*a) for p, a in zip(self.partitions, args, strict=True)]

    def exchange(self, send: str, receive: str, *args: Any) -> list[Any]:
        sent = [self._op(p, send)(*args) for p in self.partitions]
        return [self._op(p, receive)([m[i] for m in sent], *args) for i, p in enumerate(self.partitions)]

    def write(self, epoch: int, data_dir: str) -> tuple[tuple[str, str], ...]:
        return ()  # pickled with the engine

    def reopen(self, folder: Path | None, started: Any = None) -> None:
        pass


@dataclass(frozen=True)
class PartitionRun:
    """One ranking's epoch: the solver's figures as :class:`~pulsegraph.compute.engine.AlgoRun` has them,
    and what the partitions exchanged: values in ``exchanged_sweeps`` sweeps (``boundary`` each: the
    products of the solve and the recomputed residuals, so one more than ``stats.sweeps`` where the epoch
    began with one) and by pushes, and the rounds of the port (each a reduction of the partitions'
    answers, some with an exchange before it)."""

    stats: SolveStats
    ms: float
    boundary: int
    exchanged_sweeps: int
    dense_values: int
    sparse_values: int
    reductions: int

    @property
    def values_exchanged(self) -> int:
        return self.dense_values + self.sparse_values


class PartitionedEngine:
    """:class:`~pulsegraph.compute.engine.RankEngine`'s epochs over P partitions (see the module docstring).

    ``partitions``: a count (in-process :class:`RankPartition` objects are made) or a :class:`PartitionPort`
    over partitions made elsewhere (Ray actors), built with the same ``owner``. ``compact_min``: the
    partitions' overlay compaction floor (tests set it low to exercise compaction)."""

    def __init__(
        self, config: RankConfig | None = None, partitions: int | PartitionPort = 2, owner: Owner | None = None,
        backend: Backend | None = None, compact_min: int | None = None,
    ) -> None:
        c = config or RankConfig()
        if c.dtype == "float32" and c.tol < FLOAT32_TOL:
            log.warning("float32 ranks cannot reach tol %.1g; using %.1g", c.tol, FLOAT32_TOL)
            c = c.replace(tol=FLOAT32_TOL)
        self.config = c
        if isinstance(partitions, int):
            if partitions < 1:
                raise ValueError(f"need at least one partition, not {partitions}")
            self.owner: Owner = owner or ModuloOwner(partitions)
            be = backend or get_backend(c.device)  # type: ignore[arg-type]
            port: PartitionPort = InProcessPartitions(
                [RankPartition(q, partitions, self.owner, c, be, compact_min) for q in range(partitions)]
            )
        else:
            port = partitions
            self.owner = owner or ModuloOwner(port.parts)
        self.port = port
        self.parts = port.parts
        self.n = 0
        self.stored = 0
        self.merge_ms = 0.0
        self.boundary = 0  # values exchanged per sweep, all partition pairs
        self._rounds = self._sweeps = 0
        self.algorithms = {
            "pagerank": DistributedSolver(self, "pagerank", c.damping, pagerank_target(c.damping, c.tol), c.max_iter, c.tol,
                                     c.dense_switch),
            "tunkrank": DistributedSolver(self, "tunkrank", c.tunkrank_p, tunkrank_target(c.tunkrank_p, c.tol), c.max_iter,
                                     c.tol, c.dense_switch),
        }

    @property
    def graph_ms(self) -> float:
        """The last epoch's merge, as :attr:`RankEngine.graph_ms` is for the compute stage's ``graph_ms``: here
        the partitions' prepare and absorb rounds (their pushes of the changed rows included)."""
        return self.merge_ms

    def backend_name(self) -> str:
        """Where the partitions rank: ``numpy`` or ``cupy`` (the first partition's answer; all are made alike)."""
        return str(self.port.each("backend_name")[0])

    # -- the port, counted --------------------------------------------------------------------------

    def call(self, op: str, *args: Any) -> list[Any]:
        self._rounds += 1
        return self.port.each(op, *args)

    def exchange(self, send: str, receive: str, *args: Any) -> list[Any]:
        self._rounds += 1
        self._sweeps += send == "sweep_send"
        return self.port.exchange(send, receive, *args)

    def write_parts(self, epoch: int, data_dir: str) -> tuple[tuple[str, str], ...]:
        """The partitions' rows into epoch ``epoch``'s checkpoint, where they live elsewhere (see
        :meth:`PartitionPort.write`): the engine is pickled next, and is read back with :meth:`reopen`."""
        return self.port.write(epoch, data_dir)

    def reopen(self, folder: Path | None, started: Any = None) -> None:
        """This engine read back from a checkpoint in ``folder``: its partitions again, from their files
        (``started``: :meth:`PartitionPort.reopen`'s)."""
        self.port.reopen(folder, started)

    # -- epochs -------------------------------------------------------------------------------------

    def choose(self, changed_pairs: int) -> str:
        """:meth:`RankEngine.choose` on the partitions' sums."""
        if changed_pairs > self.config.push_max_delta * max(self.stored, 1):
            return "sweep"
        return "push"

    def route(
        self, n: int, src, dst, dweight, present: np.ndarray | None = None, flips: np.ndarray | None = None,
    ) -> list[PartChanges]:
        """Split global arrays by owner, as the shards would send them (for callers that hold them whole:
        tests and the bench)."""
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        dw = np.asarray(dweight, dtype=np.float64)
        o = self.owner(src)
        new = np.arange(self.n, max(n, self.n), dtype=np.int64)
        new_o = self.owner(new)
        moved = np.zeros(0, np.int64)
        if present is not None and flips is not None:
            moved = np.asarray(flips, dtype=np.int64)
            moved = moved[moved < self.n]
        moved_o = self.owner(moved)
        out = []
        for q in range(self.parts):
            sel = o == q
            ch = PartChanges(src[sel], dst[sel], dw[sel])
            if present is not None:
                mine = moved[moved_o == q]
                ch.new_present = np.asarray(present, dtype=bool)[new[new_o == q]]
                ch.flip_ids, ch.flip_present = mine, np.asarray(present, dtype=bool)[mine]
            out.append(ch)
        return out

    def update(
        self, n: int, src, dst, dweight, method: str | None = None,
        present: np.ndarray | None = None, flips: np.ndarray | None = None,
    ) -> dict[str, PartitionRun]:
        """:meth:`RankEngine.update`, partitioned: the same arguments and rankings."""
        return self.update_parts(n, self.route(n, src, dst, dweight, present, flips), method)

    def update_parts(self, n: int, changes: Sequence[PartChanges], method: str | None = None) -> dict[str, PartitionRun]:
        """Absorb one epoch whose changes come already split by owner (``changes[q]``: partition ``q``'s)."""
        t0 = time.perf_counter()
        self._rounds = 0
        window = [c.new_present is not None for c in changes]
        if any(window) and not all(window):
            raise ValueError("window mode: every partition needs its new vertices' presence")
        ans = self.port.each_own("prepare", [(n, c) for c in changes])
        self.n = max(self.n, n)
        self.stored = sum(a[1] for a in ans)
        method = method or self.choose(sum(a[0] for a in ans))
        got = self.port.exchange("absorb_send", "absorb_receive", method)
        self.stored = sum(a["stored"] for a in got)
        self.boundary = sum(a["boundary"] for a in got)
        recompute = {}
        for name, algo in self.algorithms.items():
            algo.bsum = sum(a["bsum"][name] for a in got)
            algo.window = any(a["window"][name] for a in got)
            recompute[name] = any(a["recompute"][name] for a in got)
        self.merge_ms = (time.perf_counter() - t0) * 1000.0
        runs = {}
        for name, algo in self.algorithms.items():
            t = time.perf_counter()
            self._rounds = self._sweeps = 0
            label, it, sweeps, res = algo.solve(method, recompute[name])
            runs[name] = self._run(name, label, it, sweeps, res, t)
        return runs

    def rescore(self) -> dict[str, PartitionRun]:
        """Every ranking from scratch on the graph as it is."""
        runs = {}
        for name, algo in self.algorithms.items():
            t = time.perf_counter()
            self._rounds = self._sweeps = 0
            label, it, sweeps, res = algo.scratch(None)
            runs[name] = self._run(name, label, it, sweeps, res, t)
        return runs

    def _run(self, name: str, label: str, it: int, sweeps: int, res: float, t: float) -> PartitionRun:
        rounds = self._rounds
        counters = self.port.each("take_counters", name)
        read, dense, sparse = (sum(c[i] for c in counters) for i in range(3))
        stats = SolveStats(label, it, sweeps, read, res)
        ms = (time.perf_counter() - t) * 1000.0
        return PartitionRun(stats, ms, self.boundary, self._sweeps, dense, sparse, rounds)

    # -- results ------------------------------------------------------------------------------------

    def host_scores(self) -> dict[str, np.ndarray]:
        """Every ranking as one host vector over the global ids (the single process's ``host_scores``): the
        partitions' blocks put side by side, at the API boundary."""
        parts = self.port.each("blocks")
        out = {}
        for name in self.algorithms:
            y = np.zeros(self.n, dtype=np.dtype(self.config.dtype))
            b = np.ones(self.n, dtype=y.dtype)
            for gids, blocks in parts:
                yy, bb = blocks[name]
                y[gids] = yy
                if bb is not None:
                    b[gids] = bb
            present = np.where(b > 0, y, 0.0).astype(y.dtype)
            if name == "pagerank":
                total = present.sum()
                out[name] = present / (total if total > 0 else 1.0)
            else:
                out[name] = np.where(b > 0, (y - b) / self.config.tunkrank_p, 0.0).astype(y.dtype)
        return out

    def error_bounds(self, scores: dict[str, np.ndarray]) -> dict[str, float]:
        """The L1 error each ranking's scores are proven within: the same as :meth:`RankEngine.error_bounds`
        (the stopping rule is the same, applied to the reduced residual)."""
        tol = self.config.tol
        out = {}
        for name, s in scores.items():
            if name == "pagerank":
                out[name] = tol
            elif name == "tunkrank":
                out[name] = ceil_significant(tol * max(float(np.sum(s)), 1.0))
        return out

    def boundary_matrix(self) -> np.ndarray:
        """``[q, p]``: values ``q`` sends ``p`` per sweep (its live ghosts owned by ``p``)."""
        return np.array(self.port.each("boundary"), dtype=np.int64)

    def partition_bytes(self) -> list[int]:
        return list(self.port.each("nbytes"))

    def local_sizes(self) -> list[dict[str, int]]:
        return list(self.port.each("local_size"))


def make_rank_engine(
    config: RankConfig | None = None, partitions: int = 1, owner: Owner | None = None, backend: Backend | None = None,
) -> RankEngine | PartitionedEngine:
    """One partition: today's :class:`RankEngine`, untouched. More: a :class:`PartitionedEngine`."""
    if partitions <= 1:
        return RankEngine(config, backend)
    return PartitionedEngine(config, partitions, owner, backend)
