"""Schema-registry records (--format avro, jsonschema) through the real pipeline, with a registry that goes away.

The registry is tests/registry.py's small HTTP server (why no real one runs here: see there). The
Avro records are framed and encoded here with fastavro, not with the deserializer's own library code.
"""

from __future__ import annotations

import io
import json
import random
import time

import fastavro
import ray
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from pulsegraph.topology import Pipeline
from tests.graphref import reference, without_attrs
from tests.ingest.test_kafka import consume_all, end_vector, kafka_settings
from tests.pulsegraph.test_cli import free_port
from tests.registry import AUTH, JSON_SCHEMA_ID, SCHEMA, SCHEMA_ID, Registry, framed


def assert_dead_letters(bootstrap: str, topic: str, bad: dict[bytes, str]) -> None:
    """Exactly the ``bad`` records are in the topic's dead-letter topic, each with a reason that says what ``bad`` says."""
    letters = consume_all(bootstrap, f"{topic}.dlq", with_headers=True)
    reasons = {v: h["reason"].decode() for recs in letters.values() for _, v, h in recs}
    assert set(reasons) == set(bad)
    for raw, says in bad.items():
        assert says in reasons[raw], reasons[raw]


def avro(tweet: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(SCHEMA), tweet)
    return framed(SCHEMA_ID, out.getvalue())


def test_avro_records_decode_to_the_reference_graph_bad_ones_are_dead_letters_and_an_absent_registry_is_backpressure(
        ray_cluster, kafka_broker, tmp_path):
    topic = kafka_broker.topic()
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    admin.create_topics([NewTopic(topic, 2, 1)])
    admin.close()
    rng = random.Random(4)
    tweets = [{"user": f"u{rng.randrange(80)}", "mentions": [f"u{rng.randrange(80)}"], "hashtags": [f"t{rng.randrange(9)}"],
               "text": "x", "ts": float(i)} for i in range(1500)]
    bad = {b'{"user": "json, not avro"}': "no magic byte 0", framed(999, b"\x02u1"): "schema id 999 is unknown",
           framed(SCHEMA_ID, b"\x02"): f"undecodable with schema id {SCHEMA_ID}"}
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    for i, t in enumerate(tweets):
        producer.send(topic, value=avro(t), partition=i % 2)
    for raw in bad:
        producer.send(topic, value=raw, partition=1)
    producer.flush()
    producer.close()
    records = consume_all(kafka_broker.bootstrap, topic)
    vector = end_vector(records)
    as_json = {t["ts"]: json.dumps(t).encode() for t in tweets}
    want = reference({p: [(o, as_json[fastavro.schemaless_reader(io.BytesIO(v[5:]), SCHEMA)["ts"]]) for o, v in recs
                          if v.startswith(framed(SCHEMA_ID, b"")) and len(v) > 6] for p, recs in records.items()}, vector, "tweets")
    conf = tmp_path / "registry.properties"
    conf.write_text(f"basic.auth.user.info={AUTH}\n")
    port = free_port()
    s = kafka_settings(tmp_path, kafka_broker, topic, format="avro", schema_registry=f"http://127.0.0.1:{port}",
                       schema_registry_config=conf, ingest_actors=1)
    assert "Kq3-registry-secret-9" not in repr(s.registry())
    p = Pipeline(s).start()
    registry = None
    try:
        deadline = time.monotonic() + 60  # the registry is not there yet: reading waits, nothing is dead-lettered
        while time.monotonic() < deadline and "schema registry" not in str(p.status().get("error")):
            time.sleep(0.2)
        waiting = p.status()
        assert waiting["status"] == "degraded" and "unavailable" in waiting["error"], waiting
        assert waiting["dead_letters"] == 0 and not waiting["epoch_vector"].get(f"{topic}:0"), waiting
        registry = Registry(port)
        view = p.wait_for_epoch(lambda v: v.result.vector == vector, timeout=120)
        assert ray.get(p.compute.snapshot.remote()) == without_attrs(want)
        assert view.result.records == len(tweets)  # the dead letters are not transactions
        deadline = time.monotonic() + 30
        # The status is the supervisor's poll, once a second: the round that wrote the letters may be newer.
        while time.monotonic() < deadline and (p.status().get("ingest") != "running" or p.status()["dead_letters"] < len(bad)):
            time.sleep(0.2)
        assert p.status()["dead_letters"] == len(bad) and p.status()["status"] == "ok", p.status()
    finally:
        p.stop()
        if registry is not None:
            registry.shutdown()
    assert_dead_letters(kafka_broker.bootstrap, topic, bad)
    assert len([a for a in registry.asked if "/schemas/ids/7" in a]) <= 3  # cached: one answer per schema id and actor


def test_json_schema_records_decode_to_the_reference_graph_and_invalid_ones_are_dead_letters(ray_cluster, kafka_broker, tmp_path):
    topic = kafka_broker.topic()
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()
    rng = random.Random(6)
    tweets = [json.dumps({"user": f"u{rng.randrange(50)}", "mentions": [f"u{rng.randrange(50)}"], "hashtags": ["t1"], "text": "x",
                          "ts": float(i)}).encode() for i in range(600)]
    bad = {framed(JSON_SCHEMA_ID, b'{"user": 5, "ts": 1.0}'): f"undecodable with schema id {JSON_SCHEMA_ID}",
           framed(JSON_SCHEMA_ID, b"{not json"): f"undecodable with schema id {JSON_SCHEMA_ID}"}
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    for t in tweets:
        producer.send(topic, value=framed(JSON_SCHEMA_ID, t), partition=0)
    for raw in bad:
        producer.send(topic, value=raw, partition=0)
    producer.flush()
    producer.close()
    vector = {f"{topic}:0": len(tweets) + len(bad)}
    conf = tmp_path / "registry.properties"
    conf.write_text(f"basic.auth.user.info={AUTH}\n")
    registry = Registry(free_port())
    s = kafka_settings(tmp_path, kafka_broker, topic, format="jsonschema", schema_registry=f"http://127.0.0.1:{registry.server_port}",
                       schema_registry_config=conf, ingest_actors=1)
    p = Pipeline(s).start()
    try:
        p.wait_for_epoch(lambda v: v.result.vector == vector, timeout=120)
        assert ray.get(p.compute.snapshot.remote()) == without_attrs(reference({f"{topic}:0": list(enumerate(tweets))}, vector, "tweets"))
    finally:
        p.stop()
        registry.shutdown()
    assert_dead_letters(kafka_broker.bootstrap, topic, bad)
