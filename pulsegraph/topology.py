"""The actor topology on Ray: who is created, with what, and how it is stopped.

Builds the pipeline of DESIGN.md from one :class:`~pulsegraph.settings.Settings`:
ingest actors -> shard actors -> epoch coordinator -> compute actor, and the
API's result store and feed. It is the only place that knows every stage.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field

import ray

from api.exceptions import NotFound
from api.feed import ResultFeed
from api.store import EpochView, ResultStore
from compute.actor import ComputeActor
from ingest.actor import IngestActor
from ingest.sources import SourceSpec
from pulsegraph.settings import Settings
from snapshots.coordinator import EpochCoordinator
from snapshots.shard import ShardActor

log = logging.getLogger(__name__)

# The embedded Ray instance advertises at least this many CPUs: actors hold
# none while they run, but each needs one to be scheduled.
MIN_LOCAL_CPUS = 4
# Plenty for epoch deltas of a single machine, and it keeps a laptop's shared memory free.
OBJECT_STORE_BYTES = 512 * 1024 * 1024
# How often the cached pipeline status behind /health is refreshed.
STATUS_POLL_S = 1.0


def init_ray(settings: Settings) -> None:
    """Start the embedded Ray instance, unless this process already joined one."""
    if ray.is_initialized():
        return
    ray.init(
        address="local",
        num_cpus=max(settings.num_cpus or os.cpu_count() or 1, MIN_LOCAL_CPUS),
        object_store_memory=OBJECT_STORE_BYTES,
        include_dashboard=False,
        logging_level=logging.WARNING,
    )


def spread(items: list[str], n: int) -> list[list[str]]:
    """Round-robin ``items`` over ``n`` owners: one partition, one owner."""
    return [items[i::n] for i in range(n)]


@dataclass
class Pipeline:
    settings: Settings
    on_epoch: object = None  # callable(EpochView) run for each epoch the API receives
    store: ResultStore = field(init=False)
    shards: list = field(default_factory=list)
    ingest: list = field(default_factory=list)
    coordinator: object = None
    compute: object = None
    feed: ResultFeed | None = None

    def __post_init__(self) -> None:
        self.store = ResultStore(self.settings.retain_epochs)
        self._status: dict = {"ingest": "starting"}
        self._stop = threading.Event()

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
        )

    @property
    def events_log(self):
        """Where events POSTed to the API are appended: the followed file itself, or the
        embedded log that is followed beside the synthetic stream as partition ``events:0``."""
        s = self.settings
        return s.path if s.source == "file" else s.data_dir / "events.jsonl"

    def start(self) -> "Pipeline":
        s = self.settings
        init_ray(s)
        s.data_dir.mkdir(parents=True, exist_ok=True)
        epoch_log = s.data_dir / "epochs.log"
        stamp = int(time.time())
        for old in ([epoch_log, self.events_log] if s.source == "synthetic" else [epoch_log]):
            if old.exists() and old.stat().st_size:
                # Without a checkpoint to resume from, a new run starts a new history.
                aside = old.with_name(f"{old.stem}.{stamp}{old.suffix}")
                old.rename(aside)
                log.warning("previous %s moved to %s; this run starts at epoch 1", old.name, aside)
        if s.source == "synthetic":
            self.events_log.touch()
        self.compute = ComputeActor.remote(s.ranked_types, s.pagerank_tol, s.pagerank_max_iter)
        self.shards = [ShardActor.remote(i) for i in range(s.shards)]
        interval = s.epoch_interval
        self.coordinator = EpochCoordinator.remote(self.shards, self.compute, str(epoch_log), interval)
        spec = self.spec
        owners = spread(spec.partition_names(), s.ingest_actors)
        self.ingest = [
            IngestActor.remote(
                i, spec, parts, {}, s.transform_name, self.shards, self.coordinator,
                str(s.data_dir / "dead-letter.jsonl"), s.batch_size,
            )
            for i, parts in enumerate(owners)
            if parts
        ]
        ray.get([self.coordinator.start.remote()] + [a.start.remote() for a in self.ingest])
        self.feed = ResultFeed(self.compute, self.store, self._epoch_arrived).start()
        threading.Thread(target=self._watch, name="pipeline-status", daemon=True).start()
        return self

    def _epoch_arrived(self, view: EpochView) -> None:
        if callable(self.on_epoch):
            self.on_epoch(view)

    def _watch(self) -> None:
        while not self._stop.wait(STATUS_POLL_S):
            try:
                self._status = self.poll_status()
            except Exception:  # noqa: BLE001 - keep the last status; report what failed
                log.exception("pipeline status poll failed")

    def poll_status(self) -> dict:
        ingest = ray.get([a.status.remote() for a in self.ingest])
        coord = ray.get(self.coordinator.status.remote())
        failed = coord["failed"] or next((i["error"] for i in ingest if i["error"]), None)
        state = "failed" if failed else ("finished" if all(i["exhausted"] for i in ingest) else "running")
        return {
            "ingest": state,
            "error": failed,
            "records": sum(i["records"] for i in ingest),
            "dead_letters": sum(i["dead_letters"] for i in ingest),
            "positions": {p: o for i in ingest for p, o in i["positions"].items()},
            "epoch_vector": coord["vector"],
        }

    def status(self) -> dict:
        """The cached status behind /health: no actor call per request."""
        return dict(self._status)

    def wait_for_epoch(self, predicate, timeout: float = 60.0) -> EpochView:
        """Block until the API store holds an epoch that satisfies ``predicate``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                view = self.store.get()
                if predicate(view):
                    return view
            except NotFound:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"no epoch matched within {timeout}s")

    def stop(self) -> None:
        self._stop.set()
        if self.feed is not None:
            self.feed.stop()
        for a in self.ingest:
            try:
                ray.get(a.stop.remote(), timeout=60)
            except Exception:  # noqa: BLE001 - stopping must go on
                log.exception("ingest actor did not stop cleanly")
        if self.coordinator is not None:
            try:
                ray.get(self.coordinator.stop.remote(), timeout=60)
            except Exception:  # noqa: BLE001
                log.exception("coordinator did not stop cleanly")
        for actor in [*self.ingest, self.coordinator, *self.shards, self.compute]:
            if actor is not None:
                ray.kill(actor)
