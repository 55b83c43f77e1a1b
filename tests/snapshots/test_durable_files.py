"""Every file and folder the service creates is made durable in its parent folder.

A power cut cannot be staged in a test; what it would undo can be watched: a
file's fsync keeps its bytes, and only the fsync of the folder that lists it
keeps its name. Here every fsync of a folder is recorded, for real calls of the
epoch log, the event log, the dead-letter sink and a checkpoint.
"""

from __future__ import annotations

import os
import stat

import pytest

from pulsegraph.ingest.deadletter import DeadLetter, FileDeadLetterSink
from pulsegraph.ingest.eventlog import EventLog
from pulsegraph.snapshots.checkpoint import CheckpointStore
from pulsegraph.snapshots.epoch import Epoch, EpochLog


@pytest.fixture
def synced_dirs(monkeypatch) -> list[str]:
    seen: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


def test_the_epoch_log_and_its_folders(tmp_path, synced_dirs):
    log = EpochLog(str(tmp_path / "data" / "epochs.log"))
    log.append(Epoch(1, {"p": 3}))
    log.close()
    assert str(tmp_path) in synced_dirs  # data/ was created in it
    assert str(tmp_path / "data") in synced_dirs  # epochs.log was created in it
    synced_dirs.clear()
    EpochLog(str(tmp_path / "data" / "epochs.log")).close()
    assert synced_dirs == [], "reopening creates nothing, so nothing more needs syncing"


def test_the_event_log_and_the_dead_letters(tmp_path, synced_dirs):
    EventLog(str(tmp_path / "ev" / "events.jsonl")).append([b"{}"])
    FileDeadLetterSink(str(tmp_path / "dl" / "dead.jsonl")).write([DeadLetter("p", 0, "bad", b"x")])
    for folder in (tmp_path, tmp_path / "ev", tmp_path / "dl"):
        assert str(folder) in synced_dirs, folder


def test_a_checkpoint_folder_and_its_files(tmp_path, synced_dirs):
    store = CheckpointStore(tmp_path / "data")
    store.write_shard(7, 0, b"state")
    store.commit(7, {"p": 1}, {"p": 1}, {0: "digest"})
    root = tmp_path / "data" / "checkpoints"
    assert str(root) in synced_dirs  # the epoch's folder was created in it
    assert synced_dirs.count(str(store.folder(7))) >= 2  # the shard's file, then the manifest, renamed into it
