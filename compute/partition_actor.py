"""The partitioned ranking on Ray: :class:`RankPartitionActor` holds one
:class:`~pulsegraph.compute.partitioned.RankPartition` in its own worker, :class:`RayPartitions` is the
:class:`~pulsegraph.compute.partitioned.PartitionPort` over such actors (``.remote`` calls and ``ray.get``),
and :func:`ray_rank_engine` is the engine factory the compute actor hands its stage when
``--compute-partitions`` is above 1.

Each actor also holds the merge view's edge slots of the shards given to it
(:class:`~pulsegraph.compute.slots.PartitionSlots`: shard ``s`` to partition ``s % P``), written by each
merge and read for the whole graph, through the same calls.

Owns where the partition actors run (Ray's SPREAD strategy: over as many nodes as there are, as the
shards; not beside the shards, whose ownership is a hash of the vertex *name* while a partition owns
``id % P`` of the compute stage's global ids, so no shard feeds one partition), how an exchange's
messages travel, the actors' rows in a clean stop's checkpoint (each writes its own file, and a partition
actor of the next start reads it back: :meth:`RayPartitions.write`, :meth:`RayPartitions.reopen`), and the
actors' end. Must not know the solve (the driver's half lives in
:mod:`pulsegraph.compute.partitioned`, which stays Ray-free) nor the wiring.

An exchange is two rounds of calls, submitted together: every partition's ``*_send`` returns one
Ray object per addressee (``num_returns = P``), and each partition's receive is called with the
objects addressed to it as its arguments, so Ray resolves them where the receiver runs. Only the
values of the boundary travel (a sweep's message is the in-flow at the receiver's vertices the sender
reaches, in the order of a list both keep). Ray stores a message of more than
``max_direct_call_object_size`` (100 KiB) in the sender node's object store and the receiver fetches it
from there; smaller ones are returned to the caller (the compute actor) and inlined into the receiver's
call by it: a large boundary never passes through the compute actor, a small one does, at the cost of
a copy of a few kilobytes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayActorError

from pulsegraph.base.runtime import HeapTrimmer, configure_logging
from pulsegraph.compute.engine import RankConfig, RankEngine
from pulsegraph.compute.exceptions import ComputeError, PartitionLost
from pulsegraph.compute.partitioned import ModuloOwner, PartitionedEngine, RankPartition
from pulsegraph.compute.partitioned.base import Owner
from pulsegraph.snapshots.checkpoint import CheckpointStore, dumps, load_verified
from pulsegraph.snapshots.exceptions import CheckpointError

log = logging.getLogger(__name__)


def process_memory() -> dict[str, int]:
    """This process's resident set and its peak, in bytes (Linux's /proc; zeros elsewhere)."""
    out = {"rss": 0, "peak_rss": 0}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    out["rss"] = int(line.split()[1]) * 1024
                elif line.startswith("VmHWM:"):
                    out["peak_rss"] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return out


def kill_quietly(actors: Sequence[Any]) -> None:
    """Kill each of ``actors``, those already gone included (Ray's kill is asynchronous: they die soon after)."""
    for a in actors:
        try:
            ray.kill(a, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass


@ray.remote
class RankPartitionActor:
    """One compute partition in a Ray worker: the calls of :data:`RankPartition.OPS`, reached by name."""

    def __init__(
        self, *, index: int, parts: int, owner: Owner, config: RankConfig, compact_min: int | None = None,
        log_level: str = "INFO", restore: tuple[str, str] | None = None, checked: bool = False,
    ) -> None:
        """``restore``: (path, sha256) of this partition's file in a checkpoint (:meth:`write`), read back
        here, on the partition's own node: its rows never pass through the compute actor; ``checked``: the
        launch hashed the file just before (only its header's digest is compared)."""
        configure_logging(log_level)
        self._parts = parts
        if restore is None:
            self._part = RankPartition(index, parts, owner, config, None, compact_min)
        else:
            t0 = time.perf_counter()
            self._part = load_verified(Path(restore[0]), restore[1], rehash=not checked)
            if (self._part.q, self._part.space.parts) != (index, parts):
                raise CheckpointError(f"{restore[0]} holds partition {self._part.q} of {self._part.space.parts}, "
                                      f"not {index} of {parts}")
            log.info("compute partition %d read back in %.1f s", index, time.perf_counter() - t0)
        self._trimmer = HeapTrimmer()

    def write(self, epoch: int, data_dir: str, name: str) -> str:
        """This partition (its rows, vectors and lists) as file ``name`` of epoch ``epoch``'s checkpoint; its sha256."""
        return CheckpointStore(data_dir).write_file(epoch, name, dumps(self._part))

    def _op(self, op: str):
        if op not in RankPartition.OPS:
            raise ValueError(f"no partition operation {op!r}")
        return getattr(self._part, op)

    def call(self, op: str, *args: Any) -> Any:
        out = self._op(op)(*args)
        if op == "blocks":  # the epoch's last call (the gather): its transient arrays are free now
            self._trimmer.maybe_trim()
        return out

    def send(self, op: str, *args: Any) -> Any:
        """``op``'s messages, one Ray object each (the caller asks for ``num_returns = parts``)."""
        msgs = self._op(op)(*args)
        return msgs[0] if self._parts == 1 else tuple(msgs)

    def receive(self, op: str, *msgs_then_args: Any) -> Any:
        """``op`` with the first ``parts`` arguments (the messages addressed here, in sender order, which Ray
        resolved before the call) as its list, and the rest as its arguments."""
        msgs, args = list(msgs_then_args[: self._parts]), msgs_then_args[self._parts:]
        return self._op(op)(msgs, *args)

    def memory(self) -> dict[str, int]:
        """This worker's resident set and peak, and the bytes its partition holds (graph, vectors, lists)."""
        self._trimmer.maybe_trim()
        return {**process_memory(), "held": self._part.nbytes()}


class RayPartitions:
    """:class:`~pulsegraph.compute.partitioned.PartitionPort` over :class:`RankPartitionActor` handles.
    Every call is one round: the calls go out together and ``ray.get`` waits for all the answers. A
    partition that died fails the round with :class:`~pulsegraph.compute.exceptions.PartitionLost`."""

    def __init__(self, actors: Sequence[Any], spawn: dict[str, Any] | None = None,
                 restored: Sequence[tuple[str, str]] | None = None) -> None:
        self.actors = list(actors)
        # How the actors were made (spawn_partitions' arguments), to make them again from their files.
        self._spawn = dict(spawn or {})
        self._written: tuple[tuple[str, str], ...] | None = None  # the files of the last write(): (name, sha256)
        # The files the actors were read back from, (path, sha256) each; None: made empty.
        self._restored = None if restored is None else [(path, digest) for path, digest in restored]

    @property
    def parts(self) -> int:
        return len(self.actors)

    def _get(self, refs: list) -> list[Any]:
        try:
            return list(ray.get(refs))
        except RayActorError as exc:
            # One that failed as it was made says why on its traceback's last line (a file that did not check out).
            text = str(exc).strip()
            why = text.splitlines()[-1] if "creation task" in text else exc.__class__.__name__
            raise PartitionLost(
                f"a compute partition actor died ({why}); the epoch fails and the pipeline "
                "relaunches from the newest checkpoint with new partitions"
            ) from exc

    def each(self, op: str, *args: Any) -> list[Any]:
        return self._get([a.call.remote(op, *args) for a in self.actors])

    def each_own(self, op: str, args: Sequence[tuple]) -> list[Any]:
        return self._get([a.call.remote(op, *x) for a, x in zip(self.actors, args, strict=True)])

    def exchange(self, send: str, receive: str, *args: Any) -> list[Any]:
        p = self.parts
        sent = [a.send.options(num_returns=p).remote(send, *args) for a in self.actors]
        if p == 1:
            sent = [[s] for s in sent]
        # Refs as top-level arguments: Ray resolves them for the receiver, from the sender's object store
        # when they are large; the receive calls are queued now and run as their messages arrive.
        got = [a.receive.remote(receive, *(sent[q][i] for q in range(p)), *args) for i, a in enumerate(self.actors)]
        return self._get(got)

    def write(self, epoch: int, data_dir: str) -> tuple[tuple[str, str], ...]:
        names = partition_files(self.parts)
        digests = self._get([a.write.remote(epoch, data_dir, name) for a, name in zip(self.actors, names, strict=True)])
        self._written = tuple(zip(names, digests, strict=True))
        return self._written

    def __getstate__(self) -> dict:
        """The port pickles as the files its partitions last wrote (a checkpoint's), never as actor handles:
        those actors die with the compute actor that owns them."""
        if self._written is None or not self._spawn:
            raise CheckpointError("partition actors are pickled only as the files they wrote (write() first)")
        return {"written": self._written, "spawn": self._spawn}

    def __setstate__(self, state: dict) -> None:
        self.actors, self._written, self._spawn, self._restored = [], state["written"], state["spawn"], None

    def reopen(self, folder: Path | None, started: Any = None) -> None:
        if self.actors or folder is None or self._written is None:
            raise ComputeError("partition actors are made again from the files of the checkpoint this port was read from")
        restore = [(str(Path(folder) / name), digest) for name, digest in self._written]
        if isinstance(started, RayPartitions):
            # Started from the manifest's files while this port was unpickled: theirs only if they were made as
            # this port's were, from the very files it names (else made again, and those killed).
            same = ("config", "parts", "owner", "compact_min")  # the log level may differ: no matter
            if all(started._spawn[k] == self._spawn[k] for k in same) and started._restored == restore:
                self.actors, started.actors = started.actors, []
                return
            log.warning("partition actors started early do not match the checkpoint's; making them again")
            started.close()
        self.actors = spawn_partitions(**self._spawn, restore=restore).actors

    def memory(self) -> list[dict[str, int]]:
        """Each partition actor's resident set, peak and held bytes (for the bench and the logs)."""
        return self._get([a.memory.remote() for a in self.actors])

    def close(self) -> None:
        """Kill the partition actors (what a restart needs of them, a clean stop's checkpoint has: :meth:`write`;
        after any other stop the ranking is rebuilt from the graph's first whole epoch)."""
        kill_quietly(self.actors)
        self.actors = []


def partition_files(parts: int) -> list[str]:
    """The file names ``parts`` partitions write into a checkpoint's folder, partition by partition (the
    writer, :meth:`RayPartitions.write`, and the early reader, :func:`start_partitions_of`, agree on them here)."""
    return [f"partition-{q}.ckpt" for q in range(parts)]


def check_gpus(device: str, parts: int) -> None:
    """``device="cuda"`` with ``parts`` partitions needs that many GPUs in the cluster: Ray would otherwise
    wait for them for ever, the pipeline launched but never ranking."""
    if device != "cuda" or parts <= 1:
        return
    have = int(ray.cluster_resources().get("GPU", 0))
    if have < parts:
        raise ComputeError(
            f"--device cuda with --compute-partitions {parts} needs a GPU per partition, and the Ray cluster has "
            f"{have}. Operator action: lower --compute-partitions to {max(have, 1)}, add GPU nodes, or use --device cpu."
        )


def spawn_partitions(
    config: RankConfig, parts: int, owner: Owner | None = None, compact_min: int | None = None,
    log_level: str = "INFO", restore: Sequence[tuple[str, str]] | None = None, checked: bool = False,
) -> RayPartitions:
    """``parts`` new partition actors, spread over the cluster's nodes (Ray's SPREAD: one per node while
    there are more nodes than partitions, round the nodes otherwise), each asking for a GPU when the
    ranking runs on one (``device="cuda"``). ``restore``: each one's file, (path, sha256), to read back
    (``checked``: hashed by the launch already)."""
    owner = owner or ModuloOwner(parts)
    options: dict[str, Any] = {"scheduling_strategy": "SPREAD", "num_gpus": 1 if config.device == "cuda" else 0}
    actors = [
        RankPartitionActor.options(**options).remote(  # type: ignore[attr-defined]
            index=q, parts=parts, owner=owner, config=config, compact_min=compact_min, log_level=log_level,
            restore=None if restore is None else restore[q], checked=checked,
        )
        for q in range(parts)
    ]
    spawn = {"config": config, "parts": parts, "owner": owner, "compact_min": compact_min, "log_level": log_level}
    return RayPartitions(actors, spawn, restore)


def start_partitions_of(folder: Path, files: dict[str, str], config: RankConfig, parts: int, log_level: str = "INFO",
                        checked: bool = False) -> RayPartitions | None:
    """The partition actors of a stage written whole in checkpoint folder ``folder``, started from the files
    its manifest names (``files``: :meth:`CheckpointStore.compute_files_in`) before the compute stage itself is
    read back (each reads its own file meanwhile, on its own node), as :func:`ray_rank_engine` makes them;
    None when they name no such files (the stage's port then makes them itself once it is read back)."""
    names = partition_files(parts)
    if sorted(f for f in files if f.startswith("partition-")) != sorted(names):  # the applications' file beside them
        return None
    restore = [(str(folder / name), files[name]) for name in names]
    return spawn_partitions(config, parts, ModuloOwner(parts), log_level=log_level, restore=restore, checked=checked)


def ray_rank_engine(config: RankConfig, partitions: int, log_level: str = "INFO") -> RankEngine | PartitionedEngine:
    """The compute stage's engine factory on Ray: today's :class:`RankEngine` for one partition, else a
    :class:`PartitionedEngine` over ``partitions`` new :class:`RankPartitionActor` actors, vertices owned
    ``id % partitions``."""
    if partitions <= 1:
        return RankEngine(config)
    owner = ModuloOwner(partitions)
    log.info("ranking over %d partition actors", partitions)
    return PartitionedEngine(config, spawn_partitions(config, partitions, owner, log_level=log_level), owner)
