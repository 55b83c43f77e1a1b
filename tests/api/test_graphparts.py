"""The API's graph view split over parts by vertex against the whole view: the same edges as of every retained
epoch, through full epochs, merged ones, retention and a lost part; and every graph route's answer, byte for byte."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsegraph.api.exceptions import NotFound, Unavailable
from pulsegraph.api.graph import GraphHistory
from pulsegraph.api.graphparts import LocalParts, PartitionedGraph, PartLost, rows_of
from tests.api.test_graph import as_changes, random_epochs

VERTICES = 30


def same(a, b) -> bool:
    """The same edges: in-edges come in the order of their slots, which the parts number apart (the routes order
    what they answer themselves); out-edges in the same order."""
    def ordered(edges):
        at = np.lexsort((edges[1], edges[0]))
        return [x[at] for x in edges]
    return all(np.array_equal(x, y) for x, y in zip(ordered(a), ordered(b), strict=True))


def check_alike(whole: GraphHistory, parted: PartitionedGraph) -> None:
    assert (parted.epoch, parted.kept_from, parted.missed_epochs) == (whole.epoch, whole.kept_from, whole.missed_epochs)
    for e in range(whole.kept_from, whole.epoch + 1):
        for direction in ("out", "in"):
            many = parted.neighbors_many(list(range(VERTICES)), direction, e)
            for v in range(VERTICES):
                assert same(whole.neighbors(v, direction, e), many[v]), (e, v, direction)
            assert same(whole.neighbors(e % VERTICES, direction, e), parted.neighbors(e % VERTICES, direction, e))
    if whole.kept_from > 1:
        with pytest.raises(NotFound) as why:
            parted.require(whole.kept_from - 1)
        assert why.value.code == "graph_not_retained"


def drive(seed: int, parts: int, n_epochs: int, check_every: int, retain: int = 12) -> None:
    """Random epochs (adds, removes, re-adds), now and then a merged one (``since``), a missed one, a whole
    one and a retention cut, into the whole view and into ``parts`` parts, which map their cold undo records
    from files: every read as of every kept epoch holds the same edges (checked every ``check_every`` epochs
    and after each whole one)."""
    with tempfile.TemporaryDirectory() as spill:
        _drive(seed, parts, n_epochs, check_every, retain, Path(spill))


def _drive(seed: int, parts: int, n_epochs: int, check_every: int, retain: int, spill: Path) -> None:
    rng = random.Random(seed)
    epochs = random_epochs(n_epochs, seed=seed, vertices=VERTICES)
    whole, local = GraphHistory(retain=retain), LocalParts(parts, retain=retain, spill=spill)
    parted = PartitionedGraph(local)
    e = 0
    for k, (changed, state) in enumerate(epochs):
        e += rng.choice([1, 1, 1, 2])  # 2: the epoch before was merged into this one, or missed
        full = rng.random() < 0.08
        ch = as_changes(state if full else changed)  # a whole epoch names every edge (the gone ones as 0)
        since = e - 1 if rng.random() < 0.5 else None
        for g in (whole, parted):
            g.apply(e, ch, full, since)
        if rng.random() < 0.2:
            cut = e - rng.randrange(1, 8)
            for g in (whole, parted):
                g.forget_before(cut)
        if k % check_every == check_every - 1 or full:
            check_alike(whole, parted)
        for q, m in enumerate(local.members):
            # Every retained record but the newest epoch's that holds a change is read from its file, and no file
            # outlives its record.
            retained = m.graph.undo_epochs()
            files = sorted(int(f.stem.split("-")[1]) for f in (spill / str(q)).glob("epoch-*.undo"))
            assert files == [u for u in retained[:-1] if len(m.graph.undo_record(u)["slots"])], (files, retained)
            assert all(isinstance(m.graph.undo_record(u)["slots"], np.memmap) for u in files)
    assert sum(m.graph.held for m in local.members) >= whole.held  # an edge across two parts is in both


@pytest.mark.parametrize("parts", [1, 2, 3])
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_parts_answer_what_the_whole_view_answers(parts, seed):
    drive(seed, parts, n_epochs=45, check_every=4)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**20), parts=st.integers(1, 3), n_epochs=st.integers(1, 14), retain=st.integers(1, 6))
def test_parts_answer_what_the_whole_view_answers_for_any_stream(seed, parts, n_epochs, retain):
    """The same, for streams and retentions Hypothesis picks (short ones, every epoch checked)."""
    drive(seed, parts, n_epochs, check_every=1, retain=retain)


def test_rows_go_to_each_end_s_owner():
    ch = as_changes({(0, 1, 0): (1, 5), (3, 3, 1): (2, 9), (4, 2, 0): (1, 1)})
    split = rows_of(ch, 3)
    assert [sorted(zip(r.src.tolist(), r.dst.tolist())) for r in split] == [[(0, 1), (3, 3)], [(0, 1), (4, 2)], [(4, 2)]]


class _Dying(LocalParts):
    """Parts whose calls fail once ``dead`` is set, as a killed actor's do."""

    dead = False

    def each(self, op, args):
        if self.dead:
            raise PartLost("part 1 died")
        return super().each(op, args)

    def some(self, calls):
        if self.dead:
            raise PartLost("part 1 died")
        return super().some(calls)


def test_a_lost_part_answers_503_until_new_parts_take_a_whole_epoch():
    epochs = random_epochs(6, seed=5, vertices=VERTICES)
    told: list[str] = []
    dying = _Dying(2)
    parted = PartitionedGraph(dying, on_lost=told.append)
    for e, (changed, _) in enumerate(epochs[:3], start=1):
        parted.apply(e, as_changes(changed))
    dying.dead = True
    with pytest.raises(Unavailable):
        parted.neighbors(0, "out", 3)
    parted.apply(4, as_changes(epochs[3][0]))  # the feed goes on; nothing is applied
    assert len(told) == 1 and "part 1 died" in told[0]
    with pytest.raises(Unavailable) as why:
        parted.require(3)
    assert why.value.status == 503
    assert not parted.wants_whole()  # the feed asks the compute stage for nothing the dead parts cannot take
    parted.replace(LocalParts(2))
    assert parted.wants_whole()
    parted.apply(5, as_changes(epochs[4][0]))  # not whole: what the lost parts held is not there to patch
    with pytest.raises(Unavailable):
        parted.require(5)
    whole = GraphHistory()
    for g in (whole, parted):
        g.apply(6, as_changes(epochs[5][1]), full=True)
    check_alike(whole, parted)
    assert not parted.wants_whole() and not whole.wants_whole()


def test_health_says_while_the_graph_view_is_lost():
    from fastapi.testclient import TestClient

    from pulsegraph.api.app import create_app
    from pulsegraph.api.store import ResultStore

    epochs = random_epochs(2, seed=8, vertices=VERTICES)
    dying = _Dying(2)
    parted = PartitionedGraph(dying)
    with TestClient(create_app(ResultStore(retain=4, graph=parted))) as client:
        parted.apply(1, as_changes(epochs[0][0]))
        body = client.get("/health").json()
        assert body["status"] == "ok" and body["graph_view"] == {"parts": 2, "epoch": 1, "lost": None}
        dying.dead = True
        parted.apply(2, as_changes(epochs[1][0]))  # the feed's next epoch finds the part dead
        body = client.get("/health").json()
        assert body["status"] == "degraded" and body["graph_view"]["lost"] == "part 1 died"
        parted.replace(LocalParts(2))
        parted.apply(2, as_changes(epochs[1][1]), full=True)  # filled with the compute stage's graph
        assert client.get("/health").json()["graph_view"] == {"parts": 2, "epoch": 2, "lost": None}


def test_parts_replaced_before_a_call_found_one_dead_hold_nothing_until_a_whole_graph():
    """The relaunch found a part dead (``GraphParts.ensure``) before any read or epoch did: the new parts are
    lost all the same, not a view that goes on from the next epoch's changes."""
    epochs = random_epochs(4, seed=6, vertices=VERTICES)
    parted = PartitionedGraph(LocalParts(2))
    for e, (changed, _) in enumerate(epochs[:2], start=1):
        parted.apply(e, as_changes(changed))
    parted.replace(LocalParts(2))
    assert parted.wants_whole()
    parted.apply(3, as_changes(epochs[2][0]))
    with pytest.raises(Unavailable):
        parted.neighbors(0, "out")
    assert parted.wants_whole() and parted.epoch == 0
    whole = GraphHistory()
    for g in (whole, parted):
        g.apply(4, as_changes(epochs[3][1]), full=True)
    check_alike(whole, parted)


def test_a_loss_found_after_new_parts_replaced_the_lost_ones_asks_for_no_second_relaunch():
    """A read in flight on the old parts fails after the relaunch replaced them: the new parts are not lost by it."""
    told: list[str] = []
    parted: PartitionedGraph

    class _ReplacedMidCall(LocalParts):
        def some(self, calls):
            parted.replace(LocalParts(2))  # the relaunch, while this read waited on the dead part
            raise PartLost("part 0 died")

    epochs = random_epochs(2, seed=7, vertices=VERTICES)
    parted = PartitionedGraph(_ReplacedMidCall(2), on_lost=told.append)
    parted.apply(1, as_changes(epochs[0][0]))
    with pytest.raises(Unavailable):
        parted.neighbors(0, "out", 1)
    assert told == [] and parted.wants_whole()  # the new parts wait for the compute stage's graph, as after any loss
    parted.apply(2, as_changes(epochs[1][1]), full=True)
    assert not parted.wants_whole() and parted.neighbors(0, "out", 2) is not None


def graph_reads(epoch: int) -> list[str]:
    """Every route that reads the graph view, for vertices with few and many edges, each way, each filter."""
    out = []
    for v in ("v0", "v7", "v12", "v150", "v299", "#tag1"):
        out += [f"/v1/vertices/{v}?epoch={epoch}", f"/v1/vertices/{v}/neighbors?epoch={epoch}",
                f"/v1/vertices/{v}/neighbors?direction=in&epoch={epoch}&limit=3",
                f"/v1/vertices/{v}/neighbors?direction=in&type=mentions&epoch={epoch}"]
    for a, b in (("v0", "v7"), ("v12", "v150"), ("v299", "v3"), ("v7", "v7"), ("v42", "#tag0")):
        out.append(f"/v1/paths?src={a}&dst={b}&epoch={epoch}")
    return out + [f"/v1/components?epoch={epoch}", f"/v1/epochs/{epoch}"]


# With no landmark a path is the search's alone (budget 7: it runs out part of the way); with them (random
# distances, which the graph does not bear out) the descent along them is read as well, and fails alike.
@pytest.mark.parametrize(("budget", "landmarks"), [(2000, False), (7, False), (2000, True)])
def test_every_graph_route_answers_the_same_bytes_with_three_parts(tmp_path, budget, landmarks):
    """The same epochs into a store with the whole view and one with three parts (and an archive, so older
    epochs are cold): every read as of every retained epoch, the same status and bytes."""
    from fastapi.testclient import TestClient

    from pulsegraph.api.app import create_app
    from pulsegraph.api.archive import ResultArchive
    from pulsegraph.api.store import ResultStore
    from pulsegraph.compute.apps.landmarks import LandmarksResult
    from pulsegraph.compute.ids import NameChanges
    from tests.api.test_cold_epochs import NAMES, _copy, result

    rng = np.random.default_rng(7)
    epochs = [result(e, rng, [4] if e == 5 else None) for e in (1, 2, 3, 5, 6, 7)]
    if not landmarks:
        none = np.zeros((0, len(NAMES)), np.uint16)
        for r in epochs:
            r.apps["landmarks"] = LandmarksResult(np.zeros(0, np.int32), none, none)
    whole = ResultStore(retain=5)
    parted = ResultStore(retain=5, archive=ResultArchive(tmp_path / "results", 5), graph=PartitionedGraph(LocalParts(3)))
    with (TestClient(create_app(whole, path_bfs_budget=budget)) as a,
          TestClient(create_app(parted, path_bfs_budget=budget)) as b):
        for i, r in enumerate(epochs):
            names = NameChanges(0, NAMES) if i == 0 else None
            whole.add([_copy(r)], names)
            parted.add([_copy(r)], names)
            for e in [x.epoch for x in epochs[: i + 1]]:
                for path in graph_reads(e):
                    got, want = b.get(path), a.get(path)
                    assert (got.status_code, got.content) == (want.status_code, want.content), path
        assert a.get("/v1/vertices/v7/neighbors?epoch=1").json()["error"]["code"] == "epoch_not_found"
        # The parts' answers are kept (each read is a call), and read again they are the same: the loop above
        # read every epoch again after each new one. The whole view keeps only hubs', and these are none.
        assert len(parted.hubs) and not len(whole.hubs)
        if not landmarks and budget > 7:  # the paths compared are not all "none found"
            assert any(a.get(f"/v1/paths?src=v{k}&dst=v{k + 1}").json()["distance"] for k in range(40))


def _kept_view(tmp_path, parts: int = 3):
    """A whole view and a partitioned one of the same epochs, the latter kept as a clean stop keeps it."""
    whole, parted = GraphHistory(retain=6), PartitionedGraph(LocalParts(parts, retain=6), folder=tmp_path)
    for e, (changed, _) in enumerate(random_epochs(12, seed=8, vertices=VERTICES), start=1):
        for g in (whole, parted):
            g.apply(e, as_changes(changed), False, e - 1 if e % 5 == 0 else None)
    kept = parted.keep()
    assert kept is not None and sorted(p.name for p in tmp_path.iterdir()) == [f"view-part-{q}.res" for q in range(parts)]
    return whole, kept


@pytest.mark.parametrize("parts_first", [True, False], ids=["parts made first", "view read first"])
def test_a_clean_stop_s_parts_are_taken_back_with_their_history(tmp_path, parts_first):
    """The next start's parts read their files (with their undo records: every retained epoch answers) whether
    they are made before the view file is read or after it; each file is read once."""
    whole, kept = _kept_view(tmp_path)
    again = PartitionedGraph(None, folder=tmp_path)
    if parts_first:
        again.replace(LocalParts(3, retain=6))
    assert again.load_state(kept, lambda e: None)
    assert (again.epoch, again.kept_from) == (whole.epoch, whole.kept_from)
    if not parts_first:
        with pytest.raises(NotFound):  # no part yet: the graph comes with them
            again.neighbors(0, "out", whole.epoch)
        again.replace(LocalParts(3, retain=6))
    check_alike(whole, again)
    assert not list(tmp_path.iterdir())


def test_parts_that_cannot_take_the_view_back_start_empty(tmp_path):
    whole, kept = _kept_view(tmp_path)
    other = PartitionedGraph(LocalParts(2, retain=6), folder=tmp_path)
    assert other.load_state(kept, lambda e: None) and other.epoch == 0  # split three ways, not two
    _, kept = _kept_view(tmp_path)
    data = bytearray((tmp_path / "view-part-1.res").read_bytes())
    data[-40] ^= 1
    (tmp_path / "view-part-1.res").write_bytes(bytes(data))
    damaged = PartitionedGraph(LocalParts(3, retain=6), folder=tmp_path)
    assert damaged.load_state(kept, lambda e: None) and damaged.epoch == 0
    with pytest.raises(NotFound):
        damaged.require(whole.epoch)
    assert PartitionedGraph(LocalParts(3), folder=None).keep() is None
