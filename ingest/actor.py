"""The ingest actor: reads its partitions, transforms records into transactions, routes them to shards.

It owns a set of source partitions (one partition has one owner). Each round it
reads a batch from every partition, transforms it (the whole batch at once,
see :meth:`~pulsegraph.ingest.transforms.Transform.feed`), sends one batch per shard,
and only after *every* shard has acknowledged reports progress to the epoch
coordinator: "all of partition p below offset h_p is delivered". Reading and
transforming round k+1 overlaps the shards' receipt of round k.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

import ray

from pulsegraph.base.runtime import HeapTrimmer, configure_logging, tune_gc
from pulsegraph.ingest.batch import Router
from pulsegraph.ingest.decode import RegistryDecoder, RegistrySpec, RegistryUnavailable
from pulsegraph.ingest.deadletter import (
    DeadLetter,
    FileDeadLetterSink,
    KafkaDeadLetterSink,
)
from pulsegraph.ingest.sources import SourceSpec, open_partitions
from pulsegraph.ingest.transforms import Event, events_of, get_transform

log = logging.getLogger(__name__)

# When no partition had a record, wait this long before asking again: short
# enough to add little latency, long enough not to spin a core.
IDLE_SLEEP_S = 0.01
# While throttled, look again this often: the budget is checked once a second.
THROTTLED_SLEEP_S = 0.1
# A round that read less than a full batch (a paced stream, a caught-up consumer) is followed by the
# next one this long after it began, not at once: each round costs a call to every shard it routed
# to and a progress report, and at the default 1,000 events/s rounds of a few records each kept both
# ingest actors, the shards and the coordinator busy (most of two cores at 800 events/s). 50 ms adds
# little to a 1 s epoch.
ROUND_MIN_S = 0.05
# The longest wait between two tries of a record while the schema registry is away.
REGISTRY_RETRY_MAX_S = 5.0
NO_EVENT_TIME = "no event time: --window needs a ts on the event (this source stores no time with its records)"


@dataclass
class Round:
    """One round of reading: what it will report once every shard has acked it."""

    # p -> (high, valid records) or, with a window, (high, valid records, largest event time or None)
    progress: dict[str, tuple] = field(default_factory=dict)
    read_at: float = 0.0
    records: int = 0
    refs: list = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class IngestConfig:
    """What one ingest actor reads, and how.

    ``partitions``: the source partitions it owns, read from ``starts`` (offsets; absent: 0).
    ``transform``: the name of the transform that makes records into transactions.
    ``dead_letter_path``: the file sink's path (a Kafka source writes its letters to a topic instead).
    ``event_time``: a window is on, so every transaction needs a time (see Router.stamp_times).
    ``registry``: records are schema-registry framed (--format), decoded before the transform."""

    actor_id: int
    spec: SourceSpec
    partitions: list[str]
    starts: dict[str, int] = field(default_factory=dict)
    transform: str = "edges"
    dead_letter_path: str
    batch_size: int = 2000
    event_time: bool = False
    registry: RegistrySpec | None = None


@ray.remote
class IngestActor:
    def __init__(self, *, config: IngestConfig, shards: list, coordinator, log_level: str = "INFO") -> None:
        """``shards``: the shard actors, in shard order; ``coordinator``: the epoch coordinator actor."""
        configure_logging(log_level)
        c, spec = config, config.spec
        self.actor_id = c.actor_id
        self._parts = open_partitions(spec, c.partitions, c.starts)
        self._transform = get_transform(c.transform)
        self._shards = shards
        self._coordinator = coordinator
        self._stop = threading.Event()
        self._sink: KafkaDeadLetterSink | FileDeadLetterSink
        # Opened where the partitions resume, so the letters of replayed records are not written again.
        resume_at = {p: c.starts.get(p, 0) for p in c.partitions}
        if spec.kind == "kafka":
            self._sink = KafkaDeadLetterSink(str(spec.bootstrap), str(spec.topic), self._stop, resume_at, spec.kafka_config)
        else:
            self._sink = FileDeadLetterSink(c.dead_letter_path, resume_at)
        self._batch_size = c.batch_size
        self._event_time = c.event_time
        registry = c.registry
        self._decoder = RegistryDecoder(registry, str(spec.topic)) if registry is not None and registry.fmt != "json" else None
        self._registry_error: str | None = None  # why reading waits for the schema registry
        self._router = Router(len(shards))
        self._thread: threading.Thread | None = None
        self._error: str | None = None
        self._throttle: str | None = None  # why reading is paused (the service's memory budget), or None
        self.stats = {"records": 0, "transactions": 0, "dead_letters": 0, "rounds": 0}
        tune_gc()
        self._trimmer = HeapTrimmer()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=f"ingest-{self.actor_id}", daemon=True)
            self._thread.start()

    def stop(self) -> dict:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        for p in self._parts:
            p.close()
        return self.status()

    def throttle(self, reason: str | None) -> None:
        """Pause reading (``reason``: why) or resume (None). Records not read stay in the source:
        Kafka's lag grows, the synthetic and file sources wait; nothing is lost."""
        if (reason is None) != (self._throttle is None):
            log.info("ingest actor %d %s", self.actor_id, f"paused: {reason}" if reason else "resumes reading")
        self._throttle = reason

    def status(self) -> dict:
        health = [p.health() for p in self._parts]
        if self._registry_error is not None:  # the loop waits for the schema registry: backpressure
            health.append({"connected": False, "error": self._registry_error})
        if self._sink.error is not None:  # the loop waits on the broker in the sink, not in the consumer
            health.append({"connected": False, "error": self._sink.error, "fault": getattr(self._sink, "fault", None)})
        return {
            "actor": self.actor_id,
            "node": ray.get_runtime_context().get_node_id(),
            "positions": {p.name: p.position() for p in self._parts},
            "exhausted": all(p.exhausted() for p in self._parts),
            "connected": all(h.get("connected", True) for h in health),
            "source_error": next((h["error"] for h in health if h.get("error")), None),
            # A partition stopped on a fault the operator must fix while the broker answers (a codec, credentials).
            "fault": next((h["fault"] for h in health if h.get("fault")), None),
            "lag": {p: n for h in health for p, n in h.get("lag", {}).items()},
            "retention_lost": {p: n for h in health for p, n in h.get("retention_lost", {}).items()},
            "error": self._error,
            "throttled": self._throttle is not None,
            **self.stats,
        }

    def _loop(self) -> None:
        pending: Round | None = None
        try:
            while not self._stop.is_set():
                if self._throttle is not None:
                    # The round in flight is finished (its progress reported), then nothing is read.
                    if pending is not None:
                        self._finish(pending)
                        pending = None
                    self._trimmer.maybe_trim()
                    time.sleep(THROTTLED_SLEEP_S)
                    continue
                current = self._read_round()
                if pending is not None:
                    self._finish(pending)
                    pending = None
                if current.records == 0 and not current.progress:
                    time.sleep(IDLE_SLEEP_S)
                    continue
                self._trimmer.maybe_trim()
                if current.records < self._batch_size * len(self._parts):
                    # Not behind: report this round now, and let the next one gather what arrives meanwhile.
                    self._finish(current)
                    self._stop.wait(max(0.0, ROUND_MIN_S - (time.time() - current.read_at)))
                else:
                    pending = current
            if pending is not None:
                self._finish(pending)
        except RegistryUnavailable:
            if not self._stop.is_set():
                raise
        except Exception as exc:  # noqa: BLE001 - surfaced through status() and the log
            self._error = f"{type(exc).__name__}: {exc}"
            log.exception("ingest actor %d stopped", self.actor_id)

    def _read_round(self) -> Round:
        rnd = Round(read_at=time.time())
        letters: list[DeadLetter] = []
        read: dict[str, tuple[list, list[Event]]] = {}
        for part in self._parts:
            before = part.position()
            records = part.next_batch(self._batch_size)
            after = part.position()
            if after == before:
                continue
            events: list[Event] = []
            for offset, raw, _ in records:
                if self._decoder is not None:
                    decoded, reason = self._decode(raw)
                    if decoded is None:
                        letters.append(DeadLetter(part.name, offset, str(reason), raw))
                        continue
                    raw = decoded
                if b"\n" in raw:
                    events.extend(events_of(offset, raw))
                elif raw and not raw.isspace():  # the common case, inline: one event, one line
                    events.append(Event(offset, 0, raw))
            rejected = self._transform.feed(self._router, part.name, events)
            letters.extend(DeadLetter(part.name, e.offset, reason, e.raw, e.event_index) for e, reason in rejected)
            valid = len(events) - len(rejected)
            rnd.progress[part.name] = (after, valid)
            rnd.records += len(records)
            self.stats["transactions"] += valid
            if self._event_time:
                read[part.name] = (records, events)
        if self._event_time:
            letters.extend(self._stamp_times(rnd, read, {(d.partition, d.offset, d.event_index) for d in letters}))
        # Dead letters are durable before the round can be reported as delivered.
        self._sink.write(letters)
        self.stats["dead_letters"] += len(letters)
        self.stats["records"] += rnd.records
        batches = self._router.take()
        rnd.refs = [shard.receive.remote(b) for shard, b in zip(self._shards, batches) if len(b)]
        return rnd

    def _decode(self, raw: bytes) -> tuple[bytes | None, str | None]:
        """The decoder's answer; while the registry is away, the same record is tried again (the round, and
        with it the partitions' progress, waits: backpressure, never a dead letter)."""
        assert self._decoder is not None
        delay = 0.5
        while True:
            try:
                got = self._decoder.decode(raw)
                if self._registry_error is not None:
                    log.info("schema registry answers again; reading resumes")
                self._registry_error = None
                return got
            except RegistryUnavailable as exc:
                if self._registry_error is None:
                    log.warning("%s", exc)
                self._registry_error = str(exc)
                if self._stop.wait(delay):
                    raise
                delay = min(delay * 2, REGISTRY_RETRY_MAX_S)

    def _stamp_times(self, rnd: Round, read: dict[str, tuple[list, list[Event]]], rejected: set) -> list[DeadLetter]:
        """Give the round's transactions their event times; the ones with none become dead letters
        (a file or the synthetic stream stores no time with a record: inventing one at read would
        differ on a replay, and S_e must be a pure function of V_e)."""
        stored = {p: {r.offset: r.ts for r in recs if r.ts} for p, (recs, _) in read.items()}
        latest, dropped = self._router.stamp_times(stored)
        letters: list[DeadLetter] = []
        for p, offsets in dropped.items():
            gone = set(offsets)
            events = [e for e in read[p][1] if e.offset in gone and (p, e.offset, e.event_index) not in rejected]
            letters.extend(DeadLetter(p, e.offset, NO_EVENT_TIME, e.raw, e.event_index) for e in events)
            high, valid = rnd.progress[p][:2]
            rnd.progress[p] = (high, valid - len(events))
            self.stats["transactions"] -= len(events)
        for p, (high, valid) in rnd.progress.items():
            rnd.progress[p] = (high, valid, latest.get(p))
        return letters

    def _finish(self, rnd: Round) -> None:
        ray.get(rnd.refs)
        durable = ray.get(self._coordinator.report_progress.remote(rnd.progress, rnd.read_at, rnd.records))
        self.stats["rounds"] += 1
        # Upstream offsets (Kafka's consumer group) follow the durable epochs only.
        for part in self._parts:
            if part.name in durable:
                part.commit(durable[part.name])
