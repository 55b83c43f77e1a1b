"""Errors of the snapshot stage: shards, epochs and the epoch log."""

from pulsegraph.base.errors import PulsegraphError


class SnapshotError(PulsegraphError):
    """A snapshot-stage failure."""


class EpochOrderError(SnapshotError):
    """An epoch number or vector that does not grow."""


class EpochStateError(SnapshotError):
    """An epoch transition attempted from the wrong state."""


class ShardCapacityError(SnapshotError):
    """A shard's packed edge keys ran out of bits (too many vertices or edge types on one shard)."""


class EpochLogError(SnapshotError):
    """The epoch log cannot be read or written."""


class CheckpointError(SnapshotError):
    """A checkpoint cannot be written or restored."""


class CorruptCheckpoint(CheckpointError):
    """A checkpoint file is truncated or fails its checksum."""
