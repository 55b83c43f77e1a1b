"""The compute actor: merges each sealed epoch's deltas and publishes its results.

It receives epochs in order from the coordinator (``apply_epoch``), keeps the
whole graph in :class:`~compute.graph.GlobalGraph`, ranks it, and keeps the last
few :class:`~compute.results.EpochResult` for the API process to pull.
"""

from __future__ import annotations

import collections
import logging
import time

import ray

from compute.graph import EdgeChanges, GlobalGraph
from compute.pagerank import DEFAULT_MAX_ITER, DEFAULT_TOL, pagerank
from compute.results import EpochResult

log = logging.getLogger(__name__)

# Results waiting for the API to pull them; the API polls several times per
# epoch interval, so a handful covers any hiccup.
KEEP_RESULTS = 16


@ray.remote
class ComputeActor:
    def __init__(
        self,
        rank_types: tuple[str, ...] | None = None,
        tol: float = DEFAULT_TOL,
        max_iter: int = DEFAULT_MAX_ITER,
    ) -> None:
        logging.basicConfig(level=logging.INFO)
        self._graph = GlobalGraph()
        self._rank_types = tuple(rank_types) if rank_types else None
        self._tol = tol
        self._max_iter = max_iter
        self._results: collections.deque[EpochResult] = collections.deque(maxlen=KEEP_RESULTS)

    def apply_epoch(self, info: dict, *deltas) -> dict:
        g = self._graph
        changes = EdgeChanges.concat([g.apply(d) for d in sorted(deltas, key=lambda d: d.shard)])
        t0 = time.perf_counter()
        ranked = pagerank(g.adjacency(self._rank_types), tol=self._tol, max_iter=self._max_iter)
        rank_ms = (time.perf_counter() - t0) * 1000.0
        out_deg, in_deg = g.degrees()
        result = EpochResult(
            epoch=info["epoch"],
            vector=info["vector"],
            records=info["records"],
            vertices=g.n,
            edges=g.live_edges(),
            committed_at=info["sealed_at"],
            commit_ms=info["commit_ms"],
            timeliness_ms=info["timeliness_ms"],
            scores={"pagerank": ranked.scores},
            out_degree=out_deg,
            in_degree=in_deg,
            compute_ms={"pagerank": rank_ms},
            iterations={"pagerank": ranked.iterations},
            edge_changes=changes,
            types=list(g.types),
        )
        self._results.append(result)
        return {"epoch": result.epoch, "vertices": result.vertices, "edges": result.edges, "compute_ms": rank_ms}

    def results_after(self, epoch: int, known_names: int) -> tuple[list[EpochResult], list[str]]:
        """Results newer than ``epoch``, and the vertex names from id ``known_names`` on."""
        fresh = [r for r in self._results if r.epoch > epoch]
        return fresh, self._graph.names[known_names:]

    def snapshot(self) -> dict:
        return self._graph.snapshot()

    def latest_epoch(self) -> int:
        return self._results[-1].epoch if self._results else 0
