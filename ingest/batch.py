"""The output type of the ingest stage: per-shard batches of transactions.

A transaction is the set of updates made from one record, numbered by its
source position ``(partition, offset)``. The ingest stage routes each update to
the shard that owns its vertex (a stable hash of the key, never Python's
``hash()``, which differs between processes) and ships one columnar
:class:`ShardBatch` per shard per round: no actor call per record, and NumPy
columns of small integers rather than one Python object per update.

Vertex names are interned once, by the :class:`Router`, into an id table that
outlives the round; the shard of a name is hashed once, when it enters that
table. A batch carries each name it refers to once (``names``) and indexes it.
"""

from __future__ import annotations

import zlib
from array import array
from dataclasses import dataclass, field

import numpy as np

from pulsegraph.base.arrays import unique
from pulsegraph.ingest.events import EdgeUpdate, Update, VertexUpdate, encode_attrs

# The Router's name table (and its memos) is dropped between rounds when it grows
# past this: hot names come right back, and a long-running actor's memory stays bounded.
MAX_TABLE_NAMES = 1_000_000

_I32 = np.zeros(0, dtype=np.int32)


def shard_of(key: str, n_shards: int) -> int:
    """The shard that owns vertex ``key``: CRC-32 of its UTF-8 bytes, stable across processes and runs."""
    return zlib.crc32(key.encode("utf-8", "surrogatepass")) % n_shards


@dataclass
class ShardBatch:
    """Columnar updates for one shard.

    ``*_part`` index into ``partitions``, ``e_src``/``e_dst``/``v_id`` into
    ``names`` and ``e_type`` into ``types``; each string appears once per batch.
    Rows keep the order in which the router received them.
    """

    partitions: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    e_part: np.ndarray = field(default_factory=lambda: _I32)
    e_off: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    e_src: np.ndarray = field(default_factory=lambda: _I32)
    e_dst: np.ndarray = field(default_factory=lambda: _I32)
    e_type: np.ndarray = field(default_factory=lambda: _I32)
    e_sign: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    e_weight: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    e_ts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float64))
    v_part: np.ndarray = field(default_factory=lambda: _I32)
    v_off: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    v_id: np.ndarray = field(default_factory=lambda: _I32)
    # Encoded once by ingest (:func:`~pulsegraph.ingest.events.encode_attrs`), stored by the shard as they come.
    v_attrs: list[bytes] = field(default_factory=list)
    v_ts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float64))

    def __len__(self) -> int:
        return len(self.e_off) + len(self.v_off)


def _intern(ids: dict[str, int], names: list[str], name: str) -> int:
    """The id of ``name`` in the (ids, names) pair, appended on first sight."""
    i = ids.get(name)
    if i is None:
        i = ids[name] = len(names)
        names.append(name)
    return i


class Router:
    """Collects a round of transactions and splits it into one :class:`ShardBatch` per shard.

    Edges live with their source vertex (so a vertex's out-edges are on one
    shard); vertex attributes live with the vertex. Updates arrive one
    transaction at a time (:meth:`add`) or as ready-made columns from a
    transform's batch path (:meth:`extend`, with ids from :meth:`vertex_id`,
    :meth:`type_id` and :meth:`partition_id`); rows keep their arrival order
    either way. Only names a transform has validated reach the table.
    """

    def __init__(self, n_shards: int) -> None:
        self.n_shards = n_shards
        self._reset_table()
        self._reset_round()

    def _reset_table(self) -> None:
        self.names: list[str] = []
        self.ids: dict[str, int] = {}  # name -> id; read directly by batch paths, it is the hot lookup
        self._shard_of = array("i")
        self.types: list[str] = []
        self._type_ids: dict[str, int] = {}
        # Per-transform caches keyed like the table (e.g. a raw hashtag -> its vertex id): cleared with it.
        self.memos: dict[str, dict] = {}

    def _reset_round(self) -> None:
        self.partitions: list[str] = []
        self._part_ids: dict[str, int] = {}
        self._chunks: list[tuple[dict, dict]] = []  # (edge columns, vertex columns), in arrival order
        self._reset_rows()

    def _reset_rows(self) -> None:
        self._edges: list[tuple] = []  # (part, off, src, dst, type, sign, weight, ts) from add()
        self._vertices: list[tuple] = []  # (part, off, id, attrs, ts) from add()

    def vertex_id(self, name: str) -> int:
        """The table id of ``name``, adding it (and hashing its shard) on first sight."""
        i = self.ids.get(name)
        if i is None:
            i = self.ids[name] = len(self.names)
            self.names.append(name)
            self._shard_of.append(shard_of(name, self.n_shards))
        return i

    def type_id(self, name: str) -> int:
        return _intern(self._type_ids, self.types, name)

    def partition_id(self, partition: str) -> int:
        return _intern(self._part_ids, self.partitions, partition)

    def add(self, partition: str, offset: int, updates: list[Update]) -> None:
        """Add the updates of one transaction, in order."""
        p = self.partition_id(partition)
        vid = self.vertex_id
        for u in updates:
            if isinstance(u, EdgeUpdate):
                self._edges.append((p, offset, vid(u.src), vid(u.dst), self.type_id(u.type), u.sign, u.weight, u.ts))
            elif isinstance(u, VertexUpdate):
                self._vertices.append((p, offset, vid(u.id), encode_attrs(u.attrs), u.ts))

    def extend(self, edges: dict[str, np.ndarray], vertices: dict[str, np.ndarray]) -> None:
        """Append rows given as columns (keys as :data:`EDGE_COLUMNS` and :data:`VERTEX_COLUMNS`,
        ids from this router; ``attrs`` an object array of encoded attributes, as
        :func:`~pulsegraph.ingest.events.encode_attrs` makes them), after every row added so far."""
        self._seal()
        self._chunks.append((edges, vertices))

    def _seal(self) -> None:
        """Turn the rows from :meth:`add` into a chunk, so that a later chunk lands after them."""
        if not self._edges and not self._vertices:
            return
        e = list(zip(*self._edges)) or [()] * len(EDGE_COLUMNS)
        v = list(zip(*self._vertices)) or [()] * len(VERTEX_COLUMNS)
        attrs = np.empty(len(v[3]), dtype=object)
        attrs[:] = v[3]
        self._chunks.append(
            (
                {name: np.array(col, dtype=EDGE_COLUMNS[name]) for name, col in zip(EDGE_COLUMNS, e)},
                {
                    "part": np.array(v[0], dtype=np.int32), "off": np.array(v[1], dtype=np.int64),
                    "id": np.array(v[2], dtype=np.int32), "attrs": attrs, "ts": np.array(v[4], dtype=np.float64),
                },
            )
        )
        self._reset_rows()

    def stamp_times(self, record_ts: dict[str, dict[int, float]] | None = None) -> tuple[dict[str, float], dict[str, list[int]]]:
        """For a window: give every row of a transaction the transaction's event time, the largest
        ``ts`` among its updates (0 counts as none); where none has one, the time its source stored
        with the record (``record_ts[partition][offset]``, Kafka's broker timestamp). Transactions
        with neither are dropped from the round. Returns, per partition, the largest event time of
        the round, and the offsets of the dropped transactions (for the dead-letter sink)."""
        self._seal()
        if not self._chunks:
            return {}, {}
        e = {name: _concat([c[0][name] for c in self._chunks], dtype) for name, dtype in EDGE_COLUMNS.items()}
        v = {name: _concat([c[1][name] for c in self._chunks], dtype) for name, dtype in VERTEX_COLUMNS.items()}
        keys = np.concatenate([(e["part"].astype(np.int64) << 40) | e["off"], (v["part"].astype(np.int64) << 40) | v["off"]])
        ts = np.concatenate([e["ts"], v["ts"]])
        uniq, inv = np.unique(keys, return_inverse=True)
        tx = np.full(len(uniq), -np.inf)
        np.maximum.at(tx, inv, np.where(ts != 0, ts, -np.inf))
        dropped: dict[str, list[int]] = {}
        for i in np.flatnonzero(tx == -np.inf).tolist():
            part, off = self.partitions[int(uniq[i] >> 40)], int(uniq[i] & ((1 << 40) - 1))
            got = (record_ts or {}).get(part, {}).get(off, 0.0)
            if got:
                tx[i] = got
            else:
                dropped.setdefault(part, []).append(off)
        row_ts = tx[inv]
        keep = row_ts != -np.inf
        ne = len(e["ts"])
        e["ts"], v["ts"] = row_ts[:ne], row_ts[ne:]
        if not keep.all():
            e = {k: c[keep[:ne]] for k, c in e.items()}
            v = {k: c[keep[ne:]] for k, c in v.items()}
        self._chunks = [(e, v)]
        latest: dict[str, float] = {}
        good = tx != -np.inf
        parts = (uniq >> 40)[good]
        for pid in unique(parts).tolist():
            latest[self.partitions[pid]] = float(tx[good][parts == pid].max())
        return latest, dropped

    def take(self) -> list[ShardBatch]:
        """The round's batches, one per shard (empty ones included); the next round starts afresh."""
        self._seal()
        e = {name: _concat([c[0][name] for c in self._chunks], dtype) for name, dtype in EDGE_COLUMNS.items()}
        v = {name: _concat([c[1][name] for c in self._chunks], dtype) for name, dtype in VERTEX_COLUMNS.items()}
        shard_of_id = np.frombuffer(self._shard_of, dtype=np.int32) if len(self._shard_of) else _I32
        # A stable sort by shard keeps each shard's rows in arrival order (the order of a
        # transaction's vertex updates is its last-writer-wins tiebreak).
        e_order, e_bounds = _by_shard(shard_of_id[e["src"]], self.n_shards)
        v_order, v_bounds = _by_shard(shard_of_id[v["id"]], self.n_shards)
        names = self.names  # the table outlives the round (up to MAX_TABLE_NAMES): only used names are copied
        out = []
        for s in range(self.n_shards):
            ei = e_order[e_bounds[s] : e_bounds[s + 1]]
            vi = v_order[v_bounds[s] : v_bounds[s + 1]]
            se = {name: col[ei] for name, col in e.items()}
            sv = {name: col[vi] for name, col in v.items()}
            used = unique(np.concatenate([se["src"], se["dst"], sv["id"]]))
            parts = unique(np.concatenate([se["part"], sv["part"]]))
            types = unique(se["type"])
            out.append(
                ShardBatch(
                    partitions=[self.partitions[i] for i in parts.tolist()],
                    names=[names[i] for i in used.tolist()],
                    types=[self.types[i] for i in types.tolist()],
                    e_part=_local(parts, se["part"]),
                    e_off=se["off"],
                    e_src=_local(used, se["src"]),
                    e_dst=_local(used, se["dst"]),
                    e_type=_local(types, se["type"]),
                    e_sign=se["sign"],
                    e_weight=se["weight"],
                    e_ts=se["ts"],
                    v_part=_local(parts, sv["part"]),
                    v_off=sv["off"],
                    v_id=_local(used, sv["id"]),
                    v_attrs=sv["attrs"].tolist(),
                    v_ts=sv["ts"],
                )
            )
        self._reset_round()
        # A memo can outgrow the table (many raw spellings of one name): it bounds the table's life too.
        if max([len(self.names), *map(len, self.memos.values())]) > MAX_TABLE_NAMES:
            self._reset_table()
        return out


EDGE_COLUMNS = {
    "part": np.int32, "off": np.int64, "src": np.int32, "dst": np.int32,
    "type": np.int32, "sign": np.int8, "weight": np.int64, "ts": np.float64,
}
VERTEX_COLUMNS = {"part": np.int32, "off": np.int64, "id": np.int32, "attrs": object, "ts": np.float64}


def _concat(chunks: list[np.ndarray], dtype) -> np.ndarray:
    if not chunks:
        return np.zeros(0, dtype=dtype)
    return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)


def _local(table: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Router ids -> positions in ``table`` (sorted, holding every id)."""
    return np.searchsorted(table, ids).astype(np.int32)


def _by_shard(shards: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(shards, kind="stable")
    return order, np.searchsorted(shards[order], np.arange(n + 1))
