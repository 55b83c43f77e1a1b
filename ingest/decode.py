"""Schema-registry records (``--format avro|jsonschema``) decoded before the transform.

A record framed as Confluent's serializers write it (magic byte 0, a 4-byte schema id, the payload)
is decoded with confluent-kafka's schema-registry deserializers (fastavro for Avro) against the
writer's schema fetched from ``--schema-registry`` (its client's properties, such as
``basic.auth.user.info`` and ``ssl.ca.location``, from ``--schema-registry-config``), and handed to
the transform as the JSON of the decoded object: the transform sees the same Python object a JSON
record would give it. The registry's answers are cached by the client (one request per schema id).

What cannot be decoded is data, not an error: a record without the framing, a schema id the
registry does not know, a payload its schema cannot read are dead letters, with the reason and the
schema id. A registry that does not answer (or answers 5xx or refuses the credentials) is not the
records' fault: :class:`RegistryUnavailable` is raised and the ingest actor waits and retries the
same records (backpressure: lag grows, nothing is lost, nothing is dead-lettered).

Protobuf is refused at start: confluent-kafka's Protobuf deserializer needs the generated message
class of the records, which a generic service does not have.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from pulsegraph.ingest.exceptions import IngestError
from pulsegraph.ingest.sources.kafka_config import KafkaConfig

FORMATS = ("json", "avro", "jsonschema")
MAGIC = 0


class RegistryUnavailable(IngestError):
    """The schema registry did not answer usefully: wait and retry the same records."""


@dataclass(frozen=True)
class RegistrySpec:
    """Where the registry is and how to reach it (its properties' secrets are SecretStr); plain data that pickles."""

    fmt: str
    url: str
    config: KafkaConfig | None = None

    def __repr__(self) -> str:
        return f"RegistrySpec({self.fmt!r}, {self.url!r}, {self.config!r})"


class RegistryDecoder:
    """Decodes framed records of one topic; one per ingest actor."""

    def __init__(self, spec: RegistrySpec, topic: str) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        conf = {k: v for k, v in (spec.config.properties() if spec.config else {}).items()}
        self.spec, self.topic = spec, topic
        self.client = SchemaRegistryClient({**conf, "url": spec.url})
        if spec.fmt == "avro":
            from confluent_kafka.schema_registry.avro import AvroDeserializer

            self._deserializer: Any = AvroDeserializer(self.client)
        elif spec.fmt == "jsonschema":
            from confluent_kafka.schema_registry.json_schema import JSONDeserializer

            self._deserializer = JSONDeserializer(None, schema_registry_client=self.client)
        else:
            raise IngestError(f"--format {spec.fmt} is not supported; use one of {', '.join(FORMATS)}")

    def decode(self, raw: bytes) -> tuple[bytes | None, str | None]:
        """(the JSON the transform reads, None), or (None, the dead letter's reason). Raises
        RegistryUnavailable when the registry cannot be asked."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError
        from confluent_kafka.serialization import MessageField, SerializationContext

        if len(raw) < 5 or raw[0] != MAGIC:
            return None, (f"not a schema-registry record (--format {self.spec.fmt}): no magic byte 0 and schema id "
                          f"(it starts with {raw[:5]!r})")
        schema_id = int.from_bytes(raw[1:5], "big")
        try:
            self.client.get_schema(schema_id)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                return None, f"schema id {schema_id} is unknown to the registry at {self.spec.url} ({exc.error_message})"
            raise RegistryUnavailable(self._unavailable(f"HTTP {exc.http_status_code}: {exc.error_message}")) from None
        except Exception as exc:  # noqa: BLE001 - the HTTP client's connection errors: the registry is away
            raise RegistryUnavailable(self._unavailable(f"{type(exc).__name__}: {exc}")) from None
        try:
            value = self._deserializer(raw, SerializationContext(self.topic, MessageField.VALUE))
        except Exception as exc:  # noqa: BLE001 - a payload its own schema cannot read
            return None, f"undecodable with schema id {schema_id} ({self.spec.fmt}): {type(exc).__name__}: {exc}"
        return orjson.dumps(value, default=str), None

    def _unavailable(self, why: str) -> str:
        return (f"schema registry at {self.spec.url} unavailable ({why}); reading waits until it answers (nothing is "
                f"dead-lettered meanwhile). Operator action: check --schema-registry and --schema-registry-config")
