"""The Kafka source: one consumer per ingest actor, one SourcePartition per topic-partition.

The sequence number of a transaction is its Kafka offset; a partition's name,
its key in every epoch vector, is ``topic:partition``. Partitions are assigned
explicitly (the wiring spreads them over the ingest actors) and each is sought
to its start offset, the first one *not* yet applied; the checkpoint is the
truth of where to resume. The consumer group is used only to commit the
offsets of durable epochs, for lag monitoring.

Both clients read with ``read_committed``: records of aborted producer
transactions are never handed out, and records of an open transaction wait
until it commits. Offsets no consumer sees (transaction markers, aborted
records) are stepped over when a partition has nothing queued: its position
moves to the consumer's own, so the epoch vector and the lag reach the last
stable offset instead of stopping one marker short of it.

Neither client ever jumps to the log end by itself (``auto_offset_reset`` is
off). A position below a partition's log start, at start-up or mid-stream
(retention deleted records before they were read), moves up to the log start:
the records in between are lost, logged and counted (``retention_lost``, in
``/health``). A position above the log end means the log lost records this
history already applied (an unclean leader election, a topic deleted and
re-created): that raises :class:`~pulsegraph.ingest.exceptions.SourceError`, the pipeline
relaunches, and its launch check stops the service with the operator action.

A broker that is unreachable, at start or mid-stream, is retried with capped
exponential backoff; meanwhile the partitions hand out nothing and report
``connected == False``. Both clients resume fetching where they were.

A broker that answers but whose records or answers the client cannot use is a
*fault*, never an outage: a partition whose records are compressed with a codec
the client has no library for stops at the first such record (the others go
on), and says which codec and what to install; ``/health`` shows it as degraded
with that reason. Retrying would not help, so a fault is not retried: the
operator acts and restarts, and the partition resumes where it stopped.

This module owns that behaviour once, in :class:`BaseKafkaClient` (start
offsets, per-partition queues, ``take``, positions, backoff, lag, commits), and
the kafka-python client, :class:`KafkaClient`; the librdkafka client,
``ConfluentKafkaClient``, is in :mod:`pulsegraph.ingest.sources.confluent`. A client only
connects, polls, reads end offsets, commits and closes.
"""

from __future__ import annotations

import abc
import collections
import logging
import threading
import time
from typing import Any

from pulsegraph.ingest.sources.base import Record, SourcePartition
from pulsegraph.ingest.sources.kafka_clients import (
    REQUEST_TIMEOUT_MS,
    codec_fault,
    kafka_python_config,
)
from pulsegraph.ingest.sources.kafka_close import close_within
from pulsegraph.ingest.sources.kafka_config import KafkaConfig

# Imported with the source, before any client: it keeps the causes kafka-python logs as it fails to connect.
from pulsegraph.ingest.sources.kafka_faults import diagnose

log = logging.getLogger(__name__)

# Backoff between connection attempts: fast enough to resume within seconds of
# the broker's return, slow enough not to flood its log while it is away.
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 10.0
# How often an idle consumer checks that the broker still answers (and measures lag).
PROBE_S = 2.0
# A client disconnected this long with its consumer open is closed and opened anew. Seen in the chaos
# test: after a broker restart librdkafka kept two partitions as unknown ("Failed to get watermark
# offsets: Local: Unknown partition") and fetched nothing from them for the 300 s the test waited (its
# metadata refresh comes every 5 minutes); a new client asks for the metadata at once.
REOPEN_AFTER_S = 20.0
# How long one fill waits for records: short, so a round over several partitions never stalls.
POLL_TIMEOUT_S = 0.02
# A partition's in-process queue holds about this many records at most (or four takes, if more).
# A round asks every partition; an idle one's empty queue makes the client fetch, and the fetch
# brings whatever is ready, mostly for the busy siblings. While any queue is this full nothing is
# fetched: the busy queue drains by a take a round, and the library's own prefetch is bounded by its
# settings. (Not pause/resume: kafka-python 3.0's parked fetches of a paused partition are never
# restored while a sibling has fetched records in line, so a resumed partition stays silent.)
MAX_QUEUED_RECORDS = 20_000

class BaseKafkaClient(abc.ABC):
    """The consumer shared by the partitions one ingest actor owns; a subclass is one Kafka client library."""

    def __init__(self, bootstrap: str, topic: str, partitions: list[int], starts: dict[int, int], group: str,
                 config: KafkaConfig | None = None) -> None:
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.config = config  # how to reach the cluster (--kafka-config), or None: plaintext
        self._partitions = partitions
        self.positions = {p: starts.get(p, 0) for p in partitions}
        self._fetched = dict(self.positions)  # the offset after the last one queued
        self.queues: dict[int, collections.deque] = {p: collections.deque() for p in partitions}
        self.connected = False
        self.error: str | None = None
        self.lag: dict[int, int] = {}
        self._consumer: Any = None  # the library's consumer once connected (imported lazily)
        self._backoff = BACKOFF_MIN_S
        self._next_try = 0.0
        self._down_since = 0.0  # time.monotonic() when the client last went from connected to not
        self._next_probe = 0.0
        self._committed: dict[int, int] = {}
        self._commit_failing = False
        self.retention_lost: dict[int, int] = {}  # records deleted by retention before they were read
        # Partitions stopped by a fault the operator must fix (the broker answers): partition -> reason.
        self.faults: dict[int, str] = {}
        # The broker answers but refuses this client (credentials, certificates, ACLs): the reason and the
        # action, until a connection succeeds. Retried all the same (with backoff): the operator may fix
        # the cluster's side (a user created, an ACL granted) without restarting the service.
        self.fault: str | None = None
        self._attempt_since = 0.0  # time.monotonic() at the start of the last connection attempt
        self._queue_cap = MAX_QUEUED_RECORDS
        self._stuck_closes: list[threading.Thread] = []  # closes that outlasted kafka_close.CLOSE_WAIT_S, still running

    # -- what a client library provides --------------------------------------------------

    @abc.abstractmethod
    def _errors(self) -> tuple[type[BaseException], ...]:
        """The library's exceptions that mean the broker did not answer (caught, never raised)."""

    def _partition_fault(self, exc: BaseException) -> tuple[list[int], str] | None:
        """When ``exc`` (one of :meth:`_errors`, raised by a poll) means the broker answered but some
        partitions cannot be read on (a codec the library lacks): those partitions and the reason.
        None: an outage, retried."""
        return None

    def _stop_partitions(self, partitions: list[int]) -> None:
        """Fetch nothing more for ``partitions`` (they stopped on a fault)."""

    @abc.abstractmethod
    def _open(self) -> Any:
        """A new consumer, assigned the partitions and sought to :meth:`_starts` of the log start offsets."""

    @abc.abstractmethod
    def _poll(self, max_records: int) -> dict[int, list[Record]]:
        """What is ready now, per partition in offset order (waits at most POLL_TIMEOUT_S)."""

    @abc.abstractmethod
    def _end_offsets(self) -> dict[int, int]:
        """The end offset of every partition a read_committed consumer can reach (the last stable offset), from the broker."""

    @abc.abstractmethod
    def _consumer_positions(self) -> dict[int, int]:
        """The consumer's own position per partition: the next offset it would hand out, past any
        transaction markers and aborted records it stepped over."""

    @abc.abstractmethod
    def _commit(self, offsets: dict[int, int]) -> None:
        """Commit ``offsets`` (the first offset not applied, per partition) to the group, within about
        REQUEST_TIMEOUT_MS: the ingest loop waits for it, so it must never wait on an absent broker."""

    @abc.abstractmethod
    def _watermarks_of(self, partition: int) -> tuple[int, int]:
        """(log start, log end) of ``partition``, from the broker."""

    @abc.abstractmethod
    def _seek(self, partition: int, offset: int) -> None:
        """Fetch ``partition`` from ``offset`` on."""

    @abc.abstractmethod
    def _close(self, consumer: Any) -> None:
        """Close ``consumer``."""

    # -- shared behaviour ---------------------------------------------------------------------

    def _starts(self, log_starts: dict[int, int]) -> dict[int, int]:
        """Where each partition resumes, given the broker's log start offsets: offsets below the log
        start were deleted by retention and are reported lost; the queues restart there."""
        for p in self._partitions:
            begin = log_starts[p]
            if self.positions[p] < begin:
                self._lost(p, self.positions[p], begin)
                self.positions[p] = begin
            self._fetched[p] = self.positions[p]
            self.queues[p].clear()
        return dict(self.positions)

    def _lost(self, p: int, first: int, begin: int) -> None:
        log.error(
            "%s:%d: offsets %d..%d were deleted by retention before they were read; they are lost "
            "(a longer retention.ms on the topic, or a faster pipeline, keeps them)", self.topic, p, first, begin - 1,
        )
        self.retention_lost[p] = self.retention_lost.get(p, 0) + begin - first

    def _out_of_range(self, p: int) -> None:
        """The broker has no record at the next offset to fetch: retention passed it, or the log is shorter."""
        from pulsegraph.ingest.exceptions import SourceError

        begin, end = self._watermarks_of(p)
        at = self._fetched[p]
        if at > end:
            raise SourceError(
                f"{self.topic}:{p} ends at offset {end}, below offset {at} that was already read: the log lost records "
                f"(an unclean leader election, or the topic deleted and re-created)"
            )
        if at < begin:
            self._lost(p, at, begin)
            self._fetched[p] = begin
            if not self.queues[p]:
                self.positions[p] = begin
        self._seek(p, self._fetched[p])

    def _connect(self) -> bool:
        if self._consumer is not None:
            return True
        if time.monotonic() < self._next_try:
            return False
        self._attempt_since = time.monotonic()
        try:
            self._consumer = self._open()
        except self._errors() as exc:
            self._down(exc)
            return False
        self._up()
        log.info("connected to Kafka at %s for %s partitions %s", self.bootstrap, self.topic, self._partitions)
        return True

    def _up(self) -> None:
        self.connected, self.error, self.fault, self._backoff = True, None, None, BACKOFF_MIN_S

    def _down(self, exc: BaseException) -> None:
        fault = diagnose(exc, self.bootstrap, self.config, self.topic, self.group, self._attempt_since)
        if fault is not None and fault != self.fault:
            log.error("%s", fault)
        elif fault is None and self.fault is None and (self.connected or self.error is None):
            log.warning("Kafka at %s unreachable (%s); retrying with backoff", self.bootstrap, exc)
        if self.connected or self.error is None:
            self._down_since = time.monotonic()
        self.fault = fault or self.fault  # a later "all brokers down" is the same refusal, not an outage
        self.connected, self.error = False, f"{type(exc).__name__}: {exc}"
        self._next_try = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, BACKOFF_MAX_S)

    def fill(self, max_records: int) -> None:
        """Fetch what is ready into the per-partition queues (waits at most a few ms); nothing while
        any queue is full."""
        if any(len(q) >= self._queue_cap for q in self.queues.values()):
            return
        if self._consumer is not None and not self.connected and time.monotonic() - self._down_since >= REOPEN_AFTER_S:
            self._reopen()
        if not self._connect():
            return
        try:
            batch = self._poll(max_records)
        except self._errors() as exc:
            fault = self._partition_fault(exc)
            if fault is None:
                self._down(exc)
            else:
                self._fault(*fault)
            return
        got = False
        for p, recs in batch.items():
            fetched = self._fetched[p]
            if recs[0].offset < fetched:  # a re-fetch after a reconnect is dropped
                recs = [r for r in recs if r.offset >= fetched]
                if not recs:
                    continue
            self.queues[p].extend(recs)
            self._fetched[p] = recs[-1].offset + 1
            got = True
        if got:
            self._up()
            return
        if time.monotonic() >= self._next_probe:
            self._next_probe = time.monotonic() + PROBE_S
            self.probe()

    def _fault(self, partitions: list[int], reason: str) -> None:
        """Stop ``partitions`` with ``reason`` (logged once); the broker answered, so the client stays connected."""
        fresh = [p for p in partitions if p not in self.faults]
        for p in fresh:
            self.faults[p] = reason  # what is queued (the records before the fault) is still handed out
        if fresh:
            log.error("%s", reason)
            self._stop_partitions(fresh)
        self._up()

    def _reopen(self) -> None:
        """Close the consumer and let the next fill open a new one (from the positions taken so far:
        what was queued is fetched again)."""
        log.warning("Kafka client for %s partitions %s disconnected for %.0f s (%s); opening a new one",
                    self.topic, self._partitions, time.monotonic() - self._down_since, self.error)
        self._close_within()
        self._down_since = time.monotonic()

    def probe(self) -> None:
        """Ask the broker for the end offsets: it answers (lag measured) or the client is disconnected."""
        if self._consumer is None:
            return
        try:
            ends = self._end_offsets()
        except self._errors() as exc:
            self._down(exc)
            return
        self._up()
        self._step_over_unseen()
        self.lag = {p: max(0, end - self.positions[p]) for p, end in ends.items()}

    def _step_over_unseen(self) -> None:
        """Move an idle partition's position over offsets that hold no record for us (markers, aborted)."""
        try:
            ahead = self._consumer_positions()
        except self._errors() as exc:
            self._down(exc)
            return
        for p, pos in ahead.items():
            if not self.queues[p] and pos > self.positions[p] and pos >= self._fetched[p]:
                self.positions[p] = self._fetched[p] = pos

    def take(self, partition: int, max_records: int) -> list[Record]:
        self._queue_cap = max(MAX_QUEUED_RECORDS, 4 * max_records)
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
        if not fresh or self._consumer is None or not self.connected:
            return  # while the broker is away, the next durable epoch commits instead
        try:
            self._commit(fresh)
            self._committed.update(fresh)
        except self._errors() as exc:
            self._commit_failed(exc)

    def _commit_failed(self, exc: BaseException, partitions: list[int] | None = None) -> None:
        """A commit did not go through: said once until one does, and retried with the next epoch's."""
        for p in self._partitions if partitions is None else partitions:
            self._committed.pop(p, None)
        if not self._commit_failing:
            log.warning("could not commit offsets to group %s (lag monitoring only; retried each epoch): %s", self.group, exc)
        self._commit_failing = True

    def close(self) -> None:
        if self._consumer is not None:
            self._close_within()

    def _close_within(self) -> None:
        """Close the consumer without waiting on it for ever (:func:`close_within`); none is left either way."""
        consumer, self._consumer = self._consumer, None
        close_within(self._close, consumer, self._stuck_closes, f"the Kafka client for {self.topic} partitions {self._partitions}")


class KafkaClient(BaseKafkaClient):
    """kafka-python: pure Python, record CRCs checked by crc32c."""

    def _errors(self) -> tuple[type[BaseException], ...]:
        from kafka.errors import KafkaError

        return (KafkaError,)

    def _partition_fault(self, exc: BaseException) -> tuple[list[int], str] | None:
        from kafka.errors import UnsupportedCodecError

        if not isinstance(exc, UnsupportedCodecError):
            return None
        # The partition whose records were being unpacked when the codec was missing (the exception
        # does not name it); without it, every partition of this client not yet stopped.
        fetcher = getattr(self._consumer, "_fetcher", None)
        inline = getattr(fetcher, "_next_partition_records", None)
        tp = getattr(inline, "topic_partition", None)
        parts = [tp.partition] if tp is not None and tp.partition in self.queues else [
            p for p in self._partitions if p not in self.faults]
        where = (f"{self.topic}:{parts[0]} stopped at offset {self._fetched[parts[0]]}" if len(parts) == 1
                 else f"{self.topic} partitions {parts} stopped")
        return parts, codec_fault(where, exc)

    def _stop_partitions(self, partitions: list[int]) -> None:
        from kafka import TopicPartition

        self._consumer.pause(*[TopicPartition(self.topic, p) for p in partitions])

    def _tps(self):
        from kafka import TopicPartition

        return [TopicPartition(self.topic, p) for p in self._partitions]

    def _open(self) -> Any:
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(**kafka_python_config(
            self.bootstrap,
            self.config,
            group_id=self.group,
            enable_auto_commit=False,
            client_id=f"pulsegraph-{self.topic}",
            # Never the records of aborted transactions (kafka-python's default is read_uncommitted).
            isolation_level="read_committed",
            # Never a silent jump to the log end: an offset out of range raises, and _poll handles it.
            auto_offset_reset="none",
        ))
        try:
            tps = self._tps()
            consumer.assign(tps)
            starts = self._starts({tp.partition: o for tp, o in consumer.beginning_offsets(tps).items()})
            for tp in tps:
                consumer.seek(tp, starts[tp.partition])
        except BaseException:
            consumer.close()
            raise
        return consumer

    def _poll(self, max_records: int) -> dict[int, list[Record]]:
        from kafka.errors import OffsetOutOfRangeError

        try:
            batch = self._consumer.poll(timeout_ms=int(POLL_TIMEOUT_S * 1000), max_records=max_records)
        except OffsetOutOfRangeError as exc:
            for tp in (exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {}):
                self._out_of_range(tp.partition)
            return {}
        return {
            tp.partition: [Record(r.offset, r.value if r.value is not None else b"", max(r.timestamp or 0, 0) / 1000.0) for r in recs]
            for tp, recs in batch.items() if recs
        }

    def _end_offsets(self) -> dict[int, int]:
        return {tp.partition: end for tp, end in self._consumer.end_offsets(self._tps()).items()}

    def _consumer_positions(self) -> dict[int, int]:
        return {tp.partition: int(self._consumer.position(tp)) for tp in self._tps()}

    def _commit(self, offsets: dict[int, int]) -> None:
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

        # Bounded: without a timeout kafka-python waits for the group coordinator as long as the broker is away.
        self._consumer.commit(
            {TopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()}, timeout_ms=REQUEST_TIMEOUT_MS,
        )
        self._commit_failing = False

    def _watermarks_of(self, partition: int) -> tuple[int, int]:
        from kafka import TopicPartition

        tp = TopicPartition(self.topic, partition)
        return int(self._consumer.beginning_offsets([tp])[tp]), int(self._consumer.end_offsets([tp])[tp])

    def _seek(self, partition: int, offset: int) -> None:
        from kafka import TopicPartition

        self._consumer.seek(TopicPartition(self.topic, partition), offset)

    def _close(self, consumer: Any) -> None:
        consumer.close()


class KafkaPartition(SourcePartition):
    """One topic-partition; resumes at the first offset not yet applied."""

    def __init__(self, client: BaseKafkaClient, partition: int) -> None:
        self.name = f"{client.topic}:{partition}"
        self.client = client
        self.partition = partition

    def next_batch(self, max_records: int) -> list[Record]:
        return self.client.take(self.partition, max_records)

    def position(self) -> int:
        return self.client.positions[self.partition]

    def close(self) -> None:
        self.client.close()

    def commit(self, offset: int) -> None:
        self.client.commit({self.partition: offset})

    def health(self) -> dict:
        c, name = self.client, self.name
        fault = c.faults.get(self.partition) or c.fault
        return {
            "connected": c.connected,
            "error": fault or c.error,
            # A fault the operator must fix while the broker answers (this partition is stopped).
            "fault": fault,
            "lag": {name: c.lag[self.partition]} if self.partition in c.lag else {},
            "retention_lost": {name: c.retention_lost[self.partition]} if self.partition in c.retention_lost else {},
        }


def partition_number(name: str) -> int:
    return int(name.rsplit(":", 1)[1])
