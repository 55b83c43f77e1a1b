"""The API's copy of the compute stage's vertex names: what a :class:`~pulsegraph.compute.ids.NameChanges` makes of it.

:class:`~pulsegraph.api.store.ResultStore` keeps the names by id, the index by name and the
sorted list of indexed names; with a window, ids are given back and reused, so a
pull may rename ids it already has. :func:`names_update` works the change out
outside the store's lock, exactly as writing the renames one by one would; the
store swaps the result in under it.

The sorted names (what a prefix search bisects) are :class:`SortedNames`: a large sorted
list rebuilt now and then and a small one of the names indexed since, so an epoch's new
names cost what they are. One sorted list, rebuilt whenever a name came (every epoch of a
growing graph), cost a pass over every name an epoch: 0.6-0.8 s and a new list of 3 M
pointers at 3 M vertices (``bench.structures api-names``).

The names on disk are :class:`NamesJournal` (``<data_dir>/results/names.log``, the result
archive's): what each pull changed, so that a restart names the epochs it serves from the
archive before the compute stage is up (:mod:`pulsegraph.api.archive`).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import logging
import operator
import os
import pickle
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from pulsegraph.compute.ids import NameChanges

# The names indexed since the last rebuild are merged into the base once they pass this share of
# it (and at least REBUILD_MIN): amortized, a name is copied 1 / REBUILD_SHARE times over its life.
REBUILD_SHARE = 0.125
REBUILD_MIN = 4096
NAMES_FILE = "names.log"
# Names indexed per slice by whole_index (about 10 ms of the interpreter each).
INDEX_SLICE = 1 << 15
# The journal is rewritten as one whole list once its changes outweigh that list this many times over
# (and at least JOURNAL_MIN bytes): a name is written ~1 + 1 / JOURNAL_SHARE times over its life.
JOURNAL_SHARE = 2
JOURNAL_MIN = 1 << 20

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SortedNames:
    """Names in name order, each once, as two sorted lists: ``base`` and the ``recent`` ones. Names
    that left the index may linger until the next rebuild (a search checks each name on the index),
    never twice. Never changed once made (a search may hold it while the feed thread makes the next)."""

    base: list[str] = field(default_factory=list)
    recent: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.base) + len(self.recent)

    def __iter__(self) -> Iterator[str]:
        return heapq.merge(self.base, self.recent)

    def __contains__(self, name: str) -> bool:
        return any(_holds(run, name) for run in (self.base, self.recent))

    def starting(self, prefix: str) -> Iterator[str]:
        """The names from the first one not below ``prefix`` on, in order."""
        return heapq.merge(*(itertools.islice(run, bisect.bisect_left(run, prefix), None) for run in (self.base, self.recent)))

    def added(self, names: list[str], indexed: Callable[[str], bool]) -> SortedNames:
        """With ``names`` (sorted, distinct) held too; a rebuild, when one is due, keeps only the names
        ``indexed`` says are in the index."""
        new = [n for n in names if n not in self]
        if not new:
            return self
        recent = sorted(self.recent + new)  # two sorted runs: timsort merges them in linear time
        if len(recent) <= max(REBUILD_MIN, REBUILD_SHARE * len(self.base)):
            return SortedNames(self.base, recent)
        return SortedNames([n for n in sorted(self.base + recent) if indexed(n)])


def _holds(run: list[str], name: str) -> bool:
    i = bisect.bisect_left(run, name)
    return i < len(run) and run[i] == name


@dataclass
class NamesUpdate:
    """A :class:`~pulsegraph.compute.ids.NameChanges` worked out against the store's names (outside its lock):
    what to swap in under it. ``names``/``full_index`` replace the list and the index whole (the change
    started at id 0); else ``writes`` (id -> name) patch ids the list has, ``tail`` extends it, and
    ``index`` says each touched name's id now (None: not indexed any more). ``sorted_names`` is the
    sorted list of the indexed names either way."""

    sorted_names: SortedNames
    names: list[str] | None = None
    full_index: dict[str, int] | None = None
    writes: dict[int, str] = field(default_factory=dict)
    tail: list[str] = field(default_factory=list)
    index: dict[str, int | None] = field(default_factory=dict)


def names_update(names: list[str], index: dict[str, int], sorted_names: SortedNames, changes: NameChanges) -> NamesUpdate:
    """What ``changes`` makes of ``names`` (id -> name), ``index`` (name -> id) and ``sorted_names``, in time
    linear in the names plus the changes. An empty name names no vertex: it is never indexed. A name
    replaced on its id leaves the index only if the index still maps it to that id (it may have moved
    to another id first)."""
    start = changes.start
    if start == 0:  # the whole list (renames before it are in it)
        whole = list(changes.names)
        full = whole_index(whole)
        return NamesUpdate(SortedNames(sorted(full)), names=whole, full_index=full)
    end = max(len(names), start + len(changes.names))
    if start > len(names):
        raise ValueError(f"names from id {start} on, but only {len(names)} are known: ids would be skipped")
    final: dict[int, str] = {}
    moved: dict[str, int | None] = {}

    def id_of(n: str) -> int | None:
        return moved[n] if n in moved else index.get(n)

    def write(i: int, n: str) -> None:
        old = final[i] if i in final else (names[i] if i < len(names) else "")
        if old != n:
            if old and id_of(old) == i:
                moved[old] = None
            final[i] = n
        if n and id_of(n) != i:
            moved[n] = i

    ids = np.asarray(changes.ids).tolist()
    if any(not 0 <= i < end for i in ids):
        raise ValueError(f"a renamed id is outside the {end} ids known")
    for i, n in zip(ids, changes.renamed):
        write(i, n)
    for j, n in enumerate(changes.names):
        write(start + j, n)
    if moved:
        # The names indexed now that the sorted names may not hold yet; the ones that left the index
        # stay there until a rebuild (a search checks each name on the index).
        back = sorted(n for n, i in moved.items() if i is not None)
        sorted_names = sorted_names.added(back, lambda n: id_of(n) is not None)
    return NamesUpdate(
        sorted_names, writes={i: n for i, n in final.items() if i < len(names)},
        tail=[final.get(i, "") for i in range(len(names), end)], index=moved,
    )


def as_patch(names: list[str], changes: NameChanges) -> NameChanges:
    """``changes`` as a patch of ``names`` where they are a whole list (``start == 0``) no shorter than it:
    the ids whose name differs, renamed, and the ids past it, added. :func:`names_update` makes the same
    of either (the names of the ids are unique), but of the patch in time that follows the differences:
    a restart's first pull names every id anew, nearly all as the archive's journal had them (at 2.5 M
    names the whole list's index and sort took 2.5 s of the feed's take-in, the comparison takes 0.1)."""
    new = changes.names
    if changes.start != 0 or not names or len(new) < len(names):
        return changes
    differ = list(itertools.compress(itertools.count(), map(operator.ne, names, new)))
    return NameChanges(len(names), list(new[len(names):]), np.array(differ, np.int64), [new[i] for i in differ])


def whole_index(names: list[str]) -> dict[str, int]:
    """``names`` (by id) indexed by name: a name's last id, never the empty name (which names no vertex). Built a
    slice at a time, in C within each (a fifth quicker than a comprehension at millions): a thread building
    it hands the interpreter over between slices, so requests are served meanwhile (one call over millions of
    names holds it for most of a second)."""
    index: dict[str, int] = {}
    for at in range(0, len(names), INDEX_SLICE):
        index.update(zip(names[at : at + INDEX_SLICE], range(at, at + INDEX_SLICE)))
    index.pop("", None)
    return index


def sorted_in_slices(names: list[str]) -> list[str]:
    """``sorted(names)``, a slice at a time and then in merges of two sorted runs (which timsort does in
    linear time), so that the thread sorting hands the interpreter over between them: one sort of 2.5 M
    names holds it for half a second, the largest merge here for a fifth of that."""
    runs = [sorted(names[at : at + INDEX_SLICE]) for at in range(0, len(names), INDEX_SLICE)]
    while len(runs) > 1:
        runs = [sorted(runs[k] + runs[k + 1]) if k + 1 < len(runs) else runs[k] for k in range(0, len(runs), 2)]
    return runs[0] if runs else []


def scan_id(names: list[str], name: str) -> int | None:
    """The id :func:`whole_index` would give ``name``, by a pass over the list (``list.index``: milliseconds
    at millions of names)."""
    if not name:  # names no vertex (the ids given back hold it)
        return None
    at = None
    try:
        while True:
            at = names.index(name, 0 if at is None else at + 1)
    except ValueError:
        return at


def scan_index(names: list[str], prefix: str) -> dict[str, int]:
    """The entries :func:`whole_index` would hold for the names starting with ``prefix``, by one pass over the
    list: what a lookup is answered with while that index is being built (tens of milliseconds at millions of
    names, against a dictionary read). The route asks for a prefix of one character at least."""
    return {n: i for i, n in enumerate(names) if n and n.startswith(prefix)}


def search_names(index: dict[str, int], names: SortedNames, prefix: str, limit: int, vertices: int, scan: int,
                 present: np.ndarray | None) -> list[str]:
    """The search of :meth:`pulsegraph.api.store.ResultStore.search` over ``index`` and its sorted ``names``."""
    out: list[str] = []
    for name in itertools.islice(names.starting(prefix), scan):
        if len(out) >= limit or not name.startswith(prefix):
            break
        i_name = index.get(name, vertices)
        if i_name < vertices and (present is None or bool(present[i_name])):
            out.append(name)
    return out


def apply_names(names: list[str], changes: NameChanges) -> list[str]:
    """``names`` (by id) after ``changes``, in place when it can be: renames first, then the names from
    ``start`` on (:class:`~pulsegraph.compute.ids.NameChanges`); ``start == 0`` gives the whole list. The
    list alone, as :func:`names_update` makes it, without the index a replay does not need."""
    if changes.start == 0:
        return list(changes.names)
    end = max(len(names), changes.start + len(changes.names))
    if changes.start > len(names):
        raise ValueError(f"names from id {changes.start} on, but only {len(names)} are known")
    names.extend([""] * (end - len(names)))
    for i, n in zip(np.asarray(changes.ids).tolist(), changes.renamed):
        if not 0 <= i < end:
            raise ValueError(f"a renamed id {i} is outside the {end} ids known")
        names[i] = n
    names[changes.start : changes.start + len(changes.names)] = changes.names
    return names


class NamesJournal:
    """``names.log`` in the archive's folder: the vertex names as the API received them, so that a restart can
    name its archived epochs before the compute stage is up.

    Each record is one pull's :class:`~pulsegraph.compute.ids.NameChanges`, tagged with the newest epoch the
    store held after it: ``length (4 bytes) | crc32 (4 bytes) | pickle((epoch, changes))``, appended without
    fsync (as the epoch files: a power cut costs the newest few, and :meth:`replay` stops at a torn or
    foreign record). A whole list (``start == 0``: the first pull after a start) replaces the file, and so
    does the store's list now once the changes outweigh it (:meth:`append`); so the file stays within a few
    times the names' own size."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._bytes = self.path.stat().st_size if self.path.exists() else 0
        self._whole = 0  # the size of the whole list the file starts with (0: unknown, or none)

    def append(self, epoch: int, changes: NameChanges, names: list[str]) -> None:
        """Journal ``changes`` (which made ``names``, the store's list now) as of ``epoch``. Raises OSError."""
        if changes.start == 0:
            self._rewrite(epoch, changes)
            return
        record = self._record(epoch, changes)
        with open(self.path, "ab") as fh:
            fh.write(record)
        self._bytes += len(record)
        if self._bytes > max(JOURNAL_MIN, JOURNAL_SHARE * self._whole):
            self._rewrite(epoch, NameChanges(0, names))

    def _rewrite(self, epoch: int, whole: NameChanges) -> None:
        record = self._record(epoch, whole)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as fh:
            fh.write(record)
        os.replace(tmp, self.path)
        self._bytes = self._whole = len(record)

    @staticmethod
    def _record(epoch: int, changes: NameChanges) -> bytes:
        body = pickle.dumps((epoch, changes), protocol=5)
        return len(body).to_bytes(4, "little") + zlib.crc32(body).to_bytes(4, "little") + body

    def replay(self, through: int) -> list[str] | None:
        """The names as of epoch ``through``: every record tagged at or below it, in order (a pull that
        changed no name wrote none). None when that cannot be trusted: no journal, one that does not begin
        with a whole list (a write failed and it was dropped), or a torn record before the first one tagged
        above ``through`` (the changes it held are lost)."""
        try:
            data = self.path.read_bytes()
        except OSError:
            return None
        names: list[str] | None = None
        at = 0
        while at < len(data):
            size, crc = int.from_bytes(data[at : at + 4], "little"), int.from_bytes(data[at + 4 : at + 8], "little")
            body = data[at + 8 : at + 8 + size]
            if len(body) != size or zlib.crc32(body) != crc:
                log.warning("result archive: %s is torn at byte %d", self.path, at)
                return None
            try:
                epoch, changes = pickle.loads(body)
            except (pickle.UnpicklingError, EOFError, AttributeError, TypeError, ValueError) as exc:
                log.warning("result archive: %s holds a record it cannot read (%s)", self.path, exc)
                return None
            if epoch > through:
                break
            if names is None and changes.start != 0:
                return None  # changes to a list it never held
            try:
                names = apply_names(names or [], changes)
            except ValueError as exc:
                log.warning("result archive: %s does not replay (%s)", self.path, exc)
                return None
            at += 8 + size
        return names

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)
        self._bytes = self._whole = 0
