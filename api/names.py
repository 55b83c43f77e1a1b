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
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from pulsegraph.compute.ids import NameChanges

# The names indexed since the last rebuild are merged into the base once they pass this share of
# it (and at least REBUILD_MIN): amortized, a name is copied 1 / REBUILD_SHARE times over its life.
REBUILD_SHARE = 0.125
REBUILD_MIN = 4096


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
        full = {n: i for i, n in enumerate(whole) if n}
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
