"""The API's packed names (:class:`~pulsegraph.api.namebook.NameBook`): the same names, index and name order as a
list, a dict and ``sorted`` would hold, whatever the names (sharing long prefixes, any Unicode, lone surrogates),
through changes written one pull at a time and bases rebuilt at any point."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pulsegraph.api.namebook
from pulsegraph.api.namebook import NameBook
from pulsegraph.api.names import names_update
from pulsegraph.compute.ids import NameChanges
from tests.api.test_store import reference_names

# Names that tie on their first 16 bytes, differ past them or only in length, hold NUL, multi-byte
# characters, a lone surrogate and a newline (what a read of many names puts between them, where none holds one):
# what the order's sort by prefix must hand to the names themselves.
LONG = "https://example.org/users/"
POOL = ["", "a", "a\x00", "a\nb", "ab", "b", "é", "z\U0001f600", "\ud800x", "\ue000",
        *(f"{LONG}{k}" for k in (1, 10, 2, 20)),
        *(f"user{k}" for k in range(6)), "#tag", "#Tag"]


def ordered(book: NameBook, prefix: str = "") -> list[str]:
    """What a search goes through from ``prefix``, the names no longer indexed left out (a search checks those)."""
    return [n for n in book.starting(prefix) if book.get(n) is not None]


def test_a_whole_list_is_held_as_a_list_a_dict_and_sorted_would_hold_it():
    names = [*POOL, "a", "user3"]  # two names twice: the index holds the last id, the order each once
    book = NameBook(names)
    assert book == names and len(book) == len(names) and book[-1] == "user3" and book[2:5] == names[2:5]
    index = {n: i for i, n in enumerate(names) if n}
    assert book.by_name == index and [book.get(n) for n in POOL] == [index.get(n) for n in POOL]
    assert list(book.starting("")) == sorted(index)
    for prefix in ("", "a", "a\x00", LONG, LONG + "2", "user", "\ud800", "\uffff", "zz"):
        assert ordered(book, prefix) == [n for n in sorted(index) if n >= prefix], prefix
    assert book.get("nobody") is None and book.get("") is None and NameBook().get("a") is None
    with pytest.raises(IndexError):
        book[len(names)]


def test_a_name_costs_its_bytes_and_about_28_more():
    names = [f"user{k}" for k in np.random.default_rng(0).permutation(200_000).tolist()]
    book = NameBook(names)
    assert book.nbytes <= sum(map(len, names)) + 28 * len(names)
    assert [book.get(n) for n in names[:1000]] == list(range(1000))


pulls = st.lists(
    st.tuples(st.integers(0, 12), st.lists(st.sampled_from(POOL), max_size=5),
              st.lists(st.tuples(st.integers(0, 20), st.sampled_from(POOL)), max_size=6)),
    min_size=1, max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(pulls=pulls, rebuild_min=st.sampled_from([0, 3, 4096]), read=st.sampled_from([2, 5, 1 << 16]))
def test_pulls_written_one_at_a_time_hold_what_the_names_written_one_by_one_do(pulls, rebuild_min, read,
                                                                              monkeypatch_module):
    monkeypatch_module.setattr(pulsegraph.api.namebook, "REBUILD_MIN", rebuild_min)
    monkeypatch_module.setattr(pulsegraph.api.namebook, "_READ", read)  # names read by id a few at a time, or all
    book, names, index = NameBook(), [], {}
    for k, (start, given_names, renames) in enumerate(pulls):
        start = 0 if k == 0 else min(start, len(names))
        end = max(len(names), start + len(given_names))
        renames = [(i % end, n) for i, n in renames] if start and end else []
        changes = NameChanges(start, given_names, np.array([i for i, _ in renames], np.int64), [n for _, n in renames])
        names, index = reference_names(names, index, changes)
        update = names_update(book, changes)
        if update.book is not None:
            book = update.book
        else:
            book.apply(update.writes, update.tail, update.index, update.recent)
            book.settle()
        assert book == names and book.by_name == index, k
        assert book[1:-1] == names[1:-1] and book[3:] == names[3:], k
        assert book[::2] == names[::2], k
        assert ordered(book) == sorted(index), k
        assert all(ordered(book, p) == [n for n in sorted(index) if n >= p] for p in ("a", LONG + "1", "user", "\ud800")), k


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def test_folds_of_many_names_merge_them_where_a_whole_sort_would_put_them():
    """Thousands of names a pull, a fold each time: places found among many names sharing 16-byte prefixes, or one
    name's, or none; renames and names moved from id to id."""
    rng = np.random.default_rng(7)

    def some(k: int) -> list[str]:
        kinds = (lambda j: f"{LONG}{j}", lambda j: f"user{j}", lambda j: f"é{j}\x00", lambda j: f"#{j % 97}")
        return [kinds[int(rng.integers(4))](int(rng.integers(50_000))) for _ in range(k)]

    names = some(20_000)
    book, index = NameBook(names), {n: i for i, n in enumerate(names) if n}
    for _ in range(4):
        renamed = rng.integers(0, len(names), 2_000)
        changes = NameChanges(len(names), some(4_000), renamed.astype(np.int64), some(len(renamed)))
        names, index = reference_names(names, index, changes)
        update = names_update(book, changes)
        book.apply(update.writes, update.tail, update.index, update.recent)
        book.settle()
        assert not book._s.changes(), "folded"
        assert book == names and book.by_name == index
        assert ordered(book) == sorted(index)
        assert ordered(book, LONG + "2") == [n for n in sorted(index) if n >= LONG + "2"]
