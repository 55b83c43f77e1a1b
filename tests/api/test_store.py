"""The store's vertex names under reused ids (window mode), and the epochs it lets go because of them.

Real :class:`~pulsegraph.compute.results.EpochResult` objects in a real ResultStore, with the
:class:`~pulsegraph.compute.ids.NameChanges` the compute actor hands the feed.
"""

from __future__ import annotations

import numpy as np
import pytest

import pulsegraph.api.namebook
import pulsegraph.api.names
from pulsegraph.api.exceptions import NotFound
from pulsegraph.api.store import ResultStore
from pulsegraph.compute.ids import NameChanges
from pulsegraph.compute.results import EpochResult

NAMES = ["a", "b", "c", "d", "e"]


def epoch(e: int, n: int, present: list[bool] | None = None, reuse_after: float | None = None, skipped=(),
          watermark: float | None = None) -> EpochResult:
    mask = None if present is None else np.asarray(present, dtype=bool)
    return EpochResult(
        epoch=e, vector={"p:0": e}, records=e, vertices=n if mask is None else int(mask.sum()), edges=0,
        committed_at=1.7e9 + e, commit_ms=1.0, timeliness_ms={"p50": 1.0, "p99": 1.0, "max": 1.0},
        scores={"pagerank": np.linspace(1.0, 0.0, n)}, out_degree=np.zeros(n, np.int32), in_degree=np.zeros(n, np.int32),
        present=mask, reuse_after=reuse_after, skipped=list(skipped), watermark=float(e) if watermark is None else watermark,
    )


def listed(store: ResultStore, prefix: str = "") -> list[str]:
    """Every name ``search`` finds in the newest epoch."""
    r = store.get().result
    return store.search(prefix, 100, r.known_vertices(), present=r.present)


def named_store() -> ResultStore:
    store = ResultStore(retain=10)
    store.add([epoch(1, 5, [True] * 5)], NameChanges(0, NAMES))
    return store


def test_renames_free_move_and_append_names_each_indexed_once():
    store = named_store()
    # 0 is renamed; 1 is renamed and freed again (the last write holds); "c" moves from 2 to 3 (written on 3
    # before 2 is freed, so "d" goes); "e" moves from 4 to a new id; 5 and 6 are new.
    changes = NameChanges(5, ["f", "e"], np.array([0, 1, 3, 2, 1, 4]), ["alpha", "tmp", "c", "", "", ""])
    store.add([epoch(2, 7, [True] * 7)], changes)
    assert store.names == ["alpha", "", "", "c", "", "f", "e"]
    assert store.index == {"alpha": 0, "c": 3, "f": 5, "e": 6}
    assert listed(store) == ["alpha", "c", "e", "f"]
    assert listed(store, "c") == ["c"]
    assert store.vertex_id("c") == 3 and store.vertex_id("e") == 6
    for gone in ("a", "b", "d", "tmp", ""):
        with pytest.raises(NotFound):
            store.vertex_id(gone)


@pytest.mark.parametrize("ids, renamed", [([2, 3], ["", "c"]), ([3, 2], ["c", ""])], ids=["freed-first", "written-first"])
def test_a_name_that_moves_follows_its_new_id_in_either_order(ids, renamed):
    store = named_store()
    store.add([epoch(2, 5, [True] * 5)], NameChanges(5, [], np.array(ids), renamed))
    assert store.index["c"] == 3 and "d" not in store.index
    assert listed(store) == ["a", "b", "c", "e"]
    # Its new id is what the presence mask is checked on: out of the snapshot, the name is not found.
    store.add([epoch(3, 5, [True, True, True, False, True])], None)
    assert listed(store) == ["a", "b", "e"]


def test_names_from_id_0_replace_the_list_and_the_index_whole():
    store = named_store()
    store.add([epoch(2, 3, [True] * 3)], NameChanges(0, ["x", "", "y"], np.array([0]), ["zzz"]))
    assert store.names == ["x", "", "y"]
    assert store.index == {"x": 0, "y": 2}
    assert listed(store) == ["x", "y"]
    with pytest.raises(NotFound):
        store.vertex_id("a")


def reference_names(names: list[str], index: dict[str, int], changes: NameChanges) -> tuple[list[str], dict[str, int]]:
    """The names and the index after ``changes``, one write at a time: the obvious way."""
    names, index = (list(names), dict(index)) if changes.start else ([], {})
    writes = list(zip(np.asarray(changes.ids).tolist(), changes.renamed)) if changes.start else []
    for i, n in writes + [(changes.start + j, n) for j, n in enumerate(changes.names)]:
        names += [""] * (i + 1 - len(names))
        if names[i] and index.get(names[i]) == i:
            del index[names[i]]
        names[i] = n
        if n:
            index[n] = i
    return names, index


@pytest.mark.parametrize("rebuild_min", [pulsegraph.api.namebook.REBUILD_MIN, 0])
@pytest.mark.parametrize("seed", range(20))
def test_names_patched_in_place_match_the_names_written_one_by_one(seed, rebuild_min, monkeypatch):
    # The book's base rebuilt as rarely as the service does (never, for so few names), and every time.
    monkeypatch.setattr(pulsegraph.api.namebook, "REBUILD_MIN", rebuild_min)
    rng = np.random.default_rng(seed)
    pool = ["", *(f"n{k}" for k in range(12))]  # few names, so they move between ids and come back
    store = ResultStore(retain=4)
    names: list[str] = []
    index: dict[str, int] = {}
    for e in range(1, 9):
        start = 0 if e == 1 or rng.random() < 0.1 else int(rng.integers(1, len(names) + 1))
        given = [str(rng.choice(pool)) for _ in range(int(rng.integers(0, 4)) if start else int(rng.integers(1, 8)))]
        end = max(len(names), start + len(given))
        ids = rng.integers(0, end, int(rng.integers(0, 8))) if start else np.zeros(0, np.int64)
        changes = NameChanges(start, given, ids, [str(rng.choice(pool)) for _ in ids])
        names, index = reference_names(names, index, changes)
        store.add([epoch(e, len(names), [True] * len(names))], changes)
        assert store.names == names and store.index == index, e
        # What search goes through: each indexed name once, in order (names no longer indexed may linger).
        held = list(store._book.starting(""))
        assert held == sorted(set(held)) and [n for n in held if n in index] == sorted(index), e
        assert listed(store) == sorted(index)[:100], e


@pytest.mark.parametrize("seed", range(10))
def test_a_whole_list_over_names_the_store_has_is_taken_as_what_differs(seed, monkeypatch):
    # A restart's first pull: every id named again, nearly all as the store had them (ids given back and
    # taken, names moved, new ids past the end); the same names, index and search as a fresh whole list.
    rng = np.random.default_rng(seed)
    old = [f"v{k}" if rng.random() < 0.9 else "" for k in range(200)]
    new = list(old) + [f"w{k}" for k in range(int(rng.integers(0, 20)))]
    for i in rng.integers(0, len(old), 15).tolist():
        new[i] = "" if rng.random() < 0.3 else f"m{i}"
    a, b = rng.integers(0, len(old), 2).tolist()
    new[a], new[b] = new[b], new[a]  # a name moved to another id
    patched = ResultStore(retain=4)
    patched.add([epoch(1, len(old), [True] * len(old))], NameChanges(0, old))
    spy = counting(pulsegraph.api.store.names_update)
    monkeypatch.setattr(pulsegraph.api.store, "names_update", spy)
    patched.add([epoch(2, len(new), [True] * len(new))], NameChanges(0, new))
    assert spy.given[-1].start == len(old), "taken as a patch"
    fresh = ResultStore(retain=4)
    fresh.add([epoch(2, len(new), [True] * len(new))], NameChanges(0, new))
    assert patched.names == fresh.names == new and patched.index == fresh.index
    for prefix in ("v", "v1", "m", "w", "z"):
        assert patched.search(prefix, 500, len(new)) == fresh.search(prefix, 500, len(new)), prefix


def counting(fn):
    """``fn`` that keeps the last argument of each call in ``.given``."""
    def spy(*args):
        spy.given.append(args[-1])
        return fn(*args)
    spy.given = []  # type: ignore[attr-defined]
    return spy


def test_names_that_would_skip_ids_are_refused_and_change_nothing():
    store = named_store()
    with pytest.raises(ValueError):
        store.add([epoch(2, 7)], NameChanges(6, ["g"]))
    assert store.names == NAMES and store.epoch_numbers() == [1]


def test_epochs_whose_ids_may_name_other_vertices_now_are_let_go():
    store = ResultStore(retain=8)
    store.add([], NameChanges(0, NAMES))
    ranked = [e for e in range(1, 13) if e != 6]  # 6 is merged into 7
    for e in ranked:
        # Event time runs 10 s an epoch here: a 50 s delay lets go of the epochs 5 or more behind.
        store.add([epoch(e, 5, [True] * 5, reuse_after=50.0, skipped=[6] if e == 7 else [], watermark=10.0 * e)], None)
        assert store.epoch_numbers() == [k for k in ranked if e - 5 < k <= e], e
        assert store.get(store.epoch_numbers()[0]).previous is None
    with pytest.raises(NotFound) as got:
        store.get(6)
    assert got.value.code == "epoch_not_found"  # its ranked epoch 7 is gone, and with it what it merged
    # An epoch that does not give ids back evicts nothing beyond the retention.
    store.add([epoch(13, 5, watermark=130.0)], None)
    assert store.epoch_numbers() == [8, 9, 10, 11, 12, 13]


def test_the_delay_is_counted_on_the_watermark_not_on_epochs():
    """While the watermark stands still (no new event time) nothing can be given back, so nothing is let
    go beyond the retention; once it jumps past the delay, every epoch but the newest is."""
    store = ResultStore(retain=8)
    store.add([], NameChanges(0, NAMES))
    for e in range(1, 13):
        store.add([epoch(e, 5, [True] * 5, reuse_after=50.0, watermark=min(10.0 * e, 40.0))], None)
    assert store.epoch_numbers() == list(range(5, 13))
    store.add([epoch(13, 5, [True] * 5, reuse_after=50.0, watermark=89.0)], None)
    assert store.epoch_numbers() == list(range(6, 14))  # 40 > 89 - 50: still safe
    store.add([epoch(14, 5, [True] * 5, reuse_after=50.0, watermark=90.0)], None)
    assert store.epoch_numbers() == [13, 14]


def test_the_retention_still_bounds_the_epochs_kept():
    store = ResultStore(retain=3)
    store.add([], NameChanges(0, NAMES))
    for e in range(1, 13):
        store.add([epoch(e, 5, [True] * 5, reuse_after=5.0)], None)
        assert store.epoch_numbers() == list(range(max(1, e - 2), e + 1))


def test_the_graph_view_lets_go_of_what_only_evicted_epochs_saw():
    """Each epoch an edge a -> x lives and the one before dies: once the store lets an epoch go (ids
    reused), its undo record and the slot of an edge only it saw live are gone too, reused by new edges."""
    from pulsegraph.compute.changes import EdgeChanges  # noqa: PLC0415

    store = ResultStore(retain=100)
    store.add([], NameChanges(0, NAMES))
    for e in range(1, 21):
        r = epoch(e, 5, [True] * 5, reuse_after=4.0)
        born, died = e % 4 + 1, (e - 1) % 4 + 1
        z = np.zeros(2, np.int64)
        r.edge_changes = EdgeChanges(np.zeros(2, np.int32), np.array([born, died], np.int32), np.zeros(2, np.int16),
                                     np.array([1, 0]), np.array([1, 0]) if e > 1 else z, None)
        store.add([r], None)
        kept = store.epoch_numbers()
        assert kept == list(range(max(1, e - 3), e + 1))
        assert store.graph.kept_from == max(1, kept[0])  # no undo record for an epoch let go
        assert store.graph.slots <= 5  # dead edges' slots are reused: 4 destinations, a slot each at most
        out, _, mult, _ = store.graph.neighbors(0, "out", kept[0])
        assert out.tolist() == [kept[0] % 4 + 1] and mult.tolist() == [1]


def test_kept_hub_answers_are_bounded_and_the_least_recently_read_goes_first():
    from pulsegraph.api.hubs import HubEdges

    hubs = HubEdges(size=2)
    edges = tuple(np.arange(3) for _ in range(4))
    hubs.put((1, 7, "in", None, 20), edges)
    hubs.put((1, 8, "in", None, 20), edges)
    assert hubs.get((1, 7, "in", None, 20)) is edges  # read: now the most recent
    hubs.put((2, 7, "in", None, 20), edges)
    assert len(hubs) == 2 and hubs.get((1, 8, "in", None, 20)) is None
    assert hubs.get((1, 7, "in", None, 20)) is edges and hubs.get((2, 7, "in", None, 20)) is edges


def test_threads_asking_for_the_same_hub_answer_wait_for_one_read():
    """A new epoch's first reads of a hub come together: one thread reads, the others wait for its answer;
    an answer not kept (no hub) is still handed to those waiting, and a failed read makes each read alone."""
    import threading
    import time

    from pulsegraph.api.hubs import HubEdges

    hubs, go, calls, got = HubEdges(), threading.Event(), [], []
    answer = tuple(np.arange(3) for _ in range(4))

    def read(fails: bool = False):
        calls.append(threading.get_ident())
        go.wait(timeout=10)
        if fails:
            raise LookupError("epoch gone")
        return answer, False  # not kept: only the waiting threads share it

    def ask(key, fails=False):
        try:
            got.append(hubs.once(key, lambda: read(fails)))
        except LookupError as e:
            got.append(e)

    def wait_for(cond):
        deadline = time.monotonic() + 10
        while not cond():
            assert time.monotonic() < deadline
            time.sleep(0.001)

    for fails in (False, True):
        for started in (calls, got):
            started.clear()
        go.clear()
        key = (1, 7, "in", None, 20, fails)
        threads = [threading.Thread(target=ask, args=(key, fails)) for _ in range(4)]
        threads[0].start()
        wait_for(lambda: key in hubs._flights)
        for t in threads[1:]:
            t.start()
        wait_for(lambda: hubs._flights[key].waiters == 3)
        go.set()
        for t in threads:
            t.join(timeout=10)
        assert not hubs._flights and len(hubs) == 0
        if not fails:
            assert len(calls) == 1 and len(got) == 4 and all(g is answer for g in got)
        else:  # the reader's error, then each waiting thread's own read and error
            assert len(calls) == 4 and len(got) == 4 and all(isinstance(g, LookupError) for g in got)
