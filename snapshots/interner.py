"""A shard's name table: vertex (or edge type) names to dense local ids, with ids given back and reused.

Owns nothing but the table; :mod:`pulsegraph.snapshots.store` decides when an id is free
(with a window, once nothing of the vertex is left in the shard). The names are a
:class:`~pulsegraph.snapshots.nametable.NameTable`: packed bytes and a hash index, 33 bytes a
name where a list and a dict took 134 (``bench.structures shard-names``), in every shard.
"""

from __future__ import annotations

import msgspec
import numpy as np

from pulsegraph.snapshots.exceptions import ShardCapacityError
from pulsegraph.snapshots.nametable import NameTable, hashes


class Interner:
    """String -> dense int id. Ids given back by :meth:`release` are taken by new names first, lowest
    first, so the table follows the names in use, not every name ever seen."""

    def __init__(self, limit: int, what: str) -> None:
        self.names = NameTable()  # by id; None at a released id, free for the next new name
        self._free: list[int] = []  # released ids, highest first (``pop`` takes the lowest)
        self._limit = limit
        self._what = what

    def __len__(self) -> int:
        """Names held now."""
        return self.names.held

    def ids(self, names: list[str]) -> np.ndarray:
        hashed = hashes(names)
        taken = np.zeros(len(names), dtype=bool)  # whose hash the index holds: the new names' put needs it
        got = self.names.lookup(names, hashed, taken)  # names a shard has seen before are most of every batch
        absent = np.flatnonzero(got < 0)
        if len(absent):
            new: dict[str, int] = {}  # a name can repeat within ``names``
            first: list[int] = []
            end = len(self.names)  # ids past the table's end go to new names in order
            for k in absent.tolist():
                name = names[k]
                j = new.get(name)
                if j is None:
                    if self._free:
                        j = self._free.pop()
                    else:
                        j, end = end, end + 1
                        if j >= self._limit:
                            raise ShardCapacityError(
                                f"more than {self._limit} {self._what} on one shard. "
                                "Operator action: run with more --shards."
                            )
                    new[name] = j
                    first.append(k)
                got[k] = j
            self.names.add(list(new), np.fromiter(new.values(), dtype=np.int64, count=len(new)), hashed[first], taken[first])
        return got.astype(np.int32)

    def release(self, ids: np.ndarray) -> None:
        """Forget the names of ``ids`` (held now, distinct); the next new names take the ids."""
        self.names.remove(ids)
        self._free = sorted(set(self._free).union(ids.tolist()), reverse=True)

    def free_ids(self) -> np.ndarray:
        return np.array(self._free, dtype=np.int64)

    def encoded(self) -> dict:
        """:attr:`names` for a checkpoint: the table's arrays (views, written out of band as they lie)."""
        return self.names.state()

    def load(self, names: dict | list[str | None] | bytes) -> None:
        """The ids a checkpoint saved (:meth:`encoded`; or, from before the packed table, one MessagePack
        array or the list itself, released ids as None), each name at its id again."""
        if isinstance(names, dict):
            self.names = NameTable.from_state(names)
        else:
            self.names = NameTable.of(msgspec.msgpack.decode(names) if isinstance(names, bytes) else list(names))
        self._free = self.names.unnamed()[::-1].tolist()
