"""The librdkafka client of the Kafka source (confluent-kafka), behind the same interface as kafka-python's.

librdkafka fetches and checks records in C on its own threads and prefetches
ahead of the ingest loop; Python only sees a list of messages per ``consume``.
Everything but the library calls (start offsets, queues, positions, backoff,
lag, commits to the group) is :class:`pulsegraph.ingest.sources.kafka.BaseKafkaClient`'s.

librdkafka reconnects to a broker by itself and resumes fetching where it was,
so a live consumer is never rebuilt: a transport error (reported through
``error_cb`` or, rarely, as an errored message) marks the client disconnected,
and the next records or the next successful probe of the end offsets mark it
connected again. Partition EOF is not an error (and is not enabled).
"""

from __future__ import annotations

import logging
from typing import Any

from pulsegraph.ingest.sources.base import Record
from pulsegraph.ingest.sources.kafka import POLL_TIMEOUT_S, BaseKafkaClient
from pulsegraph.ingest.sources.kafka_clients import RECONNECT_BACKOFF_MAX_MS, REQUEST_TIMEOUT_MS, librdkafka_config

log = logging.getLogger(__name__)


class _NoConnectFailures(logging.Filter):
    """Drops librdkafka's FAIL lines: while a broker is away it logs every failed connect
    (about 20 a second per consumer here); the outage is logged once, by ``_down``."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("FAIL ")


_librdkafka_log = logging.getLogger(f"{__name__}.librdkafka")
_librdkafka_log.addFilter(_NoConnectFailures())

# librdkafka prefetches up to this much per partition (its default is 64 MB): some
# seconds of records at 100k+ messages/s, without holding hundreds of MB per actor.
QUEUED_MAX_KBYTES = 16 * 1024
# How often librdkafka asks for the topic's metadata again (see _open).
METADATA_REFRESH_MS = 10_000


class ConfluentKafkaClient(BaseKafkaClient):
    """confluent-kafka (librdkafka): records are parsed in C; Python touches each message once."""

    def _errors(self) -> tuple[type[BaseException], ...]:
        from confluent_kafka import KafkaException

        return (KafkaException,)

    def _on_error(self, err: Any) -> None:
        """librdkafka's client-level errors (all brokers down, authentication, fatal): disconnected.

        A transport error alone is one broker connection dropping (an idle one the broker
        closed, or one broker of several): librdkafka reconnects or moves on to the new
        leader by itself, so it is not an outage; with every broker gone comes
        ``_ALL_BROKERS_DOWN``, and the probe catches whatever else."""
        from confluent_kafka import KafkaError, KafkaException

        from pulsegraph.ingest.sources.kafka_faults import diagnose

        # A transport error that is a refusal (the broker rejected our certificate) is a fault, not a blip.
        if err.code() != KafkaError._TRANSPORT or diagnose(err.str(), self.bootstrap, self.config) is not None:
            self._down(KafkaException(err))

    def _tp(self, partition: int, offset: int | None = None) -> Any:
        from confluent_kafka import TopicPartition

        return TopicPartition(self.topic, partition) if offset is None else TopicPartition(self.topic, partition, offset)

    def _open(self) -> Any:
        from confluent_kafka import Consumer

        consumer = Consumer(librdkafka_config(
            self.bootstrap,
            self.config,
            {
                "group.id": self.group,
                "client.id": f"pulsegraph-{self.topic}",
                # The checkpoint is the truth: offsets go to the group only through commit().
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": False,
                # librdkafka's default too, stated: never the records of aborted transactions.
                "isolation.level": "read_committed",
                # Never a silent jump to the log end: an offset out of range is an errored message,
                # and _poll handles it.
                "auto.offset.reset": "error",
                "socket.timeout.ms": REQUEST_TIMEOUT_MS,
                "reconnect.backoff.max.ms": RECONNECT_BACKOFF_MAX_MS,
                # librdkafka's default is 5 minutes: after a broker restart, a partition the restarting
                # broker briefly did not list stayed "Unknown partition" that long (a red chaos run).
                "topic.metadata.refresh.interval.ms": METADATA_REFRESH_MS,
                "queued.max.messages.kbytes": QUEUED_MAX_KBYTES,
                "error_cb": self._on_error,
                "on_commit": self._on_commit,
                # librdkafka's own log lines go to Python logging, not to the worker's stderr.
                "logger": _librdkafka_log,
            },
        ))
        try:
            lows = {p: self._watermarks(consumer, p)[0] for p in self._partitions}
            starts = self._starts(lows)
            consumer.assign([self._tp(p, starts[p]) for p in self._partitions])
        except BaseException:
            consumer.close()
            raise
        return consumer

    def _watermarks(self, consumer: Any, partition: int) -> tuple[int, int]:
        """(log start, end) of a partition, asked of the broker (raises KafkaException when it does not answer)."""
        from confluent_kafka import KafkaError, KafkaException

        got = consumer.get_watermark_offsets(self._tp(partition), timeout=REQUEST_TIMEOUT_MS / 1000, cached=False)
        if got is None:  # older clients answer None instead of raising on a timeout
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        return int(got[0]), int(got[1])

    def _poll(self, max_records: int) -> dict[int, list[Record]]:
        from confluent_kafka import KafkaError, KafkaException

        out: dict[int, list[Record]] = {}
        # consume() waits until it has num_messages or the timeout passed: take what is
        # prefetched at once, and wait only when there is nothing.
        msgs = self._consumer.consume(num_messages=max_records, timeout=0)
        if not msgs:
            msgs = self._consumer.consume(num_messages=max_records, timeout=POLL_TIMEOUT_S)
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._AUTO_OFFSET_RESET and m.partition() in self.queues:
                    self._out_of_range(m.partition())
                elif err.code() != KafkaError._PARTITION_EOF:
                    self._down(KafkaException(err))
                continue
            p = m.partition()
            recs = out.get(p)
            if recs is None:
                recs = out[p] = []
            value = m.value()
            kind, ms = m.timestamp()
            recs.append(Record(m.offset(), value if value is not None else b"", ms / 1000.0 if kind and ms > 0 else 0.0))
        return out

    def _end_offsets(self) -> dict[int, int]:
        return {p: self._watermarks(self._consumer, p)[1] for p in self._partitions}

    def _consumer_positions(self) -> dict[int, int]:
        got = self._consumer.position([self._tp(p) for p in self._partitions])
        return {tp.partition: int(tp.offset) for tp in got if tp.offset >= 0}

    def _commit(self, offsets: dict[int, int]) -> None:
        # Asynchronous: librdkafka's synchronous commit has no timeout and waits for the group coordinator
        # as long as the broker is away, and the ingest loop with it. The outcome comes to _on_commit.
        self._consumer.commit(offsets=[self._tp(p, o) for p, o in offsets.items()], asynchronous=True)

    def _on_commit(self, err: Any, partitions: list) -> None:
        from confluent_kafka import KafkaException

        failed = [tp for tp in partitions if tp.error is not None]
        if err is not None or failed:
            self._commit_failed(KafkaException(err if err is not None else failed[0].error), [tp.partition for tp in failed] or None)
        else:
            self._commit_failing = False

    def _watermarks_of(self, partition: int) -> tuple[int, int]:
        return self._watermarks(self._consumer, partition)

    def _seek(self, partition: int, offset: int) -> None:
        # A partition whose fetch failed out of range is in an error state that seek() refuses
        # ("Erroneous state"); assigning anew does it. Every partition restarts at the offset after
        # its queued records, so nothing queued is fetched twice and nothing prefetched is lost.
        self._consumer.assign([self._tp(p, offset if p == partition else self._fetched[p]) for p in self._partitions])

    def _close(self, consumer: Any) -> None:
        consumer.close()
