"""The coordinator's settings and the port it reaches its stages through: :class:`CoordinatorConfig`,
:class:`Stages` (shards and consumer; Ray actors in :mod:`~pulsegraph.snapshots.coordinator_actor`, plain
objects in the tests) and the bounds :class:`~pulsegraph.snapshots.coordinator.Coordinator` keeps.
Must not cut, hand off or checkpoint anything: that is the coordinator's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pulsegraph.snapshots.delta import ShardSummary
from pulsegraph.snapshots.epoch import EpochInfo

# Sealed epochs waiting for the consumer: beyond this the cut waits, so a consumer that stalls
# makes epochs larger instead of queueing delta references without bound (a backstop for a
# coordinator run without the supervisor's backpressure, which pauses ingest at max_queued_bytes).
MAX_QUEUED = 64
# Epochs kept for status(): a few minutes at the default interval.
RECENT = 256
# Checkpoints quicker than this never pause the next ones: a small graph keeps one every
# --checkpoint-every epochs, as before the budget.
CHECKPOINT_PAUSE_FROM_S = 0.25
# How often an idle hand-off thread looks whether a checkpoint the pause passed over may be written now.
IDLE_CHECKPOINT_POLL_S = 1.0
# stop() waits this long for the hand-off in flight (its checkpoint, if it ends at one, is then
# committed); the wiring's own wait on stop() is longer.
STOP_WAIT_S = 30.0


@dataclass(frozen=True, kw_only=True)
class CoordinatorConfig:
    """How the coordinator cuts, checkpoints and bounds what waits for the consumer.

    ``interval_s``: seconds between cuts (None: only :meth:`Coordinator.cut` called by hand cuts).
    ``checkpoint_every``: a checkpoint once this many epochs were sealed since the last (0: none; needs
    ``data_dir``). ``window``: the sliding window in seconds (None: the graph keeps everything).
    ``log_keep``: the newest epochs the log keeps even once a checkpoint covers them (it is compacted
    after each checkpoint). ``checkpoint_budget``: the share of its time a stage may spend writing
    checkpoints (1: no pause); checkpoints quicker than ``checkpoint_pause_from_s`` never pause.
    ``checkpoint_whole_every``: every this many checkpoints has the consumer written whole, as a clean stop's
    has (0: only a stop's).
    ``max_queued_bytes``: the deltas of the sealed epochs not merged yet (queued or in the consumer's
    hands) at which the queue is full (None or 0: only :data:`MAX_QUEUED` epochs bound it).
    ``max_result_lag``: seconds of seal time the newest ranked epoch may fall behind the newest sealed
    one before :meth:`Coordinator.status` says the lag is over its bound (None: no bound, only reported).
    ``clock``: the monotonic clock the checkpoint pause is timed by."""

    log_path: str
    interval_s: float | None = None
    data_dir: str | None = None
    checkpoint_every: int = 0
    window: float | None = None
    log_keep: int = 0
    checkpoint_budget: float = 1.0
    checkpoint_pause_from_s: float = CHECKPOINT_PAUSE_FROM_S
    checkpoint_whole_every: int = 0
    max_queued_bytes: int | None = None
    max_result_lag: float | None = None
    clock: Callable[[], float] = time.monotonic


# A call made: calling it waits for its answer (a Ray future's ray.get, or a value computed already).
Pending = Callable[[], Any]


class Stages(Protocol):
    """The shards and the consumer, as the coordinator calls them (each shard applies after every batch
    delivered to it before the call; the consumer gets sealed epochs in order, several where it was busy)."""

    @property
    def has_consumer(self) -> bool: ...

    def apply(self, epoch: int, vector: dict[str, int], watermark: float | None) -> tuple[list[ShardSummary], list]:
        """Every shard applies through ``vector``; their summaries, and their deltas as the consumer takes them."""

    def checkpoint_shards(self, epoch: int, data_dir: str) -> Pending:
        """Every shard starts writing its part as of ``epoch``; waiting gives each one's (sha256, seconds stalled)."""

    def consume(self, infos: list[EpochInfo], deltas: Sequence) -> dict:
        """The consumer merges ``infos`` (``deltas``: theirs, epoch by epoch), ranks the newest, and answers."""

    def checkpoint_consumer(self, epoch: int, data_dir: str, whole: bool = False) -> Pending:
        """The consumer starts writing its part as of ``epoch``, the last it merged (``whole``: its whole state,
        where it can); waiting gives its :class:`~pulsegraph.snapshots.checkpoint.WrittenPart`."""
