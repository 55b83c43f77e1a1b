"""pulsegraph.base.arrays.unique is np.unique, by sorting where NumPy's hash path is slow; add_at is np.add.at, by
bincount where a batch has indexes enough."""

from __future__ import annotations

import numpy as np
import pytest

from pulsegraph.base.arrays import add_at, unique


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int16, np.uint8, np.bool_, np.float64])
def test_unique_is_numpys_for_every_dtype_and_shape(dtype):
    rng = np.random.default_rng(0)
    for n in (0, 1, 2, 17, 5000):
        a = rng.integers(-50 if np.issubdtype(dtype, np.signedinteger) else 0, 60, n).astype(dtype)
        for arr in (a, a.reshape(-1, 1), a[::-1]):
            got, want = unique(arr), np.unique(arr)
            assert got.dtype == want.dtype and np.array_equal(got, want)


def test_unique_of_a_list_and_of_distinct_ids():
    assert unique([3, 1, 3, 2]).tolist() == [1, 2, 3]
    ids = np.random.default_rng(1).permutation(100_000)
    assert np.array_equal(unique(ids), np.arange(100_000))


@pytest.mark.parametrize("dtype", [np.int32, np.int16, np.int64])
def test_add_at_is_numpys_on_both_paths(dtype):
    """Few indexes take np.add.at's own loop, many a bincount: both give np.add.at's sums, repeats and
    negative steps included, for a scalar step and a step per index."""
    rng = np.random.default_rng(2)
    for k in (0, 3, 100, 5000):  # into 1,000 entries: below and above the bincount's share
        idx = rng.integers(0, 1000, k)
        for step in (1, -1, rng.integers(-3, 4, k)):
            start = rng.integers(-100, 100, 1000).astype(dtype)
            want, got = start.copy(), start.copy()
            np.add.at(want, idx, step)
            add_at(got, idx, step)
            assert got.dtype == want.dtype and np.array_equal(got, want)
