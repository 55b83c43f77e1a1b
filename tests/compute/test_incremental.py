"""Incremental ranking equals ranking from scratch, after many random epochs, on every backend.

Epochs insert and delete edges, change weights, add vertices, and empty vertices'
out-edges (dangling vertices come and go); the engine absorbs each as a delta,
compacting its resident graph as it goes. At the end its PageRank is within the
tolerance (L1) of a 1e-13 solve on the final graph, and so is TunkRank (relative
to its sum), and the top 100 agree.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from pulsegraph.compute.backend import cupy_gpu_count, get_backend, numpy_backend
from pulsegraph.compute.engine import RankConfig, RankEngine
from pulsegraph.compute.exceptions import (
    BackendUnavailable,
    PowerIterationFailedConvergence,
)
from pulsegraph.compute.pagerank import pagerank
from pulsegraph.compute.resident import ResidentGraph
from pulsegraph.compute.tunkrank import tunkrank

UNIT = 1_000_000  # fixed-point weight units, as the snapshot stage sends them


class RandomStream:
    """A random graph that changes epoch by epoch; ``weights[(s, d)]`` in fixed-point units."""

    def __init__(self, seed: int, n0: int = 60) -> None:
        self.rng = np.random.default_rng(seed)
        self.n = n0
        self.weights: dict[tuple[int, int], int] = {}

    def epoch(self, changes: int) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        rng, w = self.rng, self.weights
        self.n += int(rng.integers(0, 6))  # new vertices, some never linked (isolated, dangling)
        src, dst, dw = [], [], []

        def put(s: int, d: int, new: int) -> None:
            old = w.get((s, d), 0)
            if new != old:
                src.append(s), dst.append(d), dw.append(new - old)
            if new:
                w[(s, d)] = new
            else:
                w.pop((s, d), None)

        live = list(w)
        for _ in range(changes):
            r = rng.random()
            if r < 0.5 or not live:  # insert, skewed towards low ids so there are hubs
                s = int(min(rng.zipf(1.6), self.n) - 1) if rng.random() < 0.5 else int(rng.integers(self.n))
                d = int(min(rng.zipf(1.4), self.n) - 1) if rng.random() < 0.7 else int(rng.integers(self.n))
                put(s, d, int(rng.integers(1, 8)) * UNIT // 2)
            elif r < 0.75:  # delete
                put(*live[int(rng.integers(len(live)))], 0)
            elif r < 0.95:  # weight change
                put(*live[int(rng.integers(len(live)))], int(rng.integers(1, 2_000_000)))
            else:  # a vertex loses every out-edge: dangling now
                v = live[int(rng.integers(len(live)))][0]
                for s, d in [k for k in w if k[0] == v]:
                    put(s, d, 0)
        return self.n, np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64), np.array(dw, dtype=np.float64)

    def adjacency(self) -> sp.csr_matrix:
        keys = list(self.weights)
        vals = [self.weights[k] for k in keys]
        return sp.csr_matrix(
            (vals, ([k[0] for k in keys], [k[1] for k in keys])), shape=(self.n, self.n), dtype=np.float64
        )


def assert_top_agree(ours: np.ndarray, exact: np.ndarray, k: int, slack: float) -> None:
    """Our top k are the exact top k, up to ties within ``slack``."""
    k = min(k, len(exact))
    kth = np.sort(exact)[::-1][k - 1]
    top = np.argsort(-ours, kind="stable")[:k]
    assert np.all(exact[top] >= kth - slack)


def run_stream(backend, method: str | None, seed: int, epochs: int, first: int, most: int, tol: float = 1e-7):
    stream = RandomStream(seed, n0=first // 4)
    engine = RankEngine(RankConfig(tol=tol, compact_fraction=0.2, push_max_delta=0.02), backend)
    engine.graph.compact_min = 50  # small graphs: compact often, so compaction is exercised
    stats = []
    for e in range(epochs):
        n, src, dst, dw = stream.epoch(changes=first if e == 0 else int(stream.rng.integers(1, most)))
        runs = engine.update(n, src, dst, dw, method=None if e == 0 else method)
        stats += [r.stats for r in runs.values()]
    return stream, engine, stats


@pytest.mark.parametrize("method", ["push", "power", "krylov", None])
@pytest.mark.parametrize("seed,epochs,first,most", [(1, 150, 80, 25), (2, 100, 300, 10), (3, 60, 6000, 4)])
def test_incremental_equals_from_scratch(backend, method, seed, epochs, first, most):
    tol = 1e-7
    stream, engine, stats = run_stream(backend, method, seed, epochs, first, most, tol=tol)
    if method:
        assert method in {s.method for s in stats}

    a = stream.adjacency()
    assert engine.graph.compactions > 0
    assert abs(engine.graph.to_scipy() - a).max() == 0 if a.nnz else True
    got = engine.host_scores()
    exact_pr = pagerank(a, tol=1e-13).scores
    assert np.abs(got["pagerank"] - exact_pr).sum() <= tol
    assert got["pagerank"].sum() == pytest.approx(1.0, abs=1e-12)
    assert_top_agree(got["pagerank"], exact_pr, 100, tol)
    exact_tr = tunkrank(a, p=engine.config.tunkrank_p, tol=1e-13).scores
    assert np.abs(got["tunkrank"] - exact_tr).sum() <= tol * max(exact_tr.sum(), 1.0)
    assert_top_agree(got["tunkrank"], exact_tr, 100, tol * exact_tr.sum())
    # Vertices nobody links to hold exactly the teleport share, and no influence.
    lonely = np.asarray(a.sum(axis=0)).ravel() == 0
    assert np.all(got["tunkrank"][lonely] == 0) or np.abs(got["tunkrank"][lonely]).max() < 1e-12


def test_with_room_under_the_tolerance_small_epochs_are_pushed_without_a_sweep(backend):
    tol = 1e-3
    stream, engine, stats = run_stream(backend, "push", 7, 60, 6000, 3, tol=tol)
    assert sum(s.sweeps == 0 and s.iterations > 0 for s in stats) >= 10
    a = stream.adjacency()
    assert np.abs(engine.host_scores()["pagerank"] - pagerank(a, tol=1e-13).scores).sum() <= tol


def test_the_engine_chooses_push_for_small_deltas_and_krylov_for_large(backend):
    stream = RandomStream(5, n0=500)
    engine = RankEngine(RankConfig(push_max_delta=0.01), backend)
    chosen = [engine.update(*stream.epoch(c))["pagerank"].stats.method for c in (3000, 5, 200, 2)]
    assert chosen == ["krylov", "push", "krylov", "push"]


def test_float32_ranks_to_its_tolerance(backend):
    stream = RandomStream(3)
    engine = RankEngine(RankConfig(dtype="float32", tol=1e-7), backend)
    assert engine.config.tol == 1e-5
    for _ in range(10):
        engine.update(*stream.epoch(30))
    got = engine.host_scores()["pagerank"]
    assert got.dtype == np.float32
    assert np.abs(got - pagerank(stream.adjacency(), tol=1e-13).scores).sum() <= 2e-5


def test_resident_graph_absorbs_deltas_and_compacts(backend):
    stream = RandomStream(4)
    g = ResidentGraph(backend, compact_fraction=0.1, compact_min=20)
    for _ in range(30):
        n, src, dst, dw = stream.epoch(20)
        g.grow(n)
        g.apply(src, dst, dw)
        a = stream.adjacency()
        assert g.n == n and abs(g.to_scipy() - a).max() == 0 if a.nnz else g.to_scipy().nnz == 0
        np.testing.assert_array_equal(backend.to_host(g.out_weight), np.asarray(a.sum(axis=1)).ravel())
    assert g.compactions > 0 and g.nbytes() > 0
    v = np.arange(g.n, dtype=np.float64)
    np.testing.assert_allclose(backend.to_host(g.pull(backend.asarray(v))), a.T @ v)


def test_an_empty_epoch_and_an_edgeless_graph(backend):
    engine = RankEngine(RankConfig(), backend)
    engine.update(0, np.zeros(0), np.zeros(0), np.zeros(0))
    assert engine.host_scores()["pagerank"].shape == (0,)
    engine.update(4, np.zeros(0), np.zeros(0), np.zeros(0))
    np.testing.assert_allclose(engine.host_scores()["pagerank"], 0.25)
    np.testing.assert_array_equal(engine.host_scores()["tunkrank"], 0.0)


def test_non_convergence_is_an_error(backend):
    stream = RandomStream(6)
    engine = RankEngine(RankConfig(max_iter=3), backend)
    with pytest.raises(PowerIterationFailedConvergence, match="pagerank did not converge in 3 iterations"):
        engine.update(*stream.epoch(100))


def test_backend_choice():
    assert get_backend("cpu") is numpy_backend()
    if cupy_gpu_count() == 0:
        assert get_backend("auto") is numpy_backend()
        with pytest.raises(BackendUnavailable, match="Operator action"):
            get_backend("cuda")
    else:
        assert get_backend("auto").name == "cupy"


def test_auto_says_why_an_installed_cupy_cannot_be_used(monkeypatch, caplog):
    """A CuPy built for a CUDA newer than the driver imports, then fails on the first runtime call.
    No such machine is here, so a stand-in module raises as CuPy does there (a fake of a fault that
    cannot be made for real)."""
    import types  # noqa: PLC0415

    def no_driver():
        raise RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version")

    fake = types.SimpleNamespace(__version__="14.2.0", cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=no_driver)))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    with caplog.at_level("WARNING", logger="pulsegraph.compute.backend"):
        assert get_backend("auto") is numpy_backend()
    assert "insufficient" in caplog.text and "gpu-cuda12" in caplog.text
    with pytest.raises(BackendUnavailable, match=r"CuPy 14.2.0 sees no GPU.*Operator action"):
        get_backend("cuda")


def test_the_algorithms_import_without_ray_fastapi_or_cupy():
    code = (
        "import sys, pulsegraph.compute.engine, pulsegraph.compute.pagerank, pulsegraph.compute.tunkrank, pulsegraph.compute.backend;"
        "bad = {'ray', 'fastapi', 'cupy', 'msgspec'} & set(sys.modules); assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_graph_built_on_the_device_equals_one_built_from_deltas(backend):
    stream = RandomStream(8)
    stream.epoch(300)
    a = stream.adjacency().tocoo()
    xp = backend.xp
    g = ResidentGraph.from_device_edges(
        stream.n, xp.asarray(a.row, dtype=np.int32), xp.asarray(a.col, dtype=np.int32), xp.asarray(a.data), backend
    )
    assert abs(g.to_scipy() - stream.adjacency()).max() == 0
    np.testing.assert_array_equal(backend.to_host(g.out_weight), np.asarray(stream.adjacency().sum(axis=1)).ravel())
