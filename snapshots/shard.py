"""The shard actor: a Ray actor around one :class:`~pulsegraph.snapshots.store.ShardStore`.

Ray runs one method at a time on it, in the order each caller submitted them,
so a batch an ingest actor saw acknowledged is buffered before any later
``apply`` from the coordinator.
"""

from __future__ import annotations

from pathlib import Path

import ray

from pulsegraph.base.runtime import HeapTrimmer, tune_gc
from pulsegraph.ingest.batch import ShardBatch
from pulsegraph.snapshots.checkpoint import CheckpointStore, load_verified
from pulsegraph.snapshots.exceptions import CheckpointError
from pulsegraph.snapshots.store import ShardStore


@ray.remote
class ShardActor:
    def __init__(
        self, *, shard: int, window: float | None = None, restore: tuple[str, str] | None = None, resend_all: bool = True,
        checked: bool = False,
    ) -> None:
        """``restore``: (path, sha256) of this shard's file in a checkpoint, read from storage every node sees.
        ``window``: the sliding window in seconds (None: the graph keeps everything). ``resend_all``: the first
        delta after a restore is the whole shard (False: the compute stage was read back whole at its epoch).
        ``checked``: the launch hashed the file just before (it is not hashed again)."""
        if restore is None:
            self._store = ShardStore(shard, window)
        else:
            self._store = ShardStore.restore(load_verified(Path(restore[0]), restore[1], rehash=not checked), resend_all)
            if self._store.shard != shard:
                raise CheckpointError(f"{restore[0]} holds shard {self._store.shard}, not shard {shard}")
            if self._store.window != window:
                raise CheckpointError(
                    f"{restore[0]} was written with window {self._store.window}, not {window}. Operator action: run "
                    f"with the window the data folder was made with, or move the data folder aside to start anew."
                )
        tune_gc()
        self._trimmer = HeapTrimmer()

    def checkpoint(self, epoch: int, data_dir: str) -> tuple[str, float]:
        """Write the state as of ``epoch`` (the last one applied); returns the file's sha256 and the
        seconds it took (the shard applies nothing meanwhile: the coordinator's budget reads them)."""
        store = self._store
        return CheckpointStore(data_dir).write_part(epoch, f"shard-{store.shard}.ckpt", store.epoch, store.state, f"shard {store.shard}")

    def receive(self, batch: ShardBatch) -> int:
        return self._store.receive(batch)

    @ray.method(num_returns=2)
    def apply(self, epoch: int, vector: dict[str, int], watermark: float | None = None):
        """Returns (summary, delta) as two objects so the coordinator can wait on the small one
        and hand the delta's reference straight to the compute actor."""
        out = self._store.apply(epoch, vector, watermark)
        self._trimmer.maybe_trim()
        return out

    def ping(self) -> int:
        """Liveness: the last epoch applied. Also hands back the heap's free pages while no epoch comes
        (ingest throttled): a trim after the last one may have been too soon to run."""
        self._trimmer.maybe_trim()
        return self._store.epoch

    def node_id(self) -> str:
        """The Ray node this shard runs on."""
        return ray.get_runtime_context().get_node_id()

    def snapshot(self) -> dict:
        return self._store.snapshot()

    def status(self) -> dict:
        return self._store.status()
