"""Protobuf records (--format protobuf): the decoder alone against the test's registry, then the real pipeline.

The records are made as a producer makes them: message classes built from FileDescriptorProtos
written here (no protoc, no generated module), serialized and framed by confluent-kafka's own
ProtobufSerializer, which registers their schemas (and the file one imports, as a reference) with
the registry server of test_schema_registry.py. The decoder under test has none of these classes.
"""

from __future__ import annotations

import json
import random
import time

import pytest
import ray
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.message_factory import GetMessageClass
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from pulsegraph.ingest.decode import RegistryDecoder, RegistrySpec, RegistryUnavailable
from pulsegraph.ingest.sources.kafka_config import parse_properties
from pulsegraph.topology import Pipeline
from tests.graphref import reference, without_attrs
from tests.ingest.test_kafka import kafka_settings
from tests.ingest.test_schema_registry import assert_dead_letters
from tests.pulsegraph.test_cli import free_port
from tests.registry import AUTH, SCHEMA_ID, Registry, framed

F = descriptor_pb2.FieldDescriptorProto
TWEET_FIELDS = [("user", F.TYPE_STRING, F.LABEL_OPTIONAL), ("mentions", F.TYPE_STRING, F.LABEL_REPEATED),
                ("hashtags", F.TYPE_STRING, F.LABEL_REPEATED), ("text", F.TYPE_STRING, F.LABEL_OPTIONAL),
                ("ts", F.TYPE_DOUBLE, F.LABEL_OPTIONAL)]


def place_file() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(name="place.proto", package="pulsegraph.test", syntax="proto3")
    f.message_type.add(name="Place").field.add(name="name", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    return f


def tweet_file(evolved: bool = False) -> descriptor_pb2.FileDescriptorProto:
    """The Tweet of the JSON records; evolved, it gains two fields, one of a type imported from place.proto (a
    reference), and comes second in its file (message indexes [1])."""
    f = descriptor_pb2.FileDescriptorProto(name="tweet.proto", package="pulsegraph.test", syntax="proto3")
    if evolved:
        f.dependency.append("place.proto")
        f.message_type.add(name="Edit").field.add(name="ts", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    tweet = f.message_type.add(name="Tweet")
    for number, (name, kind, label) in enumerate(TWEET_FIELDS, 1):
        tweet.field.add(name=name, number=number, type=kind, label=label)
    if evolved:
        tweet.field.add(name="lang", number=6, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
        tweet.field.add(name="place", number=7, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL, type_name=".pulsegraph.test.Place")
    return f


class Producer:
    """Tweets as dicts -> records framed by confluent-kafka's ProtobufSerializer (it registers the schemas)."""

    def __init__(self, registry: Registry, topic: str, evolved: bool = False) -> None:
        pool = DescriptorPool()
        for f in ([place_file()] if evolved else []) + [tweet_file(evolved)]:
            pool.Add(f)
        self.cls = GetMessageClass(pool.FindMessageTypeByName("pulsegraph.test.Tweet"))
        client = SchemaRegistryClient({"url": f"http://127.0.0.1:{registry.server_port}", "basic.auth.user.info": AUTH})
        self.serializer = ProtobufSerializer(self.cls, client)
        self.ctx = SerializationContext(topic, MessageField.VALUE)

    def __call__(self, tweet: dict) -> bytes:
        out = self.serializer(self.cls(**tweet), self.ctx)
        assert out is not None
        return out


def tweets(n: int, seed: int, evolved_from: int) -> list[dict]:
    """Tweets (ts 0.0 and no mentions among them: fields at their default); from ``evolved_from`` on with the
    evolved schema's fields."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        t = {"user": f"u{rng.randrange(80)}", "mentions": [f"u{rng.randrange(80)}"] if i % 7 else [],
             "hashtags": [f"t{rng.randrange(9)}"], "text": "x", "ts": float(i)}
        if i >= evolved_from:
            t |= {"lang": "en", "place": {"name": f"p{i % 3}"}}
        out.append(t)
    return out


def decoder(registry_port: int, topic: str, auth: str = AUTH) -> RegistryDecoder:
    # No retries of a 5xx by the registry's client (its default waits 1, 2, 4 s): the test asks what a failure is named.
    config = parse_properties(f"basic.auth.user.info={auth}\nmax.retries=0\n", "registry.properties")
    return RegistryDecoder(RegistrySpec("protobuf", f"http://127.0.0.1:{registry_port}", config), topic)


def test_the_protobuf_decoder_gives_the_dict_a_json_record_gives_and_names_the_schema_id_of_what_it_cannot_decode():
    registry = Registry(free_port())
    try:
        v1, v2 = Producer(registry, "t"), Producer(registry, "t", evolved=True)
        sample = tweets(20, 3, evolved_from=10)
        records = [v1(t) for t in sample[:10]] + [v2(t) for t in sample[10:]]
        id1, id2 = (int.from_bytes(r[1:5], "big") for r in (records[0], records[-1]))
        assert id1 != id2 and records[-1][5:7] == b"\x02\x02"  # a second schema id; one message index, 1, zigzag-encoded
        d = decoder(registry.server_port, "t")
        for t, raw in zip(sample, records):
            value, reason = d.decode(raw)
            assert reason is None and value is not None and json.loads(value) == t
        assert any(a.startswith("GET /subjects/place.proto/versions/1?") and "format=serialized" in a for a in registry.asked)

        payload = records[0][6:]
        gone = registry.register("gone", {"schema": registry.schemas[id2]["schema"], "schemaType": "PROTOBUF",
                                          "references": [{"name": "place.proto", "subject": "nowhere", "version": 1}]})
        garbage = registry.register("garbage", {"schema": "bm90IGEgZmlsZSBkZXNjcmlwdG9y", "schemaType": "PROTOBUF"})
        bad = {b'{"user": "json, not protobuf"}': "no magic byte 0",
               framed(999, b"\x00" + payload): "schema id 999 is unknown",
               framed(id1, b"\x00\xff\xff\xff"): f"undecodable with schema id {id1} (protobuf): DecodeError",
               framed(id1, b"\x02\x06" + payload): f"undecodable with schema id {id1} (protobuf): LookupError: message indexes [3]",
               framed(id2, b"\x04\x02\x00" + payload): f"undecodable with schema id {id2} (protobuf): LookupError",  # [1, 0]: no nested message
               framed(SCHEMA_ID, b"\x00" + payload): f"schema id {SCHEMA_ID} is AVRO, not PROTOBUF",
               framed(gone, b"\x00" + payload): f"schema id {gone} imports a schema the registry does not have",
               framed(garbage, b"\x00" + payload): f"schema id {garbage} does not build into Protobuf descriptors"}
        for raw, says in bad.items():
            value, reason = d.decode(raw)
            assert value is None and says in str(reason), reason

        with pytest.raises(RegistryUnavailable, match="HTTP 401"):
            decoder(registry.server_port, "t", auth="reader:wrong").decode(records[0])
        registry.status = 503
        with pytest.raises(RegistryUnavailable, match="HTTP 503"):
            d.decode(framed(999, b"\x00" + payload))
        registry.status = None
    finally:
        registry.shutdown()
        registry.server_close()
    assert d.decode(records[0])[0] is not None  # a schema id already known needs no registry
    with pytest.raises(RegistryUnavailable, match="unavailable"):
        d.decode(framed(999, b"\x00" + payload))


def test_protobuf_records_decode_to_the_reference_graph_across_a_schema_change_and_bad_ones_are_dead_letters(
        ray_cluster, kafka_broker, tmp_path):
    topic = kafka_broker.topic()
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    admin.create_topics([NewTopic(topic, 2, 1)])
    admin.close()
    registry = Registry(free_port())
    sample = tweets(1500, 4, evolved_from=800)  # the producer moves to the evolved schema mid-stream
    v1, v2 = Producer(registry, topic), Producer(registry, topic, evolved=True)
    records = [(v2 if t["ts"] >= 800 else v1)(t) for t in sample]
    id1 = int.from_bytes(records[0][1:5], "big")
    bad = {framed(4242, b"\x00" + records[0][6:]): "schema id 4242 is unknown",
           framed(id1, b"\x00\x0a\xff\xff"): f"undecodable with schema id {id1} (protobuf)"}
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    sent = [(i % 2, producer.send(topic, value=raw, partition=i % 2)) for i, raw in enumerate(records)]
    for raw in bad:
        producer.send(topic, value=raw, partition=1)
    producer.flush()
    producer.close()
    as_json: dict[str, list] = {f"{topic}:0": [], f"{topic}:1": []}
    for (p, future), t in zip(sent, sample):
        as_json[f"{topic}:{p}"].append((future.get().offset, json.dumps(t).encode()))
    vector = {f"{topic}:0": 750, f"{topic}:1": 750 + len(bad)}
    want = reference(as_json, vector, "tweets")
    conf = tmp_path / "registry.properties"
    conf.write_text(f"basic.auth.user.info={AUTH}\n")
    s = kafka_settings(tmp_path, kafka_broker, topic, format="protobuf", schema_registry=f"http://127.0.0.1:{registry.server_port}",
                       schema_registry_config=conf, ingest_actors=1)
    p = Pipeline(s).start()
    try:
        view = p.wait_for_epoch(lambda v: v.result.vector == vector, timeout=120)
        assert ray.get(p.compute.snapshot.remote()) == without_attrs(want)
        assert view.result.records == len(sample)
        deadline = time.monotonic() + 30
        # The status is the supervisor's last poll: none yet ({"ingest": "starting"}) when the actors were slow to answer it.
        while time.monotonic() < deadline and p.status().get("dead_letters", 0) < len(bad):
            time.sleep(0.2)
        assert p.status().get("dead_letters") == len(bad) and p.status()["status"] == "ok", p.status()
    finally:
        p.stop()
        registry.shutdown()
        registry.server_close()
    assert_dead_letters(kafka_broker.bootstrap, topic, bad)
    assert len([a for a in registry.asked if a.startswith(f"GET /schemas/ids/{id1}?")]) <= 3  # cached per schema id
