"""The result archive: what a restart serves from before it, and when it refuses to.

The end-to-end restart through real actors is in tests/pulsegraph/test_recovery.py;
here the archive and the store meet directly, with results built by hand.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

from pulsegraph.api.archive import ResultArchive, write_mapped
from pulsegraph.api.exceptions import NotFound
from pulsegraph.api.store import ResultStore
from pulsegraph.compute.apps.components import ComponentsResult
from pulsegraph.compute.apps.exposure import TopicsResult
from pulsegraph.compute.apps.landmarks import LandmarksResult
from pulsegraph.compute.changes import EdgeChanges
from pulsegraph.compute.ids import NameChanges
from pulsegraph.compute.results import EpochResult

NAMES = [f"v{i}" for i in range(6)]


def result(epoch: int, *, full: bool = False, offset: int | None = None) -> EpochResult:
    """Epoch ``e`` of a toy history: vertex ``e % 6`` gains an edge to ``(e + 1) % 6``; scores favour it."""
    scores = np.full(6, 1.0)
    scores[epoch % 6] = 2.0
    src = np.arange(6, dtype=np.int32) if full else np.array([epoch % 6], np.int32)
    dst = (src + 1) % 6
    ones = np.ones(len(src), np.int64)
    return EpochResult(
        epoch=epoch, vector={"p:0": 10 * epoch if offset is None else offset}, records=10 * epoch, vertices=6,
        edges=6, committed_at=time.time(), commit_ms=1.0, timeliness_ms={"p50": 1.0, "p99": 1.0, "max": 1.0},
        scores={"pagerank": scores / scores.sum()}, out_degree=np.ones(6, np.int32), in_degree=np.ones(6, np.int32),
        edge_changes=EdgeChanges(src, dst, np.zeros(len(src), np.int16), ones, ones * 1_000_000),
        full_changes=full, types=["link"],
        apps={"components": ComponentsResult(np.zeros(6, np.int32), 1, np.array([0]), np.array([6]))},
    )


def archived(tmp_path, epochs, retain: int = 100) -> ResultArchive:
    a = ResultArchive(tmp_path / "results", retain)
    a.save([result(e, full=e == epochs[0]) for e in epochs])
    return a


def test_a_restart_serves_the_epochs_before_the_one_it_recovered(tmp_path):
    archived(tmp_path, list(range(1, 9)))
    again = ResultArchive(tmp_path / "results", 100)
    older = again.history_before(result(6, full=True))
    assert [r.epoch for r in older] == [1, 2, 3, 4, 5]
    assert older[2].vector == {"p:0": 30} and older[2].edge_changes is None
    # Epochs 6.. are published again by the recovered pipeline and archived anew.
    assert again.latest == 5
    again.save([result(6), result(7)])
    assert sorted(p.name for p in (tmp_path / "results").iterdir())[-1] == "epoch-000000000007.res"


def test_the_archive_follows_on_when_the_first_live_epoch_is_the_next_one(tmp_path):
    archived(tmp_path, [1, 2, 3])
    older = ResultArchive(tmp_path / "results", 100).history_before(result(4, full=True))
    assert [r.epoch for r in older] == [1, 2, 3]


def test_epochs_checkpointed_but_not_ranked_before_a_crash_are_covered_by_the_first_live_one(tmp_path):
    """The crash came after epochs 5 and 6 were sealed and checkpointed but before they were ranked:
    the restored graph holds them, and the first epoch after the restore (7) covers them."""
    archived(tmp_path, [1, 2, 3, 4])
    first_live = result(7, full=True)
    older = ResultArchive(tmp_path / "results", 100).history_before(first_live)
    assert [r.epoch for r in older] == [1, 2, 3, 4]
    assert first_live.skipped == [5, 6]
    store = ResultStore(retain=100)
    store.add(older, NameChanges(0, NAMES), notify=False)
    store.add([first_live], None)
    assert store.get(7).previous is store.get(4), "history runs on across the restart"
    assert [v.result.epoch for v in store.recent(10)] == [7, 4, 3, 2, 1]


@pytest.mark.parametrize(
    "first_live",
    [
        result(6, full=True, offset=61),  # same number, another vector: another history
        result(5, full=True, offset=1),  # follows on, but its vector does not contain the archived one
        result(12),  # a gap, epochs 9..11 never archived, and not the first epoch after a restore
        result(1, full=True, offset=3),  # a new history in the same folder
    ],
)
def test_an_archive_of_another_history_is_not_served_and_starts_afresh(tmp_path, first_live, caplog):
    archived(tmp_path, [1, 2, 3, 4, 5, 6, 7, 8] if first_live.epoch != 5 else [1, 2, 3, 4])
    a = ResultArchive(tmp_path / "results", 100)
    assert a.history_before(first_live) == []
    assert list((tmp_path / "results").iterdir()) == [] and a.latest == 0
    assert "starting afresh" in caplog.text


def test_a_corrupt_epoch_file_is_skipped_not_fatal(tmp_path, caplog):
    archived(tmp_path, [1, 2, 3, 4])
    path = tmp_path / "results" / "epoch-000000000002.res"
    path.write_bytes(path.read_bytes()[:-7])
    older = ResultArchive(tmp_path / "results", 100).history_before(result(5, full=True))
    assert [r.epoch for r in older] == [1, 3, 4]
    assert "skipping epoch 2" in caplog.text


def test_the_archive_keeps_only_the_retained_epochs(tmp_path):
    a = archived(tmp_path, list(range(1, 11)), retain=4)
    assert sorted(p.name for p in a.root.iterdir()) == [f"epoch-{e:012d}.res" for e in (7, 8, 9, 10)]
    older = ResultArchive(a.root, 4).history_before(result(11, full=True))
    assert [r.epoch for r in older] == [7, 8, 9, 10]


def test_the_store_serves_archived_scores_but_never_an_archived_graph(tmp_path):
    archived(tmp_path, [1, 2, 3, 4, 5])
    older = ResultArchive(tmp_path / "results", 100).history_before(result(4, full=True))
    store = ResultStore(retain=100)
    heard = []
    store.subscribe(heard.append)
    store.add(older, NameChanges(0, NAMES), notify=False)
    store.add([result(4, full=True), result(5)], None)
    assert [v.result.epoch for v in heard] == [4, 5], "listeners hear of live epochs only"
    assert [v.result.epoch for v in store.recent(10)] == [5, 4, 3, 2, 1]
    assert store.get(2).top["pagerank"][0] == 2 and store.get(3).previous is store.get(2)
    assert store.get(4).previous is store.get(3), "history runs on across the restart"
    # The graph is rebuilt from the recovered epoch on: older epochs are refused, not answered with it.
    assert store.graph.kept_from == 4
    other, *_ = store.graph.neighbors(0, "out", 4)
    assert other.tolist() == [1]
    with pytest.raises(NotFound) as err:
        store.graph.neighbors(0, "out", 3)
    assert err.value.code == "graph_not_retained"
    assert store.components.covers(4) and not store.components.covers(3)


def test_an_epoch_whose_write_failed_is_written_first_when_the_disk_is_back(tmp_path, caplog):
    """A real fault: the archive's folder is replaced by a file, so writing under it fails (ENOTDIR)."""
    a = archived(tmp_path, [1, 2])
    aside = tmp_path / "results-aside"
    a.root.rename(aside)
    a.root.write_bytes(b"not a folder")
    a.save([result(3)])
    a.save([result(4)])
    assert "epoch 3 not kept on disk yet (2 waiting)" in caplog.text and a.latest == 2
    a.root.unlink()
    aside.rename(a.root)
    a.save([result(5)])
    assert a.latest == 5
    assert sorted(p.name for p in a.root.iterdir()) == [f"epoch-{e:012d}.res" for e in (1, 2, 3, 4, 5)]
    older = ResultArchive(a.root, 100).history_before(result(6, full=True))
    assert [r.epoch for r in older] == [1, 2, 3, 4, 5], "no gap for a restart to find"


def test_an_archived_epoch_holds_one_file_descriptor(tmp_path):
    """Each memory map holds its file open: one map per epoch file, not one per array."""
    import os

    a = archived(tmp_path, list(range(1, 31)))
    mapped = [a.mapped(e) for e in range(1, 31)]
    arrays = [m[0].scores["pagerank"].sum() + m[0].out_degree.sum() for m in mapped if m is not None]
    assert len(arrays) == 30

    def held() -> int:  # descriptors of this process open on the archive's files (others come and go in other threads)
        out = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                out += os.readlink(f"/proc/self/fd/{fd}").startswith(str(a.root))
            except OSError:
                pass
        return out

    assert held() == 30


def test_epochs_archived_before_results_were_typed_read_back_typed(tmp_path):
    """An archive written by the version whose applications published dicts: the results come back typed
    (landmarks' "to"/"from" named dist_to/dist_from), per-vertex fields absent as they were never archived."""
    a = ResultArchive(tmp_path / "results", 100)
    old = dataclasses.replace(result(3), apps={
        "components": {"count": 2, "top": np.array([0, 4]), "top_sizes": np.array([4, 2])},
        "landmarks": {"ids": np.array([1, 5], np.int32)},
        "topics": {"tags": np.array([2]), "usage": np.array([4]), "users": np.array([3]), "persistence": np.array([0.5]),
                   "curve": np.zeros((1, 8)), "reached": np.zeros((1, 8), np.int64)},  # from before as_of was published
    }, edge_changes=None)
    write_mapped(a._path(3), {"result": old, "ranks": None})
    got, _ = ResultArchive(tmp_path / "results", 100).mapped(3)
    comp, lm = got.apps["components"], got.apps["landmarks"]
    assert isinstance(comp, ComponentsResult) and (comp.count, comp.top.tolist(), comp.labels) == (2, [0, 4], None)
    assert isinstance(lm, LandmarksResult) and lm.ids.tolist() == [1, 5] and lm.dist_to is None and lm.dist_from is None
    assert isinstance(got.apps["topics"], TopicsResult) and got.apps["topics"].as_of == 3  # counted at the epoch itself
    # And a typed result is archived without its per-vertex fields.
    a.save([result(4)])
    assert ResultArchive(tmp_path / "results", 100).mapped(4)[0].apps["components"].labels is None
