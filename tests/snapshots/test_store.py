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

from pulsegraph.compute.graph import GlobalGraph
from pulsegraph.snapshots.edges import EdgeTable
from pulsegraph.snapshots.exceptions import EpochOrderError
from pulsegraph.snapshots.store import ShardStore
from tests.graphref import merge, reference, without_attrs
from tests.snapshots.streams import route, schedules, streams


def receive(store: ShardStore, batch) -> None:
    store.receive(batch)
    # What apply counts and cuts by: each partition's buffered offsets sorted and distinct, however the
    # batches interleaved and whatever they delivered again.
    for buf in store._buffers.values():
        assert (np.diff(buf.offsets) > 0).all()


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
        assert graph.snapshot() == without_attrs(want)
        assert replayed == want["edges"]

    for st_ in schedule:
        p = parts[st_[1] % len(parts)] if len(st_) > 1 else None
        if st_[0] == "deliver":
            recs = stream[p][delivered[p] : delivered[p] + st_[2]]
            for store, batch in zip(stores, route(n_shards, p, recs)):
                receive(store, batch)
            delivered[p] += len(recs)
        elif st_[0] == "replay":
            start = int(st_[2] * delivered[p])
            for store, batch in zip(stores, route(n_shards, p, stream[p][start : start + st_[3]][: delivered[p] - start])):
                receive(store, batch)
        elif st_[0] == "report":
            reported[p] = max(reported[p], int(round(reported[p] + st_[2] * (delivered[p] - reported[p]))))
        else:
            cut(dict(reported))
    for p in parts:
        recs = stream[p][delivered[p] :]
        for store, batch in zip(stores, route(n_shards, p, recs)):
            receive(store, batch)
    cut({p: len(stream[p]) for p in parts})


@pytest.mark.slow  # hundreds of streams: make test runs it, make check does not
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


@pytest.mark.slow  # ~6 s of random streams: make test runs it, make check does not
@settings(max_examples=100, deadline=None)
@given(stream=streams(), n_shards=st.integers(1, 3), data=st.data())
def test_batches_that_arrive_out_of_order_are_counted_and_applied_once(stream, n_shards, data):
    """A partition's batches reach a shard in any order (and some twice): the cut holds the same graph
    and counts the same transactions as delivery in order."""
    vector = {p: len(recs) for p, recs in stream.items()}

    def deliver(shuffled: bool):
        stores = [ShardStore(i) for i in range(n_shards)]
        for p, recs in stream.items():
            cuts = sorted(data.draw(st.lists(st.integers(0, len(recs)), max_size=4)) + [0, len(recs)])
            chunks = [recs[a:b] for a, b in zip(cuts, cuts[1:])]
            if shuffled:
                chunks = data.draw(st.permutations(chunks)) + chunks[:1]
            for chunk in chunks:
                for store, batch in zip(stores, route(n_shards, p, chunk)):
                    receive(store, batch)
        summaries = [store.apply(1, vector)[0] for store in stores]
        return [s.transactions for s in summaries], merge([s.snapshot() for s in stores])

    counts, graph = deliver(shuffled=True)
    assert (counts, graph) == deliver(shuffled=False)
    assert graph == reference(stream, vector, "multi")
