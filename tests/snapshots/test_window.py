"""The sliding window against its definition, on the shard stores themselves (no Ray).

The definition (README, "Sliding windows"): the watermark ``W_e`` is the largest
event time among the transactions below ``V_e``; ``S_e`` holds exactly the
transactions below ``V_e`` with event time in ``(W_e - T, W_e]``; a transaction's
time is the largest ``ts`` among its events. The reference (``tests.graphref.window_reference``) builds ``S_e``
from that text alone; the stores must hold it at every epoch, whatever the
delivery order, the re-deliveries, the cuts, the shard count, and across a
restore from a checkpoint.
"""

from __future__ import annotations

import json
import math

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsegraph.ingest.batch import Router
from pulsegraph.ingest.events import EdgeUpdate
from pulsegraph.snapshots.checkpoint import dumps, loads
from pulsegraph.snapshots.store import ShardStore
from pulsegraph.snapshots.window import TimeLog
from tests.graphref import merge, window_reference, without_attrs
from tests.snapshots.streams import MULTI, TYPES, VERTICES, WEIGHTS

WINDOW = 5.0

# Times on a coarse grid, so that events fall exactly on the window's edge, tie, and arrive out of order.
ts = st.integers(1, 30).map(float)
edge_event = st.fixed_dictionaries(
    {
        "op": st.sampled_from(["add_edge", "add_edge", "add_edge", "remove_edge"]),
        "src": st.sampled_from(VERTICES),
        "dst": st.sampled_from(VERTICES),
        "type": st.sampled_from(TYPES),
        "weight": st.sampled_from(WEIGHTS),
        "ts": ts,
    }
)
vertex_event = st.fixed_dictionaries(
    {"op": st.just("upsert_vertex"), "id": st.sampled_from(VERTICES), "attrs": st.fixed_dictionaries({"v": st.integers(0, 9)}), "ts": ts}
)
record = st.lists(st.one_of(edge_event, edge_event, vertex_event), min_size=1, max_size=3).map(lambda evs: json.dumps(evs).encode())


@st.composite
def windowed_streams(draw):
    n = draw(st.integers(1, 3))
    return {f"p{i}": list(enumerate(draw(st.lists(record, max_size=30)))) for i in range(n)}


def deliver(stores: list[ShardStore], records: dict, lo: dict, hi: dict, chunk: int) -> float:
    """Send the records in [lo, hi) of every partition in chunks, as ingest rounds do; returns the
    largest event time among them (what the coordinator folds into the watermark)."""
    latest = -math.inf
    for p, recs in records.items():
        todo = [(o, raw) for o, raw in recs if lo.get(p, 0) <= o < hi.get(p, 0)]
        for i in range(0, len(todo), chunk):
            router = Router(len(stores))
            for o, raw in todo[i : i + chunk]:
                router.add(p, o, MULTI(raw))
            times, dropped = router.stamp_times()
            assert not dropped  # every event here has a ts
            latest = max([latest, *times.values()])
            for store, batch in zip(stores, router.take()):
                store.receive(batch)
    return latest


@pytest.mark.slow  # hundreds of streams: make test runs it, make check does not
@settings(max_examples=200, deadline=None)
@given(stream=windowed_streams(), n_shards=st.integers(1, 3), data=st.data())
def test_every_epoch_holds_exactly_the_window_of_its_vector_and_a_restore_continues_it(stream, n_shards, data):
    # Local ids of vertices the window emptied are given back every epoch or every other one: the names
    # of a snapshot are the same whichever ids they had, and a restore keeps the released ones free.
    recycle_every = data.draw(st.integers(1, 2))
    stores = [ShardStore(s, WINDOW, recycle_every) for s in range(n_shards)]
    vector: dict[str, int] = {}
    watermark = -math.inf
    epoch = 0
    restored_at = data.draw(st.integers(1, 6))
    for _ in range(data.draw(st.integers(1, 8))):
        nxt = {p: data.draw(st.integers(vector.get(p, 0), len(recs))) for p, recs in stream.items()}
        chunk = data.draw(st.integers(1, 5))
        if data.draw(st.booleans()):  # a re-delivery of what was sent before: kept once
            deliver(stores, stream, {}, vector, chunk)
        watermark = max(watermark, deliver(stores, stream, vector, nxt, chunk))
        vector, epoch = nxt, epoch + 1
        for s in stores:
            s.apply(epoch, vector, watermark if math.isfinite(watermark) else 0.0)
        want, w = window_reference(stream, vector, WINDOW, "multi")
        assert w == watermark or w is None
        got = merge([s.snapshot() for s in stores])
        assert got == want
        if epoch == restored_at:  # a checkpoint here, and a restart from it
            stores = [ShardStore.restore(s.state()) for s in stores]
            for s in stores:
                s.recycle_every = recycle_every


def test_late_transactions_never_enter_and_are_counted():
    store = ShardStore(0, WINDOW)
    router = Router(1)
    router.add("p", 0, [EdgeUpdate("a", "b", "link", 1, 1, 20.0)])
    router.add("p", 1, [EdgeUpdate("c", "d", "link", 1, 1, 14.0)])  # 20 - 5 < 14? no: late
    router.add("p", 2, [EdgeUpdate("e", "f", "link", 1, 1, 15.5)])
    router.stamp_times()
    store.receive(router.take()[0])
    summary, delta = store.apply(1, {"p": 3}, 20.0)
    assert store.late == 1 and summary.late["p"].tolist() == [1]
    assert set(store.snapshot()["edges"]) == {("a", "b", "link"), ("e", "f", "link")}


def test_expired_edges_give_their_slots_to_new_edges_and_the_delta_says_so():
    store = ShardStore(0, WINDOW)
    router = Router(1)
    router.add("p", 0, [EdgeUpdate("a", "b", "link", 1, 1, 1.0)])
    router.stamp_times()
    store.receive(router.take()[0])
    _, d1 = store.apply(1, {"p": 1}, 1.0)
    router.add("p", 1, [EdgeUpdate("c", "d", "link", 1, 1, 10.0)])
    router.stamp_times()
    store.receive(router.take()[0])
    _, d2 = store.apply(2, {"p": 2}, 10.0)
    # a->b left (1 <= 10 - 5) and gave slot 0 back; c->d took it in the same epoch.
    assert d1.e_slot.tolist() == [0] and d2.e_slot.tolist() == [0]
    names = store.vertices.names
    assert (names[d2.e_src[0]], names[d2.e_dst[0]], int(d2.e_mult[0])) == ("c", "d", 1)
    assert len(store.edges) == 1 and store.snapshot()["edges"] == {("c", "d", "link"): (1, 1)}


def test_vertices_the_window_emptied_give_their_ids_to_new_ones_and_the_shard_stays_as_large_as_the_window():
    """A stream of ever new vertices (each edge between two never seen before): the window holds three
    epochs of them, so the shard's names and columns must stay at about three epochs' worth, and the
    compute stage, fed the deltas, must name every edge right although the local ids repeat."""
    from pulsegraph.compute.graph import GlobalGraph  # noqa: PLC0415

    store, g = ShardStore(0, WINDOW, recycle_every=1), GlobalGraph(windowed=True)
    router = Router(1)
    for e in range(1, 41):
        for k in range(4):
            router.add("p", 4 * (e - 1) + k, [EdgeUpdate(f"a{e}.{k}", f"b{e}.{k}", "link", 1, 1, float(2 * e))])
        router.stamp_times()
        store.receive(router.take()[0])
        _, delta = store.apply(e, {"p": 4 * e}, float(2 * e))
        g.apply(delta)
        live = {(f"a{x}.{k}", f"b{x}.{k}", "link") for x in range(max(1, e - 2), e + 1) for k in range(4)}
        assert set(store.snapshot()["edges"]) == live
        assert {k for k, (m, _) in g.snapshot()["edges"].items() if m > 0} == live
    assert store.recycled >= 8 * 36  # 320 vertices were seen, 24 at most are in the window at a time
    assert len(store.vertices.names) <= 40 and len(store.exists) <= 40
    restored = ShardStore.restore(store.state())
    held = [n for n in store.vertices.names if n is not None]
    assert restored.vertices.names.tolist() == store.vertices.names.tolist()
    assert restored.vertices.ids(held).tolist() == store.vertices.ids(held).tolist() and restored.vertices.free_ids().tolist() == store.vertices.free_ids().tolist()
    assert restored.snapshot() == store.snapshot()
    # A checkpoint from before the packed names (one MessagePack array, None at released ids) loads alike.
    saved = loads(b"".join(store.state()))
    saved["vertices"] = msgspec.msgpack.encode(store.vertices.names.tolist())
    older = ShardStore.restore(dumps(saved))
    assert older.vertices.names.tolist() == store.vertices.names.tolist() and older.snapshot() == store.snapshot()
    assert older.vertices.free_ids().tolist() == store.vertices.free_ids().tolist() and None in store.vertices.names.tolist()
    # A relaunch: the restored shard's next delta is the whole shard, read by a compute stage that
    # starts from the checkpointed ids. Released slots still name ids given back since; it must not see them.
    g = GlobalGraph.restore_ids(g.ids_state())
    g.set_windowed(True)
    router.add("p", 160, [EdgeUpdate("a41.0", "b41.0", "link", 1, 1, 82.0)])
    router.stamp_times()
    restored.receive(router.take()[0])
    _, delta = restored.apply(41, {"p": 161}, 82.0)
    assert delta.full and set(delta.e_slot.tolist()) == set(restored.edges.held().tolist())
    g.apply(delta)
    live = {(f"a{x}.{k}", f"b{x}.{k}", "link") for x in (39, 40) for k in range(4)} | {("a41.0", "b41.0", "link")}
    assert {k for k, (m, _) in g.snapshot()["edges"].items() if m > 0} == live


def test_a_transaction_without_any_time_is_dropped_by_the_stamp_and_one_with_a_record_time_takes_it():
    router = Router(2)
    router.add("p", 0, [EdgeUpdate("a", "b", "link", 1, 1, 0.0)])
    router.add("p", 1, [EdgeUpdate("c", "d", "link", 1, 1, 0.0), EdgeUpdate("c", "e", "link", 1, 1, 7.0)])
    router.add("p", 2, [EdgeUpdate("x", "y", "link", 1, 1, 0.0)])
    latest, dropped = router.stamp_times({"p": {2: 9.0}})
    assert latest == {"p": 9.0} and dropped == {"p": [0]}
    rows = [(b.names[s], float(t)) for b in router.take() for s, t in zip(b.e_src, b.e_ts)]
    assert sorted(rows) == [("c", 7.0), ("c", 7.0), ("x", 9.0)]


def test_time_log_expires_exactly_at_the_bound_and_finds_the_earliest_adds():
    log = TimeLog(10.0)
    rng = np.random.default_rng(3)
    ts = rng.integers(0, 40, 500).astype(float)
    key = rng.integers(0, 20, 500)
    sign = rng.choice([-1, 1], 500)
    log.add(ts, key, sign, sign * 3)
    got = log.expire(12.0)
    assert sorted(got[0].tolist()) == sorted(ts[ts <= 12.0].tolist()) and len(log) == int((ts > 12.0).sum())
    left = ts > 12.0
    want = [min([t for t, k, s in zip(ts[left], key[left], sign[left]) if k == q and s > 0], default=math.inf) for q in range(20)]
    assert log.earliest_adds(np.arange(20)).tolist() == want
    restored = TimeLog.restore(log.state())
    assert restored.earliest_adds(np.arange(20)).tolist() == want and len(restored) == len(log)


def test_an_epoch_log_whose_watermark_goes_back_is_not_one_history(tmp_path):
    import pytest

    from pulsegraph.snapshots.epoch import Epoch, EpochLog
    from pulsegraph.snapshots.exceptions import EpochLogError

    path = str(tmp_path / "epochs.log")
    log = EpochLog(path)
    log.append(Epoch(1, {"p": 3}, watermark=50.0))
    log.append(Epoch(2, {"p": 5}, watermark=40.0))
    log.close()
    with pytest.raises(EpochLogError, match="line 2: the watermark goes back from 50.0 to 40.0"):
        EpochLog.read(path)


@st.composite
def advancing_streams(draw):
    """Records whose times advance with their offsets (two a second, a little disorder), between a few
    names: the window moves on through the stream, and vertices leave it and come back again and again."""
    names = st.sampled_from(list("abcdefghijklmnop"))
    edge = st.fixed_dictionaries({"op": st.sampled_from(["add_edge", "add_edge", "remove_edge"]), "src": names, "dst": names,
                                  "type": st.sampled_from(TYPES), "weight": st.sampled_from(WEIGHTS)})
    upsert = st.fixed_dictionaries({"op": st.just("upsert_vertex"), "id": names, "attrs": st.fixed_dictionaries({"v": st.integers(0, 9)})})

    def at(offset: int):
        return st.lists(st.one_of(edge, edge, edge, upsert), min_size=1, max_size=2).map(
            lambda evs: json.dumps([{**ev, "ts": float(1 + offset // 2 + k % 2)} for k, ev in enumerate(evs)]).encode())

    n = draw(st.integers(1, 2))
    return {f"p{i}": list(enumerate(draw(st.tuples(*(at(o) for o in range(draw(st.integers(0, 60)))))))) for i in range(n)}


@pytest.mark.slow  # 150 examples, ~36 s: the whole suite runs it, the quick lane does not
@settings(max_examples=150, deadline=None)
@given(stream=advancing_streams(), n_shards=st.integers(1, 3), data=st.data())
def test_the_compute_stage_holds_the_window_while_ids_are_given_back_and_reused_soon_after_vertices_leave(stream, n_shards, data):
    """A few names, times that advance, and a reuse delay of a few seconds of event time: vertices leave
    the window, their ids are given back and taken by others, and they come back under new ones, epoch
    after epoch. The compute stage must hold the shards' window by name at every epoch, give the same ids
    however the epochs are merged and after a restart from a checkpoint, keep its index on its names, and
    tell a consumer every rename."""
    from pulsegraph.compute.graph import GlobalGraph  # noqa: PLC0415

    reuse_after = data.draw(st.sampled_from([0.5, 1.0, 3.0]))
    stores = [ShardStore(s, WINDOW, 1) for s in range(n_shards)]
    again = [ShardStore(s, WINDOW, 1) for s in range(n_shards)]  # restarted from a checkpoint on the way
    one = GlobalGraph(windowed=True, reuse_after=reuse_after)
    merged = GlobalGraph(windowed=True, reuse_after=reuse_after)
    restarted = GlobalGraph(windowed=True, reuse_after=reuse_after)
    batch: list = []
    copy: list[str] = []
    vector: dict[str, int] = {}
    watermark = -math.inf
    restored_at = data.draw(st.integers(1, 8))
    for epoch in range(1, data.draw(st.integers(1, 16)) + 1):
        nxt = {p: data.draw(st.integers(vector.get(p, 0), len(recs))) for p, recs in stream.items()}
        chunk = data.draw(st.integers(1, 5))
        watermark = max(watermark, deliver(stores, stream, vector, nxt, chunk))
        deliver(again, stream, vector, nxt, chunk)
        vector = nxt
        w = watermark if math.isfinite(watermark) else 0.0
        deltas = [s.apply(epoch, vector, w)[1] for s in stores]
        one.apply_epochs([deltas])
        restarted.apply_epochs([[s.apply(epoch, vector, w)[1] for s in again]])
        batch.append(deltas)
        if data.draw(st.booleans()):
            merged.apply_epochs(batch)
            batch = []
            assert merged.names == one.names and merged.snapshot() == one.snapshot()
        assert one.snapshot() == without_attrs(merge([s.snapshot() for s in stores]))
        assert restarted.names == one.names and restarted.snapshot() == one.snapshot()
        held = {name: i for i, name in enumerate(one.names) if name}
        assert len(one.index) == len(held) and all(one.index[name] == i for name, i in held.items())
        changes = one.name_changes(epoch - 1, len(copy))
        for i, name in zip(changes.ids.tolist(), changes.renamed):
            copy[i] = name
        copy[changes.start :] = changes.names
        one.forget_renames(epoch - 1)
        assert copy == one.names
        if epoch == restored_at:  # a checkpoint of the shards and the ids here, and a restart from it
            again = [ShardStore.restore(s.state()) for s in again]
            for s in again:
                s.recycle_every = 1
            restarted = GlobalGraph.restore_ids(restarted.ids_state(), reuse_after)
            restarted.set_windowed(True)
