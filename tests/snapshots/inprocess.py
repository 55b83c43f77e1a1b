"""The coordinator's stages in this process: real shard stores and a real compute stage, called directly.

What :class:`~pulsegraph.snapshots.coordinator_actor.ActorStages` does over Ray,
done in the test's process, so the coordinator's logic is unit-tested without
an actor. ``gate``: when given, every hand-off waits until the test sets it, so
the consumer is busy for exactly as long as the test says.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from pulsegraph.compute.stage import ComputeStage, SealedEpoch, StageConfig, fingerprint
from pulsegraph.snapshots.checkpoint import CheckpointStore
from pulsegraph.snapshots.coordinator import Pending
from pulsegraph.snapshots.epoch import EpochInfo
from pulsegraph.snapshots.store import ShardStore, ShardSummary


class InProcessStages:
    def __init__(
        self, stores: list[ShardStore], stage: ComputeStage | None, gate: threading.Event | None = None,
        config: StageConfig | None = None,
    ) -> None:
        """``config``: what ``stage`` was made with, which a stage written whole is fingerprinted by."""
        self.stores = stores
        self.stage = stage
        self.config = config or StageConfig()
        self.gate = gate
        self.batches: list[list[int]] = []  # the epochs of each hand-off, as the consumer got them
        self.results: list = []  # the consumer's result of each hand-off
        self.full_deltas = 0  # deltas that named a shard's whole state (the first after a restore, unless told not to)

    @property
    def has_consumer(self) -> bool:
        return self.stage is not None

    def apply(self, epoch: int, vector: dict[str, int], watermark: float | None) -> tuple[list[ShardSummary], list]:
        pairs = [store.apply(epoch, vector, watermark) for store in self.stores]
        self.full_deltas += sum(delta.full for _, delta in pairs)
        return [summary for summary, _ in pairs], [delta for _, delta in pairs]

    def checkpoint_shards(self, epoch: int, data_dir: str) -> Pending:
        files = CheckpointStore(data_dir)
        written = [files.write_part(epoch, f"shard-{s.shard}.ckpt", s.epoch, s.state, f"shard {s.shard}") for s in self.stores]
        return lambda: written

    def consume(self, infos: list[EpochInfo], deltas: Sequence) -> dict:
        assert self.stage is not None
        self.batches.append([info.epoch for info in infos])
        if self.gate is not None:
            assert self.gate.wait(60), "the test never opened the gate"
        result = self.stage.apply(SealedEpoch.split(infos, deltas))
        self.results.append(result)
        return {"epoch": result.epoch}

    def checkpoint_consumer(self, epoch: int, data_dir: str, whole: bool = False) -> Pending:
        assert self.stage is not None
        written = self.stage.write_checkpoint(epoch, data_dir, fingerprint(self.config) if whole else None)
        return lambda: written
