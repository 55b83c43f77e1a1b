"""A failure inside the compute actor fails the pipeline loudly and relaunches it; no epoch is served half-ranked.

The fault is real: a PageRank tolerance no float reaches within the one iteration
``--pagerank-max-iter 1`` allows, so the solver raises on the first epoch it ranks.
"""

from __future__ import annotations

import logging
import time

from pulsegraph.settings import Settings
from pulsegraph.topology import Pipeline
from tests.pulsegraph.test_pipeline import edge_lines, write


def test_a_solver_that_fails_fails_the_pipeline_and_it_relaunches(ray_cluster, tmp_path, caplog):
    path = tmp_path / "events.jsonl"
    write(path, edge_lines(500, seed=4))
    settings = Settings(source="file", path=path, data_dir=tmp_path / "data", epoch_interval="100ms",
                        pagerank_max_iter=1, pagerank_tol=1e-12)
    caplog.set_level(logging.ERROR, logger="pulsegraph.topology")
    p = Pipeline(settings).start()
    try:
        deadline = time.monotonic() + 90
        while p.recoveries < 1:
            assert time.monotonic() < deadline, p.status()
            time.sleep(0.2)
        lost = [r.getMessage() for r in caplog.records if "relaunching" in r.getMessage()]
        assert lost and "compute failed on epoch" in lost[0], lost
        assert p.store.retained() == 0, "no epoch is served from a computation that failed"
    finally:
        p.stop()
