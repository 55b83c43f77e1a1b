"""The Avro, JSON Schema and Protobuf decoders against records framed by confluent-kafka's own serializers (no broker).

Each record must reach the transform as the JSON of the object the deserializer gives, whichever path
reads it: a schema of its own is read by fastavro or jsonschema-rs directly, a schema with references
by the deserializer's full path (see RegistryDecoder._reader_of); a Protobuf message of plain fields
is converted as Protobuf's JSON mapping converts it (_plain_dict)."""

from __future__ import annotations

import json
import random

import orjson
import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, json_format
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.message_factory import GetMessageClass

from pulsegraph.base.errors import PulsegraphError
from pulsegraph.ingest.decode import RegistryDecoder, RegistrySpec, _plain_dict, registry_client_conf
from pulsegraph.ingest.sources.kafka_config import parse_properties
from pulsegraph.settings import Settings
from tests.pulsegraph.test_cli import free_port
from tests.registry import AUTH, JSON_SCHEMA, JSON_SCHEMA_ID, SCHEMA, SCHEMA_ID, Registry, framed

TOPIC = "tweets"
CTX = SerializationContext(TOPIC, MessageField.VALUE)
TWEETS = [{"user": "u1", "mentions": ["u2", "u3"], "hashtags": ["t"], "text": "x", "ts": 1.5},
          {"user": "u4", "mentions": [], "hashtags": [], "text": "", "ts": 0.0}]


@pytest.fixture
def registry():
    server = Registry(free_port())
    yield server
    server.shutdown()


def client(registry: Registry) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": f"http://127.0.0.1:{registry.server_port}", "basic.auth.user.info": AUTH})


def decoder(registry: Registry, fmt: str) -> RegistryDecoder:
    config = parse_properties(f"basic.auth.user.info={AUTH}\n", "registry.properties")
    return RegistryDecoder(RegistrySpec(fmt, f"http://127.0.0.1:{registry.server_port}", config), TOPIC)


def test_avro_records_read_as_the_deserializer_reads_them_across_a_schema_change(registry):
    evolved = {**SCHEMA, "fields": [*SCHEMA["fields"], {"name": "lang", "type": "string", "default": "en"},
                                    {"name": "place", "type": ["null", {"type": "record", "name": "Place",
                                                                        "fields": [{"name": "name", "type": "string"}]}],
                                     "default": None}]}
    old, new = AvroSerializer(client(registry), json.dumps(SCHEMA)), AvroSerializer(client(registry), json.dumps(evolved))
    records = [old(t, CTX) for t in TWEETS] + [new({**t, "lang": "fr", "place": {"name": "p"}}, CTX) for t in TWEETS]
    assert len({r[1:5] for r in records}) == 2, "the evolved schema has an id of its own"
    dec, reference = decoder(registry, "avro"), AvroDeserializer(client(registry))
    for raw in records:
        got, reason = dec.decode(raw)
        assert reason is None and orjson.loads(got) == reference(raw, CTX)
    assert orjson.loads(dec.decode(records[2])[0])["place"] == {"name": "p"}
    got, reason = dec.decode(framed(SCHEMA_ID, b"\x02"))
    assert got is None and reason.startswith(f"undecodable with schema id {SCHEMA_ID} (avro): ")


def test_an_avro_schema_with_references_is_read_by_the_deserializer(registry):
    place = {"type": "record", "name": "Place", "namespace": "geo", "fields": [{"name": "name", "type": "string"}]}
    c = client(registry)
    c.register_schema("place-value", Schema(json.dumps(place), "AVRO"))
    tweet = {"type": "record", "name": "Tweet", "fields": [{"name": "user", "type": "string"}, {"name": "place", "type": "geo.Place"}]}
    schema = Schema(json.dumps(tweet), "AVRO", [SchemaReference("geo.Place", "place-value", 1)])
    raw = AvroSerializer(c, schema, conf={"auto.register.schemas": True})({"user": "u1", "place": {"name": "p"}}, CTX)
    dec = decoder(registry, "avro")
    got, reason = dec.decode(raw)
    assert reason is None and orjson.loads(got) == {"user": "u1", "place": {"name": "p"}}
    assert dec._readers[int.from_bytes(raw[1:5], "big")] == dec._deserialized  # which path read it


def test_json_schema_records_pass_as_they_are_and_invalid_ones_name_the_schema_id(registry):
    serializer = JSONSerializer(json.dumps(JSON_SCHEMA), client(registry))
    dec = decoder(registry, "jsonschema")
    for t in TWEETS:
        raw = serializer(t, CTX)
        got, reason = dec.decode(raw)
        assert reason is None and got == raw[5:] and orjson.loads(got) == t
    for payload in (b'{"user": 5, "ts": 1.0}', b'{"ts": 1.0}', b"{not json"):
        got, reason = dec.decode(framed(JSON_SCHEMA_ID, payload))
        assert got is None and reason.startswith(f"undecodable with schema id {JSON_SCHEMA_ID} (jsonschema): "), reason


def test_json_schema_formats_are_not_asserted_as_the_deserializer_does_not_assert_them(registry):
    schema = {"type": "object", "properties": {"user": {"type": "string", "format": "email"}}}
    raw = JSONSerializer(json.dumps(schema), client(registry), conf={"validate": False})({"user": "not an address"}, CTX)
    got, reason = decoder(registry, "jsonschema").decode(raw)
    assert reason is None and orjson.loads(got) == {"user": "not an address"}


def test_protobuf_messages_of_plain_fields_convert_as_the_json_mapping_converts_them():
    """_plain_dict against json_format.MessageToDict on random messages of every field kind it takes (and
    proto3 optional fields, nested and repeated messages); a message with a kind it does not take has none."""
    F = descriptor_pb2.FieldDescriptorProto
    f = descriptor_pb2.FileDescriptorProto(name="kinds.proto", package="k", syntax="proto3")
    inner = f.message_type.add(name="Inner")
    inner.field.add(name="label", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    inner.field.add(name="big", number=2, type=F.TYPE_UINT64, label=F.LABEL_REPEATED)
    outer = f.message_type.add(name="Outer")
    kinds = [F.TYPE_STRING, F.TYPE_BOOL, F.TYPE_INT32, F.TYPE_SINT32, F.TYPE_SFIXED32, F.TYPE_UINT32, F.TYPE_FIXED32,
             F.TYPE_INT64, F.TYPE_SINT64, F.TYPE_SFIXED64, F.TYPE_UINT64, F.TYPE_FIXED64, F.TYPE_DOUBLE]
    for i, kind in enumerate(kinds):
        outer.field.add(name=f"s{i}", number=3 * i + 1, type=kind, label=F.LABEL_OPTIONAL)
        outer.field.add(name=f"r{i}", number=3 * i + 2, type=kind, label=F.LABEL_REPEATED)
        outer.field.add(name=f"o{i}", number=3 * i + 3, type=kind, label=F.LABEL_OPTIONAL, proto3_optional=True,
                        oneof_index=len(outer.oneof_decl))
        outer.oneof_decl.add(name=f"_o{i}")
    outer.field.add(name="one", number=100, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL, type_name=".k.Inner")
    outer.field.add(name="many", number=101, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED, type_name=".k.Inner")
    with_enum = f.message_type.add(name="WithEnum")
    with_enum.field.add(name="e", number=1, type=F.TYPE_ENUM, label=F.LABEL_OPTIONAL, type_name=".k.Color")
    f.enum_type.add(name="Color").value.add(name="RED", number=0)
    pool = DescriptorPool()
    pool.Add(f)
    cls = GetMessageClass(pool.FindMessageTypeByName("k.Outer"))
    as_dict = _plain_dict(cls.DESCRIPTOR)
    assert as_dict is not None and _plain_dict(pool.FindMessageTypeByName("k.WithEnum")) is None
    rng = random.Random(3)
    doubles = [0.0, -0.0, 1.5, -2.25e300, 5e-324, float("nan"), float("inf"), float("-inf")]

    def value(kind):
        if kind == F.TYPE_STRING:
            return rng.choice(["", "a", "ünï", "x" * 40])
        if kind == F.TYPE_BOOL:
            return rng.random() < 0.5
        if kind == F.TYPE_DOUBLE:
            return rng.choice(doubles)
        signed = kind in (F.TYPE_INT32, F.TYPE_SINT32, F.TYPE_SFIXED32, F.TYPE_INT64, F.TYPE_SINT64, F.TYPE_SFIXED64)
        bits = 32 if kind in (F.TYPE_INT32, F.TYPE_SINT32, F.TYPE_SFIXED32, F.TYPE_UINT32, F.TYPE_FIXED32) else 64
        return rng.randrange(-(2 ** (bits - 1)), 2 ** (bits - 1)) if signed else rng.randrange(2**bits)

    for _ in range(200):
        m = cls()
        for i, kind in enumerate(kinds):
            if rng.random() < 0.5:
                setattr(m, f"s{i}", value(kind))
            if rng.random() < 0.5:
                getattr(m, f"r{i}").extend(value(kind) for _ in range(rng.randrange(3)))
            if rng.random() < 0.3:
                setattr(m, f"o{i}", value(kind))
        if rng.random() < 0.5:
            m.one.label = value(F.TYPE_STRING)
        for _ in range(rng.randrange(3)):
            m.many.add(label=value(F.TYPE_STRING), big=[value(F.TYPE_UINT64)])
        parsed = cls.FromString(m.SerializeToString())
        want = json_format.MessageToDict(parsed, always_print_fields_with_no_presence=True, preserving_proto_field_name=True)
        # NaN is not equal to itself: compare the JSON texts
        assert orjson.dumps(as_dict(parsed), option=orjson.OPT_SORT_KEYS) == orjson.dumps(want, option=orjson.OPT_SORT_KEYS)


def test_the_registry_clients_numeric_properties_are_numbers_and_a_bad_one_is_named(tmp_path):
    """A properties file gives strings; the registry's client refuses a string where it takes a number."""
    good = parse_properties("basic.auth.user.info=a:b\nmax.retries=0\ntimeout=2.5\n", "registry.properties")
    conf = registry_client_conf("http://127.0.0.1:1", good)
    assert conf["max.retries"] == 0 and conf["timeout"] == 2.5 and conf["url"] == "http://127.0.0.1:1"
    SchemaRegistryClient(conf)
    path = tmp_path / "registry.properties"
    path.write_text("max.retries=three\n")
    with pytest.raises(PulsegraphError, match="registry.properties: max.retries is 'three', not a number"):
        Settings(source="kafka", bootstrap="127.0.0.1:9", topic="t", format="avro", schema_registry="http://127.0.0.1:1",
                 schema_registry_config=path)
