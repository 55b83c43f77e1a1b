"""The epoch log's compaction (it reaches back to the oldest checkpoint kept, and no further), the
marks of the epochs ranked, which a re-cut ends its hand-offs at, and its one writer.

The pipeline's side (crashes with a compacted log, the fallback to the older
checkpoint) runs in ``tests/pulsegraph/test_recovery.py`` with ``epoch_log_keep=0``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from pulsegraph.snapshots.checkpoint import CheckpointStore
from pulsegraph.snapshots.epoch import Epoch, EpochLog
from pulsegraph.snapshots.exceptions import CheckpointError, EpochLogError
from pulsegraph.snapshots.recovery import plan_recovery


def write_log(path, epochs: int) -> EpochLog:
    log = EpochLog(str(path))
    for n in range(1, epochs + 1):
        log.append(Epoch(n, {"p": 10 * n}, records=10 * n))
    return log


def test_compaction_drops_what_comes_before_the_given_epoch_and_appends_go_on(tmp_path):
    path = tmp_path / "epochs.log"
    log = write_log(path, 30)
    assert log.compact(21) == 20
    assert len(log) == 10
    log.append(Epoch(31, {"p": 310}))
    log.close()
    entries = EpochLog.read(str(path))
    assert [e.epoch for e in entries] == list(range(21, 32))
    assert entries[0].vector == {"p": 210} and entries[0].records == 210
    reopened = EpochLog(str(path))
    assert len(reopened) == 11, "a reopened log counts its lines"
    reopened.close()


def test_a_floor_keeps_the_newest_entries_and_rewrites_only_once_per_floor(tmp_path):
    path = tmp_path / "epochs.log"
    log = write_log(path, 30)
    assert log.compact(30, keep=20) == 0, "10 droppable lines are fewer than the floor: no rewrite yet"
    assert len(log) == 30
    for n in range(31, 46):
        log.append(Epoch(n, {"p": 10 * n}))
    assert log.compact(45, keep=20) == 25
    assert [e.epoch for e in EpochLog.read(str(path))] == list(range(26, 46))
    assert log.compact(1) == 0, "nothing before epoch 1"
    log.close()


def test_a_rewrite_that_a_crash_cut_short_leaves_the_old_log(tmp_path):
    path = tmp_path / "epochs.log"
    write_log(path, 5).close()
    (tmp_path / "epochs.log.tmp").write_bytes(b'{"epoch": 4, "vec')  # the crash came before the rename
    log = EpochLog(str(path))
    assert not (tmp_path / "epochs.log.tmp").exists()
    assert len(log) == 5 and [e.epoch for e in EpochLog.read(str(path))] == [1, 2, 3, 4, 5]
    log.close()


def test_a_compacted_log_without_a_checkpoint_stops_with_the_operator_action(tmp_path):
    log = write_log(tmp_path / "epochs.log", 12)
    log.compact(7)
    log.close()
    for use_checkpoints in (True, False):
        with pytest.raises(CheckpointError, match="starts at epoch 7") as err:
            plan_recovery(tmp_path, use_checkpoints, shards=None)
        assert "Operator action" in str(err.value)


def test_a_checkpoint_the_log_no_longer_follows_is_refused(tmp_path):
    log = write_log(tmp_path / "epochs.log", 12)
    log.compact(9)
    log.close()
    store = CheckpointStore(tmp_path)
    digest = store.write_shard(6, 0, b"state")
    store.commit(6, {"p": 60}, {"p": 60}, {0: digest})
    assert store.oldest() == 6
    with pytest.raises(CheckpointError, match="epochs between are lost"):
        plan_recovery(tmp_path, True, shards=1)
    assert os.path.exists(tmp_path / "epochs.log")


def test_the_ranked_marks_reach_the_recovery_plan_for_the_epochs_it_re_cuts(tmp_path):
    log = write_log(tmp_path / "epochs.log", 12)
    for e in (2, 5, 5, 9, 12):  # 5 twice: a re-cut epoch marked again
        log.mark_ranked(e)
    log.close()
    assert EpochLog.read_ranked(str(tmp_path / "epochs.log")) == [2, 5, 9, 12]
    store = CheckpointStore(tmp_path)
    store.commit(6, {"p": 60}, {"p": 60}, {0: store.write_shard(6, 0, b"state")})
    _, plan = plan_recovery(tmp_path, True, shards=1)
    assert [e.epoch for e in plan.replay] == [7, 8, 9, 10, 11, 12] and plan.ranked == {9, 12}
    _, plan = plan_recovery(tmp_path, False, shards=1)
    assert plan.ranked == {2, 5, 9, 12}


def test_a_torn_ranked_mark_is_skipped_and_compaction_drops_the_marks_before_the_log(tmp_path):
    path = tmp_path / "epochs.log"
    log = write_log(path, 30)
    for e in (3, 10, 20, 25):
        log.mark_ranked(e)
    log.close()
    with open(str(path) + ".ranked", "ab") as fh:
        fh.write(b"2")  # a crash mid-write of the mark of epoch 29 (say)
    assert EpochLog.read_ranked(str(path)) == [3, 10, 20, 25]
    log = EpochLog(str(path))
    log.mark_ranked(29)
    assert EpochLog.read_ranked(str(path)) == [3, 10, 20, 25, 29], "the torn mark was cut, not joined to the next"
    assert log.compact(20) == 19
    log.mark_ranked(30)
    log.close()
    assert EpochLog.read_ranked(str(path)) == [20, 25, 29, 30]
    assert EpochLog.read_ranked(str(tmp_path / "elsewhere.log")) == [], "no marks: a log from before them"


def test_a_second_writer_waits_for_the_first_and_is_refused_with_the_operator_action(tmp_path):
    path = str(tmp_path / "epochs.log")
    first = write_log(tmp_path / "epochs.log", 3)
    with pytest.raises(EpochLogError, match=f"pid {os.getpid()}.*Operator action"):
        EpochLog(path, wait_s=0.2)
    with pytest.raises(EpochLogError, match="still writes"):
        with EpochLog.no_writer(path, wait_s=0.2):
            pass
    first.close()
    second = EpochLog(path, wait_s=0.2)
    second.append(Epoch(4, {"p": 40}))
    second.close()
    assert [e.epoch for e in EpochLog.read(path)] == [1, 2, 3, 4]


# A coordinator as a crash leaves it: killed, but still appending until its process has exited.
_LATE_WRITER = """
import sys, time
from pulsegraph.snapshots.epoch import Epoch, EpochLog
log = EpochLog(sys.argv[1])
for n in (1, 2, 3):
    log.append(Epoch(n, {"p": 10 * n}))
print("ready", flush=True)
time.sleep(0.5)
log.append(Epoch(4, {"p": 40}))
time.sleep(600)
"""


def test_a_recovery_plan_reads_the_log_only_once_its_killed_writer_is_gone(tmp_path):
    """Without the writer lock the plan would read three epochs, and the next generation would cut a
    second epoch 4 after the one the dying writer appended."""
    writer = subprocess.Popen(
        [sys.executable, "-c", _LATE_WRITER, str(tmp_path / "epochs.log")], stdout=subprocess.PIPE,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == b"ready\n"
        threading.Timer(1.0, writer.send_signal, (signal.SIGKILL,)).start()
        t0 = time.monotonic()
        _, plan = plan_recovery(tmp_path, False, shards=1)
        assert time.monotonic() - t0 >= 0.8, "the plan waited for the writer's end"
        assert plan is not None and [e.epoch for e in plan.replay] == [1, 2, 3, 4]
    finally:
        writer.kill()
        writer.wait(10)
