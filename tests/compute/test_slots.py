"""The merge view's slots held by the compute partitions (compute.slots.PartitionSlots) against the same
graph holding them itself: the same changes epoch by epoch, the same whole graph, and each partition
holding only the shards given to it. Also the read-back of a graph pickled before the slots were a store."""

from __future__ import annotations

import copy
import random

import numpy as np

from pulsegraph.compute.changes import EdgeChanges
from pulsegraph.compute.graph import GlobalGraph
from pulsegraph.compute.partitioned import PartitionedEngine
from pulsegraph.compute.slots import EdgeSlots, PartitionSlots
from pulsegraph.compute.stage import ComputeStage, SealedEpoch, StageConfig, fingerprint
from pulsegraph.ingest.batch import Router
from pulsegraph.ingest.events import EdgeUpdate
from pulsegraph.snapshots.delta import EpochDelta
from pulsegraph.snapshots.epoch import EpochInfo
from pulsegraph.snapshots.store import ShardStore

SHARDS = 3
WINDOW = 4.0  # event time runs one second an epoch


def sealed(stores: list[ShardStore], e: int, rnd: random.Random) -> list[EpochDelta]:
    """Epoch ``e``: edges among a few dozen vertices, added and removed again (ids and slots are reused)."""
    router = Router(SHARDS)
    for k in range(12):
        s, d = f"v{rnd.randrange(40)}", f"v{rnd.randrange(40)}"
        sign = 1 if rnd.random() < 0.75 else -1
        router.add("p", 12 * (e - 1) + k, [EdgeUpdate(s, d, rnd.choice(["link", "tags"]), sign, rnd.randrange(1, 4), float(e))])
    router.stamp_times()
    for store, batch in zip(stores, router.take()):
        store.receive(batch)
    return [store.apply(e, {"p": 12 * e}, float(e))[1] for store in stores]


def same(a: EdgeChanges, b: EdgeChanges) -> bool:
    fields = ("src", "dst", "etype", "mult", "weight", "first_ts")
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in fields)


def test_the_partitions_slots_give_the_changes_the_graphs_own_give():
    rnd = random.Random(7)
    stores = [ShardStore(i, WINDOW, recycle_every=2) for i in range(SHARDS)]
    local = GlobalGraph(windowed=True, reuse_after=2.0)
    engine = PartitionedEngine(partitions=2)
    held = GlobalGraph(windowed=True, reuse_after=2.0)
    held.slots = PartitionSlots(engine)
    saved, e, batches, full = None, 0, 0, 0
    while e < 60:
        batch = []
        for _ in range(rnd.choice([1, 1, 2, 3])):  # the compute stage fell behind: several epochs at once
            e += 1
            if e == 31:
                stores[1] = ShardStore.restore(saved)  # shard 1 alone restarts: its next delta is whole
            batch.append(sealed(stores, e, rnd))
            if e == 25:
                saved = b"".join(stores[1].state())
        full += sum(d.full for deltas in batch for d in deltas)
        mine, theirs = local.apply_epochs(batch), held.apply_epochs(batch)
        assert same(mine[0], theirs[0]) and same(mine[1], theirs[1]), e
        batches += 1
    assert batches < 60 and full == 1
    assert held.snapshot() == local.snapshot() and same(held.whole_changes(), local.whole_changes())
    assert held.names == local.names and held.live_edges() == local.live_edges() > 0
    # What a rebuild of the applications reads: the live edges' columns, of some types or all.
    for types in (None, ("tags",), ("link", "tags")):
        assert all(np.array_equal(a, b) for a, b in zip(held.live(types), local.live(types), strict=True)), types
    for t in ("link", "tags", "never"):
        assert all(np.array_equal(a, b) for a, b in zip(held.live_of_type(t), local.live_of_type(t), strict=True)), t
    assert 0 < len(held.live(("tags",))[0]) < len(held.live()[0]) == held.live_edges()
    # Each partition holds the slots of its shards only, and the graph none.
    parts = engine.port.partitions  # type: ignore[attr-defined]
    assert [sorted(p.slots.columns(("src",), live=False)) for p in parts] == [[0, 2], [1]]
    assert all(p.slots.nbytes() > 0 for p in parts) and held.slots.nbytes() == 0


def earlier_layout(g: GlobalGraph) -> GlobalGraph:
    """``g`` as a version before the slots were a store pickled it: each shard's columns held its ids."""
    state = copy.deepcopy(g.__dict__)
    shards = state.pop("slots")._shards
    for sh, l2g in state.pop("_l2g").items():
        shards[sh].local_to_global = l2g
    state["_shards"] = shards
    old = GlobalGraph.__new__(GlobalGraph)
    old.__setstate__(state)
    return old


def test_a_stage_written_whole_before_the_slots_moved_hands_them_to_its_partitions():
    rnd = random.Random(3)
    stores = [ShardStore(i, WINDOW) for i in range(SHARDS)]
    config = StageConfig(partitions=2)
    info = lambda e: EpochInfo(epoch=e, vector={"p": 12 * e}, records=12, sealed_at=float(e), window=WINDOW, watermark=float(e))  # noqa: E731
    ahead, stage = ComputeStage.made(StageConfig()), ComputeStage.made(config)
    for e in range(1, 11):
        deltas = sealed(stores, e, rnd)
        ahead.apply([SealedEpoch(info(e), deltas)])
        stage.apply([SealedEpoch(info(e), deltas)])
    # As the earlier version held it: the slots in the compute stage's graph, none in its partitions.
    stage.graph = earlier_layout(ahead.graph)
    for p in stage.engine.port.partitions:  # type: ignore[union-attr]
        p.slots = EdgeSlots()
    assert stage.graph.snapshot() == ahead.graph.snapshot() and stage.graph.names == ahead.graph.names
    back = ComputeStage.made(config, {"whole": fingerprint(config), "stage": stage}, whole=True)
    assert isinstance(back.graph.slots, PartitionSlots) and back.graph.snapshot() == ahead.graph.snapshot()
    for e in range(11, 16):
        deltas = sealed(stores, e, rnd)
        a, b = ahead.apply([SealedEpoch(info(e), deltas)]), back.apply([SealedEpoch(info(e), deltas)])
        assert same(a.edge_changes, b.edge_changes) and a.edges == b.edges
    assert back.graph.snapshot() == ahead.graph.snapshot()
