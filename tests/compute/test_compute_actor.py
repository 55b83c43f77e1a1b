"""The compute actor answers the status poll and hands over results while a batch runs.

The supervisor checks the memory budget and refreshes ``/health`` once per status poll, and a batch
of a large graph runs for tens of seconds: a poll queued behind it went unanswered for that long (the
log said "an actor did not answer the status poll within 30 s", and the budget went unchecked).
"""

from __future__ import annotations

import random
import time

import pytest
import ray

from pulsegraph.compute.actor import ComputeActor
from pulsegraph.compute.apps_actor import APP_GROUPS
from pulsegraph.compute.partition_actor import start_partitions_of
from pulsegraph.compute.stage import ComputeStage, SealedEpoch, StageConfig, fingerprint
from pulsegraph.snapshots.checkpoint import CheckpointStore
from tests.compute.test_apps import tweet
from tests.compute.test_stage import seal


def sealed_epochs(*sizes: int, shards: int = 2) -> list[SealedEpoch]:
    """Sealed epochs of ``sizes`` random tweets each (three edges a tweet; 40,000: a batch of a second or more)."""
    rng = random.Random(1)
    users = sum(sizes)

    def one() -> list:
        mentions = [f"u{rng.randrange(users)}", f"u{rng.randrange(users)}"]
        return tweet(f"u{rng.randrange(users)}", mentions, [f"h{rng.randrange(500)}"], ts=1.0)

    return seal([[one() for _ in range(size)] for size in sizes], shards)


def wait_for_batch(actor) -> None:
    deadline = time.monotonic() + 60
    while ray.get(actor.status.remote(), timeout=60)["batch_s"] is None:
        assert time.monotonic() < deadline, "the batch never started"
        time.sleep(0.01)


def test_the_status_poll_is_answered_while_a_batch_is_merged_and_ranked(ray_cluster):
    (epoch,) = sealed_epochs(40_000)
    actor = ComputeActor.remote()
    try:
        assert ray.get(actor.status.remote(), timeout=60) == {"epoch": 0, "batch_s": None, "failed": None}
        batch = actor.apply_epochs.remote([epoch.info], *epoch.deltas)
        seen = []
        while not ray.wait([batch], timeout=0)[0]:
            seen.append(ray.get(actor.status.remote(), timeout=60))
            time.sleep(0.02)
        assert ray.get(batch)["edges"] == sum(int((d.e_mult > 0).sum()) for d in epoch.deltas)
        # Answered during the batch (a poll queued behind it would only ever see it done), saying so.
        during = [s for s in seen if s["batch_s"] is not None]
        assert during, seen
        assert all(s["epoch"] == 1 and s["batch_s"] >= 0 for s in during)
        assert ray.get(actor.status.remote()) == {"epoch": 1, "batch_s": None, "failed": None}
    finally:
        ray.kill(actor)


def test_a_consumer_whose_graph_view_holds_nothing_gets_the_graph_whole_once_the_stage_reached_its_epochs(ray_cluster):
    """The API's new graph view parts (the old were lost) hold nothing: the actor hands over its graph whole as of
    the newest epoch merged, and nothing while it is behind the epochs the consumer has (a relaunch merging again)."""
    first, second = sealed_epochs(2_000, 1_000)
    live = ComputeStage.made(StageConfig())
    live.apply([first, second])
    whole = live.graph.whole_changes()
    actor = ComputeActor.remote()
    try:
        ray.get(actor.apply_epochs.remote([first.info], *first.deltas), timeout=120)
        assert ray.get(actor.graph_whole.remote(2), timeout=60) is None
        ray.get(actor.apply_epochs.remote([second.info], *second.deltas), timeout=120)
        epoch, got = ray.get(actor.graph_whole.remote(2), timeout=60)
        assert epoch == 2 and got.first_ts is None
        fields = ("src", "dst", "etype", "mult", "weight")
        assert {e for e in zip(*(getattr(got, f).tolist() for f in fields))} == {e for e in zip(*(getattr(whole, f).tolist() for f in fields))}
        assert len(got) == live.graph.live_edges()
        # Every result up to it is there for the pull that follows.
        assert [r.epoch for r in ray.get(actor.results_after.remote(0, 0), timeout=60)[0]] == [1, 2]
    finally:
        ray.kill(actor)


def test_a_result_is_pulled_while_the_next_batch_runs_with_the_names_as_of_its_epoch(ray_cluster):
    small, large = sealed_epochs(2_000, 60_000)
    reference = ComputeStage()
    reference.apply([small])
    names_1 = list(reference.graph.names)
    reference.apply([large])
    names_2 = list(reference.graph.names)
    actor = ComputeActor.remote()
    try:
        ray.get(actor.apply_epochs.remote([small.info], *small.deltas), timeout=120)
        batch = actor.apply_epochs.remote([large.info], *large.deltas)
        wait_for_batch(actor)
        results, names = ray.get(actor.results_after.remote(0, 0), timeout=60)
        # Beside the batch (queued behind it, the pull would only come back once it was done).
        assert not ray.wait([batch], timeout=0)[0]
        assert [r.epoch for r in results] == [1] and names.start == 0 and names.names == names_1
        ray.get(batch)
        results, names = ray.get(actor.results_after.remote(1, len(names_1)), timeout=60)
        assert [r.epoch for r in results] == [2] and names.start == len(names_1)
        assert names_1 + names.names == names_2 and not len(names.ids)
        # Names that no kept result starts from (the consumer's copy is not one the actor handed out):
        # answered in the actor's order instead, from its names as of now.
        assert ray.get(actor.results_after.remote(1, 5), timeout=60) is None
        results, names = ray.get(actor.results_in_order.remote(1, 5), timeout=60)
        assert [r.epoch for r in results] == [2] and names.start == 5 and names_2[:5] + names.names == names_2
        # The caller with everything: nothing new, from either.
        assert ray.get(actor.results_after.remote(2, len(names_2)), timeout=60)[0] == []
    finally:
        ray.kill(actor)


def test_a_stage_read_back_whole_publishes_its_first_epoch_whole_to_a_consumer_whose_graph_is_another_epochs(ray_cluster, tmp_path):
    """A clean stop wrote the stage whole at epoch 1: the restarted actor goes on from it with ordinary deltas.
    A consumer whose graph view is of epoch 1 (the view that stop kept) gets the next epoch's changes; one
    whose graph is another epoch's (no view kept, or a relaunch later on) gets the newest epoch whole."""
    first, second = sealed_epochs(2_000, 1_000)
    stage = ComputeStage.made(StageConfig())
    stage.apply([first])
    digest, _, whole_as, _ = stage.write_checkpoint(1, str(tmp_path), fingerprint(StageConfig()))
    assert whole_as == fingerprint(StageConfig())
    reference = stage.apply([second])  # what a stage that never stopped publishes for epoch 2
    path = str(CheckpointStore(tmp_path).folder(1) / "compute.ckpt")
    for graph_at in (1, 0):
        actor = ComputeActor.remote(config=StageConfig(), restore=(path, digest), whole=True)
        try:
            assert ray.get(actor.latest_epoch.remote(), timeout=60) == 1
            # The shards, restored with it, send the second epoch's delta only (``second`` is one).
            ray.get(actor.apply_epochs.remote([second.info], *second.deltas), timeout=120)
            got = ray.get(actor.results_after.remote(0, 0, False, graph_at), timeout=60)
            if got is None:
                got = ray.get(actor.results_in_order.remote(0, 0, False, graph_at), timeout=60)
            (result,), _ = got
            assert result.epoch == 2 and all((result.scores[k] == reference.scores[k]).all() for k in reference.scores)
            changed = {(s, d, t, m) for s, d, t, m in zip(*(getattr(result.edge_changes, f).tolist() for f in ("src", "dst", "etype", "mult")))}
            if graph_at == 1:
                assert not result.full_changes and len(result.edge_changes) == len(reference.edge_changes)
            else:
                live = ComputeStage.made(StageConfig())
                live.apply([first, second])
                whole = live.graph.whole_changes()
                assert result.full_changes and len(result.edge_changes) == live.graph.live_edges()
                assert changed == {(s, d, t, m) for s, d, t, m in zip(*(getattr(whole, f).tolist() for f in ("src", "dst", "etype", "mult")))}
        finally:
            ray.kill(actor)


def test_partition_actors_write_their_rows_and_a_stage_read_back_whole_makes_new_ones_from_them(ray_cluster, tmp_path):
    """With partition actors, a stop's checkpoint holds each partition's rows in a file of its own, written by
    that partition (never through the compute actor); a compute actor started from it makes new partition
    actors that read their files back, and publishes what a compute actor that went on publishes."""
    first, second, third = sealed_epochs(2_000, 1_000, 1_000)
    config = StageConfig(partitions=2)

    def newest(actor, e: SealedEpoch):
        ray.get(actor.apply_epochs.remote([e.info], *e.deltas), timeout=120)
        results, _ = ray.get(actor.results_in_order.remote(0, 0, False, e.info.epoch - 1), timeout=60)
        return results[-1]

    going = ComputeActor.remote(config=config)
    try:
        ray.get(going.apply_epochs.remote([first.info], *first.deltas), timeout=120)
        written = ray.get(going.checkpoint.remote(1, str(tmp_path), True), timeout=120)
        want = [newest(going, e) for e in (second, third)]
    finally:
        ray.kill(going)
    assert written.whole == fingerprint(config)
    assert [name for name, _ in written.files] == ["partition-0.ckpt", "partition-1.ckpt", *APP_GROUPS]
    folder = CheckpointStore(tmp_path).folder(1)
    # Without a manifest to name them, the partitions are made once the compute stage is read back.
    plain = ComputeActor.remote(config=config, restore=(str(folder / "compute.ckpt"), written.digest), whole=True)
    try:
        assert [m["held"] > 0 for m in ray.get(plain.partition_memory.remote(), timeout=60)] == [True, True]
    finally:
        ray.kill(plain)
    # The partitions start from the files the manifest names while the compute stage is read back.
    CheckpointStore(tmp_path).commit(1, {}, {}, {}, written.digest, compute_whole=written.whole, compute_files=dict(written.files))
    again = ComputeActor.remote(config=config, restore=(str(folder / "compute.ckpt"), written.digest), whole=True)
    try:
        held = ray.get(again.partition_memory.remote(), timeout=60)
        assert len(held) == 2 and all(m["held"] > 0 for m in held), held  # their rows, before any epoch
        for e, w in zip((second, third), want, strict=True):
            got = newest(again, e)
            assert got.epoch == w.epoch and got.error_bounds == w.error_bounds
            assert all((got.scores[k] == w.scores[k]).all() for k in w.scores)
            assert all(str(got.apps[name]) == str(w.apps[name]) for name in w.apps)
    finally:
        ray.kill(again)
    # A partition's file that does not check out is refused by the partition reading it.
    (folder / "partition-1.ckpt").write_bytes((folder / "partition-1.ckpt").read_bytes()[:-9] + b"corrupted")
    broken = ComputeActor.remote(config=config, restore=(str(folder / "compute.ckpt"), written.digest), whole=True)
    try:
        with pytest.raises(ray.exceptions.RayTaskError, match="partition-1.ckpt: checksum mismatch"):
            ray.get(broken.partition_memory.remote(), timeout=60)
    finally:
        ray.kill(broken)


def test_partitions_start_before_the_stage_is_read_back_only_from_a_manifest_naming_each_of_their_files(tmp_path):
    """Anything else (no manifest, another partition count's files) leaves them to the stage's port, made once
    it is read back, as a stage written with another config is refused there."""
    store = CheckpointStore(tmp_path)
    store.folder(1).mkdir(parents=True)
    three = {f"partition-{q}.ckpt": f"{q}" * 64 for q in range(3)}
    store.commit(1, {}, {}, {}, "0" * 64, compute_whole="f", compute_files=three)
    assert start_partitions_of(store.folder(1), CheckpointStore.compute_files_in(store.folder(1)), StageConfig().rank, 2) is None
    nowhere = tmp_path / "nowhere"
    assert CheckpointStore.compute_files_in(nowhere) == {}
    assert start_partitions_of(nowhere, CheckpointStore.compute_files_in(nowhere), StageConfig().rank, 2) is None


def test_the_applications_actor_lost_fails_the_next_batch_and_says_why(ray_cluster):
    """With partitions the applications run in an actor of their own while the next batch is merged and ranked;
    that actor dying fails a batch (the pipeline then relaunches), with a reason that names it."""
    epochs = sealed_epochs(200, 200, 200, 200)
    actor = ComputeActor.remote(config=StageConfig(partitions=2))
    try:
        ray.get(actor.apply_epochs.remote([epochs[0].info], *epochs[0].deltas), timeout=120)
        results, _ = ray.get(actor.results_in_order.remote(0, 0), timeout=60)
        assert [r.epoch for r in results] == [1] and set(results[0].apps) == {"components", "trends", "topics", "landmarks"}
        ray.kill(ray.get(actor.owned_actors.remote())[-1], no_restart=True)
        with pytest.raises(ray.exceptions.RayTaskError, match="the applications' actor died"):
            for e in epochs[1:]:
                ray.get(actor.apply_epochs.remote([e.info], *e.deltas), timeout=120)
    finally:
        ray.kill(actor)


@pytest.mark.parametrize("partitions", [1, 2])
def test_every_result_handed_over_carries_each_applications_output(ray_cluster, partitions):
    """In the compute actor's process (P = 1) or in an actor of their own beside the next batch (P = 2), a result
    reaches the API only with its applications' output and their times."""
    epochs = sealed_epochs(300, 300, 300)
    actor = ComputeActor.remote(config=StageConfig(partitions=partitions))
    try:
        for e in epochs:
            ray.get(actor.apply_epochs.remote([e.info], *e.deltas), timeout=120)
        results, _ = ray.get(actor.results_in_order.remote(0, 0), timeout=60)
        assert [r.epoch for r in results] == [1, 2, 3]
        for r in results:
            assert set(r.apps) == {"components", "trends", "topics", "landmarks"}, r.epoch
            assert {"app_graph", "components", "landmarks"} <= set(r.apps_ms), r.epoch
    finally:
        ray.kill(actor)
