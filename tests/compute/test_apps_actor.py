"""The applications in an actor of their own publish, epoch for epoch, what they publish inside the compute stage.

With ``--compute-partitions`` above 1 the compute actor runs them in an
:class:`~pulsegraph.compute.apps_actor.AppsActor`, fed each epoch with the edge changes and what the graph's
names, presence and ``last_seen`` attributes did (:class:`~pulsegraph.compute.apps.view.AppsInput`), never the
graph itself but for a rebuild. These run a real actor beside a stage that keeps them in process, over the
same sealed epochs: plain tweets, windows that give vertex ids back and reuse them, epochs merged several at
a time, and a consumer's request for whole arrays; then the actor's file in a checkpoint written whole.
"""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest
import ray

from pulsegraph.compute.apps.runner import AppConfig, Applications
from pulsegraph.compute.apps_actor import APPS_FILE, AppsLost, RayApplications, spawn_apps, start_apps_of
from pulsegraph.compute.stage import ComputeStage, SealedEpoch, StageConfig, fingerprint
from pulsegraph.snapshots.checkpoint import CheckpointStore, loads, read_verified
from tests.compute.test_stage import published, sealed
from tests.compute.test_window import shard_window_epochs


def same(got, want) -> None:
    """Every application's result, landmarks and their patches included (published() leaves landmarks out:
    they depend on the batching; here both stages merge the same batches)."""
    assert published(got) == published(want)
    for name, result in want.apps.items():
        assert str(got.apps[name]) == str(result), name
    assert got.apps_ms.keys() == want.apps_ms.keys()


def in_actor(**kw) -> ComputeStage:
    return ComputeStage(apps_factory=lambda config, state: spawn_apps(config, state), **kw)


def timeless(epochs: list[SealedEpoch]) -> list[SealedEpoch]:
    """``epochs`` with deltas that carry no edge times: K-exposure then stamps each tagging with its user's
    ``last_seen`` attribute, which the actor has only from what the stage sends it."""
    return [SealedEpoch(e.info, [dataclasses.replace(d, e_first_ts=np.zeros(0)) for d in e.deltas]) for e in epochs]


@pytest.mark.parametrize("seed,times", [(0, True), (1, True), (2, False)])
def test_tweets_merged_one_or_several_epochs_at_a_time(ray_cluster, seed, times):
    epochs = sealed(seed) if times else timeless(sealed(seed))
    inside, outside = ComputeStage(), in_actor()
    try:
        batches: list[list[SealedEpoch]] = [epochs[:1], epochs[1:4], epochs[4:5], epochs[5:9], *([e] for e in epochs[9:])]
        for k, batch in enumerate(batches):
            if k == 3:  # a consumer lost the chain of patches: both publish whole arrays next
                inside.apps.resend_whole()
                outside.apps.resend_whole()
            same(outside.apply(batch), inside.apply(batch))
        got, want = outside.apps.state_dict()["topics"], inside.apps.state_dict()["topics"]
        assert {k: v.tolist() for k, v in got.items()} == {k: v.tolist() for k, v in want.items()}
        assert times or (want["times"] > 0).any(), "no tagging was stamped with a last_seen"
    finally:
        ray.kill(outside.apps.actor)


@pytest.mark.parametrize("seed,reuse_after", [(0, None), (3, 1), (4, 1)])
def test_windows_that_give_ids_back_and_reuse_them(ray_cluster, seed, reuse_after):
    ranked = ("mentions",)
    inside, outside = ComputeStage(ranked, reuse_after=reuse_after), in_actor(rank_types=ranked, reuse_after=reuse_after)
    reused = 0
    try:
        for _, e in shard_window_epochs(seed, 30, users=20):
            got, want = outside.apply([e]), inside.apply([e])
            same(got, want)
            # The actor's copy of what the graph says (names renamed with reused ids, presence, last_seen).
            view = ray.get(outside.apps.actor.__ray_call__.remote(lambda actor: actor._host.view))
            g = inside.graph
            assert view.names == g.names and view.n == g.n
            assert view.present().tolist() == g.present().tolist()
            assert view.last_seen(np.arange(g.n)).tolist() == g.last_seen(np.arange(g.n)).tolist()
            reused += len(inside.graph.name_changes(e.info.epoch - 1, inside.graph.n).ids)
    finally:
        ray.kill(outside.apps.actor)
    assert reuse_after is None or reused, "no id was reused: the test proves nothing about renames"


def test_the_actor_written_whole_is_read_back_by_a_new_one_and_goes_on(ray_cluster, tmp_path):
    """A clean stop's checkpoint holds the applications in a file of the actor's own; the stage read back makes a
    new actor from it, which publishes what the applications that went on publish. Read back with another config,
    only its ids and the applications' state go on, as from any checkpoint."""
    epochs = timeless(sealed(2))
    config = StageConfig()
    going, stopped = in_actor(), in_actor()
    again = None
    try:
        for e in epochs[:6]:
            going.apply([e])
            stopped.apply([e])
        written = stopped.write_checkpoint(6, str(tmp_path), fingerprint(config))
        assert [name for name, _ in written.files] == [APPS_FILE]
        stamps = stopped.apps.state_dict()["topics"]  # taggings without edge times
        ray.kill(stopped.apps.actor)
        folder = CheckpointStore(tmp_path).folder(6)
        saved = loads(read_verified(folder / "compute.ckpt", written.digest))
        assert start_apps_of(folder, CheckpointStore.compute_files_in(folder), AppConfig()) is None  # no manifest names its file: made once the stage is read
        CheckpointStore(tmp_path).commit(6, {}, {}, {}, written.digest, compute_whole=written.whole, compute_files=dict(written.files))
        # Started from the manifest's file with another config: not taken, and a new actor made instead.
        files = CheckpointStore.compute_files_in(folder)
        other_config = start_apps_of(folder, files, AppConfig(landmarks=4))
        assert other_config is not None
        refused = ComputeStage.made(config, loads(read_verified(folder / "compute.ckpt", written.digest)), whole=True,
                                    folder=folder, started_apps=other_config)
        assert refused.apps.actor._actor_id != other_config.actor._actor_id
        ray.kill(refused.apps.actor)
        # Started from it with the stage's config: taken over by the stage read back.
        early = start_apps_of(folder, files, AppConfig())
        assert early is not None
        started = early.actor
        again = ComputeStage.made(config, saved, whole=True, folder=folder, started_apps=early)
        assert isinstance(again.apps, RayApplications) and again.apps.actor._actor_id == started._actor_id and early.actor is None
        for e in epochs[6:]:
            same(again.apply([e]), going.apply([e]))
        other = ComputeStage.made(StageConfig(rank_types=("mentions",)), loads(read_verified(folder / "compute.ckpt", written.digest)))
        assert isinstance(other.apps, Applications) and len(stamps["keys"])
        assert other.apps.exposure._restored.keys.tolist() == stamps["keys"].tolist()
    finally:
        for stage in (going, again):
            if stage is not None:
                ray.kill(stage.apps.actor)


def test_an_actor_that_died_fails_the_epoch_and_says_why(ray_cluster):
    epochs = sealed(0)
    stage = in_actor()
    stage.apply([epochs[0]])
    ray.kill(stage.apps.actor, no_restart=True)
    with pytest.raises(AppsLost, match="the applications' actor died"):
        stage.apply([epochs[1]])


def test_a_port_is_pickled_only_as_the_file_its_actor_wrote(ray_cluster):
    port = spawn_apps(AppConfig())
    try:
        with pytest.raises(Exception, match="pickled only as the file it wrote"):
            pickle.dumps(port)
    finally:
        ray.kill(port.actor)
