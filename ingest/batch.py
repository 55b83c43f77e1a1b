"""The output type of the ingest stage: per-shard batches of transactions.

A transaction is the set of updates made from one record, numbered by its
source position ``(partition, offset)``. The ingest stage routes each update to
the shard that owns its vertex (a stable hash of the key, never Python's
``hash()``, which differs between processes) and ships one columnar
:class:`ShardBatch` per shard per round: no actor call per record.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from ingest.events import EdgeUpdate, Update, VertexUpdate


def shard_of(key: str, n_shards: int) -> int:
    """The shard that owns vertex ``key``: CRC-32 of its UTF-8 bytes, stable across processes and runs."""
    return zlib.crc32(key.encode("utf-8", "surrogatepass")) % n_shards


@dataclass
class ShardBatch:
    """Columnar updates for one shard. ``*_part`` index into ``partitions``."""

    partitions: list[str] = field(default_factory=list)
    e_part: list[int] = field(default_factory=list)
    e_off: list[int] = field(default_factory=list)
    e_src: list[str] = field(default_factory=list)
    e_dst: list[str] = field(default_factory=list)
    e_type: list[str] = field(default_factory=list)
    e_sign: list[int] = field(default_factory=list)
    e_weight: list[int] = field(default_factory=list)
    e_ts: list[float] = field(default_factory=list)
    v_part: list[int] = field(default_factory=list)
    v_off: list[int] = field(default_factory=list)
    v_id: list[str] = field(default_factory=list)
    v_attrs: list[dict] = field(default_factory=list)
    v_ts: list[float] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.e_off) + len(self.v_off)


class Router:
    """Splits transactions into one :class:`ShardBatch` per shard.

    Edges live with their source vertex (so a vertex's out-edges are on one
    shard); vertex attributes live with the vertex.
    """

    def __init__(self, n_shards: int) -> None:
        self.n_shards = n_shards
        self._cache: dict[str, int] = {}
        self.reset()

    def reset(self) -> None:
        self.batches = [ShardBatch() for _ in range(self.n_shards)]
        self._part_index: list[dict[str, int]] = [{} for _ in range(self.n_shards)]

    def _shard(self, key: str) -> int:
        s = self._cache.get(key)
        if s is None:
            if len(self._cache) > 1_000_000:  # bound the memo; hot keys come right back
                self._cache.clear()
            s = self._cache[key] = shard_of(key, self.n_shards)
        return s

    def _pidx(self, shard: int, partition: str) -> int:
        index = self._part_index[shard]
        i = index.get(partition)
        if i is None:
            i = index[partition] = len(index)
            self.batches[shard].partitions.append(partition)
        return i

    def add(self, partition: str, offset: int, updates: list[Update]) -> None:
        for u in updates:
            if isinstance(u, EdgeUpdate):
                s = self._shard(u.src)
                b = self.batches[s]
                b.e_part.append(self._pidx(s, partition))
                b.e_off.append(offset)
                b.e_src.append(u.src)
                b.e_dst.append(u.dst)
                b.e_type.append(u.type)
                b.e_sign.append(u.sign)
                b.e_weight.append(u.weight)
                b.e_ts.append(u.ts)
            elif isinstance(u, VertexUpdate):
                s = self._shard(u.id)
                b = self.batches[s]
                b.v_part.append(self._pidx(s, partition))
                b.v_off.append(offset)
                b.v_id.append(u.id)
                b.v_attrs.append(u.attrs)
                b.v_ts.append(u.ts)

    def take(self) -> list[ShardBatch]:
        out = self.batches
        self.reset()
        return out
