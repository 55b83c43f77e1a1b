"""The graph view a clean stop keeps (pulsegraph.api.viewfile): a restart answers the graph of every retained epoch
from it before the pipeline's first epoch, the same as before the stop, and drops it whenever it is not the view
of the history the pipeline recovered.

Histories are random (edges added, re-weighted and removed, of two types; component labels and landmark distances
changing), compared with the store that served them before the stop, epoch by epoch.
"""

from __future__ import annotations

import copy
import logging
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

from pulsegraph.api.app import create_app
from pulsegraph.api.archive import VIEW_FILE, ResultArchive
from pulsegraph.api.store import ResultStore
from pulsegraph.api.viewfile import ViewReader, save_view
from pulsegraph.compute.apps.components import ComponentsResult
from pulsegraph.compute.apps.landmarks import LandmarksResult
from pulsegraph.compute.changes import EdgeChanges
from pulsegraph.compute.ids import NameChanges
from pulsegraph.compute.results import EpochResult

N = 40
NAMES = [f"v{i}" for i in range(N)]


class History:
    """A random graph of N vertices changed epoch by epoch; ``result(e)`` is epoch ``e``'s result as the compute
    stage sends it (``full``: the whole graph, as a restored compute stage's first epoch)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.edges: dict[tuple[int, int, int], tuple[int, int]] = {}

    def result(self, epoch: int, *, full: bool = False, vector: int | None = None) -> EpochResult:
        changed = {}
        for _ in range(int(self.rng.integers(1, 25))):
            key = (int(self.rng.integers(N)), int(self.rng.integers(N)), int(self.rng.integers(2)))
            removed = key in self.edges and self.rng.random() < 0.3
            changed[key] = (0, 0) if removed else (int(self.rng.integers(1, 4)), int(self.rng.integers(1, 9)) * 1000)
        self.edges.update(changed)
        rows = [(k, v) for k, v in self.edges.items() if v != (0, 0)] if full else list(changed.items())
        src, dst, et = (np.array([k[i] for k, _ in rows], dt) for i, dt in ((0, np.int32), (1, np.int32), (2, np.int16)))
        mult, weight = (np.array([v[i] for _, v in rows], np.int64) for i in (0, 1))
        labels = self.rng.integers(0, 5, N).astype(np.int32)
        dist = self.rng.integers(0, 6, (2, N)).astype(np.uint16)
        return EpochResult(
            epoch=epoch, vector={"p:0": 10 * epoch if vector is None else vector}, records=10 * epoch, vertices=N,
            edges=len(self.edges), committed_at=time.time(), commit_ms=1.0, timeliness_ms={"p50": 1.0, "p99": 1.0, "max": 1.0},
            scores={"pagerank": np.full(N, 1.0 / N)}, out_degree=np.ones(N, np.int32), in_degree=np.ones(N, np.int32),
            edge_changes=EdgeChanges(src, dst, et, mult, weight), full_changes=full, types=["a", "b"],
            apps={"components": ComponentsResult(labels, 5, np.arange(5), np.full(5, 8)),
                  "landmarks": LandmarksResult(np.array([0, 1]), dist, dist[::-1].copy())},
        )


def served(tmp_path, history: History, epochs: range) -> ResultStore:
    store = ResultStore(retain=100, archive=ResultArchive(tmp_path / "results", 100))
    for e in epochs:
        store.add([history.result(e, full=e == epochs[0])], NameChanges(0, NAMES) if e == epochs[0] else None)
    return store


def restarted(tmp_path) -> tuple[ResultArchive, ResultStore, ViewReader | None]:
    """As the service opens its data folder and serves: the epochs taken back, the view read back."""
    archive = ResultArchive(tmp_path / "results", 100)
    store = ResultStore(retain=100, archive=archive)
    store.take_back(*archive.take_back())
    archive.verify_taken(store.drop_taken)
    reader = store.view_reader = ViewReader.open(store, archive)
    store.serving()
    if reader is not None:
        reader.settle(None)  # waits for the read
    return archive, store, reader


def graph_of(store: ResultStore, epoch: int) -> dict:
    """Every vertex's edges both ways as of ``epoch``, its component label and landmark distances."""
    out = {}
    for v in range(N):
        for d in ("out", "in"):
            other, et, mult, weight = store.graph.neighbors(v, d, epoch)
            out[(v, d)] = sorted(zip(other.tolist(), et.tolist(), mult.tolist(), weight.tolist()))
    ids = np.arange(N)
    out["labels"] = store.components.at(epoch, np.zeros(N, np.int64), ids).tolist()
    out["to"] = [store.landmarks_to.at(epoch, np.full(N, r), ids).tolist() for r in range(2)]
    out["from"] = [store.landmarks_from.at(epoch, np.full(N, r), ids).tolist() for r in range(2)]
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_clean_stops_view_answers_every_retained_epoch_after_a_restart_and_the_first_epoch_goes_on_from_it(tmp_path, seed):
    history = History(seed)
    before = served(tmp_path, history, range(1, 13))
    assert save_view(before, before.archive)
    archive, store, reader = restarted(tmp_path)
    assert reader is not None and reader.taken and not (tmp_path / "results" / VIEW_FILE).exists(), "read once"
    for e in range(1, 13):
        assert graph_of(store, e) == graph_of(before, e), e
    # The restored pipeline's first epoch is the whole graph: only what differs is written, and undone.
    first = history.result(13, full=True)
    same = copy.deepcopy(first)  # the store takes the changes out of the result it keeps
    store.add([first], NameChanges(0, NAMES), settle=archive.confirm(first))
    before.add([same], None)
    undo = store.graph.undo_record(13)
    assert undo is not None and len(undo["slots"]) <= 2 * 24, "the edges that differ, not the whole graph"
    for e in range(1, 14):
        assert graph_of(store, e) == graph_of(before, e), e


def test_the_graph_routes_answer_from_the_view_before_the_pipelines_first_epoch(tmp_path):
    history = History(7)
    before = served(tmp_path, history, range(1, 6))
    save_view(before, before.archive)
    _, store, _ = restarted(tmp_path)
    with TestClient(create_app(store)) as client, TestClient(create_app(before)) as reference:
        for path in ("/v1/vertices/v3/neighbors", "/v1/vertices/v3/neighbors?direction=in&epoch=2",
                     "/v1/vertices/v5?epoch=3", "/v1/paths?src=v1&dst=v9&epoch=4"):
            got, want = client.get(path), reference.get(path)
            assert got.json() == want.json() and got.status_code == want.status_code, path
            assert got.status_code == 200 or path.startswith("/v1/paths"), got.text
        assert client.get("/v1/vertices/v5?epoch=3").json()["component"] is not None


def test_a_view_older_than_the_newest_epoch_a_crash_left_is_not_taken_back(tmp_path, caplog):
    history = History(4)
    store = served(tmp_path, history, range(1, 6))
    save_view(store, store.archive)
    store.add([history.result(6)], None)  # the service ran on after the file was written, then crashed
    with caplog.at_level(logging.WARNING):
        _, store, reader = restarted(tmp_path)
    assert reader is not None and not reader.taken and "the view of epoch 5, the newest epoch taken back is 6" in caplog.text
    assert store.graph.epoch == 0 and not (tmp_path / "results" / VIEW_FILE).exists()


def test_a_view_with_a_flipped_byte_is_not_taken_back(tmp_path, caplog):
    history = History(5)
    store = served(tmp_path, history, range(1, 6))
    save_view(store, store.archive)
    path = tmp_path / "results" / VIEW_FILE
    raw = bytearray(path.read_bytes())
    raw[-100] ^= 0xFF
    path.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING):
        _, store, reader = restarted(tmp_path)
    assert reader is not None and not reader.taken and "checksum mismatch" in caplog.text and store.graph.epoch == 0


def test_the_view_is_rolled_back_past_the_epochs_the_pipeline_cuts_again_from_its_checkpoint(tmp_path):
    history = History(6)
    before = served(tmp_path, history, range(1, 6))
    at_checkpoint = copy.deepcopy(history)  # the pipeline's checkpoint: epochs 6.. are cut again, the same
    for e in range(6, 9):
        before.add([history.result(e)], None)
    assert save_view(before, before.archive)
    archive, store, reader = restarted(tmp_path)
    assert reader is not None and reader.taken and store.graph.epoch == 8
    first = at_checkpoint.result(6, full=True)
    store.add([first], NameChanges(0, NAMES), settle=archive.confirm(first))
    assert store.epoch_numbers() == [1, 2, 3, 4, 5, 6] and store.graph.kept_from == 1
    undo = store.graph.undo_record(6)
    assert undo is not None and len(undo["slots"]) <= 24, "epoch 6's changes over the view of 5, not the whole graph"
    for e in range(1, 7):
        assert graph_of(store, e) == graph_of(before, e), e
    for e in (7, 8):
        store.add([at_checkpoint.result(e)], None)
        assert graph_of(store, e) == graph_of(before, e), e


def test_the_view_is_dropped_when_the_pipeline_recovered_another_history(tmp_path):
    history = History(8)
    before = served(tmp_path, history, range(1, 9))
    save_view(before, before.archive)
    archive, store, reader = restarted(tmp_path)
    assert reader is not None and reader.taken and store.graph.epoch == 8
    first = History(99).result(3, full=True, vector=7)
    settle = archive.confirm(first)
    ch = first.edge_changes
    want = sorted(zip(ch.dst[ch.src == 0].tolist(), ch.etype[ch.src == 0].tolist()))
    store.add([first], NameChanges(0, NAMES), settle=settle)
    assert settle == 0 and store.graph.epoch == 3 and store.graph.kept_from == 3
    got = store.graph.neighbors(0, "out", 3)
    assert sorted(zip(got[0].tolist(), got[1].tolist())) == want, "the whole epoch alone, nothing of the dropped view"


def test_a_roll_back_frees_the_slots_of_edges_only_the_undone_epochs_had_and_the_view_goes_on():
    from pulsegraph.api.graph import GraphHistory

    def ch(edges):
        src, dst, mult = (np.array([e[i] for e in edges], np.int64) for i in range(3))
        return EdgeChanges(src.astype(np.int32), dst.astype(np.int32), np.zeros(len(edges), np.int16), mult, mult * 1000)

    g = GraphHistory(retain=10)
    g.apply(1, ch([(0, 1, 1), (1, 2, 1)]), full=True)
    g.apply(2, ch([(0, 1, 0), (2, 3, 1)]))  # 0->1 removed: its slot kept while epoch 1 is retained
    held = g.held
    g.apply(3, ch([(5, 6, 1), (0, 1, 2)]))  # a new edge, and the removed one back
    g.apply(4, ch([(6, 7, 1)]))
    assert g.roll_back(3) and g.epoch == 2 and g.held == held, "the edges only epochs 3 and 4 had give their slots back"
    assert g.neighbors(0, "out", 2)[0].tolist() == [] and g.neighbors(0, "out", 1)[0].tolist() == [1]
    assert g.neighbors(5, "out")[0].tolist() == [] and g.neighbors(6, "in")[0].tolist() == []
    g.apply(3, ch([(8, 9, 1)]))
    assert g.neighbors(8, "out")[0].tolist() == [9] and g.neighbors(1, "out", 2)[0].tolist() == [2]
    assert not g.roll_back(1), "its first epoch cannot be undone"
