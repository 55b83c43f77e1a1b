"""A schema registry for the tests and benchmarks: the part of Confluent's Schema Registry API that
readers and serializers call, served by a small HTTP server on 127.0.0.1.

It serves the documented endpoints (GET /schemas/ids/{id}, GET /subjects/{subject}/versions/{version},
and the POSTs that register and look up a schema) behind basic auth. No real registry can be installed
here (tried 2026-12-06): Apicurio Registry is on Maven Central only as its un-augmented Quarkus app jar,
and its dependencies do not resolve there (3.3.3 names schema-util-provider, config-index and
contracts-rules 3.3.3, not served; 3.0.9's parent POM and 2.6.13.Final's schema-util-provider are not
served either); Confluent's registry is not on Maven Central, and Karapace is not on PyPI.
"""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

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

    def do_GET(self) -> None:
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

    def do_POST(self) -> None:
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
