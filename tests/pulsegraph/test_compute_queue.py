"""The compute stage's queue: at its bound ingest stops reading, /health says why, and it resumes by itself.

Real actors on a real file stream. The bound is one byte, so the queue is full
whenever a sealed epoch is not merged yet (queued, or in the batch the compute
stage merges), and the coordinator reports it full at the next status poll once
it was so in between: with epochs cut every 50 ms the first polls find ingest
paused whatever the machine's speed, and each batch done empties it again. Nothing read is lost: the final graph equals the
reference edge for edge.
"""

from __future__ import annotations

import ray

from pulsegraph.settings import Settings
from pulsegraph.topology import Pipeline
from tests.graphref import reference, without_attrs
from tests.pulsegraph.test_pipeline import edge_lines, status_when, write


def test_a_full_compute_queue_throttles_ingest_and_it_resumes_with_nothing_lost(ray_cluster, tmp_path):
    lines = edge_lines(20_000, seed=5, vertices=400)
    path = tmp_path / "events.jsonl"
    write(path, lines)
    settings = Settings(source="file", path=path, data_dir=tmp_path / "data", epoch_interval="50ms",
                        batch_size=200, rate=2000, compute_queue_limit="1", memory_limit=0)
    p = Pipeline(settings).start()
    try:
        seen = status_when(p, lambda s: (s.get("compute_queue") or {}).get("throttled"), timeout=90)
        assert seen["ingest"] == "throttled" and seen["compute_queue"]["limit_bytes"] == 1
        assert "--compute-queue-limit" in seen["compute_queue"]["reason"]
        view = p.wait_for_epoch(lambda v: v.result.vector.get("file:0") == len(lines), timeout=180)
        want = reference({"file:0": list(enumerate(lines))}, view.result.vector, "edges")
        assert ray.get(p.compute.snapshot.remote()) == without_attrs(want)
        status = status_when(p, lambda s: not s["compute_queue"]["throttled"], timeout=30, every=0.1)
        assert status["ingest"] in ("running", "finished") and status["compute_queue"]["throttled_seconds"] > 0
        # The compute stage answers the poll itself: the newest epoch it merged, and no batch running once done.
        done = status_when(p, lambda s: s["compute"]["epoch"] >= view.result.epoch and s["compute"]["batch_s"] is None, timeout=30)
        assert set(done["compute"]) == {"epoch", "batch_s"}
    finally:
        p.stop()
