""":class:`RankPartition`: one compute partition's rows, ghosts and vectors, and the calls the port reaches.

Holds a :class:`~pulsegraph.compute.resident.ResidentGraph` over its local space
(:mod:`~pulsegraph.compute.partitioned.space`: owned vertices, then ghosts with no out-edges), so that
``pull`` and ``push`` are the single process's, and a :class:`~pulsegraph.compute.partitioned.block.RankBlock`
per ranking. Must not reduce anything or decide anything: it answers the driver's calls with its block's
share and sends its ghosts' values to their owners. Beside them it holds the merge view's slots of the
shards given to it (:class:`~pulsegraph.compute.slots.PartitionSlots`), which the stage's merge writes
and reads through the same port.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pulsegraph.base.arrays import unique
from pulsegraph.compute.backend import Backend, get_backend
from pulsegraph.compute.engine import RankConfig
from pulsegraph.compute.partitioned.base import Absorbed, Owner, PartChanges, Sparse
from pulsegraph.compute.partitioned.block import RankBlock
from pulsegraph.compute.partitioned.space import LocalSpace
from pulsegraph.compute.resident import ResidentGraph
from pulsegraph.compute.slots import EdgeSlots, Merged, SlotWrites, ShardSlots


class RankPartition:
    """The methods named in :data:`OPS` are the partition's side of the port: a ``*_send`` returns one
    message per partition (None where it has nothing for it, and for itself), the matching receive takes
    the messages addressed to it, in sender order."""

    OPS = frozenset({
        "prepare", "absorb_send", "absorb_receive", "sweep_send", "sweep_receive", "settle_send",
        "sparse_receive", "push_stats", "push_send", "push_receive", "residual", "zero", "scratch_init",
        "krylov_begin", "krylov_extend", "krylov_orth", "krylov_dots", "krylov_end", "take_counters",
        "blocks", "boundary", "nbytes", "local_size", "backend_name", "merge_slots", "slot_columns", "adopt_slots",
    })

    def __init__(
        self, index: int, parts: int, owner: Owner, config: RankConfig, backend: Backend | None = None,
        compact_min: int | None = None,
    ) -> None:
        self.q = index
        self.be = backend or get_backend(config.device)  # type: ignore[arg-type]
        self.dtype = np.dtype(config.dtype)
        kw = {} if compact_min is None else {"compact_min": compact_min}
        self.graph = ResidentGraph(self.be, self.dtype, config.compact_fraction, **kw)
        self.space = LocalSpace(index, parts, owner, self.graph)
        self.rankings = {
            "pagerank": RankBlock(config.damping, self.be, self.dtype),
            "tunkrank": RankBlock(config.tunkrank_p, self.be, self.dtype),
        }
        self._pending: dict[str, Any] | None = None
        self._flow: Any = None
        # The merge view's slots of the shards given to this partition (compute.slots.PartitionSlots: not
        # the owner of their vertices, which is by global id; a shard's slots are one holder's).
        self.slots = EdgeSlots()

    def __setstate__(self, state: dict) -> None:
        # A partition pickled before it held slots: its stage's graph kept them (and still does).
        self.__dict__.update({"slots": EdgeSlots(), **state})

    @property
    def k(self) -> int:
        return self.space.k

    def _fit(self) -> None:
        for blk in self.rankings.values():
            blk.fit(self.graph.n)

    def _stored(self) -> int:
        return self.graph.nnz + self.graph.overlay_nnz

    # -- an epoch -----------------------------------------------------------------------------------

    def prepare(self, n: int, ch: PartChanges) -> tuple[int, int]:
        """Take the epoch's own changes: room for new vertices, ghosts for new remote destinations.
        Answers (distinct pairs changed, stored entries before the change) for the driver's choice."""
        src = np.asarray(ch.src, dtype=np.int64)
        dst = np.asarray(ch.dst, dtype=np.int64)
        if len(src) and (int(src.max()) >= n or int(dst.max()) >= n):
            raise ValueError("edge refers to a vertex beyond n")
        self.space.grow_owned(n)
        ls, ld, gj, new_j = self.space.to_local(src, dst)
        self._fit()
        dw = np.asarray(ch.dweight, dtype=np.float64)
        remote = ld >= self.space.cap
        flips = np.zeros(0, np.int64) if ch.flip_ids is None else self.space.local(np.asarray(ch.flip_ids, np.int64))
        self._pending = {
            "ls": ls, "ld": ld, "dw": dw, "rows": unique(ls), "gj": gj, "gw": dw[remote], "new_j": new_j,
            "new_present": ch.new_present, "flips": flips, "flip_present": ch.flip_present,
        }
        return (len(unique((ls << 32) | ld)) if len(ls) else 0), self._stored()

    def absorb_send(self, method: str) -> list[Absorbed | None]:
        """As :meth:`RankEngine.update` between choosing and solving: retract the changed rows (``push``)
        or forget the residual (a sweep recomputes it), merge the changes, reinstate the rows. The
        ghosts' share of the pushes, and the send lists' changes, go to the ghosts' owners."""
        p, self._pending = self._pending, None
        assert p is not None, "absorb_send before prepare"
        rows = self.be.asarray(p["rows"])
        for blk in self.rankings.values():
            if p["new_present"] is not None:
                old = blk.k
                blk.grow(self.k, np.asarray(p["new_present"], dtype=bool))
                moved = p["flips"] < old
                blk.set_rhs(p["flips"][moved], np.asarray(p["flip_present"], dtype=bool)[moved])
            else:
                blk.grow(self.k)
            if method == "push":
                self._push_rows(blk, rows, -1.0)
            else:
                blk.stale = True
        self.graph.apply(p["ls"], p["ld"], p["dw"])
        if len(p["gj"]):
            np.add.at(self.space.ghost_in, p["gj"], p["gw"])
        residual = {}
        for name, blk in self.rankings.items():
            self._push_rows(blk, rows, 1.0)
            residual[name] = self._outbox(blk)
        removed, added = self.space.update_boundary(unique(p["gj"]), p["new_j"])
        out: list[Absorbed | None] = []
        for dest in range(self.space.parts):
            owed: dict[str, Sparse] = {}
            for name, msgs in residual.items():
                m = msgs[dest]
                if m is not None:
                    owed[name] = m
            quiet = not len(removed[dest]) and not len(added[dest]) and not owed
            out.append(None if dest == self.q or quiet else Absorbed(removed[dest], added[dest], owed))
        return out

    def absorb_receive(self, msgs: Sequence[Absorbed | None], method: str) -> dict[str, Any]:
        """Mirror the senders' list changes, add the residual they owe; answer what the driver reduces."""
        for src, m in enumerate(msgs):
            if m is None:
                continue
            self.space.mirror(src, m.removed, m.added)
            for name, owed in m.residual.items():
                blk = self.rankings[name]
                if not blk.stale:
                    self.space.receive_sparse(blk.ext, [owed])
        return {
            "stored": self._stored(),
            "boundary": sum(self.space.boundary()),
            "recompute": {n: b.stale or b.compactions != self.graph.compactions for n, b in self.rankings.items()},
            "bsum": {n: b.bcount() for n, b in self.rankings.items()},
            "window": {n: b.b is not None for n, b in self.rankings.items()},
        }

    def _push_rows(self, blk: RankBlock, rows, sign: float) -> None:
        if len(rows) == 0 or blk.stale:
            return
        coef = (sign * blk.alpha) * blk.y[rows] * self.graph.inv_out[rows]
        blk.read += self.graph.push(rows, coef, blk.ext)

    def _outbox(self, blk: RankBlock) -> list[Sparse | None]:
        msgs, count = self.space.outbox(blk.ext)
        blk.sparse += count
        return msgs

    # -- sweeps -------------------------------------------------------------------------------------

    def sweep_send(self, name: str, what: str, j: int, settle: bool) -> list[Any]:
        """One sweep's product from this partition's rows: ``what`` is "y" (the residual from scratch),
        "r" (a Jacobi sweep: ``y += r``, then the next ``r``) or "basis" (GMRES's ``M v_j``). The in-flow
        at the ghosts goes to their owners."""
        blk = self.rankings[name]
        g = self.graph
        v = self.be.xp.zeros(g.n, dtype=self.dtype)
        if what == "y":
            v[: self.k] = g.inv_out[: self.k] * blk.y
        elif what == "r":
            v[: self.k] = g.inv_out[: self.k] * blk.r
            blk.y += blk.r
        elif what == "basis":
            v[: self.k] = (blk.alpha * g.inv_out[: self.k]) * blk.basis[j]
        else:
            raise ValueError(f"unknown sweep {what!r}")
        self._flow = g.pull(v)
        msgs, count = self.space.dense(self._flow)
        blk.dense += count
        blk.read += self._stored()
        return msgs

    def sweep_receive(self, msgs: Sequence[Any], name: str, what: str, j: int, settle: bool):
        """Add the in-flow the others sent and finish the sweep. Answers ``(||r||_1, sum y)`` for "r", with
        the number of sources to settle for "y", and this block of ``V^T w`` for "basis"."""
        blk = self.rankings[name]
        flow, self._flow = self._flow[: self.k], None
        self.space.receive_dense(flow, msgs)
        if what == "basis":
            blk.w = flow
            return blk.krylov_dots(j)
        if what == "r":
            blk.ext[: self.k] = blk.alpha * flow
            return blk.l1_and_sum()
        blk.ext[: self.k] = blk.rhs() + blk.alpha * flow - blk.y
        blk.stale = False
        blk.compactions = self.graph.compactions
        blk.settle = None
        if settle:
            blk.settle = self.be.xp.nonzero((flow == 0) & (blk.r != 0))[0]
        return (*blk.l1_and_sum(), 0 if blk.settle is None else len(blk.settle))

    def settle_send(self, name: str) -> list[Sparse | None]:
        """Push the residual of the vertices with no in-flow, as ``recompute_residual(settle_sources)`` does:
        a vertex nobody links to is then exactly at ``y = b``."""
        blk = self.rankings[name]
        rows, blk.settle = blk.settle, None
        if rows is not None and len(rows):
            delta = blk.r[rows]
            blk.y[rows] += delta
            blk.r[rows] = 0.0
            blk.read += self.graph.push(rows, blk.alpha * delta * self.graph.inv_out[rows], blk.ext)
        return self._outbox(blk)

    def sparse_receive(self, msgs: Sequence[Sparse | None], name: str, *rest: Any) -> tuple[float, float]:
        blk = self.rankings[name]
        self.space.receive_sparse(blk.ext, msgs)
        return blk.l1_and_sum()

    def residual(self, name: str) -> tuple[float, float]:
        return self.rankings[name].l1_and_sum()

    def zero(self, name: str) -> None:
        blk = self.rankings[name]
        blk.y[:] = 0.0
        blk.ext[:] = 0.0

    def scratch_init(self, name: str) -> None:
        """``y = b`` (ones outside window mode); the residual follows from one sweep."""
        blk = self.rankings[name]
        blk.grow(self.k)
        blk.y = self.be.xp.ones(self.k, dtype=self.dtype) if blk.b is None else blk.b.copy()
        blk.ext[:] = 0.0
        blk.stale = False

    # -- the frontier -------------------------------------------------------------------------------

    def push_stats(self, name: str):
        return self.rankings[name].histogram(self.graph.out_degree)

    def push_send(self, name: str, theta: float) -> list[Sparse | None]:
        """One frontier round: the vertices with ``|r| >= theta`` move their residual into ``y`` and onto
        their out-neighbours; the ghosts' share goes to their owners."""
        blk = self.rankings[name]
        xp = self.be.xp
        frontier = xp.nonzero(xp.abs(blk.r) >= theta)[0]
        delta = blk.r[frontier]
        blk.y[frontier] += delta
        blk.r[frontier] = 0.0
        blk.read += self.graph.push(frontier, blk.alpha * delta * self.graph.inv_out[frontier], blk.ext)
        blk.read += len(frontier)
        return self._outbox(blk)

    def push_receive(self, msgs: Sequence[Sparse | None], name: str, theta: float):
        self.space.receive_sparse(self.rankings[name].ext, msgs)
        return self.push_stats(name)

    # -- GMRES: the blocks do the arithmetic ----------------------------------------------------------

    def krylov_begin(self, name: str, m: int) -> tuple[float, float]:
        return self.rankings[name].krylov_begin(m)

    def krylov_extend(self, name: str, j: int, hn: float, left) -> tuple[float, float | None]:
        return self.rankings[name].krylov_extend(j, hn, left)

    def krylov_orth(self, name: str, j: int, c) -> float:
        return self.rankings[name].krylov_orth(j, c)

    def krylov_dots(self, name: str, j: int) -> np.ndarray:
        return self.rankings[name].krylov_dots(j)

    def krylov_end(self, name: str, k: int, z, rcoef) -> None:
        self.rankings[name].krylov_end(k, z, rcoef)

    # -- the merge view's slots ---------------------------------------------------------------------

    def merge_slots(self, epochs: list[list[SlotWrites]]) -> Merged:
        """:meth:`EdgeSlots.merge` on this partition's shards."""
        return self.slots.merge(epochs)

    def adopt_slots(self, shards: dict[int, ShardSlots]) -> None:
        """:meth:`EdgeSlots.adopt`: a stage written whole before the slots moved here hands them over once."""
        self.slots.adopt(shards)

    def slot_columns(self, names: tuple[str, ...], types: np.ndarray | None, live: bool) -> dict[int, tuple[np.ndarray, ...]]:
        """:meth:`EdgeSlots.columns` of this partition's shards."""
        return self.slots.columns(names, types, live)

    # -- reading ------------------------------------------------------------------------------------

    def take_counters(self, name: str) -> tuple[int, int, int]:
        """(stored entries read, values sent in sweeps, values sent by pushes) since the last call."""
        blk = self.rankings[name]
        out = (blk.read, blk.dense, blk.sparse)
        blk.read = blk.dense = blk.sparse = 0
        return out

    def blocks(self) -> tuple[np.ndarray, dict[str, tuple[np.ndarray, np.ndarray | None]]]:
        """The owned global ids and, per ranking, host copies of ``y`` and ``b`` (None outside window mode)."""
        out = {}
        for name, blk in self.rankings.items():
            out[name] = (self.be.to_host(blk.y), None if blk.b is None else self.be.to_host(blk.b))
        return self.space.owned.copy(), out

    def boundary(self) -> list[int]:
        """Values this partition sends each other one per sweep: its live ghosts there."""
        return self.space.boundary()

    def local_size(self) -> dict[str, int]:
        return self.space.sizes()

    def backend_name(self) -> str:
        """Where this partition's arrays live: ``numpy`` or ``cupy``."""
        return self.be.name

    def nbytes(self) -> int:
        """Bytes this partition holds: its graph, its vectors, its ids, ghosts and lists, its shards' slots."""
        total = self.graph.nbytes() + self.graph.out_weight.nbytes + self.space.nbytes() + self.slots.nbytes()
        for blk in self.rankings.values():
            total += blk.y.nbytes + blk.ext.nbytes + (0 if blk.b is None else blk.b.nbytes)
        return int(total)
