"""The compute stage without Ray: sealed epochs in, one :class:`~pulsegraph.compute.results.EpochResult` per ranked epoch out.

Owns the sequence the compute actor runs for each batch of sealed epochs: merge
the shards' deltas into the :class:`~pulsegraph.compute.graph.GlobalGraph`, rank the
graph incrementally on the :class:`~pulsegraph.compute.engine.RankEngine`, run the
applications, and copy to the host what the result carries. Several sealed
epochs handed over at once (the compute stage fell behind the cuts) are merged
in order and ranked once, as the newest of them: the result carries that
epoch's number and vector, and ``skipped`` names the epochs in between, which
have no results of their own. The graph after the merge is exactly the newest
epoch's snapshot (deltas are absolute states), so no result is ever labelled
with another epoch's number.

Windows: an epoch's facts carry ``window`` (T in seconds, None when off),
``watermark`` and ``late`` (read with ``.get``: absent means off). In window
mode the graph keeps which vertices are in the snapshot, the rankings are those
of the present subgraph, and the result counts the present vertices and carries
their mask; ``late`` adds up over the epochs merged into one result.

:mod:`pulsegraph.compute.actor` wraps it for Ray; ``bench/replay.py`` drives it directly.

The ranking engine comes from a factory (``engine_factory(rank config, partitions)``) so that the stage
never learns where the partitions live: one partition is today's
:class:`~pulsegraph.compute.engine.RankEngine`, made here exactly as before; more are a
:class:`~pulsegraph.compute.partitioned.PartitionedEngine`, over partitions in this process by default
(:func:`~pulsegraph.compute.partitioned.make_rank_engine`) or over Ray actors when the compute actor
hands in :func:`pulsegraph.compute.partition_actor.ray_rank_engine`. Either engine answers the calls the
stage makes (``update``, ``host_scores``, ``error_bounds``, ``graph_ms``), so a result has the same shape.
The applications likewise: :class:`~pulsegraph.compute.apps.runner.Applications` in this process, or from
``apps_factory`` an :class:`~pulsegraph.compute.apps.runner.AppsPort` (the compute actor's
:mod:`pulsegraph.compute.apps_actor` with partitions), whose epochs run while the next batch is merged and
ranked: :meth:`ComputeStage.apply_deferred` hands the result back with the call that completes it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulsegraph.compute.apps.runner import AppConfig, Applications, AppsPort
from pulsegraph.compute.engine import RankConfig, RankEngine
from pulsegraph.compute.graph import GlobalGraph
from pulsegraph.compute.partitioned import PartitionedEngine, make_rank_engine
from pulsegraph.compute.results import EpochResult
from pulsegraph.compute.slots import EdgeSlots, PartitionSlots
from pulsegraph.snapshots.checkpoint import CheckpointStore, WrittenPart, dumps
from pulsegraph.snapshots.delta import EpochDelta
from pulsegraph.snapshots.epoch import EpochInfo
from pulsegraph.snapshots.exceptions import CheckpointError

log = logging.getLogger(__name__)

# The ranking engine of a stage: today's, or the same epochs over P partitions.
RankingEngine = RankEngine | PartitionedEngine
# (rank config, partitions) -> the engine; called once per stage, so a restored stage gets new partitions.
EngineFactory = Callable[[RankConfig, int], RankingEngine]
# (applications' config, their checkpointed state) -> the applications where they run elsewhere.
AppsFactory = Callable[[AppConfig, dict | None], AppsPort]


@dataclass
class SealedEpoch:
    """What the coordinator hands over for one sealed epoch: its facts and every shard's delta."""

    info: EpochInfo
    deltas: list[EpochDelta] = field(default_factory=list)

    @staticmethod
    def split(infos: list[EpochInfo], deltas: Sequence[EpochDelta]) -> list[SealedEpoch]:
        """Sealed epochs ``infos`` (oldest first), each with its share of ``deltas``: the coordinator hands
        every shard's delta of each epoch in turn, ``len(deltas) // len(infos)`` per epoch."""
        per = len(deltas) // max(len(infos), 1)
        return [SealedEpoch(info, list(deltas[i * per:(i + 1) * per])) for i, info in enumerate(infos)]


@dataclass(frozen=True, kw_only=True)
class StageConfig:
    """What a compute stage is made with: the edge types ranked (None: all), the ranking, the
    applications, how long a vertex id rests before it is given to another name (None: never), and over
    how many partitions the ranking is solved (1: today's single engine)."""

    rank_types: tuple[str, ...] | None = None
    rank: RankConfig = field(default_factory=RankConfig)
    apps: AppConfig = field(default_factory=AppConfig)
    reuse_after: float | None = None
    partitions: int = 1

    @classmethod
    def from_settings(cls, settings, rank_types: tuple[str, ...] | None = None) -> StageConfig:
        """From the settings' fields (the wiring's ``Settings``), duck-typed as :meth:`RankConfig.from_settings`."""
        return cls(
            rank_types=rank_types, rank=RankConfig.from_settings(settings), apps=AppConfig.from_settings(settings),
            reuse_after=getattr(settings, "id_reuse_after", None),
            partitions=getattr(settings, "compute_partitions", None) or 1,
        )


class ComputeStage:
    def __init__(
        self, rank_types: tuple[str, ...] | None = None, rank: RankConfig | None = None,
        apps: AppConfig | None = None, graph: GlobalGraph | None = None, apps_state: dict | None = None,
        reuse_after: float | None = None, partitions: int = 1, engine_factory: EngineFactory | None = None,
        apps_factory: AppsFactory | None = None,
    ) -> None:
        self.graph = graph if graph is not None else GlobalGraph(reuse_after=reuse_after)
        self.rank_types = tuple(rank_types) if rank_types else None
        self.apps: Applications | AppsPort
        if apps_factory is None:
            self.apps = Applications(apps or AppConfig())
            self.apps.restore(apps_state)
        else:
            self.apps = apps_factory(apps or AppConfig(), apps_state)
        rank = rank or RankConfig()
        self.engine: RankingEngine
        if partitions <= 1 and engine_factory is None:
            self.engine = RankEngine(rank)  # today's path, untouched
        else:
            self.engine = (engine_factory or make_rank_engine)(rank, partitions)
            if isinstance(self.engine, PartitionedEngine) and isinstance(self.graph.slots, EdgeSlots) and not self.graph.slots.nbytes():
                # The merge view's slots go to the partitions too: no process holds every edge's slot.
                self.graph.slots = PartitionSlots(self.engine)
        self.epoch = 0  # the newest epoch merged
        # The epoch this stage was restored at when read back whole (None: built here, or from the ids): its
        # consumers may hold another epoch's graph, so its first results are published whole to them.
        self.whole_restored_at: int | None = None

    @property
    def backend_name(self) -> str:
        """Where the ranking runs: ``numpy`` or ``cupy``."""
        e = self.engine
        return e.be.name if isinstance(e, RankEngine) else e.backend_name()

    @property
    def deferred(self) -> bool:
        """Do the applications run elsewhere, so that :meth:`apply_deferred`'s result waits for them?"""
        return not isinstance(self.apps, Applications)

    def apply(self, epochs: list[SealedEpoch]) -> EpochResult:
        """Merge ``epochs`` (in order, each newer than the last merged) and rank the newest."""
        return self.apply_deferred(epochs)[1]()

    def apply_deferred(self, epochs: list[SealedEpoch]) -> tuple[EpochResult, Callable[[], EpochResult]]:
        """:meth:`apply`'s result, and the call that completes it with the applications' output: complete
        already where they run in this process; where they run in an actor of their own (:attr:`deferred`),
        the call waits for them, and meanwhile the next epochs may be merged and ranked (the actor takes its
        epochs in order)."""
        if not epochs:
            raise ValueError("no epoch to apply")
        g = self.graph
        n_before = g.n
        t0 = time.perf_counter()
        for e in epochs:
            if e.info.epoch <= self.epoch:
                raise ValueError(f"epoch {e.info.epoch} after epoch {self.epoch}")
            self.epoch = e.info.epoch
        # Window mode is announced by the epochs themselves (the coordinator's ``window``); absent: off.
        g.set_windowed(epochs[-1].info.window is not None)
        changes, before = g.apply_epochs([e.deltas for e in epochs])
        merge_ms = (time.perf_counter() - t0) * 1000.0
        src, dst, dw = g.weight_differences(changes, before, self.rank_types)
        present = g.present()
        runs = self.engine.update(g.n, src, dst, dw, present=present, flips=g.flips if present is not None else None)
        t1 = time.perf_counter()
        scores = self.engine.host_scores()
        publish_ms = (time.perf_counter() - t1) * 1000.0
        newest = epochs[-1]
        full = any(e.deltas and all(d.full for d in e.deltas) for e in epochs)
        info = newest.info
        apps_done: Callable[[], tuple[dict, dict[str, float]]]
        if isinstance(self.apps, Applications):
            ran = self.apps.run(g, info.epoch, changes, before, full, scores, g.n - n_before), dict(self.apps.ms)
            apps_done = lambda: ran  # one shape for both: the call that completes the result
        else:
            apps_done = self.apps.submit(g, info.epoch, changes, before, full, scores, g.n - n_before)
        out_deg, in_deg = g.degrees()
        result = EpochResult(
            epoch=info.epoch,
            vector=info.vector,
            records=info.records,
            vertices=g.present_count,
            edges=g.live_edges(),
            committed_at=info.sealed_at,
            ranked_at=time.time(),
            commit_ms=info.commit_ms,
            timeliness_ms=info.timeliness_ms,
            scores=scores,
            out_degree=out_deg,
            in_degree=in_deg,
            compute_ms={name: run.ms for name, run in runs.items()},
            iterations={name: run.stats.iterations for name, run in runs.items()},
            # The first add times are for the applications; the API's graph view never reads them.
            edge_changes=dataclasses.replace(changes, first_ts=None),
            full_changes=full,
            types=list(g.types),
            methods={name: run.stats.method for name, run in runs.items()},
            graph_ms=self.engine.graph_ms + publish_ms + merge_ms,
            skipped=[e.info.epoch for e in epochs[:-1]],
            error_bounds=self.engine.error_bounds(scores),
            window=info.window,
            watermark=info.watermark,
            late=sum(e.info.late for e in epochs),
            present=None if present is None else present.copy(),
            reuse_after=g.reuse_after if g.reusing else None,
        )

        def done() -> EpochResult:
            result.apps, result.apps_ms = apps_done()
            return result

        if not self.deferred:
            done()  # the applications ran here: the result is complete now
        return result, done

    def checkpoint_state(self) -> dict:
        """The ids and application state a checkpoint keeps (see :meth:`GlobalGraph.restore_ids`)."""
        return {**self.graph.ids_state(), "epoch": self.epoch, "apps": self.apps.state_dict()}

    def write_checkpoint(self, epoch: int, data_dir: str, whole_as: str | None = None) -> WrittenPart:
        """:meth:`checkpoint_state` as epoch ``epoch``'s compute part (the last epoch merged: the coordinator
        orders this call after that epoch's :meth:`apply`). ``whole_as``: the stage's config fingerprint
        (:func:`fingerprint`) where the whole stage is to be written (a clean stop's checkpoint): its merged
        graph, ranking vectors and applications, so that a start with the same config goes on from them
        instead of merging and solving the shards' whole graph again. Partitions and applications in actors of
        their own write their rows to files of their own first, side by side (the stage's file names them)."""
        state = (lambda: {"whole": whole_as, "stage": self}) if whole_as is not None else self.checkpoint_state
        t0 = time.perf_counter()
        files: tuple[tuple[str, str], ...] = ()
        # The actors write their files at once, side by side: the applications' while the partitions write.
        apps_written = self.apps.write(epoch, data_dir) if whole_as is not None and not isinstance(self.apps, Applications) else None
        if whole_as is not None and isinstance(self.engine, PartitionedEngine):
            files = self.engine.write_parts(epoch, data_dir)
        if apps_written is not None:
            files += apps_written()
        parts_s = time.perf_counter() - t0
        pickled: list[float] = []

        def payload() -> list:
            t0 = time.perf_counter()
            chunks = dumps(state())
            pickled.append(time.perf_counter() - t0)
            return chunks

        digest, seconds = CheckpointStore(data_dir).write_part(epoch, "compute.ckpt", self.epoch, payload, "the compute stage")
        if whole_as is not None:
            log.info("compute stage written whole at epoch %d in %.1f s (%.1f s of it pickling%s)", epoch, parts_s + seconds,
                     pickled[0], f", {parts_s:.1f} s the {len(files)} files of its actors" if files else "")
        return WrittenPart(digest, parts_s + seconds, whole_as, tuple(files))

    @classmethod
    def restored(
        cls, saved: dict, rank_types=None, rank: RankConfig | None = None, apps: AppConfig | None = None,
        reuse_after: float | None = None, partitions: int = 1, engine_factory: EngineFactory | None = None,
        apps_factory: AppsFactory | None = None,
    ) -> "ComputeStage":
        """The ids and applications of a checkpoint; the ranking starts empty (one partition or P new ones)
        and is rebuilt from the shards' first, whole deltas, as it always was."""
        if "stage" in saved:  # a stage written whole, taken with another config: its ids and applications
            saved = saved["stage"].checkpoint_state()
        return cls(rank_types, rank, apps, GlobalGraph.restore_ids(saved, reuse_after), saved.get("apps"),
                   partitions=partitions, engine_factory=engine_factory, apps_factory=apps_factory)

    @classmethod
    def made(cls, config: StageConfig, saved: dict | None = None,
             engine_factory: EngineFactory | None = None, whole: bool = False, folder: Path | None = None,
             started: Any = None, apps_factory: AppsFactory | None = None, started_apps: Any = None) -> "ComputeStage":
        """A stage made with ``config``: new, or restored from ``saved`` (a :meth:`checkpoint_state`).
        ``engine_factory``: where ``config.partitions > 1`` puts its partitions (default: this process).
        ``whole``: ``saved`` holds the stage written whole with this very config (the launch checked its
        fingerprint, and restored the shards to go on with ordinary deltas): that stage goes on, its
        partitions read back from their files in ``folder`` (the checkpoint's) where they live elsewhere
        (``started``: partitions already started from those files, :meth:`PartitionPort.reopen`), and so are
        its applications where they run in an actor (``started_apps``: one started from its file;
        ``apps_factory``: where a new stage puts them)."""
        c = config
        if saved is None:
            return cls(c.rank_types, c.rank, c.apps, reuse_after=c.reuse_after, partitions=c.partitions,
                       engine_factory=engine_factory, apps_factory=apps_factory)
        if whole:
            if saved.get("whole") != fingerprint(c):
                raise CheckpointError("the compute checkpoint does not hold the stage written whole with this config")
            stage: ComputeStage = saved["stage"]
            if isinstance(stage.engine, PartitionedEngine):
                stage.engine.reopen(folder, started)
                if isinstance(stage.graph.slots, EdgeSlots):  # written whole before the slots went to the partitions
                    stage.graph.slots = PartitionSlots.adopting(stage.engine, stage.graph.slots)
            if not isinstance(stage.apps, Applications):
                stage.apps.reopen(folder, started_apps)
            stage.whole_restored_at = stage.epoch
            return stage
        return cls.restored(saved, c.rank_types, c.rank, c.apps, c.reuse_after, c.partitions, engine_factory, apps_factory)


def fingerprint(config: StageConfig) -> str:
    """What a stage written whole must be read back with: its config (edge types, ranking, applications, id
    reuse, partitions); a start with another config rebuilds from the shards' whole deltas instead."""
    return hashlib.sha256(repr(config).encode()).hexdigest()[:16]

