"""The epoch coordinator actor: Ray's wrapper around :class:`~pulsegraph.snapshots.coordinator.Coordinator`.

It adds only how the stages are reached: shard and compute actors, called with
``.remote`` and waited on with ``ray.get``. The shards' deltas stay object
references from the shard that made them to the compute actor; the coordinator
never opens one.
"""

from __future__ import annotations

from collections.abc import Sequence

import ray

from pulsegraph.base.runtime import configure_logging
from pulsegraph.snapshots.coordinator import Coordinator, CoordinatorConfig, Pending
from pulsegraph.snapshots.epoch import EpochInfo
from pulsegraph.snapshots.recovery import RecoveryPlan
from pulsegraph.snapshots.store import ShardSummary


class ActorStages:
    """:class:`~pulsegraph.snapshots.coordinator.Stages` over shard actors and a compute actor (or none)."""

    def __init__(self, shards: list, consumer) -> None:
        self._shards = shards
        self._consumer = consumer

    @property
    def has_consumer(self) -> bool:
        return self._consumer is not None

    def apply(self, epoch: int, vector: dict[str, int], watermark: float | None) -> tuple[list[ShardSummary], list]:
        # Two returns per shard: the coordinator waits on the small summary, and hands the delta's
        # reference on unopened.
        pairs = [s.apply.remote(epoch, vector, watermark) for s in self._shards]
        return ray.get([summary for summary, _ in pairs]), [delta for _, delta in pairs]

    def checkpoint_shards(self, epoch: int, data_dir: str) -> Pending:
        refs = [s.checkpoint.remote(epoch, data_dir) for s in self._shards]
        return lambda: ray.get(refs)

    def consume(self, infos: list[EpochInfo], deltas: Sequence) -> dict:
        return ray.get(self._consumer.apply_epochs.remote(infos, *deltas))

    def checkpoint_consumer(self, epoch: int, data_dir: str, whole: bool = False) -> Pending:
        ref = self._consumer.checkpoint.remote(epoch, data_dir, whole)
        return lambda: ray.get(ref)


@ray.remote
class EpochCoordinator(Coordinator):
    """The coordinator as an actor: ingest actors report progress to it, the wiring polls its status."""

    def __init__(
        self, *, shards: list, consumer, config: CoordinatorConfig, resume: RecoveryPlan | None = None,
        log_level: str = "INFO",
    ) -> None:
        """``consumer``: the compute actor (None: epochs are sealed and checkpointed, never ranked)."""
        configure_logging(log_level)
        super().__init__(ActorStages(shards, consumer), config, resume)
