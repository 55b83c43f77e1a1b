"""The compute actor: Ray's wrapper around :class:`~pulsegraph.compute.stage.ComputeStage`.

It receives sealed epochs in order from the coordinator (``apply_epochs``: one
or several at once; several are ranked once, as the newest), and keeps the
results the API process has not pulled yet (``results_after`` both hands them
over and acknowledges the ones before), never more than a few, each with what the
vertex names did in its batch. Scores are
copied to the host in the stage, once per ranked epoch, and nowhere else. With
``config.partitions > 1`` it makes its stage's ranking over that many
:class:`~pulsegraph.compute.partition_actor.RankPartitionActor` actors (which hold the merge view's
edge slots as well: :mod:`pulsegraph.compute.slots`) and runs its
applications in an :class:`~pulsegraph.compute.apps_actor.AppsActor`, which it
owns: they die with it (Ray's ownership) and a relaunched compute actor makes new
ones. With :mod:`pulsegraph.compute.partition_actor` and :mod:`pulsegraph.compute.apps_actor`, the only
modules of the compute stage that import Ray.

The status poll's calls (:meth:`ComputeActor.latest_epoch`, :meth:`ComputeActor.status`) and the API's
pull of results (:meth:`ComputeActor.results_after`) run in concurrency groups of their own, each on a
thread beside the batches: a batch of a large graph runs for tens of seconds, the supervisor checks the
memory budget once per poll and must not go blind for that long, and a result ready must not wait out the
next batch (a pull that came after the next batch had started, the feed busy taking in the result
before, was queued behind it). Neither
touches the stage: the status reads two numbers, the pull hands over kept results and their name changes,
worked out by the batch that made them. Every other call stays in Ray's default group, one at a time, in
the order each caller submitted them (a checkpoint after the batch it follows).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import ray
from ray.exceptions import RayActorError

from pulsegraph.base.runtime import HeapTrimmer, configure_logging
from pulsegraph.compute.apps_actor import ApplicationGroups, RayApplications, spawn_apps, start_apps_of
from pulsegraph.compute.changes import EdgeChanges
from pulsegraph.compute.ids import NameChanges
from pulsegraph.compute.partition_actor import RayPartitions, ray_rank_engine, start_partitions_of
from pulsegraph.compute.results import EpochResult
from pulsegraph.compute.stage import ComputeStage, SealedEpoch, StageConfig, fingerprint
from pulsegraph.snapshots.checkpoint import CheckpointStore, WrittenPart, load_verified
from pulsegraph.snapshots.epoch import EpochInfo

log = logging.getLogger(__name__)

# Results the API has not pulled yet. The API polls ten times per epoch interval and acknowledges
# what it has with each poll, so normally one or two wait; a recovery re-cuts logged epochs faster
# than that, and the API must see each (its graph view applies their changes). Past this many the
# API is stalled: the oldest are dropped rather than holding per-vertex arrays without bound.
KEEP_RESULTS = 16


@dataclass(frozen=True)
class _Kept:
    """A result the API has not pulled, with what the vertex names did in its batch: ``changes`` take a
    consumer from the names as of the result before (``since``: its epoch and how many ids had names)
    to the names as of this one (``named`` ids)."""

    result: EpochResult
    since: tuple[int, int]
    changes: NameChanges
    named: int


class _Publisher:
    """Completes results whose applications run in an actor of their own, in order, on a thread of its own,
    and hands each to ``store``; the first failure is kept for the next batch to raise, and ends the rest."""

    def __init__(self, store: Callable[[_Kept], None]) -> None:
        self._store = store
        self._queue: queue.Queue[tuple[_Kept, Callable[[], EpochResult]]] = queue.Queue()
        self.failed: BaseException | None = None
        self.why: str | None = None  # the failure as the status reports it
        self._thread: threading.Thread | None = None

    def put(self, kept: _Kept, finish: Callable[[], EpochResult]) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="apps-results", daemon=True)
            self._thread.start()
        self._queue.put((kept, finish))

    def _run(self) -> None:
        while True:
            kept, finish = self._queue.get()
            try:
                if self.failed is None:
                    finish()  # completes kept.result in place
                    self._store(kept)
            except BaseException as exc:  # noqa: BLE001 - raised again by the next batch (check)
                self.why = f"the applications of epoch {kept.result.epoch} failed: {type(exc).__name__}: {exc}"
                self.failed = exc
                log.error("%s", self.why)
            finally:
                self._queue.task_done()

    def drain(self) -> None:
        """Wait until every result handed over is kept (or failed)."""
        self._queue.join()

    def check(self) -> None:
        if self.failed is not None:
            raise self.failed


class _OwnedWatch:
    """Finds an owned actor (a partition, an applications' actor) dead while no batch calls it: at the stream's
    end a loss would go unseen until the next epoch, with the pipeline reported well. One ping in flight to each,
    read without waiting: a busy actor (deep in an epoch) is not waited for, a dead one's ping fails at once."""

    def __init__(self, owned: Callable[[], list]) -> None:
        self._owned = owned
        self._pings: dict = {}  # actor handle -> its ping in flight
        self.lost: str | None = None

    def check(self) -> str | None:
        """Why an owned actor is lost (kept once found), or None."""
        for actor in self._owned() if self.lost is None else ():
            ping = self._pings.get(actor)
            if ping is None:
                self._pings[actor] = actor.__ray_ready__.remote()
            elif ray.wait([ping], timeout=0)[0]:
                del self._pings[actor]
                try:
                    ray.get(ping)
                except RayActorError as exc:
                    self.lost = f"an actor the compute stage owns died ({type(exc).__name__}: {str(exc).splitlines()[0]})"
        return self.lost


@ray.remote(concurrency_groups={"status": 1, "results": 1})  # type: ignore[call-overload]  # documented; missing from its stubs
class ComputeActor:
    def __init__(self, *, config: StageConfig | None = None, restore: tuple[str, str] | None = None,
                 whole: bool = False, log_level: str = "INFO", checked: bool = False) -> None:
        """``restore``: (path, sha256) of the compute part of a checkpoint; ``whole``: it holds the stage
        written whole with this config, which goes on (the shards were restored to send ordinary deltas);
        ``checked``: the launch hashed the file just before (it is not hashed again: gigabytes)."""
        configure_logging(log_level)
        t0 = time.perf_counter()
        config = config or StageConfig()
        self._config = config
        folder = None if restore is None else Path(restore[0]).parent
        # A stage written whole with partition and applications' actors: those start reading their own files
        # now, beside the read of this one's (seconds each, at tens of millions of edges), not after it.
        started = started_apps = None
        if whole and folder is not None and config.partitions > 1:
            files = CheckpointStore.compute_files_in(folder)  # the manifest, read once for both
            started = start_partitions_of(folder, files, config.rank, config.partitions, log_level, checked)
            started_apps = start_apps_of(folder, files, config.apps, log_level, checked)
        saved = None if restore is None else load_verified(Path(restore[0]), restore[1], rehash=not checked)
        # One partition: the stage makes today's engine and applications itself. More: partition actors and an
        # applications' actor, owned by this one.
        factory = None if config.partitions <= 1 else lambda rank, parts: ray_rank_engine(rank, parts, log_level)
        apps_factory = None if config.partitions <= 1 else lambda apps, state: spawn_apps(apps, state, log_level)
        self._stage = ComputeStage.made(config, saved, factory, whole, folder, started, apps_factory, started_apps)
        if whole:
            beside = [what for what, taken in ((f"{config.partitions} partition actors", started and not started.actors),
                                               ("the applications' actors", started_apps and not started_apps.actors)) if taken]
            log.info("compute stage read back whole at epoch %d in %.1f s: %d vertices, %d live edges%s",
                     self._stage.epoch, time.perf_counter() - t0, self._stage.graph.n, self._stage.graph.live_edges(),
                     f" ({' and '.join(beside)} started beside it)" if beside else "")
        self._results: collections.deque[_Kept] = collections.deque(maxlen=KEEP_RESULTS)
        self._results_lock = threading.Lock()  # the pull's thread and the batches' share the kept results
        # The names as of the newest result: (its epoch, ids with names). (0, 0) before the first, whose
        # changes are then every name: a consumer that starts over asks from there, restored or not.
        self._named_at = (0, 0)
        self._prepared_at = (0, 0)  # the same as of the newest result prepared (its applications may be running)
        self._publisher = _Publisher(self._store)
        self._watch = _OwnedWatch(self.owned_actors)
        # Set by a pull, read by the next batch on its thread: the consumer's epoch (renames up to it may
        # go), and whether it asked for whole application arrays.
        self._acked = 0
        self._resend_whole = False
        self._trimmer = HeapTrimmer()
        self._batch_since: float | None = None  # when the batch being merged started (monotonic)

    def apply_epochs(self, infos: list[EpochInfo], *deltas) -> dict:
        """Merge the sealed epochs ``infos`` (oldest first; ``deltas`` are theirs, epoch by epoch,
        ``len(deltas) // len(infos)`` each) and rank the newest. Where the applications run in an actor of
        their own, the result is kept once they ran on it (on the publisher's thread), and the next batch
        may be merged and ranked meanwhile; an earlier result's applications that failed fail this batch."""
        self._publisher.check()
        self._batch_since = time.monotonic()
        try:
            graph = self._stage.graph
            graph.forget_renames(self._acked)
            if self._resend_whole:
                self._resend_whole = False
                self._stage.apps.resend_whole()
            result, finish = self._stage.apply_deferred(SealedEpoch.split(infos, deltas))
            kept = self._prepare(result)
            if self._stage.deferred:
                self._publisher.put(kept, finish)
            else:
                self._store(kept)
        finally:
            self._batch_since = None
        self._trimmer.maybe_trim()  # the batch's transient arrays are free now
        return {
            "epoch": result.epoch, "vertices": result.vertices, "edges": result.edges,
            "compute_ms": result.compute_ms.get("pagerank", 0.0), "skipped": result.skipped,
        }

    def checkpoint(self, epoch: int, data_dir: str, whole: bool = False) -> WrittenPart:
        """Write the global ids as of the last epoch merged (``epoch``: the coordinator orders this call
        after that epoch's ``apply_epochs``), or with ``whole`` the whole stage, its partition actors each
        writing their own file (:meth:`ComputeStage.write_checkpoint`)."""
        return self._stage.write_checkpoint(epoch, data_dir, fingerprint(self._config) if whole else None)

    def _prepare(self, result: EpochResult) -> _Kept:
        """``result`` with the name changes since the result before, worked out here, on the batch's thread:
        a pull runs beside the next batch, which changes the names, and so may the publisher's thread."""
        graph = self._stage.graph
        since = self._prepared_at
        kept = _Kept(result, since, graph.name_changes(*since), graph.n)
        self._prepared_at = (result.epoch, kept.named)
        return kept

    def _store(self, kept: _Kept) -> None:
        """Hand ``kept`` (its result complete) to the pulls."""
        with self._results_lock:
            self._results.append(kept)
            self._named_at = (kept.result.epoch, kept.named)

    def _newer_than(self, epoch: int) -> tuple[list[_Kept], tuple[int, int]]:
        """Let go of the kept results up to ``epoch`` (the caller has them); the rest, and the names' place
        as of the newest, read together."""
        with self._results_lock:
            while self._results and self._results[0].result.epoch <= epoch:
                self._results.popleft()
            return list(self._results), self._named_at

    def _whole_first(self, graph_at: int | None) -> bool:
        """Must the next results a consumer pulls be published whole? After a stage read back whole, its
        first results change the graph of its epoch: a consumer whose graph view is at another epoch
        (``graph_at``; None: a caller that keeps none) cannot take them over what it holds."""
        at = self._stage.whole_restored_at
        if at is None or graph_at is None:
            return False
        if graph_at == at:
            self._stage.whole_restored_at = None  # the consumer goes on from the stage's own epoch
            return False
        return True

    @ray.method(concurrency_group="results")
    def results_after(
        self, epoch: int, known_names: int, whole: bool = False, graph_at: int | None = None,
    ) -> tuple[list[EpochResult], NameChanges] | None:
        """Results newer than ``epoch`` (the caller has every result up to it: those are let go), and
        what the vertex names did for a caller that knows the names of ids below ``known_names`` as
        of ``epoch`` (their renames are let go too, by the next batch). ``whole``: the caller could not
        apply an application's patch (it missed the result before), so the next epoch publishes whole
        arrays. Answered beside a running batch, from what the batches kept; None where the caller's
        names are not where a kept result leaves them (a relaunched stage, results dropped unpulled):
        then :meth:`results_in_order` answers, after the batch, as it does where the results must be published
        whole (``graph_at``: the epoch of the caller's graph view; see :meth:`_whole_first`)."""
        if whole:
            self._resend_whole = True
        if self._whole_first(graph_at):
            return None
        kept, named_at = self._newer_than(epoch)
        at = next((i for i, k in enumerate(kept) if k.since == (epoch, known_names)), None)
        if at is None:
            if (epoch, known_names) != named_at:
                return None
            at = len(kept)  # the caller has the newest result
        self._acked = max(self._acked, epoch)
        newer = kept[at:]
        changes = NameChanges(known_names, [])
        for k in newer:
            changes = changes.then(k.changes)
        return [k.result for k in newer], changes

    def results_in_order(
        self, epoch: int, known_names: int, whole: bool = False, graph_at: int | None = None,
    ) -> tuple[list[EpochResult], NameChanges]:
        """:meth:`results_after` for a caller whose names no kept result starts from, in Ray's default group:
        between batches, the names as of now are the newest result's, and so is the graph, which a caller
        that must have it whole (:meth:`_whole_first`) gets with the newest result."""
        if whole:
            self._stage.apps.resend_whole()
        self._publisher.drain()  # the names as of now are those of the newest result kept
        graph = self._stage.graph
        kept, _ = self._newer_than(epoch)
        changes = graph.name_changes(epoch, known_names)
        graph.forget_renames(epoch)
        results = [k.result for k in kept]
        if results and self._whole_first(graph_at):
            restored_at, self._stage.whole_restored_at = self._stage.whole_restored_at, None
            self._stage.apps.resend_whole()  # its patches are of arrays the caller does not hold either
            whole_graph = dataclasses.replace(graph.whole_changes(), first_ts=None)
            results = [dataclasses.replace(results[-1], edge_changes=whole_graph, full_changes=True, skipped=[])]
            log.info("epoch %d published whole (%d edges): the consumer's graph is of epoch %d, not the stage's %d",
                     results[0].epoch, len(whole_graph), graph_at, restored_at)
        return results, changes

    def graph_whole(self, at_least: int) -> tuple[int, EdgeChanges] | None:
        """The graph as of the newest epoch merged, whole, for a consumer that has every epoch up to ``at_least``
        and whose graph view holds nothing (new parts, the old ones lost): None while this stage is behind it (a
        relaunch merging its epochs again). In Ray's default group, between batches; the consumer's next pull
        gets every result up to this graph's epoch."""
        if self._stage.epoch < at_least:
            return None
        self._publisher.drain()
        whole = dataclasses.replace(self._stage.graph.whole_changes(), first_ts=None)
        log.info("graph of epoch %d handed over whole (%d edges): the consumer's graph view holds nothing", self._stage.epoch, len(whole))
        return self._stage.epoch, whole

    def snapshot(self) -> dict:
        return self._stage.graph.snapshot()

    @ray.method(concurrency_group="status")
    def latest_epoch(self) -> int:
        """The newest epoch merged (or being merged)."""
        return self._stage.epoch

    @ray.method(concurrency_group="status")
    def status(self) -> dict:
        """Asked by the status poll every second, during a batch too: the newest epoch merged (or being
        merged), how long the batch being merged has run (None: none is), and why a result's applications
        failed or an owned actor died (None: neither): with no batch after it (the stream's end) only this
        reports it. Between batches it also hands back what the K-exposure recount freed on its own thread
        (see :class:`HeapTrimmer`); not during one, whose arrays would come back at once."""
        since = self._batch_since
        if since is None:
            self._trimmer.maybe_trim()
        return {"epoch": self._stage.epoch, "batch_s": None if since is None else round(time.monotonic() - since, 1),
                "failed": self._publisher.why or self._watch.check()}

    def backend(self) -> str:
        """Where the ranking runs: ``numpy`` or ``cupy``."""
        return self._stage.backend_name

    def owned_actors(self) -> list:
        """The handles of the partition actors ranking for this one and of its applications' actors (none with
        one partition), so that the wiring can kill them with the rest and wait for their end."""
        port, apps = getattr(self._stage.engine, "port", None), self._stage.apps
        return [*(port.actors if isinstance(port, RayPartitions) else []),
                *(apps.actors if isinstance(apps, RayApplications | ApplicationGroups) else [])]

    def partition_memory(self) -> list[dict[str, int]]:
        """Each partition actor's resident set, its peak and the bytes its partition holds."""
        port = getattr(self._stage.engine, "port", None)
        return port.memory() if isinstance(port, RayPartitions) else []
