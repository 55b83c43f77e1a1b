"""Weakly connected components: union of labels under insertions, recomputed for the affected components on deletions.

A component's label is the smallest vertex id in it, so labels are canonical and
a merge is a relabel to the smaller one. Insertions: the labels joined by the
new edges form a small graph whose connected components (SciPy) give the
merges, applied with one vectorized lookup. Deletions: only the components that
lost an edge can split; their vertices are re-solved on the induced subgraph.

In window mode a vertex outside the snapshot (no live edge, no attributes) is
no component: it keeps its own label internally (it has no edges, so nothing
joins it), and is published with label -1 and counted nowhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from pulsegraph.base.arrays import unique
from pulsegraph.compute.apps.base import AppDelta, AppGraph, Application, AppResult

# Components reported per epoch, largest first: /v1/components?k= is bounded by it.
TOP_COMPONENTS = 1000


@dataclass
class ComponentsState:
    labels: np.ndarray  # int64 per vertex: the smallest vertex id of its component
    present: np.ndarray | None = None  # window mode: the vertices in the snapshot (a copy); None: all


def _min_labels(n: int, src: np.ndarray, dst: np.ndarray, ids: np.ndarray | None = None) -> np.ndarray:
    """Component label (smallest member id) of each vertex of the undirected graph on ``n`` local vertices;
    ``ids`` maps local to global ids (default: identity)."""
    m = sp.csr_matrix((np.ones(len(src), dtype=np.int8), (src, dst)), shape=(n, n))
    _, comp = connected_components(m, directed=True, connection="weak")
    glob = np.arange(n, dtype=np.int64) if ids is None else ids
    smallest = np.full(comp.max() + 1 if n else 0, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(smallest, comp, glob)
    return smallest[comp]


def _present(graph: AppGraph) -> np.ndarray | None:
    present = graph.g.present()
    return None if present is None else present.copy()


@dataclass(frozen=True)
class ComponentsResult(AppResult):
    """``labels[v]``: the smallest id in v's weakly connected component (-1: v is not in the graph);
    ``top``, ``top_sizes``: the largest components' labels and sizes, largest first; ``count``: how many."""

    PER_VERTEX: ClassVar[tuple[str, ...]] = ("labels",)
    labels: np.ndarray | None
    count: int
    top: np.ndarray
    top_sizes: np.ndarray


class Components(Application):
    name = "components"
    result = ComponentsResult

    def initialize(self, graph: AppGraph) -> ComponentsState:
        src, dst = graph.pairs()
        return ComponentsState(_min_labels(graph.n, src, dst), _present(graph))

    def update(self, graph: AppGraph, delta: AppDelta, previous: ComponentsState) -> ComponentsState:
        n = graph.n
        labels = previous.labels
        if len(labels) < n:
            labels = np.concatenate([labels, np.arange(len(labels), n, dtype=np.int64)])
        ds, dd = delta.deleted()
        if len(ds):
            # Only the components that lost an edge can split: re-solve their vertices on the induced subgraph.
            hit = unique(labels[np.concatenate([ds, dd])])
            members = np.flatnonzero(np.isin(labels, hit))
            local = np.full(n, -1, dtype=np.int64)
            local[members] = np.arange(len(members))
            nbrs, owner = graph.out.neighbors(members)
            inside = local[nbrs] >= 0
            labels = labels.copy()
            labels[members] = _min_labels(len(members), owner[inside], local[nbrs[inside]], members)
        s, d = delta.inserted()
        if len(s):
            ls, ld = labels[s], labels[d]
            join = ls != ld
            if join.any():
                ls, ld = ls[join], ld[join]
                touched = unique(np.concatenate([ls, ld]))
                pos = np.searchsorted(touched, ls), np.searchsorted(touched, ld)
                merged = _min_labels(len(touched), pos[0], pos[1], touched)
                lookup = np.arange(n, dtype=np.int64)
                lookup[touched] = merged
                labels = lookup[labels]
        return ComponentsState(labels, _present(graph))

    def publish(self, state: ComponentsState) -> ComponentsResult:
        labels = state.labels
        if state.present is not None:
            # An absent vertex has no edge: it is alone in its label, which then simply drops out.
            labels = np.where(state.present[: len(labels)], labels, -1)
        sizes = np.bincount(labels[labels >= 0], minlength=len(labels)) if len(labels) else np.zeros(0, np.int64)
        comps = np.flatnonzero(sizes)
        order = comps[np.lexsort((comps, -sizes[comps]))][:TOP_COMPONENTS]
        return ComponentsResult(labels.astype(np.int32), len(comps), order.astype(np.int32), sizes[order].astype(np.int64))

