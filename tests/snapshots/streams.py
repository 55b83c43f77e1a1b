"""Hypothesis strategies for the contract tests: multi-partition record streams and delivery schedules.

A record here is a JSON list of graph events, made into one transaction by the
``multi`` transform registered below (a user transform, as docs/design.md allows):
its updates land on several shards, so atomicity is at stake in every cut.
"""

from __future__ import annotations

import json

from hypothesis import strategies as st

from pulsegraph.ingest.batch import Router
from pulsegraph.ingest.events import GraphEvent
from pulsegraph.ingest.transforms import (
    TRANSFORMS,
    Transform,
    edges_transform,
    register_transform,
)

VERTICES = list("abcdefg")
TYPES = ["link", "follows"]
WEIGHTS = [0.5, 1.0, 2.25]

if "multi" not in TRANSFORMS:
    register_transform(Transform("multi", list[GraphEvent], lambda evs: [u for e in evs for u in edges_transform(e)]))
MULTI = TRANSFORMS["multi"]

vertex = st.sampled_from(VERTICES)
edge_event = st.fixed_dictionaries(
    {
        "op": st.sampled_from(["add_edge", "add_edge", "remove_edge"]),
        "src": vertex,
        "dst": vertex,
        "type": st.sampled_from(TYPES),
        "weight": st.sampled_from(WEIGHTS),
    }
)
# Few distinct timestamps, so last-writer-wins ties are common and the (partition, offset) tie-break is exercised.
vertex_event = st.fixed_dictionaries(
    {
        "op": st.just("upsert_vertex"),
        "id": vertex,
        "attrs": st.fixed_dictionaries({"v": st.integers(0, 9)}),
        "ts": st.sampled_from([None, 1.0, 2.0]),
    }
)
record = st.lists(st.one_of(edge_event, edge_event, vertex_event), min_size=1, max_size=4).map(
    lambda evs: json.dumps(evs).encode()
)


@st.composite
def streams(draw, max_partitions: int = 3, max_records: int = 25) -> dict[str, list[tuple[int, bytes]]]:
    n = draw(st.integers(1, max_partitions))
    return {f"p{i}": list(enumerate(draw(st.lists(record, max_size=max_records)))) for i in range(n)}


step = st.one_of(
    st.tuples(st.just("deliver"), st.integers(0, 2), st.integers(1, 8)),
    st.tuples(st.just("replay"), st.integers(0, 2), st.floats(0, 1), st.integers(1, 8)),
    st.tuples(st.just("report"), st.integers(0, 2), st.floats(0, 1)),
    st.tuples(st.just("cut")),
)
schedules = st.lists(step, max_size=40)


def route(n_shards: int, partition: str, records: list[tuple[int, bytes]]):
    """What an ingest actor sends for these records: one batch per shard (empty ones included)."""
    router = Router(n_shards)
    for offset, raw in records:
        router.add(partition, offset, MULTI(raw))
    return router.take()
