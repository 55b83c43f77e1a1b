"""Schema-registry records (``--format avro|jsonschema|protobuf``) decoded before the transform.

A record framed as Confluent's serializers write it (magic byte 0, a 4-byte schema id, for Protobuf
the message indexes, the payload) is decoded with confluent-kafka's schema-registry code (fastavro
for Avro, the protobuf runtime for Protobuf) against the writer's schema fetched from
``--schema-registry`` (its client's properties, such as ``basic.auth.user.info`` and
``ssl.ca.location``, from ``--schema-registry-config``), and handed to the transform as the JSON of
the decoded object: the transform sees the same Python object a JSON record would give it. The
registry's answers are cached by the client (one request per schema id).

Protobuf needs no generated classes: the writer's schema is fetched in its serialized form (a
FileDescriptorProto, so no .proto text is compiled), with the files it imports (its references, by
subject and version), into one descriptor pool per schema id; the message the record's indexes name
is parsed with a class made from that pool (one per schema id and indexes) and turned into a dict by
Protobuf's JSON mapping, with the field names of the .proto file.

What cannot be decoded is data, not an error: a record without the framing, a schema id the
registry does not know, a schema of another kind or one that does not build, message indexes that
name no message, a payload its schema cannot read are dead letters, with the reason and the schema
id. A registry that does not answer (or answers 5xx or refuses the credentials) is not the records'
fault: :class:`RegistryUnavailable` is raised and the ingest actor waits and retries the same
records (backpressure: lag grows, nothing is lost, nothing is dead-lettered).

This module owns decoding only: what a record means is the transform's, where a dead letter goes
the ingest actor's.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from pulsegraph.ingest.exceptions import IngestError
from pulsegraph.ingest.sources.kafka_config import KafkaConfig

FORMATS = ("json", "avro", "jsonschema", "protobuf")
MAGIC = 0


class RegistryUnavailable(IngestError):
    """The schema registry did not answer usefully: wait and retry the same records."""


class UnusableSchema(IngestError):
    """The writer's schema of a schema id cannot decode records of this format: its records are dead letters."""


# The registry client's properties that must be numbers (a properties file gives strings) and what each takes.
NUMERIC_PROPERTIES = {"max.retries": int, "retries.wait.ms": int, "retries.max.wait.ms": int, "cache.capacity": int,
                      "cache.latest.ttl.sec": float, "timeout": float}


def registry_client_conf(url: str, config: KafkaConfig | None) -> dict[str, Any]:
    """The schema registry client's configuration from --schema-registry and its properties file, the
    numeric ones made numbers; raises IngestError naming a property that is not."""
    conf: dict[str, Any] = dict(config.properties()) if config is not None else {}
    for name, kind in NUMERIC_PROPERTIES.items():
        if name in conf:
            try:
                conf[name] = kind(conf[name])
            except ValueError:
                raise IngestError(f"{config.source if config else '--schema-registry-config'}: {name} is {conf[name]!r}, "
                                  f"not a number") from None
    return {**conf, "url": url}


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

        self.spec, self.topic = spec, topic
        self.client = SchemaRegistryClient(registry_client_conf(spec.url, spec.config))
        self._protobuf: ProtobufReader | None = None
        # schema id -> how its records are read (:meth:`_reader_of`), once the registry has answered for it
        self._readers: dict[int, Callable[[bytes], bytes]] = {}
        if spec.fmt == "avro":
            from confluent_kafka.schema_registry.avro import AvroDeserializer

            self._deserializer: Any = AvroDeserializer(self.client)
        elif spec.fmt == "jsonschema":
            from confluent_kafka.schema_registry.json_schema import JSONDeserializer

            self._deserializer = JSONDeserializer(None, schema_registry_client=self.client)
        elif spec.fmt == "protobuf":
            self._deserializer = self._protobuf = ProtobufReader(self.client)
        else:
            raise IngestError(f"--format {spec.fmt} is not supported; use one of {', '.join(FORMATS)}")

    def decode(self, raw: bytes) -> tuple[bytes | None, str | None]:
        """(the JSON the transform reads, None), or (None, the dead letter's reason). Raises
        RegistryUnavailable when the registry cannot be asked."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        if len(raw) < 5 or raw[0] != MAGIC:
            return None, (f"not a schema-registry record (--format {self.spec.fmt}): no magic byte 0 and schema id "
                          f"(it starts with {raw[:5]!r})")
        schema_id = int.from_bytes(raw[1:5], "big")
        read = self._readers.get(schema_id)
        if read is None:
            try:
                if self._protobuf is None:
                    read = self._reader_of(self.client.get_schema(schema_id))
                else:  # the client caches by id, not by form: Protobuf schemas are only ever asked for serialized
                    self._protobuf.load(schema_id, self.client.get_schema(schema_id, fmt="serialized"))
                    read = self._deserialized
            except SchemaRegistryError as exc:
                if exc.http_status_code == 404:
                    return None, f"schema id {schema_id} is unknown to the registry at {self.spec.url} ({exc.error_message})"
                raise RegistryUnavailable(self._unavailable(f"HTTP {exc.http_status_code}: {exc.error_message}")) from None
            except UnusableSchema as exc:
                return None, f"schema id {schema_id} {exc}"
            except Exception as exc:  # noqa: BLE001 - the HTTP client's connection errors: the registry is away
                raise RegistryUnavailable(self._unavailable(f"{type(exc).__name__}: {exc}")) from None
            self._readers[schema_id] = read
        try:
            return read(raw), None
        except Exception as exc:  # noqa: BLE001 - a payload its own schema cannot read
            return None, f"undecodable with schema id {schema_id} ({self.spec.fmt}): {type(exc).__name__}: {exc}"

    def _reader_of(self, schema: Any) -> Callable[[bytes], bytes]:
        """How records of a writer's schema (Avro or JSON Schema) are read, chosen once per schema id.

        A schema of its own (no references to other subjects, no data-contract rules) is read by the
        library the deserializer itself calls, with what it would otherwise redo for every record made
        once: fastavro with the schema parsed, a JSON Schema validator built (jsonschema-rs: the
        deserializer's jsonschema rebuilds its validator and reference registry per record). Measured on
        synthetic tweets (``python -m bench.decode``): Avro 99 -> 12 µs a record, JSON Schema 445 -> 5.5 µs.
        A schema with references or rules takes the deserializer's full path, which resolves and runs them."""
        if schema.references or getattr(schema, "rule_set", None) is not None:
            return self._deserialized
        if schema.schema_type in (None, "AVRO") and self.spec.fmt == "avro":
            import fastavro

            parsed = fastavro.parse_schema(json.loads(schema.schema_str))

            def avro(raw: bytes) -> bytes:
                return orjson.dumps(fastavro.schemaless_reader(io.BytesIO(raw[5:]), parsed, None), default=str)

            return avro
        if schema.schema_type == "JSON" and self.spec.fmt == "jsonschema":
            import jsonschema_rs

            # Formats are not asserted, as jsonschema (the deserializer's) does not assert them without a format checker.
            validator = jsonschema_rs.validator_for(json.loads(schema.schema_str), validate_formats=False)

            def json_schema(raw: bytes) -> bytes:
                payload = raw[5:]
                validator.validate(orjson.loads(payload))
                return payload  # the record is the JSON the transform reads

            return json_schema
        return self._deserialized

    def _deserialized(self, raw: bytes) -> bytes:
        """The record by the deserializer's full path, as JSON."""
        from confluent_kafka.serialization import MessageField, SerializationContext

        return orjson.dumps(self._deserializer(raw, SerializationContext(self.topic, MessageField.VALUE)), default=str)

    def _unavailable(self, why: str) -> str:
        return (f"schema registry at {self.spec.url} unavailable ({why}); reading waits until it answers (nothing is "
                f"dead-lettered meanwhile). Operator action: check --schema-registry and --schema-registry-config")


class ProtobufReader:
    """Protobuf records as dicts, with descriptors built from the registry's schemas: no generated classes.

    confluent-kafka's ProtobufDeserializer parses into one generated class given up front; a service
    configured by flags has none, so this reader does what that deserializer does with the writer's
    schema alone, with its own helpers: the framing read by ``dual_schema_id_deserializer``, a pool
    started by ``_init_pool`` (the well-known, google.type and confluent files, which a schema
    imports without a reference), the references added by ``_resolve_named_schema``, the schema by
    ``_str_to_proto``. Those three are private (underscored, though its protobuf modules list them in
    ``__all__``): no public call builds a pool without a generated class, and its own helpers build
    the pool its deserializer would.
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        self._files: dict[int, tuple[Any, Any]] = {}  # schema id -> (its FileDescriptorProto, its pool)
        # (schema id, message indexes) -> (its message class, its :func:`_plain_dict` or None)
        self._classes: dict[tuple[int, tuple[int, ...]], tuple[Any, Callable[[Any], dict] | None]] = {}

    def load(self, schema_id: int, schema: Any) -> None:
        """Builds the pool of a schema id once, its references fetched by subject and version. Raises
        UnusableSchema for a schema that is not Protobuf or does not build; the registry's errors go
        up as they are."""
        if schema_id in self._files:
            return
        # The synchronous one by its own module: the public module star-imports the async and the
        # sync _resolve_named_schema under one name, and type checkers take the async one.
        from confluent_kafka.schema_registry._sync.protobuf import _resolve_named_schema
        from confluent_kafka.schema_registry.error import SchemaRegistryError
        from confluent_kafka.schema_registry.protobuf import _init_pool, _str_to_proto
        from confluent_kafka.serialization import SerializationError
        from google.protobuf.descriptor_pool import DescriptorPool

        if schema.schema_type != "PROTOBUF":
            raise UnusableSchema(f"is {schema.schema_type}, not PROTOBUF (--format protobuf)")
        pool = DescriptorPool()
        _init_pool(pool)
        try:
            _resolve_named_schema(schema, self.client, pool)
            fd_proto = _str_to_proto("default", schema.schema_str or "")  # the name its deserializer gives the root file
            pool.Add(fd_proto)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                raise UnusableSchema(f"imports a schema the registry does not have ({exc.error_message})") from None
            raise
        except json.JSONDecodeError:  # a registry answering 200 with no JSON is not the schema's fault
            raise
        except (SerializationError, TypeError, ValueError) as exc:  # not base64, not a FileDescriptorProto, an import missing
            raise UnusableSchema(f"does not build into Protobuf descriptors ({type(exc).__name__}: {exc})") from None
        self._files[schema_id] = (fd_proto, pool)

    def __call__(self, raw: bytes, ctx: Any = None) -> dict:
        """The record's message (of a schema id :meth:`load` has built) as Protobuf's JSON mapping gives
        it, with the .proto's field names and fields at their default (0, "", []) present, as a JSON
        producer writes them."""
        from confluent_kafka.schema_registry import dual_schema_id_deserializer
        from confluent_kafka.schema_registry.serde import SchemaId
        from google.protobuf import json_format

        framing = SchemaId("PROTOBUF")
        payload = dual_schema_id_deserializer(raw, ctx, framing)
        if framing.id is None:  # decode() lets only magic byte 0 (an id, not a GUID) through
            raise ValueError("framed with a schema GUID, not a schema id")
        key = (framing.id, tuple(framing.message_indexes or [0]))
        if key not in self._classes:
            cls = self._message_class(*key)
            self._classes[key] = (cls, _plain_dict(cls.DESCRIPTOR))
        cls, as_dict = self._classes[key]
        message = cls()
        message.ParseFromString(payload.read())
        if as_dict is not None:
            return as_dict(message)
        pool = self._files[framing.id][1]  # resolves the types of google.protobuf.Any fields
        return json_format.MessageToDict(message, always_print_fields_with_no_presence=True,
                                         preserving_proto_field_name=True, descriptor_pool=pool)

    def _message_class(self, schema_id: int, indexes: tuple[int, ...]) -> Any:
        """Confluent's message indexes: the position among the file's messages, then among that one's
        nested messages, and so on, in the order the .proto declares them."""
        from google.protobuf.message_factory import GetMessageClass

        fd_proto, pool = self._files[schema_id]
        names: list[str] = []
        messages = fd_proto.message_type
        for index in indexes:
            if not 0 <= index < len(messages):
                raise LookupError(f"message indexes {list(indexes)} name no message (there are {len(messages)} at "
                                  f"{'.'.join(names) or 'the top level'})")
            names.append(messages[index].name)
            messages = messages[index].nested_type
        name = ".".join([fd_proto.package, *names] if fd_proto.package else names)
        return GetMessageClass(pool.FindMessageTypeByName(name))


_EMPTY = object()  # the default of a repeated field: a fresh empty list


def _plain_dict(desc: Any, outer: tuple = ()) -> Callable[[Any], dict] | None:
    """What ``json_format.MessageToDict(message, always_print_fields_with_no_presence=True,
    preserving_proto_field_name=True)`` gives, for messages of plain fields only: strings, booleans,
    integers (64-bit ones as strings, as the JSON mapping writes them), doubles (the mapping's "NaN" and
    "Infinity" for those), repeated ones of these, and nested messages of them; None for any other
    message (enums, bytes, floats, maps, well-known types, extensions, recursion), which then goes
    through json_format. Made once per message type: json_format walks each record's descriptors in
    Python, 90 of the 98 µs a synthetic tweet took (``python -m bench.decode``: 23.5 µs with this)."""
    from google.protobuf.descriptor import FieldDescriptor as F

    plain = {F.TYPE_STRING, F.TYPE_BOOL, F.TYPE_INT32, F.TYPE_SINT32, F.TYPE_SFIXED32, F.TYPE_UINT32, F.TYPE_FIXED32}
    wide = {F.TYPE_INT64, F.TYPE_SINT64, F.TYPE_SFIXED64, F.TYPE_UINT64, F.TYPE_FIXED64}
    if desc.extension_ranges or desc in outer:
        return None
    how: dict[str, tuple[bool, Callable[[Any], Any] | None]] = {}
    defaults: dict[str, Any] = {}
    for f in desc.fields:
        convert: Callable[[Any], Any] | None
        if f.type == F.TYPE_MESSAGE:
            if f.message_type.GetOptions().map_entry or f.message_type.file.name.startswith("google/protobuf/"):
                return None
            convert = _plain_dict(f.message_type, (*outer, desc))
            if convert is None:
                return None
        elif f.type in plain:
            convert = None
        elif f.type in wide:
            convert = str
        elif f.type == F.TYPE_DOUBLE:
            convert = _double
        else:
            return None
        how[f.name] = (f.is_repeated, convert)
        if not f.has_presence:  # the mapping prints a field without presence at its default
            defaults[f.name] = _EMPTY if f.is_repeated else (convert(f.default_value) if convert else f.default_value)

    def as_dict(message: Any) -> dict:
        out: dict[str, Any] = {}
        for field, value in message.ListFields():
            repeated, convert = how[field.name]
            if repeated:
                out[field.name] = [convert(v) for v in value] if convert else list(value)
            else:
                out[field.name] = convert(value) if convert else value
        for name, default in defaults.items():
            if name not in out:
                out[name] = [] if default is _EMPTY else default
        return out

    return as_dict


def _double(value: float) -> float | str:
    """A double as Protobuf's JSON mapping writes it."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value
