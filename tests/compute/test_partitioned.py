"""The partitioned ranking (compute/partitioned) against the single-process engine and the references.

Real partitions in one process (InProcessPartitions: plain method calls), fed the same random epochs as
tests/compute/test_incremental.py (inserts, deletes, re-weights, vertices losing every out-edge, new
vertices), in window mode with presence flips too: every published PageRank and TunkRank is within its
proven L1 bound of the exact ranking, close to RankEngine's, and of the slow dict-based references; the
values a sweep exchanges are exactly the boundary (the distinct remote destinations of each partition's
rows, per partition pair), far below n where the ids have locality.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsegraph.compute.engine import RankConfig, RankEngine
from pulsegraph.compute.exceptions import PowerIterationFailedConvergence
from pulsegraph.compute.pagerank import pagerank, pagerank_reference
from pulsegraph.compute.partitioned import (
    BlockOwner,
    ModuloOwner,
    PartChanges,
    PartitionedEngine,
    make_rank_engine,
)
from pulsegraph.compute.resident import ResidentGraph
from pulsegraph.compute.tunkrank import tunkrank, tunkrank_reference
from tests.compute.test_incremental import UNIT, RandomStream

TOL = 1e-7


def config(**kw) -> RankConfig:
    return RankConfig(**{"tol": TOL, "compact_fraction": 0.2, "push_max_delta": 0.02, **kw})


def engines(parts: int, owner=None, backend=None, **kw) -> tuple[PartitionedEngine, RankEngine]:
    """The partitioned engine and today's, both compacting often (small graphs) so compaction is exercised."""
    part = PartitionedEngine(config(**kw), parts, owner, backend, compact_min=50)
    single = RankEngine(config(**kw), backend)
    single.graph.compact_min = 50
    return part, single


def exact(a: sp.csr_matrix, p: float) -> dict[str, np.ndarray]:
    return {"pagerank": pagerank(a, tol=1e-13).scores, "tunkrank": tunkrank(a, p=p, tol=1e-13).scores}


def assert_within_bounds(engine: PartitionedEngine, want: dict[str, np.ndarray], single: dict | None = None) -> None:
    got = engine.host_scores()
    bounds = engine.error_bounds(got)
    for name in ("pagerank", "tunkrank"):
        assert np.abs(got[name] - want[name]).sum() <= bounds[name], name
        if single is not None:  # both within their bound of the same answer
            assert np.abs(got[name] - single[name]).sum() <= 2 * bounds[name], name
    if len(got["pagerank"]):
        assert got["pagerank"].sum() == pytest.approx(1.0, abs=1e-12)


def expected_boundary(weights: dict[tuple[int, int], int], owner, parts: int) -> np.ndarray:
    """[q, p]: distinct destinations owned by p of the live edges whose source q owns."""
    seen = {(int(owner(np.array([s]))[0]), int(owner(np.array([d]))[0]), d) for (s, d), w in weights.items() if w}
    out = np.zeros((parts, parts), np.int64)
    for q, p, _ in seen:
        if q != p:
            out[q, p] += 1
    return out


# Power iteration at damping 0.85 takes ~100 sweeps an epoch (1.3-2.4 s here): the whole suite runs those, the
# quick lane has power epochs in the window and locality tests.
@pytest.mark.parametrize("method", [None, pytest.param("power", marks=pytest.mark.slow), "krylov", "push"])
@pytest.mark.parametrize("parts", [1, 2, 3, 5])
def test_every_epoch_is_within_its_bound_of_the_exact_ranking(backend, parts, method):
    stream = RandomStream(11, n0=40)
    part, single = engines(parts, backend=backend)
    p = part.config.tunkrank_p
    for e in range(20):
        n, src, dst, dw = stream.epoch(120 if e == 0 else int(stream.rng.integers(1, 20)))
        runs = part.update(n, src, dst, dw, method=None if e == 0 else method)
        single.update(n, src, dst, dw, method=None if e == 0 else method)
        assert_within_bounds(part, exact(stream.adjacency(), p), single.host_scores())
        assert {r.stats.method for r in runs.values()} <= {"push", "power", "krylov"}
        if method and e:
            assert runs["pagerank"].stats.method == method
    assert (part.boundary_matrix() == expected_boundary(stream.weights, part.owner, parts)).all()
    assert part.boundary == int(part.boundary_matrix().sum())
    if parts > 1:
        assert part.boundary > 0


@pytest.mark.parametrize("parts", [2, 3])
def test_against_the_dict_references(parts):
    stream = RandomStream(12, n0=30)
    part, _ = engines(parts, BlockOwner(parts, 7))
    for e in range(12):
        n, src, dst, dw = stream.epoch(120 if e == 0 else 12)
        part.update(n, src, dst, dw)
    nodes = list(range(stream.n))
    edges = {k: w / UNIT for k, w in stream.weights.items()}
    want = {
        "pagerank": np.array([pagerank_reference(nodes, edges, tol=1e-13)[v] for v in nodes]),
        "tunkrank": np.array([tunkrank_reference(nodes, edges, p=part.config.tunkrank_p)[v] for v in nodes]),
    }
    assert_within_bounds(part, want)


class WindowStream(RandomStream):
    """A RandomStream whose snapshot holds the endpoints of live edges and the vertices with attributes
    (a random, changing set): presence flips both ways, as in window mode."""

    def __init__(self, seed: int, n0: int = 40) -> None:
        super().__init__(seed, n0)
        self.attrs: set[int] = set()
        self.was = np.zeros(0, bool)

    def window_epoch(self, changes: int):
        old = len(self.was)
        n, src, dst, dw = self.epoch(changes)
        for _ in range(int(self.rng.integers(0, 4))):
            self.attrs ^= {int(self.rng.integers(n))}
        present = np.zeros(n, bool)
        present[list(self.attrs)] = True
        for s, d in self.weights:
            present[s] = present[d] = True
        flips = np.flatnonzero(present[:old] != self.was)
        self.was = present
        return n, src, dst, dw, present, flips

    def present_subgraph(self):
        keep = np.flatnonzero(self.was)
        nodes = keep.tolist()
        edges = {k: w / UNIT for k, w in self.weights.items()}
        return keep, nodes, edges


@pytest.mark.parametrize("parts", [2, 3, 5])
def test_window_mode_presence_flips(backend, parts):
    stream = WindowStream(13)
    part, single = engines(parts, backend=backend)
    p = part.config.tunkrank_p
    for e in range(25):
        n, src, dst, dw, present, flips = stream.window_epoch(90 if e == 0 else int(stream.rng.integers(1, 12)))
        method = [None, "push", "power", "krylov"][e % 4]
        part.update(n, src, dst, dw, method, present=present, flips=flips)
        single.update(n, src, dst, dw, method, present=present, flips=flips)
        keep, nodes, edges = stream.present_subgraph()
        want = {"pagerank": np.zeros(n), "tunkrank": np.zeros(n)}
        if len(nodes):
            pr = pagerank_reference(nodes, edges, tol=1e-13)
            tr = tunkrank_reference(nodes, edges, p=p)
            want["pagerank"][keep] = [pr[v] for v in nodes]
            want["tunkrank"][keep] = [tr[v] for v in nodes]
        assert_within_bounds(part, want, single.host_scores())
        got = part.host_scores()
        assert np.all(got["pagerank"][~present] == 0) and np.all(got["tunkrank"][~present] == 0)


def test_a_sweep_exchanges_exactly_the_boundary_far_below_n_with_locality():
    """Communities of 100 consecutive ids, 97% of the edges inside one: with BlockOwner the boundary is
    a small share of n; with ids spread modulo P (no locality) it is most of n."""
    rng = np.random.default_rng(3)
    n, block, m = 6000, 100, 30_000
    src = rng.integers(0, n, m)
    inside = rng.random(m) < 0.97
    dst = np.where(inside, src // block * block + rng.integers(0, block, m), rng.integers(0, n, m))
    keys, counts = np.unique(src * n + dst, return_counts=True)
    s, d, w = keys // n, keys % n, counts * float(UNIT)
    weights = dict(zip(zip(s.tolist(), d.tolist()), w.tolist()))
    for owner, local in ((BlockOwner(3, block), True), (ModuloOwner(3), False)):
        part = PartitionedEngine(config(), 3, owner)
        runs = part.update(n, s, d, w, method="power")
        assert (part.boundary_matrix() == expected_boundary(weights, owner, 3)).all()
        for run in runs.values():
            assert run.sparse_values == 0  # a power epoch pushes nothing: every value is a sweep's
            assert run.dense_values == run.exchanged_sweeps * part.boundary
            assert run.exchanged_sweeps == run.stats.sweeps + 1  # the residual recomputed first
        assert_within_bounds(part, exact(sp.csr_matrix((w, (s, d)), shape=(n, n)), part.config.tunkrank_p))
        if local:
            assert part.boundary < 0.1 * n
            # Vectors for its own third and a few ghosts, none for the rest of the graph.
            assert all(size["owned"] + size["ghosts"] < 0.4 * n for size in part.local_sizes())
        else:
            assert part.boundary > n


def test_a_ghost_goes_with_its_last_edge_and_its_number_is_reused():
    part = PartitionedEngine(config(), 2)  # ModuloOwner: even ids on 0, odd on 1
    (p0, _) = part.port.partitions  # type: ignore[attr-defined]
    part.update(6, np.array([0, 2]), np.array([1, 1]), np.array([UNIT, UNIT], float))
    assert part.boundary_matrix().tolist() == [[0, 1], [0, 0]]
    part.update(6, np.array([0]), np.array([1]), np.array([-UNIT], float))  # 2 -> 1 keeps the ghost
    assert part.boundary == 1
    part.update(6, np.array([2]), np.array([1]), np.array([-UNIT], float))  # its last edge: dropped
    assert part.boundary == 0 and p0.local_size()["ghosts"] == 0
    part.update(6, np.array([4]), np.array([3]), np.array([UNIT], float))
    assert part.boundary == 1 and p0.local_size()["ghost_numbers"] == 1  # the free number, reused
    a = sp.csr_matrix(([1.0], ([4], [3])), shape=(6, 6))
    assert_within_bounds(part, exact(a, part.config.tunkrank_p))


def test_owned_vertices_outgrowing_their_room_move_the_ghosts():
    stream = RandomStream(14, n0=20)
    part = PartitionedEngine(config(), 3)
    n, src, dst, dw = stream.epoch(200)
    part.update(n, src, dst, dw)
    for _ in range(6):  # past the room kept (CAPACITY_MIN): the ghosts move up, edges and all
        n += 700
        s2, d2 = np.array([n - 1, n - 2]), np.array([0, n - 5])
        stream.n = n
        for k in zip(s2.tolist(), d2.tolist()):
            stream.weights[k] = stream.weights.get(k, 0) + UNIT
        part.update(n, s2, d2, np.array([UNIT, UNIT], float))
        assert_within_bounds(part, exact(stream.adjacency(), part.config.tunkrank_p))
    assert any(size["room"] > 1024 for size in part.local_sizes())


def test_open_gap_moves_columns_and_keeps_products(backend):
    stream = RandomStream(15)
    n, src, dst, dw = stream.epoch(300)
    keep = src < 40  # vertices from 40 on: no out-edges, as ghosts
    g = ResidentGraph(backend, compact_min=20)
    g.grow(n)
    g.apply(src[keep], dst[keep], dw[keep])
    g.compact()
    g.apply(np.array([1, 2]), np.array([45, 3]), np.array([2.0 * UNIT, UNIT]))  # an overlay too
    before = g.to_scipy().tocoo()
    g.open_gap(40, 7)
    after = g.to_scipy().tocoo()
    moved = np.where(before.col >= 40, before.col + 7, before.col)
    want = sp.csr_matrix((before.data, (before.row, moved)), shape=(n + 7, n + 7))
    assert g.n == n + 7 and abs(g.to_scipy() - want).max() == 0 and after.nnz == before.nnz
    v = np.arange(g.n, dtype=np.float64)
    np.testing.assert_allclose(backend.to_host(g.pull(backend.asarray(v))), want.T @ v)
    out = backend.xp.zeros(g.n)
    g.push(backend.asarray(np.array([1, 2])), backend.asarray(np.array([1.0, 1.0])), out)
    np.testing.assert_allclose(backend.to_host(out), want[[1, 2]].sum(axis=0).A1)
    with pytest.raises(ValueError, match="no out-edges"):
        g.open_gap(1, 3)


def test_changes_routed_by_the_shards_go_to_their_owner_only():
    part = PartitionedEngine(config(), 2)
    wrong = [PartChanges(np.array([1]), np.array([0]), np.array([1.0])), PartChanges(*(np.zeros(0),) * 3)]
    with pytest.raises(ValueError, match="source it does not own"):
        part.update_parts(4, wrong)


def test_one_partition_is_todays_engine_and_the_bounds_are_its():
    assert type(make_rank_engine(config(), 1)) is RankEngine
    part, single = engines(3)
    n, src, dst, dw = RandomStream(16).epoch(200)
    single.update(n, src, dst, dw)
    part.update(n, src, dst, dw)
    a, b = part.host_scores(), single.host_scores()
    assert part.error_bounds(a) == single.error_bounds(b)


def test_an_empty_epoch_an_edgeless_graph_and_a_partition_with_nothing():
    part = PartitionedEngine(config(), 5)
    part.update(0, np.zeros(0), np.zeros(0), np.zeros(0))
    assert part.host_scores()["pagerank"].shape == (0,)
    part.update(3, np.zeros(0), np.zeros(0), np.zeros(0))  # partitions 3 and 4 own nothing
    np.testing.assert_allclose(part.host_scores()["pagerank"], 1 / 3)
    np.testing.assert_array_equal(part.host_scores()["tunkrank"], 0.0)


def test_non_convergence_is_an_error():
    part = PartitionedEngine(config(max_iter=3), 2)
    with pytest.raises(PowerIterationFailedConvergence, match="pagerank did not converge in 3 iterations"):
        part.update(*RandomStream(6).epoch(100))


def test_the_partitioned_core_imports_without_ray():
    code = (
        "import sys, pulsegraph.compute.partitioned;"
        "bad = {'ray', 'fastapi', 'cupy', 'msgspec'} & set(sys.modules); assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16), parts=st.integers(1, 3), methods=st.lists(
    st.sampled_from([None, "push", "power", "krylov"]), min_size=3, max_size=6))
def test_random_streams_stay_within_their_bound(seed, parts, methods):
    stream = RandomStream(seed, n0=12)
    part = PartitionedEngine(config(), parts, compact_min=20)
    for i, method in enumerate(methods):
        n, src, dst, dw = stream.epoch(40 if i == 0 else int(stream.rng.integers(1, 8)))
        part.update(n, src, dst, dw, method)
    assert_within_bounds(part, exact(stream.adjacency(), part.config.tunkrank_p))
    assert (part.boundary_matrix() == expected_boundary(stream.weights, part.owner, parts)).all()
