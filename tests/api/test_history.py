"""Per-vertex arrays as of any retained epoch, from undo records: equal to the arrays as they were."""

from __future__ import annotations

import logging
import threading

import numpy as np
import pytest

from pulsegraph.api.history import ArrayHistory
from pulsegraph.compute.apps.base import Patch


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


def _patch_of(base_epoch: int, prev: np.ndarray, new: np.ndarray, rng) -> Patch:
    """A patch of ``prev`` to ``new``: the entries that changed, and some that did not (as an update may write)."""
    widened = np.full(new.shape, 65535, dtype=new.dtype)
    widened[:, : prev.shape[1]] = prev
    written = [[np.flatnonzero((widened[r] != new[r]) | (rng.random(new.shape[1]) < 0.1))] for r in range(new.shape[0])]
    return Patch.of(base_epoch, new, written)


def _evolve(rng, arr: np.ndarray, width: int) -> np.ndarray:
    new = np.full((arr.shape[0], width), 65535, dtype=np.uint16)
    new[:, : arr.shape[1]] = arr
    return np.where(rng.random(new.shape) < 0.2, rng.integers(0, 9, new.shape), new).astype(np.uint16)


@pytest.mark.parametrize("seed", range(5))
def test_patches_read_as_the_whole_arrays_they_stand_for(seed):
    """Pushed as patches (most epochs) or whole (some), every retained epoch reads as the whole array of then,
    and byte for byte as a history given only whole arrays."""
    rng = np.random.default_rng(seed)
    patched, whole = ArrayHistory(retain=100, fill=65535), ArrayHistory(retain=100, fill=65535)
    arr = rng.integers(0, 9, (3, 5)).astype(np.uint16)
    patched.push(1, arr.copy()), whole.push(1, arr.copy())
    kept = {1: arr.copy()}
    for epoch in range(2, 40):
        new = _evolve(rng, arr, arr.shape[1] + int(rng.integers(0, 600)))  # past the buffer's spare room, at times
        got = patched.push(epoch, new.copy() if rng.random() < 0.2 else _patch_of(epoch - 1, arr, new, rng))
        assert got and whole.push(epoch, new.copy())
        arr = kept[epoch] = new
    width = arr.shape[1]
    rr, cc = np.meshgrid(np.arange(4), np.arange(width + 2), indexing="ij")
    for epoch, want in kept.items():
        expect = np.full(rr.shape, 65535, dtype=np.uint16)
        expect[: want.shape[0], : want.shape[1]] = want
        got = patched.at(epoch, rr.ravel(), cc.ravel()).reshape(rr.shape)
        assert (got == expect).all() and (got == whole.at(epoch, rr.ravel(), cc.ravel()).reshape(rr.shape)).all(), epoch
        for k, a in (patched.undo_record(epoch) or {}).items():  # what the archive keeps of the newest
            assert (a == whole.undo_record(epoch)[k]).all()


def test_a_patch_of_a_missed_epoch_leaves_a_gap_until_a_whole_array_comes():
    rng = np.random.default_rng(7)
    h = ArrayHistory(retain=100, fill=65535)
    a1 = rng.integers(0, 9, (2, 10)).astype(np.uint16)
    a2 = _evolve(rng, a1, 12)
    a3 = _evolve(rng, a2, 14)
    assert h.push(1, a1.copy()) and h.push(2, _patch_of(1, a1, a2, rng))
    assert not h.push(4, _patch_of(3, a3, _evolve(rng, a3, 15), rng))  # epoch 3 never came
    assert not h.push(5, _patch_of(4, a3, a3, rng))  # nor does anything after it, until a whole array
    assert h.covers(2) and not h.covers(4) and not h.covers(5)
    assert (h.at(2, np.zeros(12, np.int64), np.arange(12)) == a2[0]).all()
    a6 = _evolve(rng, a3, 16)
    assert h.push(6, a6.copy())
    assert h.covers(6) and not h.covers(2)  # history starts again at the whole array
    assert h.push(7, _patch_of(6, a6, _evolve(rng, a6, 16), rng)) and h.covers(6)
    assert (h.at(6, np.ones(16, np.int64), np.arange(16)) == a6[1]).all()


def test_a_patch_before_any_array_waits_for_a_whole_one_and_is_no_fault(caplog):
    """A restart after a crash with the compute stage read back whole: its first patches are of its own epoch,
    which a history that holds nothing yet cannot apply; the whole array sent next starts it (logged as what
    it is, not as an error). A patch missed after an array was held stays an error."""
    rng = np.random.default_rng(9)
    h = ArrayHistory(retain=100, fill=65535)
    a = rng.integers(0, 9, (2, 10)).astype(np.uint16)
    with caplog.at_level(logging.INFO, logger="pulsegraph.api.history"):
        assert not h.push(84, _patch_of(83, a, _evolve(rng, a, 11), rng))
        assert not h.covers(84) and not [r for r in caplog.records if r.levelno >= logging.ERROR]
        b = _evolve(rng, a, 12)
        assert h.push(85, b.copy()) and h.covers(85)
        assert (h.at(85, np.ones(12, np.int64), np.arange(12)) == b[1]).all()
        assert not h.push(87, _patch_of(86, b, _evolve(rng, b, 12), rng))
    assert [r.levelno for r in caplog.records if "got a patch" in r.getMessage()] == [logging.INFO, logging.ERROR]


def test_an_epoch_that_merged_sealed_ones_goes_back_to_the_epoch_pushed_before_it():
    """Ranking fell behind: epoch 4 covers the sealed epochs 2 and 3, so the store keeps 1 and 4, and
    the arrays as of epoch 1 stay known until epoch 1 leaves the retention."""
    rng = np.random.default_rng(8)
    h = ArrayHistory(retain=100, fill=65535)
    a1 = rng.integers(0, 9, (2, 10)).astype(np.uint16)
    a4 = _evolve(rng, a1, 12)
    assert h.push(1, a1.copy()) and h.push(4, _patch_of(1, a1, a4, rng)) and h.push(5, a4.copy())
    h.forget_before(1)
    assert h.covers(1) and (h.at(1, np.zeros(12, np.int64), np.arange(12))[:10] == a1[0]).all()
    h.forget_before(4)
    assert not h.covers(1) and h.covers(4) and (h.at(4, np.ones(12, np.int64), np.arange(12)) == a4[1]).all()


def test_reads_of_old_epochs_stay_right_while_patches_are_written_in_place():
    """A reader takes no lock while it reads the newest array; the feed thread patches it meanwhile."""
    rng = np.random.default_rng(11)
    h = ArrayHistory(retain=1000, fill=65535)
    arr = rng.integers(0, 9, (4, 20_000)).astype(np.uint16)
    h.push(1, arr.copy())
    first = arr.copy()
    stop, bad = threading.Event(), []

    def reader():
        rows, cols = np.repeat(np.arange(4), 20_000), np.tile(np.arange(20_000), 4)
        while not stop.is_set():
            if not (h.at(1, rows, cols) == first.ravel()).all():
                bad.append(1)

    t = threading.Thread(target=reader)
    t.start()
    try:
        for epoch in range(2, 200):
            new = arr.copy()
            new[:, rng.integers(0, 20_000, 2_000)] = rng.integers(0, 9, (4, 2_000))
            h.push(epoch, _patch_of(epoch - 1, arr, new, rng))
            arr = new
    finally:
        stop.set()
        t.join()
    assert not bad
