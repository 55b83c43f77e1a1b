"""Supervision: the watch over a running :class:`~pulsegraph.topology.Pipeline`.

Once a second it polls every actor (the status behind /health), keeps the
memory budget, the bound on the compute stage's queue and the bound on how far
ranked results may fall behind (pausing and resuming the ingest actors while
any is reached), and checks every
TOPIC_CHECK_S that the Kafka topic is still the one the actors were launched
for. When an actor died, an epoch failed or the topic changed, it relaunches
the pipeline from the newest checkpoint, backing off while relaunches keep
failing; an error only the operator can fix makes the pipeline give up.
The pipeline builds and tears down actors; this module decides when.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from pulsegraph.errors import PulsegraphError
from pulsegraph.ingest.sources.kafka_clients import TopicInfo, describe_topic
from pulsegraph.memory import node_used, service_memory

if TYPE_CHECKING:
    from pulsegraph.topology import Pipeline

log = logging.getLogger(__name__)

# How often the cached pipeline status behind /health is refreshed, and how long an actor
# may take to answer it before it counts as lost (a busy actor answers within a few batches).
STATUS_POLL_S = 1.0
STATUS_TIMEOUT_S = 30.0
# Wait before relaunching a lost pipeline, doubling while relaunches keep failing.
RELAUNCH_BACKOFF_S = 0.5
RELAUNCH_BACKOFF_MAX_S = 30.0
# How often the Kafka topic is described again: partitions added are picked up within this.
TOPIC_CHECK_S = 10.0
# Plenty for epoch deltas of a single machine, and it keeps a laptop's shared memory free.
OBJECT_STORE_BYTES = 512 * 1024 * 1024


class Supervisor:
    def __init__(self, pipeline: "Pipeline") -> None:
        self.pipeline = pipeline
        self.topic: TopicInfo | None = None  # the Kafka topic as the actors were launched for it
        self._next_topic_check = 0.0
        self._topic_asking = threading.Event()  # a check is under way on its own thread
        # What the last check found wrong with the topic as launched, until the watch reads it.
        self._topic_verdict: tuple[TopicInfo, str] | None = None
        # Why the ingest actors were last told to pause ("memory", "compute_queue"; empty: they read), and
        # the time the compute queue has kept them paused (since when, while it does).
        self._causes: tuple[str, ...] = ()
        self._paused = {"compute_queue": _PauseClock(), "result_lag": _PauseClock()}

    def run(self) -> None:
        """Refresh the status behind /health; relaunch the pipeline when an actor died or an epoch failed."""
        p = self.pipeline
        backoff = RELAUNCH_BACKOFF_S
        while not p._stop.wait(STATUS_POLL_S):
            if not p._launched.is_set():
                continue
            seen = p.recoveries  # a relaunch on another thread (a lost graph view part's) meanwhile makes this one moot
            if p._lifecycle.locked():
                continue  # a relaunch or the stop is under way: the actors are being replaced
            try:
                status = p.poll_status()
                p._status = {**status, **self.check_backpressure(status)}
                lost = status["_lost"]
            except RayActorError as exc:
                lost = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            except GetTimeoutError:
                # Busy is not dead: an actor deep in a large epoch answers late. A dead one fails
                # its calls at once (RayActorError), so only that triggers a relaunch.
                log.warning("an actor did not answer the status poll within %.0f s", STATUS_TIMEOUT_S)
                continue
            except Exception:  # noqa: BLE001 - keep the last status; report what failed
                if p.recoveries == seen and not p._lifecycle.locked():  # not actors a relaunch was taking down
                    log.exception("pipeline status poll failed")
                continue
            lost = lost or self.topic_changed()
            if not lost:
                backoff = RELAUNCH_BACKOFF_S
                continue
            if p._stop.wait(backoff):
                return
            backoff = min(backoff * 2, RELAUNCH_BACKOFF_MAX_S)
            try:
                p._relaunch(lost, seen)
            except PulsegraphError as exc:
                # Ours, not Ray's: the data folder or the source is not what its history says (a log
                # that is not one history, a checkpoint of other shards, a re-created topic).
                # Retrying cannot fix it; the operator can, and the message says how.
                p._give_up(str(exc))
                return
            except Exception:  # noqa: BLE001 - the next poll finds it still broken and tries again
                log.exception("relaunch failed")

    def topic_changed(self) -> str | None:
        """Every TOPIC_CHECK_S: why the Kafka topic is not the one the actors were launched for (partitions
        added, or the topic re-created), or None. A relaunch picks up new partitions from their first
        offset, with their entries in the epoch vector; the launch check stops a re-created topic.

        The broker is asked on a thread of its own: while it is away, describing the topic waits for
        the client's timeouts (seconds), and the status behind /health must not wait with it."""
        if self.topic is None:
            return None
        found, self._topic_verdict = self._topic_verdict, None
        # A verdict on the topic as an earlier launch saw it is stale: that launch already relaunched.
        verdict = found[1] if found is not None and found[0] is self.topic else None
        if verdict is None and time.monotonic() >= self._next_topic_check and not self._topic_asking.is_set():
            self._next_topic_check = time.monotonic() + TOPIC_CHECK_S
            self._topic_asking.set()
            threading.Thread(target=self._ask_topic, args=(self.topic,), name="topic-check", daemon=True).start()
        return verdict

    def _ask_topic(self, launched: TopicInfo) -> None:
        from kafka.errors import KafkaError

        from pulsegraph.ingest.exceptions import SourceError

        try:
            now = describe_topic(str(self.pipeline.settings.bootstrap), str(self.pipeline.settings.topic), self.pipeline.kafka_config)
        except (KafkaError, SourceError):
            return  # unreachable, or the topic is gone for now: the ingest actors report that
        finally:
            self._topic_asking.clear()
        name = self.pipeline.settings.topic
        if now.topic_id != launched.topic_id:
            self._topic_verdict = (launched, f"Kafka topic {name} was re-created (id {launched.topic_id}, now {now.topic_id})")
        elif now.partitions > launched.partitions:
            self._topic_verdict = (launched, f"Kafka topic {name} grew from {launched.partitions} to {now.partitions} partitions")

    def measure_memory(self) -> int:
        """What the budget counts (see pulsegraph.memory): this process tree, or the node when joined to a cluster."""
        if self.pipeline.settings.ray_address:
            return node_used()
        return service_memory(os.getpid(), OBJECT_STORE_BYTES)

    def check_backpressure(self, status: dict) -> dict:
        """Measure the memory, read the compute stage's queue and the ranked results' lag; pause the ingest
        actors while any is at its bound, resume them when none is, and say so in the status."""
        out: dict = {}
        reasons: dict[str, str] = {}
        guard = self.pipeline.memory
        if guard is not None:
            changed = guard.update(self.measure_memory())
            reason = guard.reason()
            if changed:
                log.warning("ingest %s", f"throttled: {reason}" if reason else "resumes: memory is back under the budget")
            if guard.outgrown() and not guard.warned:
                guard.warned = True
                log.error("%s", reason)
            out["memory"] = {
                "used_bytes": guard.used, "limit_bytes": guard.limit, "throttled": guard.throttled,
                "throttled_seconds": round(guard.total_throttled_s(), 1),
            }
            if reason:
                out["memory"]["reason"] = reasons["memory"] = reason
        queue = status.get("compute_queue")
        if queue is not None:
            full = bool(queue["full"])
            out["compute_queue"] = {**queue, "throttled": full, "throttled_seconds": self._paused["compute_queue"].tick(full)}
            if full:
                out["compute_queue"]["reason"] = reasons["compute_queue"] = queue_reason(queue)
        lag = status.get("result_lag")
        if lag is not None:
            over = bool(lag["over"])
            out["result_lag"] = {**lag, "throttled": over, "throttled_seconds": self._paused["result_lag"].tick(over)}
            if over:
                out["result_lag"]["reason"] = reasons["result_lag"] = (
                    f"ranked results are {lag['seconds']:.1f} s of seal time behind the newest sealed epoch, over "
                    f"--max-result-lag ({lag['limit_s']:g} s); ingest waits until ranking catches up")
        causes = tuple(reasons)
        actors = [bool(i.get("throttled")) for i in status.get("_ingest", [])]
        if causes != self._causes or any(a != bool(causes) for a in actors):
            for cause, done in (("compute_queue", "the compute stage took the queued epochs"), ("result_lag", "ranking caught up")):
                if cause in causes and cause not in self._causes:
                    log.info("ingest throttled: %s", reasons[cause])
                elif cause in self._causes and cause not in causes:
                    log.info("%s%s", done, "" if causes else "; ingest resumes")
            reason = "; ".join(reasons.values()) or None
            ray.get([a.throttle.remote(reason) for a in self.pipeline.ingest], timeout=STATUS_TIMEOUT_S)
            self._causes = causes
        if causes and status["ingest"] in ("running", "finished"):
            out["ingest"] = "throttled"
        return out


class _PauseClock:
    """The time one cause has kept ingest paused since the launch, counted from the status polls."""

    def __init__(self) -> None:
        self.since: float | None = None
        self.total_s = 0.0

    def tick(self, paused: bool) -> float:
        """Note whether the cause pauses ingest now; returns its seconds so far, rounded for /health."""
        now = time.monotonic()
        if paused and self.since is None:
            self.since = now
        elif not paused and self.since is not None:
            self.total_s += now - self.since
            self.since = None
        return round(self.total_s + (now - self.since if self.since is not None else 0.0), 1)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def queue_reason(queue: dict) -> str:
    """Why a full compute queue pauses ingest, for /health and the log."""
    limit = queue.get("limit_bytes")
    held = queue["bytes"] + queue["handing_bytes"]
    # Full at a poll that found it drained means the bound was reached in between (the coordinator's peak).
    bound = f"--compute-queue-limit ({_size(limit)})" if limit and (held >= limit or queue["epochs"] < 64) else "64 queued epochs"
    return (f"the compute stage is behind: {_size(held)} of sealed epochs' deltas are not merged yet ({queue['epochs']} epochs "
            f"queued, the rest in its hands), at {bound}; ingest waits until it is done with its batch")
