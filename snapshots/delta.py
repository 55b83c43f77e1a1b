"""The output type of the snapshot stage: what one shard changed in one epoch.

Values are absolute (the edge's multiplicity and weight sum after the epoch,
not the change), so applying a delta twice is harmless. Vertex and edge ids are
the shard's local ids; ``new_names`` introduces every local vertex id a delta
refers to before or in the delta that first uses it, and ``released`` ends an
introduction (the id is introduced again before it is used again).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pulsegraph.base.arrays import unique
from pulsegraph.ingest.events import WEIGHT_SCALE

_I32 = np.zeros(0, dtype=np.int32)


@dataclass
class EpochDelta:
    shard: int
    epoch: int
    types: list[str]
    new_ids: np.ndarray = field(default_factory=lambda: _I32)
    new_names: list[str] = field(default_factory=list)
    # The vertices whose attributes the epoch wrote (or, full, that have any), and of each what the compute
    # stage keeps: are there attributes (False: the write left the window) and their ``last_seen`` (0: none).
    # The attributes themselves stay on the shard (pulsegraph.snapshots.attrs.attr_columns).
    attr_ids: np.ndarray = field(default_factory=lambda: _I32)
    attr_set: np.ndarray = field(default_factory=lambda: np.zeros(0, np.bool_))
    attr_seen: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float64))
    e_slot: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    e_src: np.ndarray = field(default_factory=lambda: _I32)
    e_dst: np.ndarray = field(default_factory=lambda: _I32)
    e_type: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int16))
    e_mult: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    e_weight: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    e_first_ts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float64))
    # True when the delta holds the shard's whole state (the first epoch after a restore).
    full: bool = False
    # With a window: the epoch's watermark W_e, as the shard applied it (the compute stage's id reuse
    # delay is counted on it).
    watermark: float | None = None
    # With a window: local ids whose vertex the window emptied (no held edge slot, no attributes), from
    # the applied state only. They name no vertex of this shard from now on: a later update introduces
    # the vertex again by name. The compute stage counts, per global id, the shards still holding it.
    released: np.ndarray = field(default_factory=lambda: _I32)

    @property
    def nbytes(self) -> int:
        """About what the delta takes in Ray's object store: its arrays and names."""
        arrays = (self.new_ids, self.attr_ids, self.attr_set, self.attr_seen, self.e_slot, self.e_src, self.e_dst,
                  self.e_type, self.e_mult, self.e_weight, self.e_first_ts, self.released)
        return sum(a.nbytes for a in arrays) + sum(map(len, self.new_names))


@dataclass(frozen=True)
class ShardSummary:
    """What the coordinator learns from a shard's apply: small, so it never carries the delta."""

    shard: int
    epoch: int
    transactions: int
    updates: int
    live_edges: int
    buffered: int
    # With a window: per partition, the offsets of this epoch's transactions that arrived with their
    # time already outside it (the coordinator counts them once across shards).
    late: dict[str, np.ndarray] = field(default_factory=dict)
    # The delta's size (EpochDelta.nbytes): what the epoch adds to the queue for the compute stage.
    delta_bytes: int = 0


def late_transactions(summaries: list[ShardSummary]) -> int:
    """The epoch's late transactions, each once, though its updates may sit on several shards."""
    by_part: dict[str, list[np.ndarray]] = {}
    for s in summaries:
        for p, offsets in s.late.items():
            by_part.setdefault(p, []).append(offsets)
    return sum(len(unique(np.concatenate(o))) for o in by_part.values())


def weight_of(fixed: np.ndarray | int):
    """Fixed-point weight sums back to floats."""
    return np.asarray(fixed, dtype=np.float64) / WEIGHT_SCALE
