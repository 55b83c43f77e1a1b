"""``pulsegraph produce``: write events to a Kafka topic, for users and tests.

Events come from the synthetic tweet stream or a JSONL file. Each is keyed by
its source vertex (``user``, ``src`` or ``id``) and sent to the partition
Kafka's default partitioner picks for that key, so one vertex's updates keep
their order. With ``--events-per-message N`` the events bound for one
partition are packed N to a message (newline-delimited JSON). The topic is
created with ``--partitions P`` when it does not exist. A progress line shows
the rate, what was sent and the errors.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import msgspec

from pulsegraph.errors import ProduceError
from pulsegraph.ingest.exceptions import KafkaConfigError
from pulsegraph.ingest.sources import SourceSpec, open_partitions
from pulsegraph.ingest.sources.kafka_clients import kafka_python_config
from pulsegraph.ingest.sources.kafka_config import KafkaConfig, load_kafka_config

log = logging.getLogger(__name__)

_key_of = msgspec.json.Decoder(dict)
# How often the progress line is redrawn.
PROGRESS_S = 0.5


def event_key(raw: bytes) -> bytes | None:
    try:
        ev = _key_of.decode(raw)
    except msgspec.DecodeError:
        return None
    key = ev.get("user") or ev.get("src") or ev.get("id")
    return key.encode() if isinstance(key, str) else None


def ensure_topic(bootstrap: str, topic: str, partitions: int, timeout_s: float = 30.0, config: KafkaConfig | None = None) -> int:
    """Create ``topic`` when missing; returns its partition count.

    A topic that was just created can be described before its partitions
    reach the broker's metadata cache (an empty partition list); that is
    "not yet", so we poll until they show up rather than report zero.
    """
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    admin = KafkaAdminClient(**kafka_python_config(bootstrap, config))
    try:
        try:
            admin.create_topics([NewTopic(topic, partitions, 1)])
            log.info("created topic %s with %d partitions", topic, partitions)
        except TopicAlreadyExistsError:
            pass
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                n = len(admin.describe_topics([topic])[0]["partitions"])
            except KafkaError:
                n = 0
            if n > 0:
                return n
            if time.monotonic() > deadline:
                raise ProduceError(f"topic {topic!r} shows no partitions {timeout_s:.0f}s after creation")
            time.sleep(0.1)
    finally:
        admin.close()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers HOST:PORT")
    p.add_argument("--topic", required=True, help="topic to write to")
    p.add_argument("--kafka-config", default=None, metavar="FILE",
                   help="a properties file in librdkafka's names (what kcat -F takes): security.protocol, sasl.*, ssl.*")
    p.add_argument("--source", choices=["synthetic", "file"], default="synthetic", help="where events come from")
    p.add_argument("--path", help="the JSONL file of --source file")
    p.add_argument("--rate", type=float, default=0, help="events/s (0: as fast as the broker takes them)")
    p.add_argument("--limit", type=int, default=None, help="stop after this many events (synthetic: default 100000)")
    p.add_argument("--partitions", type=int, default=4, help="partitions of the topic when it has to be created")
    p.add_argument("--events-per-message", type=int, default=1, help="pack this many events into one message")
    p.add_argument("--seed", type=int, default=7, help="seed of the synthetic stream")
    p.add_argument("--users", type=int, default=20_000, help="users in the synthetic stream")
    p.add_argument("--hashtags", type=int, default=1_000, help="hashtags in the synthetic stream")
    p.add_argument("--quiet", action="store_true", help="no progress line")


def produce(args: argparse.Namespace) -> dict:
    from kafka import KafkaProducer
    from kafka.partitioner.default import murmur2

    config = None
    if getattr(args, "kafka_config", None):
        try:
            config = load_kafka_config(args.kafka_config)
        except KafkaConfigError as exc:
            raise ProduceError(str(exc)) from None
    n_parts = ensure_topic(args.bootstrap, args.topic, args.partitions, config=config)
    limit = args.limit if args.limit is not None or args.source == "file" else 100_000
    spec = SourceSpec(
        kind=args.source, partitions=1, path=args.path, rate=args.rate or None, limit=limit,
        seed=args.seed, users=args.users, hashtags=args.hashtags,
    )
    (source,) = open_partitions(spec, spec.partition_names()[:1], {})
    producer = KafkaProducer(**kafka_python_config(args.bootstrap, config, acks="all", linger_ms=5, batch_size=256 * 1024))
    all_parts = list(range(n_parts))
    pack = max(1, args.events_per_message)
    pending: dict[int, list[tuple[bytes | None, bytes]]] = {p: [] for p in all_parts}
    stats = {"sent": 0, "messages": 0, "errors": 0}
    t0 = last = time.monotonic()

    def on_error(_exc) -> None:
        stats["errors"] += 1

    def flush_partition(p: int) -> None:
        batch = pending[p]
        if batch:
            value = b"\n".join(v for _, v in batch)
            producer.send(args.topic, key=batch[0][0], value=value, partition=p).add_errback(on_error)
            stats["messages"] += 1
            pending[p] = []

    while True:
        records = source.next_batch(5000)
        if not records:
            if source.exhausted() or (args.source == "file" and limit is None):
                break
            time.sleep(0.005)
            continue
        for record in records:
            raw = record.value.rstrip(b"\r\n")
            key = event_key(raw)
            # Kafka's default partitioner (murmur2 of the key), so other producers of the same keys agree.
            p = (murmur2(key) & 0x7FFFFFFF) % n_parts if key is not None else stats["sent"] % n_parts
            pending[p].append((key, raw))
            stats["sent"] += 1
            if len(pending[p]) >= pack:
                flush_partition(p)
        now = time.monotonic()
        if not args.quiet and now - last >= PROGRESS_S:
            last = now
            rate = stats["sent"] / (now - t0)
            print(f"\rsent {stats['sent']:,}  {rate:,.0f} events/s  messages {stats['messages']:,}  errors {stats['errors']}",
                  end="", file=sys.stderr, flush=True)
    for p in all_parts:
        flush_partition(p)
    producer.flush()
    producer.close()
    elapsed = time.monotonic() - t0
    if not args.quiet:
        print(f"\rsent {stats['sent']:,} events in {stats['messages']:,} messages, {elapsed:.1f} s "
              f"({stats['sent'] / max(elapsed, 1e-9):,.0f} events/s), errors {stats['errors']}", file=sys.stderr)
    return {**stats, "seconds": elapsed}
