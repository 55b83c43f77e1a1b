"""Retained epochs moved out of memory: served from their archive files, memory-mapped, with the same bytes.

Epochs are built by hand (random scores and degrees, topics and trends, ties on
purpose) and fed to two stores: one keeps everything in memory, the other
archives each epoch and serves all but the newest HOT_EPOCHS from the files.
Every read of every epoch answers byte-identically, before and after it went
cold, and the cold arrays really are memory maps.
"""

from __future__ import annotations

import time

import numpy as np
from fastapi.testclient import TestClient

from pulsegraph.api.app import create_app
from pulsegraph.api.archive import ResultArchive
from pulsegraph.api.store import HOT_EPOCHS, ResultStore
from pulsegraph.compute.apps.components import ComponentsResult
from pulsegraph.compute.apps.exposure import TopicsResult
from pulsegraph.compute.apps.landmarks import LandmarksResult
from pulsegraph.compute.apps.trends import TrendsResult
from pulsegraph.compute.changes import EdgeChanges
from pulsegraph.compute.ids import NameChanges
from pulsegraph.compute.results import EpochResult

N = 300
NAMES = [f"v{i}" for i in range(N)] + ["#tag0", "#tag1", "#tag2"]


def result(epoch: int, rng: np.random.Generator, skipped: list[int] | None = None, per_vertex_apps: bool = True) -> EpochResult:
    """``per_vertex_apps``: with component labels and landmark distances (a restart does not bring those
    back for the epochs before it: the archive keeps their undo records, not the arrays themselves)."""
    n = len(NAMES)
    pr = np.round(rng.random(n), 2)  # rounded: many ties, broken by vertex id
    src = rng.integers(0, N, 40).astype(np.int32)
    dst = rng.integers(0, N, 40).astype(np.int32)
    ones = np.ones(40, np.int64)
    tags = np.array([N, N + 1, N + 2], np.int32)
    return EpochResult(
        epoch=epoch, vector={"p:0": 100 * epoch}, records=100 * epoch, vertices=n, edges=40 * epoch,
        committed_at=time.time(), commit_ms=1.0, timeliness_ms={"p50": 1.0, "p99": 2.0, "max": 3.0},
        scores={"pagerank": pr / pr.sum(), "tunkrank": rng.random(n)},
        out_degree=rng.integers(0, 9, n).astype(np.int32), in_degree=rng.integers(0, 9, n).astype(np.int32),
        edge_changes=EdgeChanges(src, dst, np.zeros(40, np.int16), ones, ones * 1_000_000), full_changes=epoch == 1,
        types=["mentions"],
        apps={k: v for k, v in {
            # Per-vertex arrays that change in places every epoch, as labels and distances do.
            "components": ComponentsResult(
                np.where(rng.random(n) < 0.2, rng.integers(0, N, n), np.arange(n) // 50 * 50).astype(np.int32), 7,
                np.array([0, 50]), np.array([50, 50]),
            ),
            "landmarks": LandmarksResult(
                np.array([3, 9], np.int32), rng.integers(0, 4, (2, n)).astype(np.uint16), rng.integers(0, 4, (2, n)).astype(np.uint16),
            ),
            "trends": TrendsResult(tags, rng.integers(1, 50, 3).astype(np.int64)),
            "topics": TopicsResult(tags=tags, usage=np.array([5, 4, 3]), users=np.array([3, 2, 1]),
                                   persistence=rng.random(3), curve=rng.random((3, 8)), reached=rng.integers(0, 9, (3, 8)),
                                   as_of=epoch),
        }.items() if per_vertex_apps or k not in ("components", "landmarks")},
        skipped=skipped or [],
    )


def reads(epoch: int) -> list[str]:
    return [
        f"/v1/epochs/{epoch}", f"/v1/rank/top?k=50&epoch={epoch}", f"/v1/rank/top?k=20&algo=tunkrank&epoch={epoch}",
        f"/v1/vertices/v7?epoch={epoch}", f"/v1/vertices/v123?epoch={epoch}", f"/v1/topics?epoch={epoch}",
        "/v1/vertices/v7/history?limit=100", "/v1/vertices/v42/history?algo=tunkrank&limit=100",
        f"/v1/vertices/v7/neighbors?epoch={epoch}", f"/v1/vertices/v12/neighbors?direction=in&epoch={epoch}",
        f"/v1/movers?to={epoch}&k=20", f"/v1/trends?to={epoch}", "/v1/epochs?limit=100",
    ]


def test_cold_epochs_answer_the_same_bytes_as_in_memory(tmp_path):
    rng = np.random.default_rng(5)
    epochs = [result(1, rng), result(2, rng), result(3, rng), result(5, rng, skipped=[4]), result(6, rng), result(7, rng)]
    warm = ResultStore(retain=100)
    cold = ResultStore(retain=100, archive=ResultArchive(tmp_path / "results", 100))
    hot_answers: dict[str, bytes] = {}
    with TestClient(create_app(warm)) as a, TestClient(create_app(cold)) as b:
        for i, r in enumerate(epochs):
            # The same epoch again, fresh arrays: the cold store must not share the warm one's objects
            # (copied first: adding an epoch hands its edge changes to the graph view).
            again = _copy(r)
            warm.add([r], NameChanges(0, NAMES) if i == 0 else None)
            cold.add([again], NameChanges(0, NAMES) if i == 0 else None)
            for path in reads(r.epoch):
                hot_answers[path + f"@{r.epoch}"] = b.get(path).content
                assert hot_answers[path + f"@{r.epoch}"] == a.get(path).content, path
        views = cold.recent(100)
        assert [v.cold for v in views] == [False] * HOT_EPOCHS + [True] * (len(epochs) - HOT_EPOCHS)
        assert all(isinstance(v.result.scores["pagerank"], np.memmap) for v in views[HOT_EPOCHS:])
        assert all(isinstance(v.ranks["pagerank"], np.memmap) for v in views[HOT_EPOCHS:])
        # The graph view's undo records of the cold epochs are read from their files too.
        cold_epochs = {v.result.epoch for v in views[HOT_EPOCHS:]}
        undone = [u for u in cold.graph._undo if u.epoch in cold_epochs and len(u.slots)]
        assert undone and all(isinstance(a, np.memmap) for u in undone for a in (u.slots, u.mult, u.weight))
        # So are the undo records of the applications' per-vertex arrays, and they read the same.
        for history in (cold.components, cold.landmarks_to, cold.landmarks_from):
            records = [u for e, u in history._undo.items() if e in cold_epochs]
            assert records and all(isinstance(a, np.memmap) for keys, old, _ in records for a in (keys, old))
        rows, cols = np.repeat(np.arange(2), len(NAMES)), np.tile(np.arange(len(NAMES)), 2)
        for r in epochs:
            assert np.array_equal(cold.components.at(r.epoch, rows[: len(NAMES)], cols[: len(NAMES)]),
                                  warm.components.at(r.epoch, rows[: len(NAMES)], cols[: len(NAMES)]))
            assert np.array_equal(cold.landmarks_to.at(r.epoch, rows, cols), warm.landmarks_to.at(r.epoch, rows, cols))
            assert np.array_equal(cold.landmarks_from.at(r.epoch, rows, cols), warm.landmarks_from.at(r.epoch, rows, cols))
        for r in epochs:
            for path in reads(r.epoch):
                got, want = b.get(path), a.get(path)
                assert (got.status_code, got.content) == (want.status_code, want.content), path
                assert got.status_code == 200 or "movers?to=1" in path or "trends?to=1" in path, (path, got.text)
        # Epochs read at the time they were newest answer as they did then (history grows, the rest stays).
        for r in epochs:
            for path in reads(r.epoch)[:6]:
                assert b.get(path).content == hot_answers[path + f"@{r.epoch}"], path
        assert cold.graph.missed_epochs == 0, "epoch 5's changes cover the epoch it merged"
        merged = b.get("/v1/epochs/4")
        assert merged.status_code == 404 and merged.json()["error"]["code"] == "epoch_not_ranked"
        assert b.get("/v1/epochs/5").json()["skipped"] == [4]
        # The movers' default is the ranked epoch before: 3 for 5, which merged 4.
        assert b.get("/v1/movers?to=5").json()["from"] == 3


def _copy(r: EpochResult) -> EpochResult:
    import copy

    return copy.deepcopy(r)


def test_a_restart_serves_archived_epochs_memory_mapped_with_their_ranks(tmp_path):
    rng = np.random.default_rng(9)
    epochs = [result(e, rng, per_vertex_apps=False) for e in range(1, 6)]
    first = ResultStore(retain=100, archive=ResultArchive(tmp_path / "results", 100))
    for i, r in enumerate(epochs):
        first.add([_copy(r)], NameChanges(0, NAMES) if i == 0 else None)
    with TestClient(create_app(first)) as a:
        before = {p: a.get(p).content for e in range(1, 4) for p in reads(e)[:6]}
    archive = ResultArchive(tmp_path / "results", 100)
    older = archive.history_before(_copy(epochs[3]))
    assert [r.epoch for r in older] == [1, 2, 3] and set(archive.loaded_ranks) == {1, 2, 3}
    again = ResultStore(retain=100, archive=archive)
    again.add(older, NameChanges(0, NAMES), notify=False, ranks_of=archive.loaded_ranks)
    assert isinstance(again.get(2).ranks["pagerank"], np.memmap)
    with TestClient(create_app(again)) as b:
        for path, body in before.items():
            assert b.get(path).content == body, path


def test_a_retained_epoch_keeps_its_top_not_its_whole_order(tmp_path):
    """Per retained epoch the store keeps the top TOP_CACHE ids, not an array per vertex behind them."""
    from pulsegraph.api.ranking import TOP_CACHE

    n = 20 * TOP_CACHE
    rng = np.random.default_rng(1)
    store = ResultStore(retain=10, archive=ResultArchive(tmp_path / "results", 10))
    names = [f"v{i}" for i in range(n)]
    for e in range(1, 6):
        r = EpochResult(
            epoch=e, vector={"p:0": e}, records=e, vertices=n, edges=0, committed_at=time.time(), commit_ms=1.0,
            timeliness_ms={"p50": 1.0, "p99": 1.0, "max": 1.0}, scores={"pagerank": rng.random(n)},
            out_degree=np.zeros(n, np.int32), in_degree=np.zeros(n, np.int32),
            present=np.ones(n, bool) if e % 2 else None,
        )
        store.add([r], NameChanges(0, names) if e == 1 else None)
    for v in store.recent(10):
        top = v.top["pagerank"]
        held = top.base.nbytes if isinstance(top.base, np.ndarray) else top.nbytes
        assert held <= TOP_CACHE * top.itemsize, (v.result.epoch, held)
