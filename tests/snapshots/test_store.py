"""The contract on the stores alone, many examples: S_e is a pure function of V_e.

Random streams over several partitions, delivered in random interleavings and
batch sizes, with replays of already delivered offsets and random epoch cuts:
after every cut the shards (and the compute stage's merged graph) hold exactly
the reference graph built from scratch from the records below the vector.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute.graph import GlobalGraph
from snapshots.exceptions import EpochOrderError
from snapshots.edges import EdgeTable
from snapshots.store import ShardStore
from tests.graphref import merge, reference
from tests.snapshots.streams import route, schedules, streams


def run_schedule(stream, schedule, n_shards, data):
    parts = sorted(stream)
    stores = [ShardStore(i) for i in range(n_shards)]
    graph = GlobalGraph()
    delivered = {p: 0 for p in parts}
    reported = {p: 0 for p in parts}
    epoch = 0
    replayed: dict = {}  # the graph rebuilt from the compute stage's published edge changes alone

    def cut(vector):
        nonlocal epoch
        epoch += 1
        for store in stores:
            _, delta = store.apply(epoch, vector)
            ch = graph.apply(delta)
            for s, d, t, m, w in zip(ch.src, ch.dst, ch.etype, ch.mult, ch.weight):
                replayed[(graph.names[s], graph.names[d], graph.types[t])] = (int(m), int(w))
        want = reference(stream, vector, "multi")
        assert merge([s.snapshot() for s in stores]) == want
        assert graph.snapshot() == want
        assert replayed == want["edges"]

    for st_ in schedule:
        p = parts[st_[1] % len(parts)] if len(st_) > 1 else None
        if st_[0] == "deliver":
            recs = stream[p][delivered[p] : delivered[p] + st_[2]]
            for store, batch in zip(stores, route(n_shards, p, recs)):
                store.receive(batch)
            delivered[p] += len(recs)
        elif st_[0] == "replay":
            start = int(st_[2] * delivered[p])
            for store, batch in zip(stores, route(n_shards, p, stream[p][start : start + st_[3]][: delivered[p] - start])):
                store.receive(batch)
        elif st_[0] == "report":
            reported[p] = max(reported[p], int(round(reported[p] + st_[2] * (delivered[p] - reported[p]))))
        else:
            cut(dict(reported))
    for p in parts:
        recs = stream[p][delivered[p] :]
        for store, batch in zip(stores, route(n_shards, p, recs)):
            store.receive(batch)
    cut({p: len(stream[p]) for p in parts})


@settings(max_examples=300, deadline=None)
@given(stream=streams(), schedule=schedules, n_shards=st.integers(1, 4), data=st.data())
def test_graph_at_every_vector_equals_the_reference(stream, schedule, n_shards, data):
    run_schedule(stream, schedule, n_shards, data)


def test_epochs_and_vectors_that_do_not_grow_are_refused():
    store = ShardStore(0)
    store.apply(1, {"p": 3})
    with pytest.raises(EpochOrderError):
        store.apply(1, {"p": 4})
    with pytest.raises(EpochOrderError):
        store.apply(2, {"p": 2})


def test_edge_table_sums_commute_and_keeps_slots():
    t = EdgeTable()
    a = np.array
    s1 = t.apply(a([1, 2, 1], np.int32), a([2, 3, 2], np.int32), a([0, 0, 0], np.int16), a([1, 1, 1]), a([5, 7, 5]))
    assert sorted(s1.tolist()) == [0, 1]
    t.apply(a([0, 1], np.int32), a([0, 2], np.int32), a([1, 0], np.int16), a([1, -1]), a([3, -5]))
    assert (t.src.view.tolist(), t.dst.view.tolist(), t.etype.view.tolist()) == ([1, 2, 0], [2, 3, 0], [0, 0, 1])
    assert t.mult.view.tolist() == [1, 1, 1]
    assert t.weight.view.tolist() == [5, 7, 3]
    assert t.live() == 3
