"""PageRank against networkx.pagerank and the dict-based reference, dangling vertices and self-loops included."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from pulsegraph.compute.exceptions import PowerIterationFailedConvergence
from pulsegraph.compute.pagerank import pagerank, pagerank_reference


def to_csr(g: nx.DiGraph) -> tuple[list, sp.csr_matrix]:
    nodes = list(g.nodes)
    idx = {v: i for i, v in enumerate(nodes)}
    rows = [idx[s] for s, _ in g.edges]
    cols = [idx[d] for _, d in g.edges]
    vals = [w for _, _, w in g.edges(data="weight", default=1.0)]
    return nodes, sp.csr_matrix((vals, (rows, cols)), shape=(len(nodes), len(nodes)))


def small_graphs():
    rng = np.random.default_rng(3)
    cycle = nx.DiGraph([(0, 1), (1, 2), (2, 0)])
    dangling = nx.DiGraph([(0, 1), (1, 2), (0, 2)])  # 2 has no out-edge
    dangling.add_node(3)  # isolated
    loops = nx.DiGraph([(0, 0), (0, 1), (1, 1), (1, 2), (2, 0)])
    weighted = nx.DiGraph()
    weighted.add_weighted_edges_from([(0, 1, 0.5), (0, 2, 3.0), (2, 1, 1.25), (1, 0, 2.0), (3, 3, 1.0)])
    weighted.add_node(4)
    rnd = nx.gnp_random_graph(60, 0.06, seed=5, directed=True)
    for s, d in rnd.edges:
        rnd[s][d]["weight"] = float(rng.uniform(0.1, 5))
    rnd.add_edges_from([(7, 7), (8, 8)])
    star = nx.DiGraph([(i, 0) for i in range(1, 30)])  # everyone points at one dangling hub
    return {"cycle": cycle, "dangling": dangling, "self-loops": loops, "weighted": weighted, "random": rnd, "star": star}


@pytest.mark.parametrize("name", list(small_graphs()))
def test_matches_networkx(name):
    g = small_graphs()[name]
    nodes, a = to_csr(g)
    ours = pagerank(a, tol=1e-11).scores
    theirs = nx.pagerank(g, alpha=0.85, tol=1e-14, max_iter=10_000)
    want = np.array([theirs[v] for v in nodes])
    assert np.abs(ours - want).sum() < 1e-8
    assert ours.sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("name", list(small_graphs()))
def test_matches_the_reference_implementation(name):
    g = small_graphs()[name]
    nodes, a = to_csr(g)
    ref = pagerank_reference(nodes, {(s, d): w for s, d, w in g.edges(data="weight", default=1.0)})
    assert np.abs(pagerank(a, tol=1e-11).scores - np.array([ref[v] for v in nodes])).sum() < 1e-8


def test_warm_start_reaches_the_same_fixed_point_in_fewer_steps():
    g = small_graphs()["random"]
    _, a = to_csr(g)
    cold = pagerank(a)
    warm = pagerank(a, x0=cold.scores)
    assert np.abs(cold.scores - warm.scores).sum() < 1e-9
    assert warm.iterations < cold.iterations


def test_non_convergence_is_an_error():
    _, a = to_csr(small_graphs()["random"])
    with pytest.raises(PowerIterationFailedConvergence, match="did not converge in 3 iterations"):
        pagerank(a, max_iter=3)


def test_empty_graph():
    assert pagerank(sp.csr_matrix((0, 0))).scores.shape == (0,)
