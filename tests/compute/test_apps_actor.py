"""The applications in actors of their own publish, epoch for epoch, what they publish inside the compute stage.

With ``--compute-partitions`` above 1 the compute actor runs them in two
:class:`~pulsegraph.compute.apps_actor.AppsActor` (the graph's applications and the topics'), each fed each epoch
with the edge changes and what the graph's names, presence and ``last_seen`` attributes did
(:class:`~pulsegraph.compute.apps.view.AppsInput`), never the graph itself but for a rebuild. These run real
actors beside a stage that keeps them in process, over the same sealed epochs: plain tweets, windows that give
vertex ids back and reuse them, epochs merged several at a time, and a consumer's request for whole arrays; then
the actors' files in a checkpoint written whole (and the one file of a checkpoint with one actor for them all).
"""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest
import ray

from pulsegraph.compute.apps.runner import AppConfig, Applications
from pulsegraph.compute.apps_actor import (
    APP_GROUPS,
    APPS_FILE,
    ApplicationGroups,
    AppsLost,
    RayApplications,
    spawn_actor,
    spawn_apps,
    start_apps_of,
)
from pulsegraph.compute.partition_actor import kill_quietly
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


def in_actor(spawn=spawn_apps, **kw) -> ComputeStage:
    return ComputeStage(apps_factory=lambda config, state: spawn(config, state), **kw)


def kill(port) -> None:
    kill_quietly(port.actors)


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
        # Each actor keeps only the tables its applications read: the topics' no distinct pairs, the graph's no
        # typed edges, and no names.
        hosts = {name: ray.get(a.__ray_call__.remote(lambda actor: actor._host))
                 for name, a in zip(APP_GROUPS.values(), outside.apps.actors)}
        graph, topics = hosts[("components", "landmarks")], hosts[("trends", "topics")]
        assert [a.name for a in graph.apps.apps] == ["components", "landmarks"] and not graph.view.names
        assert graph.apps.adjacency.pairs and not graph.apps.adjacency._typed and graph.apps.adjacency.out.nbytes()
        assert [a.name for a in topics.apps.apps] == ["trends", "topics"] and topics.view.names == inside.graph.names
        assert not topics.apps.adjacency.pairs and not len(topics.apps.adjacency.out.entries()[0])
        assert set(topics.apps.adjacency._typed) == {"tags", "mentions"}
    finally:
        kill(outside.apps)


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
            g = inside.graph
            for actor in outside.apps.actors:
                view = ray.get(actor.__ray_call__.remote(lambda actor: actor._host.view))
                assert view.names == (g.names if view.keeps_names else []) and view.n == g.n
                assert view.present().tolist() == g.present().tolist()
                assert view.last_seen(np.arange(g.n)).tolist() == g.last_seen(np.arange(g.n)).tolist()
            reused += len(inside.graph.name_changes(e.info.epoch - 1, inside.graph.n).ids)
    finally:
        kill(outside.apps)
    assert reuse_after is None or reused, "no id was reused: the test proves nothing about renames"


@pytest.mark.parametrize("spawn,files,port", [(spawn_apps, list(APP_GROUPS), ApplicationGroups),
                                               (spawn_actor, [APPS_FILE], RayApplications)], ids=["two actors", "one"])
def test_the_actors_written_whole_are_read_back_by_new_ones_and_go_on(ray_cluster, tmp_path, spawn, files, port):
    """A clean stop's checkpoint holds the applications in a file for each actor; the stage read back makes new
    actors from them, which publish what the applications that went on publish. Read back with another config,
    only its ids and the applications' state go on, as from any checkpoint. One actor for them all, as an earlier
    version ran them, is read back the same way from its one file."""
    epochs = timeless(sealed(2))
    config = StageConfig()
    going, stopped = in_actor(spawn), in_actor(spawn)
    again = None
    try:
        for e in epochs[:6]:
            going.apply([e])
            stopped.apply([e])
        written = stopped.write_checkpoint(6, str(tmp_path), fingerprint(config))
        assert [name for name, _ in written.files] == files
        stamps = stopped.apps.state_dict()["topics"]  # taggings without edge times
        kill(stopped.apps)
        folder = CheckpointStore(tmp_path).folder(6)
        saved = loads(read_verified(folder / "compute.ckpt", written.digest))
        assert start_apps_of(folder, CheckpointStore.compute_files_in(folder), AppConfig()) is None  # no manifest names its file: made once the stage is read
        CheckpointStore(tmp_path).commit(6, {}, {}, {}, written.digest, compute_whole=written.whole, compute_files=dict(written.files))
        # Started from the manifest's files with another config: not taken, and new actors made instead.
        named = CheckpointStore.compute_files_in(folder)
        other_config = start_apps_of(folder, named, AppConfig(landmarks=4))
        assert isinstance(other_config, port)
        refused = ComputeStage.made(config, loads(read_verified(folder / "compute.ckpt", written.digest)), whole=True,
                                    folder=folder, started_apps=other_config)
        assert not {a._actor_id for a in refused.apps.actors} & {a._actor_id for a in other_config.actors}
        kill(refused.apps)
        # Started from them with the stage's config: taken over by the stage read back.
        early = start_apps_of(folder, named, AppConfig())
        assert isinstance(early, port)
        started = [a._actor_id for a in early.actors]
        again = ComputeStage.made(config, saved, whole=True, folder=folder, started_apps=early)
        assert isinstance(again.apps, port) and [a._actor_id for a in again.apps.actors] == started and not early.actors
        for e in epochs[6:]:
            same(again.apply([e]), going.apply([e]))
        other = ComputeStage.made(StageConfig(rank_types=("mentions",)), loads(read_verified(folder / "compute.ckpt", written.digest)))
        assert isinstance(other.apps, Applications) and len(stamps["keys"])
        assert other.apps.exposure._restored.keys.tolist() == stamps["keys"].tolist()
    finally:
        for stage in (going, again):
            if stage is not None:
                kill(stage.apps)


@pytest.mark.parametrize("victim", [0, 1], ids=list(APP_GROUPS))
def test_an_actor_that_died_fails_the_epoch_and_says_why(ray_cluster, victim):
    epochs = sealed(0)
    stage = in_actor()
    try:
        stage.apply([epochs[0]])
        ray.kill(stage.apps.actors[victim], no_restart=True)
        with pytest.raises(AppsLost, match="the applications' actor died"):
            stage.apply([epochs[1]])
    finally:
        kill(stage.apps)


def test_a_port_is_pickled_only_as_the_files_its_actors_wrote(ray_cluster):
    port = spawn_apps(AppConfig())
    try:
        with pytest.raises(Exception, match="pickled only as the file it wrote"):
            pickle.dumps(port)
    finally:
        kill(port)
