"""A checkpoint's payload: large buffers written out of band, from where they lie, and read back whole."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from pulsegraph.snapshots.checkpoint import CheckpointStore, dumps, load_verified, loads, read_verified, verify_file, write_atomic
from pulsegraph.snapshots.exceptions import CorruptCheckpoint
from pulsegraph.snapshots.epoch import EpochInfo


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


def test_a_checkpoint_of_the_old_top_level_modules_still_loads():
    """Checkpoints written while the stages were top-level packages (``snapshots.epoch``, not
    ``pulsegraph.snapshots.epoch``) name their classes by those modules; they restore as the same classes."""
    info = EpochInfo(epoch=3, vector={"p0": 10}, records=10, sealed_at=1.0, commit_ms=0.5,
                     timeliness_ms={"p50": 0.0, "p99": 0.0, "max": 0.0})
    # Protocol 0 writes each class's module as a line of text, where the old name can stand in.
    new = pickle.dumps({"info": info, "ids": np.arange(4)}, protocol=0)
    assert b"pulsegraph.snapshots.epoch" in new
    old = new.replace(b"pulsegraph.snapshots.epoch", b"snapshots.epoch")
    back = loads(old)
    assert type(back["info"]) is EpochInfo and back["info"] == info and back["ids"].tolist() == [0, 1, 2, 3]


def test_a_payload_is_loaded_buffer_by_buffer_as_read_whole_and_a_damaged_file_is_refused(tmp_path):
    """``load_verified`` (the compute stage written whole: gigabytes) reads each buffer straight into the one it
    comes back as, checking the digest as it goes; it answers what ``loads(read_verified(...))`` does, and a
    flipped byte, a file cut short or one grown longer is refused as corrupt."""
    cols = {"src": np.arange(100_000, dtype=np.int32), "w": np.linspace(0, 1, 5_000), "names": ["a", "b"], "n": 7}
    path = tmp_path / "compute.ckpt"
    digest = write_atomic(path, dumps(cols))
    back = load_verified(path, digest)
    assert back["n"] == 7 and back["names"] == ["a", "b"]
    for k in ("src", "w"):
        assert np.array_equal(back[k], cols[k]) and back[k].flags.writeable
    whole = tmp_path / "old.ckpt"
    write_atomic(whole, pickle.dumps({"epoch": 4}, protocol=5))  # from before the out-of-band framing
    assert load_verified(whole)["epoch"] == 4
    verify_file(path, digest)  # what a launch checks of every file of the newest checkpoint, in pieces
    good = path.read_bytes()
    for name, bad in (("flipped", good[:-5] + bytes([good[-5] ^ 1]) + good[-4:]), ("short", good[:-9]), ("long", good + b"x")):
        path.write_bytes(bad)
        with pytest.raises(CorruptCheckpoint):
            load_verified(path, digest)
        with pytest.raises(CorruptCheckpoint):
            load_verified(path)
        with pytest.raises(CorruptCheckpoint):
            verify_file(path, digest)


def test_a_checkpoint_whose_partition_file_does_not_check_out_is_passed_over(tmp_path):
    """A stage with partition actors written whole: the manifest names each partition's file with its sha256,
    and a launch checks them as it checks the shards' files, falling back to the checkpoint before."""
    store = CheckpointStore(tmp_path)
    for epoch in (1, 2):
        shard = store.write_shard(epoch, 0, b"shard")
        compute = store.write_file(epoch, "compute.ckpt", b"stage")
        rows = {f"partition-{q}.ckpt": store.write_file(epoch, f"partition-{q}.ckpt", b"rows %d" % q) for q in range(2)}
        store.commit(epoch, {"p0": epoch}, {"p0": epoch}, {0: shard}, compute, compute_whole="f", compute_files=rows)
    newest = store.latest()
    assert newest is not None and newest.epoch == 2 and newest.compute_files == rows
    torn = store.folder(2) / "partition-1.ckpt"
    torn.write_bytes(torn.read_bytes()[:-1])
    previous = store.latest()
    assert previous is not None and previous.epoch == 1 and set(previous.compute_files) == set(rows)


def test_a_file_the_launch_just_checked_is_read_without_hashing_it_again_but_must_be_the_one_named(tmp_path):
    path = tmp_path / "compute.ckpt"
    digest = write_atomic(path, dumps({"v": np.arange(1000)}))
    assert (load_verified(path, digest, rehash=False)["v"] == np.arange(1000)).all()
    assert loads(read_verified(path, digest, rehash=False))["v"].sum() == 499500
    with pytest.raises(CorruptCheckpoint, match="not the file its manifest names"):
        load_verified(path, "0" * 64, rehash=False)
    with pytest.raises(CorruptCheckpoint, match="not the file its manifest names"):
        read_verified(path, "0" * 64, rehash=False)
