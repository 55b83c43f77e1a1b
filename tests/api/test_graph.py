"""The API's graph view against a brute-force replay: neighbors as of every retained epoch."""

from __future__ import annotations

import random

import numpy as np
import pytest

from pulsegraph.api.exceptions import NotFound
from pulsegraph.api.graph import GraphHistory
from pulsegraph.base import keyindex
from pulsegraph.base.edgekey import MAX_TYPES, MAX_VERTICES
from pulsegraph.compute.changes import EdgeChanges


def random_epochs(n_epochs: int, seed: int, vertices: int = 30, types: int = 3):
    """Per epoch, the changed edges with their new absolute state, as the compute stage publishes them."""
    rng = random.Random(seed)
    state: dict[tuple[int, int, int], tuple[int, int]] = {}
    epochs = []
    for _ in range(n_epochs):
        changed = {}
        for _ in range(rng.randrange(0, 40)):
            key = (rng.randrange(vertices), rng.randrange(vertices), rng.randrange(types))
            m, w = state.get(key, (0, 0))
            step = rng.choice([1, 1, -1])
            state[key] = changed[key] = (m + step, w + step * rng.choice([500_000, 1_000_000, 2_000_000]))
        epochs.append((dict(changed), dict(state)))
    return epochs


def as_changes(changed: dict) -> EdgeChanges:
    keys = list(changed)
    return EdgeChanges(
        np.array([k[0] for k in keys], np.int32), np.array([k[1] for k in keys], np.int32),
        np.array([k[2] for k in keys], np.int16), np.array([changed[k][0] for k in keys], np.int64),
        np.array([changed[k][1] for k in keys], np.int64),
    )


def expected(state: dict, v: int, direction: str) -> set:
    out = set()
    for (s, d, t), (m, w) in state.items():
        if m > 0 and (s if direction == "out" else d) == v:
            out.add((d if direction == "out" else s, t, m, w))
    return out


def got(g: GraphHistory, v: int, direction: str, epoch: int | None) -> set:
    return set(zip(*(a.tolist() for a in g.neighbors(v, direction, epoch))))


def test_neighbors_as_of_every_retained_epoch():
    epochs = random_epochs(40, seed=3)
    g = GraphHistory(retain=15)
    for e, (changed, _) in enumerate(epochs, start=1):
        g.apply(e, as_changes(changed))
        g.apply(e, as_changes(changed))  # the same epoch twice changes nothing
    latest = len(epochs)
    for e in range(latest - 14, latest + 1):
        state = epochs[e - 1][1]
        for v in range(30):
            for direction in ("out", "in"):
                assert got(g, v, direction, e) == expected(state, v, direction), (e, v, direction)
    assert g.missed_epochs == 0


def test_neighbors_now_reads_what_neighbors_reads_or_declines_without_waiting():
    """The event loop's read: the same edges, or None at once while an epoch is being applied (the lock is
    held) or where the vertex has more edges that way than the loop may read."""
    epochs = random_epochs(20, seed=11)
    g = GraphHistory(retain=10)
    for e, (changed, _) in enumerate(epochs, start=1):
        g.apply(e, as_changes(changed))
    declined = 0
    for e in (len(epochs), len(epochs) - 5):
        for v in range(30):
            for direction in ("out", "in"):
                whole = g.neighbors(v, direction, e)
                now = g.neighbors_now(v, direction, e, most=1000)
                assert now is not None and all(np.array_equal(a, b) for a, b in zip(now, whole)), (e, v, direction)
                small = g.neighbors_now(v, direction, e, most=2)
                if small is None:
                    declined += 1  # more than two edges stored that way (live, or kept for an older epoch)
                else:
                    assert len(small[0]) <= 2 and all(np.array_equal(a, b) for a, b in zip(small, whole))
    assert declined  # some vertices of 30 with up to 40 changes an epoch have more than two
    with g._lock.write():  # an epoch being applied, as the feed thread does
        assert g.neighbors_now(0, "out", None, most=1000) is None


def test_an_epoch_that_merged_sealed_ones_undoes_back_to_the_ranked_epoch_before():
    """Ranking fell behind: epoch 4 covers the sealed epochs 2 and 3, so the store retains 1 and 4. The
    graph as of epoch 1 is still kept after the store forgets what only serves epochs before 1."""
    epochs = random_epochs(4, seed=5)
    merged = {**epochs[1][0], **epochs[2][0], **epochs[3][0]}
    g = GraphHistory(retain=15)
    g.apply(1, as_changes(epochs[0][0]))
    g.apply(4, as_changes(merged), since=2)
    g.forget_before(1)
    assert g.kept_from == 1 and g.missed_epochs == 0
    for e, state in ((1, epochs[0][1]), (4, epochs[3][1])):
        for v in range(30):
            for direction in ("out", "in"):
                assert got(g, v, direction, e) == expected(state, v, direction), (e, v, direction)
    g.apply(5, EdgeChanges.empty())
    g.forget_before(4)  # epoch 1 left the retention: epoch 4 is the oldest whose graph is kept
    assert g.kept_from == 4


def test_an_edge_changed_twice_in_one_epoch_keeps_its_last_change():
    g = GraphHistory()
    rows = EdgeChanges(np.array([1, 2, 1, 3], np.int32), np.array([2, 3, 2, 1], np.int32), np.zeros(4, np.int16),
                       np.array([1, 1, 3, 1], np.int64), np.array([10, 20, 30, 40], np.int64))
    g.apply(1, rows)
    assert got(g, 1, "out", None) == {(2, 0, 3, 30)}
    assert got(g, 2, "out", None) == {(3, 0, 1, 20)} and got(g, 3, "out", None) == {(1, 0, 1, 40)}
    g.apply(2, EdgeChanges(*(np.repeat(c[:1], 3) for c in (rows.src, rows.dst, rows.etype)),
                           np.array([2, 0, 5], np.int64), np.array([1, 2, 50], np.int64)), full=True)
    assert got(g, 1, "out", None) == {(2, 0, 5, 50)} and got(g, 2, "out", None) == set()
    assert got(g, 1, "out", 1) == {(2, 0, 3, 30)}


def test_a_gap_is_counted():
    g = GraphHistory()
    g.apply(1, EdgeChanges.empty())
    g.apply(4, EdgeChanges.empty())
    assert g.missed_epochs == 2


def test_a_full_epoch_replaces_the_graph_and_older_epochs_still_answer():
    epochs = random_epochs(12, seed=5)
    g = GraphHistory(retain=20)
    for e, (changed, _) in enumerate(epochs[:6], start=1):
        g.apply(e, as_changes(changed))
    # A restore (epochs 7..9 never reached this view): epoch 10 comes as the whole graph, once.
    whole = dict(epochs[9][1])
    g.apply(10, as_changes(whole), full=True)
    g.apply(11, as_changes(epochs[10][0]))
    assert g.missed_epochs == 0
    for v in range(30):
        for direction in ("out", "in"):
            assert got(g, v, direction, None) == expected(epochs[10][1], v, direction)
            assert got(g, v, direction, 10) == expected(epochs[9][1], v, direction)
            assert got(g, v, direction, 5) == expected(epochs[4][1], v, direction)


def test_the_first_epoch_into_an_empty_view_keeps_no_undo_record_of_its_edges():
    epochs = random_epochs(8, seed=11)
    whole = dict(epochs[3][1])  # a restart's view begins with the whole graph as of epoch 4
    whole[(0, 1, 0)] = (0, 0)  # an edge with nothing left in it: its slot must still be freed in time
    g = GraphHistory(retain=3)
    g.apply(4, as_changes(whole), full=True)
    rec = g.undo_record(4)
    empty = sum(1 for m, w in whole.values() if not m and not w)
    assert rec is not None and len(rec["slots"]) == empty >= 1, "only the empty edges' slots, which _release needs"
    assert g.kept_from == 4
    with pytest.raises(NotFound):
        g.neighbors(0, "out", 3)
    for e in range(5, 9):
        g.apply(e, as_changes(epochs[e - 1][0]))
        assert len(g.undo_record(e)["slots"]) == len(epochs[e - 1][0]), "later epochs keep their records whole"
    for e in range(g.kept_from, 9):
        for v in range(30):
            for direction in ("out", "in"):
                assert got(g, v, direction, e) == expected(epochs[e - 1][1], v, direction), (e, v, direction)
    assert g.held == sum(1 for k, (m, w) in epochs[7][1].items() if m or w or any(
        k in epochs[i][0] for i in range(5, 8))), "the empty edge's slot was freed with epoch 4's record"


def churning_epochs(n_epochs: int, seed: int, vertices: int = 30, types: int = 2, life: int = 3):
    """A sliding window's changes: each epoch adds edges and the edges added ``life`` epochs before
    expire (multiplicity and weight 0, as the compute stage publishes an expiry); some come back later."""
    rng = random.Random(seed)
    state: dict[tuple[int, int, int], tuple[int, int]] = {}
    born: list[list[tuple[int, int, int]]] = []
    epochs = []
    for e in range(n_epochs):
        changed = {}
        if e >= life:
            for key in born[e - life]:
                if state.get(key, (0, 0))[0] > 0:
                    state[key] = changed[key] = (0, 0)
        new = []
        for _ in range(rng.randrange(10, 30)):
            key = (rng.randrange(vertices), rng.randrange(vertices), rng.randrange(types))
            if state.get(key, (0, 0))[0] == 0 and key not in changed:
                state[key] = changed[key] = (1, rng.choice([500_000, 1_000_000]))
                new.append(key)
        born.append(new)
        epochs.append((dict(changed), dict(state)))
    return epochs


@pytest.mark.parametrize("min_dead", [keyindex.MIN_DEAD, 2], ids=["tombstones", "compactions"])
def test_expired_edges_give_their_slots_back_once_out_of_the_retention(min_dead, monkeypatch):
    # With a small MIN_DEAD the indexes compact every few epochs; either way the answers are the same.
    monkeypatch.setattr(keyindex, "MIN_DEAD", min_dead)
    retain, life = 6, 3
    epochs = churning_epochs(300, seed=11, life=life)
    g = GraphHistory(retain=retain)
    most = bound = 0
    for e, (changed, state) in enumerate(epochs, start=1):
        g.apply(e, as_changes(changed))
        # Live edges plus those that died within the retention, never every edge ever seen.
        live_or_recent = {k for k, _ in changed.items()} | {k for k, (m, _) in state.items() if m > 0}
        for changed_before, _ in epochs[max(0, e - retain - 1) : e]:
            live_or_recent |= set(changed_before)
        bound = max(bound, len(live_or_recent))
        assert g.slots <= bound, e  # free slots are taken before new ones are made
        most = max(most, g.slots)
        if e % 37 == 0 or e == len(epochs):
            for back in range(e - retain + 1, e + 1):
                for v in range(30):
                    for direction in ("out", "in"):
                        assert got(g, v, direction, back) == expected(epochs[back - 1][1], v, direction), (e, back, v)
    ever = len({k for changed, _ in epochs for k in changed})
    assert most < ever / 2, (most, ever)


def test_a_small_epoch_does_not_rewrite_the_indexes_of_a_large_graph():
    """An epoch's changes land in small runs of the indexes; the large run holding the graph's first
    200,000 edges is the same array afterwards, not a copy of it with the changes merged in."""
    rng = np.random.default_rng(5)
    n = 200_000
    g = GraphHistory(retain=4)
    src, dst = rng.integers(0, 50_000, n), rng.integers(0, 50_000, n)
    g.apply(1, EdgeChanges(src, dst, np.zeros(n, np.int16), np.ones(n, np.int64), np.ones(n, np.int64)))
    largest = [i._runs[0].keys for i in (g._keys, g._by_dst)]
    for e in range(2, 12):
        s, d = rng.integers(0, 50_000, 100), rng.integers(0, 50_000, 100)
        ended = rng.integers(0, n, 100)
        g.apply(e, EdgeChanges(np.r_[s, src[ended]], np.r_[d, dst[ended]], np.zeros(200, np.int16),
                               np.r_[np.ones(100), np.zeros(100)].astype(np.int64), np.r_[np.ones(100), np.zeros(100)].astype(np.int64)))
    for index, before in zip((g._keys, g._by_dst), largest):
        assert index._runs[0].keys is before


def test_the_highest_vertex_ids_and_types_the_key_holds_have_their_neighbors():
    """Out-edges are a range of the packed edge key, whose last vertex's range ends past 2**64."""
    top, t = MAX_VERTICES - 1, MAX_TYPES - 1
    g = GraphHistory(retain=4)
    g.apply(1, as_changes({(top, top, t): (1, 1), (top, 0, 0): (2, 2), (top - 1, top, t): (1, 1), (0, top, 0): (1, 1)}))
    assert got(g, top, "out", None) == {(top, t, 1, 1), (0, 0, 2, 2)}
    assert got(g, top - 1, "out", None) == {(top, t, 1, 1)}
    assert got(g, top, "in", None) == {(top, t, 1, 1), (top - 1, t, 1, 1), (0, 0, 1, 1)}


def test_multiplicities_past_int32_answer_exactly_as_of_every_epoch():
    """The view keeps multiplicities narrow until one needs int64; older epochs read their undo records
    (kept narrow before the column widened) as they were."""
    g = GraphHistory(retain=10)
    states = []
    for e, m in enumerate([1, 2**30, 2**31 + 7, 5, 2**40], start=1):
        g.apply(e, as_changes({(0, 1, 0): (m, 7)}))
        states.append(m)
    for e, m in enumerate(states, start=1):
        assert got(g, 0, "out", e) == {(1, 0, m, 7)}
        assert got(g, 1, "in", e) == {(0, 0, m, 7)}


@pytest.mark.parametrize("seed", range(5))
def test_the_heaviest_edges_are_the_head_of_a_sort_of_all(seed):
    """The neighbors route's selection (a partition by weight, then a sort of the edges at or above the k-th
    weight) against a sort of every edge, with ties in weight and in multiplicity, and edges of several types
    between the same two vertices (the order they came in must not matter)."""
    from pulsegraph.api.queries import heaviest

    rng = np.random.default_rng(seed)
    for size in (0, 1, 5, 40, 3000):
        other = rng.permutation(size).astype(np.int32) // 2  # two edges (of two types) to most other ends
        etype = (rng.permutation(size) % 2).astype(np.int16)
        mult = rng.integers(1, 4, size).astype(np.int64)
        weight = rng.integers(1, 6 if seed % 2 else 10**6, size).astype(np.int64) * 500_000
        whole = np.lexsort((etype, other, -mult, -weight))
        for k in (1, 3, 20, 1000):
            assert heaviest(other, mult, weight, k, etype).tolist() == whole[:k].tolist(), (size, k)
