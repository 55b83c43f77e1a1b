"""The compute stage handed several sealed epochs at once: it ranks the newest, labelled with its own number.

Deltas come from real shard stores (tests/compute/test_apps.py's random tweet
streams, with removals and re-adds). One stage takes every epoch alone, another
takes them in batches of up to four (as when ranking falls behind the cuts):
each batch's result must be the newest epoch's, equal to what the first stage
published for that epoch (graph, degrees, scores within tolerance, every
application), and must name the epochs it merged. And the applications split in the groups their actors run
publish, together, what they all publish in one stage.
"""

from __future__ import annotations

import pickle
from concurrent.futures import Future

import numpy as np
import pytest

from pulsegraph.compute.apps.exposure import Exposure
from pulsegraph.compute.apps.base import AppGraph
from pulsegraph.compute.apps.runner import AppConfig, Applications
from pulsegraph.compute.exceptions import ComputeError
from pulsegraph.compute.graph import GlobalGraph
from pulsegraph.compute.stage import ComputeStage, SealedEpoch, StageConfig, fingerprint
from pulsegraph.ingest.batch import Router
from pulsegraph.snapshots.attrs import AttrTable, encode
from pulsegraph.snapshots.checkpoint import CheckpointStore, loads, read_verified
from pulsegraph.snapshots.epoch import EpochInfo
from pulsegraph.snapshots.store import ShardStore
from tests.compute.test_apps import random_tweet_epochs


def sealed(seed: int, shards: int = 3) -> list[SealedEpoch]:
    return seal(random_tweet_epochs(seed, epochs=14), shards)


def seal(epochs: list[list[list]], shards: int) -> list[SealedEpoch]:
    """``epochs`` (each a list of transactions, each a list of updates) through ``shards`` shard stores, as
    sealed epochs 1, 2, ... with every shard's delta."""
    stores, router, out, offset = [ShardStore(i) for i in range(shards)], Router(shards), [], 0
    for e, batch in enumerate(epochs, start=1):
        for updates in batch:
            router.add("p", offset, updates)
            offset += 1
        for store, b in zip(stores, router.take()):
            store.receive(b)
        info = EpochInfo(epoch=e, vector={"p": offset}, records=offset, sealed_at=float(e), commit_ms=0.0,
                timeliness_ms={"p50": 0.0, "p99": 0.0, "max": 0.0})
        out.append(SealedEpoch(info, [s.apply(e, {"p": offset})[1] for s in stores]))
    return out


def published(r) -> dict:
    """What must not depend on how epochs were batched. Landmarks are left out: which vertices are
    landmarks depends on the rankings seen on the way (they are re-chosen only past a drift)."""
    apps = {name: {k: (np.nan_to_num(v, nan=-1.0).tolist() if isinstance(v, np.ndarray) else v)
                   for k, v in vars(got).items() if k != "as_of"}
            for name, got in r.apps.items() if name != "landmarks"}
    return {"vertices": r.vertices, "edges": r.edges, "out": r.out_degree.tolist(), "in": r.in_degree.tolist(), "apps": apps}


@pytest.mark.parametrize("seed", range(4))
def test_merged_epochs_rank_as_the_newest_and_say_which_they_merged(seed):
    epochs = sealed(seed)
    one = ComputeStage(("mentions",))
    each = {e.info.epoch: one.apply([e]) for e in epochs}
    many = ComputeStage(("mentions",))
    sizes = [1, 3, 2, 4, 1, 3]
    at = 0
    for size in sizes:
        batch = epochs[at : at + size]
        at += size
        r = many.apply(batch)
        newest = batch[-1].info.epoch
        assert r.epoch == newest and r.vector == batch[-1].info.vector and r.records == batch[-1].info.records
        assert r.skipped == [e.info.epoch for e in batch[:-1]]
        want = each[newest]
        assert published(r) == published(want)
        for algo, s in want.scores.items():
            assert np.abs(r.scores[algo] - s).sum() <= 1e-6 * max(1.0, float(s.sum())), algo
    assert at == len(epochs)


def test_an_epoch_that_does_not_follow_is_refused():
    epochs = sealed(0)
    stage = ComputeStage()
    stage.apply(epochs[:2])
    with pytest.raises(ValueError, match="epoch 2 after epoch 2"):
        stage.apply([epochs[1]])


@pytest.mark.parametrize("seed", range(3))
def test_global_ids_do_not_depend_on_the_shard_count(seed):
    """A relaunch on fewer nodes, or a restart with another --shards and no checkpoint,
    cuts the same epochs with other shards; the API keeps the names it has and appends. So the ids
    must be a function of the epochs alone: the same names in the same order, epoch by epoch."""
    orders = {}
    for shards in (1, 2, 3, 5):
        stage = ComputeStage(("mentions",))
        seen = []
        for e in sealed(seed, shards):
            stage.apply([e])
            seen.append(list(stage.graph.names))
        orders[shards] = seen
    assert orders[2] == orders[1] and orders[3] == orders[1] and orders[5] == orders[1]


def test_a_stage_over_partitions_publishes_what_one_engine_does():
    """``partitions=3`` (in this process: the stage's default factory) against today's single engine on the
    same epochs: the same result fields with the same keys and types, the same graph and applications, ranks
    within twice the published bound of each other, the same bounds; one partition is today's RankEngine."""
    from pulsegraph.compute.engine import RankEngine
    from pulsegraph.compute.partitioned import PartitionedEngine
    from pulsegraph.compute.stage import StageConfig

    epochs = sealed(1)
    one = ComputeStage.made(StageConfig(rank_types=("mentions",)))
    three = ComputeStage.made(StageConfig(rank_types=("mentions",), partitions=3))
    assert isinstance(one.engine, RankEngine) and isinstance(three.engine, PartitionedEngine)
    assert three.backend_name == one.backend_name == "numpy"
    for at, size in [(0, 1), (1, 3), (4, 1), (5, 2), (7, 7)]:
        batch = epochs[at:at + size]
        a, b = one.apply(batch), three.apply(batch)
        assert published(a) == published(b)
        for field in ("compute_ms", "iterations", "methods", "error_bounds"):
            assert getattr(a, field).keys() == getattr(b, field).keys(), field
        assert {k: type(v) for k, v in a.iterations.items()} == {k: type(v) for k, v in b.iterations.items()}
        assert isinstance(b.graph_ms, float) and b.graph_ms >= 0
        assert a.error_bounds == b.error_bounds
        for algo, s in a.scores.items():
            assert b.scores[algo].dtype == s.dtype and b.scores[algo].shape == s.shape
            assert np.abs(b.scores[algo] - s).sum() <= 2 * a.error_bounds[algo], algo


def test_a_graph_pickled_whole_with_the_attributes_it_once_kept_goes_on_with_their_last_seen():
    """The version before kept every vertex's attributes in the merged graph (a clean stop's checkpoint pickles
    it whole); read back now, their ``last_seen`` become the column, and the stage goes on as one that never stopped."""
    epochs = sealed(1)
    ongoing, stage = ComputeStage(), ComputeStage()
    want = [ongoing.apply([e]) for e in epochs]
    for e in epochs[:7]:
        stage.apply([e])
    g = stage.graph
    seen = g.last_seen(np.arange(g.n))
    assert seen.any()
    table = AttrTable()  # as that version held them: encoded, the users' with their last tweet time
    for i in np.flatnonzero(g._has_attrs.view[: g.n]).tolist():
        table.put(i, encode({"kind": "user", "last_seen": float(seen[i])} if seen[i] else {"kind": "hashtag"}))
    state = {k: v for k, v in vars(g).items() if k != "_last_seen"} | {"attrs": table}
    old = GlobalGraph.__new__(GlobalGraph)
    old.__setstate__(pickle.loads(pickle.dumps(state)))
    assert not hasattr(old, "attrs") and old.last_seen(np.arange(g.n)).tolist() == seen.tolist()
    stage.graph = old
    for e, w in zip(epochs[7:], want[7:]):
        assert published(stage.apply([e])) == published(w)


@pytest.mark.parametrize("seed, partitions", [(0, 1), (1, 1), (2, 1), (3, 1), (4, 2), (5, 3)])
def test_a_stage_written_whole_and_read_back_goes_on_as_one_that_never_stopped(tmp_path, seed, partitions):
    """A clean stop writes the stage whole (its merged graph, ranking vectors and applications, as a
    checkpoint file); read back at any epoch, it publishes for every later epoch exactly what the stage that
    went on publishes: scores, counts, degrees, components, topics, landmarks, the graph's changes. With
    partitions in this process (the port pickled with the stage; actors write files: test_compute_actor)."""
    epochs = seal(random_tweet_epochs(seed, epochs=16, users=40, tags=6), 3)
    config = StageConfig(partitions=partitions)
    ongoing = ComputeStage.made(config)
    want = [ongoing.apply([e]) for e in epochs]
    for cut in (3, 9):
        stage = ComputeStage.made(config)
        for e in epochs[:cut]:
            stage.apply([e])
        digest, _, whole_as, _ = stage.write_checkpoint(cut, str(tmp_path), fingerprint(config))
        path = CheckpointStore(tmp_path).folder(cut) / "compute.ckpt"
        stage = ComputeStage.made(config, loads(read_verified(path, digest)), whole=True)
        assert whole_as == fingerprint(config) and stage.epoch == cut
        for e, w in zip(epochs[cut:], want[cut:]):
            got = stage.apply([e])
            assert published(got) == published(w), (cut, e.info.epoch)
            assert all((got.scores[k] == w.scores[k]).all() for k in w.scores)
            assert str(got.apps["landmarks"]) == str(w.apps["landmarks"])
            assert str(got.edge_changes) == str(w.edge_changes)


def test_a_stage_with_a_recount_in_flight_is_written_whole_and_goes_on(tmp_path):
    """With a topics budget the recount runs on a thread of its own: writing the stage waits for the one in
    flight and keeps it as done, and the stage read back takes it in and starts the next on a new thread."""
    config = StageConfig(apps=AppConfig(topics_budget=0.5))
    epochs = seal(random_tweet_epochs(5, epochs=8, users=40, tags=6), 2)
    stage = ComputeStage.made(config)
    for e in epochs[:4]:
        stage.apply([e])
    digest, *_ = stage.write_checkpoint(4, str(tmp_path), fingerprint(config))
    again = ComputeStage.made(config, loads(read_verified(CheckpointStore(tmp_path).folder(4) / "compute.ckpt", digest)), whole=True)
    for e in epochs[4:]:
        got, want = again.apply([e]), stage.apply([e])
        assert all((got.scores[k] == want.scores[k]).all() for k in want.scores)
        assert published(got)["apps"]["components"] == published(want)["apps"]["components"]
    assert got.epoch == 8 and again.apps.exposure._pool is not None and got.apps["topics"].as_of >= 4


def test_a_recount_still_running_is_given_up_when_the_stage_is_written_whole_and_is_due_again():
    """A stop must not wait out a recount (tens of seconds on a large graph): written whole, the stage gives it up
    and the stage read back counts its hashtags again, or everything where it was a whole recount."""
    exp = Exposure(budget=0.5)
    running: Future = Future()  # never done
    exp._running = (running, 3, 0.0, np.array([5, 9]))
    back = pickle.loads(pickle.dumps(exp))
    assert back._running is None and back._pending == {5, 9} and back._pool is not None and not back._count_all
    exp._running = (running, 3, 0.0, None)
    assert pickle.loads(pickle.dumps(exp))._count_all
    running.set_result({})
    done = pickle.loads(pickle.dumps(exp))
    assert done._running[0].done() and done._running[0].result() == {} and not done._count_all


# The groups the applications are split in where they run in actors of their own (compute.apps_actor.APP_GROUPS,
# which tests/compute/test_apps_actor.py checks on Ray; this file stays without it).
GROUPS = [("components", "landmarks"), ("trends", "topics")]


@pytest.mark.parametrize("seed", [0, 1])
def test_applications_split_in_groups_publish_what_they_publish_together_and_hold_only_what_they_read(seed):
    epochs = sealed(seed)
    whole = ComputeStage()
    groups = [ComputeStage(apps=AppConfig(only=names)) for names in GROUPS]
    for k, e in enumerate(epochs):
        if k == 7:  # a consumer lost the chain of patches
            whole.apps.resend_whole()
            for g in groups:
                g.apps.resend_whole()
        want = whole.apply([e]).apps
        got = {name: r for g in groups for name, r in g.apply([e]).apps.items()}
        assert list(got) == [n for names in GROUPS for n in names] and {n: str(r) for n, r in got.items()} == {
            n: str(r) for n, r in want.items()}
    graph, topics = (g.apps for g in groups)
    assert graph.adjacency.pairs and not graph.adjacency._typed and graph.exposure is None and not graph.state_dict()
    assert not topics.adjacency.pairs and not len(topics.adjacency.out.entries()[0]) and set(topics.adjacency._typed) == {"tags", "mentions"}
    assert topics.state_dict()["topics"]["keys"].tolist() == whole.apps.state_dict()["topics"]["keys"].tolist()
    with pytest.raises(ComputeError, match="reads_pairs is False"):
        AppGraph(groups[1].graph, 1, topics.adjacency).out_degree()
    with pytest.raises(ComputeError, match="no application is named"):
        Applications(AppConfig(only=("pagerank",)))
