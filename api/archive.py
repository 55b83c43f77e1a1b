"""The result archive: the retained epochs' results on disk, so a restarted service keeps its history.

Owns ``<data_dir>/results/``: one file per published epoch
(``epoch-000000000042.res``), written with a checksum under a temporary name
and renamed (:func:`snapshots.checkpoint.write_atomic`, without fsync: losing
the newest few to a power cut costs history, never correctness); the newest
``retain`` are kept. It
never touches the checkpoints or the epoch log.

A file holds the epoch's :class:`~compute.results.EpochResult` without its bulk:
no edge changes, and none of the per-vertex application arrays (component
labels, landmark distances: ``api.store.PER_VERTEX_APPS``) that the store keeps
as undo records. Scores stay whole (float64, what was served). So
after a restart the archived epochs answer everything that reads scores and
epoch facts (epochs, top, a vertex's scores and history, movers, trends,
topics), while neighbors, paths and components per vertex are answered from the
epoch the pipeline restored onwards (older ones get a 404 that says so).

An archived history is only taken back when it is the history the pipeline
recovered: the first epoch the restarted pipeline publishes must be in the
archive with the same vector (a snapshot is a pure function of its vector, so
same vector, same epoch), or directly follow the archive's newest epoch with a
vector that contains it. Anything else (a wiped epoch log, another stream in the
same folder) starts the archive afresh, with a log line saying so.
"""

from __future__ import annotations

import dataclasses
import logging
import pickle
import re
from pathlib import Path

from api.store import PER_VERTEX_APPS
from compute.results import EpochResult
from snapshots.checkpoint import read_verified, write_atomic
from snapshots.exceptions import CheckpointError, CorruptCheckpoint

log = logging.getLogger(__name__)

_NAME = re.compile(r"^epoch-(\d{12})\.res$")


class ResultArchive:
    def __init__(self, root: Path, retain: int) -> None:
        self.root = Path(root)
        self.retain = retain
        self.root.mkdir(parents=True, exist_ok=True)
        self.latest = max(self._epochs(), default=0)

    def _path(self, epoch: int) -> Path:
        return self.root / f"epoch-{epoch:012d}.res"

    def _epochs(self) -> list[int]:
        return sorted(int(m.group(1)) for p in self.root.iterdir() if (m := _NAME.match(p.name)))

    def _load(self, epoch: int) -> EpochResult | None:
        try:
            result = pickle.loads(read_verified(self._path(epoch)))
        except (CorruptCheckpoint, pickle.UnpicklingError, EOFError, AttributeError, TypeError) as exc:
            log.warning("result archive: skipping epoch %d (%s)", epoch, exc)
            return None
        return result if isinstance(result, EpochResult) and result.epoch == epoch else None

    def save(self, results: list[EpochResult]) -> None:
        """Write the epochs newer than the archive's newest (older ones are there already), then drop
        what falls out of the retention. A disk error is logged, not raised: serving goes on."""
        for r in sorted(results, key=lambda r: r.epoch):
            if r.epoch <= self.latest:
                continue
            apps = {name: {k: v for k, v in (got or {}).items() if k not in PER_VERTEX_APPS.get(name, ())}
                    for name, got in (r.apps or {}).items()}
            light = dataclasses.replace(r, edge_changes=None, full_changes=False, apps=apps)
            try:
                # Not fsynced: a torn file after a power cut fails its checksum and is skipped.
                write_atomic(self._path(r.epoch), pickle.dumps(light, protocol=5), durable=False)
            except CheckpointError as exc:
                log.error("result archive: epoch %d not kept on disk: %s", r.epoch, exc)
                return
            self.latest = r.epoch
        self._prune()

    def _prune(self) -> None:
        epochs = self._epochs()
        for e in epochs[: max(0, len(epochs) - self.retain)]:
            self._path(e).unlink(missing_ok=True)

    def history_before(self, first_live: EpochResult) -> list[EpochResult]:
        """The archived results older than ``first_live`` (the first epoch the pipeline published since
        it started), oldest first, when they belong to the same history; else none, and the archive
        is cleared so that it restarts with this history."""
        k = first_live.epoch
        epochs = self._epochs()
        older = [e for e in epochs if e < k][-self.retain :]
        if not older:
            self._clear(epochs, k, "nothing archived before it" if epochs else None)
            return []
        same = self._load(k) if k in epochs else None
        if k in epochs:
            ok = same is not None and same.vector == first_live.vector
        else:
            newest = self._load(older[-1])
            ok = (
                older[-1] == k - 1 and newest is not None
                and all(first_live.vector.get(p, -1) >= o for p, o in newest.vector.items())
            )
        if not ok:
            self._clear(epochs, k, "its epochs are not the history the pipeline recovered")
            return []
        loaded = [r for r in (self._load(e) for e in older) if r is not None]
        # The recovered epochs from k on are published again; the archive resumes after them.
        self.latest = max(e for e in epochs if e < k)
        for e in epochs:
            if e >= k:
                self._path(e).unlink(missing_ok=True)
        log.info("result archive: serving %d epochs from before the restart (%d..%d)", len(loaded), older[0], older[-1])
        return loaded

    def _clear(self, epochs: list[int], first_live: int, why: str | None) -> None:
        if why is not None:
            log.warning("result archive: not serving the %d archived epochs (%s, first epoch now %d); starting afresh",
                        len(epochs), why, first_live)
        for e in epochs:
            self._path(e).unlink(missing_ok=True)
        self.latest = 0
