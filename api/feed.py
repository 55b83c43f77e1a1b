"""The feed: a thread that pulls new epoch results from the compute actor into the store.

One actor call per poll, not per request: the API answers from the store (which
archives each new epoch itself). With a :class:`~pulsegraph.api.archive.ResultArchive` to
resume from, the first epoch the pipeline publishes after a start settles the archived
history: the epochs the store took back at the start (and served while the pipeline
started) are kept or dropped as the archive decides; when none were taken back
(their names were not journaled), the archived epochs from before the restart are
put in front of the live ones then. New graph view parts that hold nothing while the API has epochs (the
old ones were lost: :mod:`pulsegraph.api.graphparts`) are filled with the compute stage's graph whole
(``ComputeActor.graph_whole``), not with a relaunch's first epoch, which the API may have already.

What comes over from the compute actor is copied into this process's own memory at once
(:func:`owned`): Ray hands big arrays over as views of its shared object store, and one view kept
(the newest epochs' scores, the applications' current arrays) pins the whole object of that poll,
every result and edge change in it, until the view goes; the store filled and spilled to disk.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any, Callable

import numpy as np
import ray
from ray.exceptions import RayActorError

from pulsegraph.api.archive import ResultArchive
from pulsegraph.api.store import EpochView, ResultStore
from pulsegraph.api.viewfile import VIEW_WAIT_S
from pulsegraph.base.runtime import HeapTrimmer
from pulsegraph.compute.changes import EdgeChanges

log = logging.getLogger(__name__)

# Polls per second: well under the epoch interval, so an epoch shows up within ~100 ms.
POLL_S = 0.1


def owned(obj: Any) -> Any:
    """``obj`` with every array that does not own its memory (a view of Ray's object store) copied."""
    if isinstance(obj, np.ndarray):
        return obj if obj.flags.owndata else obj.copy()
    if isinstance(obj, dict):
        return {k: owned(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [owned(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(owned(v) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: owned(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init})
    return obj


class ResultFeed:
    def __init__(
        self, compute, store: ResultStore, on_epoch: Callable[[EpochView], None] | None = None,
        archive: ResultArchive | None = None,
    ) -> None:
        self.compute = compute  # swapped by the wiring when it relaunches the pipeline
        self._store = store
        self._on_epoch = on_epoch
        self._archive = archive
        self._resumed = archive is None  # the archived history is put in front once, before the first live epoch
        self._stop = threading.Event()
        self._trimmer = HeapTrimmer()
        self._thread = threading.Thread(target=self._loop, name="result-feed", daemon=True)

    def start(self) -> "ResultFeed":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    @property
    def running(self) -> bool:
        """Its thread is still alive (a stop that outwaited an epoch being applied)."""
        return self._thread.is_alive()

    def poll(self) -> list[EpochView]:
        whole, self._store.resend_whole = self._store.resend_whole, False
        # Epochs taken back at the start are not the compute stage's: until its first epoch, ask for all it has.
        taken_back = self._store.provisional
        if taken_back and (reader := self._store.view_reader) is not None:
            reader.start()  # read back by now where the API serves; not where a pipeline runs alone (the tests)
            reader.wait_loaded(VIEW_WAIT_S)
        after, named = (0, 0) if taken_back else (self._store.latest_epoch, len(self._store.names))
        # The epoch of the graph it holds: a compute stage read back whole publishes its first epoch whole
        # unless it is the stage's own (a clean stop's view, read back at this start).
        graph = self._store.graph
        graph_at = graph.epoch
        # New graph view parts (the old were lost) holding nothing while the API has epochs: the next epoch's changes
        # would not fill them, and a relaunch's whole first epoch is no news here. Asked first, so that the results
        # pulled next reach at least its epoch (see _mend).
        mend = ray.get(self.compute.graph_whole.remote(after)) if not taken_back and after and graph.wants_whole() else None
        got = ray.get(self.compute.results_after.remote(after, named, whole, graph_at))
        if got is None:  # names the compute actor kept no changes from (it was relaunched): ask in its order
            got = ray.get(self.compute.results_in_order.remote(after, named, whole, graph_at))
        results, names = got
        results = owned(results)
        after_mend = [] if mend is None else [(r.epoch, r.edge_changes, r.full_changes, r.skipped)
                                              for r in results if r.epoch > mend[0] and r.edge_changes is not None]
        if taken_back and not results:
            return []  # its names alone would rename the epochs served meanwhile
        settle = None
        first = min(results, key=lambda r: r.epoch) if results else None
        if taken_back:
            self._resumed = True
            # Keep what is the recovered history; the rest is published again (or was another history).
            settle = self._archive.confirm(first) if self._archive is not None and first is not None else 0
        elif not self._resumed and first is not None and self._archive is not None:
            self._resumed = True
            earlier = self._archive.history_before(first)
            # Epochs from before the restart are history, not news: no listener hears of them.
            self._store.add(earlier, names, notify=False, ranks_of=self._archive.loaded_ranks)
            names = None  # applied with the archived epochs already
        views = self._store.add(results, names, settle=settle)
        if mend is not None:
            self._mend(mend[0], owned(mend[1]), after_mend)
        if self._on_epoch:
            for v in views:
                self._on_epoch(v)
        # The pulled results' copies and the store's merges are free now; with nothing new (ingest
        # throttled), the trim after the last epoch may have been too soon to run.
        self._trimmer.maybe_trim()
        return views

    def _mend(self, epoch: int, whole: EdgeChanges, later: list[tuple[int, EdgeChanges, bool, list[int]]]) -> None:
        """Fill the graph view's new parts with the compute stage's graph as of ``epoch``, then the changes of the
        epochs after it that this poll pulled. Once the store took those epochs in (a relaunch's first one takes
        seconds), not before: meanwhile the routes say the view is lost, not that the store's newest is not kept."""
        graph = self._store.graph
        graph.apply(epoch, whole, full=True)
        for e, changes, full, skipped in later:
            graph.apply(e, changes, full, skipped[0] if skipped else None)
        log.info("graph view filled whole as of epoch %d from the compute stage, then %d epochs after it", epoch, len(later))

    def _loop(self) -> None:
        failing: str | None = None  # what the polls keep failing with: logged once, not ten times a second
        while not self._stop.wait(POLL_S):
            try:
                self.poll()
            except RayActorError as exc:
                if self._stop.is_set():
                    return  # a stop that outwaited this poll (a long batch) killed the actor: no news
                # The compute actor died; the supervisor relaunches the pipeline and swaps it in.
                if failing != "actor":
                    log.warning("result feed waits for the compute actor to be relaunched (%s)", type(exc).__name__)
                failing = "actor"
                continue
            except Exception as exc:  # noqa: BLE001 - keep serving the last epoch; the next poll retries
                if failing != repr(exc):
                    log.exception("result feed poll failed (logged once until it changes or recovers)")
                failing = repr(exc)
                continue
            if failing is not None:
                log.info("result feed polls again")
                failing = None
