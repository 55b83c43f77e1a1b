"""The source contract: partitions that hand out numbered records.

A partition is an ordered log of records. The offset of a record is its
sequence number: the epoch vector says, per partition, the first offset *not*
included. A partition is opened at a start offset and resumes exactly there:
the first record it hands out has ``offset == start``. Sources are built inside
the ingest actor from a :class:`SourceSpec`, which is plain data and so travels
to any Ray node.
"""

from __future__ import annotations

import abc
import time
from dataclasses import dataclass, field
from typing import NamedTuple

from pulsegraph.ingest.exceptions import SourceError
from pulsegraph.ingest.sources.kafka_config import KafkaConfig


class Record(NamedTuple):
    offset: int
    value: bytes
    # The time the source stored with the record, in seconds (Kafka: the broker's timestamp); 0: none.
    # Stored with the record, so it is the same on every replay: a window may use it as event time.
    ts: float = 0.0


class SourcePartition(abc.ABC):
    """One partition of a source."""

    #: stable name, the key of this partition in every epoch vector
    name: str

    @abc.abstractmethod
    def next_batch(self, max_records: int) -> list[Record]:
        """Up to ``max_records`` records in offset order; empty when none is ready now. Never blocks long."""

    @abc.abstractmethod
    def position(self) -> int:
        """The first offset not yet handed out: where this partition resumes if reopened."""

    def exhausted(self) -> bool:
        """True when the partition will never hand out another record (a finite source at its end)."""
        return False

    def close(self) -> None:
        """Release files or connections. Idempotent."""

    def commit(self, offset: int) -> None:
        """Tell the source that everything below ``offset`` is durable (Kafka: the consumer group's
        offset, for lag monitoring; the checkpoint stays the truth). Most sources keep no such record."""

    def health(self) -> dict:
        """What the source knows of its own state, for /health: connected, error, lag and retention
        losses by partition. Sources without a remote end have nothing to say."""
        return {}


class RateLimiter:
    """A token bucket: at most ``rate`` records per second on average, bursts up to a tenth of a second.

    ``burst_profile`` scales the rate over time (a callable of seconds since start)
    so synthetic streams can be bursty while keeping their mean rate.
    """

    def __init__(self, rate: float | None, burst_profile=None, clock=time.monotonic) -> None:
        self.rate = rate
        self._profile = burst_profile
        self._clock = clock
        self._start = clock()
        self._last = self._start
        # A tenth of a second of tokens: enough to batch, small enough to stay smooth.
        self._capacity = max(1.0, (rate or 0) * 0.1)
        self._tokens = 0.0

    def take(self, wanted: int) -> int:
        if not self.rate:
            return wanted
        now = self._clock()
        scale = self._profile(now - self._start) if self._profile else 1.0
        self._tokens = min(self._capacity * max(scale, 1.0), self._tokens + (now - self._last) * self.rate * scale)
        self._last = now
        n = min(wanted, int(self._tokens))
        self._tokens -= n
        return n


@dataclass(frozen=True)
class SourceSpec:
    """What an ingest actor needs to open its partitions; plain data that pickles."""

    kind: str  # "synthetic" | "file" | "kafka"
    partitions: int = 1
    path: str | None = None
    rate: float | None = None
    limit: int | None = None
    seed: int = 7
    users: int = 20_000
    hashtags: int = 1_000
    # A JSONL file followed as one more partition, "events:0": where the API
    # appends the events POSTed to it when the source itself cannot take them.
    events_log: str | None = None
    bootstrap: str | None = None
    topic: str | None = None
    group: str = "pulsegraph"
    kafka_client: str = "confluent"  # "confluent" | "kafka-python": the library behind the kafka partitions
    # How the Kafka clients reach the cluster (--kafka-config), secrets included: it travels to the
    # actors inside this spec, in memory, never through an environment variable or a command line.
    kafka_config: KafkaConfig | None = None
    options: dict = field(default_factory=dict)

    def partition_names(self) -> list[str]:
        if self.kind == "synthetic":
            names = [f"synthetic:{i}" for i in range(self.partitions)]
        elif self.kind == "file":
            names = ["file:0"]
        elif self.kind == "kafka":
            names = [f"{self.topic}:{i}" for i in range(self.partitions)]
        else:
            raise SourceError(f"unknown source kind {self.kind!r}; expected synthetic, file or kafka")
        return names + (["events:0"] if self.events_log else [])
