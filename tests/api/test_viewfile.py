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
from pulsegraph.api.graphparts import LocalParts, PartitionedGraph
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


def view_of(tmp_path, parts: int, made: bool = True) -> PartitionedGraph | None:
    """None: the API keeps the view (one partition); else the view in ``parts`` parts (in this process), ``made``
    at once or later (:meth:`PartitionedGraph.replace`), as the service makes them once Ray is up."""
    if parts == 1:
        return None
    return PartitionedGraph(LocalParts(parts, retain=100) if made else None, folder=tmp_path / "results")


def served(tmp_path, history: History, epochs: range, parts: int = 1) -> ResultStore:
    store = ResultStore(retain=100, archive=ResultArchive(tmp_path / "results", 100), graph=view_of(tmp_path, parts))
    for e in epochs:
        store.add([history.result(e, full=e == epochs[0])], NameChanges(0, NAMES) if e == epochs[0] else None)
    return store


def restarted(tmp_path, parts: int = 1) -> tuple[ResultArchive, ResultStore, ViewReader | None]:
    """As the service opens its data folder and serves: the epochs taken back, the view read back (and with
    ``parts`` above 1, the parts made after it, which read theirs then)."""
    archive = ResultArchive(tmp_path / "results", 100)
    graph = view_of(tmp_path, parts, made=False)
    store = ResultStore(retain=100, archive=archive, graph=graph)
    store.take_back(*archive.take_back())
    archive.verify_taken(store.drop_taken)
    reader = store.view_reader = ViewReader.open(store, archive)
    store.serving()
    if reader is not None:
        reader.settle(None)  # waits for the read
    if graph is not None:
        graph.replace(LocalParts(parts, retain=100))
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


@pytest.mark.parametrize(("seed", "parts"), [(1, 1), (2, 1), (3, 1), (1, 3), (2, 2)])
def test_a_clean_stops_view_answers_every_retained_epoch_after_a_restart_and_the_first_epoch_goes_on_from_it(tmp_path, seed, parts):
    history = History(seed)
    before = served(tmp_path, history, range(1, 13), parts)
    assert save_view(before, before.archive)
    archive, store, reader = restarted(tmp_path, parts)
    assert reader is not None and reader.taken and not list((tmp_path / "results").glob("view*.res")), "read once"
    assert store.graph.epoch == 12 and store.graph.kept_from == 1
    for e in range(1, 13):
        assert graph_of(store, e) == graph_of(before, e), e
    # The restored pipeline's first epoch is the whole graph: only what differs is written, and undone.
    first = history.result(13, full=True)
    same = copy.deepcopy(first)  # the store takes the changes out of the result it keeps
    store.add([first], NameChanges(0, NAMES), settle=archive.confirm(first))
    before.add([same], None)
    members = [store.graph] if parts == 1 else store.graph.port.members
    changed = sum(len(m.undo_record(13)["slots"]) if parts == 1 else len(m.graph.undo_record(13)["slots"]) for m in members)
    assert changed <= 2 * 24 * min(parts, 2), "the edges that differ (an edge across two parts in both), not the whole graph"
    for e in range(1, 14):
        assert graph_of(store, e) == graph_of(before, e), e


@pytest.mark.parametrize("parts", [1, 3])
def test_the_graph_routes_answer_from_the_view_before_the_pipelines_first_epoch(tmp_path, parts):
    history = History(7)
    before = served(tmp_path, history, range(1, 6), parts)
    save_view(before, before.archive)
    _, store, _ = restarted(tmp_path, parts)
    with TestClient(create_app(store)) as client, TestClient(create_app(before)) as reference:
        for path in ("/v1/vertices/v3/neighbors", "/v1/vertices/v3/neighbors?direction=in&epoch=2",
                     "/v1/vertices/v5?epoch=3", "/v1/paths?src=v1&dst=v9&epoch=4"):
            got, want = client.get(path), reference.get(path)
            assert got.json() == want.json() and got.status_code == want.status_code, path
            assert got.status_code == 200 or path.startswith("/v1/paths"), got.text
        assert client.get("/v1/vertices/v5?epoch=3").json()["component"] is not None


@pytest.mark.parametrize("parts", [1, 3])
def test_a_view_older_than_the_newest_epoch_a_crash_left_is_not_taken_back(tmp_path, caplog, parts):
    history = History(4)
    store = served(tmp_path, history, range(1, 6), parts)
    save_view(store, store.archive)
    store.add([history.result(6)], None)  # the service ran on after the file was written, then crashed
    with caplog.at_level(logging.WARNING):
        _, store, reader = restarted(tmp_path, parts)
    assert reader is not None and not reader.taken and "the view of epoch 5, the newest epoch taken back is 6" in caplog.text
    assert store.graph.epoch == 0 and not list((tmp_path / "results").glob("view*.res")), "the parts' files go too"


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


@pytest.mark.parametrize(("began", "parts"), [(1, 1), (6, 1), (1, 2), (6, 3)])
def test_the_epochs_the_pipeline_cuts_again_from_its_checkpoint_keep_the_view_and_the_arrays_go_back(tmp_path, began, parts):
    """The usual restart: the checkpoint (5) is older than the stop (8), epochs 6.. are published again. The graph is
    the view's; the arrays go back to 5, or, for a view that began at 6 (the service had restarted after a crash at
    5, without a view), begin again with the pipeline's."""
    history = History(6)
    before = served(tmp_path, history, range(1, 6), parts)
    at_checkpoint = copy.deepcopy(history)  # epochs 6.. are cut again: the same graph, other landmarks
    if began == 6:
        (tmp_path / "results" / VIEW_FILE).unlink(missing_ok=True)
        archive, before, _ = restarted(tmp_path, parts)
        six = history.result(6, full=True)
        before.add([six], NameChanges(0, NAMES), settle=archive.confirm(six))
    for e in range(7 if began == 6 else 6, 9):
        before.add([history.result(e)], None)
    assert save_view(before, before.archive)
    before.archive = None  # the reference from here on: the restarted service alone writes the folder
    archive, store, reader = restarted(tmp_path, parts)
    assert reader is not None and reader.taken and store.graph.epoch == 8 and store.graph.kept_from == began
    first = at_checkpoint.result(6, full=True)
    again = [first] + [at_checkpoint.result(e) for e in (7, 8, 9)]
    for r in again[1:]:
        r.apps["landmarks"].dist_to[:] += 1  # what a landmark chosen anew makes of them
    store.add([first], NameChanges(0, NAMES), settle=archive.confirm(first))
    assert store.graph.epoch == 8 and store.graph.kept_from == began, "the view stays: the same graph"
    for r in again[1:]:
        twin = copy.deepcopy(r)
        store.add([r], None)
        if twin.epoch == 9:
            before.add([twin], None)
    for e in range(began, 10):
        got, want = graph_of(store, e), graph_of(before, e)
        assert all(got[k] == want[k] for k in want if k not in ("labels", "to", "from")), e
        if e < 6:
            assert got == want, e
    assert graph_of(store, 8)["to"] == (np.array(graph_of(before, 8)["to"]) + 1).tolist(), "the pipeline's arrays"
    assert store.landmarks_to.covers(6) and store.components.covers(began)
    # The epochs published again were archived with the view's undo records: the next clean stop's view is taken
    # back in turn.
    assert save_view(store, archive)
    _, again_store, reader = restarted(tmp_path, parts)
    assert reader is not None and reader.taken
    for e in range(began, 10):
        assert graph_of(again_store, e) == graph_of(store, e), e


@pytest.mark.parametrize("parts", [1, 2])
def test_the_view_is_dropped_when_the_pipeline_recovered_another_history(tmp_path, parts):
    history = History(8)
    before = served(tmp_path, history, range(1, 9), parts)
    save_view(before, before.archive)
    archive, store, reader = restarted(tmp_path, parts)
    assert reader is not None and reader.taken and store.graph.epoch == 8
    first = History(99).result(3, full=True, vector=7)
    settle = archive.confirm(first)
    ch = first.edge_changes
    want = sorted(zip(ch.dst[ch.src == 0].tolist(), ch.etype[ch.src == 0].tolist()))
    store.add([first], NameChanges(0, NAMES), settle=settle)
    assert settle == 0 and store.graph.epoch == 3 and store.graph.kept_from == 3
    got = store.graph.neighbors(0, "out", 3)
    assert sorted(zip(got[0].tolist(), got[1].tolist())) == want, "the whole epoch alone, nothing of the dropped view"
