"""Dead-letter sinks: where records that cannot become transactions go, with the reason.

Embedded mode writes a JSONL file: each line says where the record came from
(partition, offset, index of the event in its message), why it was refused,
and the record itself (as text, cut to :data:`MAX_RECORD_CHARS`), written with
one ``O_APPEND`` write per batch and fsynced. Kafka mode produces to
``<topic>.dlq`` with the reason and the position in headers. Either way the
write is durable before the ingest actor reports the batch as delivered, so no
refused record is lost.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import NamedTuple

import orjson

from ingest.eventlog import append_durably

# Keep a refused record whole enough to debug, but never let a huge garbage
# record blow up the sink.
MAX_RECORD_CHARS = 8192


class DeadLetter(NamedTuple):
    partition: str
    offset: int
    reason: str
    record: bytes
    event_index: int = 0  # the event's place in its message (a Kafka message may pack several)


class FileDeadLetterSink:
    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

    def write(self, letters: list[DeadLetter]) -> None:
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
    broker is away it retries (the ingest actor waits: its batch is not delivered yet).
    """

    def __init__(self, bootstrap: str, topic: str, stop=None) -> None:
        self.bootstrap = bootstrap
        self.topic = f"{topic}.dlq"
        self._producer = None
        self._stop = stop

    def _ensure(self):
        if self._producer is None:
            from kafka import KafkaProducer
            from kafka.admin import KafkaAdminClient, NewTopic
            from kafka.errors import TopicAlreadyExistsError

            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=5000)
            try:
                admin.create_topics([NewTopic(self.topic, 1, 1)])
            except TopicAlreadyExistsError:
                pass
            finally:
                admin.close()
            self._producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all", request_timeout_ms=5000)
        return self._producer

    def write(self, letters: list[DeadLetter]) -> None:
        if not letters:
            return
        import time

        from kafka.errors import KafkaError

        delay = 0.5
        while True:
            try:
                producer = self._ensure()
                futures = [
                    producer.send(
                        self.topic,
                        key=d.partition.encode(),
                        value=d.record,
                        headers=[
                            ("reason", d.reason.encode()),
                            ("partition", d.partition.encode()),
                            ("offset", str(d.offset).encode()),
                            ("index", str(d.event_index).encode()),
                        ],
                    )
                    for d in letters
                ]
                producer.flush()
                for f in futures:
                    f.get(timeout=10)
                return
            except KafkaError:
                if self._stop is not None and self._stop.is_set():
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 10.0)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
