"""The checkpoint budget: a stage spends at most its share of the time writing checkpoints.

Real shard and compute actors behind a real coordinator; epochs are cut by hand
(progress reported directly, as an ingest actor reports it), every epoch a
checkpoint epoch. The pause is measured from the actors' own write times, so a
budget small enough turns a ~10 ms checkpoint into a pause of seconds.
"""

from __future__ import annotations

import time

import ray

from pulsegraph.compute.actor import ComputeActor
from pulsegraph.snapshots.checkpoint import CheckpointStore
from pulsegraph.snapshots.coordinator import EpochCoordinator
from pulsegraph.snapshots.shard import ShardActor


def run(tmp_path, budget: float, epochs: int = 8) -> tuple[list[int], dict]:
    shards = [ShardActor.remote(i) for i in range(2)]
    compute = ComputeActor.remote(("mentions",))
    data = tmp_path / f"budget-{budget}"
    coord = EpochCoordinator.remote(
        shards, compute, str(data / "epochs.log"), None, str(data), 1, None, None, "WARNING", 0, budget, 0.0,
    )
    committed = []
    try:
        for e in range(1, epochs + 1):
            ray.get(coord.report_progress.remote({"p": (e, 1, None)}, time.time(), 1))
            assert ray.get(coord.cut.remote()).epoch == e
            ray.get(coord.flush.remote())  # the checkpoint (if any) is committed before the next cut
            latest = CheckpointStore(data).latest()
            committed.append(latest.epoch if latest else 0)
        status = ray.get(coord.status.remote())
    finally:
        ray.get(coord.stop.remote())
        for a in [coord, compute, *shards]:
            ray.kill(a)
    return committed, status


def test_a_small_budget_pauses_checkpoints_and_the_status_counts_the_epochs_passed_over(ray_cluster, tmp_path):
    every, status = run(tmp_path, budget=1.0)
    assert every == list(range(1, 9)), "without a pause every checkpoint epoch is checkpointed"
    assert status["checkpoint"]["paused"] == 0

    paused, status = run(tmp_path, budget=1e-6)
    # The first checkpoint took some milliseconds: at a millionth of the time, the next would wait for hours.
    assert paused == [1] * 8
    assert status["checkpoint"]["paused"] == 7 and status["checkpoint"]["seconds"] > 0
