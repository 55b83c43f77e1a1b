"""The Kafka source (kafka-python): one consumer per ingest actor, one SourcePartition per topic-partition.

The sequence number of a transaction is its Kafka offset; a partition's name,
its key in every epoch vector, is ``topic:partition``. Partitions are assigned
explicitly (the wiring spreads them over the ingest actors) and each is sought
to its start offset, the first one *not* yet applied; the checkpoint is the
truth of where to resume. The consumer group is used only to commit the
offsets of durable epochs, for lag monitoring.

A broker that is unreachable, at start or mid-stream, is retried with capped
exponential backoff; meanwhile the partitions hand out nothing and report
``connected == False``. kafka-python resumes fetching where it was.
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Any

from ingest.sources.base import Record, SourcePartition

log = logging.getLogger(__name__)

# Backoff between connection attempts: fast enough to resume within seconds of
# the broker's return, slow enough not to flood its log while it is away.
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 10.0
# A request to a dead broker fails after this long; kafka-python's default (305 s) would hide an outage.
REQUEST_TIMEOUT_MS = 5000
# How often an idle consumer checks that the broker still answers (and measures lag).
PROBE_S = 2.0


class KafkaClient:
    """The consumer shared by the partitions one ingest actor owns."""

    def __init__(self, bootstrap: str, topic: str, partitions: list[int], starts: dict[int, int], group: str) -> None:
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self._partitions = partitions
        self.positions = {p: starts.get(p, 0) for p in partitions}
        self._fetched = dict(self.positions)  # the offset after the last one queued
        self.queues: dict[int, collections.deque] = {p: collections.deque() for p in partitions}
        self.connected = False
        self.error: str | None = None
        self.lag: dict[int, int] = {}
        self._consumer: Any = None  # a kafka.KafkaConsumer once connected (kafka is imported lazily)
        self._backoff = BACKOFF_MIN_S
        self._next_try = 0.0
        self._next_probe = 0.0
        self._committed: dict[int, int] = {}

    def _tps(self):
        from kafka import TopicPartition

        return [TopicPartition(self.topic, p) for p in self._partitions]

    def _connect(self) -> bool:
        if self._consumer is not None:
            return True
        if time.monotonic() < self._next_try:
            return False
        from kafka import KafkaConsumer
        from kafka.errors import KafkaError

        try:
            consumer = KafkaConsumer(
                bootstrap_servers=self.bootstrap,
                group_id=self.group,
                enable_auto_commit=False,
                request_timeout_ms=REQUEST_TIMEOUT_MS,
                client_id=f"pulsegraph-{self.topic}",
            )
            tps = self._tps()
            consumer.assign(tps)
            begins = consumer.beginning_offsets(tps)
            for tp in tps:
                start = self.positions[tp.partition]
                if start < begins[tp]:
                    log.error(
                        "%s:%d: offsets %d..%d were deleted by retention before they were applied; they are lost",
                        self.topic, tp.partition, start, begins[tp] - 1,
                    )
                    start = self.positions[tp.partition] = begins[tp]
                consumer.seek(tp, start)
                self._fetched[tp.partition] = start
                self.queues[tp.partition].clear()
        except KafkaError as exc:
            self._down(exc)
            return False
        self._consumer = consumer
        self._up()
        log.info("connected to Kafka at %s for %s partitions %s", self.bootstrap, self.topic, self._partitions)
        return True

    def _up(self) -> None:
        self.connected, self.error, self._backoff = True, None, BACKOFF_MIN_S

    def _down(self, exc: Exception) -> None:
        if self.connected or self.error is None:
            log.warning("Kafka at %s unreachable (%s); retrying with backoff", self.bootstrap, exc)
        self.connected, self.error = False, f"{type(exc).__name__}: {exc}"
        self._next_try = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, BACKOFF_MAX_S)

    def fill(self, max_records: int) -> None:
        """Fetch what is ready into the per-partition queues (waits at most a few ms)."""
        if not self._connect():
            return
        from kafka.errors import KafkaError

        try:
            batch = self._consumer.poll(timeout_ms=20, max_records=max_records)
        except KafkaError as exc:
            self._down(exc)
            return
        got = False
        for tp, recs in batch.items():
            q = self.queues[tp.partition]
            for r in recs:
                if r.offset >= self._fetched[tp.partition]:  # a re-fetch after a reconnect is dropped
                    q.append(Record(r.offset, r.value if r.value is not None else b""))
                    self._fetched[tp.partition] = r.offset + 1
                    got = True
        if got:
            self._up()
            return
        if time.monotonic() >= self._next_probe:
            self._next_probe = time.monotonic() + PROBE_S
            self.probe()

    def probe(self) -> None:
        """Ask the broker for the end offsets: it answers (lag measured) or the client is disconnected."""
        if self._consumer is None:
            return
        from kafka.errors import KafkaError

        try:
            ends = self._consumer.end_offsets(self._tps())
        except KafkaError as exc:
            self._down(exc)
            return
        self._up()
        self.lag = {tp.partition: max(0, end - self.positions[tp.partition]) for tp, end in ends.items()}

    def take(self, partition: int, max_records: int) -> list[Record]:
        q = self.queues[partition]
        if not q:
            self.fill(max(max_records, 500) * len(self._partitions))
        out = [q.popleft() for _ in range(min(max_records, len(q)))]
        if out:
            self.positions[partition] = out[-1].offset + 1
        return out

    def commit(self, offsets: dict[int, int]) -> None:
        """Commit durable offsets to the consumer group (monitoring only: failures are logged, not raised)."""
        fresh = {p: o for p, o in offsets.items() if p in self.positions and self._committed.get(p) != o}
        if not fresh or self._consumer is None:
            return
        from kafka import TopicPartition
        from kafka.errors import KafkaError
        from kafka.structs import OffsetAndMetadata

        try:
            self._consumer.commit({TopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1) for p, o in fresh.items()})
            self._committed.update(fresh)
        except KafkaError as exc:
            log.warning("could not commit offsets to group %s: %s", self.group, exc)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


class KafkaPartition(SourcePartition):
    """One topic-partition; resumes at the first offset not yet applied."""

    def __init__(self, client: KafkaClient, partition: int) -> None:
        self.name = f"{client.topic}:{partition}"
        self.client = client
        self.partition = partition

    def next_batch(self, max_records: int) -> list[Record]:
        return self.client.take(self.partition, max_records)

    def position(self) -> int:
        return self.client.positions[self.partition]

    def close(self) -> None:
        self.client.close()


def partition_number(name: str) -> int:
    return int(name.rsplit(":", 1)[1])


def topic_partitions(bootstrap: str, topic: str) -> int:
    """How many partitions ``topic`` has. Raises SourceError if it does not exist, KafkaError if unreachable."""
    from kafka import KafkaConsumer

    from ingest.exceptions import SourceError

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=REQUEST_TIMEOUT_MS)
    try:
        parts = consumer.partitions_for_topic(topic)
    finally:
        consumer.close()
    if not parts:
        raise SourceError(
            f"Kafka topic {topic!r} does not exist at {bootstrap}. "
            f"Operator action: create it (pulsegraph produce --partitions P creates it) or fix --topic."
        )
    return len(parts)
