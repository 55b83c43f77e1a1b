"""The packed edge key: a round trip at the extremes, key order is (src, dst, type) order, and a
vertex's out-edges are exactly its range."""

from __future__ import annotations

import numpy as np

from pulsegraph.base.edgekey import MAX_TYPES, MAX_VERTICES, pack, src_range, unpack


def test_round_trip_and_order_at_the_extremes():
    rng = np.random.default_rng(3)
    top = MAX_VERTICES - 1
    src = np.concatenate([[0, top, top, 0], rng.integers(0, MAX_VERTICES, 1000)]).astype(np.int32)
    dst = np.concatenate([[0, top, 0, top], rng.integers(0, MAX_VERTICES, 1000)]).astype(np.int32)
    etype = np.concatenate([[0, MAX_TYPES - 1, 1, 2], rng.integers(0, MAX_TYPES, 1000)]).astype(np.int16)
    keys = pack(src, dst, etype)
    s, d, t = unpack(keys)
    assert np.array_equal(s, src) and np.array_equal(d, dst) and np.array_equal(t, etype)
    assert s.dtype == np.int32 and d.dtype == np.int32 and t.dtype == np.int16
    assert np.array_equal(np.argsort(keys, kind="stable"), np.lexsort((etype, dst, src)))


def test_a_vertex_range_holds_its_out_edges_and_no_other():
    src = np.array([4, 4, 5, 3, MAX_VERTICES - 1], dtype=np.int32)
    keys = pack(src, np.array([MAX_VERTICES - 1, 0, 0, MAX_VERTICES - 1, 7]), np.array([MAX_TYPES - 1, 0, 0, 5, 1]))
    for v in (4, MAX_VERTICES - 1):
        lo, hi = src_range(v)
        inside = (keys >= np.uint64(lo)) & ((keys < np.uint64(hi)) if hi is not None else True)
        assert np.array_equal(inside, src == v)
    assert src_range(MAX_VERTICES - 1)[1] is None  # the last vertex's range ends past 2**64
