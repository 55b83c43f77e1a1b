"""The API's copy of the compute stage's vertex names: what a :class:`~compute.ids.NameChanges` makes of it.

:class:`~api.store.ResultStore` keeps the names by id, the index by name and the
sorted list of indexed names; with a window, ids are given back and reused, so a
pull may rename ids it already has. :func:`names_update` works the change out
outside the store's lock, exactly as writing the renames one by one would; the
store swaps the result in under it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from compute.ids import NameChanges


@dataclass
class NamesUpdate:
    """A :class:`~compute.ids.NameChanges` worked out against the store's names (outside its lock):
    what to swap in under it. ``names``/``full_index`` replace the list and the index whole (the change
    started at id 0); else ``writes`` (id -> name) patch ids the list has, ``tail`` extends it, and
    ``index`` says each touched name's id now (None: not indexed any more). ``sorted_names`` is the
    sorted list of the indexed names either way."""

    sorted_names: list[str]
    names: list[str] | None = None
    full_index: dict[str, int] | None = None
    writes: dict[int, str] = field(default_factory=dict)
    tail: list[str] = field(default_factory=list)
    index: dict[str, int | None] = field(default_factory=dict)


def names_update(names: list[str], index: dict[str, int], sorted_names: list[str], changes: NameChanges) -> NamesUpdate:
    """What ``changes`` makes of ``names`` (id -> name), ``index`` (name -> id) and ``sorted_names``, in time
    linear in the names plus the changes. An empty name names no vertex: it is never indexed. A name
    replaced on its id leaves the index only if the index still maps it to that id (it may have moved
    to another id first)."""
    start = changes.start
    if start == 0:  # the whole list (renames before it are in it)
        whole = list(changes.names)
        full = {n: i for i, n in enumerate(whole) if n}
        return NamesUpdate(sorted(full), names=whole, full_index=full)
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
        # Two sorted runs (the untouched names, the touched ones still indexed): timsort merges them in
        # linear time, and a name that moved between ids is in the second run only, once.
        back = sorted(n for n, i in moved.items() if i is not None)
        sorted_names = sorted([n for n in sorted_names if n not in moved] + back)
    return NamesUpdate(
        sorted_names, writes={i: n for i, n in final.items() if i < len(names)},
        tail=[final.get(i, "") for i in range(len(names), end)], index=moved,
    )
