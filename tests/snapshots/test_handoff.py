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

import json
import threading
import time

import ray

from pulsegraph.compute.actor import ComputeActor
from pulsegraph.snapshots.checkpoint import CheckpointStore
from pulsegraph.snapshots.coordinator import EpochCoordinator
from pulsegraph.snapshots.epoch import EpochLog
from pulsegraph.snapshots.shard import ShardActor
from pulsegraph.snapshots.store import ShardStore
from tests.snapshots.streams import route


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



def test_the_queue_for_a_busy_consumer_is_full_at_its_bytes_bound_and_empty_once_merged(ray_cluster, tmp_path):
    """What is sealed and not merged yet is bounded by its deltas' bytes: status() says the queue is full
    (the supervisor then pauses ingest) once the batch in the consumer's hands and the epochs sealed
    meanwhile reach the bound, and it is empty again when the consumer is done with them."""
    shards = [ShardActor.remote(i) for i in range(2)]
    compute = GatedCompute.remote()
    data = tmp_path / "data"
    records = [(o, json.dumps([{"op": "add_edge", "src": f"u{o}", "dst": f"v{o % 7}", "type": "link"}]).encode())
               for o in range(40)]
    sizes: list[int] = []

    def cut(coord, e: int) -> dict:
        batch = records[(e - 1) * 5 : e * 5]
        ray.get([s.receive.remote(b) for s, b in zip(shards, route(2, "p", batch)) if len(b)])
        ray.get(coord.report_progress.remote({"p": (e * 5, 5, None)}, time.time(), 5))
        info = ray.get(coord.cut.remote())
        assert info.epoch == e and info.delta_bytes > 0
        sizes.append(info.delta_bytes)
        return ray.get(coord.queue_status.remote())

    # The bound: about two and a half epochs of five new edges each (the first epoch's deltas, made beside).
    stores = [ShardStore(i) for i in range(2)]
    for store, b in zip(stores, route(2, "p", records[:5])):
        if len(b):
            store.receive(b)
    bound = int(2.5 * sum(store.apply(1, {"p": 5}, None)[1].nbytes for store in stores))
    coord = EpochCoordinator.remote(shards, compute, str(data / "epochs.log"), None, str(data), 0, max_queued_bytes=bound)
    try:
        assert not cut(coord, 1)["full"]
        wait_for(lambda: ray.get(compute.batches.remote()) == [[1]], "epoch 1 was not handed over")
        busy = ray.get(coord.queue_status.remote())
        assert busy == {"epochs": 0, "bytes": 0, "handing_bytes": sizes[0], "limit_bytes": bound, "full": False}
        fills = [cut(coord, e) for e in (2, 3, 4)]  # sealed while the consumer is busy with epoch 1
        assert [q["epochs"] for q in fills] == [1, 2, 3]
        assert [q["bytes"] for q in fills] == [sum(sizes[1:k]) for k in (2, 3, 4)]
        # Full counts the batch in the consumer's hands too: epoch 1 and the queue together reach the bound.
        assert all(q["handing_bytes"] == sizes[0] for q in fills)
        assert [q["full"] for q in fills] == [q["bytes"] + sizes[0] >= bound for q in fills]
        assert fills[-1]["full"] and not fills[0]["full"]
        assert ray.get(coord.status.remote())["compute_queue"]["full"]
        compute.open.remote()
        ray.get(coord.flush.remote())
        assert ray.get(compute.batches.remote()) == [[1], [2, 3, 4]]
        after = ray.get(coord.queue_status.remote())
        assert after == {"epochs": 0, "bytes": 0, "handing_bytes": 0, "limit_bytes": bound, "full": False}
    finally:
        ray.get(coord.stop.remote())
        ray.get(compute.close.remote())
        for a in [coord, compute, *shards]:
            ray.kill(a)
