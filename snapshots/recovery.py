"""Where a launch resumes: the newest valid checkpoint and the logged epochs after it.

S_e is a pure function of V_e, so a launch can always rebuild the history it
finds on disk: from the newest checkpoint whose files verify, re-cutting every
logged epoch after it with exactly its logged number, vector and watermark; or,
without a checkpoint, re-cutting every logged epoch from an empty graph (the
same history, and the same downstream ids); or, with no log, from nothing. The
log is compacted up to the oldest checkpoint kept (see ``EpochLog.compact``), so
a log that no longer starts at epoch 1 needs a checkpoint to resume from.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pulsegraph.snapshots.checkpoint import CheckpointStore, Manifest
from pulsegraph.snapshots.epoch import EpochLog, LogEntry
from pulsegraph.snapshots.exceptions import CheckpointError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecoveryPlan:
    """What the coordinator resumes from: the restored epoch (0: none) and the epochs to re-cut."""

    epoch: int
    vector: dict[str, int]
    valid: dict[str, int]  # valid records below the vector, per partition
    replay: tuple[LogEntry, ...]
    watermark: float | None = None  # the restored epoch's (W only grows: the next ones go on from it)
    late: int = 0  # late transactions up to the restored epoch; the re-cut epochs add theirs again
    # The epochs to re-cut that were ranked before (see EpochLog): the re-cut's hand-offs end at them.
    ranked: frozenset[int] = frozenset()

    @property
    def newest_vector(self) -> dict[str, int]:
        """The vector of the newest epoch the history holds (the last to re-cut, or the restored one)."""
        return self.replay[-1].vector if self.replay else self.vector

    def partitions(self) -> set[str]:
        return set(self.vector) | {p for e in self.replay for p in e.vector}


def plan_in_background(data_dir: Path, use_checkpoints: bool, shards: int | None) -> Future:
    """:func:`plan_recovery` on a thread of its own, for a start to overlap with Ray's (seconds): the newest
    checkpoint's files are read and checked meanwhile (gigabytes after a clean stop at tens of millions of
    edges). The future gives what plan_recovery returns or raises."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="recovery-plan")
    try:
        return pool.submit(plan_recovery, data_dir, use_checkpoints, shards)
    finally:
        pool.shutdown(wait=False)


def plan_recovery(data_dir: Path, use_checkpoints: bool, shards: int | None) -> tuple[Manifest | None, RecoveryPlan | None]:
    """The newest checkpoint of ``data_dir`` (when ``use_checkpoints``) and the plan that resumes from it.
    ``shards``: the shard count asked for, which a checkpoint must match (None: take the checkpoint's)."""
    data_dir = Path(data_dir)
    path = str(data_dir / "epochs.log")
    with EpochLog.no_writer(path):  # the previous generation's coordinator has exited: nothing appends or commits
        entries = EpochLog.read(path)
        ranked = frozenset(EpochLog.read_ranked(path))
        manifest = CheckpointStore(data_dir).latest() if use_checkpoints else None
    if manifest is not None:
        if shards and sorted(manifest.shards) != list(range(shards)):
            raise CheckpointError(
                f"the checkpoint {manifest.directory} has {len(manifest.shards)} shards, not --shards {shards}. "
                f"Operator action: run with --shards {len(manifest.shards)}, or move {data_dir} aside to start anew."
            )
        if entries and entries[0].epoch > manifest.epoch + 1:
            raise CheckpointError(
                f"the epoch log starts at epoch {entries[0].epoch}, after the checkpoint of epoch {manifest.epoch}: "
                f"the epochs between are lost. Operator action: restore {data_dir} from a backup, or move it aside to start anew."
            )
        replay = tuple(e for e in entries if e.epoch > manifest.epoch)
        log.info("resuming from the checkpoint of epoch %d (%d logged epochs to re-cut)", manifest.epoch, len(replay))
        watermark = next((e.watermark for e in entries if e.epoch == manifest.epoch), None)
        return manifest, RecoveryPlan(
            manifest.epoch, dict(manifest.vector), dict(manifest.valid), replay, watermark, manifest.late,
            ranked & {e.epoch for e in replay},
        )
    if entries and entries[0].epoch > 1:
        # The log was compacted: the epochs before its first entry live only in checkpoints.
        why = "no checkpoint verifies" if use_checkpoints else "checkpoints are off (--checkpoint-every 0)"
        raise CheckpointError(
            f"the epoch log of {data_dir} starts at epoch {entries[0].epoch} (the epochs before it were compacted "
            f"away, covered by checkpoints), and {why}. Operator action: run with checkpoints on, restore "
            f"{data_dir / 'checkpoints'} from a backup, or move {data_dir} aside to start anew."
        )
    if entries:
        log.info("no checkpoint: re-cutting the %d logged epochs from an empty graph", len(entries))
        return None, RecoveryPlan(0, {}, {}, tuple(entries), ranked=ranked & {e.epoch for e in entries})
    return None, None
