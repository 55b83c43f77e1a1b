"""The compute stage in window mode: slot reuse, presence, and the rankings of the present subgraph.

The deltas are hand-built by :class:`WindowShards`, a small model of what the shards send with
``--window`` (the contract in compute/graph.py's docstring): contributions expire like removals, a
slot whose edge has nothing left in the window goes back to a free list and may come back as another
``(src, dst, type)``, possibly in the next epoch of one merged batch, and an attribute write that
expires arrives as ``null``. Every epoch the stage's result is held against the model: presence and
its count, live edges, degrees, PageRank and TunkRank against the reference implementations run from
scratch on the present subgraph, components, the applications' kept adjacency against a build from
scratch, every application against the rebuild path, and the API's graph view fed the published
edge changes.
"""

from __future__ import annotations

import dataclasses

import networkx as nx
import numpy as np
import pytest

from pulsegraph.api.graph import GraphHistory
from pulsegraph.compute.apps.adjacency import AppAdjacency
from pulsegraph.compute.apps.runner import AppConfig, Applications
from pulsegraph.compute.changes import EdgeChanges
from pulsegraph.compute.graph import GlobalGraph
from pulsegraph.compute.pagerank import pagerank_reference
from pulsegraph.compute.stage import ComputeStage, SealedEpoch
from pulsegraph.compute.tunkrank import tunkrank_reference
from pulsegraph.snapshots.attrs import attr_columns
from pulsegraph.snapshots.delta import EpochDelta
from pulsegraph.snapshots.epoch import EpochInfo
from tests.compute.test_adjacency import TYPES, held, held_typed
from tests.compute.test_stage import published
from tests.graphref import without_attrs

RANKED = ("mentions", "replies")
WINDOW = 60.0
UNIT = 1_000_000  # a weight of 1.0 in fixed point (pulsegraph.ingest.events.WEIGHT_SCALE)


class WindowShards:
    """Edges on the shard of their source, vertices' attributes on the shard of the vertex; per shard
    local vertex ids, slots, and a free list of slots whose edge has nothing left in the window."""

    def __init__(self, shards: int = 2) -> None:
        self.shards = shards
        self.lid: list[dict[str, int]] = [{} for _ in range(shards)]
        self.slot_of: list[dict[tuple, int]] = [{} for _ in range(shards)]
        self.slots: list[list[list]] = [[] for _ in range(shards)]  # [key, mult, weight, first]
        self.free: list[list[int]] = [[] for _ in range(shards)]
        self.attrs: dict[str, bytes] = {}
        self.reused = 0  # slots handed to another edge, for the test to know it happened
        self._touched: list[set[int]] = [set() for _ in range(shards)]
        self._attr_touched: list[set[str]] = [set() for _ in range(shards)]

    def shard_of(self, name: str) -> int:
        return int(name[1:]) % self.shards

    # -- changes --------------------------------------------------------------------------------

    def add(self, key: tuple, units: int, ts: float) -> None:
        sh = self.shard_of(key[0])
        slot = self.slot_of[sh].get(key)
        if slot is None:
            if self.free[sh]:
                slot = self.free[sh].pop()
                self.reused += 1
            else:
                slot = len(self.slots[sh])
                self.slots[sh].append(None)
            self.slots[sh][slot] = [key, 0, 0, np.inf]
            self.slot_of[sh][key] = slot
        s = self.slots[sh][slot]
        s[1] += 1
        s[2] += units
        s[3] = min(s[3], ts)
        self._touched[sh].add(slot)

    def remove(self, key: tuple, units: int) -> None:
        """A remove_edge inside the window: the slot stays (its events are still in the window)."""
        sh = self.shard_of(key[0])
        s = self.slots[sh][self.slot_of[sh][key]]
        s[1] -= 1
        s[2] -= units
        self._touched[sh].add(self.slot_of[sh][key])

    def expire(self, key: tuple, whole: bool, first: float) -> None:
        """Contributions leave the window: one add (``whole``: every event of the edge, freeing its slot)."""
        sh = self.shard_of(key[0])
        slot = self.slot_of[sh][key]
        s = self.slots[sh][slot]
        if whole:
            s[1], s[2], s[3] = 0, 0, np.inf
            del self.slot_of[sh][key]
            self.free[sh].append(slot)
        else:
            s[1] -= 1
            s[2] -= UNIT
            s[3] = first
        self._touched[sh].add(slot)

    def set_attrs(self, name: str, raw: bytes) -> None:
        self.attrs[name] = raw
        self._attr_touched[self.shard_of(name)].add(name)

    # -- what the shards send -------------------------------------------------------------------

    def deltas(self, epoch: int) -> list[EpochDelta]:
        out = []
        for sh in range(self.shards):
            new_ids, new_names = [], []

            def local(name: str, sh=sh, new_ids=new_ids, new_names=new_names) -> int:
                got = self.lid[sh].get(name)
                if got is None:
                    got = self.lid[sh][name] = len(self.lid[sh])
                    new_ids.append(got)
                    new_names.append(name)
                return got

            slots = sorted(self._touched[sh])
            rows = [self.slots[sh][i] for i in slots]
            src = [local(k[0]) for k, *_ in rows]
            dst = [local(k[1]) for k, *_ in rows]
            names = sorted(self._attr_touched[sh])
            attr_ids = [local(n) for n in names]
            attr_set, attr_seen = attr_columns([self.attrs[n] for n in names])
            out.append(EpochDelta(
                shard=sh, epoch=epoch, types=list(TYPES),
                new_ids=np.array(new_ids, dtype=np.int32), new_names=new_names,
                attr_ids=np.array(attr_ids, dtype=np.int32), attr_set=attr_set, attr_seen=attr_seen,
                e_slot=np.array(slots, dtype=np.int64),
                e_src=np.array(src, dtype=np.int32), e_dst=np.array(dst, dtype=np.int32),
                e_type=np.array([TYPES.index(k[2]) for k, *_ in rows], dtype=np.int16),
                e_mult=np.array([r[1] for r in rows], dtype=np.int64),
                e_weight=np.array([r[2] for r in rows], dtype=np.int64),
                e_first_ts=np.array([r[3] for r in rows], dtype=np.float64),
            ))
            self._touched[sh] = set()
            self._attr_touched[sh] = set()
        return out

    # -- the reference --------------------------------------------------------------------------

    def live(self) -> dict[tuple, tuple[int, int]]:
        return {s[0]: (s[1], s[2]) for per in self.slots for s in per if s is not None and s[1] > 0}

    def present(self) -> set[str]:
        ends = {v for (s, d, _) in self.live() for v in (s, d)}
        return ends | {n for n, raw in self.attrs.items() if raw != b"null"}


def window_epochs(seed: int, epochs: int = 24, n: int = 18):
    """Random epochs of adds, removes, partial and whole expiries (slots freed and reused), attribute
    writes and their expiry; yields (model, the epoch's sealed form)."""
    rng = np.random.default_rng(seed)
    model = WindowShards()
    ts = 1_764_460_800.0
    for e in range(1, epochs + 1):
        ts += 5.0
        for _ in range(int(rng.integers(2, 10))):
            live = list(model.live())
            r = rng.random()
            if live and r < 0.3:
                model.expire(live[int(rng.integers(len(live)))], whole=True, first=np.inf)
            elif live and r < 0.4:
                k = live[int(rng.integers(len(live)))]
                model.expire(k, whole=False, first=ts - 1.0)
            elif live and r < 0.5:
                model.remove(live[int(rng.integers(len(live)))], UNIT)
            elif r < 0.6:
                v = f"v{int(rng.integers(n))}"
                model.set_attrs(v, b"null" if rng.random() < 0.5 else b'{"kind":"user"}')
            else:
                s, d = (f"v{int(x)}" for x in rng.integers(0, n, 2))
                model.add((s, d, TYPES[int(rng.integers(3))]), int(rng.integers(1, 4)) * UNIT, ts)
        info = EpochInfo(epoch=e, vector={"p": e}, records=e, sealed_at=float(e), commit_ms=0.0,
                timeliness_ms={"p50": 0.0, "p99": 0.0, "max": 0.0},
                window=WINDOW, watermark=ts, late=int(rng.integers(0, 3)))
        yield model, SealedEpoch(info, model.deltas(e))


def check_against(model: WindowShards, stage: ComputeStage, r) -> None:
    g = stage.graph
    live = model.live()
    present = model.present()
    ids = {name: g.index[name] for name in present}
    assert r.vertices == len(present) == g.present_count
    assert sorted(np.flatnonzero(r.present).tolist()) == sorted(ids.values())
    assert r.edges == len(live) == g.live_edges()
    out, inn = np.zeros(g.n, int), np.zeros(g.n, int)
    for s, d, _ in live:
        out[g.index[s]] += 1
        inn[g.index[d]] += 1
    assert r.out_degree.tolist() == out.tolist() and r.in_degree.tolist() == inn.tolist()
    snap = g.snapshot()["edges"]
    assert {k: v for k, v in snap.items() if v[0] > 0} == live
    # The rankings: of the present subgraph, from scratch, by the slow references.
    weights: dict[tuple[str, str], float] = {}
    for (s, d, t), (_, w) in live.items():
        if t in RANKED and w > 0:
            weights[(s, d)] = weights.get((s, d), 0.0) + w / UNIT
    nodes = sorted(present)
    absent = np.ones(g.n, dtype=bool)
    absent[list(ids.values())] = False
    for algo in ("pagerank", "tunkrank"):
        assert (r.scores[algo][absent] == 0.0).all(), algo
    if nodes:
        pr = pagerank_reference(nodes, weights)
        tr = tunkrank_reference(nodes, weights)
        got_pr = np.array([r.scores["pagerank"][ids[v]] for v in nodes])
        got_tr = np.array([r.scores["tunkrank"][ids[v]] for v in nodes])
        assert np.abs(got_pr - np.array([pr[v] for v in nodes])).sum() <= 2e-7
        assert np.abs(got_tr - np.array([tr[v] for v in nodes])).sum() <= 2e-7 * max(1.0, float(got_tr.sum()))
    # Components: of the present vertices over live edges of every type.
    ug = nx.Graph()
    ug.add_nodes_from(nodes)
    ug.add_edges_from((s, d) for s, d, _ in live)
    comp = r.apps["components"]
    assert comp.count == nx.number_connected_components(ug)
    assert (comp.labels[absent] == -1).all()
    # The applications' kept adjacency holds what a build from the graph holds.
    kept = stage.apps.adjacency
    fresh = AppAdjacency.from_graph(g)
    assert held(kept, g.n) == held(fresh, g.n)
    assert held_typed(kept, g, kept) == held_typed(fresh, g, kept)


@pytest.mark.parametrize("seed", range(4))
def test_window_epochs_match_the_present_subgraph_one_by_one_and_merged(seed):
    one = ComputeStage(RANKED)
    many = ComputeStage(RANKED)
    rebuilt = ComputeStage(RANKED, apps=AppConfig(rebuild_every_epoch=True))
    view = GraphHistory()
    batch: list[SealedEpoch] = []
    left_and_came_back = 0
    was_present: set[str] = set()
    ever_absent: set[str] = set()
    model = None
    for model, sealed_epoch in window_epochs(seed):
        r = one.apply([sealed_epoch])
        check_against(model, one, r)
        assert (r.window, r.watermark, r.late) == (WINDOW, sealed_epoch.info.watermark, sealed_epoch.info.late)
        assert r.info()["window"] == WINDOW and r.info()["watermark"] == sealed_epoch.info.watermark
        now = model.present()
        ever_absent |= was_present - now
        left_and_came_back += len(ever_absent & (now - was_present))
        was_present = now
        # The API's graph view, kept from the published changes alone, holds the live edges.
        view.apply(r.epoch, r.edge_changes)
        got = set()
        for i in range(one.graph.n):
            other, et, mult, weight = view.neighbors(i, "out")
            got |= {(one.graph.names[i], one.graph.names[o], r.types[t], m, w) for o, t, m, w in
                    zip(other.tolist(), et.tolist(), mult.tolist(), weight.tolist())}
        assert got == {(*k, m, w) for k, (m, w) in model.live().items()}
        # Every second pair of epochs merged into one batch: slots freed in the first and reused in the second.
        batch.append(sealed_epoch)
        if sealed_epoch.info.epoch % 4 in (0, 1):
            m = many.apply(batch)
            b = rebuilt.apply(batch)
            assert m.skipped == [e.info.epoch for e in batch[:-1]]
            assert m.late == sum(e.info.late for e in batch)  # the late events of the merged epochs too
            batch = []
            check_against(model, many, m)
            assert published(m) == published(r) == published(b)
    assert model is not None and model.reused > 0
    assert left_and_came_back > 0


def test_a_reused_slot_moves_degrees_from_the_old_ends_to_the_new():
    """Two epochs merged in one batch: an edge expires and its slot carries another edge in the next."""
    model = WindowShards(shards=1)
    model.add(("v0", "v1", "mentions"), UNIT, 1.0)
    model.add(("v2", "v3", "mentions"), UNIT, 1.0)
    g = GlobalGraph(windowed=True)
    g.apply_epochs([model.deltas(1)])
    assert g.present_count == 4 and g.degrees()[0].tolist() == [1, 0, 1, 0]
    model.expire(("v0", "v1", "mentions"), whole=True, first=np.inf)
    e2 = model.deltas(2)
    model.add(("v4", "v0", "replies"), UNIT, 9.0)  # takes the freed slot 0
    e3 = model.deltas(3)
    assert model.reused == 1 and e3[0].e_slot.tolist() == [0]
    changes, before = g.apply_epochs([e2, e3])
    out, inn = g.degrees()
    names = {name: i for i, name in enumerate(g.names)}
    assert out[names["v0"]] == 0 and inn[names["v1"]] == 0 and out[names["v4"]] == 1 and inn[names["v0"]] == 1
    assert g.live_edges() == 2
    # v1 left the snapshot; v4 is new in it; v0 stayed (now only as a destination).
    assert g.present_count == 4 and not g.present()[names["v1"]] and g.present()[names["v4"]]
    assert g.flips.tolist() == [names["v1"]]
    # Edge for edge: the old edge went to nothing, the new came from nothing, each row one edge.
    rows = sorted(zip(changes.src.tolist(), changes.dst.tolist(), changes.mult.tolist(), before.mult.tolist()))
    assert rows == sorted([(names["v0"], names["v1"], 0, 1), (names["v4"], names["v0"], 1, 0)])
    assert (changes.src == before.src).all() and (changes.dst == before.dst).all() and (changes.etype == before.etype).all()
    src, dst, dw = g.weight_differences(changes, before, RANKED)
    assert sorted(zip(src.tolist(), dst.tolist(), dw.tolist())) == sorted(
        [(names["v0"], names["v1"], -UNIT), (names["v4"], names["v0"], UNIT)])


def test_an_edge_that_moves_slots_within_a_batch_is_one_row():
    """An edge freed in one epoch and added again in the next, in another free slot, is one edge."""
    model = WindowShards(shards=1)
    model.add(("v0", "v1", "mentions"), UNIT, 1.0)  # slot 0
    model.add(("v2", "v3", "mentions"), UNIT, 1.0)  # slot 1
    g = GlobalGraph(windowed=True)
    g.apply_epochs([model.deltas(1)])
    model.expire(("v2", "v3", "mentions"), whole=True, first=np.inf)
    model.expire(("v0", "v1", "mentions"), whole=True, first=np.inf)  # free list: [1, 0]: slot 0 is taken first
    e2 = model.deltas(2)
    model.add(("v2", "v3", "mentions"), UNIT, 7.0)  # back, in slot 0
    e3 = model.deltas(3)
    changes, before = g.apply_epochs([e2, e3])
    assert len(changes) == 2 and g.live_edges() == 1
    by_edge = {(int(s), int(d)): (int(b), int(a)) for s, d, b, a in zip(changes.src, changes.dst, before.mult, changes.mult)}
    names = {name: i for i, name in enumerate(g.names)}
    assert by_edge == {(names["v2"], names["v3"]): (1, 1), (names["v0"], names["v1"]): (1, 0)}
    assert g.snapshot()["edges"][("v2", "v3", "mentions")] == (1, UNIT)


def test_attributes_keep_a_vertex_present_until_they_expire():
    model = WindowShards(shards=1)
    model.set_attrs("v5", b'{"kind":"user"}')
    stage = ComputeStage(RANKED)
    info = EpochInfo(epoch=1, vector={"p": 1}, records=1, sealed_at=1.0, commit_ms=0.0,
            timeliness_ms={"p50": 0.0, "p99": 0.0, "max": 0.0}, window=WINDOW, watermark=10.0, late=0)
    r = stage.apply([SealedEpoch(info, model.deltas(1))])
    assert r.vertices == 1 and r.present.tolist() == [True]
    assert r.scores["pagerank"].tolist() == [1.0]  # alone in the snapshot: all the rank
    model.set_attrs("v5", b"null")
    model.add(("v1", "v2", "mentions"), UNIT, 11.0)
    r = stage.apply([SealedEpoch(dataclasses.replace(info, epoch=2, vector={"p": 2}, watermark=11.0), model.deltas(2))])
    names = stage.graph.names
    assert r.vertices == 2 and {names[i] for i in np.flatnonzero(r.present)} == {"v1", "v2"}
    assert r.scores["pagerank"][names.index("v5")] == 0.0
    assert abs(r.scores["pagerank"].sum() - 1.0) < 1e-9
    # Everyone leaves: nothing is present, every score is exactly 0, and nothing fails to converge.
    model.expire(("v1", "v2", "mentions"), whole=True, first=np.inf)
    r = stage.apply([SealedEpoch(dataclasses.replace(info, epoch=3, vector={"p": 3}, watermark=99.0), model.deltas(3))])
    assert r.vertices == 0 and r.edges == 0
    assert not r.scores["pagerank"].any() and not r.scores["tunkrank"].any()
    assert r.apps["components"].count == 0


def test_without_a_window_every_vertex_stays_and_the_epoch_says_so():
    model = WindowShards(shards=1)
    model.add(("v0", "v1", "mentions"), UNIT, 1.0)
    info = EpochInfo(epoch=1, vector={"p": 1}, records=1, sealed_at=1.0, commit_ms=0.0,
            timeliness_ms={"p50": 0.0, "p99": 0.0, "max": 0.0})
    stage = ComputeStage(RANKED)
    stage.apply([SealedEpoch(info, model.deltas(1))])
    model.remove(("v0", "v1", "mentions"), UNIT)
    r = stage.apply([SealedEpoch(dataclasses.replace(info, epoch=2), model.deltas(2))])
    assert r.vertices == 2 and r.present is None and r.edges == 0
    assert (r.window, r.watermark, r.late) == (None, None, 0)
    assert r.info()["window"] is None and r.info()["watermark"] is None
    assert all(s.b is None for s in (a.solver for a in stage.engine.algorithms.values()))  # no right-hand side kept
    assert abs(r.scores["pagerank"].sum() - 1.0) < 1e-9 and r.scores["pagerank"][0] > 0


@pytest.mark.parametrize("method", ["push", "sweep"])
def test_the_engine_ranks_the_present_subgraph_on_every_backend(backend, method):
    """The rank engine alone (the part that runs on CuPy): vertices leave (their edges go, b goes to 0)
    and come back, by the push path and by full-graph solves; each epoch against the references."""
    from pulsegraph.compute.engine import RankConfig, RankEngine  # noqa: PLC0415

    rng = np.random.default_rng(7)
    n = 40
    engine = RankEngine(RankConfig(device="cpu", push_max_delta=1.0 if method == "push" else 0.0), backend)
    edges: dict[tuple[int, int], int] = {}
    present = np.zeros(n, dtype=bool)
    for epoch in range(8):
        old_present = present.copy()
        change: dict[tuple[int, int], int] = {}
        # Vertices 0..9 take turns leaving the window: every edge at them goes.
        leaving = {int(v) for v in rng.choice(10, 3, replace=False)} if epoch % 2 else set()
        for (s, d), w in list(edges.items()):
            if s in leaving or d in leaving:
                change[(s, d)] = change.get((s, d), 0) - w
                del edges[(s, d)]
        for _ in range(25):
            s, d = (int(x) for x in rng.integers(0, n, 2))
            if s == d or s in leaving or d in leaving or (s, d) in edges:
                continue
            w = int(rng.integers(1, 4)) * UNIT
            edges[(s, d)] = w
            change[(s, d)] = change.get((s, d), 0) + w
        present = np.zeros(n, dtype=bool)
        for s, d in edges:
            present[s] = present[d] = True
        present[35:] = True  # vertices with attributes only: present, no edges
        flips = np.flatnonzero(present != old_present)
        keys = list(change)
        engine.update(n, np.array([k[0] for k in keys]), np.array([k[1] for k in keys]),
                      np.array([change[k] for k in keys], dtype=np.int64), present=present, flips=flips)
        scores = engine.host_scores()
        nodes = np.flatnonzero(present).tolist()
        w = {k: v / UNIT for k, v in edges.items()}
        pr, tr = pagerank_reference(nodes, w), tunkrank_reference(nodes, w)
        assert (scores["pagerank"][~present] == 0).all() and (scores["tunkrank"][~present] == 0).all()
        assert np.abs(scores["pagerank"][nodes] - np.array([pr[v] for v in nodes])).sum() <= 2e-7, epoch
        assert np.abs(scores["tunkrank"][nodes] - np.array([tr[v] for v in nodes])).sum() <= 2e-7 * max(1.0, sum(tr.values()))
    # From scratch on the same graph: the same ranks.
    kept = engine.host_scores()
    engine.rescore()
    again = engine.host_scores()
    assert np.abs(kept["pagerank"] - again["pagerank"]).sum() <= 2e-7


# -- against the real shard stores with a window (pulsegraph.snapshots.store) ------------------------------------------


def shard_window_epochs(seed: int, epochs: int = 16, shards: int = 3, window: float = 6.0, recycled: list | None = None,
                        users: int = 10):
    """Tweets (and removals) through real windowed shard stores, times rising with a little disorder and
    some late; yields (the merged shard snapshots, the sealed epoch) epoch by epoch. The shards give
    back the local ids of the vertices the window emptied every other epoch (``recycled`` gets how
    many, at the end)."""
    import random  # noqa: PLC0415

    from pulsegraph.ingest.batch import Router  # noqa: PLC0415
    from pulsegraph.ingest.events import EdgeUpdate, fixed_weight  # noqa: PLC0415
    from pulsegraph.snapshots.store import ShardStore  # noqa: PLC0415
    from tests.compute.test_apps import tweet  # noqa: PLC0415
    from tests.graphref import merge  # noqa: PLC0415

    rng = random.Random(seed)
    stores = [ShardStore(i, window, recycle_every=2) for i in range(shards)]
    offset, watermark, live = 0, 0.0, []
    for e in range(1, epochs + 1):
        router = Router(shards)
        for _ in range(rng.randrange(3, 9)):
            ts = float(e + rng.choice([-8, -3, -1, 0, 0, 0, 1]))  # -8: already outside the window (late)
            if live and rng.random() < 0.2:
                s, d, t = rng.choice(live)
                updates = [EdgeUpdate(s, d, t, -1, fixed_weight(1.0), ts)]
            else:
                updates = tweet(f"u{rng.randrange(users)}", [f"u{rng.randrange(users)}" for _ in range(rng.randrange(3))],
                                [f"h{rng.randrange(3)}" for _ in range(rng.randrange(2))], ts=ts)
                live += [(u.src, u.dst, u.type) for u in updates if isinstance(u, EdgeUpdate)]
            router.add("p", offset, updates)
            offset += 1
        times, _ = router.stamp_times()
        watermark = max([watermark, *times.values()])
        for store, b in zip(stores, router.take()):
            store.receive(b)
        applied = [s.apply(e, {"p": offset}, watermark) for s in stores]
        late = len({int(o) for summary, _ in applied for o in summary.late.get("p", [])})
        info = EpochInfo(epoch=e, vector={"p": offset}, records=offset, sealed_at=float(e), commit_ms=0.0,
                timeliness_ms={"p50": 0.0, "p99": 0.0, "max": 0.0}, window=window, watermark=watermark, late=late)
        yield merge([s.snapshot() for s in stores]), SealedEpoch(info, [d for _, d in applied])
    if recycled is not None:
        recycled.append(sum(s.recycled for s in stores))


def as_lists(result) -> dict:
    return {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in vars(result).items()}


@pytest.mark.parametrize("seed,reuse_after,users,merged", [
    (0, None, 10, 2), (1, None, 10, 2), (2, None, 10, 2), (0, 1, 60, 2), (1, 2, 60, 2), (2, 3, 60, 2),
    # Reuse-heavy: a delay of one second of event time, few users, and batches of several epochs, so
    # vertices leave and come back under reused ids within one merge.
    (3, 1, 20, 5), (4, 1, 25, 3),
])
def test_real_windowed_shards_rank_as_their_window(seed, reuse_after, users, merged):
    """The shards' own windowed snapshots (what the shard side holds to its definition) are the reference:
    the stage, one epoch at a time and in batches of ``merged``, must hold that graph and rank it, with
    vertex ids reused (``reuse_after``) the same in both."""
    from pulsegraph.ingest.events import WEIGHT_SCALE  # noqa: PLC0415

    ranked = ("mentions",)
    one, many = ComputeStage(ranked, reuse_after=reuse_after), ComputeStage(ranked, reuse_after=reuse_after)
    reused, before = 0, []
    batch: list[SealedEpoch] = []
    expired = late = counted = 0
    recycled: list[int] = []
    # With reuse, more users than a window holds, so that some leave it for long enough.
    stream = shard_window_epochs(seed, recycled=recycled) if reuse_after is None else shard_window_epochs(seed, 30, recycled=recycled, users=users)
    for snap, sealed_epoch in stream:
        late += sealed_epoch.info.late
        batch.append(sealed_epoch)
        stages = [(one, one.apply([sealed_epoch]))]
        counted += stages[0][1].late
        if len(batch) == merged:
            stages.append((many, many.apply(batch)))
            batch = []
            assert many.graph.names == one.graph.names and published(stages[1][1]) == published(stages[0][1])
        names = one.graph.names
        reused += sum(1 for i, name in enumerate(before[: len(names)]) if name and names[i] and names[i] != name)
        before = list(names)
        # The applications kept across epochs (reused ids included) equal a start from scratch.
        fresh = Applications(AppConfig()).run(one.graph, sealed_epoch.info.epoch, EdgeChanges.empty(), EdgeChanges.empty(), True)
        for app in ("components", "trends"):
            assert as_lists(fresh[app]) == as_lists(stages[0][1].apps[app])
        live = {k: v for k, v in snap["edges"].items() if v[0] > 0}
        present = set(snap["vertices"])
        for stage, r in stages:
            g = stage.graph
            expired += sum(int(np.count_nonzero((m == 0) & (w == 0))) for m, w in g.slots.columns(("mult", "weight"), live=False).values())
            assert g.snapshot() == without_attrs(snap)  # edge for edge, first add times too
            assert r.vertices == len(present) and {g.names[i] for i in np.flatnonzero(r.present)} == present
            assert r.edges == len(live) and r.watermark == sealed_epoch.info.watermark
            weights: dict[tuple[str, str], float] = {}
            for (s, d, t), (_, w) in live.items():
                if t in ranked and w > 0:
                    weights[(s, d)] = weights.get((s, d), 0.0) + w / WEIGHT_SCALE
            nodes = sorted(present)
            pr = pagerank_reference(nodes, weights)
            got = np.array([r.scores["pagerank"][g.index[v]] for v in nodes])
            assert np.abs(got - np.array([pr[v] for v in nodes])).sum() <= 2e-7
            assert r.scores["pagerank"][~r.present].sum() == 0.0
    assert expired > 0  # the window did expire edges
    assert late > 0 and counted == late  # late events: counted per epoch, never in the graph
    assert recycled[0] > 0  # shards gave local ids back, and vertices came back under new ones
    assert (reused > 0) == (reuse_after is not None)  # and so did the compute stage's ids, when it may
