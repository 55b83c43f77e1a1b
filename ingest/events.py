"""Typed event models, their validation, and the graph updates they become.

Owns the wire format of a record (one JSON object) and the ``Update`` tuples a
transform emits. Validation that msgspec's types cannot express (id length,
finite numbers, edge-type spelling) lives here too, so every source and
transform refuses the same records for the same reasons.
"""

from __future__ import annotations

import json
import math
import re
from typing import Literal, NamedTuple, Union

import msgspec

from pulsegraph.ingest.exceptions import BadRecord

# Ids are dictionary keys in every shard and travel in every delta: 256 bytes
# is generous for user names, URLs and hashtags while bounding memory per vertex.
MAX_ID_BYTES = 256
# Edge types are interned per shard into 12 bits of the packed edge key.
EDGE_TYPE_PATTERN = re.compile(r"[A-Za-z0-9_.:-]{1,32}")
# Weights are summed as fixed-point integers so that sums commute exactly:
# S_e must be a pure function of V_e, and float addition is not associative.
WEIGHT_SCALE = 1_000_000
# Keeps |weight sum| well inside int64 even after 10^6 additions of the max.
MAX_WEIGHT = 1e9


class AddEdge(msgspec.Struct, tag_field="op", tag="add_edge", forbid_unknown_fields=False):
    src: str
    dst: str
    weight: float = 1.0
    type: str = "link"
    ts: Union[float, None] = None


class RemoveEdge(msgspec.Struct, tag_field="op", tag="remove_edge"):
    src: str
    dst: str
    # Subtracted from the edge's weight sum: give the weight the edge was added with.
    weight: float = 1.0
    type: str = "link"
    ts: Union[float, None] = None


class UpsertVertex(msgspec.Struct, tag_field="op", tag="upsert_vertex"):
    id: str
    attrs: dict[str, Union[str, int, float, bool, None]] = {}
    ts: Union[float, None] = None


GraphEvent = Union[AddEdge, RemoveEdge, UpsertVertex]


class Tweet(msgspec.Struct):
    """Kineograph's feed: one tweet, its author, whom it mentions and what it tags."""

    user: str
    mentions: list[str] = []
    hashtags: list[str] = []
    text: str = ""
    ts: Union[float, None] = None


class EdgeUpdate(NamedTuple):
    """Add (sign=+1) or remove (sign=-1) one unit of multiplicity and ``weight`` (fixed point);
    ``ts`` is the event's time (0 when it has none): an edge keeps the earliest ``ts`` of its adds."""

    src: str
    dst: str
    type: str
    sign: int
    weight: int
    ts: float = 0.0


class VertexUpdate(NamedTuple):
    """Set a vertex's attributes; last writer wins by (ts, partition, offset)."""

    id: str
    attrs: dict
    ts: float


Update = Union[EdgeUpdate, VertexUpdate]
Kind = Literal["edge", "vertex"]


# Attributes travel from ingest to the shards, and are kept there and in the compute stage, as this
# encoding: JSON with sorted keys, so equal attributes are equal bytes. Ingest encodes them once, where
# it makes them; a shard stores the winning write's bytes as they came.
# msgspec, not orjson: orjson's small results each keep a ~4 KB allocation behind them (measured:
# 4,098 bytes per 40-byte encoding), which is fine for a response and ruinous for a value kept per vertex.
_ATTRS_ENCODER = msgspec.json.Encoder(order="sorted")


def encode_attrs(attrs: dict) -> bytes:
    """The stored form of a vertex's attributes (see above)."""
    try:
        return _ATTRS_ENCODER.encode(attrs)
    except (msgspec.EncodeError, OverflowError, TypeError, RecursionError):  # integers past 64 bits, deep nesting
        return json.dumps(attrs, sort_keys=True, separators=(",", ":")).encode()


def check_id(value: str, field: str) -> str:
    if not value:
        raise BadRecord(f"{field} is empty")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_ID_BYTES:
        raise BadRecord(f"{field} is longer than {MAX_ID_BYTES} bytes")
    return value


def check_edge_type(value: str) -> str:
    if not EDGE_TYPE_PATTERN.fullmatch(value):
        raise BadRecord(f"edge type {value[:40]!r} must match {EDGE_TYPE_PATTERN.pattern!r}")
    return value


def check_ts(ts: float | None) -> float:
    if ts is None:
        return 0.0
    if not math.isfinite(ts):
        raise BadRecord("ts is not a finite number")
    return float(ts)


def fixed_weight(weight: float) -> int:
    if not math.isfinite(weight):
        raise BadRecord("weight is not a finite number")
    if weight < 0 or weight > MAX_WEIGHT:
        raise BadRecord(f"weight {weight!r} is outside [0, {MAX_WEIGHT:g}]")
    return int(round(weight * WEIGHT_SCALE))


def decoder(schema: type) -> msgspec.json.Decoder:
    return msgspec.json.Decoder(schema)


def decode(dec: msgspec.json.Decoder, raw: bytes):
    """Decode one record, turning every parse or type error into :class:`BadRecord`."""
    try:
        return dec.decode(raw)
    except msgspec.ValidationError as exc:
        raise BadRecord(f"invalid event: {exc}") from None
    except msgspec.DecodeError as exc:
        raise BadRecord(f"malformed JSON: {exc}") from None
    except RecursionError:
        raise BadRecord("record nests too deeply") from None
