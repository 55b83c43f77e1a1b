"""Vertex attributes and their last-writer stamps, by dense vertex id, in compact form.

A Python dict per vertex and a stamp tuple beside it cost ~500 bytes a vertex;
on a feed where every tweet rewrites its author's attributes, that was the
shards' largest per-vertex cost. Here attributes are kept as their JSON
encoding (msgspec's bytes, ~80 bytes; small values that repeat, such as
``{"kind": "hashtag"}``, share one object) and stamps as four NumPy columns
(event time, partition, offset, index in the transaction: 28 bytes). Reads
decode on demand; nothing on the hot path does.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import numpy as np

from pulsegraph.ingest.events import encode_attrs
from pulsegraph.snapshots.growable import Column

# Encodings up to this long are shared between vertices (a few distinct small values: kinds, flags).
SHARE_BELOW = 32
# At most this many distinct shared encodings, so the sharing table itself stays small.
SHARE_MAX = 10_000


_DECODER = msgspec.json.Decoder()
# One encoding from ingest to the shards and the compute stage: what ingest encodes, a shard keeps.
encode = encode_attrs


def encoded(values: list) -> list[bytes]:
    """``values`` in the stored form: ingest sends them encoded already (:func:`encode_attrs`); a hand-made
    batch or delta may hold dicts, which are encoded here. One pass in C when all are bytes."""
    if all(map(bytes.__instancecheck__, values)):
        return values
    return [v if isinstance(v, bytes) else encode(v) for v in values]


def decode(raw: bytes | None) -> dict | None:
    if raw is None:
        return None
    try:
        return _DECODER.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return json.loads(raw)


# The encoding a shard sends for attributes written and then expired from a window.
NULL = b"null"


def has_attrs(raw: bytes | None) -> bool:
    """Attributes were written and are there: not never written, not ``null`` (a window's expiry of the write)."""
    return raw is not None and raw != NULL


class _Seen(msgspec.Struct):
    """The one attribute the compute stage reads (K-exposure's stamp of a tagging without an edge time)."""

    last_seen: Any = None


_SEEN = msgspec.json.Decoder(list[_Seen | None])


def _seen(value: Any) -> float:
    """``last_seen`` as a time: a number (not a bool) is one; anything else, or none, is 0."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def attr_columns(raws: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """What a delta carries of the encoded attributes ``raws`` (:data:`NULL` for an expired write): per
    vertex, are there attributes, and their ``last_seen`` (0 where none is a number). One decoder call for
    the lot (~0.3 us a write), on the shard that made the delta: the compute stage keeps these two columns,
    not the attributes, which the shards hold."""
    present = np.fromiter(map(NULL.__ne__, raws), dtype=bool, count=len(raws))
    try:
        seen = [None if s is None else s.last_seen for s in _SEEN.decode(b"[" + b",".join(raws) + b"]")]
    except (msgspec.DecodeError, RecursionError):  # an attribute value that is not an object: one by one
        seen = [(v.get("last_seen") if isinstance(v, dict) else None) for v in map(decode, raws)]
    return present, np.fromiter(map(_seen, seen), dtype=np.float64, count=len(raws))


class AttrTable:
    """Encoded attributes by vertex id (``None``: never written)."""

    def __init__(self) -> None:
        self._values: list[bytes | None] = []
        self._shared: dict[bytes, bytes] = {}

    def _grow(self, n: int) -> None:
        if n > len(self._values):
            self._values.extend([None] * (n - len(self._values)))

    def _kept(self, raw: bytes) -> bytes:
        """The object to keep for ``raw``: a small encoding that repeats is one shared object."""
        if len(raw) < SHARE_BELOW:
            got = self._shared.get(raw)
            if got is None and len(self._shared) < SHARE_MAX:
                got = self._shared[raw] = raw
            return got or raw
        return raw

    def put(self, i: int, raw: bytes) -> None:
        """Set the encoded attributes of vertex ``i``."""
        self._grow(i + 1)
        self._values[i] = self._kept(raw)

    def put_many(self, ids: list[int], raws: list[bytes]) -> None:
        """:meth:`put` for each pair in order (the last write of an id holds), growing the table once."""
        if not ids:
            return
        self._grow(max(ids) + 1)
        values, kept = self._values, self._kept
        for i, raw in zip(ids, raws):
            # _kept inline for the long ones (a call per write was most of the loop's time).
            values[i] = raw if len(raw) >= SHARE_BELOW else kept(raw)

    def raw(self, i: int) -> bytes | None:
        return self._values[i] if i < len(self._values) else None

    def get(self, i: int) -> dict | None:
        return decode(self.raw(i))

    def clear(self, i: int) -> None:
        """Vertex ``i`` has no attributes again (its write left the window)."""
        if i < len(self._values):
            self._values[i] = None

    def clear_many(self, ids: list[int]) -> None:
        """:meth:`clear` for each of ``ids``."""
        values, n = self._values, len(self._values)
        for i in ids:
            if i < n:
                values[i] = None

    def ids(self) -> list[int]:
        """Vertex ids that have attributes."""
        return [i for i, v in enumerate(self._values) if v is not None]

    def __len__(self) -> int:
        return sum(1 for v in self._values if v is not None)

    def state(self) -> bytes:
        """For a checkpoint: the list as one MessagePack array (pickle would memoize every value)."""
        return msgspec.msgpack.encode(self._values)

    def load(self, values: list | bytes) -> None:
        """What :meth:`state` saved (or, from older checkpoints, the list itself)."""
        items: list[bytes | None] = msgspec.msgpack.decode(values) if isinstance(values, bytes) else values
        if self._values:  # over attributes held already: a value that is None leaves the one there
            for i, raw in enumerate(items):
                if raw is not None:
                    self.put(i, raw)
            return
        # Into an empty table (a shard's restore: a million vertices and more), as one list, not a put each.
        end = len(items)
        while end and items[end - 1] is None:
            end -= 1
        kept = self._kept
        self._values = [raw if raw is None or len(raw) >= SHARE_BELOW else kept(raw) for raw in items[:end]]


class Stamps:
    """The last writer of each vertex's attributes: (event time, partition, offset, index), compared as a
    tuple with the partition's *name*, so the order is the same whatever order partitions were seen in."""

    def __init__(self) -> None:
        self.ts = Column(np.float64)
        self.part = Column(np.int32)  # index into partitions; -1: no stamp yet
        self.off = Column(np.int64)
        self.seq = Column(np.int64)
        self.partitions: list[str] = []
        self._part_ids: dict[str, int] = {}

    def _grow(self, n: int) -> None:
        extra = n - len(self.ts)
        if extra > 0:
            self.ts.extend(np.zeros(extra))
            self.part.extend(np.full(extra, -1, dtype=np.int32))
            self.off.extend(np.zeros(extra, dtype=np.int64))
            self.seq.extend(np.zeros(extra, dtype=np.int64))

    def get(self, i: int) -> tuple | None:
        if i >= len(self.part) or self.part.view[i] < 0:
            return None
        return (float(self.ts.view[i]), self.partitions[self.part.view[i]], int(self.off.view[i]), int(self.seq.view[i]))

    def put(self, i: int, stamp: tuple) -> None:
        ts, partition, off, seq = stamp
        p = int(self._ids_of([partition])[0])
        self._grow(i + 1)
        self.ts.view[i], self.part.view[i], self.off.view[i], self.seq.view[i] = ts, p, off, seq

    def clear(self, ids: np.ndarray) -> None:
        """No stamp for ``ids`` any more: the next write wins, whatever its stamp."""
        ids = ids[ids < len(self.part)]
        self.part.view[ids] = -1
        self.ts.view[ids] = 0.0
        self.off.view[ids] = 0
        self.seq.view[ids] = 0

    def _ids_of(self, names: list[str]) -> np.ndarray:
        for p in names:
            if p not in self._part_ids:
                self._part_ids[p] = len(self.partitions)
                self.partitions.append(p)
        return np.array([self._part_ids[p] for p in names], dtype=np.int32)

    def newer(self, rows: dict[str, np.ndarray], names: list[str]) -> np.ndarray:
        """Which of ``rows`` (columns vid, ts, part, off, seq; ``part`` indexes ``names``) carry a stamp
        greater than the one stored for their vertex (or there is none): a vectorized tuple compare."""
        vid = rows["vid"]
        self._grow(int(vid.max()) + 1 if len(vid) else 0)
        if not len(vid):
            return np.zeros(0, dtype=bool)
        # Partition names compared by name: rank every known and given name together.
        everything = sorted(set(self.partitions) | set(names))
        order = {p: i for i, p in enumerate(everything)}
        stored_rank = np.array([order[p] for p in self.partitions] or [0], dtype=np.int64)
        new_rank = np.array([order[p] for p in names], dtype=np.int64)[rows["part"]]
        old_part = self.part.view[vid]
        old_rank = np.where(old_part >= 0, stored_rank[np.maximum(old_part, 0)], -1)
        ots, ooff, oseq = self.ts.view[vid], self.off.view[vid], self.seq.view[vid]
        ts, off, seq = rows["ts"], rows["off"], rows["seq"]
        gt = (ts > ots) | ((ts == ots) & ((new_rank > old_rank) | ((new_rank == old_rank) & (
            (off > ooff) | ((off == ooff) & (seq > oseq))))))
        return (old_part < 0) | gt

    def put_many(self, rows: dict[str, np.ndarray], names: list[str]) -> None:
        vid = rows["vid"]
        if not len(vid):
            return
        self._grow(int(vid.max()) + 1)
        self.ts.view[vid] = rows["ts"]
        self.part.view[vid] = self._ids_of(names)[rows["part"]]
        self.off.view[vid] = rows["off"]
        self.seq.view[vid] = rows["seq"]

    def state(self) -> dict:
        """For a checkpoint: the columns (no object per vertex is made)."""
        return {"ts": self.ts.view.copy(), "part": self.part.view.copy(), "off": self.off.view.copy(),
                "seq": self.seq.view.copy(), "partitions": list(self.partitions)}

    def load(self, st: dict) -> None:
        for name in ("ts", "part", "off", "seq"):
            getattr(self, name).extend(st[name])
        self.partitions = list(st["partitions"])
        self._part_ids = {p: i for i, p in enumerate(self.partitions)}

    def items(self) -> dict[int, tuple]:
        return {int(i): self.get(int(i)) for i in np.flatnonzero(self.part.view >= 0)}  # type: ignore[misc]
