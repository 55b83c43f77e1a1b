"""The compute actor: merges each sealed epoch's deltas, ranks the graph incrementally, publishes results.

It receives epochs in order from the coordinator (``apply_epoch``), keeps the
whole graph in :class:`~compute.graph.GlobalGraph` (names, attributes, edges by
shard slot) and the ranked part of it resident on the device in a
:class:`~compute.engine.RankEngine`, and keeps the last few
:class:`~compute.results.EpochResult` for the API process to pull. Scores are
copied to the host here, once per epoch, and nowhere else. The only module of
the compute stage that imports Ray.
"""

from __future__ import annotations

import collections
import logging
import pickle
import time
from pathlib import Path

import ray

from compute.apps.runner import AppConfig, Applications
from compute.engine import RankConfig, RankEngine
from compute.graph import EdgeChanges, GlobalGraph
from compute.results import EpochResult
from snapshots.checkpoint import CheckpointStore, read_verified, write_atomic

log = logging.getLogger(__name__)

# Results waiting for the API to pull them; the API polls several times per
# epoch interval, so a handful covers any hiccup.
KEEP_RESULTS = 16


@ray.remote
class ComputeActor:
    def __init__(self, rank_types: tuple[str, ...] | None = None, config=None, restore: tuple[str, str] | None = None) -> None:
        """``config``: a :class:`~compute.engine.RankConfig`, or the settings (or a dict of their
        ranking fields) it is read from. ``restore``: (path, sha256) of the ids file of a checkpoint."""
        logging.basicConfig(level=logging.INFO)
        saved: dict = {}
        if restore is None:
            self._graph = GlobalGraph()
        else:
            saved = pickle.loads(read_verified(Path(restore[0]), restore[1]))
            self._graph = GlobalGraph.restore_ids(saved)
        self._rank_types = tuple(rank_types) if rank_types else None
        self._apps = Applications(AppConfig() if config is None or isinstance(config, RankConfig) else AppConfig.from_settings(config))
        self._apps.restore(saved.get("apps"))
        if config is None:
            config = RankConfig()
        elif not isinstance(config, RankConfig):
            config = RankConfig.from_settings(config)
        self._engine = RankEngine(config)
        self._results: collections.deque[EpochResult] = collections.deque(maxlen=KEEP_RESULTS)

    def apply_epoch(self, info: dict, *deltas) -> dict:
        g = self._graph
        n_before = g.n
        merged = [g.apply_with_previous(d) for d in sorted(deltas, key=lambda d: d.shard)]
        changes = EdgeChanges.concat([c for c, _ in merged])
        before = EdgeChanges.concat([b for _, b in merged])
        src, dst, dw = g.weight_differences(changes, before, self._rank_types)
        runs = self._engine.update(g.n, src, dst, dw)
        t0 = time.perf_counter()
        scores = self._engine.host_scores()
        publish_ms = (time.perf_counter() - t0) * 1000.0
        out_deg, in_deg = g.degrees()
        full = bool(deltas) and all(d.full for d in deltas)
        apps = self._apps.run(g, info["epoch"], changes, before, full, scores, g.n - n_before)
        result = EpochResult(
            epoch=info["epoch"],
            vector=info["vector"],
            records=info["records"],
            vertices=g.n,
            edges=g.live_edges(),
            committed_at=info["sealed_at"],
            commit_ms=info["commit_ms"],
            timeliness_ms=info["timeliness_ms"],
            scores=scores,
            out_degree=out_deg,
            in_degree=in_deg,
            compute_ms={name: run.ms for name, run in runs.items()},
            iterations={name: run.stats.iterations for name, run in runs.items()},
            edge_changes=changes,
            full_changes=full,
            types=list(g.types),
            methods={name: run.stats.method for name, run in runs.items()},
            graph_ms=self._engine.graph_ms + publish_ms,
            apps=apps,
            apps_ms=dict(self._apps.ms),
        )
        self._results.append(result)
        return {
            "epoch": result.epoch, "vertices": result.vertices, "edges": result.edges,
            "compute_ms": result.compute_ms.get("pagerank", 0.0),
        }

    def checkpoint(self, epoch: int, data_dir: str) -> str:
        """Write the global ids as of the last epoch applied (``epoch``: the coordinator orders this call
        after that epoch's ``apply_epoch``); returns the file's sha256."""
        folder = CheckpointStore(data_dir).folder(epoch)
        folder.mkdir(parents=True, exist_ok=True)
        state = {**self._graph.ids_state(), "apps": self._apps.state_dict()}
        return write_atomic(folder / "compute.ckpt", pickle.dumps(state, protocol=5))

    def results_after(self, epoch: int, known_names: int) -> tuple[list[EpochResult], list[str]]:
        """Results newer than ``epoch``, and the vertex names from id ``known_names`` on."""
        fresh = [r for r in self._results if r.epoch > epoch]
        return fresh, self._graph.names[known_names:]

    def snapshot(self) -> dict:
        return self._graph.snapshot()

    def latest_epoch(self) -> int:
        return self._results[-1].epoch if self._results else 0

    def backend(self) -> str:
        """Where the ranking runs: ``numpy`` or ``cupy``."""
        return self._engine.be.name
