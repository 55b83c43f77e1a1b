"""Checkpoints: ``(epoch, vector, graph state)`` written atomically, one file per shard plus a manifest.

Layout under ``<data_dir>/checkpoints/``::

    epoch-000000000042/shard-0.ckpt   one shard's applied state (not its buffer)
    epoch-000000000042/shard-1.ckpt
    epoch-000000000042/compute.ckpt   the compute stage's global ids (vertex names, edge types), or
                                      the whole stage (a clean stop's checkpoint)
    epoch-000000000042/partition-0.ckpt   a compute partition's rows (a partitioned stage written whole)
    epoch-000000000042/MANIFEST       epoch, vector, valid records per partition, each file's sha256

Every file is written to a temporary name, fsynced, renamed, and its folder
fsynced; the manifest goes last, so a checkpoint without one never counts.
Each file carries a magic header and the sha256 of its payload: a torn or
corrupt checkpoint is detected and the previous one is used. The two newest
committed checkpoints are kept. Per-shard files let one shard be restored alone.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import math
import os
import pickle
import shutil
import struct
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from pulsegraph.base.durable import fsync_dir, makedirs_durably
from pulsegraph.snapshots.exceptions import CheckpointError, CorruptCheckpoint

log = logging.getLogger(__name__)

MAGIC = b"PULSEGRAPH-CKPT-1\n"
_HEAD = len(MAGIC) + 32  # the magic line, then the payload's sha256
KEEP = 2
# A checkpoint's files are checked in pieces of this many bytes, this many files at once.
VERIFY_PIECE = 8 << 20
VERIFY_THREADS = 4
# A payload of :func:`dumps`: its pickle's large buffers follow it, out of band.
_OUT_OF_BAND = b"PG-PICKLE5-OOB\n"


def dumps(obj) -> list:
    """``obj`` as the chunks of a checkpoint payload, for :func:`write_atomic`: pickle protocol 5 with its
    large buffers (NumPy columns) out of band, so they go to the file from where they lie. A payload
    pickled whole held a copy of the state, and the file's bytes joined up a second one: a shard at
    35 M edges grew by 1.3 GB for each checkpoint."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    sizes = struct.pack(f"<{len(raws) + 2}Q", len(raws), len(head), *(r.nbytes for r in raws))
    return [_OUT_OF_BAND, sizes, head, *raws]


# Checkpoints written before the stages were installed as subpackages of ``pulsegraph`` name their
# classes by the stages' old top-level modules (``snapshots.delta.EpochDelta``).
_OLD_TOP = ("ingest.", "snapshots.", "compute.", "api.")
_MOVED = {"ingest.arrays": "pulsegraph.base.arrays", "ingest.keyindex": "pulsegraph.base.keyindex"}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if module.startswith(_OLD_TOP):
            module = _MOVED.get(module, "pulsegraph." + module)
        return super().find_class(module, name)


def _unpickle(data, buffers=None):
    return _Unpickler(io.BytesIO(data), buffers=buffers).load()


def loads(payload: bytes):
    """What :func:`dumps` wrote (or a whole pickle: checkpoints from before it). The buffers come back
    as writable copies: a restored column goes on growing."""
    if not payload.startswith(_OUT_OF_BAND):
        return _unpickle(payload)
    view, at = memoryview(payload), len(_OUT_OF_BAND)
    (count,) = struct.unpack_from("<Q", payload, at)
    head_size, *sizes = struct.unpack_from(f"<{count + 1}Q", payload, at + 8)
    at += 8 * (count + 2)
    head = view[at : at + head_size]
    at += head_size
    buffers = []
    for n in sizes:
        buffers.append(bytearray(view[at : at + n]))
        at += n
    return _unpickle(head, buffers)


def write_atomic(path: Path, payload: bytes | Sequence, durable: bool = True) -> str:
    """Write ``MAGIC + sha256 + payload`` at ``path`` (temporary name, then rename); returns the hex digest.
    ``payload``: bytes, or chunks of it (bytes-like) written one after the other, never joined.

    ``durable``: fsync the file and its folder before returning. Without it a crash may leave the
    file torn or empty, which :func:`read_verified` rejects: for files that are a convenience, not
    a promise (the API's result archive)."""
    chunks = [payload] if isinstance(payload, (bytes, bytearray, memoryview)) else list(payload)
    h = hashlib.sha256()
    for c in chunks:
        h.update(c)
    digest = h.digest()
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(MAGIC)
            fh.write(digest)
            for c in chunks:
                fh.write(c)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
        if durable:
            fsync_dir(path.parent)
    except OSError as exc:
        raise CheckpointError(f"cannot write {path}: {exc}. Operator action: check the disk under {path.parent}.") from exc
    return digest.hex()


def _stored_digest(path: Path, top: bytes) -> bytes:
    """The sha256 a file's header holds (``top``: its first bytes, as many as the header has, fewer where it is shorter)."""
    if len(top) < _HEAD or not top.startswith(MAGIC):
        raise CorruptCheckpoint(f"{path}: not a checkpoint file, or cut short")
    return top[len(MAGIC):_HEAD]


def _check_digest(path: Path, stored: bytes, computed: bytes, expect: str | None) -> None:
    if computed != stored:
        raise CorruptCheckpoint(f"{path}: checksum mismatch")
    if expect is not None and stored.hex() != expect:
        raise CorruptCheckpoint(f"{path}: not the file its manifest names")


def read_verified(path: Path, expect: str | None = None, rehash: bool = True) -> bytes:
    """The payload of a file written by :func:`write_atomic`; raises CorruptCheckpoint when it does not check out.
    ``rehash=False``: the launch hashed the file moments ago (:meth:`CheckpointStore.latest`), so only its
    header's digest is checked against ``expect`` (a restore reads gigabytes on a machine busy starting)."""
    try:
        blob = path.read_bytes()
    except OSError as exc:
        raise CorruptCheckpoint(f"{path}: {exc}") from exc
    digest, payload = _stored_digest(path, blob[:_HEAD]), blob[_HEAD:]
    _check_digest(path, digest, hashlib.sha256(payload).digest() if rehash else digest, expect)
    return payload


def verify_file(path: Path, expect: str | None = None) -> None:
    """:func:`read_verified`'s checks without keeping the payload: it is hashed piece by piece as it is read."""
    try:
        with open(path, "rb") as f:
            digest, h = _stored_digest(path, f.read(_HEAD)), hashlib.sha256()
            while piece := f.read(VERIFY_PIECE):
                h.update(piece)
    except OSError as exc:
        raise CorruptCheckpoint(f"{path}: {exc}") from exc
    _check_digest(path, digest, h.digest(), expect)


def load_verified(path: Path, expect: str | None = None, rehash: bool = True):
    """:func:`loads` of :func:`read_verified`, without the file's bytes whole in memory beside what they
    load into: a payload of :func:`dumps` is read buffer by buffer into the writable buffers it comes back
    as, checked against its digest as it is read (a compute stage written whole: gigabytes at tens of
    millions of edges, which the plain way held twice). Raises CorruptCheckpoint as :func:`read_verified`;
    ``rehash`` as there."""
    try:
        with open(path, "rb") as f:
            digest, h = _stored_digest(path, f.read(_HEAD)), hashlib.sha256()

            def read(n: int) -> memoryview:
                buf = np.empty(n, dtype=np.uint8).data  # not zeroed first (gigabytes): the read writes every byte
                if f.readinto(buf) != n:
                    raise CorruptCheckpoint(f"{path}: cut short")
                if rehash:
                    h.update(buf)
                return buf

            if bytes(read(len(_OUT_OF_BAND))) != _OUT_OF_BAND:
                return loads(read_verified(path, expect, rehash))  # a whole pickle: small, from before dumps
            (count,) = struct.unpack("<Q", read(8))
            head_size, *sizes = struct.unpack(f"<{count + 1}Q", read(8 * (count + 1)))
            head = read(head_size)
            buffers = [read(n) for n in sizes]
            if f.read(1):
                raise CorruptCheckpoint(f"{path}: longer than its payload")
    except OSError as exc:
        raise CorruptCheckpoint(f"{path}: {exc}") from exc
    _check_digest(path, digest, h.digest() if rehash else digest, expect)
    return _unpickle(head, buffers)


class CheckpointPace:
    """The checkpoint budget, after Flink's minimum pause between checkpoints: one that stalled a stage
    ``d`` seconds pauses the next for ``d * (1 / budget - 1)``, so writing them takes at most ``budget``
    of a stage's time; one quicker than ``pause_from_s`` never pauses. ``clock``: monotonic seconds."""

    def __init__(self, budget: float, pause_from_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.budget, self.pause_from_s, self._clock = budget, pause_from_s, clock
        self.stall_s = 0.0  # the longest one stage stalled writing the last checkpoint
        self.passed_over = 0  # due checkpoints passed over for the pause
        self._done = -math.inf  # the clock when the last was committed

    def done(self, stall_s: float) -> None:
        self.stall_s, self._done = stall_s, self._clock()

    def left_s(self) -> float:
        """Seconds the pause still holds (0: a checkpoint may be written now)."""
        if self.stall_s < self.pause_from_s or self.budget >= 1.0:
            return 0.0
        return max(self._done + self.stall_s * (1.0 / self.budget - 1.0) - self._clock(), 0.0)

    def pass_over(self) -> bool:
        """Is the due checkpoint passed over for the pause? (Counted when it is.)"""
        paused = self.left_s() > 0.0
        self.passed_over += paused
        return paused


class WrittenPart(NamedTuple):
    """What a stage's write of its part of a checkpoint tells the coordinator."""

    digest: str | None  # sha256 of the part's file (None: no consumer)
    seconds: float  # how long the write stalled the stage (the checkpoint budget reads it)
    whole: str | None = None  # the config fingerprint of a stage written whole; None: its ids only
    files: tuple[tuple[str, str], ...] = ()  # further files of the part, (name, sha256): a partition's rows each


@dataclass(frozen=True)
class Manifest:
    epoch: int
    vector: dict[str, int]
    valid: dict[str, int]  # transactions (valid records) below vector[p]
    shards: dict[int, str]  # shard -> sha256 of its file
    directory: str
    compute: str | None = None  # sha256 of compute.ckpt: the downstream ids as of this epoch
    late: int = 0  # with a window: late transactions of every epoch up to this one (a function of the vectors)
    # The config fingerprint of a compute stage written whole (a clean stop's checkpoint); None: its ids only.
    compute_whole: str | None = None
    # Further files of the compute part, name -> sha256: each partition's rows, where a stage with partition
    # actors was written whole (they write their own, side by side, never through the compute actor).
    compute_files: dict[str, str] = field(default_factory=dict)

    @property
    def compute_path(self) -> Path:
        return Path(self.directory) / "compute.ckpt"

    def shard_path(self, shard: int) -> Path:
        return Path(self.directory) / f"shard-{shard}.ckpt"

    @property
    def records(self) -> int:
        return sum(self.valid.values())


class CheckpointStore:
    def __init__(self, data_dir: str | Path) -> None:
        self.root = Path(data_dir) / "checkpoints"

    def folder(self, epoch: int) -> Path:
        return self.root / f"epoch-{epoch:012d}"

    def write_file(self, epoch: int, name: str, payload: bytes | Sequence) -> str:
        """One file of epoch ``epoch``'s checkpoint, durably (its folder too); returns its sha256."""
        folder = self.folder(epoch)
        makedirs_durably(folder)
        return write_atomic(folder / name, payload)

    def write_shard(self, epoch: int, shard: int, payload: bytes | Sequence) -> str:
        return self.write_file(epoch, f"shard-{shard}.ckpt", payload)

    def write_part(
        self, epoch: int, name: str, at: int, payload: Callable[[], bytes | Sequence], owner: str,
    ) -> tuple[str, float]:
        """A stage's part of epoch ``epoch``'s checkpoint, written by the stage itself (``at``: the epoch it
        is at, which must be ``epoch``); returns the sha256 and the seconds the write stalled the stage
        (the coordinator's checkpoint budget reads them)."""
        if at != epoch:
            raise CheckpointError(f"{owner} is at epoch {at}, not {epoch}")
        t0 = time.perf_counter()
        return self.write_file(epoch, name, payload()), time.perf_counter() - t0

    def commit(
        self, epoch: int, vector: dict[str, int], valid: dict[str, int], shards: dict[int, str], compute: str | None = None,
        late: int = 0, compute_whole: str | None = None, compute_files: dict[str, str] | None = None,
    ) -> Manifest:
        folder = self.folder(epoch)
        body = {
            "epoch": epoch, "vector": vector, "valid": valid,
            "shards": {str(k): v for k, v in shards.items()}, "compute": compute, "late": late,
        }
        if compute_whole is not None:
            body["compute_whole"] = compute_whole
        if compute_files:
            body["compute_files"] = compute_files
        write_atomic(folder / "MANIFEST", json.dumps(body, sort_keys=True).encode())
        self._prune()
        return Manifest(epoch, dict(vector), dict(valid), dict(shards), str(folder), compute, late, compute_whole,
                        dict(compute_files or {}))

    def oldest(self) -> int | None:
        """The epoch of the oldest committed checkpoint kept: the furthest back a launch may fall back to
        (when the newer ones do not verify), so the epoch log must reach back to it."""
        committed = [f for f in self._folders() if (f / "MANIFEST").exists()]
        return int(committed[-1].name.split("-")[1]) if committed else None

    def _prune(self) -> None:
        committed = [f for f in self._folders() if (f / "MANIFEST").exists()]
        for old in committed[KEEP:]:
            shutil.rmtree(old, ignore_errors=True)
        # Folders older than the newest committed one that never got a manifest are debris of a crash.
        if committed:
            for f in self._folders():
                if f.name < committed[0].name and not (f / "MANIFEST").exists():
                    shutil.rmtree(f, ignore_errors=True)

    def _folders(self) -> list[Path]:
        if not self.root.exists():
            return []
        return sorted((f for f in self.root.iterdir() if f.name.startswith("epoch-")), reverse=True)

    @staticmethod
    def manifest_in(folder: Path) -> Manifest:
        """The manifest of checkpoint folder ``folder`` (its own digest checked; the files it names are not)."""
        body = json.loads(read_verified(folder / "MANIFEST"))
        return Manifest(
            body["epoch"], body["vector"], body["valid"],
            {int(k): v for k, v in body["shards"].items()}, str(folder), body.get("compute"), int(body.get("late", 0)),
            body.get("compute_whole"), dict(body.get("compute_files", {})),
        )

    @staticmethod
    def compute_files_in(folder: Path) -> dict[str, str]:
        """The files beside the compute stage's (name -> sha256) that the manifest of checkpoint folder ``folder``
        names; none where it has no readable manifest (a folder made by hand), which is logged."""
        try:
            return CheckpointStore.manifest_in(folder).compute_files
        except (OSError, CheckpointError, ValueError, KeyError) as exc:
            log.warning("no readable manifest in %s (%s): the compute stage's actors start once it is read back", folder, exc)
            return {}

    def latest(self) -> Manifest | None:
        """The newest checkpoint whose manifest and every shard file check out."""
        for folder in self._folders():
            if not (folder / "MANIFEST").exists():
                continue
            try:
                m = self.manifest_in(folder)
                files = [(m.shard_path(shard), digest) for shard, digest in m.shards.items()]
                if m.compute is not None:
                    files.append((m.compute_path, m.compute))
                files += [(folder / name, digest) for name, digest in m.compute_files.items()]
                # Each file hashed as it is read, in pieces, the files side by side (hashlib and the reads let go
                # of the GIL): read whole, the checks held them all at once in this process (gigabytes: the
                # compute stage written whole) before the actors read them again.
                with ThreadPoolExecutor(max_workers=min(len(files), VERIFY_THREADS)) as pool:
                    list(pool.map(lambda f: verify_file(*f), files))
                return m
            except (CorruptCheckpoint, ValueError, KeyError) as exc:
                log.warning("checkpoint %s is unusable (%s); falling back to the previous one", folder.name, exc)
        return None
