"""The feed through a real Ray actor: what it keeps is its own memory, not views of Ray's object store; a patch
it cannot apply makes it ask for whole arrays."""

from __future__ import annotations

import time

import numpy as np
import ray

from pulsegraph.api.feed import ResultFeed
from pulsegraph.api.store import ResultStore
from pulsegraph.compute.apps.base import Patch
from pulsegraph.compute.apps.components import ComponentsResult
from pulsegraph.compute.apps.landmarks import LandmarksResult
from pulsegraph.compute.changes import EdgeChanges
from pulsegraph.compute.ids import NameChanges
from pulsegraph.compute.results import EpochResult

N = 200_000  # arrays well above Ray's inline limit (100 KB), so they travel through the object store


@ray.remote
class _Compute:
    def results_after(self, epoch: int, known: int, whole: bool = False, graph_at: int | None = None):
        n = N
        rng = np.random.default_rng(epoch)
        out = []
        for e in (epoch + 1, epoch + 2):
            ones = np.ones(n, np.int64)
            out.append(EpochResult(
                epoch=e, vector={"p:0": e}, records=e, vertices=n, edges=n, committed_at=time.time(), commit_ms=1.0,
                timeliness_ms={"p50": 1.0, "p99": 1.0, "max": 1.0}, scores={"pagerank": rng.random(n)},
                out_degree=np.zeros(n, np.int32), in_degree=np.zeros(n, np.int32),
                edge_changes=EdgeChanges(np.arange(n, dtype=np.int32), np.arange(n, dtype=np.int32)[::-1].copy(),
                                         np.zeros(n, np.int16), ones, ones),
                apps={"components": ComponentsResult(np.arange(n, dtype=np.int64), n, np.arange(0), np.arange(0))}, types=["mentions"],
            ))
        return out, NameChanges(known, [f"v{i}" for i in range(known, n)])


def _own_memory(a: np.ndarray) -> bool:
    """Whether ``a`` (or the array it views) owns its memory, rather than a buffer of Ray's."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a.base is None


def test_kept_arrays_are_copied_out_of_the_object_store(ray_cluster):
    store = ResultStore(retain=4)
    feed = ResultFeed(_Compute.remote(), store)
    feed.poll()
    feed.poll()
    views = store.recent(10)
    assert [v.result.epoch for v in views] == [4, 3, 2, 1]
    for v in views:
        # A view of the object store pins the whole object of its poll; an owned copy pins nothing.
        assert _own_memory(v.result.scores["pagerank"]), v.result.epoch
        assert _own_memory(v.result.out_degree)
    assert store.components._current is not None and _own_memory(store.components._current)


def _landmark_result(epoch: int, dist) -> EpochResult:
    n = 50
    return EpochResult(
        epoch=epoch, vector={"p:0": epoch}, records=epoch, vertices=n, edges=0, committed_at=time.time(), commit_ms=1.0,
        timeliness_ms={"p50": 1.0, "p99": 1.0, "max": 1.0}, scores={"pagerank": np.full(n, 1 / n)},
        out_degree=np.zeros(n, np.int32), in_degree=np.zeros(n, np.int32),
        apps={"landmarks": LandmarksResult(np.array([0], np.int32), dist, dist)}, types=["mentions"],
    )


@ray.remote
class _Patching:
    """Epoch 1 whole; then patches, the one of epoch 3 lost (as when the actor drops results the API did not
    pull in time), and a whole array again once the feed asks for it."""

    def __init__(self) -> None:
        self.asked: list[bool] = []

    def results_after(self, epoch: int, known: int, whole: bool = False, graph_at: int | None = None):
        self.asked.append(whole)
        full = np.arange(50, dtype=np.uint16)[None, :]
        if epoch == 0:
            out = [_landmark_result(1, full), _landmark_result(2, Patch(1, (1, 50), np.array([3]), np.array([7], np.uint16)))]
        elif not whole:
            out = [_landmark_result(epoch + 2, Patch(epoch + 1, (1, 50), np.array([4]), np.array([9], np.uint16)))]
        else:
            out = [_landmark_result(epoch + 1, full)]
        return out, NameChanges(known, [f"v{i}" for i in range(known, 50)])

    def whole_asked(self) -> list[bool]:
        return self.asked


def test_a_patch_the_store_cannot_apply_makes_the_feed_ask_for_whole_arrays(ray_cluster):
    store = ResultStore(retain=8)
    actor = _Patching.remote()
    feed = ResultFeed(actor, store)
    feed.poll()
    assert store.landmarks_to.at(2, np.zeros(2, np.int64), np.array([3, 5])).tolist() == [7, 5]
    feed.poll()  # epoch 4 patches epoch 3, which never came
    assert store.resend_whole and not store.landmarks_to.covers(4) and store.landmarks_to.covers(2)
    feed.poll()
    assert ray.get(actor.whole_asked.remote()) == [False, False, True]
    assert store.landmarks_to.covers(5) and store.landmarks_to.at(5, np.zeros(1, np.int64), np.array([3])).tolist() == [3]


def _graph_result(epoch: int, changes: EdgeChanges, n: int) -> EpochResult:
    return EpochResult(
        epoch=epoch, vector={"p:0": epoch}, records=epoch, vertices=n, edges=0, committed_at=time.time(), commit_ms=1.0,
        timeliness_ms={"p50": 1.0, "p99": 1.0, "max": 1.0}, scores={"pagerank": np.full(n, 1 / n)},
        out_degree=np.zeros(n, np.int32), in_degree=np.zeros(n, np.int32), edge_changes=changes, types=["mentions"],
    )


@ray.remote
class _Relaunched:
    """A relaunched compute stage as the API's feed meets it after its graph view lost a part: it has merged
    ``stage_at`` epochs again (past the API's newest) and keeps the results after the API's newest."""

    def __init__(self, epochs: list, stage_at: int, n: int) -> None:
        self.epochs, self.stage_at, self.n = epochs, stage_at, n

    def graph_whole(self, at_least: int):
        return None if self.stage_at < at_least else (self.stage_at, self.epochs[self.stage_at - 1][1])

    def results_after(self, epoch: int, known: int, whole: bool = False, graph_at: int | None = None):
        # One epoch past the graph handed over: merged after graph_whole answered, as a batch may.
        out = [_graph_result(e, self.epochs[e - 1][0], self.n) for e in range(epoch + 1, self.stage_at + 2)]
        return out, NameChanges(known, [f"v{i}" for i in range(known, self.n)])


def test_new_graph_view_parts_are_filled_with_the_compute_stage_s_graph_and_the_epochs_after_it(ray_cluster):
    from pulsegraph.api.exceptions import NotFound, Unavailable
    from pulsegraph.api.graph import GraphHistory
    from pulsegraph.api.graphparts import LocalParts, PartitionedGraph
    from tests.api.test_graph import as_changes, random_epochs
    from tests.api.test_graphparts import VERTICES, check_alike

    epochs = [(as_changes(changed), as_changes(state)) for changed, state in random_epochs(8, seed=3, vertices=VERTICES)]
    whole, parted = GraphHistory(), PartitionedGraph(LocalParts(2))
    store = ResultStore(retain=8, graph=parted)
    store.add([_graph_result(e, epochs[e - 1][0], VERTICES) for e in (1, 2, 3)], NameChanges(0, [f"v{i}" for i in range(VERTICES)]))
    parted.replace(LocalParts(2))  # the old parts died: the new ones hold nothing
    assert parted.wants_whole()
    # While the store takes the epochs in (a relaunch's first takes seconds), the routes say the view is lost; never
    # that the store's newest epoch is not kept, as a view already at the graph handed over would.
    seen: list[str] = []

    def read(v) -> None:
        try:
            parted.require(v.result.epoch)
            seen.append("read")
        except (Unavailable, NotFound) as exc:
            seen.append(exc.code)

    store.subscribe(read)
    feed = ResultFeed(_Relaunched.remote(epochs, 5, VERTICES), store)
    views = feed.poll()
    assert seen == ["graph_view_lost"] * 3
    assert [v.result.epoch for v in views] == [4, 5, 6] and store.latest_epoch == 6
    assert not parted.wants_whole()
    whole.apply(5, epochs[4][1], full=True)
    whole.apply(6, epochs[5][0])
    check_alike(whole, parted)  # epochs 5 and 6, each as of itself
