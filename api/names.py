"""The API's copy of the compute stage's vertex names: what a :class:`~pulsegraph.compute.ids.NameChanges` makes of it.

:class:`~pulsegraph.api.store.ResultStore` keeps the names by id, the index by name and the
names in name order (what a prefix search goes through) in a :class:`~pulsegraph.api.namebook.NameBook`;
with a window, ids are given back and reused, so a pull may rename ids it already has.
:func:`names_update` works the change out outside the store's lock, exactly as writing the
renames one by one would, in time that follows the change (an epoch's new names cost what
they are); the store writes the result under it.

The names on disk are :class:`NamesJournal` (``<data_dir>/results/names.log``, the result
archive's): what each pull changed, so that a restart names the epochs it serves from the
archive before the compute stage is up (:mod:`pulsegraph.api.archive`).
"""

from __future__ import annotations

import itertools
import logging
import operator
import os
import pickle
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from pulsegraph.api.namebook import NameBook
from pulsegraph.compute.ids import NameChanges

NAMES_FILE = "names.log"
# The journal is rewritten as one whole list once its changes outweigh that list this many times over
# (and at least JOURNAL_MIN bytes): a name is written ~1 + 1 / JOURNAL_SHARE times over its life.
JOURNAL_SHARE = 2
JOURNAL_MIN = 1 << 20

log = logging.getLogger(__name__)


@dataclass
class NamesUpdate:
    """A :class:`~pulsegraph.compute.ids.NameChanges` worked out against the store's names (outside its lock):
    what to swap in under it. ``book`` replaces the names whole (the change started at id 0); else ``writes``
    (id -> name) patch ids the book has, ``tail`` extends it, ``index`` says each touched name's id now (None:
    not indexed any more), and ``recent`` lists (sorted) the names indexed now that its name order lacks."""

    book: NameBook | None = None
    writes: dict[int, str] = field(default_factory=dict)
    tail: list[str] = field(default_factory=list)
    index: dict[str, int | None] = field(default_factory=dict)
    recent: list[str] = field(default_factory=list)


def names_update(book: NameBook, changes: NameChanges) -> NamesUpdate:
    """What ``changes`` makes of ``book`` (id -> name, name -> id, name order), in time linear in the changes
    (a whole list: in its names). An empty name names no vertex: it is never indexed. A name replaced on its
    id leaves the index only if the index still maps it to that id (it may have moved to another id first)."""
    start = changes.start
    if start == 0:  # the whole list (renames before it are in it)
        return NamesUpdate(book=NameBook(list(changes.names)))
    have = len(book)
    end = max(have, start + len(changes.names))
    if start > have:
        raise ValueError(f"names from id {start} on, but only {have} are known: ids would be skipped")
    ids = np.asarray(changes.ids).tolist()
    if any(not 0 <= i < end for i in ids):
        raise ValueError(f"a renamed id is outside the {end} ids known")
    # The names the written ids hold now, and the index's id of every name touched: one search of the book.
    olds = {i: book[i] for i in itertools.chain(ids, range(start, min(have, start + len(changes.names)))) if i < have}
    touched = list({*changes.renamed, *changes.names, *olds.values()})
    known = dict(zip(touched, book.get_many(touched)))
    final: dict[int, str] = {}
    moved: dict[str, int | None] = {}

    def id_of(n: str) -> int | None:
        return moved[n] if n in moved else known[n]

    def write(i: int, n: str) -> None:
        old = final[i] if i in final else olds.get(i, "")
        if old != n:
            if old and id_of(old) == i:
                moved[old] = None
            final[i] = n
        if n and id_of(n) != i:
            moved[n] = i

    for i, n in zip(ids, changes.renamed):
        write(i, n)
    for j, n in enumerate(changes.names):
        write(start + j, n)
    # The names indexed now that the name order may not hold yet; the ones that left the index stay there
    # until a rebuild (a search checks each name on the index).
    back = sorted(n for n, i in moved.items() if i is not None)
    return NamesUpdate(
        writes={i: n for i, n in final.items() if i < have}, tail=[final.get(i, "") for i in range(have, end)],
        index=moved, recent=[n for n, held in zip(back, book.in_order(back)) if not held],
    )


def as_patch(names: Sequence[str], changes: NameChanges) -> NameChanges:
    """``changes`` as a patch of ``names`` where they are a whole list (``start == 0``) no shorter than it:
    the ids whose name differs, renamed, and the ids past it, added. :func:`names_update` makes the same
    of either (the names of the ids are unique), but of the patch in time that follows the differences:
    a restart's first pull names every id anew, nearly all as the archive's journal had them (at 2.5 M
    names the whole list's index and sort took 2.5 s of the feed's take-in, the comparison takes 0.1 with a list
    and 0.7 with the name book at 3 M names, which reads its names 64 k at a time)."""
    new = changes.names
    if changes.start != 0 or not names or len(new) < len(names):
        return changes
    differ = list(itertools.compress(itertools.count(), map(operator.ne, names, new)))
    return NameChanges(len(names), list(new[len(names):]), np.array(differ, np.int64), [new[i] for i in differ])


def scan_id(names: list[str], name: str) -> int | None:
    """The id the book's index would give ``name`` (its last), by a pass over the list (``list.index``: milliseconds
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
    """The entries the book's index would hold for the names starting with ``prefix``, by one pass over the
    list: what a lookup is answered with while that index is being built (tens of milliseconds at millions of
    names, against a dictionary read). The route asks for a prefix of one character at least."""
    return {n: i for i, n in enumerate(names) if n and n.startswith(prefix)}


def search_names(id_of: Callable[[str], int | None], ordered: Iterator[str], prefix: str, limit: int, vertices: int,
                 scan: int, present: np.ndarray | None) -> list[str]:
    """The search of :meth:`pulsegraph.api.store.ResultStore.search`: the names ``ordered`` goes through (in name
    order, from ``prefix`` on), each checked on the index (``id_of``)."""
    out: list[str] = []
    for name in itertools.islice(ordered, scan):
        if len(out) >= limit or not name.startswith(prefix):
            break
        i_name = id_of(name)
        if i_name is not None and i_name < vertices and (present is None or bool(present[i_name])):
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

    def append(self, epoch: int, changes: NameChanges, names: Sequence[str]) -> None:
        """Journal ``changes`` (which made ``names``, the store's list now) as of ``epoch``. Raises OSError."""
        if changes.start == 0:
            self._rewrite(epoch, changes)
            return
        record = self._record(epoch, changes)
        with open(self.path, "ab") as fh:
            fh.write(record)
        self._bytes += len(record)
        if self._bytes > max(JOURNAL_MIN, JOURNAL_SHARE * self._whole):
            self._rewrite(epoch, NameChanges(0, list(names)))

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
