"""Schema-registry records (--format avro) through the real pipeline, with a registry that goes away.

The registry here is a small HTTP server in the test that serves the documented endpoints of
Confluent's Schema Registry API that readers and serializers call (GET /schemas/ids/{id}, GET
/subjects/{subject}/versions/{version}, and the POSTs that register and look up a schema), behind
basic auth: no real registry runs here (Apicurio Registry's artifacts on Maven Central are its
un-augmented Quarkus jars, with no runnable distribution; Confluent's is not on Maven Central). The
Avro records are framed and encoded here with fastavro, not with the deserializer's own library code.
"""

from __future__ import annotations

import base64
import io
import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import fastavro
import ray
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from pulsegraph.topology import Pipeline
from tests.graphref import reference
from tests.ingest.test_kafka import consume_all, end_vector, kafka_settings
from tests.pulsegraph.test_cli import free_port

SCHEMA = {"type": "record", "name": "Tweet", "fields": [
    {"name": "user", "type": "string"}, {"name": "mentions", "type": {"type": "array", "items": "string"}},
    {"name": "hashtags", "type": {"type": "array", "items": "string"}}, {"name": "text", "type": "string"},
    {"name": "ts", "type": "double"}]}
SCHEMA_ID = 7
JSON_SCHEMA = {"type": "object", "required": ["user", "ts"], "properties": {
    "user": {"type": "string"}, "mentions": {"type": "array", "items": {"type": "string"}},
    "hashtags": {"type": "array", "items": {"type": "string"}}, "text": {"type": "string"}, "ts": {"type": "number"}}}
JSON_SCHEMA_ID = 8
AUTH = "reader:" + "Kq3-registry-secret-9"



def assert_dead_letters(bootstrap: str, topic: str, bad: dict[bytes, str]) -> None:
    """Exactly the ``bad`` records are in the topic's dead-letter topic, each with a reason that says what ``bad`` says."""
    letters = consume_all(bootstrap, f"{topic}.dlq", with_headers=True)
    reasons = {v: h["reason"].decode() for recs in letters.values() for _, v, h in recs}
    assert set(reasons) == set(bad)
    for raw, says in bad.items():
        assert says in reasons[raw], reasons[raw]

class Registry(ThreadingHTTPServer):
    """The part of Confluent's Schema Registry API that serializers and deserializers call: schemas by id and by
    subject and version, registration and lookup (POST), behind basic auth. ``status`` set makes it answer that."""

    def __init__(self, port: int) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.asked: list[str] = []
        self.status: int | None = None
        self.lock = threading.Lock()
        self.schemas: dict[int, dict] = {SCHEMA_ID: {"schema": json.dumps(SCHEMA), "schemaType": "AVRO"},
                                         JSON_SCHEMA_ID: {"schema": json.dumps(JSON_SCHEMA), "schemaType": "JSON"}}
        self.subjects: dict[str, list[int]] = {}  # subject -> the schema id of each version
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def register(self, subject: str, body: dict) -> int:
        with self.lock:
            entry = {"schema": body["schema"], "schemaType": body.get("schemaType", "AVRO"), "references": body.get("references", [])}
            schema_id = next((i for i, e in self.schemas.items() if e == entry), None)
            if schema_id is None:  # a registry gives a schema it already has the same id, under any subject
                schema_id = max(self.schemas) + 1
                self.schemas[schema_id] = entry
            versions = self.subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
            return schema_id


class Handler(BaseHTTPRequestHandler):
    def _refused(self) -> bool:
        self.server.asked.append(self.command + " " + self.path)  # type: ignore[attr-defined]
        if self.server.status is not None:  # type: ignore[attr-defined]
            self._answer(self.server.status, {"error_code": 50001, "message": "made to fail"})  # type: ignore[attr-defined]
            return True
        if self.headers.get("Authorization") != "Basic " + base64.b64encode(AUTH.encode()).decode():
            self._answer(401, {"error_code": 40101, "message": "Unauthorized"})
            return True
        return False

    def _schema(self, schema_id: int, **more) -> None:
        entry = self.server.schemas[schema_id]  # type: ignore[attr-defined]
        # A registry renders a Protobuf schema as .proto text unless asked for its serialized form (base64 of a
        # FileDescriptorProto), the one form this server keeps.
        if entry["schemaType"] == "PROTOBUF" and "format=serialized" not in self.path:
            return self._answer(422, {"error_code": 42201, "message": "this registry serves PROTOBUF only serialized"})
        self._answer(200, {**entry, **more})

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self._refused():
            return
        path = self.path.split("?")[0].split("/")
        if path[1:3] == ["schemas", "ids"] and int(path[3]) in self.server.schemas:  # type: ignore[attr-defined]
            return self._schema(int(path[3]))
        if path[1] == "subjects" and path[3:4] == ["versions"]:
            versions = self.server.subjects.get(path[2], [])  # type: ignore[attr-defined]
            if path[4:] and path[4].isdigit() and 0 < int(path[4]) <= len(versions):
                schema_id = versions[int(path[4]) - 1]
                return self._schema(schema_id, subject=path[2], version=int(path[4]), id=schema_id)
        self._answer(404, {"error_code": 40403, "message": "Schema not found"})

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        if self._refused():
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        path = self.path.split("?")[0].split("/")
        if path[1] == "subjects" and path[3:] == ["versions"]:  # register
            return self._answer(200, {"id": self.server.register(path[2], body)})  # type: ignore[attr-defined]
        versions = self.server.subjects.get(path[2], [])  # type: ignore[attr-defined]
        for version, schema_id in enumerate(versions, 1):  # look up
            if self.server.schemas[schema_id]["schema"] == body["schema"]:  # type: ignore[attr-defined]
                return self._answer(200, {"subject": path[2], "version": version, "id": schema_id, **body})
        self._answer(404, {"error_code": 40403, "message": "Schema not found"})

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


def framed(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + payload


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
        assert ray.get(p.compute.snapshot.remote()) == want
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
        assert ray.get(p.compute.snapshot.remote()) == reference({f"{topic}:0": list(enumerate(tweets))}, vector, "tweets")
    finally:
        p.stop()
        registry.shutdown()
    assert_dead_letters(kafka_broker.bootstrap, topic, bad)
