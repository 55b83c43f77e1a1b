"""The applications (components, landmarks, K-exposure, trends) against direct computations: networkx components and BFS, a hand-counted K-exposure.

Random epochs insert and delete edges (and add vertices); after every epoch the
incrementally kept state must equal a from-scratch answer on the same graph.
"""

from __future__ import annotations

import math
import random
import time

import networkx as nx
import numpy as np
import pytest

from pulsegraph.compute.apps import base
from pulsegraph.compute.apps.base import AppGraph, Patch
from pulsegraph.compute.apps.components import Components
from pulsegraph.compute.apps.exposure import Exposure
from pulsegraph.compute.apps.landmarks import UNREACHABLE, estimate
from pulsegraph.compute.apps.runner import AppConfig, Applications
from pulsegraph.compute.changes import EdgeChanges
from pulsegraph.compute.graph import GlobalGraph
from pulsegraph.ingest.batch import Router
from pulsegraph.ingest.events import EdgeUpdate, Tweet, fixed_weight
from pulsegraph.ingest.transforms import tweets_transform
from pulsegraph.snapshots.store import ShardStore
from tests.compute.appgraph import Stream


def random_epochs(seed: int, epochs: int = 40, n0: int = 50):
    """Yields (stream, output) after each of ``epochs`` random epochs of inserts and deletes over growing vertices."""
    rng = np.random.default_rng(seed)
    st = Stream(AppConfig(landmarks=4, landmark_drift=0.25))
    n = n0
    live: list[tuple[str, str, str]] = []
    for e in range(epochs):
        n += int(rng.integers(0, 4))
        edges: dict = {}
        for _ in range(int(rng.integers(1, 12))):
            if live and rng.random() < 0.35:
                key = live.pop(int(rng.integers(len(live))))
                edges[key] = edges.get(key, 0) - 1
            else:
                s, d = (f"v{int(x)}" for x in rng.integers(0, n, 2))
                key = (s, d, "mentions" if rng.random() < 0.8 else "tags")
                if key in live or st.mult.get(key, 0) > 0:
                    continue
                live.append(key)
                edges[key] = edges.get(key, 0) + 1
        scores = {"tunkrank": rng.random(n + 10) if e % 10 == 0 else np.arange(n + 10, 0, -1, dtype=float)}
        out = st.commit(edges, vertices=[f"v{i}" for i in range(n)], scores=scores)
        yield st, out


def nx_graph(st: Stream) -> nx.DiGraph:
    G = nx.DiGraph()
    G.add_nodes_from(range(st.g.n))
    G.add_edges_from(st.live_pairs())
    return G


# The landmarks' traversals read a frontier's rows in slices of READ_ENTRIES entries (a bound on their transient
# arrays): the distances are the same whatever the slices.
READS = pytest.mark.parametrize("read", [base.READ_ENTRIES, 7], ids=["whole reads", "reads of 7 entries"])


@pytest.mark.parametrize("seed", [1, 2])
def test_components_match_networkx_after_random_updates(seed):
    for st, out in random_epochs(seed):
        labels = out["components"].labels
        expected = {frozenset(c) for c in nx.weakly_connected_components(nx_graph(st))}
        got: dict[int, set] = {}
        for v, lab in enumerate(labels.tolist()):
            got.setdefault(lab, set()).add(v)
        assert {frozenset(c) for c in got.values()} == expected
        assert all(lab == min(c) for lab, c in got.items())  # the label is the smallest member
        assert out["components"].count == len(expected)
        assert out["components"].top_sizes[0] == max(len(c) for c in expected)


def test_components_initialize_equals_update():
    for st, out in random_epochs(5, epochs=15):
        pass
    fresh = Components().initialize(AppGraph.build(st.g, st.epoch))
    assert np.array_equal(fresh.labels, out["components"].labels)


@pytest.mark.parametrize("seed", [3, 4])
@READS
def test_incremental_landmark_distances_equal_a_fresh_bfs(seed, read, monkeypatch):
    """As a consumer holds them: the whole arrays of the epochs that chose landmarks, patched by the others."""
    monkeypatch.setattr(base, "READ_ENTRIES", read)
    recomputed = []
    for st, out in random_epochs(seed):
        G = nx_graph(st)
        lm = out["landmarks"]
        for j, l in enumerate(lm.ids.tolist()):
            fwd = nx.single_source_shortest_path_length(G, l)
            bwd = nx.single_source_shortest_path_length(G.reverse(copy=False), l)
            want_from = np.array([fwd.get(v, UNREACHABLE) for v in range(st.g.n)])
            want_to = np.array([bwd.get(v, UNREACHABLE) for v in range(st.g.n)])
            assert np.array_equal(st.dist_from[j], want_from), (st.epoch, l)
            assert np.array_equal(st.dist_to[j], want_to), (st.epoch, l)
        recomputed.append(st.apps.apps[-1].bfs_runs)
    # Deletions recompute only the affected landmarks: far fewer BFS runs than 2 per landmark per epoch.
    assert recomputed[-1] < 2 * 4 * len(recomputed) / 2
    assert st.patches > len(recomputed) / 2  # most epochs sent what they changed, not every distance


def test_landmarks_resend_whole_arrays_when_asked():
    st = Stream(AppConfig(landmarks=2))
    st.commit({(f"v{i}", f"v{i + 1}", "mentions"): 1 for i in range(20)})
    assert isinstance(st.commit({("v20", "v21", "mentions"): 1})["landmarks"].dist_to, Patch)
    st.apps.resend_whole()
    lm = st.commit({("v21", "v22", "mentions"): 1})["landmarks"]
    assert isinstance(lm.dist_to, np.ndarray) and isinstance(lm.dist_from, np.ndarray)
    assert lm.dist_to.shape == (2, st.g.n)
    assert isinstance(st.commit({("v22", "v23", "mentions"): 1})["landmarks"].dist_to, Patch)  # and patches again


def test_landmarks_stay_while_the_top_set_jitters():
    st = Stream(AppConfig(landmarks=4, landmark_drift=0.5))
    edges = {(f"v{i}", f"v{(i * 7 + 1) % 30}", "mentions"): 1 for i in range(30)}
    base = np.linspace(10, 1, 30)
    first = st.commit(edges, scores={"tunkrank": base})["landmarks"].ids.tolist()
    jitter = base.copy()
    jitter[[3, 4]] = jitter[[4, 3]]  # one landmark swaps with the fifth: 1 of 4 left, under the drift
    assert st.commit({}, scores={"tunkrank": jitter})["landmarks"].ids.tolist() == first
    moved = base[::-1].copy()  # the whole top set changes
    assert st.commit({}, scores={"tunkrank": moved})["landmarks"].ids.tolist() != first


@pytest.mark.parametrize("ties", [False, True])
def test_landmarks_are_the_top_by_score_then_id(ties):
    """The choice partitions the scores before it sorts: it must pick what a sort of every vertex picks,
    ties at the cut included (in-degree, the score before any ranking, ties a lot)."""
    rng = np.random.default_rng(3)
    st = Stream(AppConfig(landmarks=5))
    st.commit({(f"v{rng.integers(200)}", f"v{rng.integers(200)}", "mentions"): 1 for _ in range(400)})
    lm = st.apps.apps[-1]
    n = st.g.n
    scores = rng.integers(0, 3, n).astype(float) if ties else rng.random(n)
    graph = AppGraph(st.g, st.epoch, st.apps.adjacency, {"tunkrank": scores})
    cand = np.flatnonzero((graph.out_degree() + graph.in_degree()) > 0)
    want = cand[np.lexsort((cand, -scores[cand]))][:5]
    assert lm.choose(graph).tolist() == want.tolist()
    assert lm.choose(AppGraph(st.g, st.epoch, st.apps.adjacency, {})).tolist() == \
        cand[np.lexsort((cand, -graph.in_degree()[cand]))][:5].tolist()


def test_landmark_estimates_bound_the_true_distance_and_meet_it_through_a_landmark():
    checked_equal = 0
    for st, out in random_epochs(6, epochs=12, n0=40):
        G = nx_graph(st)
        lm = out["landmarks"]
        true = dict(nx.all_pairs_shortest_path_length(G))
        for a in range(st.g.n):
            for b in range(st.g.n):
                est, via = estimate(st.dist_to[:, a], st.dist_from[:, b])
                d = true[a].get(b)
                if d is None:
                    continue  # unreachable: no landmark route can exist either
                if est is None:
                    continue
                assert est >= d
                through = [l for l in lm.ids.tolist() if true[a].get(l, 1e9) + true[l].get(b, 1e9) == d]
                if through:
                    assert est == d
                    checked_equal += 1
    assert checked_equal > 100


def tweet(user, mentions=(), tags=(), ts=0.0):
    return tweets_transform(Tweet(user=user, mentions=list(mentions), hashtags=list(tags), ts=ts))


def test_k_exposure_curves_match_a_hand_count():
    """#x: a, b adopt unexposed; c adopts having seen a (k=1); d adopts having seen a, b, c (k=3); f adopts before
    g, whom it mentions (k=0); e mentions a and b and never adopts (reached k=1 and 2).
    Levels: a0 b0 c1 d3 f0 g0, e2 (never) -> reached(1..3) = 3, 2, 1; adopted at 1: c, at 3: d.
    p = [1/3, 0, 1, -, -, -, -, -]; persistence = (1/3 + 0 + 1) / (8 * 1) = 1/6.
    #y: p (ts 100) and q (ts 200) adopt in the same epoch and mention each other: q saw p first (k=1), p saw
    nobody earlier (k=0). p(1) = 1/1; persistence = 1/8."""
    st = Stream()
    st.tweets([tweet("a", tags=["x"], ts=1)])
    st.tweets([tweet("b", tags=["x"], ts=2), tweet("e", mentions=["a", "b"], ts=2), tweet("f", mentions=["g"], tags=["x"], ts=3)])
    st.tweets([tweet("c", mentions=["a"], tags=["x"], ts=4), tweet("g", tags=["x"], ts=4)])
    st.tweets([tweet("d", mentions=["a", "b", "c"], tags=["x"], ts=5), tweet("a", tags=["X"], ts=6)])
    out = st.tweets([tweet("q", mentions=["p"], tags=["y"], ts=200), tweet("p", mentions=["q"], tags=["y"], ts=100)])
    topics = out["topics"]
    by = {st.g.names[t]: i for i, t in enumerate(topics.tags.tolist())}
    x, y = by["#x"], by["#y"]
    assert topics.usage[x] == 7 and topics.users[x] == 6
    assert topics.reached[x].tolist() == [3, 2, 1, 0, 0, 0, 0, 0]
    np.testing.assert_allclose(topics.curve[x][:3], [1 / 3, 0, 1])
    assert np.isnan(topics.curve[x][3:]).all()
    assert topics.persistence[x] == pytest.approx(1 / 6)
    assert topics.usage[y] == 2 and topics.users[y] == 2
    assert topics.curve[y][0] == 1 and topics.persistence[y] == pytest.approx(1 / 8)
    assert list(by) == ["#x", "#y"]  # controversy order: higher persistence first
    # The per-epoch recount of the touched hashtags equals a recount of everything with the same stamps.
    exp = st.apps.exposure
    full = exp._count(AppGraph.build(st.g, st.epoch), st.apps.states["topics"], None)
    assert {h: (t.usage, t.users, t.reached.tolist(), t.adopted.tolist()) for h, t in full.items()} == {
        h: (t.usage, t.users, t.reached.tolist(), t.adopted.tolist()) for h, t in st.apps.states["topics"].topics.items()
    }
    # Trends: usage per hashtag is the number of tweets tagging it.
    usage = dict(zip((st.g.names[t] for t in out["trends"].tags.tolist()), out["trends"].usage.tolist()))
    assert usage == {"#x": 7, "#y": 2}


def test_exposure_stamps_survive_a_checkpoint():
    st = Stream()
    st.tweets([tweet("a", tags=["x"], ts=1)])
    st.tweets([tweet("b", mentions=["a"], tags=["x"], ts=2)])
    saved = st.apps.state_dict()
    again = Exposure()
    again.restore(saved["topics"])
    state = again.initialize(AppGraph.build(st.g, 99))  # everything arrives at once, as after a restore
    assert state.topics[st.g.index["#x"]].adopted.tolist()[0] == 1


def test_budgeted_recounts_run_on_the_side_and_match_the_every_epoch_count():
    """With a time budget the exposure counts run on a thread; once one lands, the published curves
    equal the every-epoch count as of the epoch it was started at, and say so in ``as_of``."""
    epochs = [
        [tweet("a", tags=["x"], ts=1)],
        [tweet("b", tags=["x"], ts=2), tweet("e", mentions=["a", "b"], ts=2)],
        [tweet("c", mentions=["a"], tags=["x", "y"], ts=4)],
        [tweet("d", mentions=["a", "b", "c"], tags=["x"], ts=5), tweet("q", mentions=["c"], tags=["y"], ts=6)],
    ]
    sync, side = Stream(), Stream(AppConfig(topics_budget=0.999))
    published = {}
    for batch in epochs:
        out = sync.tweets(batch)["topics"]
        published[sync.epoch] = out
        side.tweets(batch)
    exp = side.apps.exposure
    for _ in range(200):  # let the recount in flight land, then publish with one more (empty) epoch
        if exp._running is None or exp._running[0].done():
            break
        time.sleep(0.01)
    out = side.tweets([])["topics"]
    want = published[out.as_of]
    assert out.as_of >= 1
    assert out.tags.tolist() == want.tags.tolist()
    assert out.reached.tolist() == want.reached.tolist()
    np.testing.assert_allclose(out.persistence, want.persistence)


# -- K-exposure against a pure-Python count ------------------------------------------------------------


def random_tweet_epochs(seed: int, epochs: int = 8, users: int = 12, tags: int = 4):
    """Epochs of transactions (lists of updates): tweets with times drawn from a few values (ties), self-mentions
    included, and removals of live mentions and tags edges (a re-add after a removal keeps the edge's first time)."""
    rng = random.Random(seed)
    live: dict[tuple[str, str, str], int] = {}
    out = []
    for _ in range(epochs):
        batch = []
        for _ in range(rng.randrange(5, 20)):
            gone = [k for k, m in live.items() if m > 0]
            if gone and rng.random() < 0.25:
                s, d, t = rng.choice(gone)
                live[(s, d, t)] -= 1
                batch.append([EdgeUpdate(s, d, t, -1, fixed_weight(1.0), float(rng.randrange(6)))])
                continue
            user = f"u{rng.randrange(users)}"
            mentions = [f"u{rng.randrange(users)}" for _ in range(rng.randrange(5))]
            hashtags = [f"h{rng.randrange(tags)}" for _ in range(rng.randrange(3))]
            updates = tweet(user, mentions, hashtags, ts=float(rng.randrange(6)))
            for u in updates:
                if isinstance(u, EdgeUpdate):
                    live[(u.src, u.dst, u.type)] = live.get((u.src, u.dst, u.type), 0) + 1
            batch.append(updates)
        out.append(batch)
    return out


class ExposureModel:
    """The stream as plain dicts, and Romero et al.'s count over them, one user and hashtag at a time."""

    def __init__(self) -> None:
        self.mult: dict[tuple[str, str, str], int] = {}
        self.first: dict[tuple[str, str, str], float] = {}  # the earliest add time, kept across removals
        self.last_seen: dict[str, tuple[float, float]] = {}  # user -> (ts, last_seen), last writer by ts
        self.stamp: dict[tuple[str, str], tuple[int, float]] = {}  # (user, tag) -> (epoch, last_seen) when it went live

    def epoch(self, e: int, batch: list[list]) -> None:
        for updates in batch:
            for u in updates:
                if isinstance(u, EdgeUpdate):
                    key = (u.src, u.dst, u.type)
                    self.mult[key] = self.mult.get(key, 0) + u.sign
                    if u.sign > 0:
                        self.first[key] = min(self.first.get(key, math.inf), u.ts)
                elif "last_seen" in u.attrs and (u.id not in self.last_seen or u.ts >= self.last_seen[u.id][0]):
                    self.last_seen[u.id] = (u.ts, u.attrs["last_seen"])
        for (s, d, t), m in self.mult.items():
            if t == "tags" and m > 0 and (s, d) not in self.stamp:
                self.stamp[(s, d)] = (e, self.last_seen[s][1])

    def topics(self, edge_times: bool) -> dict[str, tuple]:
        """Hashtag -> (usage, users, reached[1..8], adopted[1..8]); adopters ordered by the tagging tweet's time
        (``edge_times``) or else by the epoch and the user's last tweet time then; ties by user name."""
        live = {k for k, m in self.mult.items() if m > 0}
        out = {}
        for h in sorted({d for s, d, t in live if t == "tags"}):
            adopters = {s for s, d, t in live if t == "tags" and d == h}

            def when(u):
                return ((0, self.first[(u, h, "tags")]) if edge_times else self.stamp[(u, h)]) + (u,)

            reached, adopted = [0] * 8, [0] * 8
            for u in {s for s, _, t in live if t == "mentions"} | adopters:
                seen = [v for v in adopters if (u, v, "mentions") in live]
                if u in adopters:
                    seen = [v for v in seen if when(v) < when(u)]
                    if 1 <= len(seen) <= 8:
                        adopted[len(seen) - 1] += 1
                for k in range(1, min(len(seen), 8) + 1):
                    reached[k - 1] += 1
            usage = sum(self.mult[(s, h, "tags")] for s in adopters)
            out[h] = (usage, len(adopters), reached, adopted)
        return out


def shard_epochs(epochs: list[list[list]], shards: int = 3):
    """Yields (graph, applications, topics output) after each epoch, through the real shards (edges keep their times)."""
    stores, g, apps, router = [ShardStore(i) for i in range(shards)], GlobalGraph(), Applications(), Router(shards)
    offset = 0
    for e, batch in enumerate(epochs, start=1):
        for updates in batch:
            router.add("p", offset, updates)
            offset += 1
        for store, b in zip(stores, router.take()):
            store.receive(b)
        merged = [g.apply_with_previous(s.apply(e, {"p": offset})[1]) for s in stores]
        changes = EdgeChanges.concat([c for c, _ in merged])
        before = EdgeChanges.concat([b for _, b in merged])
        yield g, apps, apps.run(g, e, changes, before, False, {"tunkrank": np.zeros(g.n)}, 0)["topics"]


def published(names: list[str], topics: dict) -> dict[str, tuple]:
    return {
        names[t]: (int(topics.usage[i]), int(topics.users[i]), topics.reached[i].tolist(),
                   np.nan_to_num(topics.curve[i], nan=-1.0).tolist())
        for i, t in enumerate(topics.tags.tolist())
    }


def expected(model: ExposureModel, edge_times: bool) -> dict[str, tuple]:
    return {
        h: (usage, users, reached, [a / r if r else -1.0 for a, r in zip(adopted, reached)])
        for h, (usage, users, reached, adopted) in model.topics(edge_times).items()
    }


def counted(names: list[str], topics: dict) -> dict[str, tuple]:
    return {names[h]: (t.usage, t.users, t.reached.tolist(), t.adopted.tolist()) for h, t in topics.items()}


@pytest.mark.parametrize(
    "seed,chunk,group,block", [(s, None, None, None) for s in range(6)] + [(0, 1, None, None), (1, 7, None, None), (2, None, 3, 5), (3, 7, 1, 1)],
)
def test_k_exposure_equals_a_pure_python_count_with_ties_and_removals(seed, chunk, group, block, monkeypatch):
    """Every epoch, incremental and from scratch, on both orders: edge times (real shards) and, for graphs
    without them, the stamps (epoch, last tweet time); also with the users counted in chunks of a few pairs,
    the hashtags in groups of a few adoptions and the mention edges read a few at a time."""
    for name, value in (("COUNT_CHUNK_PAIRS", chunk), ("GROUP_ADOPTIONS", group), ("EDGE_BLOCK", block)):
        if value is not None:
            monkeypatch.setattr(f"pulsegraph.compute.apps.exposure.{name}", value)
    epochs = random_tweet_epochs(seed)
    model, st = ExposureModel(), Stream()
    for e, ((g, apps, out), batch) in enumerate(zip(shard_epochs(epochs), epochs), start=1):
        model.epoch(e, batch)
        tweeted = st.tweets(batch)["topics"]  # before its names are read: a graph's names are a copy
        for want, graph, names, got, state, exp in (
            (model.topics(True), g, g.names, out, apps.states["topics"], apps.exposure),
            (model.topics(False), st.g, st.g.names, tweeted, st.apps.states["topics"], st.apps.exposure),
        ):
            assert counted(names, state.topics) == want
            assert counted(names, exp._count(AppGraph.build(graph, e), state, None)) == want
            # Some hashtags only (as an epoch recounts the ones it affected): the lower ids, so that tags
            # edges outside the recount name higher ids than any inside it.
            some = np.array(sorted(state.topics)[: len(state.topics) // 2 + 1], dtype=np.int64)
            part = counted(names, exp._count(AppGraph.build(graph, e), state, some))
            assert part == {names[h]: want[names[h]] for h in some.tolist() if names[h] in want}
        assert published(g.names, out) == expected(model, True)
        # Taggings with a time are ordered by it and keep no stamp; without edge times each has one.
        assert not len(apps.states["topics"].keys)
        assert len(st.apps.states["topics"].keys) >= sum(users for _, users, _, _ in model.topics(False).values())
    assert any(r[0] for _, _, r, _ in model.topics(True).values())  # exposures happened
    assert any(a[1:] != [0] * 7 for _, _, _, a in model.topics(True).values())  # some adopted after 2+ exposures


@pytest.mark.parametrize("seed", range(6))
@READS
def test_repair_after_deletions_equals_a_fresh_bfs_of_the_new_graph(seed, read, monkeypatch):
    """The landmarks' decremental step alone: many pairs gone at once (as a window expires them),
    chains and single-parent leaves among them, against a BFS of the graph that is left."""
    monkeypatch.setattr(base, "READ_ENTRIES", read)
    import scipy.sparse as sp

    from pulsegraph.compute.apps.base import CSR
    from pulsegraph.compute.apps.landmarks import UNREACHABLE, bfs, repair

    rng = np.random.default_rng(seed)
    n = 300
    pairs = {(int(a), int(b)) for a, b in rng.integers(0, n, (900, 2)) if a != b}
    pairs |= {(i, i + 1) for i in range(0, 60)}  # a long chain: a cut deep in it detaches its whole tail

    def adj(ps):
        s, d = (np.array(x, dtype=np.int64) for x in zip(*ps)) if ps else (np.zeros(0, np.int64),) * 2
        a = sp.csr_matrix((np.ones(len(s)), (s, d)), shape=(n, n))
        t = a.T.tocsr()
        return CSR(a.indptr.astype(np.int64), a.indices.astype(np.int64)), CSR(t.indptr.astype(np.int64), t.indices.astype(np.int64))

    out, inn = adj(sorted(pairs))
    dist = bfs(out, 0, n)
    gone = {p for p in pairs if rng.random() < 0.3} | {(30, 31)}
    left = sorted(pairs - gone)
    out2, inn2 = adj(left)
    ds, dd = (np.array(x, dtype=np.int64) for x in zip(*sorted(gone)))
    repaired = dist.copy()
    n_lost = repair(out2, inn2, repaired, dd[(dist[ds] < UNREACHABLE) & (dist[dd] == dist[ds].astype(np.int32) + 1)])
    assert np.array_equal(repaired, bfs(out2, 0, n))
    assert 0 < n_lost < n


@pytest.mark.parametrize("seed", range(4))
@READS
def test_bfs_of_many_sources_at_once_equals_a_bfs_from_each(seed, read, monkeypatch):
    """The landmarks' multi-source BFS against networkx's, one source at a time: 3 sources (8-bit lanes),
    16 (the default count, 16-bit), 70 (a chunk of 64 and one of 6), with a repeated source and ids that
    are no vertex among them."""
    monkeypatch.setattr(base, "READ_ENTRIES", read)
    import scipy.sparse as sp

    from pulsegraph.compute.apps.base import CSR
    from pulsegraph.compute.apps.landmarks import UNREACHABLE, bfs_many

    rng = np.random.default_rng(seed)
    n = 400
    # Skewed destinations and a few components: sources reach overlapping, nested and disjoint parts.
    s = rng.integers(0, n, 1500)
    d = (n * rng.power(0.4, 1500)).astype(np.int64) % n
    keep = (s // 100 == d // 100) | (rng.random(1500) < 0.2)
    s, d = s[keep], d[keep]
    a = sp.csr_matrix((np.ones(len(s)), (s, d)), shape=(n, n))
    adj = CSR(a.indptr.astype(np.int64), a.indices.astype(np.int64))
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(zip(s.tolist(), d.tolist()))
    for count in (3, 16, 70):
        sources = rng.choice(n, count, replace=False)
        sources[-1], sources[0] = sources[1], -1 if count > 3 else n  # a repeat, and an id that is no vertex
        got = bfs_many(adj, sources, n)
        assert got.shape == (count, n) and got.dtype == np.uint16
        for row, src in zip(got, sources.tolist()):
            want = np.full(n, UNREACHABLE, dtype=np.uint16)
            if 0 <= src < n:
                for v, hops in nx.single_source_shortest_path_length(g, src).items():
                    want[v] = hops
            assert np.array_equal(row, want), (count, src)


@pytest.mark.slow  # a BFS down a 65,538-hop chain, ~5 s: make test runs it, make check does not
def test_a_path_longer_than_uint16_hops_reads_as_unreachable_past_the_last_hop():
    """Distances are uint16: past 65,534 hops a vertex reads as unreachable, and no hop count wraps to 0."""
    from pulsegraph.compute.apps.base import CSR
    from pulsegraph.compute.apps.landmarks import UNREACHABLE, bfs

    n = int(UNREACHABLE) + 3
    chain = CSR(np.concatenate([np.arange(n, dtype=np.int64), [n - 1]]), np.arange(1, n, dtype=np.int64))
    dist = bfs(chain, 0, n)
    assert dist.dtype == np.uint16
    assert np.array_equal(dist[: int(UNREACHABLE)], np.arange(int(UNREACHABLE)))
    assert (dist[int(UNREACHABLE):] == UNREACHABLE).all()


def test_a_patch_names_each_written_entry_once_in_order_and_gives_up_past_its_limit():
    arr = np.arange(30, dtype=np.uint16).reshape(3, 10)
    written = [[np.array([7, 2, 7]), np.array([2])], [], [np.array([9, 0])]]
    p = Patch.of(4, arr, written)
    assert p.base == 4 and p.shape == (3, 10)
    assert p.keys.tolist() == [2, 7, (2 << 32) | 0, (2 << 32) | 9] and p.values.tolist() == [2, 7, 20, 29]
    assert (p.applied_to(np.zeros((3, 8), np.uint16), 65535) == np.where(
        np.isin(np.arange(30).reshape(3, 10), [2, 7, 20, 29]), arr, np.pad(np.zeros((3, 8)), ((0, 0), (0, 2)), constant_values=65535))).all()
    assert Patch.of(4, arr, written, limit=4) is not None and Patch.of(4, arr, written, limit=3) is None
