"""What schema-registry records cost to read: JSON, Avro, JSON Schema and Protobuf side by side.

The same synthetic tweets are written in each ``--format`` the service reads, by the ecosystem's own
serializers (confluent-kafka's AvroSerializer, JSONSerializer and ProtobufSerializer, which register
their schemas with the registry), against tests/registry.py's registry on 127.0.0.1 (no real one is
installable here: see there). Then, per format:

1. ``stages`` (always; one core, no broker, no Ray): microseconds per event spent decoding (the
   ingest actor's :class:`~pulsegraph.ingest.decode.RegistryDecoder`: framing, the cached writer's
   schema, the payload, the JSON the transform reads) and in ``Transform.feed`` (the ``tweets``
   transform and the router), in rounds of 2,000 events per partition as the ingest actor reads them;
2. ``--pipeline``: the whole pipeline on a real broker (tools/kafka.sh), as ``bench.ingest`` measures
   capacity: ``--events`` pre-produced records per format on a 4-partition topic, drained by
   ``--ingest-actors`` x ``--shards`` at 1 s epochs, events sealed per second with results, the
   formats alternating ``--repeat`` times.

    .venv/bin/python -m bench.decode --events 200000
    .venv/bin/python -m bench.decode --events 1000000 --pipeline --repeat 2
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import orjson

from bench.ingest import broker, create_topic, drain
from bench.machine import describe as machine
from pulsegraph.ingest.decode import FORMATS, RegistryDecoder, RegistrySpec
from pulsegraph.ingest.sources import SourceSpec
from pulsegraph.ingest.sources.kafka_config import parse_properties
from pulsegraph.ingest.sources.synthetic import SyntheticPartition
from tests.registry import AUTH, JSON_SCHEMA, SCHEMA, Registry

PARTITIONS = 4
ROUND = 2000  # events per partition and round, as the ingest actor reads them at its default batch size


def tweets(n: int) -> list[dict[str, list[bytes]]]:
    """``n`` synthetic tweets over PARTITIONS partitions, as the JSON the synthetic source writes."""
    spec = SourceSpec(kind="synthetic", partitions=PARTITIONS, limit=n)
    per = -(-n // PARTITIONS)
    return [{f"t:{p}": [r.value for r in SyntheticPartition(spec, p, 0).next_batch(per)]} for p in range(PARTITIONS)]


class Encoder:
    """Tweets (JSON bytes) -> records of one format, framed by confluent-kafka's serializer for it."""

    def __init__(self, fmt: str, registry_url: str, topic: str) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.serialization import MessageField, SerializationContext

        self.fmt, self.ctx = fmt, SerializationContext(topic, MessageField.VALUE)
        client = SchemaRegistryClient({"url": registry_url, "basic.auth.user.info": AUTH})
        if fmt == "avro":
            from confluent_kafka.schema_registry.avro import AvroSerializer

            self.serializer = AvroSerializer(client, json.dumps(SCHEMA))
        elif fmt == "jsonschema":
            from confluent_kafka.schema_registry.json_schema import JSONSerializer

            self.serializer = JSONSerializer(json.dumps(JSON_SCHEMA), client)
        elif fmt == "protobuf":
            from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
            from google.protobuf.descriptor_pool import DescriptorPool
            from google.protobuf.message_factory import GetMessageClass

            from tests.ingest.test_protobuf import tweet_file

            pool = DescriptorPool()
            pool.Add(tweet_file())
            self.cls = GetMessageClass(pool.FindMessageTypeByName("pulsegraph.test.Tweet"))
            self.serializer = ProtobufSerializer(self.cls, client, {"use.deprecated.format": False})

    def __call__(self, raw: bytes) -> bytes:
        if self.fmt == "json":
            return raw
        tweet = orjson.loads(raw)
        out = self.serializer(self.cls(**tweet) if self.fmt == "protobuf" else tweet, self.ctx)
        assert out is not None
        return out


def registry_config(folder: Path) -> Path:
    """The --schema-registry-config file an operator would write for this registry's basic auth."""
    path = folder / "registry.properties"
    path.write_text(f"basic.auth.user.info={AUTH}\n")
    path.chmod(0o600)
    return path


def stages(fmt: str, records: dict[str, list[bytes]], registry_url: str, config: Path, topic: str) -> dict[str, float]:
    """Microseconds per event decoding and transforming ``records`` of ``fmt`` on one core."""
    from pulsegraph.base.runtime import tune_gc
    from pulsegraph.ingest.batch import Router
    from pulsegraph.ingest.transforms import Event, get_transform

    decoder = None
    if fmt != "json":
        spec = RegistrySpec(fmt, registry_url, parse_properties(config.read_text(), str(config)))
        decoder = RegistryDecoder(spec, topic)
    transform, router = get_transform("tweets"), Router(4)
    tune_gc()
    spent = {"decode": 0.0, "transform": 0.0}
    n = sum(map(len, records.values()))
    longest = max(map(len, records.values()))
    for start in range(0, longest, ROUND):
        for name, recs in records.items():
            t0 = time.perf_counter()
            events = []
            for i, raw in enumerate(recs[start : start + ROUND], start):
                value, reason = decoder.decode(raw) if decoder is not None else (raw, None)
                assert value is not None, reason
                events.append(Event(i, 0, value))
            t1 = time.perf_counter()
            assert not transform.feed(router, name, events)
            spent["decode"] += t1 - t0
            spent["transform"] += time.perf_counter() - t1
        router.take()
    return {key: v / n * 1e6 for key, v in spent.items()}


def produce(bootstrap: str, topic: str, records: dict[str, list[bytes]]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=1 << 20, acks="all")
    for p, name in enumerate(sorted(records)):
        for raw in records[name]:
            producer.send(topic, raw, partition=p)
    producer.flush()
    producer.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=200_000, help="synthetic tweets per format")
    ap.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    ap.add_argument("--pipeline", action="store_true", help="also drain each format through the whole pipeline on a broker")
    ap.add_argument("--bootstrap", help="an existing broker for --pipeline (default: start one with tools/kafka.sh)")
    ap.add_argument("--ingest-actors", type=int, default=2)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=1, help="pipeline drains per format, the formats alternating")
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    from tests.pulsegraph.test_cli import free_port

    registry = Registry(free_port())
    url = f"http://127.0.0.1:{registry.server_port}"
    folder = Path(tempfile.mkdtemp(prefix="pg-bench-decode-"))
    config = registry_config(folder)
    stamp = int(time.time())
    parts = {}
    for p in tweets(args.events):
        parts.update(p)
    encoded: dict[str, dict[str, list[bytes]]] = {}
    for fmt in args.formats:
        topic = f"bench-{fmt}-{stamp}"
        enc = Encoder(fmt, url, topic)
        encoded[fmt] = {name: [enc(raw) for raw in recs] for name, recs in parts.items()}
        print(f"  encoded {args.events:,} tweets as {fmt}", file=sys.stderr)
    cost = {fmt: stages(fmt, encoded[fmt], url, config, f"bench-{fmt}-{stamp}") for fmt in args.formats}
    caps: dict[str, list[dict]] = {fmt: [] for fmt in args.formats}
    if args.pipeline:
        with broker(args.bootstrap) as bootstrap:
            for fmt in args.formats:
                create_topic(bootstrap, f"bench-{fmt}-{stamp}", PARTITIONS)
                produce(bootstrap, f"bench-{fmt}-{stamp}", encoded[fmt])
            for _ in range(args.repeat):
                for fmt in args.formats:
                    extra = {"format": fmt, "schema_registry": url, "schema_registry_config": config} if fmt != "json" else {}
                    caps[fmt].append(drain(args, bootstrap, f"bench-{fmt}-{stamp}", "confluent", **extra))
                    print(f"  {fmt}: {caps[fmt][-1]}", file=sys.stderr)
    registry.shutdown()
    size = {fmt: sum(map(len, (r for recs in encoded[fmt].values() for r in recs))) / args.events for fmt in args.formats}
    print(f"machine: {machine()}")
    print(f"{args.events:,} synthetic tweets per format; decode and transform on one core, rounds of {ROUND:,} per partition"
          + (f"; pipeline: {args.ingest_actors} ingest actors, {args.shards} shards, 1 s epochs, confluent client" if args.pipeline else ""))
    print("| format | bytes/record | decode µs/event | transform µs/event | events/s, one core | vs JSON |"
          + (" pipeline events/s |" if args.pipeline else ""))
    print("|---|---|---|---|---|---|" + ("---|" if args.pipeline else ""))
    base = sum(cost[args.formats[0]].values())
    for fmt in args.formats:
        total = sum(cost[fmt].values())
        row = (f"| {fmt} | {size[fmt]:.0f} | {cost[fmt]['decode']:.2f} | {cost[fmt]['transform']:.2f} | {1e6 / total:,.0f} "
               f"| {base / total:.2f}x |")
        if args.pipeline:
            row += " " + " / ".join(f"{c['events_per_s']:,.0f}" if c["epochs"] >= 3 else f"n/a ({c['epochs']} epochs)"
                                    for c in caps[fmt]) + " |"
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
