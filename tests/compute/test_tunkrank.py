"""PageRank against networkx and TunkRank against a direct dense solve of its defining equations,
on every backend; the fast implementations against the slow dict-based references."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from pulsegraph.compute.pagerank import pagerank
from pulsegraph.compute.tunkrank import tunkrank, tunkrank_reference
from tests.compute.test_pagerank import small_graphs, to_csr


def tunkrank_dense(a: np.ndarray, p: float) -> np.ndarray:
    """Influence(X) = sum_{Y -> X} w(Y, X) / W(Y) * (1 + p Influence(Y)), solved as one linear system."""
    out = a.sum(axis=1)
    q = np.divide(a, out[:, None], out=np.zeros_like(a), where=out[:, None] > 0)
    n = len(a)
    return np.linalg.solve(np.eye(n) - p * q.T, q.T @ np.ones(n))


@pytest.mark.parametrize("name", list(small_graphs()))
def test_pagerank_matches_networkx_on_every_backend(backend, name):
    g = small_graphs()[name]
    nodes, a = to_csr(g)
    ours = pagerank(a, tol=1e-11, backend=backend).scores
    theirs = nx.pagerank(g, alpha=0.85, tol=1e-14, max_iter=10_000)
    assert np.abs(ours - np.array([theirs[v] for v in nodes])).sum() < 1e-9


@pytest.mark.parametrize("p", [0.05, 0.5, 0.9])
@pytest.mark.parametrize("name", list(small_graphs()))
def test_tunkrank_solves_its_definition(backend, name, p):
    nodes, a = to_csr(small_graphs()[name])
    want = tunkrank_dense(a.toarray(), p)
    got = tunkrank(a, p=p, tol=1e-10, backend=backend).scores
    assert np.abs(got - want).sum() <= 1e-10 * max(want.sum(), 1.0)


@pytest.mark.parametrize("name", list(small_graphs()))
def test_tunkrank_matches_the_reference_implementation(name):
    g = small_graphs()[name]
    nodes, a = to_csr(g)
    ref = tunkrank_reference(nodes, {(s, d): w for s, d, w in g.edges(data="weight", default=1.0)}, p=0.3)
    got = tunkrank(a, p=0.3, tol=1e-11).scores
    assert np.abs(got - np.array([ref[v] for v in nodes])).sum() < 1e-9


def test_tunkrank_by_hand():
    """b and c follow a; c also follows b. a: from b (1 + p*I(b)) / 1 and from c (1 + p*I(c)) / 2;
    b: from c 1/2; c: nobody follows c."""
    g = nx.DiGraph([("b", "a"), ("c", "a"), ("c", "b")])
    nodes, a = to_csr(g)
    got = dict(zip(nodes, tunkrank(a, p=0.5, tol=1e-13).scores))
    assert got["c"] == 0
    assert got["b"] == pytest.approx(0.5)
    assert got["a"] == pytest.approx((1 + 0.5 * 0.5) + 0.5)


def test_tunkrank_needs_a_probability():
    _, a = to_csr(small_graphs()["cycle"])
    with pytest.raises(ValueError, match="0 < p < 1"):
        tunkrank(a, p=1.0)
