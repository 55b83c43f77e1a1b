"""A checkpoint's payload: large buffers written out of band, from where they lie, and read back whole."""

from __future__ import annotations

import pickle

import numpy as np

from snapshots.checkpoint import dumps, loads, read_verified, write_atomic


def test_columns_go_out_of_band_and_come_back_equal_and_writable(tmp_path):
    cols = {"src": np.arange(100_000, dtype=np.int32), "weight": np.linspace(0, 1, 50_000), "names": b"msgpack", "n": 7}
    chunks = dumps(cols)
    head = chunks[2]
    assert len(head) < 1_000, "the arrays are not in the pickle itself"
    assert any(isinstance(c, memoryview) and np.shares_memory(np.frombuffer(c, np.int32), cols["src"]) for c in chunks), \
        "a column is written from its own memory, not a copy"
    digest = write_atomic(tmp_path / "shard-0.ckpt", chunks)
    assert digest == write_atomic(tmp_path / "joined.ckpt", b"".join(chunks)), "chunks or bytes: the same file"
    back = loads(read_verified(tmp_path / "shard-0.ckpt", digest))
    assert back["n"] == 7 and back["names"] == b"msgpack"
    for k in ("src", "weight"):
        assert back[k].dtype == cols[k].dtype and np.array_equal(back[k], cols[k])
        back[k][0] = 1  # restored columns go on growing in place


def test_a_payload_pickled_whole_still_loads():
    """Checkpoints written before the out-of-band framing."""
    old = pickle.dumps({"exists": np.ones(3, dtype=bool), "epoch": 4}, protocol=5)
    back = loads(old)
    assert back["epoch"] == 4 and back["exists"].tolist() == [True] * 3
