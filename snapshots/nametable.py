"""Names by dense id, packed: their UTF-8 bytes in one buffer, and name -> id through their 64-bit hashes.

In place of a ``list[str]`` and a ``dict[str, int]``: a name in a shard cost 134
bytes that way (a string object, a list slot, a dict entry), and every shard keeps
the names of the vertices its edges touch. Here a name costs its bytes, 12 for
where they lie, and 13 in the hash index: 33 in all for 1.5 M names of ~7 bytes
(``bench.structures shard-names``).

Owns nothing but the table: who decides that an id is free (a shard, with a
window) calls :meth:`NameTable.remove`. The hashes are Python's own string hash,
salted per process: never stored, the index is rebuilt from the names on a load.
A lookup checks each name the index finds against the bytes at its id, all at
once in NumPy (a Python step per name would cost what the dict did); a name whose
hash another held name has (that any two of 5 M names share one has a chance of
~7 in 10**7) is kept in a small dict beside the index, so a clash costs a dict
entry, never a wrong id.
"""

from __future__ import annotations

from typing import Callable, Iterator, cast

import numpy as np

from pulsegraph.base.arrays import gather_ranges
from pulsegraph.base.keyindex import KeyIndex
from pulsegraph.snapshots.growable import Column

# The bytes of removed names are dropped (the buffer rewritten) once they pass this share of it:
# a name's bytes are copied 1 / DEAD_SHARE times at most over its life.
DEAD_SHARE = 0.5
# ... and at least this many: a small table is not rewritten for a few removals.
MIN_DEAD = 1 << 16
# Any str round-trips, lone surrogates included (a JSON string may hold one).
ERRORS = "surrogatepass"
# :func:`decoded` reads this many names at a time: its transient arrays (8 bytes a byte of name, to gather them)
# stay a few MiB however many names are read.
DECODE_CHUNK = 1 << 16
_NEWLINE = ord("\n")


def hashes(names: list[str]) -> np.ndarray:
    """Each name's 64-bit hash as a uint64 key (Python's own, computed once per string object)."""
    return np.fromiter(map(hash, names), dtype=np.int64, count=len(names)).view(np.uint64)


def decoded(blob: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> list[str]:
    """The names whose UTF-8 bytes lie in ``blob`` (uint8) at ``starts``, ``lengths`` bytes each, :data:`DECODE_CHUNK`
    at a time: one gather of their bytes with a newline after each, one decode and one split. A decode per name costs
    ~0.9 us (2.7 s for 3 M names), most of it Python's step per name. A chunk where a name holds a newline is
    decoded a name at a time (UTF-8 never has the newline's byte inside another character)."""
    out: list[str] = []
    for lo in range(0, len(starts), DECODE_CHUNK):
        sizes = np.asarray(lengths[lo : lo + DECODE_CHUNK], dtype=np.int64)
        raw = blob[gather_ranges(np.asarray(starts[lo : lo + DECODE_CHUNK], dtype=np.int64), sizes)[0]]
        if (raw == _NEWLINE).any():
            data, ends = raw.tobytes(), np.cumsum(sizes).tolist()
            out.extend(data[a:b].decode("utf-8", ERRORS) for a, b in zip([0, *ends[:-1]], ends))
            continue
        joined = np.full(len(raw) + len(sizes), _NEWLINE, dtype=np.uint8)
        kept = np.ones(len(joined), dtype=bool)
        kept[np.cumsum(sizes + 1) - 1] = False  # each name's newline
        joined[kept] = raw
        out.extend(joined[:-1].tobytes().decode("utf-8", ERRORS).split("\n"))
    return out


def encoded(names: list[str]) -> tuple[bytes, np.ndarray]:
    """The names' UTF-8 bytes joined, and each one's length (int64)."""
    enc = [n.encode("utf-8", ERRORS) for n in names]
    return b"".join(enc), np.fromiter(map(len, enc), dtype=np.int64, count=len(enc))


class HashIndex:
    """Name -> id through the names' 64-bit hashes, for whoever holds the names (and checks each candidate:
    :meth:`lookup`'s ``holds``). A name whose hash another indexed name holds, or an earlier name of the
    same batch, goes to a small dict beside the index: a clash costs a dict entry, never a wrong id."""

    def __init__(self) -> None:
        self._by_hash = KeyIndex()
        self._clash: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._by_hash) + len(self._clash)

    @property
    def nbytes(self) -> int:
        return self._by_hash.nbytes

    def lookup(self, names: list[str], holds: Callable[[np.ndarray, list[str]], np.ndarray],
               hashed: np.ndarray | None = None, taken: np.ndarray | None = None) -> np.ndarray:
        """The id of each name (int64), -1 where it is not indexed. ``holds(ids, names)``: whether each id
        names its name (the hash index's candidates are checked with it); ``hashed``: :func:`hashes` of
        ``names``, where the caller has them already; ``taken`` (bool, one per name), if given, is set
        where the name's hash is in the index (its own or another name's): what :meth:`put` of the
        names not found needs to know, so that it need not search again."""
        if not names:
            return np.zeros(0, np.int64)
        ids = self._by_hash.get(hashes(names) if hashed is None else hashed)
        if taken is not None:
            taken[:] = ids >= 0
        hit = np.flatnonzero(ids >= 0)
        if len(hit):
            asked = names if len(hit) == len(names) else [names[k] for k in hit.tolist()]
            ids[hit[~holds(ids[hit], asked)]] = -1  # the hash is another name's
        if self._clash:
            clash = self._clash
            for k in np.flatnonzero(ids < 0).tolist():
                ids[k] = clash.get(names[k], -1)
        return ids

    def put(self, names: list[str], ids: np.ndarray, hashed: np.ndarray | None = None,
            taken: np.ndarray | None = None) -> None:
        """Index distinct ``names`` (none indexed yet) at ``ids``; ``taken``: :meth:`lookup`'s, for these
        names, when nothing was put in between."""
        if not names:
            return
        ids = np.asarray(ids, dtype=np.int64)
        h = hashes(names) if hashed is None else hashed
        if taken is None:
            taken = self._by_hash.get(h) >= 0
        again = np.ones(len(h), dtype=bool)
        again[np.unique(h, return_index=True)[1]] = False
        for k in np.flatnonzero(taken | again).tolist():
            self._clash[names[k]] = int(ids[k])
        keep = ~(taken | again)
        self._by_hash.put(h[keep], ids[keep], absent=True)

    def discard(self, names: list[str]) -> None:
        """Stop indexing ``names`` (each indexed now)."""
        clash = self._clash
        self._by_hash.discard(hashes([name for name in names if clash.pop(name, None) is None]))  # else its hash is another's

    def discard_at(self, names: list[str], ids: np.ndarray) -> None:
        """Stop indexing each of ``names`` that is indexed at its id in ``ids``; the others are left as
        they are. Each name must be the one its holder keeps at that id: then an entry of the name's hash
        that holds the id is the name's own (an id has one name), so one search of the hashes does it,
        with no name compared."""
        if not names:
            return
        ids = np.asarray(ids, dtype=np.int64)
        clash = self._clash
        if clash:
            for name, i in zip(names, ids.tolist()):
                if clash.get(name) == i:
                    del clash[name]
        self._by_hash.discard(hashes(names), ids)


class NameTable:
    """Id -> name (None: no name at that id) and name -> id, for distinct names at ids the caller picks."""

    def __init__(self) -> None:
        self._blob = Column(np.uint8)
        self._start = Column(np.int64)  # per id: where its bytes start in the blob
        self._len = Column(np.int32)  # per id: how many there are; -1: no name
        self._index = HashIndex()
        self._held = 0
        self._dead = 0  # bytes of removed names still in the blob

    def __len__(self) -> int:
        """Ids so far (held or not): one past the highest id ever named."""
        return len(self._len)

    @property
    def held(self) -> int:
        return self._held

    @property
    def nbytes(self) -> int:
        return self._blob.nbytes + self._start.nbytes + self._len.nbytes + self._index.nbytes

    # -- reading ------------------------------------------------------------
    def __getitem__(self, i: int) -> str | None:
        n = int(self._len.view[i])
        if n < 0:
            return None
        s = int(self._start.view[i])
        return self._blob.view[s : s + n].tobytes().decode("utf-8", ERRORS)

    def __iter__(self) -> Iterator[str | None]:
        return iter(self.tolist())

    def take(self, ids: np.ndarray) -> list[str | None]:
        """The name at each of ``ids``, with :func:`decoded` (a few passes over their bytes, not a step per name)."""
        ids = np.asarray(ids, dtype=np.int64)
        lengths = self._len.view[ids]
        out: list[str | None] = list(decoded(self._blob.view, self._start.view[ids], np.maximum(lengths, 0)))
        for k in np.flatnonzero(lengths < 0).tolist():
            out[k] = None
        return out

    def unnamed(self) -> np.ndarray:
        """The ids below :func:`len` that hold no name, ascending."""
        return np.flatnonzero(self._len.view < 0)

    def tolist(self) -> list[str | None]:
        return self.take(np.arange(len(self), dtype=np.int64))

    def lookup(self, names: list[str], hashed: np.ndarray | None = None, taken: np.ndarray | None = None) -> np.ndarray:
        """The id of each name (int64), -1 where it is not held. ``hashed``: :func:`hashes` of ``names``,
        where the caller has them already; ``taken``: as for :meth:`HashIndex.lookup`."""
        return self._index.lookup(names, self._holds, hashed, taken)

    def _holds(self, ids: np.ndarray, names: list[str]) -> np.ndarray:
        """Whether each id holds the name given for it: lengths first, then the bytes, all at once."""
        raw, lengths = encoded(names)
        asked = np.frombuffer(raw, dtype=np.uint8)
        same = np.flatnonzero(self._len.view[ids] == lengths)
        if len(same) < len(ids):  # only the names of the length held are compared byte for byte
            asked = asked[gather_ranges(np.cumsum(lengths)[same] - lengths[same], lengths[same])[0]]
        pos, owner = gather_ranges(self._start.view[ids[same]], lengths[same])
        holds = np.zeros(len(ids), dtype=bool)
        holds[same] = True
        holds[same[owner[self._blob.view[pos] != asked]]] = False
        return holds

    # -- writing ------------------------------------------------------------
    def add(self, names: list[str], ids: np.ndarray, hashed: np.ndarray | None = None,
            taken: np.ndarray | None = None) -> None:
        """Hold distinct ``names`` (none held yet) at ``ids`` (ids without a name, or past the last);
        ``hashed`` and ``taken`` as :meth:`lookup` had them for these names, nothing added since."""
        if not names:
            return
        self._add_encoded(names, np.asarray(ids, dtype=np.int64), *encoded(names), hashed, taken)

    def _add_encoded(self, names: list[str], ids: np.ndarray, raw: bytes, lengths: np.ndarray,
                     hashed: np.ndarray | None = None, taken: np.ndarray | None = None) -> None:
        """:meth:`add` of names whose UTF-8 bytes are ``raw`` already, one after another (``lengths``)."""
        top = int(ids.max()) + 1
        if top > len(self._len):
            self._start.extend(np.zeros(top - len(self._start), dtype=np.int64))
            self._len.extend(np.full(top - len(self._len), -1, dtype=np.int32))
        self._start.view[ids] = len(self._blob) + np.cumsum(lengths) - lengths
        self._len.view[ids] = lengths
        self._blob.extend(np.frombuffer(raw, dtype=np.uint8))
        self._index.put(names, ids, hashed, taken)
        self._held += len(names)

    def remove(self, ids: np.ndarray) -> None:
        """Drop the names at ``ids`` (distinct, each holding one); the ids are free for :meth:`add`."""
        ids = np.asarray(ids, dtype=np.int64)
        if not len(ids):
            return
        self._index.discard(cast(list[str], self.take(ids)))  # each id holds a name
        self._dead += int(self._len.view[ids].sum())
        self._len.view[ids] = -1
        self._held -= len(ids)
        if self._dead > max(MIN_DEAD, DEAD_SHARE * len(self._blob)):
            self._pack()

    def _pack(self) -> None:
        """Rewrite the blob with the held names' bytes only, in id order."""
        held = np.flatnonzero(self._len.view >= 0)
        lengths = self._len.view[held].astype(np.int64)
        blob = Column(np.uint8)
        blob.extend(self._blob.view[gather_ranges(self._start.view[held], lengths)[0]])
        self._start.view[held] = np.cumsum(lengths) - lengths
        self._blob, self._dead = blob, 0

    # -- checkpoints --------------------------------------------------------
    def __reduce__(self):
        # Pickled (the compute stage written whole) as its arrays, copied (the pickle's buffers are written after
        # the table may have changed): the hash index keys Python's string hashes, which differ from process to
        # process, so it is built again where it is read back.
        return NameTable.from_state, ({k: np.array(v) for k, v in self.state().items()},)

    def state(self) -> dict:
        """The table as three arrays (views: write them out before the table changes)."""
        return {"blob": self._blob.view, "start": self._start.view, "len": self._len.view}

    @classmethod
    def from_state(cls, state: dict) -> NameTable:
        """A table of :meth:`state` (its bytes packed anew, in id order)."""
        lengths = np.asarray(state["len"], dtype=np.int32)
        held = np.flatnonzero(lengths >= 0)
        table = cls()
        table._start.extend(np.zeros(len(lengths), dtype=np.int64))
        table._len.extend(np.full(len(lengths), -1, dtype=np.int32))
        sizes = lengths[held].astype(np.int64)
        raw = np.asarray(state["blob"], dtype=np.uint8)[gather_ranges(np.asarray(state["start"])[held], sizes)[0]].tobytes()
        if len(held):
            # The bytes as they are (encoding the decoded names again was a sixth of a shard's restore): the
            # names are decoded only for their hashes.
            table._add_encoded(cls._decoded(raw, sizes), held, raw, sizes)
        return table

    @staticmethod
    def _decoded(raw: bytes, lengths: np.ndarray) -> list[str]:
        """The names of ``raw``, laid end to end (``lengths``)."""
        return decoded(np.frombuffer(raw, dtype=np.uint8), np.cumsum(lengths) - lengths, lengths)

    @classmethod
    def of(cls, names: list[str | None]) -> NameTable:
        """A table holding each name of ``names`` at its position (None: no name there)."""
        table = cls()
        if names:
            table._start.extend(np.zeros(len(names), dtype=np.int64))
            table._len.extend(np.full(len(names), -1, dtype=np.int32))
        held = [i for i, name in enumerate(names) if name is not None]
        table.add(cast(list[str], [names[i] for i in held]), np.array(held, dtype=np.int64))
        return table

