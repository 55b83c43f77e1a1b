"""Dead-letter sinks: where records that cannot become transactions go, with the reason.

Embedded mode writes a JSONL file: each line says where the record came from
(partition, offset, index of the event in its message), why it was refused,
and the record itself (as text, cut to :data:`MAX_RECORD_CHARS`), written with
one ``O_APPEND`` write per batch and fsynced. Kafka mode produces to
``<topic>.dlq`` with the reason and the position in headers; a record the
topic cannot take whole is cut, its size in the ``original_size`` header.
Either way the write is durable before the ingest actor reports the batch as
delivered, so no refused record is lost.

And none is written twice. A recovery replays the records after the
checkpoint, and with them their dead letters; (partition, offset, index) is a
dead letter's key, and one partition's letters are written in key order (its
one owner reads it in order), so a sink opened at a partition's start offset
first reads back the newest key it already holds for it and skips every
letter up to that key. Reading back goes from the end toward the start and
stops, per partition, at the first letter below the start offset: it costs
the letters written since the checkpoint, except for a partition that never
had a letter before its start, for which it reads the whole sink (dead
letters are rare; a million of them read back in about a second).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import time
from typing import Iterable, Iterator, NamedTuple

import orjson

from pulsegraph.base.durable import append_durably, makedirs_durably
from pulsegraph.ingest.sources.kafka_clients import kafka_python_config
from pulsegraph.ingest.sources.kafka_config import KafkaConfig
from pulsegraph.ingest.sources.kafka_faults import diagnose

log = logging.getLogger(__name__)

# Keep a refused record whole enough to debug, but never let a huge garbage
# record blow up the sink.
MAX_RECORD_CHARS = 8192
# A dead letter's value in Kafka is cut to this (below the broker's default message.max.bytes of ~1 MB,
# with room for the headers); a broker that refuses even that makes the sink cut harder, down to the floor.
MAX_KAFKA_VALUE_BYTES = 900_000
MIN_KAFKA_VALUE_BYTES = 1024
# Reading a sink back for the keys it holds: this many bytes (file) or records (topic) at a time.
READ_BACK_BYTES = 1 << 20
READ_BACK_RECORDS = 10_000
READ_BACK_TIMEOUT_S = 30.0
# One attempt to write a batch of letters waits this long for the broker's acks; then it is retried,
# a little later each time up to RETRY_MAX_S (the ingest actor waits meanwhile, its batch not delivered).
WRITE_TIMEOUT_S = 30.0
RETRY_MAX_S = 2.0
# A write not acknowledged within this long is reported (the ingest actor's status: disconnected).
STALLED_S = 2.0


class DeadLetter(NamedTuple):
    partition: str
    offset: int
    reason: str
    record: bytes
    event_index: int = 0  # the event's place in its message (a Kafka message may pack several)

    @property
    def key(self) -> tuple[int, int]:
        """Its place in its partition: unique, and the order its partition's letters are written in."""
        return (self.offset, self.event_index)


class _Written:
    """The newest key a sink holds per partition, read back once, and what a write may skip."""

    def __init__(self, starts: dict[str, int]) -> None:
        self.starts = dict(starts)
        self.newest: dict[str, tuple[int, int]] | None = None

    def read_back(self, entries: Iterable[tuple[str, int, int]]) -> dict[str, tuple[int, int]]:
        """``entries``: (partition, offset, index) from the newest letter back; stops once every
        partition met a letter below its start offset (nothing before it can be replayed)."""
        newest: dict[str, tuple[int, int]] = {}
        open_ = set(self.starts)
        if not open_:
            return newest
        for p, offset, index in entries:
            if p not in open_:
                continue
            newest[p] = max(newest.get(p, (-1, -1)), (offset, index))
            if offset < self.starts[p]:
                open_.discard(p)
                if not open_:
                    break
        return newest

    def fresh(self, letters: list[DeadLetter]) -> list[DeadLetter]:
        assert self.newest is not None
        if not self.newest:
            return letters
        out = [d for d in letters if d.key > self.newest.get(d.partition, (-1, -1))]
        if len(out) < len(letters):
            log.info("%d dead letters of replayed records are already in the sink; not written again", len(letters) - len(out))
        return out


class FileDeadLetterSink:
    # A file write either succeeds or raises (the ingest actor stops): it never waits in a retry.
    error: str | None = None

    def __init__(self, path: str, starts: dict[str, int] | None = None) -> None:
        self.path = path
        self._written = _Written(starts or {})
        makedirs_durably(os.path.dirname(os.path.abspath(path)))

    def _backwards(self) -> Iterator[tuple[str, int, int]]:
        """(partition, offset, index) of the file's letters, newest first, read in chunks from the end."""
        if not os.path.exists(self.path):
            return
        with open(self.path, "rb") as fh:
            end = fh.seek(0, os.SEEK_END)
            tail = b""
            while end > 0:
                start = max(0, end - READ_BACK_BYTES)
                fh.seek(start)
                chunk = fh.read(end - start) + tail
                end = start
                lines = chunk.split(b"\n")
                tail = lines.pop(0) if start > 0 else b""  # maybe the end of a line that starts before
                for line in reversed(lines):
                    if line.strip():
                        try:
                            d = orjson.loads(line)
                            yield str(d["partition"]), int(d["offset"]), int(d.get("index", 0))
                        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                            continue  # a torn line of a crash mid-write: it was never acknowledged

    def write(self, letters: list[DeadLetter]) -> None:
        if not letters:
            return
        if self._written.newest is None:
            self._written.newest = self._written.read_back(self._backwards())
        letters = self._written.fresh(letters)
        if not letters:
            return
        now = dt.datetime.now(dt.timezone.utc).isoformat()
        lines = b"".join(
            orjson.dumps(
                {
                    "partition": d.partition,
                    "offset": d.offset,
                    "index": d.event_index,
                    "reason": d.reason,
                    "record": d.record.decode("utf-8", "replace")[:MAX_RECORD_CHARS],
                    "at": now,
                }
            )
            + b"\n"
            for d in letters
        )
        append_durably(self.path, lines)


class KafkaDeadLetterSink:
    """Produces each dead letter to ``<topic>.dlq``, keyed by its partition, the reason in a header.

    ``write`` returns only once the broker has acknowledged every letter; while the
    broker is away it retries (the ingest actor waits: its batch is not delivered yet),
    and :attr:`error` says why, for the actor's status: the consumer is not polled
    meanwhile, so only the sink knows the broker is away. A retry first reads back
    what the failed attempt got through, so it too writes each letter once.
    """

    def __init__(self, bootstrap: str, topic: str, stop=None, starts: dict[str, int] | None = None,
                 config: KafkaConfig | None = None) -> None:
        self.bootstrap = bootstrap
        self.config = config  # how to reach the cluster (--kafka-config)
        self.topic = f"{topic}.dlq"
        self._producer = None
        self._stop = stop
        self._written = _Written(starts or {})
        self._max_value = MAX_KAFKA_VALUE_BYTES
        self._failed: str | None = None  # why the write under way is being retried
        self.fault: str | None = None  # the broker refused the write (the operator's action), not an outage
        self._since: float | None = None  # when the write under way started

    @property
    def error(self) -> str | None:
        """Why the write under way is not through: its last attempt failed, or the broker has not
        acknowledged it within STALLED_S (an outage: the producer waits in ``flush``)."""
        if self._failed is not None:
            return self._failed
        if self._since is not None and time.monotonic() - self._since > STALLED_S:
            return f"dead letters to {self.topic}: not acknowledged for {time.monotonic() - self._since:.0f} s"
        return None

    def _ensure(self):
        if self._producer is None:
            from kafka import KafkaProducer
            from kafka.admin import KafkaAdminClient, NewTopic
            from kafka.errors import TopicAlreadyExistsError

            admin = KafkaAdminClient(**kafka_python_config(self.bootstrap, self.config))
            try:
                admin.create_topics([NewTopic(self.topic, 1, 1)])
            except TopicAlreadyExistsError:
                pass
            finally:
                admin.close()
            self._producer = KafkaProducer(**kafka_python_config(self.bootstrap, self.config, acks="all"))
        return self._producer

    def _backwards(self) -> Iterator[tuple[str, int, int]]:
        """(partition, offset, index) from the headers of the topic's letters, newest first, a window at a time."""
        from kafka import KafkaConsumer, TopicPartition
        from kafka.errors import KafkaTimeoutError

        tp = TopicPartition(self.topic, 0)
        consumer = KafkaConsumer(**kafka_python_config(self.bootstrap, self.config, enable_auto_commit=False))
        try:
            consumer.assign([tp])
            begin, end = consumer.beginning_offsets([tp])[tp], consumer.end_offsets([tp])[tp]
            while end > begin:
                start = max(begin, end - READ_BACK_RECORDS)
                consumer.seek(tp, start)
                window: list[tuple[str, int, int]] = []
                deadline = time.monotonic() + READ_BACK_TIMEOUT_S
                while consumer.position(tp) < end:
                    if time.monotonic() > deadline:
                        raise KafkaTimeoutError(f"reading {self.topic} back took over {READ_BACK_TIMEOUT_S:.0f} s")
                    for r in consumer.poll(timeout_ms=1000).get(tp, []):
                        if r.offset < end:
                            h = dict(r.headers or [])  # kafka-python: [(str key, bytes value)]
                            if "partition" in h and "offset" in h:
                                window.append((h["partition"].decode(), int(h["offset"]), int(h.get("index", b"0"))))
                yield from reversed(window)
                end = start
        finally:
            consumer.close()

    def _value(self, d: DeadLetter) -> tuple[bytes, list[tuple[str, bytes]]]:
        headers = [
            ("reason", d.reason.encode()),
            ("partition", d.partition.encode()),
            ("offset", str(d.offset).encode()),
            ("index", str(d.event_index).encode()),
        ]
        if len(d.record) <= self._max_value:
            return d.record, headers
        return d.record[: self._max_value], [*headers, ("original_size", str(len(d.record)).encode())]

    def write(self, letters: list[DeadLetter]) -> None:
        if not letters:
            return
        from kafka.errors import KafkaError, MessageSizeTooLargeError

        delay = 0.5
        self._since = time.monotonic()
        while True:
            attempt = time.monotonic()
            try:
                producer = self._ensure()
                if self._written.newest is None:
                    self._written.newest = self._written.read_back(self._backwards())
                todo = self._written.fresh(letters)
                futures = []
                for d in todo:
                    value, headers = self._value(d)
                    futures.append(producer.send(self.topic, key=d.partition.encode(), value=value, headers=headers))
                producer.flush(timeout=WRITE_TIMEOUT_S)
                for f in futures:
                    f.get(timeout=WRITE_TIMEOUT_S)
                if todo:
                    self._written.newest.update({d.partition: max(self._written.newest.get(d.partition, (-1, -1)), d.key) for d in todo})
                self._failed = self._since = self.fault = None
                return
            except MessageSizeTooLargeError:
                # This topic takes less than our cut: cut harder (never a retry of the same size).
                if self._max_value <= MIN_KAFKA_VALUE_BYTES:
                    raise
                self._max_value = max(MIN_KAFKA_VALUE_BYTES, self._max_value // 8)
                log.warning("%s refuses dead letters of this size; cutting them to %d bytes", self.topic, self._max_value)
                self._written.newest = None
            except KafkaError as exc:
                if self._stop is not None and self._stop.is_set():
                    raise
                # A refusal (credentials, certificates, ACLs on the .dlq topic) says what to do; an outage is retried.
                self.fault = diagnose(exc, self.bootstrap, self.config, self.topic, since=attempt)
                self._failed = self.fault or f"dead letters to {self.topic}: {type(exc).__name__}: {exc}"
                if delay == 0.5:  # once per outage, not once per retry
                    log.warning("could not write %d dead letters to %s (%s); retrying until the broker takes them",
                                len(letters), self.topic, exc)
                # What the failed attempt got through is read back first, and what it left in the producer must not
                # land after that: the producer's own retries (kafka-python's, for up to its delivery timeout) would
                # write those letters a second time. A new producer, then, and the old one closed without waiting.
                self._producer, old = None, self._producer
                if old is not None:
                    old.close(timeout=0)
                time.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
                self._written.newest = None

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
