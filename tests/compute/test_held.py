"""bench/held.py counts what a compute stage holds part by part, each buffer once (the figures behind
docs/scaling.md's account of the compute actor's bytes per edge)."""

from __future__ import annotations

import numpy as np

from bench.held import held_by_part, held_table, reachable_bytes
from pulsegraph.compute.stage import ComputeStage
from tests.compute.test_compute_actor import sealed_epochs


class _Holder:
    def __init__(self, *arrays) -> None:
        self.arrays = list(arrays)


def test_a_buffer_is_counted_once_however_many_views_and_parts_reach_it():
    big = np.zeros(1_000_000, dtype=np.int64)  # 8 MB
    seen: set[int] = set()
    # Alive throughout: ``seen`` holds ids, which Python reuses once an object is gone.
    holders = [_Holder(big, big[10:], big.reshape(1000, 1000)), _Holder(big[:5]), _Holder(np.zeros(1000))]
    assert 8_000_000 <= reachable_bytes(holders[0], seen) < 8_010_000
    assert reachable_bytes(holders[1], seen) < 1_000, "a view of a buffer counted already adds nothing"
    assert reachable_bytes(holders[2], seen) >= 8_000


def test_every_part_of_a_stage_that_took_epochs_holds_bytes_and_the_parts_add_up():
    stage = ComputeStage()
    for e in sealed_epochs(3_000, 1_000):
        r = stage.apply([e])
    parts = held_by_part(stage)
    for name in ("graph.slots", "graph.ids", "engine (ranking)", "apps.adjacency", "apps.states[landmarks]"):
        assert parts[name] > 10_000, (name, parts[name])
    # Counted once each: the whole stage reached from the top is what the parts add up to.
    assert sum(parts.values()) == reachable_bytes(stage, set())
    table = held_table(stage, r.edges, r.vertices, floor=0)
    assert table.splitlines()[-1].startswith("| **all** |") and "graph.slots" in table
