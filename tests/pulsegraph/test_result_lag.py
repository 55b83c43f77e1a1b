"""A bound on how far ranked results fall behind: past it ingest stops reading, /health says why, and it
resumes by itself once ranking catches up.

Real actors on a real file stream. Epochs are cut every 50 ms and the bound is 1 ms of seal time: each
epoch sealed while the one before it is not ranked yet is 50 ms past it, and the coordinator reports the
largest lag since the supervisor's last poll, so the first polls find ingest paused by it whatever the
machine's speed. Nothing read is lost: the final graph equals the reference edge for edge.
"""

from __future__ import annotations

import ray

from pulsegraph.settings import Settings
from pulsegraph.topology import Pipeline
from tests.graphref import reference, without_attrs
from tests.pulsegraph.test_pipeline import edge_lines, status_when, write


def test_a_lag_past_the_bound_pauses_ingest_until_ranking_catches_up_with_nothing_lost(ray_cluster, tmp_path):
    lines = edge_lines(20_000, seed=9, vertices=400)
    path = tmp_path / "events.jsonl"
    write(path, lines)
    settings = Settings(source="file", path=path, data_dir=tmp_path / "data", epoch_interval="50ms",
                        batch_size=200, rate=2000, max_result_lag="1ms", memory_limit=0)
    p = Pipeline(settings).start()
    try:
        seen = status_when(p, lambda s: (s.get("result_lag") or {}).get("throttled"), timeout=90)
        lag = seen["result_lag"]
        assert seen["ingest"] == "throttled" and lag["limit_s"] == 0.001 and lag["over"]
        assert "--max-result-lag" in lag["reason"]
        view = p.wait_for_epoch(lambda v: v.result.vector.get("file:0") == len(lines), timeout=180)
        want = reference({"file:0": list(enumerate(lines))}, view.result.vector, "edges")
        assert ray.get(p.compute.snapshot.remote()) == without_attrs(want)
        # The stream is read whole: the next batch ranks the last epochs and the lag falls under the bound.
        status = status_when(p, lambda s: not s["result_lag"]["throttled"], timeout=30, every=0.1)
        assert status["ingest"] in ("running", "finished") and status["result_lag"]["throttled_seconds"] > 0
        assert status["result_lag"]["seconds"] <= 0.001
    finally:
        p.stop()


def test_without_a_bound_the_lag_is_reported_and_never_pauses(ray_cluster, tmp_path):
    lines = edge_lines(3_000, seed=10, vertices=200)
    path = tmp_path / "events.jsonl"
    write(path, lines)
    settings = Settings(source="file", path=path, data_dir=tmp_path / "data", epoch_interval="50ms", batch_size=200,
                        rate=2000, memory_limit=0)
    p = Pipeline(settings).start()
    try:
        p.wait_for_epoch(lambda v: v.result.vector.get("file:0") == len(lines), timeout=120)
        lag = status_when(p, lambda s: s.get("result_lag") is not None, timeout=10, every=0.1)["result_lag"]
        assert lag["limit_s"] is None and not lag["over"] and lag["throttled_seconds"] == 0
    finally:
        p.stop()
