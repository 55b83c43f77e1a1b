"""The memory budget: near it ingest stops reading, says why in /health, and resumes by itself.

The pipeline test runs real actors on a real file stream. Its budget starts far
below what the test process already uses, so the real measurement throttles at
once; raising the budget afterwards stands in for memory being freed (the one
thing a test cannot make happen on cue). Nothing read is lost: the final graph
equals the reference edge for edge.
"""

from __future__ import annotations

import time

import pytest
import ray

from pulsegraph.memory import (
    HIGH_WATER,
    LOW_WATER,
    OUTGROWN_AFTER_S,
    MemoryGuard,
    parse_size,
    service_memory,
)
from pulsegraph.settings import Settings
from pulsegraph.topology import Pipeline
from tests.graphref import reference, without_attrs
from tests.pulsegraph.test_pipeline import edge_lines, write


def test_sizes_parse_in_decimal_and_binary_units():
    assert parse_size("16GB") == 16 * 10**9 and parse_size("512MiB") == 512 * 2**20 and parse_size(42) == 42
    with pytest.raises(ValueError):
        parse_size("lots")
    assert Settings(memory_limit="2GB").memory_budget == 2 * 10**9
    assert Settings(memory_limit=0).memory_budget is None
    assert Settings().memory_budget > 0


def test_the_guard_throttles_at_the_high_water_mark_and_resumes_below_the_low_one():
    now = [0.0]
    g = MemoryGuard(1000, _clock=lambda: now[0])
    assert not g.update(int(HIGH_WATER * 1000) - 1) and not g.throttled
    assert g.update(int(HIGH_WATER * 1000)) and g.throttled and "--memory-limit" in g.reason()
    now[0] = 5.0
    assert not g.update(int(LOW_WATER * 1000))  # between the marks: still throttled, no flapping
    assert not g.outgrown()
    now[0] = OUTGROWN_AFTER_S + 1
    assert g.outgrown() and "--window" in g.reason()
    assert g.update(int(LOW_WATER * 1000) - 1) and not g.throttled and g.reason() is None
    assert g.total_throttled_s() == pytest.approx(OUTGROWN_AFTER_S + 1)


def test_service_memory_counts_this_process():
    assert service_memory() > 10 * 2**20


def test_a_small_budget_throttles_ingest_and_it_resumes_with_nothing_lost(ray_cluster, tmp_path):
    lines = edge_lines(6000, seed=3)
    path = tmp_path / "events.jsonl"
    write(path, lines)
    settings = Settings(source="file", path=path, data_dir=tmp_path / "data", epoch_interval="50ms",
                        batch_size=100, rate=1500, memory_limit="1MB")
    p = Pipeline(settings).start()
    try:
        deadline = time.monotonic() + 60
        while p.status().get("ingest") != "throttled":
            assert time.monotonic() < deadline, p.status()
            time.sleep(0.1)
        health = p.status()
        assert health["memory"]["throttled"] and "--memory-limit" in health["memory"]["reason"]
        time.sleep(2.5)  # the round in flight finishes and the cached status catches up; then nothing is read
        held = p.status()["positions"]["file:0"]
        time.sleep(2.0)
        assert p.status()["positions"]["file:0"] == held < len(lines), "a throttled source must not read"
        p.memory.limit = 10**15  # memory freed
        view = p.wait_for_epoch(lambda v: v.result.vector.get("file:0") == len(lines), timeout=120)
        status = p.status()
        assert status["ingest"] in ("running", "finished") and not status["memory"]["throttled"]
        assert status["memory"]["throttled_seconds"] >= 2.0
        want = reference({"file:0": list(enumerate(lines))}, view.result.vector, "edges")
        assert ray.get(p.compute.snapshot.remote()) == without_attrs(want)
    finally:
        p.stop()
