"""Ranking with the vertices split over P partitions, none holding the whole graph or a whole-length vector.

Owns the partitioned form of the solve that :mod:`pulsegraph.compute.incremental` runs in one process,
``(I - alpha P^T) y = b`` with ``r = b + alpha P^T y - y`` kept, for PageRank and TunkRank alike.
Must not know about Ray, shards or the API: :class:`PartitionedEngine` drives the partitions through a
small port (:class:`PartitionPort`), which :class:`InProcessPartitions` implements with plain method
calls; a Ray version implements the same three calls with ``.remote`` (as
:class:`~pulsegraph.snapshots.coordinator.Coordinator` reaches its shards through ``Stages``).

* **Ownership.** A vertex's partition is ``owner(global id)``, a pure function given to the core
  (:class:`ModuloOwner`, :class:`BlockOwner`, or any picklable callable on id arrays); it must never
  change for a vertex. An edge belongs to its *source's* partition, so an epoch's change goes straight
  to one partition (the shards route by source already), and each partition knows the whole out-weight
  of its rows: ``P = D^-1 A`` needs no communication to be formed.
* **Local space.** :class:`RankPartition` numbers its ``k`` owned vertices ``0..k-1`` in global order,
  keeps room up to ``cap`` for more, and numbers each *remote destination* its rows reach a ghost,
  ``cap + j``. Its :class:`~pulsegraph.compute.resident.ResidentGraph` spans that space (ghost rows
  have no out-edges), so ``pull``/``push`` work unchanged, and the in-flow they produce at a ghost is
  exactly the contribution owed to the ghost's owner. ``y`` and ``b`` are held for the owned vertices
  only; ``r`` is the head of one array whose tail (the ghosts) is an outbox, zero between operations.
  When the owned vertices outgrow ``cap`` the ghosts are moved up (``ResidentGraph.open_gap``: one pass
  over the stored entries, with ``cap`` grown by :data:`CAPACITY_GROWTH`, a geometric number of times).
* **Ghosts come and go with the edges.** Each partition keeps its in-weight into every ghost (exact,
  fixed-point units in float64); a new remote destination becomes a ghost in the epoch its first edge
  arrives, and a ghost whose in-weight returns to zero (its last edge went) is dropped in that epoch:
  out of the send list, its number back on a free list for the next new ghost (the column's stored
  entries cancel to zero until the next compaction removes them).
* **What is exchanged.** Per sweep, partition ``q`` sends partition ``p`` only the in-flow at the ghosts
  ``p`` owns, as values in the order of a send list both sides keep (``q`` the ghost numbers, ``p`` its
  own local indices): no ids, no lookups, and exactly the boundary, the distinct remote destinations of
  ``q``'s rows in ``p``. The lists change by mirrored swap-removes and appends carried in the epoch's
  merge messages, so keeping them costs what the epoch changed. Pushes (retracting and reinstating an
  epoch's changed rows, frontier rounds, settling sources) send the ghosts they touched, ids and values.
* **Reductions.** Every scalar the solver decides on is a sum over the partitions of their blocks:
  ``||r||_1``, ``sum(y)``, ``sum(b)``, the Arnoldi dot products ``V^T w`` and norms (each partition
  holds its block of every basis vector; the Hessenberg matrix and its least-squares problem live in the
  driver), the push frontier's threshold (a histogram of the residual's binary exponents, summed) and
  its work. PageRank's dangling mass needs none: it only rescales ``y`` (see ``incremental``).
* **The same proven bound.** The stopping rule, its targets (:func:`~pulsegraph.compute.pagerank.pagerank_target`,
  :func:`~pulsegraph.compute.tunkrank.tunkrank_target`), the headroom and the Krylov check of the
  *true* residual are the single process's, applied to the reduced ``||r||_1`` and ``sum(y)``; and the
  reduced residual is the residual of the whole system, since the blocks partition the vertices and
  every edge's contribution reaches its destination's owner once. So ``||y* - y||_1 <= ||r||_1 / (1 -
  alpha)`` holds as before and each epoch publishes the same bound (:meth:`PartitionedEngine.error_bounds`).

Modules: ``base`` (ownership, the port, the messages), ``space`` (a partition's local numbering: owned
vertices, ghosts and the send/receive lists), ``partition`` (:class:`RankPartition`, the calls the port
reaches), ``solver`` (the driver's half of each ranking's solve), ``engine`` (:class:`PartitionedEngine`,
the in-process port, :func:`make_rank_engine`). P = 1 is not this package: :func:`make_rank_engine`
gives today's :class:`~pulsegraph.compute.engine.RankEngine`, untouched.
"""

from pulsegraph.compute.partitioned.base import BlockOwner, ModuloOwner, PartChanges, PartitionPort
from pulsegraph.compute.partitioned.engine import InProcessPartitions, PartitionedEngine, PartitionRun, make_rank_engine
from pulsegraph.compute.partitioned.partition import RankPartition

__all__ = [
    "BlockOwner", "InProcessPartitions", "ModuloOwner", "PartChanges", "PartitionPort", "PartitionRun",
    "PartitionedEngine", "RankPartition", "make_rank_engine",
]
