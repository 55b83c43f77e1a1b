"""Per-vertex arrays as of any retained epoch, from undo records: equal to the arrays as they were."""

from __future__ import annotations

import numpy as np
import pytest

from api.history import ArrayHistory


@pytest.mark.parametrize("seed", range(5))
def test_every_retained_epoch_reads_as_it_was_while_the_graph_grows(seed):
    rng = np.random.default_rng(seed)
    h = ArrayHistory(retain=100, fill=65535)
    kept, width, rows = {}, 5, 3
    arr = rng.integers(0, 9, (rows, width)).astype(np.uint16)
    for epoch in range(1, 30):
        width += int(rng.integers(0, 6))  # new vertices
        if epoch == 12:
            rows = 4  # landmarks re-chosen: a whole new array
        new = np.full((rows, width), 65535, dtype=np.uint16)
        r = min(rows, arr.shape[0])
        new[:r, : arr.shape[1]] = arr[:r]
        new[:, :] = np.where(rng.random(new.shape) < 0.2, rng.integers(0, 9, new.shape), new)
        arr = new
        h.push(epoch, arr.copy())
        kept[epoch] = arr.copy()
    for epoch, want in kept.items():
        rr, cc = np.meshgrid(np.arange(want.shape[0] + 1), np.arange(width + 2), indexing="ij")
        got = h.at(epoch, rr.ravel(), cc.ravel()).reshape(rr.shape)
        expect = np.full(rr.shape, 65535, dtype=np.uint16)
        expect[: want.shape[0], : want.shape[1]] = want
        assert (got == expect).all(), epoch
