"""The actor topology on Ray: who is created, with what, and how it is stopped.

Builds the pipeline of docs/design.md from one :class:`~pulsegraph.settings.Settings`:
ingest actors -> shard actors -> epoch coordinator -> compute actor, and the
API's result store and feed. It is the only place that knows every stage.
Where to resume is planned by :mod:`pulsegraph.snapshots.recovery`; when to relaunch is
decided by :mod:`pulsegraph.supervisor`.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from pulsegraph.api.alerts import RULES_FILE, AlertBook
from pulsegraph.api.archive import ResultArchive
from pulsegraph.api.exceptions import NotFound
from pulsegraph.api.feed import ResultFeed
from pulsegraph.api.store import EpochView, ResultStore
from pulsegraph.api.viewfile import VIEW_WAIT_S, ViewReader, save_view
from pulsegraph.compute.actor import ComputeActor
from pulsegraph.compute.partition_actor import check_gpus, kill_quietly
from pulsegraph.compute.stage import StageConfig, fingerprint
from pulsegraph.errors import PulsegraphError
from pulsegraph.graph_parts import GraphParts
from pulsegraph.identity import check_resumable
from pulsegraph.ingest.actor import IngestActor, IngestConfig
from pulsegraph.ingest.sources import SourceSpec
from pulsegraph.ingest.sources.kafka_clients import TopicInfo
from pulsegraph.lock import DataDirLock
from pulsegraph.memory import MemoryGuard
from pulsegraph.ray_cluster import alive_nodes, init_ray
from pulsegraph.results_topic import ResultPublisher
from pulsegraph.settings import Settings
from pulsegraph.snapshots.coordinator import CoordinatorConfig
from pulsegraph.snapshots.coordinator_actor import EpochCoordinator
from pulsegraph.snapshots.recovery import plan_in_background, plan_recovery
from pulsegraph.snapshots.shard import ShardActor
from pulsegraph.supervisor import STATUS_TIMEOUT_S, Supervisor
from pulsegraph.topic_wait import wait_for_topic

log = logging.getLogger(__name__)

# How long a killed actor may take to die (it is a local signal; seconds are plenty).
TEARDOWN_TIMEOUT_S = 30.0
# How long stop() waits for a start under way on its own thread: Ray's start and the actors' launch.
STARTED_WAIT_S = 120.0
# A clean stop's ranking of what was sealed and its checkpoint with the compute stage whole (a batch at 30 M edges: ~30-60 s).
FINISH_S = 90.0


def _summed(*counts: dict[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in counts:
        for k, n in c.items():
            out[k] = out.get(k, 0) + n
    return out


@dataclass
class Pipeline:
    settings: Settings
    on_epoch: object = None  # callable(EpochView) run for each epoch the API receives
    store: ResultStore = field(init=False)
    shards: list = field(default_factory=list)
    ingest: list = field(default_factory=list)
    # Ray actor handles: their remote methods are not visible to a type checker.
    coordinator: Any = None
    compute: Any = None
    feed: ResultFeed | None = None

    def __post_init__(self) -> None:
        # The archive holds the retained epochs (served memory-mapped); --archive-results: whether a restart takes them back.
        self.archive = ResultArchive(self.settings.data_dir / "results", self.settings.retain_epochs)
        # The newest epoch archived before this start: a new rule's since_epoch floor (their alerts may be out already).
        given_out = self.archive.latest
        s = self.settings
        # With compute partitions the graph view is in actors of its own (pulsegraph.graph_parts), not in this process.
        self.graph_parts = GraphParts.of(s, self.archive.root, self._relaunch)
        self.store = ResultStore(s.retain_epochs, self.archive, None if self.graph_parts is None else self.graph_parts.graph)
        # The alert rules live in the data folder (an unreadable file stops the start, naming what to do).
        self.alerts = AlertBook(self.store, self.settings.data_dir / RULES_FILE, floor=given_out)
        self._status: dict = {"ingest": "starting"}
        self._stop = threading.Event()
        self._launched = threading.Event()
        self._planned: Future | None = None  # the first launch's recovery plan, made while Ray starts
        # Set when the pipeline gave up (an error only the operator can fix); the service then exits.
        self.fatal = threading.Event()
        self.fatal_error: str | None = None
        self._lifecycle = threading.Lock()  # a relaunch and stop() never interleave
        self.recoveries = 0
        self._lost_before: dict[str, int] = {}
        self._lock: DataDirLock | None = None
        # start_in_background()'s thread: set once its start() returned, and (by stop()) once the actors stopped.
        self._started, self._stopped = threading.Event(), threading.Event()
        self._started.set()
        self._starter: threading.Thread | None = None
        self._partitions: Any = None  # the compute actor's answer: its partition and applications' actors' handles
        self.sizing: dict = {}
        budget = self.settings.memory_budget
        self.memory = MemoryGuard(budget) if budget else None
        self.supervisor = Supervisor(self)
        # Reads the store, not the actors: it lives as long as the service, across relaunches.
        self.results: ResultPublisher | None = None
        # The cluster's properties, secrets included, read from --kafka-config by this process only: they
        # reach the actors inside the SourceSpec, in memory (never an environment variable or a command line).
        self.kafka_config = s.kafka_properties()
        self.registry = s.registry()  # the same for the schema registry's properties
        if s.results_topic:
            self.results = ResultPublisher(
                self.store, str(s.results_brokers), s.results_topic, s.results_transactional_id, s.results_k,
                alerts=self.alerts, config=s.results_kafka_properties(),
            )

    @property
    def spec(self) -> SourceSpec:
        s = self.settings
        return SourceSpec(
            kind=s.source,
            partitions=s.partitions,
            path=str(s.path) if s.path else None,
            rate=s.source_rate,
            limit=s.limit,
            seed=s.seed,
            users=s.users,
            hashtags=s.hashtags,
            events_log=str(self.events_log) if s.source == "synthetic" else None,
            bootstrap=s.bootstrap,
            topic=s.topic,
            group=s.group,
            kafka_client=s.kafka_client,
            kafka_config=self.kafka_config,
        )

    @property
    def events_log(self):
        """Where events POSTed to the API are appended: the followed file itself, or the
        embedded log that is followed beside the synthetic stream as partition ``events:0``."""
        s = self.settings
        return s.path if s.source == "file" else s.data_dir / "events.jsonl"

    def open(self) -> "Pipeline":
        """Lock the data folder (a second service on it must refuse before it touches anything in it) and take
        the archived history back into the store, to be served before Ray and the actors are up (the
        pipeline's first epoch then confirms it, see :mod:`pulsegraph.api.archive`). :meth:`start` opens
        the pipeline first when this was not called."""
        if self._lock is not None:
            return self
        self._lock = DataDirLock(self.settings.data_dir).acquire()
        if not self.settings.archive_results:
            self.archive.clear()
        elif (taken := self.archive.take_back()) is not None:
            self.store.take_back(*taken)
            self.store.view_reader = ViewReader.open(self.store, self.archive)  # the last clean stop's view (api.viewfile)
            # Their digests are read meanwhile (seconds for gigabytes); the pipeline's first epoch waits for it.
            threading.Thread(
                target=self.archive.verify_taken, args=(self.store.drop_taken,), name="archive-verify", daemon=True,
            ).start()
        return self

    def start(self) -> "Pipeline":
        """Start the pipeline. With Kafka this returns at once: the actors are launched as soon as the
        broker answers, and until then /health says the ingest is disconnected."""
        self.open()
        s = self.settings
        s.data_dir.mkdir(parents=True, exist_ok=True)
        self._planned = plan_in_background(s.data_dir, bool(s.checkpoint_every), s.shards)  # while Ray starts
        init_ray(s)
        # Ray's serialization context, built here: built first on the launcher thread, it races the main thread's imports.
        ray.put(None)
        if self.results is not None:
            self.results.start()  # connects (and finds where to resume) while the pipeline launches
        if self.settings.source == "kafka":
            threading.Thread(target=self._launch_and_feed, args=(True,), name="pipeline-launch", daemon=True).start()
        else:
            self._launch_and_feed()
        threading.Thread(target=self.supervisor.run, name="pipeline-status", daemon=True).start()
        return self

    def start_in_background(self) -> None:
        """:meth:`start` on a thread of its own, for a service that answers from the archived history while
        Ray and the actors start (seconds). An error only the operator can fix (the data folder holds
        another source's history, a GPU missing) gives up as a failed relaunch does: :attr:`fatal`."""
        # Ray imports pydantic's compatibility module on that thread: imported here, it races no import of the serving one.
        import ray._common.pydantic_compat  # noqa: F401

        # Ray sets its SIGTERM handler on the main thread only, and says so; the service sets its own.
        logging.getLogger("ray._private.worker").addFilter(lambda r: "SIGTERM handler is not set" not in r.getMessage())

        def run() -> None:
            owned = not ray.is_initialized()  # a Ray joined already (a test session's) is not this thread's to end
            if self.store.view_reader is not None:
                self.store.view_reader.wait_loaded(VIEW_WAIT_S)  # a second or two: the graph routes answer sooner
            try:
                self.start()
            except PulsegraphError as exc:
                if not self._stop.is_set():
                    self._give_up(str(exc))
            except Exception as exc:  # noqa: BLE001 - Ray failing to start: the service must exit, not serve on
                log.exception("the pipeline did not start")
                if not self._stop.is_set():
                    self._give_up(f"the pipeline did not start ({type(exc).__name__}: {exc}); see the log above")
            finally:
                self._started.set()
            # The thread stays until the pipeline has stopped: Ray starts its daemons (GCS, raylet) with a
            # parent death signal, and Linux sends it when the *thread* that forked them ends, not the
            # process; ended sooner, it would take the actors down before stop() could stop them. Then it
            # shuts the Ray it started down itself (stop() waits for it), before its daemons go with it.
            self._stopped.wait()
            if owned and ray.is_initialized():
                ray.shutdown()

        self._started.clear()
        self._starter = threading.Thread(target=run, name="pipeline-start", daemon=True)
        self._starter.start()

    def _launch_and_feed(self, background: bool = False) -> None:
        try:
            self._launch()
        except PulsegraphError as exc:
            if self._stop.is_set():
                return
            if not background:
                raise
            self._give_up(str(exc))  # no caller to raise to: stop loudly, as a relaunch would
            return
        resume = self.archive if self.settings.archive_results else None
        self.feed = ResultFeed(self.compute, self.store, self._epoch_arrived, resume).start()
        self._launched.set()

    def _launch(self) -> None:
        """Create every actor, from the newest checkpoint when there is one, and start them."""
        s = self.settings
        spec = self.spec
        topic = None
        if s.source == "kafka":
            topic = self._kafka_topic()
            spec = dataclasses.replace(spec, partitions=topic.partitions)
            self.supervisor.topic = topic
        planned, self._planned = self._planned, None  # the start's; a relaunch plans anew
        manifest, resume = planned.result() if planned else plan_recovery(s.data_dir, bool(s.checkpoint_every), s.shards)
        check_resumable(s, resume, spec.partition_names(), topic)
        nodes = alive_nodes()
        # Sized from the cluster when not given: shards hold the graph (2 per node keeps every core busy applying),
        # ingest actors read (2 per node, never more than the partitions: an actor's round waits for every shard's
        # ack, and a second one keeps the cores busy meanwhile; 127k events/s with one, 225k with two: bench/scale.py).
        n_shards = s.shards or (len(manifest.shards) if manifest else 2 * nodes)
        n_ingest = min(s.ingest_actors or 2 * nodes, len(spec.partition_names()))
        parts = s.compute_partitions
        self.sizing = {"nodes": nodes, "shards": n_shards, "ingest_actors": n_ingest, "compute_partitions": parts}
        log.info("launching %d shards and %d ingest actors on %d Ray node(s)", n_shards, n_ingest, nodes)
        if s.source == "synthetic":
            self.events_log.touch()
        restore_ids = (str(manifest.compute_path), manifest.compute) if manifest and manifest.compute else None
        stage_config = StageConfig.from_settings(s, s.ranked_types)
        # A clean stop wrote the compute stage whole: with the same config it goes on from it, and the shards
        # send ordinary deltas (no whole-graph epoch to merge and solve again); else the shards resend all.
        whole = bool(restore_ids and manifest and manifest.compute_whole == fingerprint(stage_config))
        # With partitions the ranking (and its GPU) is theirs: each asks for a GPU, the compute actor for none.
        check_gpus(s.device, parts)
        if self.graph_parts is not None:
            self.graph_parts.ensure()  # the parts there are, or new ones where one died
        gpus = 1 if s.device == "cuda" and parts == 1 else 0
        # Actors get typed configs made here, never the Settings (no secret travels); ignore: @ray.remote's class.
        self.compute = ComputeActor.options(num_gpus=gpus).remote(  # type: ignore[attr-defined]
            config=stage_config, restore=restore_ids, whole=whole, log_level=s.log_level, checked=True,
        )
        self._partitions = self.compute.owned_actors.remote() if parts > 1 else None
        # SPREAD: shards and ingest actors over every node (a relaunch: those alive); the coordinator needs no CPU of its own.
        spread_out = {"scheduling_strategy": "SPREAD"}
        self.shards = [
            ShardActor.options(**spread_out).remote(  # type: ignore[attr-defined]
                shard=i, window=s.window, checked=True,  # the plan checked every file of the checkpoint just now
                restore=None if manifest is None else (str(manifest.shard_path(i)), manifest.shards[i]), resend_all=not whole,
            )
            for i in range(n_shards)
        ]
        starts = resume.vector if resume else {}
        cuts = CoordinatorConfig(
            log_path=str(s.data_dir / "epochs.log"), interval_s=s.epoch_interval, data_dir=str(s.data_dir),
            checkpoint_every=s.checkpoint_every, window=s.window, log_keep=s.epoch_log_keep,
            checkpoint_budget=s.checkpoint_budget, checkpoint_whole_every=s.checkpoint_whole_every,
            max_queued_bytes=s.compute_queue_limit or None, max_result_lag=s.max_result_lag,
        )
        self.coordinator = EpochCoordinator.options(num_cpus=0).remote(  # type: ignore[attr-defined]
            shards=self.shards, consumer=self.compute, config=cuts, resume=resume, log_level=s.log_level,
        )
        owners = [spec.partition_names()[i::n_ingest] for i in range(n_ingest)]  # round-robin: one partition, one owner
        self.ingest = [
            IngestActor.options(**spread_out).remote(  # type: ignore[attr-defined]
                config=IngestConfig(
                    actor_id=i, spec=spec, partitions=parts, starts={p: starts.get(p, 0) for p in parts},
                    transform=s.transform_name, dead_letter_path=str(s.data_dir / "dead-letter.jsonl"),
                    batch_size=s.batch_size, event_time=s.window is not None, registry=self.registry,
                ),
                shards=self.shards, coordinator=self.coordinator, log_level=s.log_level,
            )
            for i, parts in enumerate(owners)
            if parts
        ]
        ray.get([self.coordinator.start.remote()] + [a.start.remote() for a in self.ingest])

    def _finish(self) -> None:
        """Sources stopped: all they delivered sealed, ranked, checkpointed with the compute stage whole
        (:meth:`Coordinator.finish`) and served, so the view the stop keeps is of that epoch. Bounded by :data:`FINISH_S`."""
        if self.coordinator is None or not self.settings.checkpoint_every:
            return
        deadline = time.monotonic() + FINISH_S
        try:
            epoch = ray.get(self.coordinator.finish.remote(FINISH_S), timeout=FINISH_S + STATUS_TIMEOUT_S)
        except GetTimeoutError:
            log.warning("the stop's checkpoint was not written within %.0f s; the next start rebuilds as after a crash", FINISH_S)
            return
        except Exception:  # noqa: BLE001 - stopping must go on
            log.exception("coordinator did not finish cleanly")
            return
        while epoch is not None and self.feed is not None and self.feed.running and time.monotonic() < deadline:
            if self.store.latest_epoch >= epoch:
                return
            time.sleep(0.05)

    def _owned_actors(self) -> list:
        """The compute actor's partition and applications' actors, asked for at launch (answered before its first
        epoch, so a busy compute actor never holds a stop up); none with one partition, or when it died first:
        Ray ends the actors an actor made when it dies, so they are already going."""
        try:
            return [] if self._partitions is None else list(ray.get(self._partitions, timeout=STATUS_TIMEOUT_S))
        except Exception:  # noqa: BLE001 - dead or stuck: its partitions share its fate
            return []

    def _teardown(self) -> None:
        """Kill every actor, as a crash would, and wait until they are dead (``ray.kill`` is asynchronous: a coordinator still
        alive could append to the epoch log after the next generation read it). The coordinator goes first: alive while the
        compute actor goes, it logs that as a failed epoch. What survives is on disk."""
        owned = self._owned_actors()
        rest = [a for a in [*self.ingest, *self.shards, self.compute, *owned] if a is not None]
        deadline = time.monotonic() + TEARDOWN_TIMEOUT_S
        for actors in ([self.coordinator] if self.coordinator is not None else [], rest):
            kill_quietly(actors)
            for actor in actors:
                while time.monotonic() < deadline:
                    try:
                        ray.get(actor.__ray_ready__.remote(), timeout=TEARDOWN_TIMEOUT_S)
                    except (RayActorError, GetTimeoutError):
                        break
                    time.sleep(0.05)
        self.ingest, self.shards, self.coordinator, self.compute = [], [], None, None

    def _relaunch(self, why: str, seen: int | None = None, due: Callable[[], bool] = lambda: True) -> None:
        """An actor died or an epoch failed: rebuild every actor from the newest checkpoint and the source, unless a relaunch
        since the loss was found (``seen``: :attr:`recoveries` then; default now) or ``due`` says one made this moot."""
        seen = self.recoveries if seen is None else seen
        with self._lifecycle:
            if not self._stop.is_set() and self.recoveries == seen and due():
                self._relaunch_locked(why)

    def _relaunch_locked(self, why: str) -> None:
        self.recoveries += 1
        self._lost_before = dict(self._status.get("retention_lost", self._lost_before))  # the old actors' count
        log.error("pipeline lost (%s); relaunching from the newest checkpoint (recovery %d)", why, self.recoveries)
        self._status = {**self._status, "status": "degraded", "ingest": "recovering", "error": why}
        self._teardown()
        self._launch()
        if self.feed is not None:
            self.feed.compute = self.compute

    def _kafka_topic(self) -> TopicInfo:
        return wait_for_topic(self.settings, self.kafka_config, self._stop, lambda status: setattr(self, "_status", status))

    def _epoch_arrived(self, view: EpochView) -> None:
        if self.results is not None:
            self.results.notify(view)
        if callable(self.on_epoch):
            self.on_epoch(view)

    def _give_up(self, why: str) -> None:
        """Stop for good with ``why`` in /health and the log; the service exits (see :attr:`fatal`)."""
        log.error("the pipeline cannot recover by itself and stops: %s", why)
        if self.feed is not None:
            self.feed.stop()  # its actor is gone; the retained epochs stay served until the service exits
        self._status = {**self._status, "status": "failed", "ingest": "stopped", "error": why}
        self.fatal_error = why
        self.fatal.set()

    def poll_status(self) -> dict:
        """Every actor answers (or this raises RayActorError), and what they say."""
        ingest = ray.get([a.status.remote() for a in self.ingest], timeout=STATUS_TIMEOUT_S)
        coord = ray.get(self.coordinator.status.remote(), timeout=STATUS_TIMEOUT_S)
        *_, compute = ray.get([s.ping.remote() for s in self.shards] + [self.compute.status.remote()], timeout=STATUS_TIMEOUT_S)
        # A result's applications that failed, or an actor the compute stage owns found dead: the next batch would
        # fail on it, but there may be none (the stream's end).
        failed = coord["failed"] or compute.pop("failed", None) or next((i["error"] for i in ingest if i["error"]), None)
        disconnected = not all(i["connected"] for i in ingest)
        # The broker answers, but a partition cannot be read on until the operator acts (its reason says how).
        fault = next((i["fault"] for i in ingest if i.get("fault")), None)
        if failed:
            state = "failed"
        elif fault:
            state = "faulted"
        elif disconnected:
            state = "disconnected"
        else:
            state = "finished" if all(i["exhausted"] for i in ingest) else "running"
        return {
            "status": "degraded" if failed or fault or disconnected else "ok",
            # An epoch that failed or an ingest actor whose loop died: either way the pipeline relaunches.
            "_lost": failed,
            "sizing": dict(self.sizing),
            "recoveries": self.recoveries,
            "ingest": state,
            "error": failed or fault or next((i["source_error"] for i in ingest if i["source_error"]), None),
            "lag": {p: n for i in ingest for p, n in i["lag"].items()},
            # Records retention deleted before they were read, per partition, since this service started.
            "retention_lost": _summed(self._lost_before, *(i["retention_lost"] for i in ingest)),
            "records": sum(i["records"] for i in ingest),
            "dead_letters": sum(i["dead_letters"] for i in ingest),
            "positions": {p: o for i in ingest for p, o in i["positions"].items()},
            "epoch_vector": coord["vector"],
            # With a window: its length, the newest epoch's watermark, and the events that came too late.
            "window": {"window_s": coord["window"], "watermark": coord["watermark"], "late": coord["late"]}
            if coord.get("window") else None,
            "checkpoint": coord.get("checkpoint"),
            # The sealed epochs waiting for the compute stage; full: ingest pauses (the supervisor's backpressure).
            "compute_queue": coord.get("compute_queue"),
            # The newest epoch the compute stage merged or is merging, and how long its batch has run (None: idle).
            "compute": compute,
            "result_lag": coord.get("result_lag"),
            "_ingest": [{"throttled": i.get("throttled", False)} for i in ingest],
        }

    def status(self) -> dict:
        """The cached status behind /health: no actor call per request."""
        out = {k: v for k, v in self._status.items() if not k.startswith("_")}
        if self.store.provisional:
            out["provisional"] = True  # the epochs served are taken back from the archive, not yet confirmed
        if self.results is not None:
            out["results"] = self.results.status()
        return out

    def wait_until_launched(self, timeout: float) -> bool:
        return self._launched.wait(timeout)

    def wait_for_epoch(self, predicate, timeout: float = 60.0) -> EpochView:
        """Block until the newest epoch of the API store satisfies ``predicate``, once the pipeline published
        one (not while the store serves only the epochs it took back at the start)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                view = self.store.get()
                if not self.store.provisional and predicate(view):
                    return view
            except NotFound:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"no epoch matched within {timeout}s")

    def stop(self) -> None:
        self._stop.set()
        self._started.wait(STARTED_WAIT_S)  # a start under way on its own thread (Ray's own start) ends first
        with self._lifecycle:  # a relaunch in progress finishes first, so nothing is left behind
            self._stop_locked()
        self._stopped.set()  # the starting thread may end now, and Ray's daemons with it
        if self._starter is not None:
            self._starter.join(STARTED_WAIT_S)
        if self._lock is not None:
            self._lock.release()

    def _stop_locked(self) -> None:
        for a in self.ingest:
            try:
                ray.get(a.stop.remote(), timeout=60)
            except Exception:  # noqa: BLE001 - stopping must go on
                log.exception("ingest actor did not stop cleanly")
        self._finish()
        if self.feed is not None:
            self.feed.stop()
        if self.settings.archive_results and (self.feed is None or not self.feed.running):
            save_view(self.store, self.archive)  # for the next start to answer the graph's routes at once
        if self.graph_parts is not None:
            self.graph_parts.close()
        if self.results is not None:
            self.results.stop()  # after the feed: the epochs it delivered last get their chance
        if self.coordinator is not None:
            try:
                ray.get(self.coordinator.stop.remote(), timeout=60)
            except Exception:  # noqa: BLE001
                log.exception("coordinator did not stop cleanly")
        for actor in [*self.ingest, self.coordinator, *self.shards, self.compute, *self._owned_actors()]:
            if actor is not None:
                ray.kill(actor)
