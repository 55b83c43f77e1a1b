"""Sources: where records come from. Each partition is a small contract (see :mod:`ingest.sources.base`)."""

from ingest.sources.base import RateLimiter, Record, SourcePartition, SourceSpec
from ingest.sources.registry import open_partitions

__all__ = ["RateLimiter", "Record", "SourcePartition", "SourceSpec", "open_partitions"]
