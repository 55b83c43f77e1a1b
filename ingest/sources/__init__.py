"""Sources: where records come from. Each partition is a small contract (see :mod:`pulsegraph.ingest.sources.base`)."""

from pulsegraph.ingest.sources.base import (
    RateLimiter,
    Record,
    SourcePartition,
    SourceSpec,
)
from pulsegraph.ingest.sources.registry import open_partitions

__all__ = ["RateLimiter", "Record", "SourcePartition", "SourceSpec", "open_partitions"]
