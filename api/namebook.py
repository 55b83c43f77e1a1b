"""The API's vertex names, packed: :class:`NameBook`, the names by id, the index by name and the names in name order.

The API process answers every route by name, so it holds every vertex's name. As a list of strings, a dict index
and a sorted list they cost ~133 bytes a vertex (a string object, a list slot, a dict entry, a sorted slot: 3 M
names of ~11 characters), the largest thing the API process held once its graph view moved to its parts. Here a
name costs ~39: its UTF-8 bytes, where they lie (12), its hash and id in the index (12), its place in name order (4).

A book is a packed base, never changed once built, and what changed since: the names past the base's ids, the ids
renamed, the names whose id changed, and the names indexed since, in name order. Those are plain lists and dicts
the feed thread writes an entry at a time, so requests read without the store's lock (as they read the list and
the dict before): each write is one step of the interpreter, and a read takes the book's state once, so a rebuild
that swaps in a new base is seen whole or not at all. Once the changes pass :data:`REBUILD_SHARE` of the base they
are folded into a new base, in NumPy: the base's bytes and hashes kept, the changed ones added, and the name order
sorted again by the names' first 16 bytes (a run sharing those, by the names themselves). UTF-8 bytes sort as
Python sorts the strings (by code point, lone surrogates included), so the order is the one ``sorted`` gives.

The hashes are Python's own string hash, salted per process: the book is never written anywhere (the names' journal
on disk is :class:`~pulsegraph.api.names.NamesJournal`'s). A lookup checks each id its hash finds against the name
there, so two names sharing a hash cost a second check, never a wrong id.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import itertools
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import overload

import numpy as np

from pulsegraph.base.arrays import gather_ranges
from pulsegraph.snapshots.nametable import ERRORS, encoded, hashes

log = logging.getLogger(__name__)

# The changes since the base (names, renames, moves) are folded into a new base once they pass this share of it,
# and at least REBUILD_MIN: amortized, a name is packed 1 / REBUILD_SHARE times over its life.
REBUILD_SHARE = 0.125
REBUILD_MIN = 4096
# The bytes of renamed names are dropped (the bytes packed again) once they are this share of all.
DEAD_SHARE = 0.5
# Names are put in order by this many leading bytes in NumPy; those sharing them, by the names themselves.
PREFIX = 16
CHUNK = 1 << 18
_ABSENT = -1  # not among the moved names (an id is never negative)


def _encoded(names: list[str]) -> tuple[bytes, np.ndarray]:
    raw, lens = encoded(names)
    return raw, lens.astype(np.int32)


def _offsets(lens: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lens), np.int64)
    np.cumsum(lens[:-1], out=out[1:])
    return out


@dataclass(frozen=True)
class _Base:
    """Names by id packed, their index by hash and their name order; never changed once built."""

    raw: bytes
    starts: np.ndarray  # int64: where each id's name starts in raw
    lens: np.ndarray  # int32: its length in bytes (0: the empty name, which names no vertex)
    keys: np.ndarray  # int64: the indexed names' hashes, sorted
    ids: np.ndarray  # int32: their ids
    order: np.ndarray  # int32: the indexed ids in name order, each name once

    @property
    def n(self) -> int:
        return len(self.starts)

    def name(self, i: int) -> str:
        s = int(self.starts[i])
        return self.raw[s : s + int(self.lens[i])].decode("utf-8", ERRORS)

    def holding(self, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Every (k, id) where the index holds ``names[k]`` at id, as the base named it: one search over the
        hashes, and a check of the name at each id found (a name not held is rarely found)."""
        h = hashes(names).view(np.int64)
        lo, hi = np.searchsorted(self.keys, h, "left"), np.searchsorted(self.keys, h, "right")
        pos, k = gather_ranges(lo, hi - lo)
        ids = self.ids[pos].astype(np.int64)
        same = np.fromiter((self.name(i) == names[j] for i, j in zip(ids.tolist(), k.tolist())), bool, count=len(ids))
        return k[same], ids[same]

    def last_holding(self, names: list[str]) -> np.ndarray:
        """Each name's id in the index as the base named it (its last, where a whole list named two), or -1."""
        out = np.full(len(names), -1, np.int64)
        k, ids = self.holding(names)
        np.maximum.at(out, k, ids)
        return out

    @classmethod
    def build(cls, raw: bytes, starts: np.ndarray, lens: np.ndarray, keyed: np.ndarray, indexed: np.ndarray,
              names: Sequence[str] | None = None) -> _Base:
        """The base over these bytes, with the ids ``indexed`` marks in the index (``keyed``: every id's hash);
        ``names``: the names by id where the caller has them as strings (a whole list), else decoded."""
        ids = np.flatnonzero(indexed).astype(np.int32)
        by_hash = np.argsort(keyed[ids], kind="stable")
        unsorted = cls(raw, starts, lens, keyed[ids][by_hash], ids[by_hash], ids)
        name = unsorted.name if names is None else names.__getitem__
        return dataclasses.replace(unsorted, order=_name_order(raw, starts, lens, ids, name))

    @classmethod
    def of(cls, names: list[str]) -> _Base:
        raw, lens = _encoded(names)
        return cls.build(raw, _offsets(lens), lens, hashes(names).view(np.int64), lens > 0, names)


def _name_order(raw: bytes, starts: np.ndarray, lens: np.ndarray, ids: np.ndarray, name) -> np.ndarray:
    """``ids`` sorted by their names (``name``: id -> str), each name once: by the first PREFIX bytes in NumPy, then
    each run sharing those by the names."""
    if len(ids) < 2:
        return ids
    buf = np.frombuffer(raw, np.uint8) if raw else np.zeros(1, np.uint8)
    st, ln = starts[ids], lens[ids]
    cols = np.arange(PREFIX)
    heads = np.zeros((len(ids), PREFIX), np.uint8)
    for a in range(0, len(ids), CHUNK):  # CHUNK x PREFIX positions at a time, not every name's at once
        at = slice(a, a + CHUNK)
        head = buf[np.minimum(st[at, None] + cols, len(buf) - 1)]
        head[cols >= ln[at, None]] = 0
        heads[at] = head
    # Big-endian words sort as the bytes do; a name shorter than PREFIX is padded with zero bytes, so it ties with
    # itself followed by NUL: ties go to the names themselves. Two stable sorts, the less significant word first.
    words = heads.view(">u8").astype(np.uint64)
    by = np.argsort(words[:, 1], kind="stable")
    by = by[np.argsort(words[by, 0], kind="stable")]
    out, words = ids[by], words[by]
    tie = np.flatnonzero((words[1:] == words[:-1]).all(axis=1))
    if not len(tie):
        return out
    keep = np.ones(len(out), bool)
    # Runs of ties: tie[k] says out[tie[k]] and out[tie[k] + 1] share their prefix.
    cut = np.flatnonzero(np.diff(tie) > 1)
    for a, b in zip(np.r_[tie[0], tie[cut + 1]].tolist(), (np.r_[tie[cut], tie[-1]] + 2).tolist()):
        run = sorted((name(i), i) for i in out[a:b].tolist())
        out[a:b] = [i for _, i in run]
        keep[a + 1 : b] = [run[k][0] != run[k - 1][0] for k in range(1, len(run))]
    return out[keep]


@dataclass
class _State:
    """A base and what changed since; swapped whole by a rebuild."""

    base: _Base
    tail: list[str] = field(default_factory=list)  # the names of the ids past the base's
    renamed: dict[int, str] = field(default_factory=dict)  # base ids named anew
    moved: dict[str, int | None] = field(default_factory=dict)  # name -> its id now (None: not indexed)
    recent: list[str] = field(default_factory=list)  # names indexed since, not in the base's order: sorted, replaced whole

    def __len__(self) -> int:
        return self.base.n + len(self.tail)

    def name(self, i: int) -> str:
        n = self.base.n
        if i >= n:
            return self.tail[i - n]
        if i < 0:
            raise IndexError(i)
        got = self.renamed.get(i)
        return self.base.name(i) if got is None else got

    def changes(self) -> int:
        return len(self.tail) + len(self.renamed) + len(self.moved)


class NameBook(Sequence[str]):
    """The vertex names by id (a read-only sequence), their index (:meth:`get`, :attr:`by_name`) and their order
    (:meth:`starting`); :meth:`apply` writes a pull's changes and :meth:`settle` folds them in, on one thread."""

    def __init__(self, names: list[str] | None = None) -> None:
        self._s = _State(_Base.of(list(names or [])))

    def __len__(self) -> int:
        return len(self._s)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        s = self._s
        if isinstance(i, slice):
            return [s.name(j) for j in range(*i.indices(len(s)))]
        return s.name(i + len(s) if i < 0 else i)

    def __eq__(self, other: object) -> bool:
        """Equal to a sequence of the same names (a test compares the book with a list)."""
        return isinstance(other, Sequence) and not isinstance(other, str) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # equal to lists, so not hashable, as they are

    def __iter__(self) -> Iterator[str]:
        s = self._s
        return (s.name(i) for i in range(len(s)))

    def get(self, name: str, default: int | None = None) -> int | None:
        """The id the index holds ``name`` at (its last, where a whole list named two), or ``default``."""
        s = self._s
        at = s.moved.get(name, _ABSENT)
        if at != _ABSENT:
            return default if at is None else at
        keys, h, best = s.base.keys, hash(name), -1
        k = int(keys.searchsorted(h))
        while name and k < len(keys) and keys[k] == h:  # a request's lookup: no arrays made for one name
            i = int(s.base.ids[k])
            if i > best and s.name(i) == name and s.base.name(i) == name:
                best = i
            k += 1
        return default if best < 0 else best

    def get_many(self, names: list[str]) -> list[int | None]:
        """:meth:`get` of each name, the base searched once for all."""
        s = self._s
        moved = [s.moved.get(n, _ABSENT) for n in names]
        asked = [n for n, at in zip(names, moved) if at == _ABSENT and n]
        found = iter(s.base.last_holding(asked).tolist()) if asked else iter(())
        out: list[int | None] = []
        for n, at in zip(names, moved):
            if at != _ABSENT:
                out.append(at)
            elif not n:
                out.append(None)
            else:
                i = next(found)
                # The name at that id now: a name renamed away is among the moved, unless read mid-write.
                out.append(i if i >= 0 and s.name(i) == n else None)
        return out

    @property
    def by_name(self) -> Mapping[str, int]:
        """The index as a read-only mapping (name -> id): what a test compares with a dict."""
        return _Index(self)

    def in_order(self, names: list[str]) -> list[bool]:
        """Is each name among those :meth:`starting` goes through (maybe no longer indexed)?"""
        s = self._s
        return [held >= 0 or _holds(s.recent, n) for n, held in zip(names, s.base.last_holding(names).tolist())]

    def starting(self, prefix: str) -> Iterator[str]:
        """The names in name order from the first one not below ``prefix`` on; maybe some no longer indexed (a
        search checks each on the index), never one twice."""
        s = self._s
        base, order = s.base, s.base.order
        lo, hi = 0, len(order)
        while lo < hi:
            mid = (lo + hi) // 2
            if base.name(int(order[mid])) < prefix:
                lo = mid + 1
            else:
                hi = mid
        recent = s.recent
        return heapq.merge((base.name(int(order[k])) for k in range(lo, len(order))),
                           itertools.islice(recent, bisect.bisect_left(recent, prefix), None))

    def apply(self, writes: dict[int, str], tail: list[str], moved: dict[str, int | None], recent: list[str]) -> None:
        """Write a pull's changes: ``writes`` (id -> name) to ids it has, ``tail`` past them, ``moved`` (each touched
        name's id now), ``recent`` (sorted, the names indexed now that :meth:`in_order` did not find). Readers
        may see some of them before the rest: never a wrong id for a name (a lookup checks the name at the id)."""
        s = self._s
        n = s.base.n
        for i, name in writes.items():
            if i >= n:
                s.tail[i - n] = name
            else:
                s.renamed[i] = name
        s.tail.extend(tail)
        s.moved.update(moved)
        if recent:
            s.recent = list(heapq.merge(s.recent, recent))

    def settle(self) -> None:
        """Fold the changes into a new base once they are due (seconds at millions of names: the feed thread calls
        this outside the store's lock, and it is the only writer, so nothing is written meanwhile)."""
        s = self._s
        if s.changes() > max(REBUILD_MIN, REBUILD_SHARE * s.base.n):
            t0 = time.perf_counter()
            self._s = _State(_rebuilt(s))
            log.debug("vertex names packed again: %d names in %.2f s", len(self._s), time.perf_counter() - t0)

    @property
    def nbytes(self) -> int:
        b = self._s.base
        return len(b.raw) + sum(a.nbytes for a in (b.starts, b.lens, b.keys, b.ids, b.order))


def _holds(run: list[str], name: str) -> bool:
    i = bisect.bisect_left(run, name)
    return i < len(run) and run[i] == name


def _rebuilt(s: _State) -> _Base:
    """``s`` folded into a new base: the base's bytes and hashes kept, the changed names' added."""
    b = s.base
    n = len(s)
    over = np.fromiter(itertools.chain(s.renamed, range(b.n, n)), np.int64, count=len(s.renamed) + len(s.tail))
    names = [*s.renamed.values(), *s.tail]
    added, added_lens = _encoded(names)
    raw = b.raw + added
    starts, lens = np.zeros(n, np.int64), np.zeros(n, np.int32)
    starts[: b.n], lens[: b.n] = b.starts, b.lens
    starts[over], lens[over] = len(b.raw) + _offsets(added_lens), added_lens
    keyed = np.zeros(n, np.int64)
    keyed[b.ids] = b.keys
    keyed[over] = hashes(names).view(np.int64)
    # Indexed: the base's ids, less those named anew and those whose name moved, plus each moved name's id now.
    indexed = np.zeros(n, bool)
    indexed[b.ids] = True
    indexed[over] = False
    indexed[b.holding(list(s.moved))[1]] = False
    # Each moved name's id now (its hash too: the base may have held the name there unindexed, without one).
    now = {name: at for name, at in s.moved.items() if at is not None}
    ats = np.fromiter(now.values(), np.int64, count=len(now))
    indexed[ats], keyed[ats] = True, hashes(list(now)).view(np.int64)
    if len(raw) - int(lens.sum()) > DEAD_SHARE * len(raw):
        pos, _ = gather_ranges(starts, lens)
        raw, starts = np.frombuffer(raw, np.uint8)[pos].tobytes(), _offsets(lens)
    return _Base.build(raw, starts, lens, keyed, indexed)


class _Index(Mapping[str, int]):
    def __init__(self, book: NameBook) -> None:
        self._book = book

    def __getitem__(self, name: str) -> int:
        at = self._book.get(name)
        if at is None:
            raise KeyError(name)
        return at

    def __iter__(self) -> Iterator[str]:
        book = self._book
        return (name for i, name in enumerate(book) if name and book.get(name) == i)

    def __len__(self) -> int:
        return sum(1 for _ in self)
