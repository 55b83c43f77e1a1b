"""The applications on Ray: :class:`AppsActor` runs them (an :class:`~pulsegraph.compute.apps.runner.AppsHost`) in a
worker of its own, :class:`RayApplications` is the compute stage's :class:`~pulsegraph.compute.apps.runner.AppsPort`
over it, and :func:`spawn_apps` makes one. The compute actor uses them with ``--compute-partitions`` above 1:
the applications' adjacency and state (components, landmarks, K-exposure, trends: ~36 bytes per live edge
and ~110 per vertex) then live in a process of their own, not in the compute actor's.

Owns where the actor runs (Ray's SPREAD strategy, as the partitions), what crosses to it each epoch (an
:class:`~pulsegraph.compute.apps.view.AppsInput`: the epoch's edge changes, the graph's facts, the rankings'
scores; the whole live graph only when the applications rebuild), its rows in a clean stop's checkpoint
(its own file beside the compute stage's, read back by the actor of the next start), and its end: it is
owned by the compute actor and dies with it. Must not know the applications themselves nor the wiring.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayActorError

from pulsegraph.base.runtime import HeapTrimmer, configure_logging
from pulsegraph.compute.apps.base import AppResult
from pulsegraph.compute.apps.runner import AppConfig, AppsHost
from pulsegraph.compute.apps.view import AppsInput
from pulsegraph.compute.changes import EdgeChanges
from pulsegraph.compute.exceptions import ComputeError
from pulsegraph.compute.graph import GlobalGraph
from pulsegraph.snapshots.checkpoint import CheckpointStore, dumps, load_verified

log = logging.getLogger(__name__)

# The actor's file in a checkpoint written whole (listed in the manifest beside the partitions').
APPS_FILE = "apps.ckpt"


class AppsLost(ComputeError):
    """The applications' actor died while an epoch needed it."""


@ray.remote
class AppsActor:
    """The applications in a Ray worker: :meth:`run` once per ranked epoch, in order."""

    def __init__(self, *, config: AppConfig, saved: dict | None = None, restore: tuple[str, str] | None = None,
                 checked: bool = False, log_level: str = "INFO") -> None:
        """``saved``: the applications' checkpointed state (:meth:`Applications.state_dict`); ``restore``: (path,
        sha256) of this actor's file in a checkpoint written whole, read back here (``checked``: the launch
        hashed it just before)."""
        configure_logging(log_level)
        if restore is None:
            self._host = AppsHost(config, saved)
        else:
            t0 = time.perf_counter()
            self._host = load_verified(Path(restore[0]), restore[1], rehash=not checked)
            log.info("applications read back in %.1f s", time.perf_counter() - t0)
        self._trimmer = HeapTrimmer()

    def run(self, inp: AppsInput) -> tuple[dict[str, AppResult], dict[str, float]]:
        out = self._host.take(inp)
        self._trimmer.maybe_trim()  # the epoch's transient arrays (a rebuild's whole graph) are free now
        return out

    def state_dict(self) -> dict:
        return self._host.state_dict()

    def write(self, epoch: int, data_dir: str, name: str) -> tuple[str, dict]:
        """The applications (adjacency, state, view of the graph) as file ``name`` of epoch ``epoch``'s checkpoint:
        its sha256, and the state an ordinary checkpoint keeps (:meth:`state_dict`)."""
        return CheckpointStore(data_dir).write_file(epoch, name, dumps(self._host)), self._host.state_dict()


class RayApplications:
    """:class:`~pulsegraph.compute.apps.runner.AppsPort` over an :class:`AppsActor`: each epoch one call, whose
    answer completes the epoch's result; the compute stage merges and ranks the next batch meanwhile."""

    def __init__(self, actor: Any, spawn: dict[str, Any], restored: tuple[str, str] | None = None) -> None:
        self.actor = actor
        self._spawn = dict(spawn)  # spawn_apps' arguments, to make the actor again from its file
        self._restored = restored  # the file the actor was read back from, (path, sha256); None: made new
        self._written: tuple[str, str] | None = None  # (name, sha256) of the last write()
        self._state: dict = {}  # the state_dict() of that write, for a stage read back with another config
        # The epoch and name count the actor's view of the graph is at; has it built its adjacency.
        self._since = (0, 0)
        self._built = False
        self._resend = False
        self._running: Any = None  # the run submitted last (its object ref), until the next is submitted

    def _get(self, ref: Any) -> Any:
        try:
            return ray.get(ref)
        except RayActorError as exc:
            raise AppsLost(
                f"the applications' actor died ({exc.__class__.__name__}); the epoch fails and the pipeline "
                "relaunches from the newest checkpoint with a new one"
            ) from exc

    def submit(self, g: GlobalGraph, epoch: int, changes: EdgeChanges, before: EdgeChanges, full: bool,
               scores: dict | None = None, new_vertices: int = 0,
               ) -> Callable[[], tuple[dict[str, AppResult], dict[str, float]]]:
        """Send the actor this epoch (read from ``g`` now, so the next merge may go on at once) once the run
        before it is done: one run in flight at most, so that runs slower than the merges never pile up."""
        rebuild = not self._built or full or self._spawn["config"].rebuild_every_epoch
        inp = AppsInput.of(g, self._since, epoch, changes, before, full, scores or {}, new_vertices, rebuild)
        inp.resend_whole, self._resend = self._resend, False
        if self._running is not None:
            self._get(self._running)
        ref = self._running = self.actor.run.remote(inp)
        self._since, self._built = (epoch, g.n), True
        return lambda: self._get(ref)

    def resend_whole(self) -> None:
        self._resend = True

    def state_dict(self) -> dict:
        """The applications' checkpointed state; read back without its actor (a stage written whole, taken
        with another config: only its ids and this go on), the state of the write it was pickled with."""
        return self._state if self.actor is None else self._get(self.actor.state_dict.remote())

    def write(self, epoch: int, data_dir: str) -> Callable[[], tuple[tuple[str, str], ...]]:
        """Start writing the actor's file; the call returned waits for it and gives its (name, sha256)."""
        ref = self.actor.write.remote(epoch, data_dir, APPS_FILE)

        def written() -> tuple[tuple[str, str], ...]:
            digest, self._state = self._get(ref)
            self._written = (APPS_FILE, digest)
            return (self._written,)

        return written

    def __getstate__(self) -> dict:
        """Pickled as the file the actor last wrote (a checkpoint's), never as its handle: it dies with its owner."""
        if self._written is None:
            raise ComputeError("the applications' actor is pickled only as the file it wrote (write() first)")
        return {**vars(self), "actor": None, "_running": None}

    def reopen(self, folder: Path | None, started: RayApplications | None = None) -> None:
        """A new actor from the file this port was pickled with, in checkpoint folder ``folder``: ``started``'s, if
        it was started early from that very file with the same config (:func:`start_apps_of`), else a new one."""
        if self.actor is not None or folder is None or self._written is None:
            raise ComputeError("the applications' actor is made again from the file of the checkpoint its port was read from")
        name, digest = self._written
        restore = (str(Path(folder) / name), digest)
        if started is not None:
            if started._spawn["config"] == self._spawn["config"] and started._restored == restore:
                self.actor, started.actor = started.actor, None
                return
            log.warning("the applications' actor started early does not match the checkpoint's; making it again")
            ray.kill(started.actor, no_restart=True)
        self.actor = spawn_apps(**self._spawn, restore=restore).actor


def spawn_apps(config: AppConfig, saved: dict | None = None, log_level: str = "INFO",
               restore: tuple[str, str] | None = None, checked: bool = False) -> RayApplications:
    """A new :class:`AppsActor` (``saved``: the applications' checkpointed state; ``restore``: its file of a
    checkpoint written whole, ``checked``: hashed by the launch already), placed by Ray's SPREAD strategy as
    the partitions are."""
    actor = AppsActor.options(scheduling_strategy="SPREAD").remote(  # type: ignore[attr-defined]
        config=config, saved=saved, restore=restore, checked=checked, log_level=log_level,
    )
    return RayApplications(actor, {"config": config, "log_level": log_level}, restore)


def start_apps_of(folder: Path, files: dict[str, str], config: AppConfig, log_level: str = "INFO",
                  checked: bool = False) -> RayApplications | None:
    """The applications' actor of a stage written whole in checkpoint folder ``folder``, started from the file its
    manifest names (``files``: :meth:`CheckpointStore.compute_files_in`) before the compute stage itself is read
    back (the actor reads its file meanwhile); None where they name none (the stage's port then makes it once
    it is read back)."""
    if APPS_FILE not in files:
        return None
    return spawn_apps(config, log_level=log_level, restore=(str(folder / APPS_FILE), files[APPS_FILE]), checked=checked)
