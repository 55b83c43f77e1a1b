"""What one hand-off gives the consumer: everything sealed while it was busy, up to the newest epoch.

Real shard actors and a real compute actor behind a real coordinator; epochs are
cut by hand. The compute actor sits behind a gate the test opens, so the
consumer is busy for exactly as long as the test says and the epochs sealed
meanwhile queue up. A checkpoint that comes due lands on the newest of them:
checkpoints at the fixed multiples of ``--checkpoint-every`` ended hand-offs in
the middle of the queue, and the epochs after the multiple waited one more
computation before they were ranked.
"""

from __future__ import annotations

import threading
import time

import ray

from pulsegraph.compute.actor import ComputeActor
from pulsegraph.snapshots.checkpoint import CheckpointStore
from pulsegraph.snapshots.coordinator import EpochCoordinator
from pulsegraph.snapshots.epoch import EpochLog
from pulsegraph.snapshots.shard import ShardActor


@ray.remote(max_concurrency=4)
class GatedCompute:
    """The real compute actor, reached through a gate: each batch handed over is recorded, and waits
    until the test opens the gate."""

    def __init__(self) -> None:
        self._compute = ComputeActor.remote(("mentions",))
        self._open = threading.Event()
        self._batches: list[list[int]] = []

    def apply_epochs(self, infos, *deltas) -> dict:
        self._batches.append([i.epoch for i in infos])
        self._open.wait(60)
        return ray.get(self._compute.apply_epochs.remote(infos, *deltas))

    def checkpoint(self, epoch: int, data_dir: str):
        return ray.get(self._compute.checkpoint.remote(epoch, data_dir))

    def open(self) -> None:
        self._open.set()

    def batches(self) -> list[list[int]]:
        return list(self._batches)

    def close(self) -> None:
        ray.kill(self._compute)


def wait_for(predicate, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_a_busy_consumer_gets_every_epoch_sealed_meanwhile_in_one_hand_off_ending_at_a_due_checkpoint(ray_cluster, tmp_path):
    shards = [ShardActor.remote(i) for i in range(2)]
    compute = GatedCompute.remote()
    data = tmp_path / "data"
    coord = EpochCoordinator.remote(shards, compute, str(data / "epochs.log"), None, str(data), 3)

    def cut(e: int) -> None:
        ray.get(coord.report_progress.remote({"p": (e, 1, None)}, time.time(), 1))
        assert ray.get(coord.cut.remote()).epoch == e

    try:
        cut(1)
        wait_for(lambda: ray.get(compute.batches.remote()) == [[1]], "epoch 1 was not handed over")
        for e in range(2, 9):
            cut(e)  # sealed while the consumer is busy with epoch 1
        compute.open.remote()
        ray.get(coord.flush.remote())
        # One hand-off for all seven, not [2, 3], [4, 5, 6], [7, 8] at the multiples of 3.
        assert ray.get(compute.batches.remote()) == [[1], [2, 3, 4, 5, 6, 7, 8]]
        assert CheckpointStore(data).latest().epoch == 8, "the due checkpoint lands on the newest epoch"

        for e in range(9, 13):
            cut(e)
            ray.get(coord.flush.remote())  # an idle consumer: one epoch a hand-off
        assert ray.get(compute.batches.remote())[2:] == [[9], [10], [11], [12]]
        # Three epochs after the last checkpoint a new one is due: it lands on 11, not on the multiple 12.
        assert CheckpointStore(data).latest().epoch == 11
        # Each hand-off's last epoch (the mark of epoch 1 went with the log's compaction: the oldest
        # checkpoint kept is 8).
        assert EpochLog.read_ranked(str(data / "epochs.log")) == [8, 9, 10, 11, 12]
        status = ray.get(coord.status.remote())
        assert status["ranked"] == 12 and status["queued"] == 0
    finally:
        ray.get(coord.stop.remote())
        ray.get(compute.close.remote())
        for a in [coord, compute, *shards]:
            ray.kill(a)
