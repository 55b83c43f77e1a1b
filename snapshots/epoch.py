"""Epochs as a state machine, and the durable epoch log.

An epoch is a cut of the progress table: ``V_e = {partition: offset}``. Its
states go OPEN -> CUT -> SEALED -> DURABLE, or to FAILED from any of them;
a transition checks the state it starts from. CUT means the vector is chosen
and logged durably; SEALED means every shard applied it; DURABLE means a
checkpoint covers it. Epoch numbers and vectors that do not grow are refused.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from pulsegraph.base.arrays import weighted_percentiles
from pulsegraph.base.durable import (
    fsync_dir,
    lock_exclusively,
    makedirs_durably,
    open_durably,
)
from pulsegraph.base.errors import LockHeld
from pulsegraph.snapshots.exceptions import (
    EpochLogError,
    EpochOrderError,
    EpochStateError,
)


class EpochStatus(enum.Enum):
    OPEN = "open"
    CUT = "cut"
    SEALED = "sealed"
    DURABLE = "durable"
    FAILED = "failed"


_NEXT = {
    EpochStatus.OPEN: EpochStatus.CUT,
    EpochStatus.CUT: EpochStatus.SEALED,
    EpochStatus.SEALED: EpochStatus.DURABLE,
}


@dataclass
class Epoch:
    number: int
    vector: dict[str, int]
    status: EpochStatus = EpochStatus.OPEN
    records: int = 0
    cut_at: float = 0.0
    sealed_at: float = 0.0
    timeliness_ms: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    # With a window: W_e, the largest event time among the transactions below the vector.
    watermark: float | None = None
    # Per partition, the transactions (valid records) below the vector: what a checkpoint stores.
    valid: dict[str, int] | None = None

    def advance(self, to: EpochStatus) -> None:
        if _NEXT.get(self.status) is not to:
            raise EpochStateError(f"epoch {self.number}: cannot go from {self.status.value} to {to.value}")
        self.status = to

    def fail(self, error: str) -> None:
        self.status = EpochStatus.FAILED
        self.error = error

    def measure_timeliness(self, reads: list[tuple[float, int]]) -> None:
        """``timeliness_ms`` of a sealed epoch: read to seal, p50, p99 and max over its records, from the
        ``(read_at, records)`` of each round reported since the last cut."""
        if not reads:
            self.timeliness_ms = {"p50": 0.0, "p99": 0.0, "max": 0.0}
            return
        read_at, n = (np.array(x, dtype=np.float64) for x in zip(*reads))
        p50, p99 = weighted_percentiles((self.sealed_at - read_at) * 1000.0, n, (0.5, 0.99))
        self.timeliness_ms = {"p50": p50, "p99": p99, "max": float((self.sealed_at - read_at.min()) * 1000.0)}

    def follows(self, previous: "Epoch | None") -> None:
        """Refuse an epoch whose number or vector does not grow past ``previous``."""
        if previous is None:
            return
        if self.number <= previous.number:
            raise EpochOrderError(f"epoch {self.number} does not follow epoch {previous.number}")
        for p, o in previous.vector.items():
            if self.vector.get(p, 0) < o:
                raise EpochOrderError(f"epoch {self.number}: {p} goes back from {o} to {self.vector.get(p, 0)}")


@dataclass(frozen=True)
class EpochInfo:
    """What the coordinator hands downstream for a sealed epoch (besides the shards' deltas)."""

    epoch: int
    vector: dict[str, int]
    records: int
    sealed_at: float
    commit_ms: float = 0.0  # cut to seal
    timeliness_ms: dict[str, float] = field(default_factory=dict)  # read to seal: p50, p99, max
    cut_at: float = 0.0
    updates: int = 0
    live_edges: int = 0
    window: float | None = None  # with a window: its length (s), W_e, and the epoch's late transactions
    watermark: float | None = None
    late: int = 0
    delta_bytes: int = 0  # the shards' deltas together (EpochDelta.nbytes): what it adds to the compute stage's queue


@dataclass(frozen=True)
class LogEntry:
    """One line of the epoch log: what a re-cut after a crash needs to make the same epoch again."""

    epoch: int
    vector: dict[str, int]
    records: int = 0
    cut_at: float = 0.0
    watermark: float | None = None  # with a window: W_e
    # Per partition, the transactions below the vector: a re-cut epoch can then be checkpointed too
    # (logs written before it was logged lack it; their re-cut epochs are not checkpointed).
    valid: dict[str, int] | None = None

    @classmethod
    def of(cls, epoch: "Epoch") -> "LogEntry":
        valid = None if epoch.valid is None else dict(epoch.valid)
        return cls(epoch.number, dict(epoch.vector), epoch.records, epoch.cut_at, epoch.watermark, valid)

    def to_json(self) -> bytes:
        entry: dict = {"epoch": self.epoch, "vector": self.vector, "records": self.records, "cut_at": self.cut_at}
        if self.watermark is not None:
            # A re-cut after a crash must apply the same window: the watermark is part of the epoch.
            entry["watermark"] = self.watermark
        if self.valid is not None:
            entry["valid"] = self.valid
        return json.dumps(entry, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> "LogEntry":
        entry = json.loads(raw)
        watermark, valid = entry.get("watermark"), entry.get("valid")
        return cls(
            int(entry["epoch"]), {str(p): int(o) for p, o in entry["vector"].items()}, int(entry.get("records", 0)),
            float(entry.get("cut_at", 0.0)), None if watermark is None else float(watermark),
            None if valid is None else {str(p): int(n) for p, n in valid.items()},
        )


# The epochs the consumer ranked, beside the log (see EpochLog).
RANKED_SUFFIX = ".ranked"


# Beside the log, the lock its one writer holds for as long as its process lives (see EpochLog).
WRITER_SUFFIX = ".writer"
# How long a new writer, or a launch planning its recovery, waits for the previous writer's lock. The
# kernel frees it when that process is gone, and a killed actor is gone within seconds; the pipeline's
# teardown allows as long for the same (pulsegraph.topology.TEARDOWN_TIMEOUT_S).
WRITER_WAIT_S = 30.0


def _writer_lock(log_path: str, wait_s: float) -> int:
    """The descriptor holding the epoch log's writer lock (``flock``, exclusive), once no other holds it.

    A ``flock`` outlives nothing: the kernel releases it when its holder's process ends, SIGKILL
    included. Ray reports a killed actor dead before its process has always exited, and a
    coordinator in its last milliseconds could still append an epoch that the next generation,
    having read the log already, cuts again under the same number (a CI run saw epoch 27 twice)."""
    try:
        return lock_exclusively(log_path + WRITER_SUFFIX, wait_s)
    except LockHeld as held:
        raise EpochLogError(
            f"another process (pid {held.holder}) still writes the epoch log {log_path} after {wait_s:.0f} s. "
            f"Operator action: stop that process (a second service, or a coordinator of this one that "
            f"did not exit), then start again."
        ) from None


class EpochLog:
    """Append-only JSON lines ``{"epoch", "vector", "records", "cut_at"}`` (and ``"watermark"`` with a window),
    each fsynced before its epoch is applied.

    The log only has to reach back to the oldest checkpoint a launch may resume from (recovery re-cuts
    the epochs after it), so :meth:`compact` drops the entries before that, keeping at least ``keep``
    of the newest for the operator: a service that cuts an epoch a second for months must not carry,
    and parse at every launch, a line for each of them. Appends and the compaction's rewrite take one
    lock: the cut thread appends while the hand-off thread compacts after a checkpoint.

    One writer at a time, fenced: an open log holds ``<path>.writer`` (a ``flock``) until :meth:`close`
    or its process's end, and a launch reads the log to plan its recovery only under the same lock
    (:meth:`no_writer`), so a coordinator that was killed but has not yet exited can never append an
    epoch behind the back of the generation that replaces it.

    Beside it, ``<path>.ranked`` lists the epochs the consumer ranked (:meth:`mark_ranked`), one number a
    line: the ends of the hand-offs, each sealed epoch between two of them merged into the later one,
    each written as its hand-off starts (before the API can serve the epoch). A
    re-cut after a crash ends its hand-offs at the same epochs, so the API, which kept the results of
    before the crash, is served the same epochs again, and the epochs never ranked are merged as any
    others are, not ranked one by one. The marks are a hint, not a promise: written without an fsync
    (the next epoch's fsync usually takes them along), and a lost one only makes a re-cut merge more.
    """

    def __init__(self, path: str, wait_s: float = WRITER_WAIT_S) -> None:
        self.path = path
        self.ranked_path = path + RANKED_SUFFIX
        makedirs_durably(os.path.dirname(os.path.abspath(path)))
        self._writer_fd = _writer_lock(path, wait_s)
        self._lock = threading.Lock()
        self._lines = self._drop_torn_tail()
        self._fd = open_durably(path, os.O_WRONLY | os.O_APPEND)
        self._ranked_fd = open_durably(self.ranked_path, os.O_RDWR | os.O_APPEND)  # its name as durable as the log's
        marks = os.pread(self._ranked_fd, os.fstat(self._ranked_fd).st_size, 0)
        if marks and not marks.endswith(b"\n"):
            os.ftruncate(self._ranked_fd, marks.rfind(b"\n") + 1)  # a torn mark would run into the next one

    def __len__(self) -> int:
        """Entries in the file now."""
        return self._lines

    def _drop_torn_tail(self) -> int:
        """A crash mid-append leaves a line without its newline: cut it, or the next entry would join it.
        Returns the complete lines; a rewrite a crash left half done is removed."""
        tmp = self.path + ".tmp"
        if os.path.exists(tmp):
            os.unlink(tmp)  # the log it was to replace is still whole
        if not os.path.exists(self.path):
            return 0
        with open(self.path, "rb+") as fh:
            data = fh.read()
            if data and not data.endswith(b"\n"):
                fh.truncate(data.rfind(b"\n") + 1)
                fh.flush()
                os.fsync(fh.fileno())
        return data.count(b"\n")

    def append(self, epoch: Epoch) -> None:
        line = LogEntry.of(epoch).to_json()
        with self._lock:
            try:
                os.write(self._fd, line + b"\n")
                os.fsync(self._fd)
            except OSError as exc:
                raise EpochLogError(f"cannot append to the epoch log {self.path}: {exc}") from exc
            self._lines += 1

    def mark_ranked(self, epoch: int) -> None:
        """The consumer ranked ``epoch`` (and merged into it every sealed epoch since the one marked before)."""
        with self._lock:
            if self._ranked_fd < 0:
                return  # closed: a hand-off that outlived stop()
            try:
                os.write(self._ranked_fd, b"%d\n" % epoch)
            except OSError as exc:
                raise EpochLogError(f"cannot append to {self.ranked_path}: {exc}") from exc

    def compact(self, keep_from: int, keep: int = 0) -> int:
        """Drop the entries of epochs before ``keep_from``, but never one of the newest ``keep``; returns
        how many went. The file is rewritten under a temporary name, fsynced and renamed over the log,
        so a crash leaves either log, each one history. Nothing is rewritten for fewer than ``keep``
        droppable entries: with a floor, the rewrite happens once per ``keep`` epochs, not per call."""
        with self._lock:
            if self._fd < 0:
                return 0
            with open(self.path, "rb") as fh:
                lines = fh.read().splitlines(keepends=True)
            epochs = [int(json.loads(raw)["epoch"]) for raw in lines]
            drop = sum(1 for e in epochs if e < keep_from)
            drop = min(drop, max(len(lines) - keep, 0))
            if drop == 0 or drop < keep:
                return 0
            tmp = self.path + ".tmp"
            try:
                with open(tmp, "wb") as fh:
                    fh.writelines(lines[drop:])
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, self.path)
                fsync_dir(os.path.dirname(os.path.abspath(self.path)))
                os.close(self._fd)
                self._fd = open_durably(self.path, os.O_WRONLY | os.O_APPEND)
                first = epochs[drop] if drop < len(epochs) else epochs[-1] + 1  # the marks before it go too
                marks = [e for e in self.read_ranked(self.path) if e >= first]
                with open(tmp, "wb") as fh:
                    fh.write(b"".join(b"%d\n" % e for e in marks))
                os.replace(tmp, self.ranked_path)
                os.close(self._ranked_fd)
                self._ranked_fd = open_durably(self.ranked_path, os.O_WRONLY | os.O_APPEND)
            except OSError as exc:
                raise EpochLogError(f"cannot compact the epoch log {self.path}: {exc}") from exc
            self._lines = len(lines) - drop
            return drop

    def close(self) -> None:
        with self._lock:
            for name in ("_fd", "_ranked_fd", "_writer_fd"):  # the writer lock last: the log is whole
                if getattr(self, name) >= 0:
                    os.close(getattr(self, name))
                    setattr(self, name, -1)

    @staticmethod
    @contextlib.contextmanager
    def no_writer(path: str, wait_s: float = WRITER_WAIT_S) -> Iterator[None]:
        """Hold the writer lock of the log at ``path`` for the block (waiting for a previous writer's
        process to end): what is read in it is what that writer left, and nothing appends meanwhile."""
        makedirs_durably(os.path.dirname(os.path.abspath(path)))
        fd = _writer_lock(path, wait_s)
        try:
            yield
        finally:
            os.close(fd)

    @staticmethod
    def read_ranked(path: str) -> list[int]:
        """The epochs marked ranked beside the log at ``path``, sorted (a torn or unreadable line is skipped:
        the marks are a hint)."""
        try:
            with open(path + RANKED_SUFFIX, "rb") as fh:
                data = fh.read()
        except OSError:
            return []
        out = set()
        for raw in data.split(b"\n")[:-1]:  # the part after the last newline is torn
            if raw.strip().isdigit():
                out.add(int(raw))
        return sorted(out)

    @staticmethod
    def read(path: str) -> list[LogEntry]:
        """Every complete entry; a torn last line (a crash mid-write) is ignored.

        The entries must be one history: epoch numbers one apart, vectors that never go back. A log
        that is not (a duplicated or edited line, two writers) would re-cut a history that never was,
        so it raises EpochLogError naming the line, never a silent stall."""
        if not os.path.exists(path):
            return []
        out: list[LogEntry] = []
        with open(path, "rb") as fh:
            for line, raw in enumerate(fh, 1):
                if not raw.endswith(b"\n"):
                    break
                try:
                    entry = LogEntry.from_json(raw)
                    epoch = Epoch(entry.epoch, entry.vector)
                except (ValueError, KeyError, TypeError, AttributeError) as exc:
                    raise EpochLogError(
                        f"{path} line {line} is not an epoch entry ({type(exc).__name__}: {exc}). "
                        f"Operator action: restore the file from a backup, or move the data folder aside to start anew."
                    ) from exc
                if out:
                    last = out[-1]
                    previous = Epoch(last.epoch, last.vector)
                    try:
                        if epoch.number != previous.number + 1:
                            raise EpochOrderError(f"epoch {epoch.number} comes after epoch {previous.number}, not {previous.number + 1}")
                        epoch.follows(previous)
                        if entry.watermark is not None and last.watermark is not None and entry.watermark < last.watermark:
                            raise EpochOrderError(f"the watermark goes back from {last.watermark} to {entry.watermark}")
                    except EpochOrderError as exc:
                        raise EpochLogError(
                            f"{path} line {line}: {exc}, so the log is not one history (a duplicated or edited "
                            f"entry, or a second writer). Operator action: restore the file from a backup, or move the "
                            f"data folder aside to start anew."
                        ) from exc
                out.append(entry)
        return out


def now() -> float:
    return time.time()
