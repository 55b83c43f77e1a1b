"""The epoch coordinator's logic: the progress table, the cut, the durable epoch log and the seal.

Ingest actors report "all of partition p below offset h_p is delivered to every shard". Every
interval the coordinator copies that table into a vector V_e, appends (e, V_e) to the epoch log
(fsync), tells every shard to apply through V_e, seals the epoch once all of them answered, and hands
their deltas, unopened, to the consumer (the compute stage). It reaches both only through :class:`Stages`:
the actor (:mod:`~pulsegraph.snapshots.coordinator_actor`) passes Ray handles, unit tests in-process stages.

- **Cutting never waits for the consumer.** Sealed epochs queue for a hand-off thread that gives the
  consumer everything queued whenever it is free, in one call: a slow consumer ranks the newest sealed
  epoch and skips the ones between. What is sealed and not merged (the queue and the batch in the
  consumer's hands) is bounded by its deltas' bytes (``max_queued_bytes``); at the bound, or once it
  was reached since the last :meth:`status`, the status says the queue is full and the supervisor
  pauses ingest (backpressure, not a spill of Ray's object store). The seal time between the newest
  sealed and the newest ranked epoch is reported the same way against ``max_result_lag``.
- **Checkpoints** are placed by the hand-off thread: once ``--checkpoint-every`` epochs were sealed
  since the last, the newest sealed epoch becomes the checkpoint as a hand-off starts, the hand-off
  ends there, and the consumer's checkpoint follows, so its state is saved as of exactly that epoch.
  One that stalled a stage ``d`` s pauses the next ``d * (1 / budget - 1)`` s (``--checkpoint-budget``);
  one passed over is written when the pause ends if the stream went quiet meanwhile.
- **Recovery.** The epoch each hand-off ends at is marked ranked beside the log; a re-cut after a
  crash ends its hand-offs at the same epochs and checkpoints re-cut epochs at the multiples. ``stop``
  lets the hand-off in flight finish and leaves queued epochs, sealed and logged, to the next launch;
  a clean stop calls :meth:`Coordinator.finish` first: every delivered record sealed and ranked, and the
  newest epoch a checkpoint with the consumer written whole, so the next launch re-cuts and rebuilds nothing.
- A failure in the consumer fails the pipeline (``status()["failed"]``): nothing goes on ranking a
  graph that missed an epoch. BENCHMARKS.md (the soak, windows) has the measurements behind these.
"""

from __future__ import annotations

import collections
import logging
import threading
import time

from pulsegraph.snapshots.checkpoint import CheckpointPace, CheckpointStore, WrittenPart
from pulsegraph.snapshots.delta import late_transactions
from pulsegraph.snapshots.epoch import Epoch, EpochInfo, EpochLog, EpochStatus, now
from pulsegraph.snapshots.exceptions import EpochOrderError
from pulsegraph.snapshots.recovery import RecoveryPlan
from pulsegraph.snapshots.stages import (
    CHECKPOINT_PAUSE_FROM_S,
    IDLE_CHECKPOINT_POLL_S,
    MAX_QUEUED,
    RECENT,
    STOP_WAIT_S,
    CoordinatorConfig,
    Pending,
    Stages,
)

__all__ = [
    "CHECKPOINT_PAUSE_FROM_S", "IDLE_CHECKPOINT_POLL_S", "MAX_QUEUED", "RECENT", "STOP_WAIT_S", "Coordinator",
    "CoordinatorConfig", "Pending", "Stages",
]

log = logging.getLogger(__name__)


class Coordinator:
    def __init__(self, stages: Stages, config: CoordinatorConfig, resume: RecoveryPlan | None = None) -> None:
        """``resume``: the plan of the checkpoint the shards were restored from; its ``replay`` lists the
        epoch-log entries after it, which are cut again with exactly their logged numbers, vectors and
        watermarks, so history after a crash is the history before it."""
        self._stages = stages
        self.config = config
        self._log = EpochLog(config.log_path)
        self._data_dir = config.data_dir
        self._checkpoints = CheckpointStore(config.data_dir) if config.data_dir and config.checkpoint_every else None
        self._pace = CheckpointPace(config.checkpoint_budget, config.checkpoint_pause_from_s, config.clock)
        self._durable_epoch = resume.epoch if resume else 0  # the newest checkpoint committed
        self._checkpointed = resume.epoch if resume else 0  # the newest epoch made a checkpoint
        self._since_whole = 0  # checkpoints committed with the consumer's ids only since one with it whole
        self._lock = threading.Lock()  # progress table vs. the cut
        self._cut_lock = threading.Lock()  # one cut at a time
        self._progress: dict[str, int] = {}
        self._valid: dict[str, int] = {}  # transactions (valid records) below progress[p]
        self._pending: list[tuple[float, int]] = []  # (read_at, records) reported since the last cut
        self._last: Epoch | None = None
        self._durable: dict[str, int] = {}
        self._replay: collections.deque = collections.deque()
        # After a restore, the next cut happens even with nothing new: it carries the restored
        # state downstream, so results are served again without waiting for new records.
        self._republish = bool(resume)
        # The window (seconds, or None) and the watermark: the largest event time among the transactions
        # delivered so far. Progress is reported in offset order, so when the table is copied into V_e
        # this maximum is exactly W_e, the largest event time below V_e; it is logged with the epoch.
        self._window = config.window
        self._watermark: float | None = None
        self._late = 0  # transactions that arrived with their time already outside the window
        self._ranked_before: frozenset[int] = resume.ranked if resume else frozenset()
        if resume:
            self._watermark = resume.watermark
            self._late = resume.late
            self._progress = dict(resume.vector)
            self._valid = dict(resume.valid)
            self._durable = dict(resume.vector)
            self._last = Epoch(resume.epoch, dict(resume.vector), EpochStatus.DURABLE, watermark=resume.watermark)
            self._replay.extend(e for e in resume.replay if e.epoch > resume.epoch)
        self._recent: collections.deque = collections.deque(maxlen=RECENT)
        # Sealed epochs for the consumer: (info, delta refs, checkpoint or None, re-cut from the log), oldest first.
        self._queue: collections.deque = collections.deque()
        self._queued = threading.Condition()
        self._max_queued_bytes = config.max_queued_bytes or None
        self._queued_bytes = 0  # the deltas of the epochs in _queue
        self._handing_bytes = 0  # ... and of the batch handed over, until the consumer is done with it
        self._busy = False  # the hand-off thread has taken a batch (placing its checkpoint, or in a consumer call)
        self._handed: dict | None = None  # what the consumer answered last
        self._handed_through = 0  # the newest epoch whose hand-off (and checkpoint) is done
        self._max_result_lag = config.max_result_lag or None
        self._ranked_sealed_at: float | None = None  # when the newest epoch the consumer ranked was sealed
        # What the bounds reached between two reads of status() (the supervisor's poll, once a second): a
        # queue that fills and drains, or a lag that opens and closes, within a second still pauses ingest.
        self._queue_reached = False
        self._lag_peak = 0.0
        self._failed: str | None = None
        self._stop = threading.Event()
        self._no_more_cuts = threading.Event()  # set by stop() and a clean stop's finish(): the cutter's loop ends
        self._thread: threading.Thread | None = None
        self._handoff = threading.Thread(target=self._hand_off_loop, name="epoch-handoff", daemon=True)
        self._handoff.start()

    def start(self) -> None:
        if self.config.interval_s and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="epoch-cutter", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop cutting, and hand nothing more over: the hand-off in flight gets :data:`STOP_WAIT_S` to finish;
        the epochs still queued are sealed and logged, and the next launch re-cuts them (see the module
        docstring). ``flush`` first for a consumer that must have every sealed epoch."""
        self._stop.set()
        self._no_more_cuts.set()
        with self._queued:
            self._queued.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=60)
        self._handoff.join(timeout=STOP_WAIT_S)
        if self._handoff.is_alive():
            log.warning("stopping with the hand-off of a batch still running after %.0f s; the next launch re-cuts it", STOP_WAIT_S)
        with self._queued:
            left = len(self._queue)
        if left:
            log.info("stopping with %d sealed epochs not handed to the consumer; the next launch re-cuts them", left)
        self._log.close()

    def report_progress(self, progress: dict[str, tuple], read_at: float, records: int) -> dict[str, int]:
        """Record delivered progress; answers the newest durable vector (what a source may commit upstream)."""
        with self._lock:
            for p, report in progress.items():
                high, valid = report[0], report[1]
                latest = report[2] if len(report) > 2 else None
                if high < self._progress.get(p, 0):
                    raise EpochOrderError(f"progress for {p} goes back from {self._progress[p]} to {high}")
                self._progress[p] = high
                self._valid[p] = self._valid.get(p, 0) + valid
                if latest is not None:
                    self._watermark = latest if self._watermark is None else max(self._watermark, latest)
            self._pending.append((read_at, records))
            return self._durable

    def _loop(self) -> None:
        wait = self.config.interval_s
        while not self._no_more_cuts.wait(wait):
            try:
                info = self.cut()
            except Exception:  # noqa: BLE001 - the failed epoch is recorded; cutting stops
                log.exception("epoch failed; the coordinator stops cutting")
                return
            # Logged epochs are re-cut back to back, as fast as the sources deliver them again: a recovery
            # catches up at their pace, not one epoch per interval (and what queues meanwhile is merged).
            wait = 0.0 if info is not None and self._replay else self.config.interval_s

    def cut(self) -> EpochInfo | None:
        """Cut, log, apply and seal one epoch now. Returns its info, or None when nothing new was delivered."""
        with self._queued:
            # Outside the cut lock: the hand-off thread takes it to make the newest epoch a checkpoint.
            while len(self._queue) >= MAX_QUEUED and not self._failed and not self._stop.is_set():
                self._queued.wait(1.0)
        with self._cut_lock:
            if self._failed:
                return None
            replaying = bool(self._replay)
            with self._lock:
                if replaying:
                    # Re-cut a logged epoch once the sources have re-delivered everything below its vector.
                    head = self._replay[0]
                    if any(self._progress.get(p, 0) < o for p, o in head.vector.items()):
                        return None
                    self._replay.popleft()
                    number, vector, records = head.epoch, dict(head.vector), head.records
                    valid = None if head.valid is None else dict(head.valid)  # None: a log from before it was logged
                    watermark = head.watermark
                else:
                    vector = dict(self._progress)
                    if vector == (self._last.vector if self._last else {}) and not self._republish:
                        return None  # nothing new delivered: no empty epochs
                    number = (self._last.number + 1) if self._last else 1
                    records, valid = sum(self._valid.values()), dict(self._valid)
                    watermark = self._watermark
                pending, self._pending = self._pending, []
            if self._window and watermark is None:
                watermark = self._last.watermark if self._last and self._last.watermark is not None else 0.0
            epoch = Epoch(number=number, vector=vector, records=records, watermark=watermark if self._window else None, valid=valid)
            epoch.follows(self._last)
            try:
                epoch.cut_at = now()
                if not replaying:
                    self._log.append(epoch)
                epoch.advance(EpochStatus.CUT)
                summaries, deltas = self._stages.apply(epoch.number, vector, epoch.watermark)
                epoch.sealed_at = now()
                epoch.advance(EpochStatus.SEALED)
            except Exception as exc:
                epoch.fail(f"{type(exc).__name__}: {exc}")
                self._failed = epoch.error
                self._recent.append(epoch)
                raise
            epoch.measure_timeliness(pending)
            self._last = epoch
            self._recent.append(epoch)
            self._republish = False
            late = late_transactions(summaries)
            self._late += late
            info = EpochInfo(
                epoch=epoch.number, vector=dict(vector), records=records, sealed_at=epoch.sealed_at,
                commit_ms=(epoch.sealed_at - epoch.cut_at) * 1000.0, timeliness_ms=epoch.timeliness_ms,
                cut_at=epoch.cut_at, updates=sum(s.updates for s in summaries),
                live_edges=sum(s.live_edges for s in summaries), window=self._window, watermark=epoch.watermark,
                late=late, delta_bytes=sum(s.delta_bytes for s in summaries),
            )
            # A re-cut epoch is a checkpoint at the multiples, as it is re-cut: after a crash with nothing
            # new to read, the newest checkpoint catches up with the log. New epochs are made checkpoints
            # by the hand-off thread (see the module docstring).
            recut_checkpoint = (
                self._checkpoints is not None and replaying and valid is not None and epoch.number % self.config.checkpoint_every == 0
            )
            checkpoint = self._checkpoint_parts(epoch) if recut_checkpoint else None
            if self._stages.has_consumer or self._checkpoints is not None:
                with self._queued:
                    self._queue.append((info, deltas, checkpoint, replaying))
                    self._queued_bytes += info.delta_bytes
                    self._queue_reached |= self._full(len(self._queue), self._queued_bytes + self._handing_bytes)
                    self._queued.notify_all()
            if self._ranked_sealed_at is not None:
                self._lag_peak = max(self._lag_peak, epoch.sealed_at - self._ranked_sealed_at)
            return info

    def _checkpoint_parts(self, epoch: Epoch) -> tuple[Epoch, dict[str, int], Pending, int]:
        """Ask the shards to write their parts as of ``epoch``, the newest they applied (caller holds the cut
        lock, so none applies a later one first); the consumer's part and the manifest follow on the
        hand-off thread."""
        self._checkpointed = epoch.number
        # Checkpoints are configured only with a data folder; callers checkpoint only epochs whose valid counts are known.
        assert self._data_dir is not None and epoch.valid is not None
        return epoch, epoch.valid, self._stages.checkpoint_shards(epoch.number, self._data_dir), self._late

    def _checkpoint_due(self, last: Epoch | None) -> bool:
        """Is ``last`` (the newest sealed epoch) to be a checkpoint: ``checkpoint_every`` epochs sealed since the
        last one, none re-cut still (re-cut epochs are checkpointed as they are cut)?"""
        return (
            self._checkpoints is not None and not self._replay and last is not None and last.valid is not None
            and last.number - self._checkpointed >= self.config.checkpoint_every
        )

    def _checkpoint_newest(self) -> None:
        """Make the newest sealed epoch a checkpoint if one is due and it is still queued: the hand-off about to
        start then ends at it. The budget's pause passes a due checkpoint over (and counts it)."""
        if not self._checkpoint_due(self._last):
            return  # seen without waiting for a cut
        with self._cut_lock:
            last = self._last
            if last is None or not self._checkpoint_due(last):
                return
            with self._queued:
                if not self._queue or self._queue[-1][0].epoch != last.number or self._queue[-1][2] is not None:
                    return
            if self._pace.pass_over():
                return
            parts = self._checkpoint_parts(last)
            with self._queued:
                info, deltas, _, replaying = self._queue[-1]
                self._queue[-1] = (info, deltas, parts, replaying)

    def _checkpoint_idle(self) -> None:
        """With nothing queued, write the checkpoint the pause passed over once it ends: the consumer has
        merged exactly the newest sealed epoch. (A stream that went quiet left it undurable for good.)"""
        if self._failed or self._pace.left_s() > 0.0 or not self._checkpoint_due(self._last):
            return
        with self._cut_lock:
            last = self._last
            with self._queued:
                if self._queue or last is None or self._handed_through != last.number or not self._checkpoint_due(last):
                    return
            parts = self._checkpoint_parts(last)
        self._checkpoint(*parts, whole=self._whole_due())

    # -- the hand-off thread -----------------------------------------------------------------
    def _next_batch(self) -> list:
        """Everything queued, up to and including the first checkpoint epoch, or the first re-cut epoch
        that was ranked before the crash (caller holds the lock)."""
        batch = []
        while self._queue:
            item = self._queue.popleft()
            batch.append(item)
            self._queued_bytes -= item[0].delta_bytes
            self._handing_bytes += item[0].delta_bytes
            if item[2] is not None or (item[3] and item[0].epoch in self._ranked_before):
                break
        return batch

    def _hand_off_loop(self) -> None:
        while True:
            with self._queued:
                if not self._queue and not self._stop.is_set():
                    self._queued.wait(IDLE_CHECKPOINT_POLL_S if self._checkpoint_due(self._last) else None)
                if self._stop.is_set():
                    return  # what is queued stays sealed and logged for the next launch
                self._busy = bool(self._queue)
            if not self._busy:
                self._checkpoint_idle()
                continue
            self._checkpoint_newest()
            with self._queued:
                batch = self._next_batch()
                self._queued.notify_all()
            try:
                self._hand_off(batch)
                self._handed_through = batch[-1][0].epoch
            except Exception as exc:  # noqa: BLE001 - the pipeline must not go on without this epoch
                numbers = [info.epoch for info, _, _, _ in batch]
                log.exception("the consumer failed on epochs %s", numbers)
                self._failed = f"compute failed on epoch {numbers[-1]}: {type(exc).__name__}: {exc}"
                with self._queued:
                    self._queue.clear()
                    self._queued_bytes = 0
            finally:
                with self._queued:
                    self._busy = False
                    self._handing_bytes = 0
                    self._queued.notify_all()

    def _hand_off(self, batch: list) -> None:
        infos = [info for info, _, _, _ in batch]
        if self._stages.has_consumer:
            # The mark goes first: the API may serve the ranked epoch as soon as the consumer returns, and a
            # crash in between would leave a served epoch unmarked, which a re-cut then merges away.
            self._log.mark_ranked(infos[-1].epoch)
            self._handed = self._stages.consume(infos, [d for _, deltas, _, _ in batch for d in deltas])
            self._ranked_sealed_at = infos[-1].sealed_at
        if batch[-1][2] is not None:  # a re-cut epoch's checkpoint keeps the ids only: the recovery goes on sooner
            epoch, valid, shards_written, late = batch[-1][2]
            self._checkpoint(epoch, valid, shards_written, late, whole=self._whole_due() and not batch[-1][3])

    def _whole_due(self) -> bool:
        """Is the next periodic checkpoint the ``checkpoint_whole_every``-th, with the consumer written whole?"""
        every = self.config.checkpoint_whole_every
        return bool(every) and self._since_whole + 1 >= every

    def _checkpoint(self, epoch: Epoch, valid: dict[str, int], shards_written: Pending, late: int = 0, whole: bool = False) -> bool:
        try:
            self._commit_checkpoint(epoch, valid, shards_written, late, whole)
            return True
        except Exception:  # noqa: BLE001 - the epoch stays sealed; the next checkpoint tries again
            log.exception("checkpoint of epoch %d failed", epoch.number)
            return False

    def _commit_checkpoint(self, epoch: Epoch, valid: dict[str, int], shards_written: Pending, late: int, whole: bool) -> None:
        """The consumer's ids as of ``epoch`` (it has just merged exactly up to it; ``whole``: its whole state),
        the shards' files written at the cut, then the manifest: the epoch is DURABLE."""
        assert self._checkpoints is not None and self._data_dir is not None  # only where checkpoints are configured
        stages = self._stages
        compute = stages.checkpoint_consumer(epoch.number, self._data_dir, whole) if stages.has_consumer else None
        written = shards_written()  # (sha256, seconds the write stalled the shard) each
        part: WrittenPart = compute() if compute is not None else WrittenPart(None, 0.0)
        self._checkpoints.commit(
            epoch.number, epoch.vector, valid, {i: digest for i, (digest, _) in enumerate(written)}, part.digest, late,
            part.whole, dict(part.files),
        )
        self._pace.done(max([part.seconds, *(s for _, s in written)]))
        self._since_whole = 0 if part.whole else self._since_whole + 1
        if epoch.status is not EpochStatus.DURABLE:  # a stop's checkpoint may write the newest durable one again, whole
            epoch.advance(EpochStatus.DURABLE)
        with self._lock:
            self._durable, self._durable_epoch = dict(epoch.vector), epoch.number
        oldest = self._checkpoints.oldest()
        if oldest is not None:
            # Recovery re-cuts from a checkpoint kept on disk, the oldest one at worst (and reads that
            # epoch's watermark from its entry): what lies before it is history no launch reads.
            dropped = self._log.compact(oldest, self.config.log_keep)
            if dropped:
                log.info("epoch log compacted: %d entries before epoch %d dropped, %d kept", dropped, oldest, len(self._log))

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until the consumer has finished every epoch sealed so far (or the hand-off failed, or stopped,
        or ``timeout_s`` passed). Cuts go on meanwhile: the hand-off thread takes the cut lock to place checkpoints."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cut_lock:
            target = self._last.number if self._last else 0
        with self._queued:
            while (
                self._handed_through < target and (self._queue or self._busy)
                and not self._failed and self._handoff.is_alive()
                and (deadline is None or time.monotonic() < deadline)
            ):
                self._queued.wait(1.0)

    def finish(self, timeout_s: float) -> int | None:
        """A clean stop's last steps, before :meth:`stop`, once the sources stopped delivering: no more cuts on
        the timer, one last cut of what was delivered, every sealed epoch ranked, and the newest made a
        checkpoint with the consumer's whole state, so the next start re-cuts nothing and the consumer goes
        on from its merged graph, vectors and applications instead of merging and solving the shards' whole
        graph again. Gives up after ``timeout_s`` (the stop then leaves what a crash would). Returns the
        checkpoint's epoch, or None where none was written."""
        if self._checkpoints is None or self._data_dir is None:
            return None
        deadline = time.monotonic() + timeout_s
        self._no_more_cuts.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
        try:
            self.cut()
        except Exception:  # noqa: BLE001 - recorded as the epoch's failure; the stop goes on without a checkpoint
            log.exception("the last cut of the stop failed")
        self.flush(max(deadline - time.monotonic(), 0.0))
        with self._queued:
            self._stop.set()  # the hand-off thread ends once it is idle (every sealed epoch handed over)
            self._queued.notify_all()
        self._handoff.join(timeout=max(deadline - time.monotonic(), 0.0))
        last = self._last
        handed = not self._stages.has_consumer or (last is not None and self._handed_through == last.number)
        if self._handoff.is_alive() or self._failed or self._replay or last is None or last.valid is None or not handed:
            log.warning("stopping without a checkpoint of the newest epoch: %s", "the consumer did not finish in time"
                        if self._handoff.is_alive() or not handed else "no epoch, a failure, or a recovery under way")
            return None
        t0 = time.perf_counter()
        with self._cut_lock:
            epoch, valid, shards_written, late = self._checkpoint_parts(last)
        if not self._checkpoint(epoch, valid, shards_written, late, whole=True):
            return None
        log.info("stop: epoch %d checkpointed with the compute stage in %.1f s", last.number, time.perf_counter() - t0)
        return last.number

    def queue_status(self) -> dict:
        """The sealed epochs waiting for the consumer (how many, their deltas' bytes), the deltas of the
        batch in its hands, the bound on both together, and whether the queue is full (at that bound or at
        :data:`MAX_QUEUED` epochs, where the cut waits): then ingest must pause."""
        with self._queued:
            epochs, queued, handing = len(self._queue), self._queued_bytes, self._handing_bytes
        return {
            "epochs": epochs, "bytes": queued, "handing_bytes": handing, "limit_bytes": self._max_queued_bytes,
            "full": self._full(epochs, queued + handing),
        }

    def _full(self, epochs: int, held: int) -> bool:
        return epochs >= MAX_QUEUED or (self._max_queued_bytes is not None and held >= self._max_queued_bytes)

    def result_lag(self) -> dict | None:
        """How far ranking is behind the cuts: the seal time between the newest sealed epoch and the newest
        ranked one, the bound, and whether the lag is over it now or was at a seal since the last
        :meth:`status` (then ingest must pause until ranking catches up). None until this run has ranked
        an epoch: a start or a relaunch first builds the whole graph."""
        last, ranked_at = self._last, self._ranked_sealed_at
        if ranked_at is None or last is None or not last.sealed_at:
            return None
        lag = max(last.sealed_at - ranked_at, 0.0)
        limit = self._max_result_lag
        return {"seconds": round(lag, 3), "limit_s": limit, "over": limit is not None and max(lag, self._lag_peak) > limit}

    def status(self) -> dict:
        """What the supervisor polls; it also starts the next interval over which the bounds' peaks count."""
        queue = self.queue_status()
        with self._queued:
            reached, self._queue_reached = self._queue_reached, False
        last = self._last
        out = {
            "epoch": last.number if last else 0,
            "vector": dict(last.vector) if last else {},
            "progress": dict(self._progress),
            "failed": self._failed,
            "ranked": (self._handed or {}).get("epoch", 0),  # the newest epoch the consumer finished
            "queued": len(self._queue),
            "compute_queue": {**queue, "full": queue["full"] or reached},
            "result_lag": self.result_lag(),
            "durable": dict(self._durable),
            "replaying": len(self._replay),
            "window": self._window,
            "watermark": last.watermark if last else None,
            "late": self._late,
            "checkpoint": {"epoch": self._durable_epoch, "seconds": round(self._pace.stall_s, 6), "paused": self._pace.passed_over},
            "recent": [
                {"epoch": e.number, "status": e.status.value, "records": e.records, "error": e.error}
                for e in list(self._recent)[-10:]
            ],
        }
        self._lag_peak = 0.0
        return out
