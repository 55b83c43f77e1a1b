"""The contracts of the partitioned ranking: who owns a vertex, what a partition is given and sends,
and the port through which the driver reaches the partitions.

Owns no state. Must not know about Ray: a Ray port implements :class:`PartitionPort` elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

# A vertex's partition from its global id: a pure function of the id (never changing for a vertex),
# picklable so that every partition and the driver can hold a copy.
Owner = Callable[[np.ndarray], np.ndarray]


class ModuloOwner:
    """``owner(v) = v % parts``: spreads ids evenly, with no regard to locality."""

    def __init__(self, parts: int) -> None:
        self.parts = parts

    def __call__(self, ids) -> np.ndarray:
        return np.asarray(ids, dtype=np.int64) % self.parts

    def __repr__(self) -> str:
        return f"ModuloOwner({self.parts})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ModuloOwner) and other.parts == self.parts

    def __hash__(self) -> int:
        return hash(("ModuloOwner", self.parts))


class BlockOwner:
    """``owner(v) = (v // block) % parts``: runs of ``block`` consecutive ids stay together, so a graph
    whose ids follow its communities keeps most edges inside a partition."""

    def __init__(self, parts: int, block: int) -> None:
        self.parts = parts
        self.block = block

    def __call__(self, ids) -> np.ndarray:
        return (np.asarray(ids, dtype=np.int64) // self.block) % self.parts

    def __repr__(self) -> str:
        return f"BlockOwner({self.parts}, {self.block})"


@dataclass
class PartChanges:
    """What one partition is given for an epoch, all of it its own: the changed pairs whose source it owns
    (``A[src, dst] += dweight``, global ids, fixed-point units), and in window mode the presence of its new
    vertices (in id order) and of its older vertices whose presence flipped."""

    src: np.ndarray
    dst: np.ndarray
    dweight: np.ndarray
    new_present: np.ndarray | None = None
    flip_ids: np.ndarray | None = None
    flip_present: np.ndarray | None = None


# A push's message to one partition: the global ids of the ghosts it owns that the push touched, and
# the residual owed at each.
Sparse = tuple[np.ndarray, Any]


@dataclass
class Absorbed:
    """A partition's merge message to one other partition: its send list's changes (positions removed,
    in swap-remove order; global ids appended) and, per ranking, the residual owed at touched ghosts."""

    removed: np.ndarray
    added: np.ndarray
    residual: dict[str, Sparse]


def swap_remove(arr: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``arr`` without the entries at ``positions`` (sorted, distinct), the last survivors moved into the
    holes below the new length, in order: the same on both sides of a send list, in time that follows
    the positions. Returns the new array and the holes filled."""
    m, d = len(arr), len(positions)
    if d == 0:
        return arr, np.zeros(0, np.int64)
    t = m - d
    holes = positions[positions < t]
    tail = np.arange(t, m, dtype=np.int64)
    movers = tail[~np.isin(tail, positions)]
    out = arr[:t].copy()
    out[holes] = arr[movers]
    return out, holes


class PartitionPort(Protocol):
    """The partitions as the driver calls them: each call reaches every partition once (a round), names
    one of :data:`~pulsegraph.compute.partitioned.partition.RankPartition.OPS`, and gets small answers
    (scalars, short vectors) back in partition order."""

    @property
    def parts(self) -> int: ...

    def each(self, op: str, *args: Any) -> list[Any]:
        """Every partition runs ``op(*args)``."""

    def each_own(self, op: str, args: Sequence[tuple]) -> list[Any]:
        """Partition ``q`` runs ``op(*args[q])``: its own share (an epoch's changes)."""

    def exchange(self, send: str, receive: str, *args: Any) -> list[Any]:
        """Every partition runs ``send(*args)``, which gives one message per partition (None: nothing for
        it); then each runs ``receive(the messages addressed to it, in sender order, *args)``; the
        receivers' answers. Messages go from partition to partition (a Ray port hands one call's object
        refs to the next), never through the driver."""

    def write(self, epoch: int, data_dir: str) -> tuple[tuple[str, str], ...]:
        """Partitions held elsewhere write their rows into epoch ``epoch``'s checkpoint folder, each its own
        file, and the port pickles as those files from then on; (file name, sha256) each. Partitions in the
        driver's process write nothing: they are pickled with it."""

    def reopen(self, folder: Path | None, started: Any = None) -> None:
        """After this port was read back from a checkpoint: its partitions again, each from its file in
        ``folder`` (nothing to do for partitions pickled with the driver). ``started``: a port of the same
        kind whose partitions were started from those files already, while the driver was read back."""
