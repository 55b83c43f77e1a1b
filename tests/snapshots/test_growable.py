"""A narrow column (int32 until a value needs int64) against plain Python integers."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from pulsegraph.compute.graph import GlobalGraph
from pulsegraph.snapshots.delta import EpochDelta
from pulsegraph.snapshots.edges import EdgeTable
from pulsegraph.snapshots.growable import Column

I32 = np.iinfo(np.int32)
# Mostly small values, now and then one past int32 either way.
_values = st.one_of(st.integers(-1000, 1000), st.integers(-1000, 1000), st.integers(-(2**40), 2**40))


@given(st.lists(st.tuples(st.sampled_from(["extend", "put", "add"]), st.lists(_values, max_size=6), st.randoms()), max_size=12))
def test_a_narrow_column_widens_before_a_value_that_does_not_fit_and_never_wraps(ops):
    col, model = Column(np.int32, capacity=4, wide=np.int64), []
    for op, values, rnd in ops:
        if op == "extend":
            col.extend(np.array(values, dtype=np.int64))
            model.extend(values)
            continue
        if not model:
            continue
        slots = [rnd.randrange(len(model)) for _ in values]
        if op == "put":  # distinct slots, as every caller's
            pairs = dict(zip(slots, values))
            col.put(np.array(list(pairs), dtype=np.int64), np.array(list(pairs.values()), dtype=np.int64))
            for s, v in pairs.items():
                model[s] = v
        else:  # repeated slots each add, as np.add.at
            col.add(np.array(slots, dtype=np.int64), np.array(values, dtype=np.int64))
            for s, v in zip(slots, values):
                model[s] += v
        assert col.view.tolist() == model
    assert col.view.tolist() == model
    # Narrow exactly while every value written so far fits (the model's, here, and the ones passed on).
    fits = all(I32.min <= v <= I32.max for _, values, _ in ops for v in values) and all(I32.min <= v <= I32.max for v in model)
    if fits:
        assert col.view.dtype == np.int32


def test_an_edge_past_int32_adds_is_exact_in_the_shard_and_the_compute_stage():
    big = 2**31 + 5  # adds of one edge past what int32 holds
    t = EdgeTable()
    src, dst, et = (np.array([1, 2], np.int32), np.array([2, 3], np.int32), np.array([0, 0], np.int16))
    t.apply(src, dst, et, np.array([1, 1], np.int64), np.array([10, 10], np.int64))
    assert t.mult.view.dtype == np.int32
    t.apply(src[:1], dst[:1], et[:1], np.array([big - 1], np.int64), np.array([0], np.int64))
    t.apply(src[:1], dst[:1], et[:1], np.array([-2], np.int64), np.array([0], np.int64))
    assert t.mult.view.tolist() == [big - 2, 1]

    g = GlobalGraph()
    g.apply_with_previous(EpochDelta(
        shard=0, epoch=1, types=["t"], new_ids=np.array([0, 1], np.int32), new_names=["a", "b"],
        e_slot=np.array([0], np.int64), e_src=np.array([0], np.int32), e_dst=np.array([1], np.int32),
        e_type=np.array([0], np.int16), e_mult=np.array([3], np.int64), e_weight=np.array([3], np.int64),
    ))
    changes, before = g.apply_with_previous(EpochDelta(
        shard=0, epoch=2, types=["t"], e_slot=np.array([0], np.int64), e_src=np.array([0], np.int32),
        e_dst=np.array([1], np.int32), e_type=np.array([0], np.int16), e_mult=np.array([big], np.int64),
        e_weight=np.array([3], np.int64),
    ))
    assert before.mult.tolist() == [3] and changes.mult.tolist() == [big]
    assert g.snapshot()["edges"] == {("a", "b", "t"): (big, 3)}
