"""The shard actor: a Ray actor around one :class:`~snapshots.store.ShardStore`.

Ray runs one method at a time on it, in the order each caller submitted them,
so a batch an ingest actor saw acknowledged is buffered before any later
``apply`` from the coordinator.
"""

from __future__ import annotations

import ray

from ingest.batch import ShardBatch
from snapshots.store import ShardStore


@ray.remote
class ShardActor:
    def __init__(self, shard: int) -> None:
        self._store = ShardStore(shard)

    def receive(self, batch: ShardBatch) -> int:
        return self._store.receive(batch)

    @ray.method(num_returns=2)
    def apply(self, epoch: int, vector: dict[str, int]):
        """Returns (summary, delta) as two objects so the coordinator can wait on the small one
        and hand the delta's reference straight to the compute actor."""
        return self._store.apply(epoch, vector)

    def snapshot(self) -> dict:
        return self._store.snapshot()

    def status(self) -> dict:
        s = self._store
        return {
            "shard": s.shard,
            "epoch": s.epoch,
            "applied": dict(s.applied),
            "vertices": int(s.exists.view.sum()),
            "edges": len(s.edges),
            "live_edges": s.edges.live(),
            "edge_bytes": s.edges.nbytes,
        }
