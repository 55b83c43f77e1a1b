"""The result archive: the retained epochs' results on disk, memory-mapped, so that history costs disk, not memory.

Owns ``<data_dir>/results/``: one file per published epoch
(``epoch-000000000042.res``), written under a temporary name and renamed,
without fsync (losing the newest few to a power cut costs history, never
correctness); the newest ``retain`` are kept. It never touches the checkpoints
or the epoch log.

A file holds the epoch's :class:`~pulsegraph.compute.results.EpochResult` without its bulk
(no edge changes, none of the per-vertex application arrays that the store keeps
as undo records: each result's ``PER_VERTEX`` fields, :class:`~pulsegraph.compute.apps.base.AppResult`), the ranks the API computed for it
and the top of each ranking (a restart need not compute them again), and
the graph view's undo record of the epoch (:mod:`pulsegraph.api.graph`: the slots it changed
and their state before), so that a cold epoch's undo record is read from the file
too.
Its arrays are stored raw and 64-byte aligned after a small pickled header, so a
reader maps them (``np.memmap``) instead of loading them: the API keeps only its
newest epochs in memory and serves the older retained ones from these files
(the pages are the kernel's page cache, dropped under pressure, not the
process's own memory). Layout::

    MAGIC | header length (8 bytes, little endian) | header (pickle) | arrays... | sha256 of all before it

So after a restart the archived epochs answer everything that reads scores and
epoch facts (epochs, top, a vertex's scores and history, movers, trends,
topics); neighbors, paths and components per vertex need the graph view as well,
which a clean stop keeps beside the archive (:mod:`pulsegraph.api.viewfile`);
after a crash they are answered from the epoch the pipeline restored onwards
(older ones get a 404 that says so).

The vertex names those answers need are the compute stage's, which a restart
gives the API only with the pipeline's first epoch; so the archive keeps them too,
in ``names.log`` (:class:`NamesJournal`: each pull's name changes, tagged with the
newest epoch they came with, rewritten as one whole list when the changes outgrow
it). With them a restarted service takes its archived history back as soon as its
process starts (:meth:`ResultArchive.take_back`), before Ray and the pipeline are
up, and serves it provisionally.

An archived history is only kept when it is the history the pipeline recovered
(:meth:`ResultArchive.confirm`): the first epoch the restarted pipeline publishes
must be in the archive with the same vector (a snapshot is a pure function of its
vector, so same vector, same epoch), or directly follow the archive's newest epoch
with a vector that contains it. Anything else (a wiped epoch log, another stream in
the same folder) starts the archive afresh, with a log line saying so, and the
store drops what it served provisionally.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import pickle
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from pulsegraph.api.names import NAMES_FILE, NamesJournal
from pulsegraph.base.errors import PulsegraphError
from pulsegraph.compute.apps.base import AppResult
from pulsegraph.compute.apps.runner import typed_results
from pulsegraph.compute.ids import NameChanges
from pulsegraph.compute.results import EpochResult

log = logging.getLogger(__name__)

_NAME = re.compile(r"^epoch-(\d{12})\.res$")
# The graph view a clean stop keeps for the next start (pulsegraph.api.viewfile); it goes with the history it views.
VIEW_FILE = "view.res"
MAGIC = b"PGRES2\n"
_ALIGN = 64


@dataclass(frozen=True)
class _Ref:
    """Where an array sits in the file: replaced by a memory map when the file is read."""

    offset: int
    dtype: str
    shape: tuple[int, ...]


def _strip(obj: Any, arrays: list[np.ndarray], at: list[int]) -> Any:
    """``obj`` with every numeric array replaced by a :class:`_Ref` (appended to ``arrays``)."""
    if isinstance(obj, np.ndarray) and obj.dtype != object:
        a = np.ascontiguousarray(obj)
        ref = _Ref(at[0], a.dtype.str, tuple(a.shape))
        arrays.append(a)
        at[0] += -(-a.nbytes // _ALIGN) * _ALIGN
        return ref
    if isinstance(obj, dict):
        return {k: _strip(v, arrays, at) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_strip(v, arrays, at) for v in obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: _strip(getattr(obj, f.name), arrays, at) for f in dataclasses.fields(obj)})
    return obj


class _Map:
    """One memory map of a whole archive file, made at the first array read from it.

    One per file, not one per array: every map holds a duplicate of the file's descriptor for as long
    as it lives, and an epoch has ~17 arrays (2,000 descriptors for 120 retained epochs, in the process
    whose sockets share the same limit)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.whole: np.memmap | None = None

    def array(self, offset: int, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
        if self.whole is None:
            self.whole = np.memmap(self.path, dtype=np.uint8, mode="r")
        dt = np.dtype(dtype)
        n = int(np.prod(shape)) * dt.itemsize
        return self.whole[offset : offset + n].view(dt).reshape(shape)  # still an np.memmap, read-only


def _fill(obj: Any, path: _Map, base: int) -> Any:
    if isinstance(obj, _Ref):
        if not obj.shape or 0 in obj.shape:
            return np.zeros(obj.shape, dtype=obj.dtype)
        return path.array(base + obj.offset, obj.dtype, obj.shape)
    if isinstance(obj, dict):
        return {k: _fill(v, path, base) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_fill(v, path, base) for v in obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: _fill(getattr(obj, f.name), path, base) for f in dataclasses.fields(obj)})
    return obj


class ArchiveError(PulsegraphError):
    """A file of the archive that does not check out (torn, foreign, another format)."""


def write_mapped(path: Path, obj: Any) -> None:
    """Write ``obj`` with its arrays raw (see the module docstring), under a temporary name, then rename."""
    arrays: list[np.ndarray] = []
    header = pickle.dumps(_strip(obj, arrays, [0]), protocol=5)
    head = MAGIC + len(header).to_bytes(8, "little") + header
    pad = -len(head) % _ALIGN
    digest = hashlib.sha256()
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        chunks: list[bytes | memoryview] = [head, b"\0" * pad]
        for a in arrays:
            if a.nbytes:
                chunks += [a.reshape(-1).view(np.uint8).data, b"\0" * (-a.nbytes % _ALIGN)]
        for chunk in chunks:
            fh.write(chunk)
            digest.update(chunk)
        fh.write(digest.digest())
    os.replace(tmp, path)


def _extent(obj: Any) -> int:
    """Where the arrays of a header end, from the start of the first one."""
    if isinstance(obj, _Ref):
        return obj.offset + int(np.prod(obj.shape)) * np.dtype(obj.dtype).itemsize
    if isinstance(obj, dict):
        return max((_extent(v) for v in obj.values()), default=0)
    if isinstance(obj, list):
        return max((_extent(v) for v in obj), default=0)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return max((_extent(getattr(obj, f.name)) for f in dataclasses.fields(obj)), default=0)
    return 0


def digest_ok(path: Path) -> bool:
    """Whether the file's trailing sha256 is that of all before it (a full read of the file)."""
    try:
        with open(path, "rb") as fh:
            digest = hashlib.sha256()
            total = os.fstat(fh.fileno()).st_size - 32
            left = total
            while left > 0:
                chunk = fh.read(min(left, 1 << 24))
                if not chunk:
                    return False
                digest.update(chunk)
                left -= len(chunk)
            return total >= 0 and fh.read(32) == digest.digest()
    except OSError:
        return False


def read_mapped(path: Path, verify: bool = True) -> Any:
    """What :func:`write_mapped` wrote, its arrays memory-mapped. ``verify`` checks the digest first (a full
    read of the file), for files this process did not just write itself; without it, the file must at least
    be long enough for every array the header names (a map past its end would fault on first read)."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(len(MAGIC))
            if magic != MAGIC:
                raise ArchiveError(f"{path}: not an archive file of this format")
            size = int.from_bytes(fh.read(8), "little")
            header = fh.read(size)
            if len(header) != size:
                raise ArchiveError(f"{path}: cut short")
            length = os.fstat(fh.fileno()).st_size
    except OSError as exc:
        raise ArchiveError(f"{path}: {exc}") from exc
    if verify and not digest_ok(path):
        raise ArchiveError(f"{path}: checksum mismatch")
    base = len(MAGIC) + 8 + size
    base += -base % _ALIGN
    got = pickle.loads(header)
    if length < base + _extent(got) + 32:
        raise ArchiveError(f"{path}: cut short")
    return _fill(got, _Map(path), base)


class ResultArchive:
    def __init__(self, root: Path, retain: int) -> None:
        self.root = Path(root)
        self.retain = retain
        self.root.mkdir(parents=True, exist_ok=True)
        self.latest = max(self._epochs(), default=0)
        self.names = NamesJournal(self.root / NAMES_FILE)
        # The epochs taken back (take_back, or history_before), memory-mapped: result, ranks, undo records and tops.
        self._taken: dict[int, tuple[EpochResult, dict | None, dict | None, dict | None]] | None = None
        # Set once every epoch taken back has been checked against its digest (take_back defers it).
        self._verified = threading.Event()
        self._verified.set()
        # The ranks stored with the epochs taken back, by epoch (memory-mapped).
        self.loaded_ranks: dict[int, dict[str, np.ndarray]] = {}
        # Epochs whose write failed (a full disk, no file descriptor left), oldest first: written again,
        # in order, before any newer one, so that a passing fault leaves no gap in the archive.
        self._unsaved: list[tuple[EpochResult, dict | None, dict | None, dict | None]] = []

    def _path(self, epoch: int) -> Path:
        return self.root / f"epoch-{epoch:012d}.res"

    def _epochs(self) -> list[int]:
        return sorted(int(m.group(1)) for p in self.root.iterdir() if (m := _NAME.match(p.name)))

    def _load(self, epoch: int, verify: bool = True) -> tuple[EpochResult, dict | None, dict | None, dict | None] | None:
        """The archived epoch, its ranks, its graph undo record and the top of each ranking (memory-mapped;
        None: not archived with it), or None when the file does not check out."""
        try:
            got = read_mapped(self._path(epoch), verify)
            result, ranks, undo, top = got["result"], got["ranks"], got.get("undo"), got.get("top")
        except (ArchiveError, pickle.UnpicklingError, EOFError, AttributeError, TypeError, KeyError, ValueError) as exc:
            log.warning("result archive: skipping epoch %d (%s)", epoch, exc)
            return None
        if not isinstance(result, EpochResult) or result.epoch != epoch:
            return None
        if result.apps and any(isinstance(got, dict) for got in result.apps.values()):
            result = dataclasses.replace(result, apps=typed_results(result.apps, result.epoch))  # archived before results were typed
        return result, ranks, undo, top

    def mapped(self, epoch: int) -> tuple[EpochResult, dict | None] | None:
        """An epoch this archive wrote, read back memory-mapped (not verified: this process just wrote it)."""
        got = self.mapped_with_undo(epoch)
        return None if got is None else (got[0], got[1])

    def mapped_with_undo(self, epoch: int) -> tuple[EpochResult, dict | None, dict | None] | None:
        """As :meth:`mapped`, and the graph undo record saved with the epoch (None: none was)."""
        got = self._load(epoch, verify=False) if epoch <= self.latest else None
        return None if got is None else got[:3]

    def undo_of(self, epoch: int) -> dict | None:
        """The undo records archived with ``epoch`` (None: none, or not archived): those the take-back read, while
        the epoch is taken back (the graph view read back at a start asks for every retained one), else its file's."""
        taken = self._taken.get(epoch) if self._taken is not None else None
        got = taken if taken is not None else self.mapped_with_undo(epoch)
        return None if got is None else got[2]

    def save(self, results: list[EpochResult], ranks: dict[int, dict[str, np.ndarray]] | None = None,
             undo: dict[int, dict[str, np.ndarray]] | None = None, top: dict[int, dict[str, np.ndarray]] | None = None) -> None:
        """Write the epochs newer than the archive's newest (older ones are there already), each with
        its ranks, its graph undo record and the top of each ranking when given, then drop what falls out of the retention. A disk error is logged, not
        raised: serving goes on from memory, and the epochs not written are tried again, first, at the
        next save (while they are retained)."""
        queued = {r.epoch for r, *_ in self._unsaved}
        for r in sorted(results, key=lambda r: r.epoch):
            if r.epoch <= self.latest or r.epoch in queued:
                continue
            # The applications' per-vertex arrays are kept by the store as undo records, never archived.
            apps = {name: got.without_per_vertex() if isinstance(got, AppResult) else got for name, got in (r.apps or {}).items()}
            light = dataclasses.replace(r, edge_changes=None, full_changes=False, apps=apps)
            self._unsaved.append((light, (ranks or {}).get(r.epoch), (undo or {}).get(r.epoch), (top or {}).get(r.epoch)))
        del self._unsaved[: max(0, len(self._unsaved) - self.retain)]  # those would be pruned at once
        while self._unsaved:
            light, got, u, t = self._unsaved[0]
            try:
                write_mapped(self._path(light.epoch), {"result": light, "ranks": got, "undo": u, "top": t})
            except OSError as exc:
                log.error("result archive: epoch %d not kept on disk yet (%d waiting): %s. It is tried again with the "
                          "next epoch; operator action if this repeats: check the disk and the open files limit under %s.",
                          light.epoch, len(self._unsaved), exc, self.root)
                return
            self._unsaved.pop(0)
            self.latest = light.epoch
        self._prune()

    def _prune(self) -> None:
        epochs = self._epochs()
        for e in epochs[: max(0, len(epochs) - self.retain)]:
            self._path(e).unlink(missing_ok=True)

    def save_names(self, epoch: int, changes: NameChanges, names: Sequence[str]) -> None:
        """Journal the names a pull brought (see :class:`NamesJournal`); a disk error is logged, and the journal
        is dropped: a restart then names its archived epochs only once the pipeline is up, as before."""
        try:
            self.names.append(epoch, changes, names)
        except OSError as exc:
            log.error("result archive: the vertex names not kept on disk (%s); a restart serves the archived epochs "
                      "only once the pipeline is up. Operator action if this repeats: check the disk under %s.", exc, self.root)
            self.names.clear()

    def _take(self, verify: bool = True) -> dict[int, tuple[EpochResult, dict | None, dict | None, dict | None]]:
        """Every retained epoch file that checks out (``verify``: against its digest, as another process wrote
        it; else :meth:`verify_taken` does, later), read once."""
        if self._taken is None:
            self._taken = {}
            for e in self._epochs()[-self.retain :]:
                got = self._load(e, verify)
                if got is not None:
                    self._taken[e] = got
        return self._taken

    def verify_taken(self, drop: Callable[[list[int]], None]) -> list[int]:
        """Check each epoch :meth:`take_back` took against its digest (the full read it deferred, so that the
        epochs are served at once), hand those that fail to ``drop`` (the store's, to stop serving them), and
        forget them; :meth:`confirm` waits for this. The epochs that failed."""
        try:
            taken = self._taken if self._taken is not None else {}
            bad = [e for e in sorted(taken) if not digest_ok(self._path(e))]
            for e in bad:
                log.warning("result archive: skipping epoch %d (checksum mismatch)", e)
                del taken[e]
            if bad:
                drop(bad)
            return bad
        finally:
            self._verified.set()

    def take_back(self) -> tuple[list[EpochResult], NameChanges, dict[int, dict[str, np.ndarray]], dict[int, dict[str, np.ndarray]]] | None:
        """At a start, before the pipeline is up: the archived epochs, oldest first, the names as of the newest,
        and their ranks and tops by epoch (a top recomputed is a pass over the epoch's ranks: ~2 s for 72
        epochs of 2.6 M vertices), to serve provisionally until :meth:`confirm` says whether the pipeline
        recovered this history. None when there is nothing to take back, or the names do not reach the newest
        epoch (an archive written before names were journaled, or a torn journal): :meth:`history_before`
        then takes the epochs back with the pipeline's first epoch, named by it. Their digests are not read
        here (a full read of every file: ~1.2 s for 1.1 GB); :meth:`verify_taken` reads them next, while
        they are served, and drops any that fails."""
        epochs = self._epochs()
        if not epochs:
            return None
        names = self.names.replay(epochs[-1])
        if names is None:
            log.info("result archive: the vertex names do not reach epoch %d; the archived epochs are served once the "
                     "pipeline is up", epochs[-1])
            return None
        taken = self._take(verify=False)
        if not taken:
            return None
        self._verified.clear()
        log.info("result archive: serving %d epochs (%d..%d) from before the restart while the pipeline starts",
                 len(taken), min(taken), max(taken))
        ranks = {e: r for e, (_, r, _, _) in taken.items() if r is not None}
        tops = {e: t for e, (_, _, _, t) in taken.items() if t is not None}
        return [r for _, (r, *_) in sorted(taken.items())], NameChanges(0, names), ranks, tops

    def confirm(self, first_live: EpochResult) -> int:
        """Whether the epochs taken back are the history the pipeline recovered, given ``first_live`` (the
        first epoch it published since it started): the epoch the kept history ends below (``first_live``'s;
        the recovered epochs from it on are published again), or 0 when nothing is kept, and the archive is
        cleared so that it restarts with this history.

        The archive may end a few epochs before ``first_live`` when that is the first epoch after a
        restore: epochs sealed and checkpointed before a crash, but not yet ranked, are not cut again,
        and the restored graph holds their changes. ``first_live`` then covers them, as a ranked epoch
        covers the sealed epochs merged into it, and its ``skipped`` is extended to name them."""
        self._verified.wait()
        k = first_live.epoch
        taken = self._take()
        epochs = self._epochs()
        older = [e for e in epochs if e < k][-self.retain :]
        if not older:
            self._clear(epochs, k, "nothing archived before it" if epochs else None)
            return 0
        if k in epochs:
            ok = k in taken and taken[k][0].vector == first_live.vector
        else:
            newest = taken.get(older[-1])
            ok = (
                (older[-1] == k - 1 or first_live.full_changes) and newest is not None
                and all(first_live.vector.get(p, -1) >= o for p, o in newest[0].vector.items())
            )
        if not ok:
            self._clear(epochs, k, "its epochs are not the history the pipeline recovered")
            return 0
        self.loaded_ranks = {e: r for e, (_, r, _, _) in taken.items() if e in older and r is not None}
        # The recovered epochs from k on are published again; the archive resumes after them.
        self.latest = older[-1]
        gap = range(self.latest + 1, first_live.skipped[0] if first_live.skipped else k)
        if gap:
            first_live.skipped = [*gap, *first_live.skipped]
            log.info("result archive: epochs %d..%d were checkpointed but not ranked before the restart; epoch %d covers them",
                     gap[0], gap[-1], k)
        for e in epochs:
            if e >= k:
                self._path(e).unlink(missing_ok=True)
        for e in [e for e in taken if e >= k or e not in older]:
            del taken[e]
        log.info("result archive: the %d epochs from before the restart (%d..%d) are the recovered history",
                 len(taken), older[0], older[-1])
        return k

    def history_before(self, first_live: EpochResult) -> list[EpochResult]:
        """The archived results older than ``first_live`` (see :meth:`confirm`), oldest first, when they belong
        to the same history; else none, and the archive is cleared. For a start that took nothing back."""
        if not self.confirm(first_live):
            return []
        return [r for _, (r, *_) in sorted(self._take().items())]

    def clear(self) -> None:
        """Forget every archived epoch (a service that does not take its history back starts afresh)."""
        self._clear(self._epochs(), 0, None)

    def _clear(self, epochs: list[int], first_live: int, why: str | None) -> None:
        if why is not None:
            log.warning("result archive: not serving the %d archived epochs (%s, first epoch now %d); starting afresh",
                        len(epochs), why, first_live)
        for e in epochs:
            self._path(e).unlink(missing_ok=True)
        (self.root / VIEW_FILE).unlink(missing_ok=True)
        self.names.clear()
        self.latest = 0
        self._unsaved.clear()
        self._taken = {}
        self.loaded_ranks = {}
