"""How every Kafka client of the service is made: one function per library, and the broker's topics.

Every consumer, producer and admin client the service opens (the source with both libraries, the
dead-letter producer, the results producer and its reader, the write path of POST /v1/events, the
topic description, ``pulsegraph produce``) takes its settings from :func:`kafka_python_config` or
:func:`librdkafka_config` here, so a setting the service needs everywhere is made once.

It also names what a client library's error means for an operator: a codec kafka-python has no
library for (:func:`codec_fault`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pulsegraph.ingest.sources.kafka_config import KafkaConfig

# A request to a dead broker fails after this long; kafka-python's default (305 s) would hide an outage.
REQUEST_TIMEOUT_MS = 5000
# The longest wait between a client's reconnect attempts: a broker back from an outage is fetched from
# within about this long. The libraries double their wait up to 30 s (kafka-python) or 10 s (librdkafka),
# which kept a 10 s outage costing 20-40 s; one attempt a second per client is nothing to a broker.
RECONNECT_BACKOFF_MAX_MS = 1000
# How long a kafka-python client's constructor waits for a first broker (its default is 30 s). A broker
# that refuses us (credentials, a certificate) is only named when this attempt ends, so it bounds how soon
# the operator learns of it; a TLS and SASL handshake with a remote cluster takes well under a second, and
# a failed attempt is retried with backoff (10 s cost the secure-broker test 2 attempts, 20 s, under load).
BOOTSTRAP_TIMEOUT_MS = 5000


def kafka_python_config(bootstrap: str, config: KafkaConfig | None = None, **extra: Any) -> dict[str, Any]:
    """The settings every kafka-python client of the service is made with (consumer, producer, admin):
    the cluster's (``config``, the --kafka-config file, mapped to kafka-python's names), then the
    service's own, then the call site's ``extra``."""
    return {
        **(config.kafka_python() if config is not None else {}),
        "bootstrap_servers": bootstrap,
        "request_timeout_ms": REQUEST_TIMEOUT_MS,
        "reconnect_backoff_max_ms": RECONNECT_BACKOFF_MAX_MS,
        "bootstrap_timeout_ms": BOOTSTRAP_TIMEOUT_MS,
        **extra,
    }


def librdkafka_config(bootstrap: str, config: KafkaConfig | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The settings every confluent-kafka (librdkafka) client of the service is made with: the
    cluster's (``config``, the --kafka-config file, in librdkafka's own names), then the call site's
    ``extra`` (what that client must be: a group, a transactional id, its timeouts)."""
    return {
        **(config.librdkafka() if config is not None else {}),
        "bootstrap.servers": bootstrap,
        "reconnect.backoff.max.ms": RECONNECT_BACKOFF_MAX_MS,
        **(extra or {}),
    }


# What to install for each codec kafka-python decompresses with a separate library (kafka/codec.py
# imports these; gzip is Python's own). They are the service's dependencies, so a missing one means an
# environment built without them.
CODEC_PACKAGES = {"snappy": "python-snappy", "lz4": "lz4", "zstd": "zstandard"}


def codec_fault(where: str, exc: BaseException) -> str:
    """The operator-facing reason kafka-python partitions stopped (``where``: which, and at what offset)
    on a record they cannot decompress."""
    m = re.search(r"for (\w+) compression codec", str(exc))
    codec = m.group(1) if m else "an unknown"
    package = CODEC_PACKAGES.get(codec)
    fix = (f"pip install {package} in the service's environment (it is a dependency of pulsegraph: "
           f"reinstall it), or run with --kafka-client confluent; then restart" if package else
           "run with --kafka-client confluent, whose librdkafka reads every codec Kafka has; then restart")
    return (f"{where}: its records are compressed with {codec}, which "
            f"kafka-python cannot decompress here ({exc}). The broker answers; nothing after this offset is read. "
            f"Operator action: {fix}")


@dataclass(frozen=True)
class TopicInfo:
    """What the broker says of a topic: its partitions, its id (a re-created topic has a new one) and
    each partition's log end (the high watermark)."""

    partitions: int
    topic_id: str | None
    ends: dict[int, int]


def describe_topic(bootstrap: str, topic: str, config: KafkaConfig | None = None) -> TopicInfo:
    """The broker's :class:`TopicInfo` of ``topic``. Raises SourceError if it does not exist, KafkaError if unreachable."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import TopicAuthorizationFailedError, UnknownTopicOrPartitionError

    from pulsegraph.ingest.exceptions import SourceError

    missing = SourceError(
        f"Kafka topic {topic!r} does not exist at {bootstrap}. "
        f"Operator action: create it (pulsegraph produce --partitions P creates it) or fix --topic."
    )
    admin = KafkaAdminClient(**kafka_python_config(bootstrap, config))
    try:
        [meta] = admin.describe_topics([topic])
    except UnknownTopicOrPartitionError:
        raise missing from None
    finally:
        admin.close()
    if meta.get("error_code") == TopicAuthorizationFailedError.errno:
        # Not "missing": the cluster's ACLs hide it from this principal (a fault the operator fixes, see kafka_faults).
        raise TopicAuthorizationFailedError(f"topic {topic!r}: topic authorization failed")
    if meta.get("error_code") or not meta.get("partitions"):
        raise missing
    numbers = sorted(int(p["partition_index"]) for p in meta["partitions"])
    consumer = KafkaConsumer(**kafka_python_config(bootstrap, config))
    try:
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in numbers])
    finally:
        consumer.close()
    topic_id = meta.get("topic_id")
    return TopicInfo(len(numbers), str(topic_id) if topic_id else None, {tp.partition: int(o) for tp, o in ends.items()})
