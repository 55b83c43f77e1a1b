"""A one-shard stand-in for the snapshot stage in application tests: absolute edge states -> EpochDelta.

It only packs what a test decides into the delta format (local ids, slots,
absolute multiplicities, last-writer-wins attributes); the graph merge itself is
the real :class:`pulsegraph.compute.graph.GlobalGraph`, and the applications run through the
real :class:`pulsegraph.compute.apps.runner.Applications`.
"""

from __future__ import annotations

import numpy as np

from pulsegraph.compute.apps.base import Patch
from pulsegraph.compute.apps.landmarks import UNREACHABLE
from pulsegraph.compute.apps.runner import AppConfig, Applications
from pulsegraph.compute.graph import GlobalGraph
from pulsegraph.ingest.events import EdgeUpdate, VertexUpdate
from pulsegraph.snapshots.attrs import attr_columns, encoded
from pulsegraph.snapshots.delta import EpochDelta


class Stream:
    def __init__(self, config: AppConfig | None = None) -> None:
        self.ids: dict[str, int] = {}
        self.slots: dict[tuple[str, str, str], int] = {}
        self.mult: dict[tuple[str, str, str], int] = {}
        self.attrs: dict[str, tuple[float, dict]] = {}
        self.types: list[str] = []
        self.g = GlobalGraph()
        self.apps = Applications(config)
        self.epoch = 0
        self.out: dict = {}
        # The landmark distances as a consumer of the results holds them: whole arrays, patched epoch by epoch.
        self.dist_to: np.ndarray | None = None
        self.dist_from: np.ndarray | None = None
        self.patches = 0  # epochs whose distances came as patches

    def _id(self, name: str, new: list[str]) -> int:
        if name not in self.ids:
            self.ids[name] = len(self.ids)
            new.append(name)
        return self.ids[name]

    def commit(self, edges: dict[tuple[str, str, str], int] | None = None, attrs: dict[str, dict] | None = None,
               vertices: list[str] = (), scores: dict | None = None) -> dict:
        """One epoch: ``edges`` maps (src, dst, type) to a multiplicity change; returns the applications' output."""
        self.epoch += 1
        new: list[str] = []
        slot, src, dst, typ, mult = [], [], [], [], []
        for name in vertices:
            self._id(name, new)
        for (s, d, t), dm in (edges or {}).items():
            key = (s, d, t)
            self.mult[key] = self.mult.get(key, 0) + dm
            if key not in self.slots:
                self.slots[key] = len(self.slots)
            if t not in self.types:
                self.types.append(t)
            slot.append(self.slots[key]), src.append(self._id(s, new)), dst.append(self._id(d, new))
            typ.append(self.types.index(t)), mult.append(self.mult[key])
        attr_ids, attr_vals = [], []
        for name, a in (attrs or {}).items():
            attr_ids.append(self._id(name, new)), attr_vals.append(a)
        attr_set, attr_seen = attr_columns(encoded(attr_vals))
        delta = EpochDelta(
            shard=0, epoch=self.epoch, types=list(self.types),
            new_ids=np.array([self.ids[n] for n in new], dtype=np.int32), new_names=new,
            attr_ids=np.array(attr_ids, dtype=np.int32), attr_set=attr_set, attr_seen=attr_seen,
            e_slot=np.array(slot, dtype=np.int64), e_src=np.array(src, dtype=np.int32), e_dst=np.array(dst, dtype=np.int32),
            e_type=np.array(typ, dtype=np.int16), e_mult=np.array(mult, dtype=np.int64),
            e_weight=np.array(mult, dtype=np.int64) * 1_000_000,
        )
        n_before = self.g.n
        changes, before = self.g.apply_with_previous(delta)
        self.out = self.apps.run(self.g, self.epoch, changes, before, False, scores, self.g.n - n_before)
        self._follow(self.out.get("landmarks"))
        return self.out

    def _follow(self, lm) -> None:
        if lm is None:
            return
        if isinstance(lm.dist_to, Patch):
            assert lm.dist_to.base == lm.dist_from.base == self.epoch - 1
            self.dist_to = lm.dist_to.applied_to(self.dist_to, UNREACHABLE)
            self.dist_from = lm.dist_from.applied_to(self.dist_from, UNREACHABLE)
            self.patches += 1
        else:
            self.dist_to, self.dist_from = lm.dist_to.copy(), lm.dist_from.copy()

    def tweets(self, updates_per_tweet: list[list]) -> dict:
        """One epoch made of the transform's updates of some tweets (attributes: last writer wins by ts)."""
        edges: dict = {}
        attrs: dict = {}
        for updates in updates_per_tweet:
            for u in updates:
                if isinstance(u, EdgeUpdate):
                    edges[(u.src, u.dst, u.type)] = edges.get((u.src, u.dst, u.type), 0) + u.sign
                elif isinstance(u, VertexUpdate):
                    old = self.attrs.get(u.id)
                    if old is None or u.ts >= old[0]:
                        self.attrs[u.id] = (u.ts, u.attrs)
                        attrs[u.id] = u.attrs
        return self.commit(edges, attrs)

    def live_pairs(self) -> set[tuple[int, int]]:
        return {(self.g.index[s], self.g.index[d]) for (s, d, _), m in self.mult.items() if m > 0}
