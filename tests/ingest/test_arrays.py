"""ingest.arrays.unique is np.unique, by sorting where NumPy's hash path is slow."""

from __future__ import annotations

import numpy as np
import pytest

from ingest.arrays import unique


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
