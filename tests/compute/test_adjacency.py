"""The applications' kept adjacency against a from-scratch build, and the applications on it against the rebuild path.

:class:`RowTable` is checked against a dict over random upserts, removals and growth, with
compaction after every change, sometimes, and never. :class:`AppAdjacency`, kept by the
runner over random epochs (multi-edges, several edge types, a pair that loses one type and
keeps another, signed multiplicities, vertices appearing, real shards with edge times),
must hold exactly what a build from the graph's columns holds, and every application's
published output must equal the one computed on an adjacency rebuilt every epoch (the path
before the adjacency was kept). A restored stage (checkpointed shards, a full delta) must
rebuild and go on exactly as the stage that never stopped.
"""

from __future__ import annotations

import numpy as np
import pytest

from pulsegraph.compute.apps.adjacency import AppAdjacency, RowTable, pack
from pulsegraph.compute.apps.base import Patch
from pulsegraph.compute.apps.runner import AppConfig, Applications
from pulsegraph.compute.stage import ComputeStage, SealedEpoch
from pulsegraph.ingest.batch import Router
from pulsegraph.snapshots.epoch import EpochInfo
from pulsegraph.snapshots.store import ShardStore
from tests.compute.appgraph import Stream
from tests.compute.test_apps import random_tweet_epochs

# (compact_fraction, compact_min): rebuild after every change, now and then, never.
COMPACTIONS = [(0.0, 0), (0.2, 6), (1e9, 10**9)]


# -- RowTable against a dict --------------------------------------------------------------------------


def table_state(t: RowTable) -> dict[tuple[int, int], tuple[int, float]]:
    rows, cols, (a, b) = t.entries("a", "b")
    keys = list(zip(rows.tolist(), cols.tolist()))
    assert keys == sorted(keys) and len(set(keys)) == len(keys) == t.nnz
    return dict(zip(keys, zip(a.tolist(), b.tolist())))


@pytest.mark.parametrize("fraction,minimum", COMPACTIONS)
@pytest.mark.parametrize("seed", range(3))
def test_row_table_matches_a_dict(seed, fraction, minimum):
    rng = np.random.default_rng(seed)
    n = 20
    model: dict[tuple[int, int], tuple[int, float]] = {}
    for _ in range(40):
        model[(int(rng.integers(n)), int(rng.integers(n)))] = (int(rng.integers(100)), float(rng.random()))
    keys = list(model)
    t = RowTable.from_entries(
        n, np.array([k[0] for k in keys]), np.array([k[1] for k in keys]),
        {"a": np.array([model[k][0] for k in keys], dtype=np.int64), "b": np.array([model[k][1] for k in keys])},
        compact_fraction=fraction, compact_min=minimum,
    )
    for step in range(80):
        if rng.random() < 0.1:
            n += int(rng.integers(1, 5))
            t.grow(n)
        # Upserts: existing keys (new values), removed ones coming back, new ones (some in new rows).
        ups: dict[tuple[int, int], tuple[int, float]] = {}
        for _ in range(int(rng.integers(0, 8))):
            ups[(int(rng.integers(n)), int(rng.integers(n)))] = (int(rng.integers(100)), float(rng.random()))
        if ups:
            k = list(ups)
            t.upsert(np.array([x[0] for x in k]), np.array([x[1] for x in k]),
                     {"a": np.array([ups[x][0] for x in k], dtype=np.int64), "b": np.array([ups[x][1] for x in k])})
            model.update(ups)
        # Removals: live keys and keys that are not there.
        gone = [x for x in model if rng.random() < 0.08] + [(int(rng.integers(n)), int(rng.integers(n)))]
        t.remove(np.array([x[0] for x in gone]), np.array([x[1] for x in gone]))
        for x in gone:
            model.pop(x, None)
        # Both at once, as an epoch hands them over: some keys go, others come (in the overlay too).
        mixed = {x: rng.random() < 0.5 for x in list(model)[:: max(1, len(model) // 6)]}
        mixed.update({(int(rng.integers(n)), int(rng.integers(n))): True for _ in range(4)})
        keys = sorted(mixed)
        t.assign(pack(np.array([k[0] for k in keys]), np.array([k[1] for k in keys])), np.array([mixed[k] for k in keys]),
                 {"a": np.arange(len(keys), dtype=np.int64), "b": np.full(len(keys), 0.5)})
        for i, k in enumerate(keys):
            if mixed[k]:
                model[k] = (i, 0.5)
            else:
                model.pop(k, None)
        assert table_state(t) == model, step
        probe = [(int(rng.integers(n)), int(rng.integers(n))) for _ in range(10)] + list(model)[:5]
        got = t.get(np.array([p[0] for p in probe]), np.array([p[1] for p in probe]), "a", -1)
        assert got.tolist() == [model.get(p, (-1, 0.0))[0] for p in probe]
        # A sparse frontier (binary searches into the overlay) and a dense one (its row pointer), with repeats.
        for size in (3, n):
            frontier = rng.integers(0, n, size)
            nbrs, owner = t.neighbors(frontier)
            want = sorted((i, c) for i, r in enumerate(frontier.tolist()) for (rr, c) in model if rr == r)
            assert sorted(zip(owner.tolist(), nbrs.tolist())) == want
        ptr, idx = t.csr()
        assert len(ptr) == n + 1
        pairs = [(r, int(c)) for r in range(n) for c in idx[ptr[r]:ptr[r + 1]]]
        assert pairs == sorted(model)
    if fraction == 0.0:
        assert t.compactions > 0 and t.overlay == 0
    if minimum == 10**9:
        assert t.compactions == 0


# -- AppAdjacency, kept by the runner, against a build from the graph ------------------------------------

TYPES = ("mentions", "tags", "replies")


def random_typed_epochs(seed: int, config: AppConfig, epochs: int = 40, n0: int = 25):
    """Yields the stream after each random epoch: multi-edges added and removed a unit at a time, whole
    edges removed, a live pair given a second type (and later losing one of them), removals of edges that
    are not live (signed multiplicities), and vertices appearing with and without edges."""
    rng = np.random.default_rng(seed)
    st = Stream(config)
    n = n0
    for e in range(epochs):
        n += int(rng.integers(0, 4))
        edges: dict[tuple[str, str, str], int] = {}

        def change(key, dm, edges=edges):
            edges[key] = edges.get(key, 0) + dm

        for _ in range(int(rng.integers(1, 14))):
            live = [k for k, m in st.mult.items() if m + edges.get(k, 0) > 0]
            r = rng.random()
            if live and r < 0.25:
                change(live[int(rng.integers(len(live)))], -1)
            elif live and r < 0.35:
                k = live[int(rng.integers(len(live)))]
                change(k, -(st.mult[k] + edges.get(k, 0)))
            elif live and r < 0.5:
                s, d, t = live[int(rng.integers(len(live)))]
                change((s, d, TYPES[(TYPES.index(t) + 1 + int(rng.integers(2))) % 3]), 1)
            elif r < 0.55:
                s, d = (f"v{int(x)}" for x in rng.integers(0, n, 2))
                change((s, d, TYPES[int(rng.integers(3))]), -1)  # not live: the multiplicity goes below zero
            else:
                s, d = (f"v{int(x)}" for x in rng.integers(0, n, 2))
                change((s, d, TYPES[int(rng.integers(3))]), int(rng.integers(1, 3)))
        scores = {"tunkrank": rng.random(n + 10) if e % 7 == 0 else np.arange(n + 10, 0, -1, dtype=float)}
        st.commit(edges, vertices=[f"v{i}" for i in range(n)], scores=scores)
        yield st


def held(adj: AppAdjacency, n: int) -> dict:
    """Everything the applications can read of an adjacency, as plain lists."""
    out = {}
    rows, cols, (count,) = adj.out.entries("count")
    out["out"] = list(zip(rows.tolist(), cols.tolist(), count.tolist()))
    rows, cols, _ = adj.inn.entries()
    out["in"] = list(zip(rows.tolist(), cols.tolist()))
    assert sorted(out["in"]) == sorted((d, s) for s, d, _ in out["out"])
    for name, table in (("out", adj.out), ("in", adj.inn)):
        nbrs, owner = table.neighbors(np.arange(n))
        out[name + " rows"] = sorted(zip(owner.tolist(), nbrs.tolist()))
    out["degrees"] = (adj.out_degree().tolist(), adj.in_degree().tolist())
    return out


def held_typed(adj: AppAdjacency, g, like: AppAdjacency | None = None) -> dict:
    """The typed tables, with the value columns they keep (``like``'s, when given: a fresh build
    compared with a kept one holds what the kept one holds)."""
    out = {}
    for t in TYPES:
        kept = (like or adj)._typed.get(t)
        values = kept is None or bool(kept.dtypes)
        rows, cols, vals = adj.typed(g, t, values).entries(*(("mult", "first") if values else ()))
        out[t] = list(zip(rows.tolist(), cols.tolist(), *(v.tolist() for v in vals)))
    return out


def live_pairs_by_hand(st: Stream) -> list[tuple[int, int, int]]:
    count: dict[tuple[int, int], int] = {}
    for (s, d, _), m in st.mult.items():
        if m > 0:
            key = (st.g.index[s], st.g.index[d])
            count[key] = count.get(key, 0) + 1
    return sorted((s, d, c) for (s, d), c in count.items())


@pytest.mark.parametrize("fraction,minimum", COMPACTIONS)
@pytest.mark.parametrize("seed", range(3))
def test_kept_adjacency_equals_a_build_from_the_graph(seed, fraction, minimum):
    config = AppConfig(landmarks=3, compact_fraction=fraction, compact_min=minimum)
    two_types = 0
    for st in random_typed_epochs(seed, config):
        kept = st.apps.adjacency
        assert kept is not None and kept.builds == 1  # built at the first epoch only, then kept
        fresh = AppAdjacency.from_graph(st.g)
        assert held(kept, st.g.n) == held(fresh, st.g.n), st.epoch
        assert held_typed(kept, st.g) == held_typed(fresh, st.g, kept), st.epoch
        pairs = live_pairs_by_hand(st)
        assert held(kept, st.g.n)["out"] == pairs
        two_types += sum(c > 1 for _, _, c in pairs)
    assert two_types > 0  # some pair held two live types
    if fraction == 0.0:
        assert kept.out.compactions > 10


def test_a_pair_that_loses_one_type_keeps_the_other():
    st = Stream(AppConfig(compact_min=10**9))
    st.commit({("a", "b", "mentions"): 1, ("a", "b", "tags"): 2, ("b", "c", "mentions"): 1})
    st.commit({("a", "b", "mentions"): -1})
    adj = st.apps.adjacency
    a, b, c = (st.g.index[x] for x in "abc")
    assert adj.out.get(np.array([a]), np.array([b]), "count", 0).tolist() == [1]
    assert sorted(adj.out.neighbors(np.array([a]))[0].tolist()) == [b]
    assert st.out["components"].count == 1
    st.commit({("a", "b", "tags"): -2})
    assert adj.out.neighbors(np.array([a]))[0].tolist() == [] and adj.out_degree()[a] == 0
    assert adj.in_degree()[c] == 1
    assert st.out["components"].count == 2
    st.commit({("a", "b", "tags"): 1})  # back: the dead base entry is revived
    assert sorted(adj.out.neighbors(np.array([a]))[0].tolist()) == [b] and adj.out.overlay == 0


def test_kept_typed_edges_follow_real_shards_with_edge_times():
    """Through real shard stores the changes carry each edge's first add time; the kept per-type tables
    (K-exposure's edge lists and first-seen lookups) must equal a gather from the graph's columns."""
    stages = [ComputeStage(("mentions",), apps=AppConfig(compact_fraction=f, compact_min=m)) for f, m in COMPACTIONS]
    for sealed_epoch in sealed(1, epochs=12):
        for stage in stages:
            stage.apply([sealed_epoch])
            kept = stage.apps.adjacency
            assert kept is not None
            g = stage.graph
            fresh = AppAdjacency.from_graph(g)
            assert held_typed(kept, g, kept) == held_typed(fresh, g, kept)
            assert held(kept, g.n) == held(fresh, g.n)
    assert not kept._typed["mentions"].dtypes  # K-exposure reads mentions as pairs only: no values kept
    assert np.isfinite(held_typed(kept, g)["tags"][0][3])  # the times are real


# -- the applications on the kept adjacency against the rebuild path --------------------------------------


def comparable(out: dict) -> dict:
    def plain(v):
        if isinstance(v, Patch):  # landmark distances an epoch wrote
            return (v.base, v.shape, v.keys.tolist(), v.values.tolist())
        return np.nan_to_num(v, nan=-1.0).tolist() if isinstance(v, np.ndarray) else v
    return {app: {k: plain(v) for k, v in vars(got).items()} for app, got in out.items()}


@pytest.mark.parametrize("fraction,minimum", COMPACTIONS)
@pytest.mark.parametrize("seed", range(3))
def test_applications_on_the_kept_adjacency_equal_the_rebuild_path(seed, fraction, minimum):
    kept = random_typed_epochs(seed, AppConfig(landmarks=4, compact_fraction=fraction, compact_min=minimum))
    rebuilt = random_typed_epochs(seed, AppConfig(landmarks=4, rebuild_every_epoch=True))
    for a, b in zip(kept, rebuilt):
        assert comparable(a.out) == comparable(b.out), a.epoch
        assert a.apps.apps[-1].bfs_runs == b.apps.apps[-1].bfs_runs
    assert b.apps.adjacency is not None and b.apps.adjacency.builds == 1  # a new one each epoch
    assert a.out["components"].count > 1 and len(a.out["trends"].tags) > 0


@pytest.mark.parametrize("seed", range(3))
def test_tweet_applications_on_the_kept_adjacency_equal_the_rebuild_path(seed):
    """Real shards (edge times order the adopters), K-exposure recounted every epoch."""
    one = ComputeStage(("mentions",), apps=AppConfig(compact_fraction=0.2, compact_min=6))
    other = ComputeStage(("mentions",), apps=AppConfig(rebuild_every_epoch=True))
    for e in sealed(seed, epochs=14):
        a, b = one.apply([e]), other.apply([e])
        assert comparable(a.apps) == comparable(b.apps), e.info.epoch
    assert len(a.apps["topics"].tags) > 0


# -- restored from a checkpoint ---------------------------------------------------------------------------


def sealed(seed: int, epochs: int = 14, shards: int = 3, restore_at: int | None = None):
    """Sealed epochs from real shard stores over a random tweet stream. With ``restore_at``, the stores are
    checkpointed after that epoch and restored from it, so the next epoch's deltas hold the whole graph."""
    stores, router, offset = [ShardStore(i) for i in range(shards)], Router(shards), 0
    for e, batch in enumerate(random_tweet_epochs(seed, epochs=epochs), start=1):
        for updates in batch:
            router.add("p", offset, updates)
            offset += 1
        for store, b in zip(stores, router.take()):
            store.receive(b)
        yield SealedEpoch(info(e, offset), [s.apply(e, {"p": offset})[1] for s in stores])
        if e == restore_at:
            stores = [ShardStore.restore(s.state()) for s in stores]


def info(e: int, offset: int) -> dict:
    return EpochInfo(epoch=e, vector={"p": offset}, records=offset, sealed_at=float(e), commit_ms=0.0,
            timeliness_ms={"p50": 0.0, "p99": 0.0, "max": 0.0})


@pytest.mark.parametrize("seed", range(3))
def test_a_restored_stage_rebuilds_its_adjacency_and_goes_on_as_before(seed):
    """Shards and the compute stage checkpointed at epoch 5: the restored stage's first delta is the whole
    graph (full); it rebuilds the adjacency from it and then keeps it, publishing what the stage that never
    stopped publishes (landmarks aside: which vertices they are depends on the rankings seen on the way)."""
    restore_at = 5
    never = ComputeStage(("mentions",), apps=AppConfig(compact_fraction=0.2, compact_min=6))
    restarted: ComputeStage | None = None
    stopped = ComputeStage(("mentions",), apps=AppConfig(compact_fraction=0.2, compact_min=6))
    for plain, e in zip(sealed(seed), sealed(seed, restore_at=restore_at)):
        want = never.apply([plain])
        n = e.info.epoch
        if n <= restore_at:
            stopped.apply([e])
            if n == restore_at:
                restarted = ComputeStage.restored(stopped.checkpoint_state(), ("mentions",),
                                                  apps=AppConfig(compact_fraction=0.2, compact_min=6))
            continue
        assert restarted is not None
        got = restarted.apply([e])
        assert got.full_changes == (n == restore_at + 1)
        assert {k: v for k, v in comparable(got.apps).items() if k != "landmarks"} == \
            {k: v for k, v in comparable(want.apps).items() if k != "landmarks"}, n
        adj = restarted.apps.adjacency
        assert adj is not None and adj.builds == 1
        assert held(adj, restarted.graph.n) == held(AppAdjacency.from_graph(restarted.graph), restarted.graph.n)


def test_an_empty_epoch_and_a_graph_without_edges():
    apps = Applications(AppConfig(landmarks=2))
    st = Stream()
    st.apps = apps
    st.commit({}, vertices=["a", "b"])
    st.commit({("a", "b", "mentions"): 1})
    st.commit({})
    assert st.out["components"].count == 1
    assert apps.adjacency is not None and apps.adjacency.out.nnz == 1
