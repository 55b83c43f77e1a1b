"""Global vertex ids given back and reused under a window (compute/graph.py, "Reused ids").

Real shard stores with a window feed a :class:`~pulsegraph.compute.graph.GlobalGraph` a stream of ever new
vertices, so without reuse the id space grows with every vertex ever seen. Held against: the
window's edges by name at every epoch, an id space as large as the window plus the reuse delay,
the same ids however the epochs are batched and after a restart from checkpoints, and a consumer's
copy of the names kept only from :meth:`~pulsegraph.compute.graph.GlobalGraph.name_changes`.
"""

from __future__ import annotations

import pickle

import msgspec
import numpy as np
import pytest

from pulsegraph.compute.graph import GlobalGraph
from pulsegraph.compute.ids import NameIndex, VertexIds
from pulsegraph.ingest.batch import Router
from pulsegraph.ingest.events import EdgeUpdate
from pulsegraph.snapshots.delta import EpochDelta
from pulsegraph.snapshots.store import ShardStore

WINDOW = 3.0  # event time runs one second an epoch: three epochs of edges are live
SHARDS = 2
REUSE_AFTER = 3
PER_EPOCH = 4


def records(e: int) -> list[tuple[int, list[EdgeUpdate]]]:
    """Epoch ``e``'s transactions: edges between vertices never seen before, and one hub every edge
    of the epoch also points at (it stays in the window while the others come and go)."""
    out = []
    for k in range(PER_EPOCH):
        src, dst = f"a{e}.{k}", f"b{e}.{k}"
        out.append((PER_EPOCH * (e - 1) + k, [EdgeUpdate(src, dst, "link", 1, 1, float(e)), EdgeUpdate(src, "hub", "link", 1, 1, float(e))]))
    return out


def sealed(stores: list[ShardStore], e: int) -> list[EpochDelta]:
    router = Router(SHARDS)
    for offset, updates in records(e):
        router.add("p", offset, updates)
    router.stamp_times()
    for store, batch in zip(stores, router.take()):
        store.receive(batch)
    return [store.apply(e, {"p": PER_EPOCH * e}, float(e))[1] for store in stores]


def live_names(g: GlobalGraph) -> set[tuple[str, str, str]]:
    return {k for k, (m, _) in g.snapshot()["edges"].items() if m > 0}


def window_of(e: int) -> set[tuple[str, str, str]]:
    return {(f"a{x}.{k}", d, "link") for x in range(max(1, e - 2), e + 1) for k in range(PER_EPOCH)
            for d in (f"b{x}.{k}", "hub")}


def test_ids_follow_the_window_and_a_consumer_keeps_its_names_from_the_changes():
    stores = [ShardStore(i, WINDOW, recycle_every=1) for i in range(SHARDS)]
    g = GlobalGraph(windowed=True, reuse_after=REUSE_AFTER)
    copy: list[str] = []
    for e in range(1, 61):
        g.apply_epochs([sealed(stores, e)])
        assert live_names(g) == window_of(e)
        changes = g.name_changes(e - 1, len(copy))
        for i, name in zip(changes.ids.tolist(), changes.renamed):
            copy[i] = name
        copy[changes.start:] = changes.names
        g.forget_renames(e - 1)
        assert copy == g.names
    # 481 vertices were seen; the window holds 25 at a time, and a vertex's id waits 3 epochs (and
    # up to one more for its shard's release) before another takes it.
    assert g.n <= 25 + (REUSE_AFTER + 2) * 2 * PER_EPOCH
    assert sum(1 for name in g.names if name) == len(g.index) and "hub" in g.index
    present = g.present()
    assert present is not None and int(present.sum()) == 25
    # A consumer that last looked before the changes still kept gets every name instead.
    stale = g.name_changes(0, 10)
    assert stale.start == 0 and stale.names == g.names


def test_changes_chained_one_after_another_do_what_applying_each_in_turn_does():
    """What the compute actor hands a consumer that missed several results: each result's name changes,
    chained with ``then``, in groups of any size."""
    stores = [ShardStore(i, WINDOW, recycle_every=1) for i in range(SHARDS)]
    g = GlobalGraph(windowed=True, reuse_after=REUSE_AFTER)
    each, names_after = [], []
    for e in range(1, 41):
        g.apply_epochs([sealed(stores, e)])
        each.append(g.name_changes(e - 1, len(names_after[-1]) if names_after else 0))
        names_after.append(list(g.names))
    rng = np.random.default_rng(3)
    copy: list[str] = []
    at, renamed_in_own_names = 0, 0
    while at < len(each):
        k = int(rng.integers(1, 16))  # up to 15: an id is given back and reused within 8-9 epochs
        chained = each[at]
        for later in each[at + 1 : at + k]:
            renamed_in_own_names += int((later.ids >= chained.start).sum())
            chained = chained.then(later)
        assert (chained.ids < chained.start).all()  # a consumer's renames are of ids it knows
        for i, name in zip(chained.ids.tolist(), chained.renamed):
            copy[i] = name
        copy[chained.start :] = chained.names
        at = min(at + k, len(each))
        assert copy == names_after[at - 1]
    assert renamed_in_own_names > 0  # ids reused within a group were renamed in the names it adds
    gap = next(i for i in range(len(each) - 2) if each[i + 1].names)  # changes that add ids, left out
    with pytest.raises(ValueError, match="cannot follow"):
        each[gap].then(each[gap + 2])


def test_without_reuse_the_ids_grow_with_every_vertex_seen():
    stores = [ShardStore(i, WINDOW, recycle_every=1) for i in range(SHARDS)]
    g = GlobalGraph(windowed=True)
    for e in range(1, 31):
        g.apply_epochs([sealed(stores, e)])
    assert g.n == 1 + 30 * 2 * PER_EPOCH and live_names(g) == window_of(30)


def test_the_ids_are_the_same_however_batched_and_after_a_restart_from_checkpoints():
    stores = [ShardStore(i, WINDOW, recycle_every=2) for i in range(SHARDS)]
    one = GlobalGraph(windowed=True, reuse_after=REUSE_AFTER)
    many = GlobalGraph(windowed=True, reuse_after=REUSE_AFTER)
    names: dict[int, list[str]] = {}
    batch: list[list[EpochDelta]] = []
    saved = None
    for e in range(1, 41):
        deltas = sealed(stores, e)
        one.apply_epochs([deltas])
        names[e] = list(one.names)
        batch.append(deltas)
        if len(batch) == 3 or e == 40:
            many.apply_epochs(batch)
            batch = []
            assert many.names == one.names
        if e == 20:
            # Joined: the chunks of state() are views of the live columns, as a checkpoint writes them at once.
            saved = ([b"".join(s.state()) for s in stores], one.ids_state())
    assert saved is not None and len(names[20]) < 1 + 20 * 2 * PER_EPOCH  # ids were reused by then
    # Restart at epoch 20: shards and ids from their checkpoints, the stream replayed from there.
    stores = [ShardStore.restore(state) for state in saved[0]]
    g = GlobalGraph.restore_ids(saved[1], REUSE_AFTER)
    g.set_windowed(True)
    for e in range(21, 41):
        g.apply_epochs([sealed(stores, e)])
        assert g.names == names[e] and live_names(g) == window_of(e)
    assert len(names[40]) < 40 * 2 * PER_EPOCH / 2


def test_a_reused_id_carries_nothing_of_its_vertex_before():
    """The vertex that held an id had no edge and no attributes for the whole delay; the new one starts
    with its own degrees and presence, and the old name no longer resolves."""
    stores = [ShardStore(i, WINDOW, recycle_every=1) for i in range(SHARDS)]
    g = GlobalGraph(windowed=True, reuse_after=REUSE_AFTER)
    first: dict[str, int] = {}
    for e in range(1, 16):
        g.apply_epochs([sealed(stores, e)])
        if e == 1:
            first = {name: i for i, name in enumerate(g.names)}
    out, inn = g.degrees()
    present = g.present()
    assert present is not None
    reused = [(old, i) for old, i in first.items() if old != "hub" and g.names[i] and g.names[i] != old]
    assert reused
    for old, i in reused:
        assert old not in g.index and g.index[g.names[i]] == i
        assert bool(present[i]) == (out[i] + inn[i] > 0)
    assert g.snapshot()["edges"].keys() >= window_of(15)
    assert np.all((out > 0) | (inn > 0) | ~present)


def test_the_delay_is_event_time_however_many_epochs_it_takes():
    """An id waits until the watermark has advanced ``reuse_after`` past the epoch its last holder let
    go: a stalled watermark keeps it however many epochs are cut, and a checkpoint keeps the wait. One
    from a checkpoint without watermarks (written before the delay was event time) waits from the first
    epoch after the restore."""
    never = lambda ids: np.zeros(len(ids), bool)  # noqa: E731 - nothing is busy here
    ids = VertexIds(reuse_after=5.0)
    ids.give_back(1, 10.0, never)
    ids.name(["a", "b", "c"], 1)
    ids.hold(np.array([0, 1, 2]), 1, 1)
    ids.give_back(2, 10.0, never)
    ids.hold(np.array([0, 1]), -1, 2)  # a and b leave at watermark 10
    for e in range(3, 30):
        assert not len(ids.give_back(e, 10.0, never))  # epochs go by, event time does not
    saved = {**ids.state(), "epoch": 29}
    legacy = {k: v for k, v in saved.items() if k != "waiting_since"}
    assert not len(ids.give_back(30, 14.9, never))
    assert ids.give_back(31, 15.0, never).tolist() == [0, 1] and ids.names == ["", "", "c"]
    again = VertexIds.restore(saved, 5.0)
    assert not len(again.give_back(30, 14.9, never)) and again.give_back(31, 15.0, never).tolist() == [0, 1]
    old = VertexIds.restore(legacy, 5.0)
    assert not len(old.give_back(30, 14.0, never)) and not len(old.give_back(31, 18.5, never))
    assert old.give_back(32, 19.0, never).tolist() == [0, 1]
    # A late consumer gets the renames since its epoch however far behind it is (the delay does not
    # bound them: a consumer pulling less often would get every name each time), while they are
    # fewer than the ids.
    ids.give_back(40, 200.0, never)
    assert ids.name_changes(29, 3).ids.tolist() == [0, 1]
    ids.name(["d", "e"], 41)  # reuses 0 and 1: four renames for three ids
    late = ids.name_changes(29, 3)
    assert late.start == 0 and late.names == ["d", "e", "c"]
    assert ids.name_changes(31, 3).ids.tolist() == [0, 1] and ids.name_changes(31, 3).renamed == ["d", "e"]


def test_one_shard_restored_alone_keeps_the_ids_of_a_run_without_it():
    """A single shard's full delta while the others go on (its old mappings end, its whole state is named
    anew): the holder counts, and with them every id given back and reused, stay those of a run where
    that shard never restarted."""
    stores = [ShardStore(i, WINDOW, recycle_every=2) for i in range(SHARDS)]
    steady = GlobalGraph(windowed=True, reuse_after=REUSE_AFTER)
    names: dict[int, list[str]] = {}
    saved = None
    for e in range(1, 41):
        steady.apply_epochs([sealed(stores, e)])
        names[e] = list(steady.names)
        if e == 20:
            saved = [b"".join(s.state()) for s in stores]  # a copy, as the file holds it
    assert saved is not None
    stores = [ShardStore(i, WINDOW, recycle_every=2) for i in range(SHARDS)]
    g = GlobalGraph(windowed=True, reuse_after=REUSE_AFTER)
    for e in range(1, 41):
        if e == 21:
            stores[0] = ShardStore.restore(saved[0])  # shard 0 restarts from its epoch-20 checkpoint
        deltas = sealed(stores, e)
        assert deltas[0].full == (e == 21) and not deltas[1].full
        g.apply_epochs([deltas])
        assert g.names == names[e] and live_names(g) == window_of(e), e
    assert len(names[40]) < 40 * 2 * PER_EPOCH / 2  # ids were reused after the restart too
    assert all(np.array_equal(a, b) for a, b in zip(g.degrees(), steady.degrees()))
    assert np.array_equal(g.present(), steady.present()) and g.live_edges() == steady.live_edges()


def test_an_id_let_go_twice_in_one_epoch_is_given_back_once():
    """Let go, held again and let go within one merge (a shard's full delta that also releases): the id
    waits twice, but is given back once, so no two new names ever share it."""
    never = lambda ids: np.zeros(len(ids), bool)  # noqa: E731 - nothing is busy here
    ids = VertexIds(reuse_after=5.0)
    ids.give_back(1, 0.0, never)
    ids.name(["a", "b"], 1)
    ids.hold(np.array([0, 1]), 1, 1)
    ids.give_back(2, 1.0, never)
    for delta in (-1, 1, -1):
        ids.hold(np.array([0]), delta, 2)
    assert ids.give_back(3, 6.0, never).tolist() == [0]
    ids.name(["c", "d"], 3)
    assert ids.names == ["c", "b", "d"] and ids.index.lookup(["b", "c", "d", "a"]).tolist() == [1, 0, 2, -1]
    assert len(ids.index) == 3


def returning(e: int) -> list[tuple[int, list[EdgeUpdate]]]:
    """Epoch ``e``'s transactions between twelve names that take turns: ``v{j}`` has edges for four epochs,
    then none for eight, longer than the window and the reuse delay together, so each leaves, its id
    goes to another, and it comes back under a new one, again and again."""
    active = [j for j in range(12) if (e // 4 + j) % 3 == 0]
    out = []
    for k, j in enumerate(active):
        dst = active[(k + 1) % len(active)]
        out.append((PER_EPOCH * (e - 1) + k, [EdgeUpdate(f"v{j}", f"v{dst}", "link", 1, 1, float(e))]))
    return out


def test_vertices_that_leave_and_come_back_keep_the_same_ids_however_merged_restarted_and_renamed():
    def cut(stores: list[ShardStore], e: int) -> list[EpochDelta]:
        router = Router(SHARDS)
        for offset, updates in returning(e):
            router.add("p", offset, updates)
        router.stamp_times()
        for store, batch in zip(stores, router.take()):
            store.receive(batch)
        return [store.apply(e, {"p": PER_EPOCH * e}, float(e))[1] for store in stores]

    stores = [ShardStore(i, WINDOW, recycle_every=1) for i in range(SHARDS)]
    again = [ShardStore(i, WINDOW, recycle_every=1) for i in range(SHARDS)]
    one = GlobalGraph(windowed=True, reuse_after=1)
    merged = GlobalGraph(windowed=True, reuse_after=1)
    restarted = GlobalGraph(windowed=True, reuse_after=1)
    batch: list[list[EpochDelta]] = []
    copy: list[str] = []
    came_back = 0
    ids_of: dict[str, set[int]] = {}
    for e in range(1, 73):
        deltas = cut(stores, e)
        one.apply_epochs([deltas])
        restarted.apply_epochs([cut(again, e)])
        batch.append(deltas)
        if len(batch) == 1 + e % 5:  # batches of one to five epochs
            merged.apply_epochs(batch)
            batch = []
            assert merged.names == one.names and merged.snapshot() == one.snapshot()
        live = {(u.src, u.dst, u.type) for x in range(max(1, e - 2), e + 1) for _, us in returning(x) for u in us}
        assert live_names(one) == live and restarted.names == one.names and live_names(restarted) == live
        held = {name: i for i, name in enumerate(one.names) if name}
        assert len(one.index) == len(held) and all(one.index[name] == i for name, i in held.items())
        for name, i in held.items():
            came_back += i not in ids_of.setdefault(name, {i})
            ids_of[name].add(i)
        changes = one.name_changes(e - 1, len(copy))
        for i, name in zip(changes.ids.tolist(), changes.renamed):
            copy[i] = name
        copy[changes.start :] = changes.names
        one.forget_renames(e - 1)
        assert copy == one.names
        if e % 20 == 0:  # a checkpoint and a restart from it
            again = [ShardStore.restore(b"".join(s.state())) for s in again]
            restarted = GlobalGraph.restore_ids(restarted.ids_state(), 1)
            restarted.set_windowed(True)
    assert came_back >= 12 and one.n <= 12  # names came back under other ids, in an id space of twelve


class _IndexBefore:
    """Pickles as the name index did before the names were packed: built again from the list of names."""

    def __init__(self, names: list[str]) -> None:
        self.names = names

    def __reduce__(self):
        return NameIndex.of, (self.names,)


def test_ids_written_before_the_names_were_packed_still_read_back():
    """A checkpoint's ids whose names were one MessagePack array, and ids pickled whole (a stage written whole)
    with a list of names and no table, read back as the same names and index."""
    never = lambda ids: np.zeros(len(ids), bool)  # noqa: E731 - nothing is busy here
    ids = VertexIds(reuse_after=5.0)
    ids.give_back(1, 0.0, never)
    ids.name(["a", "b", "c"], 1)
    ids.hold(np.array([0, 1, 2]), 1, 1)
    ids.hold(np.array([1]), -1, 1)
    ids.give_back(2, 6.0, never)  # b's id is given back: no name there
    assert ids.names == ["a", "", "c"]
    old = {**ids.state(), "names": msgspec.msgpack.encode(["a", "", "c"]), "epoch": 2}
    back = VertexIds.restore(old, 5.0)
    assert back.names == ["a", "", "c"] and back.index.lookup(["a", "b", "c"]).tolist() == [0, -1, 2]
    before = VertexIds.__new__(VertexIds)  # as the version before pickled its ids: a list and an index of it
    before.__dict__.update({**{k: v for k, v in ids.__dict__.items() if k not in ("table", "index")},
                            "names": ["a", "", "c"], "index": _IndexBefore(["a", "", "c"])})
    pickled = pickle.loads(pickle.dumps(before))
    assert pickled.names == ["a", "", "c"] and pickled.index.lookup(["c", "a", "b"]).tolist() == [2, 0, -1]
    assert pickled.name(["d"], 3).tolist() == [1] and pickled.names == ["a", "d", "c"]

