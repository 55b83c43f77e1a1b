"""The coordinator's logic without Ray: cuts, the hand-off queue and its bounds, checkpoints, recovery.

Real shard stores and a real compute stage in this process (tests/snapshots/inprocess.py)
behind the real :class:`~pulsegraph.snapshots.coordinator.Coordinator`; epochs are
cut by hand, progress reported as an ingest actor reports it. The consumer can sit
behind a gate the test opens, so it is busy for exactly as long as the test says
and the epochs sealed meanwhile queue up.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from pulsegraph.compute.stage import ComputeStage, SealedEpoch, StageConfig, fingerprint
from pulsegraph.snapshots.checkpoint import CheckpointStore, loads, read_verified
from pulsegraph.snapshots.coordinator import IDLE_CHECKPOINT_POLL_S, Coordinator, CoordinatorConfig
from pulsegraph.snapshots.epoch import EpochInfo, EpochLog
from pulsegraph.snapshots.exceptions import CheckpointError, EpochOrderError
from pulsegraph.snapshots.recovery import plan_recovery
from pulsegraph.snapshots.store import ShardStore
from tests.graphref import reference, without_attrs
from tests.snapshots.inprocess import InProcessStages
from tests.snapshots.streams import route

RECORDS = [
    (o, json.dumps([{"op": "add_edge", "src": f"u{o}", "dst": f"v{o % 7}", "type": "link"}]).encode()) for o in range(60)
]
PER_EPOCH = 5
STAGE = StageConfig(rank_types=("link",))


class Harness:
    """A coordinator over two in-process shards and a compute stage; ``cut(e)`` delivers epoch ``e``'s
    five records, reports them and cuts."""

    def __init__(self, config: CoordinatorConfig, gate: threading.Event | None = None, consumer: bool = True,
                 stores: list[ShardStore] | None = None, stage: ComputeStage | None = None, resume=None) -> None:
        stores = stores or [ShardStore(i) for i in range(2)]
        stage = stage or (ComputeStage.made(STAGE) if consumer else None)
        self.stages = InProcessStages(stores, stage, gate, STAGE)
        self.coordinator = Coordinator(self.stages, config, resume)

    def deliver(self, e: int) -> None:
        batch = RECORDS[(e - 1) * PER_EPOCH : e * PER_EPOCH]
        for store, b in zip(self.stages.stores, route(len(self.stages.stores), "p", batch)):
            if len(b):
                store.receive(b)
        self.coordinator.report_progress({"p": (e * PER_EPOCH, PER_EPOCH, None)}, time.time(), PER_EPOCH)

    def cut(self, e: int) -> EpochInfo:
        self.deliver(e)
        info = self.coordinator.cut()
        assert info is not None and info.epoch == e
        return info

    def close(self) -> None:
        if self.stages.gate is not None:
            self.stages.gate.set()
        self.coordinator.stop()


def wait_for(predicate, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


@pytest.fixture
def harnesses():
    made: list[Harness] = []
    yield made
    for h in made:
        h.close()


def test_every_epoch_cut_is_logged_sealed_and_merged_and_nothing_new_cuts_nothing(tmp_path, harnesses):
    h = Harness(CoordinatorConfig(log_path=str(tmp_path / "epochs.log")))
    harnesses.append(h)
    infos = [h.cut(e) for e in (1, 2, 3)]
    assert h.coordinator.cut() is None, "no empty epochs"
    h.coordinator.flush()
    assert [e.vector for e in EpochLog.read(str(tmp_path / "epochs.log"))] == [{"p": 5}, {"p": 10}, {"p": 15}]
    assert [i.records for i in infos] == [5, 10, 15] and all(i.delta_bytes > 0 for i in infos)
    want = reference({"p": RECORDS}, {"p": 15}, "multi")
    assert h.stages.stage.graph.snapshot() == without_attrs(want)
    assert h.coordinator.status()["ranked"] == 3
    with pytest.raises(EpochOrderError):
        h.coordinator.report_progress({"p": (3, 0, None)}, time.time(), 0)


def test_a_busy_consumer_gets_every_epoch_sealed_meanwhile_in_one_hand_off_ending_at_a_due_checkpoint(tmp_path, harnesses):
    """Checkpoints at the fixed multiples of ``--checkpoint-every`` ended hand-offs in the middle of the
    queue, and the epochs after the multiple waited one more computation before they were ranked."""
    data = tmp_path / "data"
    gate = threading.Event()
    h = Harness(CoordinatorConfig(log_path=str(data / "epochs.log"), data_dir=str(data), checkpoint_every=3), gate)
    harnesses.append(h)
    h.cut(1)
    wait_for(lambda: h.stages.batches == [[1]], "epoch 1 was not handed over")
    for e in range(2, 9):
        h.cut(e)  # sealed while the consumer is busy with epoch 1
    gate.set()
    h.coordinator.flush()
    # One hand-off for all seven, not [2, 3], [4, 5, 6], [7, 8] at the multiples of 3.
    assert h.stages.batches == [[1], [2, 3, 4, 5, 6, 7, 8]]
    assert CheckpointStore(data).latest().epoch == 8, "the due checkpoint lands on the newest epoch"
    for e in range(9, 13):
        h.cut(e)
        h.coordinator.flush()  # an idle consumer: one epoch a hand-off
    assert h.stages.batches[2:] == [[9], [10], [11], [12]]
    # Three epochs after the last checkpoint a new one is due: it lands on 11, not on the multiple 12.
    assert CheckpointStore(data).latest().epoch == 11
    # Each hand-off's last epoch (the mark of epoch 1 went with the log's compaction: the oldest
    # checkpoint kept is 8).
    assert EpochLog.read_ranked(str(data / "epochs.log")) == [8, 9, 10, 11, 12]
    status = h.coordinator.status()
    assert status["ranked"] == 12 and status["queued"] == 0


def test_a_hand_off_is_marked_ranked_before_the_consumer_can_publish_it(tmp_path, harnesses):
    """The API serves an epoch as soon as the consumer has ranked it; were the mark written after, a crash in
    between would leave a served epoch unmarked, and the re-cut would merge it into a later one."""
    data = tmp_path / "data"
    gate = threading.Event()
    h = Harness(CoordinatorConfig(log_path=str(data / "epochs.log"), data_dir=str(data)), gate)
    harnesses.append(h)
    h.cut(1)
    wait_for(lambda: h.stages.batches == [[1]], "epoch 1 was not handed over")
    assert EpochLog.read_ranked(str(data / "epochs.log")) == [1], "the consumer is still ranking epoch 1"
    gate.set()
    h.coordinator.flush()
    assert h.coordinator.status()["ranked"] == 1


def test_the_queue_for_a_busy_consumer_is_full_at_its_bytes_bound_and_empty_once_merged(tmp_path, harnesses):
    """What is sealed and not merged yet is bounded by its deltas' bytes: the status says the queue is full
    (the supervisor then pauses ingest) once the batch in the consumer's hands and the epochs sealed
    meanwhile reach the bound, and it is empty again when the consumer is done with them."""
    sizer = Harness(CoordinatorConfig(log_path=str(tmp_path / "sizer.log")), consumer=False)
    harnesses.append(sizer)
    bound = int(2.5 * sizer.cut(1).delta_bytes)  # about two and a half epochs of five new edges each
    gate = threading.Event()
    h = Harness(CoordinatorConfig(log_path=str(tmp_path / "epochs.log"), max_queued_bytes=bound), gate)
    harnesses.append(h)
    sizes = [h.cut(1).delta_bytes]
    wait_for(lambda: h.stages.batches == [[1]], "epoch 1 was not handed over")
    assert h.coordinator.queue_status() == {"epochs": 0, "bytes": 0, "handing_bytes": sizes[0], "limit_bytes": bound, "full": False}
    fills = []
    for e in (2, 3, 4):  # sealed while the consumer is busy with epoch 1
        sizes.append(h.cut(e).delta_bytes)
        fills.append(h.coordinator.queue_status())
    assert [q["epochs"] for q in fills] == [1, 2, 3]
    assert [q["bytes"] for q in fills] == [sum(sizes[1:k]) for k in (2, 3, 4)]
    # Full counts the batch in the consumer's hands too: epoch 1 and the queue together reach the bound.
    assert [q["full"] for q in fills] == [q["bytes"] + sizes[0] >= bound for q in fills]
    assert fills[-1]["full"] and not fills[0]["full"]
    gate.set()
    h.coordinator.flush()
    assert h.stages.batches == [[1], [2, 3, 4]]
    assert h.coordinator.queue_status() == {"epochs": 0, "bytes": 0, "handing_bytes": 0, "limit_bytes": bound, "full": False}
    # Reached since the last status poll: the supervisor's once-a-second poll still sees it, once.
    assert h.coordinator.status()["compute_queue"]["full"]
    assert not h.coordinator.status()["compute_queue"]["full"]


def test_the_result_lag_counts_seal_time_behind_the_newest_ranked_epoch_and_its_peak_until_polled(tmp_path, harnesses):
    gate = threading.Event()
    h = Harness(CoordinatorConfig(log_path=str(tmp_path / "epochs.log"), max_result_lag=0.001), gate)
    harnesses.append(h)
    assert h.coordinator.result_lag() is None, "nothing ranked yet: no lag to speak of"
    gate.set()
    h.cut(1)
    h.coordinator.flush()
    assert h.coordinator.status()["result_lag"] == {"seconds": 0.0, "limit_s": 0.001, "over": False}
    gate.clear()
    h.cut(2)
    wait_for(lambda: h.stages.batches == [[1], [2]], "epoch 2 was not handed over")
    time.sleep(0.01)
    h.cut(3)  # sealed while epoch 2 is in the consumer's hands: epoch 3 is 10 ms and more past epoch 1
    lag = h.coordinator.status()["result_lag"]
    assert lag["over"] and lag["seconds"] >= 0.01
    gate.set()
    h.coordinator.flush()
    assert h.coordinator.status()["result_lag"]["seconds"] == 0.0
    assert not h.coordinator.status()["result_lag"]["over"], "the peak counts until one poll has seen it"


def test_a_small_checkpoint_budget_pauses_checkpoints_and_the_status_counts_the_epochs_passed_over(tmp_path, harnesses):
    def run(budget: float) -> tuple[list[int], dict]:
        data = tmp_path / f"budget-{budget}"
        config = CoordinatorConfig(
            log_path=str(data / "epochs.log"), data_dir=str(data), checkpoint_every=1, checkpoint_budget=budget,
            checkpoint_pause_from_s=0.0,
        )
        h = Harness(config)
        harnesses.append(h)
        committed = []
        for e in range(1, 9):
            h.cut(e)
            h.coordinator.flush()  # the checkpoint (if any) is committed before the next cut
            latest = CheckpointStore(data).latest()
            committed.append(latest.epoch if latest else 0)
        return committed, h.coordinator.status()

    every, status = run(budget=1.0)
    assert every == list(range(1, 9)), "without a pause every checkpoint epoch is checkpointed"
    assert status["checkpoint"]["paused"] == 0
    paused, status = run(budget=1e-6)
    # The first checkpoint took some milliseconds: at a millionth of the time, the next would wait for hours.
    assert paused == [1] * 8
    assert status["checkpoint"]["paused"] == 7 and status["checkpoint"]["seconds"] > 0


def test_a_checkpoint_the_pause_passed_over_is_written_when_it_ends_though_the_stream_went_quiet(tmp_path, harnesses):
    """A quiet stream cuts no new epoch that could become the checkpoint: the newest stayed undurable for good
    (a CI chaos run ended with the final epochs after the last checkpoint, paused after a relaunch's)."""
    clock = [0.0]
    data = tmp_path / "data"
    config = CoordinatorConfig(
        log_path=str(data / "epochs.log"), data_dir=str(data), checkpoint_every=1, checkpoint_budget=1e-6,
        checkpoint_pause_from_s=0.0, clock=lambda: clock[0],
    )
    h = Harness(config)
    harnesses.append(h)
    h.cut(1)
    h.coordinator.flush()
    h.cut(2)
    h.coordinator.flush()
    time.sleep(2 * IDLE_CHECKPOINT_POLL_S)
    status = h.coordinator.status()["checkpoint"]
    assert CheckpointStore(data).latest().epoch == 1 and status["epoch"] == 1 and status["paused"] == 1
    clock[0] += 1e9  # the pause (a million times the first checkpoint's stall) is over
    wait_for(lambda: h.coordinator.status()["checkpoint"]["epoch"] == 2, "the idle coordinator never wrote epoch 2")
    logged = EpochLog.read(str(data / "epochs.log"))
    assert CheckpointStore(data).latest().epoch == logged[-1].epoch == 2, "a restart has nothing to re-cut"


def test_after_a_crash_the_logged_epochs_are_cut_again_with_their_numbers_and_vectors(tmp_path, harnesses):
    data = tmp_path / "data"
    config = CoordinatorConfig(log_path=str(data / "epochs.log"), data_dir=str(data), checkpoint_every=2)
    first = Harness(config)
    harnesses.append(first)
    for e in range(1, 6):
        first.cut(e)
        first.coordinator.flush()
    first.close()  # as a crash leaves it: epochs 1-5 logged, the newest checkpoint at 4
    logged = EpochLog.read(str(data / "epochs.log"))

    manifest, resume = plan_recovery(data, True, 2)
    assert manifest is not None and resume is not None and resume.epoch == 4
    assert [e.epoch for e in resume.replay] == [5]
    stores = [ShardStore.restore(read_verified(manifest.shard_path(i), manifest.shards[i])) for i in range(2)]
    stage = ComputeStage.restored(loads(read_verified(manifest.compute_path, manifest.compute)), ("link",))
    again = Harness(config, stores=stores, stage=stage, resume=resume)
    harnesses.append(again)
    # The sources re-deliver from the checkpoint's vector; epoch 5 is re-cut only once all of it is back.
    again.deliver(5)
    assert again.coordinator.cut().epoch == 5
    again.coordinator.flush()
    assert [e.vector for e in EpochLog.read(str(data / "epochs.log"))] == [e.vector for e in logged]
    assert again.stages.stage.graph.snapshot() == without_attrs(reference({"p": RECORDS}, {"p": 25}, "multi"))
    assert again.cut(6).vector == {"p": 30}, "new epochs go on after the re-cut ones"


def test_a_clean_stop_checkpoints_its_last_epoch_with_the_stage_whole_and_the_next_start_goes_on_from_it(tmp_path, harnesses):
    """A clean stop seals what was delivered, ranks it, and checkpoints that epoch with the compute stage
    whole; the next start re-cuts nothing, its shards send ordinary deltas, and the stage read back goes on
    to the same results as one that never stopped (a start with another config rebuilds from the ids)."""
    data = tmp_path / "data"
    # Epoch 7 is due as a checkpoint as the stop's last cut hands it over: the stop writes it again, whole.
    config = CoordinatorConfig(log_path=str(data / "epochs.log"), data_dir=str(data), checkpoint_every=7, interval_s=3600)
    first = Harness(config)
    harnesses.append(first)
    first.coordinator.start()
    for e in range(1, 7):
        first.cut(e)
        first.coordinator.flush()
    first.deliver(7)  # delivered, not cut yet: the stop's last cut seals it
    assert first.coordinator.finish(30) == 7
    first.close()
    manifest, resume = plan_recovery(data, True, 2)
    assert manifest is not None and resume is not None and resume.epoch == 7 and not resume.replay
    assert manifest.compute_whole == fingerprint(STAGE)

    saved = loads(read_verified(manifest.compute_path, manifest.compute))
    stores = [ShardStore.restore(read_verified(manifest.shard_path(i), manifest.shards[i]), resend_all=False) for i in range(2)]
    again = Harness(config, stores=stores, stage=ComputeStage.made(STAGE, saved, whole=True), resume=resume)
    harnesses.append(again)
    assert again.stages.stage.epoch == 7 and again.stages.stage.whole_restored_at == 7
    reference_run = Harness(CoordinatorConfig(log_path=str(tmp_path / "ref.log")))
    harnesses.append(reference_run)
    for e in range(1, 11):
        if e > 7:
            again.cut(e)
            again.coordinator.flush()
        reference_run.cut(e)
        reference_run.coordinator.flush()
    assert again.stages.full_deltas == 0, "the restored shards sent ordinary deltas"
    assert again.stages.stage.graph.snapshot() == without_attrs(reference({"p": RECORDS}, {"p": 50}, "multi"))
    got, want = again.stages.results[-1], reference_run.stages.results[-1]
    assert got.epoch == want.epoch == 10 and not got.full_changes
    for name in want.scores:
        assert (got.scores[name] == want.scores[name]).all(), name
    for a, b in ((got.apps["components"], want.apps["components"]), (got.apps["landmarks"], want.apps["landmarks"])):
        for f in ("count", "top", "top_sizes", "ids"):
            assert str(getattr(a, f, None)) == str(getattr(b, f, None)), f

    # Another config cannot go on from the stage: its ids (and the applications' stamps) are taken instead.
    other = ComputeStage.made(StageConfig(rank_types=None), saved)
    assert other.epoch == 0 and other.graph.names == again.stages.stage.graph.names[: other.graph.n]
    with pytest.raises(CheckpointError):
        ComputeStage.made(StageConfig(rank_types=None), saved, whole=True)


def test_every_second_checkpoint_whole_and_a_crash_goes_on_from_the_newest_one(tmp_path, harnesses):
    """``checkpoint_whole_every=2``: checkpoints alternate between the consumer's ids and its whole state. After a
    crash the newest (whole) one is resumed from: the stage goes on from its state, the shards send ordinary
    deltas, the logged epochs after it are cut again, and every epoch equals an uninterrupted run's."""
    data = tmp_path / "data"
    config = CoordinatorConfig(log_path=str(data / "epochs.log"), data_dir=str(data), checkpoint_every=2,
                               checkpoint_whole_every=2)
    first = Harness(config)
    harnesses.append(first)
    kinds = {}
    for e in range(1, 10):
        first.cut(e)
        first.coordinator.flush()
        manifest = CheckpointStore(data).latest()
        if manifest is not None:
            kinds[manifest.epoch] = manifest.compute_whole
    first.close()  # a crash: epochs 1-9 logged, no stop's checkpoint
    assert kinds == {2: None, 4: fingerprint(STAGE), 6: None, 8: fingerprint(STAGE)}

    manifest, resume = plan_recovery(data, True, 2)
    assert manifest is not None and resume is not None and resume.epoch == 8 and [e.epoch for e in resume.replay] == [9]
    saved = loads(read_verified(manifest.compute_path, manifest.compute))
    stores = [ShardStore.restore(read_verified(manifest.shard_path(i), manifest.shards[i]), resend_all=False) for i in range(2)]
    again = Harness(config, stores=stores, stage=ComputeStage.made(STAGE, saved, whole=True), resume=resume)
    harnesses.append(again)
    reference_run = Harness(CoordinatorConfig(log_path=str(tmp_path / "ref.log")))
    harnesses.append(reference_run)
    for e in range(1, 11):
        reference_run.cut(e)
        reference_run.coordinator.flush()
    again.deliver(9)
    assert again.coordinator.cut().epoch == 9  # cut again, as logged
    again.cut(10)
    again.coordinator.flush()
    assert again.stages.full_deltas == 0, "the restored shards sent ordinary deltas"
    got, want = again.stages.results[-1], reference_run.stages.results[-1]
    assert got.epoch == want.epoch == 10
    assert again.stages.stage.graph.snapshot() == without_attrs(reference({"p": RECORDS}, {"p": 50}, "multi"))
    for name in want.scores:
        assert (got.scores[name] == want.scores[name]).all(), name


def test_a_failure_in_the_consumer_fails_the_pipeline_and_no_later_epoch_is_ranked(tmp_path, harnesses):
    stage = ComputeStage(("link",))
    stage.apply([SealedEpoch(EpochInfo(epoch=9, vector={}, records=0, sealed_at=0.0, commit_ms=0.0, timeliness_ms={}))])
    h = Harness(CoordinatorConfig(log_path=str(tmp_path / "epochs.log")), stage=stage)  # it has merged epoch 9 already
    harnesses.append(h)
    h.cut(1)
    h.coordinator.flush()
    status = h.coordinator.status()
    assert status["failed"] and "compute failed on epoch 1" in status["failed"] and "ValueError" in status["failed"]
    h.deliver(2)
    assert h.coordinator.cut() is None, "nothing goes on ranking a graph that missed an epoch"
