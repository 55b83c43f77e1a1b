"""The API's graph view on Ray: the parts of :mod:`pulsegraph.api.graphparts` as actors, and their lifetime.

With ``--compute-partitions P`` above 1 the service keeps its graph view (neighbors and paths as of any
retained epoch) in P :class:`GraphPartActor` actors, spread over the nodes like the compute partitions, in
place of the API process. They belong to the service, not to a pipeline generation: a relaunch keeps them
(their view goes on from the relaunched pipeline's epochs, as the API's own did), unless one of them died;
then :meth:`GraphParts.ensure` makes new ones, and the relaunched pipeline's first epoch, which is whole,
gives them the graph again. Answering a read takes a call to one actor; the actor answers several at once
(the view's readers and its one writer share a read-write lock).
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from pulsegraph.api.graphparts import GraphPart, PartitionedGraph, PartLost
from pulsegraph.base.runtime import HeapTrimmer, configure_logging
from pulsegraph.compute.partition_actor import kill_quietly
from pulsegraph.settings import Settings

log = logging.getLogger(__name__)

# Reads a part answers at once (a request thread of the API each): they wait only for an epoch being written.
PART_CONCURRENCY = 8
# How long a part may take to answer a liveness check at a relaunch.
ALIVE_TIMEOUT_S = 10.0


@ray.remote(max_concurrency=PART_CONCURRENCY)  # type: ignore[call-overload]  # documented; missing from its stubs
class GraphPartActor:
    """One :class:`~pulsegraph.api.graphparts.GraphPart` in a Ray worker, its calls reached by name."""

    def __init__(self, *, index: int, parts: int, retain: int, log_level: str = "INFO", spill: str | None = None) -> None:
        """``spill``: the folder whose subfolder ``index`` this part writes its cold undo records to (shared storage on a
        cluster, as the data folder is)."""
        configure_logging(log_level)
        self._part = GraphPart(retain, None if spill is None else Path(spill) / str(index))
        self._trimmer = HeapTrimmer()
        log.info("graph view part %d of %d started", index, parts)

    def call(self, op: str, *args: Any) -> Any:
        if op not in GraphPart.OPS:
            raise ValueError(f"no graph view operation {op!r}")
        out = getattr(self._part, op)(*args)
        if op == "apply":  # an epoch's transient arrays are free now
            self._trimmer.maybe_trim()
        return out

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()


class RayGraphParts:
    """:class:`~pulsegraph.api.graphparts.PartsPort` over :class:`GraphPartActor` handles: a round's calls go
    out together and ``ray.get`` waits for their answers; a dead part fails it with ``PartLost``."""

    def __init__(self, actors: Sequence[Any]) -> None:
        self.actors = list(actors)
        self.parts = len(self.actors)

    def _live(self) -> list[Any]:
        if not self.actors:
            raise PartLost("the graph view's parts are stopped")
        return self.actors

    def _get(self, refs: list) -> list[Any]:
        try:
            return list(ray.get(refs))
        except RayActorError as exc:
            raise PartLost(f"a graph view part's actor died ({exc.__class__.__name__})") from exc

    def each(self, op: str, args: Sequence[tuple]) -> list[Any]:
        return self._get([a.call.remote(op, *x) for a, x in zip(self._live(), args, strict=True)])

    def some(self, calls: dict[int, tuple[str, tuple]]) -> dict[int, Any]:
        actors = self._live()
        return dict(zip(calls, self._get([actors[i].call.remote(op, *a) for i, (op, a) in calls.items()])))

    def alive(self) -> bool:
        try:
            ray.get([a.__ray_ready__.remote() for a in self.actors], timeout=ALIVE_TIMEOUT_S)
        except (RayActorError, GetTimeoutError):
            return False
        return True

    def close(self) -> None:
        kill_quietly(self.actors)
        self.actors = []


def spawn_graph_parts(parts: int, retain: int, log_level: str = "INFO", spill: Path | None = None) -> RayGraphParts:
    """``parts`` new, empty parts, spread over the cluster's nodes (Ray's SPREAD), their cold undo records under ``spill``."""
    return RayGraphParts([
        GraphPartActor.options(scheduling_strategy="SPREAD").remote(  # type: ignore[attr-defined]
            index=q, parts=parts, retain=retain, log_level=log_level, spill=None if spill is None else str(spill),
        )
        for q in range(parts)
    ])


class GraphParts:
    """The service's graph view parts: made at the first launch, made again at a relaunch where one died."""

    def __init__(self, parts: int, folder: Path, retain: int, log_level: str, relaunch: Callable[..., None]) -> None:
        """``folder``: where a clean stop's parts keep their files (the result archive's); the parts' cold undo records
        are in its ``view-parts`` folder while they run."""
        self._parts, self._retain, self._log_level, self._relaunch = parts, retain, log_level, relaunch
        self._spill = Path(folder) / "view-parts"
        self.graph = PartitionedGraph(None, on_lost=self._lost, folder=folder)

    def _lost(self, why: str) -> None:
        """A part was found lost: ask for a relaunch on a thread of its own (found by the feed's thread or a
        request's, and a relaunch waits for neither); the API's feed fills new parts with the compute stage's
        graph whole. None is due once new parts replaced these (a relaunch for the same loss came first)."""
        port = self.graph.port
        threading.Thread(target=self._relaunch, args=(why,), kwargs={"due": lambda: self.graph.port is port},
                         name="graph-part-lost", daemon=True).start()

    @classmethod
    def of(cls, settings: Settings, folder: Path, relaunch: Callable[..., None]) -> GraphParts | None:
        """The service's parts with ``--compute-partitions`` above 1; None (the API keeps the view) with one."""
        s = settings
        return cls(s.compute_partitions, folder, s.retain_epochs, s.log_level, relaunch) if s.compute_partitions > 1 else None

    def ensure(self) -> None:
        """Parts that all answer: the ones there are, or new ones (the feed fills them with the compute stage's graph whole)."""
        port = self.graph.port
        if isinstance(port, RayGraphParts) and port.alive():
            return
        if isinstance(port, RayGraphParts):
            port.close()
            log.warning("graph view: a part is gone; %d new parts take the compute stage's graph whole", self._parts)
        t0 = time.monotonic()
        self.graph.replace(spawn_graph_parts(self._parts, self._retain, self._log_level, self._spill))
        log.info("graph view over %d part actors at epoch %d (%.1f s)", self._parts, self.graph.epoch, time.monotonic() - t0)

    def close(self) -> None:
        port = self.graph.port
        if isinstance(port, RayGraphParts):
            port.close()
        shutil.rmtree(self._spill, ignore_errors=True)  # what a clean stop keeps is in the parts' own files
