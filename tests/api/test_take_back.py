"""A restart serves its archived epochs before the pipeline is up: the names journal, the take-back, and
what the pipeline's first epoch then keeps or drops.

The restart through real actors is in tests/pulsegraph/test_recovery.py and through the service's process in
tests/pulsegraph/test_restart_serving.py; here the archive, the store and the feed meet directly.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from fastapi.testclient import TestClient

from pulsegraph.api.app import create_app
from pulsegraph.api.archive import ResultArchive
from pulsegraph.api.exceptions import NotFound
from pulsegraph.api.namebook import NameBook
from pulsegraph.api.names import JOURNAL_MIN, JOURNAL_SHARE, NAMES_FILE, NamesJournal, apply_names
from pulsegraph.api.store import ResultStore
from pulsegraph.compute.ids import NameChanges
from tests.api.test_archive import NAMES, result


def served(tmp_path, epochs: list[int], names: list[NameChanges]) -> ResultStore:
    """A store that served ``epochs`` (the first one whole), pulling ``names[i]`` with epoch ``epochs[i]``."""
    store = ResultStore(retain=100, archive=ResultArchive(tmp_path / "results", 100))
    for e, n in zip(epochs, names, strict=True):
        store.add([result(e, full=e == epochs[0])], n)
    return store


def restarted(tmp_path) -> tuple[ResultArchive, ResultStore]:
    """As the service opens its data folder: the epochs taken back and served, then their digests checked."""
    archive = ResultArchive(tmp_path / "results", 100)
    store = ResultStore(retain=100, archive=archive)
    taken = archive.take_back()
    assert taken is not None
    store.take_back(*taken)
    archive.verify_taken(store.drop_taken)
    return archive, store


def test_the_journal_replays_the_names_as_of_each_epoch_with_renames_and_new_ids(tmp_path):
    j = NamesJournal(tmp_path / NAMES_FILE)
    j.append(1, NameChanges(0, ["a", "b"]), ["a", "b"])
    j.append(2, NameChanges(2, ["c"]), ["a", "b", "c"])
    # Epoch 3: id 1 given back (a window), then reused for "d" at epoch 4 with a new id 3.
    j.append(3, NameChanges(3, [], np.array([1]), [""]), ["a", "", "c"])
    j.append(4, NameChanges(3, ["e"], np.array([1]), ["d"]), ["a", "d", "c", "e"])
    assert j.replay(1) == ["a", "b"]
    assert j.replay(2) == ["a", "b", "c"]
    assert j.replay(3) == ["a", "", "c"]
    assert j.replay(4) == j.replay(99) == ["a", "d", "c", "e"]
    assert apply_names(["a"], NameChanges(0, ["x"])) == ["x"], "a whole list replaces"


def test_a_torn_or_headless_journal_names_nothing(tmp_path):
    j = NamesJournal(tmp_path / NAMES_FILE)
    assert j.replay(1) is None
    j.append(1, NameChanges(0, ["a", "b"]), ["a", "b"])
    j.append(2, NameChanges(2, ["c"]), ["a", "b", "c"])
    whole = j.path.read_bytes()
    j.path.write_bytes(whole[:-3])  # a power cut in the middle of the last record
    # The torn record's epoch cannot be read: it may be 1 (a pull that brought names and no epoch).
    assert j.replay(1) is None and j.replay(2) is None, "a torn record that may hold changes names nothing, not wrong names"
    j.path.write_bytes(whole)
    j.append(3, NameChanges(3, ["d"]), ["a", "b", "c", "d"])
    j.path.write_bytes(j.path.read_bytes()[:-3])
    assert j.replay(1) == ["a", "b"], "one after a record of a later epoch does not matter"
    j.clear()
    j.append(5, NameChanges(2, ["c"]), ["a", "b", "c"])  # a write failed and the journal was dropped
    assert j.replay(5) is None


def test_the_journal_is_rewritten_whole_once_its_changes_outweigh_the_list(tmp_path):
    j = NamesJournal(tmp_path / NAMES_FILE)
    names = ["v0"]
    j.append(1, NameChanges(0, list(names)), names)
    for e in range(2, 2000):
        new = [f"vertex-with-a-long-name-{e}-{i}" for i in range(20)]
        names = names + new
        j.append(e, NameChanges(len(names) - len(new), new), names)
    whole = len(NamesJournal._record(1999, NameChanges(0, names)))
    assert j.path.stat().st_size <= max(JOURNAL_MIN, JOURNAL_SHARE * whole) + whole, "bounded by the names, not the pulls"
    assert j.replay(1999) == names and j.replay(5) is None, "what it forgot is what came before its whole list"


def test_the_tops_are_taken_back_as_archived_not_recomputed(tmp_path, monkeypatch):
    before = served(tmp_path, [1, 2, 3], [NameChanges(0, NAMES), None, None])
    import pulsegraph.api.store as store_module

    monkeypatch.setattr(store_module, "top_of", lambda ranks: pytest.fail("a top recomputed at the take-back"))
    _, store = restarted(tmp_path)
    for e in (1, 2, 3):
        assert store.get(e).top["pagerank"].tolist() == before.get(e).top["pagerank"].tolist()


def test_a_restart_serves_the_archived_epochs_with_their_names_before_the_pipeline(tmp_path):
    renamed = NAMES[:5] + ["w5"]
    served(tmp_path, [1, 2, 3, 4], [NameChanges(0, NAMES), None, NameChanges(6, [], np.array([5]), ["w5"]), None])
    archive, store = restarted(tmp_path)
    assert store.provisional and store.epoch_numbers() == [1, 2, 3, 4]
    assert store.names == renamed and store.vertex_id("w5") == 5 and store.id_of("v5") is None
    assert store.get(2).top["pagerank"][0] == 2 and store.get(3).previous is store.get(2)
    # The pipeline's first epoch follows on: everything is kept, and it runs on from the newest.
    first = result(5, full=True)
    store.add([first], NameChanges(0, renamed), settle=archive.confirm(first))
    assert not store.provisional and store.epoch_numbers() == [1, 2, 3, 4, 5]
    assert store.get(5).previous is store.get(4)


def test_names_taken_back_are_looked_up_while_their_index_is_built_and_the_feed_waits_for_it(tmp_path, monkeypatch):
    import pulsegraph.api.store as store_module

    began, built = threading.Event(), threading.Event()

    def slow_book(names=None):  # packing a few million names takes seconds
        if names:
            began.set()
            assert built.wait(10)
        return NameBook(names)

    monkeypatch.setattr(store_module, "NameBook", slow_book)
    names = NAMES[:4] + ["w4", "v5", "", "v10"]
    served(tmp_path, [1, 2], [NameChanges(0, names), None])
    archive, store = restarted(tmp_path)
    assert not began.wait(0.2), "not begun before the API serves: it would take the interpreter from the start"
    store.serving()
    assert began.wait(10)
    assert store.index == {}, "not built yet: what follows is answered by a pass over the names"
    assert [store.vertex_id(n) for n in ("v0", "w4", "v5", "v10")] == [0, 4, 5, 7] and store.id_of("") is None
    with pytest.raises(NotFound):
        store.vertex_id("v4")
    during = [store.search(p, 10, 8) for p in ("v", "v1", "w", "x")]
    assert during[0] == ["v0", "v1", "v10", "v2", "v3", "v5"] and during[1] == ["v1", "v10"]

    feed = threading.Thread(target=store.add, args=([result(3, full=True)], NameChanges(8, ["v11"])),
                            kwargs={"settle": archive.confirm(result(3, full=True))})
    feed.start()
    feed.join(0.3)
    assert feed.is_alive(), "the feed's names patch the index: it waits for it"
    built.set()
    feed.join(10)
    assert not feed.is_alive() and store.index == {**{n: i for i, n in enumerate(names) if n}, "v11": 8}
    assert [store.search(p, 10, 8) for p in ("v", "v1", "w", "x")] == during, "the same answers from the index"


def test_the_graph_of_epochs_taken_back_is_not_kept_and_says_so_until_the_pipeline_brings_it(tmp_path):
    served(tmp_path, [1, 2, 3], [NameChanges(0, NAMES), None, None])
    archive, store = restarted(tmp_path)
    # v3 has an edge to v4 in epoch 3: an empty answer would be a wrong one.
    with TestClient(create_app(store)) as client:
        for path in ("/v1/vertices/v3/neighbors", "/v1/vertices/v3/neighbors?epoch=2"):
            r = client.get(path)
            assert r.status_code == 404 and r.json()["error"]["code"] == "graph_not_retained", (path, r.text)
        first = result(4, full=True)
        store.add([first], None, settle=archive.confirm(first))
        got = client.get("/v1/vertices/v4/neighbors").json()
        assert [n["vertex"] for n in got["items"]] == ["v5"], "the pipeline's first epoch brings the graph"
        assert client.get("/v1/vertices/v3/neighbors?epoch=3").json()["error"]["code"] == "graph_not_retained"


def test_epochs_the_pipeline_publishes_again_are_dropped_and_come_back_from_it(tmp_path):
    served(tmp_path, [1, 2, 3, 4, 5, 6], [NameChanges(0, NAMES)] + [None] * 5)
    archive, store = restarted(tmp_path)
    first = result(5, full=True)  # restored at 4: epochs 5 and 6 are cut again
    taken = store.get(6)
    store.add([first, result(6)], NameChanges(0, NAMES), settle=archive.confirm(first))
    assert store.epoch_numbers() == [1, 2, 3, 4, 5, 6] and store.get(5).previous is store.get(4)
    assert store.get(5).result is first and store.get(6) is not taken, "the pipeline's epochs, not the archived ones"
    assert archive.latest == 6 and archive.take_back() is not None


@pytest.mark.parametrize("first", [result(6, full=True, offset=61), result(1, full=True, offset=3)])
def test_another_history_is_dropped_whole_with_its_names_and_not_served_again(tmp_path, first):
    served(tmp_path, [1, 2, 3, 4, 5, 6], [NameChanges(0, NAMES)] + [None] * 5)
    archive, store = restarted(tmp_path)
    settle = archive.confirm(first)
    assert settle == 0 and not (tmp_path / "results" / NAMES_FILE).exists(), "the journal went with the epochs it named"
    other = ["x0", "x1", "x2", "x3", "x4", "x5"]
    store.add([first], NameChanges(0, other), settle=settle)
    assert store.epoch_numbers() == [first.epoch] and store.names == other and not store.provisional
    assert store.get(first.epoch).result is first and store.get(first.epoch).previous is None
    assert ResultArchive(tmp_path / "results", 100).names.replay(first.epoch) == other


def test_an_epoch_file_that_fails_its_digest_is_served_until_checked_then_dropped(tmp_path, caplog):
    served(tmp_path, [1, 2, 3, 4], [NameChanges(0, NAMES), None, None, None])
    path = tmp_path / "results" / "epoch-000000000003.res"
    raw = bytearray(path.read_bytes())
    raw[-100] ^= 0xFF  # a flipped byte in its arrays: the header reads, the digest does not match
    path.write_bytes(bytes(raw))
    archive = ResultArchive(tmp_path / "results", 100)
    store = ResultStore(retain=100, archive=archive)
    store.take_back(*archive.take_back())
    assert store.epoch_numbers() == [1, 2, 3, 4]
    assert archive.verify_taken(store.drop_taken) == [3] and "skipping epoch 3" in caplog.text
    assert store.epoch_numbers() == [1, 2, 4] and store.get(4).previous is None
    first = result(5, full=True)
    store.add([first], NameChanges(0, NAMES), settle=archive.confirm(first))
    assert store.epoch_numbers() == [1, 2, 4, 5] and store.get(5).previous is store.get(4)


def test_a_cut_short_epoch_file_is_not_taken_back(tmp_path):
    served(tmp_path, [1, 2, 3], [NameChanges(0, NAMES), None, None])
    path = tmp_path / "results" / "epoch-000000000002.res"
    path.write_bytes(path.read_bytes()[:-64])
    archive, store = restarted(tmp_path)
    assert store.epoch_numbers() == [1, 3], "a map past its file's end would fault when read"


def test_an_archive_without_a_journal_is_taken_back_with_the_first_epoch_as_before(tmp_path):
    served(tmp_path, [1, 2, 3], [NameChanges(0, NAMES), None, None])
    (tmp_path / "results" / NAMES_FILE).unlink()  # written by a version that kept no names
    archive = ResultArchive(tmp_path / "results", 100)
    assert archive.take_back() is None
    assert [r.epoch for r in archive.history_before(result(4, full=True))] == [1, 2, 3]
