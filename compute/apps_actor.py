"""The applications on Ray: :class:`AppsActor` runs some of them (an :class:`~pulsegraph.compute.apps.runner.AppsHost`)
in a worker of its own, :class:`RayApplications` is the compute stage's :class:`~pulsegraph.compute.apps.runner.AppsPort`
over one, :class:`ApplicationGroups` over several, and :func:`spawn_apps` makes them. The compute actor uses them with
``--compute-partitions`` above 1: the applications' adjacency and state then live in processes of their own, not in
the compute actor's.

They are split in two actors by what they read (:data:`APP_GROUPS`): components and landmarks read the distinct
pairs of every live edge (~17 bytes a live edge, ~80 a vertex with the landmarks' distances); trends and
K-exposure read the ``tags`` and ``mentions`` edges with their first add times and the vertex names (~16-32 bytes
an edge of those types, ~70 a name). Each actor keeps only its own tables, so neither holds all of the
applications' state, and their epochs run side by side. Each gets the same input, put in Ray's object store once.

Owns where the actors run (Ray's SPREAD strategy, as the partitions), what crosses to them each epoch (an
:class:`~pulsegraph.compute.apps.view.AppsInput`: the epoch's edge changes, the graph's facts, the rankings'
scores; the whole live graph only when the applications rebuild), their rows in a clean stop's checkpoint
(a file each beside the compute stage's, read back by the actors of the next start), and their end: they are
owned by the compute actor and die with it. Must not know the applications themselves nor the wiring.
"""

from __future__ import annotations

import dataclasses
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
from pulsegraph.compute.partition_actor import kill_quietly
from pulsegraph.snapshots.checkpoint import CheckpointStore, dumps, load_verified

log = logging.getLogger(__name__)

# The actor's file in a checkpoint written whole (listed in the manifest beside the partitions') where one
# actor runs every application (a checkpoint of an earlier version; tests).
APPS_FILE = "apps.ckpt"
# The applications split over actors of their own by what they read, by the file each writes in a checkpoint.
APP_GROUPS: dict[str, tuple[str, ...]] = {
    "apps-graph.ckpt": ("components", "landmarks"),
    "apps-topics.ckpt": ("trends", "topics"),
}


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
        log.info("applications in this actor: %s", ", ".join(app.name for app in self._host.apps.apps))
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

    file = APPS_FILE  # its file in a checkpoint written whole (the default of a port pickled before there were two)

    def __init__(self, actor: Any, spawn: dict[str, Any], restored: tuple[str, str] | None = None,
                 file: str = APPS_FILE) -> None:
        self.actor = actor
        self.file = file
        self._spawn = dict(spawn)  # spawn_actor's arguments, to make the actor again from its file
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

    @property
    def actors(self) -> list:
        return [] if self.actor is None else [self.actor]

    def submit(self, g: GlobalGraph, epoch: int, changes: EdgeChanges, before: EdgeChanges, full: bool,
               scores: dict | None = None, new_vertices: int = 0,
               ) -> Callable[[], tuple[dict[str, AppResult], dict[str, float]]]:
        """Send the actor this epoch (read from ``g`` now, so the next merge may go on at once) once the run
        before it is done: one run in flight at most, so that runs slower than the merges never pile up."""
        return self.send(self.input_of(g, epoch, changes, before, full, scores, new_vertices))

    def input_of(self, g: GlobalGraph, epoch: int, changes: EdgeChanges, before: EdgeChanges, full: bool,
                 scores: dict | None = None, new_vertices: int = 0) -> AppsInput:
        """This epoch as the actor takes it: the names since the last one sent, the whole graph where it rebuilds."""
        rebuild = not self._built or full or self._spawn["config"].rebuild_every_epoch
        inp = AppsInput.of(g, self._since, epoch, changes, before, full, scores or {}, new_vertices, rebuild)
        inp.resend_whole, self._resend = self._resend, False
        self._since, self._built = (epoch, g.n), True
        return inp

    def send(self, inp: Any) -> Callable[[], tuple[dict[str, AppResult], dict[str, float]]]:
        """Run the actor on ``inp`` (an :class:`AppsInput`, or Ray's reference to one) once its run before is done."""
        if self._running is not None:
            self._get(self._running)
        ref = self._running = self.actor.run.remote(inp)
        return lambda: self._get(ref)

    def resend_whole(self) -> None:
        self._resend = True

    def state_dict(self) -> dict:
        """The applications' checkpointed state; read back without its actor (a stage written whole, taken
        with another config: only its ids and this go on), the state of the write it was pickled with."""
        return self._state if self.actor is None else self._get(self.actor.state_dict.remote())

    def write(self, epoch: int, data_dir: str) -> Callable[[], tuple[tuple[str, str], ...]]:
        """Start writing the actor's file; the call returned waits for it and gives its (name, sha256)."""
        ref = self.actor.write.remote(epoch, data_dir, self.file)

        def written() -> tuple[tuple[str, str], ...]:
            digest, self._state = self._get(ref)
            self._written = (self.file, digest)
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
            if (isinstance(started, RayApplications) and started._spawn["config"] == self._spawn["config"]
                    and started._restored == restore):
                self.actor, started.actor = started.actor, None
                return
            log.warning("the applications' actor started early does not match the checkpoint's; making it again")
            kill_quietly(started.actors)
        self.actor = spawn_actor(**self._spawn, restore=restore, file=self.file).actor


class ApplicationGroups:
    """:class:`~pulsegraph.compute.apps.runner.AppsPort` over several :class:`RayApplications`, each running a group of
    the applications (:data:`APP_GROUPS`): each epoch's input is made once (by the first, which keeps the chain of
    names for all: every one gets every input) and put in Ray's object store once; the epoch's results are theirs
    together, and its milliseconds each application's (the adjacency's, the slower group's: they run side by side)."""

    def __init__(self, ports: list[RayApplications]) -> None:
        self.ports = ports

    @property
    def actors(self) -> list:
        return [a for port in self.ports for a in port.actors]

    def submit(self, g: GlobalGraph, epoch: int, changes: EdgeChanges, before: EdgeChanges, full: bool,
               scores: dict | None = None, new_vertices: int = 0,
               ) -> Callable[[], tuple[dict[str, AppResult], dict[str, float]]]:
        ref = ray.put(self.ports[0].input_of(g, epoch, changes, before, full, scores, new_vertices))
        waits = [port.send(ref) for port in self.ports]

        def results() -> tuple[dict[str, AppResult], dict[str, float]]:
            out: dict[str, AppResult] = {}
            ms: dict[str, float] = {}
            for wait in waits:
                got, took = wait()
                out.update(got)
                for k, v in took.items():
                    ms[k] = max(ms.get(k, 0.0), v)
            return out, ms

        return results

    def resend_whole(self) -> None:
        self.ports[0].resend_whole()  # a flag of the next input, which every group takes

    def state_dict(self) -> dict:
        return {k: v for port in self.ports for k, v in port.state_dict().items()}

    def write(self, epoch: int, data_dir: str) -> Callable[[], tuple[tuple[str, str], ...]]:
        """Every group writes its file at once; the call returned waits for them all."""
        waits = [port.write(epoch, data_dir) for port in self.ports]
        return lambda: tuple(f for wait in waits for f in wait())

    def reopen(self, folder: Path | None, started: Any = None) -> None:
        """Each group's actor made again from its file (``started``'s, where it started early from that file)."""
        early = started.ports if isinstance(started, ApplicationGroups) and len(started.ports) == len(self.ports) else None
        if started is not None and early is None:
            log.warning("the applications' actors started early do not match the checkpoint's; making them again")
            kill_quietly(started.actors)
        for i, port in enumerate(self.ports):
            port.reopen(folder, None if early is None else early[i])


def spawn_actor(config: AppConfig, saved: dict | None = None, log_level: str = "INFO",
                restore: tuple[str, str] | None = None, checked: bool = False, file: str = APPS_FILE) -> RayApplications:
    """A new :class:`AppsActor` running ``config``'s applications (``saved``: their checkpointed state;
    ``restore``: its file of a checkpoint written whole, ``checked``: hashed by the launch already; ``file``: the
    name it writes in a checkpoint), placed by Ray's SPREAD strategy as the partitions are."""
    actor = AppsActor.options(scheduling_strategy="SPREAD").remote(  # type: ignore[attr-defined]
        config=config, saved=saved, restore=restore, checked=checked, log_level=log_level,
    )
    return RayApplications(actor, {"config": config, "log_level": log_level}, restore, file)


def spawn_apps(config: AppConfig, saved: dict | None = None, log_level: str = "INFO") -> ApplicationGroups:
    """The applications in an actor for each of :data:`APP_GROUPS` (``saved``: their checkpointed state)."""
    return ApplicationGroups([spawn_actor(dataclasses.replace(config, only=names), saved, log_level, file=file)
                              for file, names in APP_GROUPS.items()])


def start_apps_of(folder: Path, files: dict[str, str], config: AppConfig, log_level: str = "INFO",
                  checked: bool = False) -> RayApplications | ApplicationGroups | None:
    """The applications' actors of a stage written whole in checkpoint folder ``folder``, started from the files its
    manifest names (``files``: :meth:`CheckpointStore.compute_files_in`) before the compute stage itself is read
    back (the actors read their files meanwhile); None where they name none (the stage's port then makes them
    once it is read back). One file for every application: a checkpoint of an earlier version, one actor."""
    if APPS_FILE in files:
        return spawn_actor(config, log_level=log_level, restore=(str(folder / APPS_FILE), files[APPS_FILE]), checked=checked)
    if not set(APP_GROUPS) <= set(files):
        return None
    return ApplicationGroups([
        spawn_actor(dataclasses.replace(config, only=names), log_level=log_level, restore=(str(folder / file), files[file]),
                    checked=checked, file=file)
        for file, names in APP_GROUPS.items()
    ])
