"""The packed name table (:class:`pulsegraph.snapshots.nametable.NameTable`) against a list and a dict.

Its index keeps 64-bit hashes, so a clash of two names is rare enough never to be met by chance;
the tests also force clashes with a hash of three values (monkeypatched in place of Python's string
hash), where most lookups find another name's id and must see that the bytes differ.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import pulsegraph.snapshots.nametable
from pulsegraph.snapshots.nametable import NameTable


def few_hashes(names: list[str]) -> np.ndarray:
    """Three hash values for every name there is: most names clash with another."""
    return np.array([sum(map(ord, name)) % 3 for name in names], dtype=np.uint64)


@pytest.fixture(params=["python", "clashing"])
def hashing(request, monkeypatch):
    if request.param == "clashing":
        monkeypatch.setattr(pulsegraph.snapshots.nametable, "hashes", few_hashes)
    return request.param


# Names of several lengths and scripts, a lone surrogate (JSON allows one), the empty name, pairs
# that differ in one byte at either end (a comparison that skipped bytes would take one for the other), and
# names with a newline (what a read of many names puts between them, where none holds one).
ODD = ["", "a", "ab", "ba", "é", "e\u0301", "日本", "\ud800", "x" * 300, "x" * 299 + "y", "y" + "x" * 299,
       "a\nb", "\n"]


def random_names(rng, k: int) -> list[str]:
    pool = [f"v{int(x)}" for x in rng.integers(0, 400, k)] + [ODD[int(i)] for i in rng.integers(0, len(ODD), k // 4 + 1)]
    return sorted(set(pool))


@pytest.mark.parametrize("seed", range(3))
def test_the_table_answers_as_a_list_and_a_dict_do(hashing, seed, monkeypatch):
    monkeypatch.setattr(pulsegraph.snapshots.nametable, "MIN_DEAD", 64)  # the blob is rewritten many times over
    monkeypatch.setattr(pulsegraph.snapshots.nametable, "DECODE_CHUNK", 7)  # reads of many names, a chunk at a time
    rng = np.random.default_rng(seed)
    table, names, index = NameTable(), [], {}
    free: list[int] = []
    for _ in range(80):
        # New names, some at ids given back, one batch at a time.
        batch = [n for n in random_names(rng, int(rng.integers(0, 16))) if n not in index]
        ids = []
        for name in batch:
            if free and rng.random() < 0.5:
                i = free.pop()
                names[i] = name
            else:
                i = len(names)
                names.append(name)
            ids.append(i)
            index[name] = i
        if rng.random() < 0.5:
            table.add(batch, np.array(ids, dtype=np.int64))
        else:  # as a shard adds the names its lookup did not find: the lookup's hash hits passed on
            taken = np.zeros(len(batch), dtype=bool)
            assert table.lookup(batch, taken=taken).tolist() == [-1] * len(batch)
            table.add(batch, np.array(ids, dtype=np.int64), taken=taken)
        gone = [n for n in list(index) if rng.random() < 0.15]
        table.remove(np.array([index[n] for n in gone], dtype=np.int64))
        for n in gone:
            i = index.pop(n)
            names[i] = None
            free.append(i)
        asked = random_names(rng, 40)
        assert table.lookup(asked).tolist() == [index.get(n, -1) for n in asked]
        assert len(table) == len(names) and table.held == len(index)
        assert table.tolist() == names and [table[i] for i in range(len(names))] == names
    again = NameTable.from_state({k: v.copy() for k, v in table.state().items()})
    assert again.tolist() == names and again.lookup(list(index)).tolist() == list(index.values())
    unpickled = pickle.loads(pickle.dumps(table))  # its hash index built again, as in another process
    assert unpickled.tolist() == names and unpickled.lookup(list(index)).tolist() == list(index.values())
    built = NameTable.of(names)
    assert built.tolist() == names and built.lookup(list(index)).tolist() == list(index.values())
    assert built.lookup([]).tolist() == [] and NameTable.of([]).lookup(["a"]).tolist() == [-1]


def test_a_lookup_tells_names_of_one_length_apart_by_their_bytes(monkeypatch):
    """Every name on one hash: only the byte comparison tells them apart."""
    monkeypatch.setattr(pulsegraph.snapshots.nametable, "hashes", lambda names: np.zeros(len(names), dtype=np.uint64))
    table = NameTable()
    table.add(["abc", "abd", "xbc"], np.array([0, 1, 2]))
    assert table.lookup(["abd", "xbc", "abc", "abe", "ab", "abcd"]).tolist() == [1, 2, 0, -1, -1, -1]
    table.remove(np.array([0]))
    assert table.lookup(["abc", "abd", "xbc"]).tolist() == [-1, 1, 2]
    table.add(["abc"], np.array([0]))
    assert table.lookup(["abc", "abd"]).tolist() == [0, 1]
