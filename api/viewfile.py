"""The API's graph view and per-vertex histories kept across a clean stop, so that a restarted service answers the
graph of its retained epochs (neighbors, paths, components, landmark estimates) before its pipeline's first epoch.

Owns ``<data_dir>/results/view.res``: written by :func:`save_view` when the service stops cleanly (after the
result feed, so that no epoch is applied meanwhile), in the result archive's format
(:func:`~pulsegraph.api.archive.write_mapped`: arrays raw, a digest at the end), with the epoch it is the view
of and that epoch's vector; read back once at the next start by :class:`ViewReader`, which removes it. It holds
the newest graph and arrays only: their undo records, which give the older retained epochs, are in the epochs'
archive files already and are mapped from there, as the running service maps them.

It is taken back only as the view of the newest epoch the archive took back (the same epoch and vector), and
only if every undo record it names is in the archive: a crash leaves an older file or none, and the graph
routes then wait for the pipeline's first epoch, as before. The pipeline resumes from its newest checkpoint,
which a stop does not write, so it usually cuts the last few epochs again and publishes them anew
(:meth:`~pulsegraph.api.archive.ResultArchive.confirm`). Their graph is a function of their vectors, the same
the view has: the view ignores them as epochs it has, and the first epoch after it, the whole graph, is applied
over it as what differs. The applications' arrays of those epochs may differ (landmarks are chosen by scores),
so the histories are rolled back past them with their undo records first (:meth:`ViewReader.settle`), or begin
again with the pipeline's epochs where they cannot go back that far. A view of another history is dropped.

Why only at a stop, not with every epoch: it is the whole view, ~50 bytes per edge (a gigabyte at 20 M
edges), where an epoch's archive file is what the epoch changed.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pulsegraph.api.archive import VIEW_FILE, ArchiveError, ResultArchive, digest_ok, read_mapped, write_mapped
from pulsegraph.api.graphparts import PartitionedGraph, drop_part_files

if TYPE_CHECKING:
    from pulsegraph.api.store import ResultStore

log = logging.getLogger(__name__)

# The pipeline's start, and the feed's first pull, wait this long at most for the view to be read back: a second
# or two, and the epoch the API's graph is of decides how a compute stage read back whole publishes its first.
VIEW_WAIT_S = 20.0


def view_path(archive: ResultArchive) -> Path:
    return archive.root / VIEW_FILE


def save_view(store: ResultStore, archive: ResultArchive) -> bool:
    """Write the store's graph view and histories as of their newest epoch, when that is the newest epoch the store
    and the archive hold (else, or on a disk error, nothing is written and a stale file is removed). Called once
    nothing applies epochs any more. Whether it was written."""
    path = view_path(archive)
    reader = store.view_reader
    if reader is not None and not reader.started:
        return False  # the file read at this start is still there, and nothing was applied since
    if reader is not None:
        reader.settle(None)  # a read under way ends first
    epoch = store.graph.epoch
    began = time.monotonic()
    try:
        graph = None
        if epoch and epoch == store.latest_epoch and archive.latest == epoch:
            # A partitioned view's parts write their own files beside this one (pulsegraph.api.graphparts).
            graph = store.graph.keep() if isinstance(store.graph, PartitionedGraph) else store.graph.state()
        if graph is not None:
            write_mapped(path, {
                "epoch": epoch, "vector": dict(store.get(epoch).result.vector), "graph": graph,
                "histories": {f"{app}.{field}": h.state() for (app, field), h in store.histories().items()},
            })
    except OSError as exc:
        log.error("the API's graph view not kept for the next start (%s); it will take the graph from the pipeline", exc)
        graph = None
    if graph is None:
        path.unlink(missing_ok=True)
        drop_part_files(path.parent)  # a part's file is read only beside the view file that names it
        return False
    log.info("the API's graph view of epoch %d (%d edge slots) kept for the next start in %.1f s",
             epoch, store.graph.slots, time.monotonic() - began)
    return True


class ViewReader:
    """Reads the view back on a thread of its own, once the API serves (:meth:`start`): until it is done the graph
    routes answer as before a restart's first epoch (``graph_not_retained``)."""

    def __init__(self, store: ResultStore, archive: ResultArchive) -> None:
        self._store, self._archive = store, archive
        self._thread = threading.Thread(target=self._read, name="view-read", daemon=True)
        self.taken = False  # the view was taken back (and not dropped since)
        self._loaded = threading.Event()  # the read is past taking the view in (its digest may still be read)

    @classmethod
    def open(cls, store: ResultStore, archive: ResultArchive) -> ViewReader | None:
        """A reader for the view file, if there is one."""
        return cls(store, archive) if view_path(archive).exists() else None

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    def start(self) -> None:
        if not self.started:
            self._thread.start()

    def wait_loaded(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` s, the API's start included) until the view is taken in or refused: the
        pipeline's start waits for it, since Ray's start takes both cores of a small machine for seconds and
        made a read of a second take eight (1.3 GB, 24 M edges). Whether it was."""
        return self._loaded.wait(timeout)

    def settle(self, keep_below: int | None) -> None:
        """Before the pipeline's epochs are applied: wait for the read, then, given where the epochs kept end
        (``keep_below``, from :meth:`~pulsegraph.api.archive.ResultArchive.confirm`; 0: none kept, another history;
        None: not known yet), keep the view as it is, keep it with the applications' arrays rolled back past the
        epochs the pipeline publishes again, or drop it."""
        self.start()
        self._thread.join()
        epoch = self._store.graph.epoch
        if not self.taken or keep_below is None or (keep_below and epoch < keep_below):
            return
        if not keep_below:
            log.info("the graph view taken back (epoch %d) is not of the history the pipeline recovered: dropped", epoch)
            self._clear()
            return
        # The usual case: the pipeline resumes from its newest checkpoint, older than the stop, and publishes the
        # epochs after it again. Their graph is a function of their vectors, the same as the view's: the view stays,
        # and ignores them as epochs it has. What the applications computed for them may differ (landmarks chosen
        # by scores, which a new solve gives within its bound): the histories go back to before them.
        kept = [h.roll_back(keep_below) for h in self._store.histories().values()]
        for h, ok in zip(self._store.histories().values(), kept, strict=True):
            if not ok:
                h.clear()  # it began with those epochs: it begins again with the pipeline's
        log.info("the graph view taken back (epoch %d) kept: the pipeline publishes epochs %d.. again (application "
                 "arrays rolled back: %d of %d)", epoch, keep_below, sum(kept), len(kept))

    def _clear(self) -> None:
        self._store.graph.clear()
        for h in self._store.histories().values():
            h.clear()
        self.taken = False

    def _read(self) -> None:
        path = view_path(self._archive)
        began = time.monotonic()
        try:
            # Its digest (a full read: a second at a gigabyte, several beside Ray's start) is read once the view
            # serves, as the archive's epochs are (ResultArchive.verify_taken): a view that fails it is dropped then.
            why = self._load(read_mapped(path, verify=False))
            self._loaded.set()
            if why is None:
                log.info("the API's graph view of epoch %d taken back (%d edge slots) in %.1f s",
                         self._store.graph.epoch, self._store.graph.slots, time.monotonic() - began)
                why = None if digest_ok(path) else "checksum mismatch"
        except (ArchiveError, pickle.UnpicklingError, EOFError, AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
            why = str(exc) or type(exc).__name__
        finally:
            path.unlink(missing_ok=True)  # read once: a later crash must not find a view of an epoch since replaced
            self._loaded.set()
        if why is not None:
            self._clear()
            log.warning("the API's graph view in %s not taken back (%s); the graph comes with the pipeline's first epoch", path, why)

    def _load(self, state: dict) -> str | None:
        """Take ``state`` into the store's view and histories; why not (None: taken)."""
        why = self._unfit(state)
        if why is not None:
            return why
        histories = self._store.histories()
        # The histories first: the graph's routes check the graph view's epochs, and read the histories after.
        if not all(histories[_pair(key)].load_state(s, _undo_of(self._archive, key + ".")) for key, s in state["histories"].items()):
            return "an undo record it names is not in the archive"
        if not self._store.graph.load_state(state["graph"], _undo_of(self._archive, "")):
            return "an undo record it names is not in the archive, or its slots do not fit its columns"
        self.taken = True
        return None

    def _unfit(self, state: dict) -> str | None:
        """Why ``state`` is not the view of the newest epoch taken back (None: it is)."""
        epoch = state["epoch"]
        if not self._store.latest_epoch:
            return "no epoch was taken back"
        newest = self._store.get().result
        if epoch != newest.epoch or state["vector"] != dict(newest.vector):
            return f"it is the view of epoch {epoch}, the newest epoch taken back is {newest.epoch}"
        return None


def _pair(key: str) -> tuple[str, str]:
    app, field = key.split(".", 1)
    return app, field


def _undo_of(archive: ResultArchive, prefix: str) -> Callable[[int], dict | None]:
    """The undo records archived with an epoch (:meth:`ResultArchive.undo_of`: read once, at the take-back) that are
    ``prefix``'s (a history's, ``app.field.``), their keys without it; ``""``: the graph view's own."""
    def undo_of(epoch: int) -> dict | None:
        rec = archive.undo_of(epoch)
        if rec is None:
            return None
        if prefix:
            return {k[len(prefix):]: a for k, a in rec.items() if k.startswith(prefix)}
        return {k: a for k, a in rec.items() if "." not in k}
    return undo_of
