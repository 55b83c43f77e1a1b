"""The compute stage's name -> id index (:class:`pulsegraph.compute.ids.NameIndex` over a packed
:class:`~pulsegraph.snapshots.nametable.NameTable`) against a dict.

The index keeps 64-bit hashes, so a clash of two names is rare enough never to be met by chance;
the tests force clashes with a hash of a handful of values (monkeypatched in place of Python's
string hash) and hold the index, and the reused-id stream of ``test_reuse`` on top of it, to what a
dict would answer.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import pulsegraph.snapshots.nametable
from pulsegraph.compute.ids import NameIndex
from pulsegraph.snapshots.nametable import NameTable
from tests.compute import test_reuse


def few_hashes(names: list[str]) -> np.ndarray:
    """Three hash values for every name there is: most names clash with another."""
    return np.array([sum(map(ord, name)) % 3 for name in names], dtype=np.uint64)


@pytest.fixture(params=["python", "clashing"])
def hashing(request, monkeypatch):
    if request.param == "clashing":
        monkeypatch.setattr(pulsegraph.snapshots.nametable, "hashes", few_hashes)
    return request.param


@pytest.mark.parametrize("seed", range(3))
def test_the_index_answers_as_a_dict_does(hashing, seed):
    rng = np.random.default_rng(seed)
    table = NameTable()
    idx, model = NameIndex(table), {}
    free: list[int] = []
    for step in range(60):
        # New names, some at ids given back (as VertexIds.name does), one batch at a time.
        batch = sorted({f"v{int(x)}" for x in rng.integers(0, 300, int(rng.integers(0, 12)))} - set(model))
        ids, top = [], len(table)
        for name in batch:
            if free and rng.random() < 0.5:
                ids.append(free.pop())
            else:
                ids.append(top)
                top += 1
            model[name] = ids[-1]
        table.add(batch, np.array(ids, dtype=np.int64))
        # Some go, their ids free until reused (as VertexIds.give_back does).
        going = [n for n in list(model) if rng.random() < 0.1]
        table.remove(np.array([model[n] for n in going], np.int64))
        free.extend(model.pop(n) for n in going)
        asked = [f"v{int(x)}" for x in rng.integers(0, 320, 40)]
        assert idx.lookup(asked).tolist() == [model.get(n, -1) for n in asked]
        assert len(idx) == len(model)
        assert all(idx[n] == i and n in idx for n, i in model.items())
        assert idx.get("nobody") is None and "nobody" not in idx
    # Pickled (a stage written whole) and read back: the hash index is built again, equal.
    back = pickle.loads(pickle.dumps(table))
    assert NameIndex(back).lookup(list(model)).tolist() == list(model.values()) and back.tolist() == table.tolist()
    with pytest.raises(KeyError):
        idx["nobody"]


def test_reused_ids_on_a_clashing_hash(hashing):
    """The reused-id streams, every name behind a clashing hash, keep their ids and names exactly."""
    test_reuse.test_ids_follow_the_window_and_a_consumer_keeps_its_names_from_the_changes()
    test_reuse.test_the_ids_are_the_same_however_batched_and_after_a_restart_from_checkpoints()
    test_reuse.test_a_reused_id_carries_nothing_of_its_vertex_before()
