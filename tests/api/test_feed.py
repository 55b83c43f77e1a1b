"""The feed through a real Ray actor: what it keeps is its own memory, not views of Ray's object store."""

from __future__ import annotations

import time

import numpy as np
import ray

from api.feed import ResultFeed
from api.store import ResultStore
from compute.apps.components import ComponentsResult
from compute.graph import EdgeChanges
from compute.ids import NameChanges
from compute.results import EpochResult

N = 200_000  # arrays well above Ray's inline limit (100 KB), so they travel through the object store


@ray.remote
class _Compute:
    def results_after(self, epoch: int, known: int):
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
