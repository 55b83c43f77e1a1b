"""The reference graph: built from scratch from the records below a vector, with no code of the pipeline's stores.

Follows the contract of docs/design.md literally: an edge's (multiplicity, weight sum)
is the signed sum of its updates; a vertex's attributes are those of the
update with the largest (ts, partition, offset, index in the record); a vertex
exists once any update touched it.
"""

from __future__ import annotations

import json
import math

from pulsegraph.ingest.events import EdgeUpdate
from pulsegraph.ingest.exceptions import BadRecord
from pulsegraph.ingest.transforms import get_transform


def reference(records: dict[str, list[tuple[int, bytes]]], vector: dict[str, int], transform: str = "edges") -> dict:
    fn = get_transform(transform)
    edges: dict[tuple, tuple[int, int]] = {}
    vertices: dict[str, dict | None] = {}
    stamps: dict[str, tuple] = {}
    first: dict[tuple, float] = {}  # earliest add time per edge
    for p, recs in records.items():
        for offset, raw in recs:
            if offset >= vector.get(p, 0):
                continue
            # A record may pack several newline-delimited events, each its own transaction; one that
            # parses as a single JSON value is one event, however many lines it spans.
            updates = []
            try:
                json.loads(raw)
                events = [raw]
            except ValueError:
                events = raw.split(b"\n")
            for event in events:
                if not event.strip():
                    continue
                try:
                    updates.extend(fn(event))
                except BadRecord:
                    continue
            for i, u in enumerate(updates):
                if isinstance(u, EdgeUpdate):
                    key = (u.src, u.dst, u.type)
                    m, w = edges.get(key, (0, 0))
                    edges[key] = (m + u.sign, w + u.sign * u.weight)
                    first[key] = min(first.get(key, math.inf), u.ts if u.sign > 0 else math.inf)
                    vertices.setdefault(u.src, None)
                    vertices.setdefault(u.dst, None)
                else:
                    stamp = (u.ts, p, offset, i)
                    vertices.setdefault(u.id, None)
                    if u.id not in stamps or stamp > stamps[u.id]:
                        stamps[u.id] = stamp
                        vertices[u.id] = u.attrs
    return {"vertices": vertices, "edges": edges, "first_ts": first}


def merge(snapshots: list[dict]) -> dict:
    """The whole graph from the shards' snapshots (each edge lives on one shard; attributes on one)."""
    vertices: dict = {}
    edges: dict = {}
    first: dict = {}
    for s in snapshots:
        for name, attrs in s["vertices"].items():
            if attrs is not None or name not in vertices:
                vertices[name] = attrs
        edges.update(s["edges"])
        first.update(s["first_ts"])
    return {"vertices": vertices, "edges": edges, "first_ts": first}


def without_attrs(graph: dict) -> dict:
    """``graph`` (a reference, or shards' snapshots merged) as the compute stage's snapshot has it: the same
    vertices and edges, no attributes (those stay on the shards)."""
    return {**graph, "vertices": dict.fromkeys(graph["vertices"])}


def live_digraph(graph: dict, types: tuple[str, ...] | None = None):
    """A networkx DiGraph of the live edges of ``types``, weights summed over types, every vertex included."""
    import networkx as nx

    from pulsegraph.ingest.events import WEIGHT_SCALE

    g = nx.DiGraph()
    g.add_nodes_from(graph["vertices"])
    for (s, d, t), (m, w) in graph["edges"].items():
        if m > 0 and (types is None or t in types):
            prev = g.get_edge_data(s, d, {"weight": 0.0})["weight"]
            g.add_edge(s, d, weight=prev + max(w, 0) / WEIGHT_SCALE)
    return g


def window_reference(
    records: dict[str, list[tuple[int, bytes]]], vector: dict[str, int], window: float, transform: str = "edges",
    record_ts: dict[tuple[str, int], float] | None = None,
) -> tuple[dict, float | None]:
    """``S_e`` and ``W_e`` of a windowed service, word for word from the definition (README, "Sliding
    windows"): a transaction (one record) has the largest ``ts`` among its updates as its time (one
    without takes ``record_ts[(partition, offset)]``, the broker's time, or is a dead letter); ``W_e`` is the largest time below the vector; ``S_e``
    holds the transactions with time in ``(W_e - window, W_e]``; a vertex is in it while it has a live
    edge there or attributes written there."""
    fn = get_transform(transform)
    txs = []
    for p, recs in records.items():
        for offset, raw in recs:
            if offset >= vector.get(p, 0):
                continue
            try:
                updates = fn(raw)
            except BadRecord:
                continue
            t = max((u.ts for u in updates if u.ts), default=0.0) or (record_ts or {}).get((p, offset), 0.0)
            if t:
                txs.append((p, offset, t, updates))
    if not txs:
        return {"vertices": {}, "edges": {}, "first_ts": {}}, None
    w = max(t for _, _, t, _ in txs)
    edges: dict[tuple, tuple[int, int]] = {}
    first: dict[tuple, float] = {}
    stamps: dict[str, tuple] = {}
    attrs: dict[str, dict] = {}
    for p, offset, t, updates in txs:
        if not (w - window < t <= w):
            continue
        for i, u in enumerate(updates):
            if isinstance(u, EdgeUpdate):
                key = (u.src, u.dst, u.type)
                m, wt = edges.get(key, (0, 0))
                edges[key] = (m + u.sign, wt + u.sign * u.weight)
                first[key] = min(first.get(key, math.inf), t if u.sign > 0 else math.inf)
            else:
                stamp = (t, p, offset, i)
                if u.id not in stamps or stamp > stamps[u.id]:
                    stamps[u.id], attrs[u.id] = stamp, u.attrs
    vertices: dict[str, dict | None] = {v: None for (s, d, _), (m, _) in edges.items() if m > 0 for v in (s, d)}
    vertices.update(attrs)
    return {"vertices": vertices, "edges": edges, "first_ts": first}, w
