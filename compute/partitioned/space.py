"""A compute partition's local numbering: its owned vertices, the ghosts of the remote vertices its rows
reach, and the send and receive lists that say which values go where in a sweep.

Owned vertices are ``0..k-1`` in global order, with room up to ``cap``; ghost ``j`` is local ``cap + j``.
The ghosts and lists change with an epoch's edges in time that follows the epoch (a sorted-runs index
for global id -> ghost, free numbers reused, swap-removes mirrored by the receivers). Must not know
about the rankings' vectors beyond gathering from and clearing an outbox it is handed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pulsegraph.base.arrays import unique
from pulsegraph.base.keyindex import KeyIndex
from pulsegraph.compute.partitioned.base import Owner, Sparse, swap_remove
from pulsegraph.compute.resident import ResidentGraph

# Room kept for owned vertices grows by this factor when they outgrow it (plus CAPACITY_MIN): each move of
# the ghosts costs one pass over the partition's stored entries, so it must come a geometric number of
# times; 1.25 keeps the empty rows it holds (~28 bytes each) to a quarter of the owned ones.
CAPACITY_GROWTH = 1.25
CAPACITY_MIN = 1024


class LocalSpace:
    def __init__(self, index: int, parts: int, owner: Owner, graph: ResidentGraph) -> None:
        self.q = index
        self.parts = parts
        self.owner = owner
        self.graph = graph
        self.be = graph.be
        self.n_seen = 0
        self.owned = np.zeros(0, np.int64)  # global ids, sorted: the local index is the position
        self.cap = 0
        self.ghost_gid = np.zeros(0, np.int64)  # per ghost number; -1: a free number
        self.ghost_owner = np.zeros(0, np.int64)
        self.ghost_in = np.zeros(0, np.float64)  # this partition's weight into the ghost, exact units
        self.ghost_pos = np.zeros(0, np.int64)  # position in the send list to its owner; -1: in none
        self.ghost_of = KeyIndex()  # global id -> ghost number, live ghosts
        self.free = np.zeros(0, np.int64)
        self.send = [np.zeros(0, np.int64) for _ in range(parts)]  # ghost numbers, per destination
        self.recv = [np.zeros(0, np.int64) for _ in range(parts)]  # own local indices, per source
        self.send_dev: list[Any] = [self.be.asarray(a) for a in self.send]
        self.recv_dev: list[Any] = [self.be.asarray(a) for a in self.recv]

    @property
    def k(self) -> int:
        return len(self.owned)

    @property
    def ghosts(self) -> int:
        """Ghost numbers in use or free: the outbox's length."""
        return len(self.ghost_gid)

    def local(self, gids: np.ndarray) -> np.ndarray:
        """Local indices of owned global ids."""
        pos = np.searchsorted(self.owned, gids)
        if len(gids) and (int(pos.max()) >= self.k or not np.array_equal(self.owned[pos], gids)):
            raise ValueError(f"partition {self.q} was given a vertex it does not own")
        return pos.astype(np.int64)

    def grow_owned(self, n: int) -> bool:
        """Take the vertices below ``n`` that this partition owns; True where the local space moved."""
        if n <= self.n_seen:
            return False
        new = np.arange(self.n_seen, n, dtype=np.int64)
        self.n_seen = n
        mine = new[self.owner(new) == self.q]
        if len(mine):
            self.owned = np.concatenate([self.owned, mine])
        if self.k <= self.cap:
            return False
        cap = int(self.k * CAPACITY_GROWTH) + CAPACITY_MIN
        self.graph.open_gap(self.cap, cap - self.cap)
        self.cap = cap
        return True

    def ghosts_of(self, gids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Ghost numbers of remote global ids, new ones allocated (free numbers first); and those new."""
        u = unique(gids)
        j = self.ghost_of.get(u.astype(np.uint64))
        miss = np.flatnonzero(j < 0)
        new_j = np.zeros(0, np.int64)
        if len(miss):
            reuse = min(len(miss), len(self.free))
            new_j, self.free = self.free[:reuse], self.free[reuse:]
            extra = len(miss) - reuse
            if extra:
                start = self.ghosts
                new_j = np.concatenate([new_j, np.arange(start, start + extra, dtype=np.int64)])
                self.ghost_gid = np.concatenate([self.ghost_gid, np.full(extra, -1, np.int64)])
                self.ghost_owner = np.concatenate([self.ghost_owner, np.zeros(extra, np.int64)])
                self.ghost_in = np.concatenate([self.ghost_in, np.zeros(extra)])
                self.ghost_pos = np.concatenate([self.ghost_pos, np.full(extra, -1, np.int64)])
                self.graph.grow(self.cap + self.ghosts)
            g = u[miss]
            self.ghost_gid[new_j] = g
            self.ghost_owner[new_j] = self.owner(g)
            self.ghost_in[new_j] = 0.0
            self.ghost_pos[new_j] = -1
            self.ghost_of.put(g.astype(np.uint64), new_j, absent=True)
            j[miss] = new_j
        return j[np.searchsorted(u, gids)], new_j

    def to_local(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Local (src, dst) of owned-source pairs, remote destinations as ghosts: and the ghost number of
        each remote pair (in order), and the ghosts new in this call."""
        if len(src) and not bool(np.all(self.owner(src) == self.q)):
            raise ValueError(f"partition {self.q} was given an edge whose source it does not own")
        ls = self.local(src)
        mine = self.owner(dst) == self.q
        ld = np.empty(len(dst), np.int64)
        ld[mine] = self.local(dst[mine])
        gj, new_j = self.ghosts_of(dst[~mine])
        ld[~mine] = self.cap + gj
        return ls, ld, gj, new_j

    def update_boundary(self, touched: np.ndarray, new_j: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """After the in-weights of ``touched`` ghosts changed: those at zero (their last edge went) leave
        their send list and free their number; new ghosts with weight join theirs. Per destination: the
        positions removed (sorted) and the global ids appended, for the receiver to mirror."""
        removed = [np.zeros(0, np.int64) for _ in range(self.parts)]
        added = [np.zeros(0, np.int64) for _ in range(self.parts)]
        if not len(touched):
            return removed, added
        dead = touched[self.ghost_in[touched] <= 0.0]
        listed = dead[self.ghost_pos[dead] >= 0]
        joining = new_j[self.ghost_in[new_j] > 0.0]
        for dest in sorted(set(self.ghost_owner[listed].tolist()) | set(self.ghost_owner[joining].tolist())):
            gone = listed[self.ghost_owner[listed] == dest]
            pos = np.sort(self.ghost_pos[gone])
            lst, holes = swap_remove(self.send[dest], pos)
            self.ghost_pos[gone] = -1
            self.ghost_pos[lst[holes]] = holes
            come = joining[self.ghost_owner[joining] == dest]
            self.ghost_pos[come] = len(lst) + np.arange(len(come))
            self.send[dest] = np.concatenate([lst, come])
            self.send_dev[dest] = self.be.asarray(self.send[dest])
            removed[dest], added[dest] = pos, self.ghost_gid[come].copy()
        if len(dead):
            self.ghost_of.discard(self.ghost_gid[dead].astype(np.uint64))
            self.ghost_gid[dead] = -1
            self.ghost_pos[dead] = -1
            self.ghost_in[dead] = 0.0
            self.free = np.concatenate([self.free, dead])
        return removed, added

    def mirror(self, src: int, removed: np.ndarray, added: np.ndarray) -> None:
        """The receiving side of :meth:`update_boundary`: partition ``src``'s list into this one."""
        if not len(removed) and not len(added):
            return
        lst, _ = swap_remove(self.recv[src], removed)
        self.recv[src] = np.concatenate([lst, self.local(added)])
        self.recv_dev[src] = self.be.asarray(self.recv[src])

    def dense(self, out) -> tuple[list[Any], int]:
        """A sweep's messages from its product ``out`` over the local space: per destination the values at
        its ghosts, in send-list order; and how many values."""
        msgs: list[Any] = [None] * self.parts
        count = 0
        for dest in range(self.parts):
            if dest != self.q and len(self.send[dest]):
                msgs[dest] = out[self.cap + self.send_dev[dest]]
                count += len(self.send[dest])
        return msgs, count

    def receive_dense(self, flow, msgs) -> None:
        """``flow`` (per owned vertex) plus what the others sent: each list's indices are distinct."""
        for src, m in enumerate(msgs):
            if m is not None:
                flow[self.recv_dev[src]] += m

    def outbox(self, ext) -> tuple[list[Sparse | None], int]:
        """What a push left at the ghosts (``ext``'s tail past ``cap``), per owner as (global ids, values),
        and how many values; the outbox is zero again after."""
        out: list[Sparse | None] = [None] * self.parts
        if self.ghosts == 0:
            return out, 0
        tail = ext[self.cap: self.cap + self.ghosts]
        nz = self.be.to_host(self.be.xp.nonzero(tail)[0]).astype(np.int64)
        if not len(nz):
            return out, 0
        live = nz[self.ghost_gid[nz] >= 0]  # a freed number holds only the rounding of cancelled entries
        owners = self.ghost_owner[live]
        for dest in np.unique(owners):
            sel = live[owners == dest]
            out[int(dest)] = (self.ghost_gid[sel], tail[self.be.asarray(sel)].copy())
        tail[self.be.asarray(nz)] = 0.0
        return out, len(live)

    def receive_sparse(self, ext, msgs) -> None:
        for m in msgs:
            if m is not None:
                gids, vals = m
                self.be.scatter_add(ext, self.be.asarray(self.local(gids)), vals)

    def boundary(self) -> list[int]:
        return [len(s) for s in self.send]

    def sizes(self) -> dict[str, int]:
        live = int(np.count_nonzero(self.ghost_gid >= 0))
        return {"owned": self.k, "room": self.cap, "ghosts": live, "ghost_numbers": self.ghosts, "local": self.graph.n}

    def nbytes(self) -> int:
        total = self.owned.nbytes + self.ghost_gid.nbytes + self.ghost_owner.nbytes + self.ghost_in.nbytes
        total += self.ghost_pos.nbytes + self.ghost_of.nbytes + self.free.nbytes
        return int(total + sum(a.nbytes for a in self.send) + sum(a.nbytes for a in self.recv))
