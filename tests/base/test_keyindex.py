"""KeyIndex against a dict: any sequence of puts and discards leaves the same keys, values and ranges,
whatever runs, merges, tombstones and compactions it went through on the way."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulsegraph.base import keyindex
from pulsegraph.base.keyindex import KeyIndex

# Batches of (put or discard, keys): keys from a small range so that puts revive tombstones and
# discards hit keys held in any run.
batches = st.lists(
    st.tuples(st.booleans(), st.lists(st.integers(0, 300), min_size=0, max_size=60)),
    min_size=1, max_size=40,
)


def check(idx: KeyIndex, ref: dict[int, int], values: bool) -> None:
    assert len(idx) == len(ref)
    probe = np.arange(0, 305, dtype=np.uint64)
    want = np.array([ref.get(int(k), -1) for k in probe])
    got = idx.get(probe)
    if values:
        assert got.tolist() == want.tolist()
    assert idx.contains(probe).tolist() == (want >= 0).tolist()
    keys, vals = idx.range(40, 200)
    inside = sorted(k for k in ref if 40 <= k < 200)
    assert keys.tolist() == inside
    if values:
        assert vals.tolist() == [ref[k] for k in inside]


@pytest.mark.parametrize("values", [True, False])
# The fixture only lowers MIN_DEAD, the same for every example.
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=batches)
def test_matches_a_dict_through_merges_tombstones_and_compactions(values, batches, monkeypatch):
    # A few deletions compact the index here, so the examples go through compactions too.
    monkeypatch.setattr(keyindex, "MIN_DEAD", 4)
    idx = KeyIndex(values=values)
    ref: dict[int, int] = {}
    for step, (is_put, keys) in enumerate(batches):
        keys = list(dict.fromkeys(keys))  # put takes distinct keys
        if is_put:
            # The keys not held go in as the callers that have just looked them up put them (absent):
            # searched for only while tombstones may hold them.
            parts = {absent: [k for k in keys if (k not in ref) == absent] for absent in (True, False)}
            for absent, part in parts.items():
                vals = [step * 1000 + k for k in part]
                idx.put(np.array(part, np.uint64), np.array(vals, np.int64) if values else None, absent=absent)
                ref.update(zip(part, vals if values else [0] * len(part)))
        elif values and step % 2:
            # Only where the key holds the value given: every other one is given a value it does not hold.
            vals = [ref.get(k, 0) + (j % 2) for j, k in enumerate(keys)]
            idx.discard(np.array(keys, np.uint64), np.array(vals, np.int64))
            for j, k in enumerate(keys):
                if k in ref and j % 2 == 0:
                    del ref[k]
        else:
            idx.discard(np.array(keys + keys[:3], np.uint64))  # a key given twice is discarded once
            for k in keys:
                ref.pop(k, None)
        check(idx, ref, values)
    keys, vals = idx.items()
    assert keys.tolist() == sorted(ref)
    assert idx.runs <= 1
    if values:
        assert vals.tolist() == [ref[k] for k in sorted(ref)]


def test_runs_stay_few_and_a_batch_costs_what_it_holds():
    """Batches of 1,000 new keys into an index of 200,000: a logarithmic number of runs, and the newest
    batch is not merged into the largest run (which would copy all of it) each time."""
    rng = np.random.default_rng(3)
    idx = KeyIndex.from_sorted(np.arange(0, 400_000, 2, dtype=np.uint64), np.arange(200_000))
    largest = idx._runs[0].keys
    added = 0
    for b in range(30):
        keys = rng.choice(np.arange(1, 400_000, 2, dtype=np.uint64), 1000, replace=False)
        keys = keys[~idx.contains(keys)]
        idx.put(keys, np.full(len(keys), b))
        added += len(keys)
        assert idx.runs <= 2 + int(np.log(len(idx) / 1000) / np.log(keyindex.FACTOR)) + 1
    assert idx._runs[0].keys is largest  # 30 batches, 30k keys: nowhere near a quarter of 200k
    assert len(idx) == 200_000 + added


def test_deletions_compact_once_the_dead_reach_their_share():
    idx = KeyIndex.from_sorted(np.arange(100_000, dtype=np.uint64), np.arange(100_000))
    idx.discard(np.arange(0, 19_000, dtype=np.uint64))
    assert idx.runs == 1 and idx._dead == 19_000  # below a quarter: tombstones only
    idx.discard(np.arange(19_000, 30_000, dtype=np.uint64))
    assert idx._dead == 0 and idx.nbytes == 70_000 * 13  # compacted: the dead are gone (8 + 4 + 1 bytes a key)
    assert idx.get(np.array([29_999, 30_000], np.uint64)).tolist() == [-1, 30_000]


def test_a_value_past_int32_is_refused_loudly():
    idx = KeyIndex()
    idx.put(np.array([1, 2], np.uint64), np.array([0, 2**31 - 1]))
    with pytest.raises(ValueError, match="int32"):
        idx.put(np.array([3], np.uint64), np.array([2**31]))
    assert idx.get(np.array([1, 2, 3], np.uint64)).tolist() == [0, 2**31 - 1, -1], "nothing was half put"
