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
are folded into a new base, in NumPy, at the cost of what changed: the base's bytes kept and the changed names'
added, the changed names sorted (by their first 16 bytes, read as two words; a run sharing those, by the names
themselves) and merged into the base's index and name order, each one's place there bracketed among every 64th
name's and found by a binary search all of them run in step. UTF-8 bytes sort as Python sorts the strings (by code
point, lone surrogates included), so the order is the one ``sorted`` gives. (Sorting every name again, as the fold
did first, took ~3.6 s at 3 M names on the feed thread; merging, 0.7 s.)

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
from pulsegraph.snapshots.nametable import ERRORS, decoded, encoded, hashes

log = logging.getLogger(__name__)

# The changes since the base (names, renames, moves) are folded into a new base once they pass this share of it,
# and at least REBUILD_MIN: amortized, a name is packed 1 / REBUILD_SHARE times over its life.
REBUILD_SHARE = 0.125
REBUILD_MIN = 4096
# The bytes of renamed names are dropped (the bytes packed again) once they are this share of all.
DEAD_SHARE = 0.5
# Names are put in order by their first 16 bytes (two big-endian words) in NumPy; those sharing them, by the names.
_ALL = (1 << 64) - 1
_TOP = np.array([_ALL ^ (_ALL >> (8 * m)) for m in range(9)], np.uint64)  # a word's first m bytes kept
# A fold brackets each new name's place in the order among every this-many-th name's, then searches the bracket.
_STRIDE = 64
# Names read by id go _READ at a time: each read turns their offsets into Python ints at once.
_READ = 1 << 16
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
        by = np.argsort(h)
        h = h[by]  # searched in order: each search starts where the last ended (~3x quicker at 3 M keys)
        lo, hi = np.searchsorted(self.keys, h, "left"), np.searchsorted(self.keys, h, "right")
        pos, k = gather_ranges(lo, hi - lo)
        k = by[k]
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
    def of(cls, names: list[str]) -> _Base:
        """The base of a whole list, every non-empty name indexed (a fold merges into a base: :func:`_rebuilt`)."""
        raw, lens = _encoded(names)
        starts = _offsets(lens)
        ids = np.flatnonzero(lens > 0).astype(np.int32)
        keyed = hashes(names).view(np.int64)[ids]
        by_hash = np.argsort(keyed, kind="stable")
        order = _name_order(_Words(raw, starts, lens), ids, names.__getitem__)
        return cls(raw, starts, lens, keyed[by_hash], ids[by_hash], order)


class _Words:
    """Each id's first 16 bytes of name as two big-endian words, zero past the name's end: compared as pairs, the
    words order names as their bytes do (a name shorter than 16 bytes ties with itself followed by NUL: ties go to
    the names themselves). Read where the bytes lie, through an 8-byte view at every byte offset."""

    def __init__(self, raw: bytes, starts: np.ndarray, lens: np.ndarray) -> None:
        padded = np.frombuffer(raw + bytes(16), np.uint8)
        self._at = np.ndarray((len(padded) - 7,), ">u8", padded, 0, (1,))
        self._starts, self._lens = starts, lens

    def __call__(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        st, ln = self._starts[ids], self._lens[ids]
        return (self._at[st] & _TOP[np.minimum(ln, 8)]), (self._at[st + 8] & _TOP[np.clip(ln - 8, 0, 8)])


def _name_order(words: _Words, ids: np.ndarray, name) -> np.ndarray:
    """``ids`` sorted by their names (``name``: id -> str), each name once (at its last id): by their words in NumPy,
    then each run sharing those by the names."""
    if len(ids) < 2:
        return ids
    w0, w1 = words(ids)
    by = np.lexsort((w1, w0))
    out, w0, w1 = ids[by], w0[by], w1[by]
    tie = np.flatnonzero((w0[1:] == w0[:-1]) & (w1[1:] == w1[:-1]))
    if not len(tie):
        return out
    keep = np.ones(len(out), bool)
    # Runs of ties: tie[k] says out[tie[k]] and out[tie[k] + 1] share their prefix.
    cut = np.flatnonzero(np.diff(tie) > 1)
    for a, b in zip(np.r_[tie[0], tie[cut + 1]].tolist(), (np.r_[tie[cut], tie[-1]] + 2).tolist()):
        run = sorted((name(i), i) for i in out[a:b].tolist())
        out[a:b] = [i for _, i in run]
        # A name held at two ids (a whole list named both) keeps the last, the one the index gives: a fold takes it
        # out of the order only when the name moves, and then puts it back at its id now.
        keep[a : b - 1] = [run[k][0] != run[k + 1][0] for k in range(len(run) - 1)]
    return out[keep]


def _merged_order(words: _Words, kept: np.ndarray, new: np.ndarray, name) -> np.ndarray:
    """``kept`` and ``new`` (ids, each in name order, no name in both) merged in name order: each new id's place in
    ``kept`` bracketed by a search of its words among every :data:`_STRIDE`-th kept id's, then found by a binary
    search within the bracket that all of them run in step, comparing words (names where those tie). (Reading every
    kept id's words and searching those was slower: 3 M scattered reads, against ~7 a new name here.)"""
    q0, q1 = words(new)
    asked, marks = _prefixes(q0, q1), _prefixes(*words(kept[::_STRIDE]))
    lo = np.maximum(np.searchsorted(marks, asked, "left") - 1, 0) * _STRIDE
    hi = np.minimum(np.searchsorted(marks, asked, "right") * _STRIDE, len(kept))
    while len(act := np.flatnonzero(lo < hi)):
        mid = (lo[act] + hi[act]) >> 1
        h0, h1 = words(kept[mid])
        a0, a1 = q0[act], q1[act]
        below = (h0 < a0) | ((h0 == a0) & (h1 < a1))
        for t in np.flatnonzero((h0 == a0) & (h1 == a1)).tolist():
            below[t] = name(int(kept[mid[t]])) < name(int(new[act[t]]))
        lo[act] = np.where(below, mid + 1, lo[act])
        hi[act] = np.where(below, hi[act], mid)
    return _inserted(kept, lo, new)


def _prefixes(w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    """The two words as one 16-byte string each: NumPy sorts and searches those as it would the words in pairs
    (trailing NULs compare as padding, as the words' zeros past a name's end do)."""
    out = np.empty((len(w0), 2), ">u8")
    out[:, 0], out[:, 1] = w0, w1
    return out.view("S16").ravel()


def _inserted(a: np.ndarray, at: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` put into ``a`` before the places ``at`` (not decreasing; equal places keep the values' order): one
    pass, where ``np.insert`` sorts the places again."""
    out = np.empty(len(a) + len(values), a.dtype)
    put = at + np.arange(len(at))
    rest = np.ones(len(out), bool)
    rest[put] = False
    out[put], out[rest] = values, a
    return out


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

    def names_between(self, lo: int, hi: int) -> list[str]:
        """The names of ids ``lo`` to ``hi - 1``, the base's decoded together with
        :func:`~pulsegraph.snapshots.nametable.decoded` (a name read alone costs ~1.5 us, most of it indexing NumPy
        scalars), then the renames and the tail over them."""
        b = self.base
        top = min(hi, b.n)
        out: list[str] = []
        if lo < top:
            out = decoded(np.frombuffer(b.raw, dtype=np.uint8), b.starts[lo:top], b.lens[lo:top])
            if self.renamed:
                get = self.renamed.get
                out = [get(i, name) for i, name in zip(range(lo, top), out)]
        if hi > b.n:
            out.extend(self.tail[max(lo - b.n, 0) : hi - b.n])
        return out


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
            lo, hi, step = i.indices(len(s))
            return s.names_between(lo, hi) if step == 1 else [s.name(j) for j in range(lo, hi, step)]
        return s.name(i + len(s) if i < 0 else i)

    def __eq__(self, other: object) -> bool:
        """Equal to a sequence of the same names (a test compares the book with a list)."""
        return isinstance(other, Sequence) and not isinstance(other, str) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]  # equal to lists, so not hashable, as they are

    def __iter__(self) -> Iterator[str]:
        """The names by id, read :data:`_READ` at a time (a relaunch's first pull compares every one with its list)."""
        s = self._s
        n = len(s)
        return itertools.chain.from_iterable(s.names_between(lo, min(lo + _READ, n)) for lo in range(0, n, _READ))

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
    """``s`` folded into a new base: the base's bytes, index and order kept, less what changed; the changed names'
    bytes added, and their ids merged into the index and the order."""
    b = s.base
    n = len(s)
    over = np.fromiter(itertools.chain(s.renamed, range(b.n, n)), np.int64, count=len(s.renamed) + len(s.tail))
    names = [*s.renamed.values(), *s.tail]
    added, added_lens = _encoded(names)
    raw = b.raw + added
    starts, lens = np.zeros(n, np.int64), np.zeros(n, np.int32)
    starts[: b.n], lens[: b.n] = b.starts, b.lens
    starts[over], lens[over] = len(b.raw) + _offsets(added_lens), added_lens
    # Out of the base's index and order: the ids named anew, those holding a moved name, and each moved name's id
    # now (put back with its name now: the base may have held that id unindexed, or under another name).
    now = {name: at for name, at in s.moved.items() if at is not None}
    ats = np.fromiter(now.values(), np.int64, count=len(now))
    gone = np.zeros(n, bool)
    gone[over] = True
    gone[b.holding(list(s.moved))[1]] = True
    gone[ats] = True
    if len(raw) - int(lens.sum()) > DEAD_SHARE * len(raw):
        pos, _ = gather_ranges(starts, lens)
        raw, starts = np.frombuffer(raw, np.uint8)[pos].tobytes(), _offsets(lens)
    stay = ~gone[b.ids]
    new_keys = hashes(list(now)).view(np.int64)
    by = np.argsort(new_keys, kind="stable")
    new_keys, new_ids = new_keys[by], ats[by].astype(np.int32)
    keys, ids = b.keys[stay], b.ids[stay]
    at = np.searchsorted(keys, new_keys)  # a name's hash among equal ones may go anywhere: a lookup reads them all
    keys, ids = _inserted(keys, at, new_keys), _inserted(ids, at, new_ids)
    words = _Words(raw, starts, lens)
    kept = b.order[~gone[b.order]]
    unsorted = _Base(raw, starts, lens, keys, ids, kept)
    new = _name_order(words, ats.astype(np.int32), unsorted.name)
    return dataclasses.replace(unsorted, order=_merged_order(words, kept, new, unsorted.name))


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
