"""The chaos run: a real broker, a paced producer, and faults at random moments, then the exact answer.

Used by tests/ingest/test_chaos.py (a few faults, short enough for CI) and by
``python -m bench.chaos`` (as many as you like). The service runs as a user runs
it, ``pulsegraph run --source kafka`` in its own session. The faults, drawn from
a seeded generator:

- ``kill <role>``: SIGKILL of one actor's process (a shard, an ingest actor, the
  coordinator, the compute actor), as a crash or the kernel's OOM killer would;
- ``sigkill``: SIGKILL of every process of the service, then a restart;
- ``broker``: the broker stopped for ``outage_s`` seconds, then started again;
  meanwhile ``/health`` must say ``disconnected`` (status ``degraded``) and the
  last epoch sealed before the outage must still be served.

After each fault the run waits until the service serves an epoch newer than the
one it served at the fault, with the ingest running again: the recovery time.
At the end the producer stops, and the run waits for the epoch of the topic's
end; then the final graph (from the newest checkpoint) must equal the reference
built from the topic's records, edge for edge; no bad record may be in the
dead-letter topic twice, none missing; and ``/health`` must say running.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field

from bench.soak import role_of
from pulsegraph.memory import process_tree
from tests.graphref import reference
from tests.ingest.test_kafka import consume_all, end_vector
from tests.ingest.test_kafka_faults import (
    Service,
    assert_one_history,
    checkpointed_graph,
)

FAULTS = ("kill shards", "kill ingest", "kill coordinator", "kill compute", "sigkill", "broker")
BAD = [b"{not json", b'{"user": 7}', b'{"mentions": ["a"]}', b"[]", b'{"user": "a", "ts": "soon"}']


@dataclass
class Recovery:
    fault: str
    at_epoch: int
    seconds: float


@dataclass
class ChaosResult:
    recoveries: list[Recovery] = field(default_factory=list)
    records: int = 0
    bad_records: int = 0
    final_epoch: int = 0


class PacedProducer(threading.Thread):
    """Tweets at ``rate`` a second over every partition, one in ``1/bad`` malformed; it rides out a
    broker outage (the client buffers and retries, acks from every in-sync replica)."""

    def __init__(self, bootstrap: str, topic: str, rate: float, seed: int, bad: float = 0.01) -> None:
        super().__init__(name="paced-producer", daemon=True)
        from kafka import KafkaProducer

        self.topic, self.rate, self.bad = topic, rate, bad
        self.rng = random.Random(seed)
        self.producer = KafkaProducer(
            bootstrap_servers=bootstrap, acks="all", linger_ms=10, retries=1_000_000, retry_backoff_ms=200,
            delivery_timeout_ms=300_000, request_timeout_ms=10_000,
        )
        self.halt = threading.Event()
        self.sent = 0

    def run(self) -> None:
        t0 = time.monotonic()
        while not self.halt.is_set():
            due = int((time.monotonic() - t0) * self.rate)
            while self.sent < due:
                if self.rng.random() < self.bad:
                    value = self.rng.choice(BAD)
                else:
                    user = f"u{self.rng.randrange(3000)}"
                    value = json.dumps({
                        "user": user, "mentions": [f"u{self.rng.randrange(3000)}" for _ in range(self.rng.randrange(3))],
                        "hashtags": [f"t{self.rng.randrange(200)}" for _ in range(self.rng.randrange(2))],
                    }).encode()
                self.producer.send(self.topic, value=value)
                self.sent += 1
            time.sleep(0.01)
        self.producer.flush(timeout=300)
        self.producer.close()


def _actor_pid(svc: Service, role: str, rng: random.Random, timeout: float = 60.0) -> int:
    """One process of the actors of ``role`` (waits while they are being relaunched)."""
    deadline = time.monotonic() + timeout
    while True:
        pids = [p for p in process_tree(svc.proc.pid) if role_of(p, svc.proc.pid) == role]
        if pids:
            return rng.choice(sorted(pids))
        assert time.monotonic() < deadline, f"no {role} actor process within {timeout:.0f} s"
        time.sleep(0.2)


def _outage_is_reported(svc: Service, before: int, outage_s: float) -> None:
    """While the broker is away (``outage_s`` from now): /health says so within the outage, and the
    service goes on serving what it sealed before it."""
    end = time.monotonic() + outage_s
    health: dict = {}
    while time.monotonic() < end and health.get("ingest") != "disconnected":
        time.sleep(0.25)
        health = svc.health() or {}
    assert health.get("ingest") == "disconnected" and health.get("status") == "degraded", health
    assert _served(svc) >= before
    time.sleep(max(0.0, end - time.monotonic()))


def _served(svc: Service) -> int:
    e = svc.latest()
    return e["epoch"] if e else 0


def run_chaos(broker, topic: str, workdir, faults: int | list[str], seed: int, rate: float = 400.0,
              outage_s: float = 10.0, between_s: tuple[float, float] = (1.0, 4.0), log=print) -> ChaosResult:
    """Faults against a service on ``broker`` (tests.conftest.KafkaBroker), then the checks. ``faults``:
    how many, drawn at random from FAULTS, or the list of them in order (at random moments still)."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(topic, 4, 1)])
    admin.close()
    rng = random.Random(seed)
    data = workdir / "data"
    svc = Service(broker, topic, data, workdir / "service.log")
    producer = PacedProducer(broker.bootstrap, topic, rate, seed)
    out = ChaosResult()
    svc.start()
    producer.start()
    try:
        svc.wait_for(lambda e: True, timeout=180)
        plan = list(faults) if isinstance(faults, list) else [rng.choice(FAULTS) for _ in range(faults)]
        for i, fault in enumerate(plan):
            time.sleep(rng.uniform(*between_s))
            before = _served(svc)
            relaunches = (svc.health() or {}).get("recoveries", 0)
            t0 = time.monotonic()
            if fault == "sigkill":
                svc.kill()
                svc.start()
            elif fault == "broker":
                broker.stop()
                _outage_is_reported(svc, before, outage_s)
                broker.start()
            else:
                os.kill(_actor_pid(svc, fault.split()[1], rng), signal.SIGKILL)

            def recovered(e: dict, fault=fault, before=before, relaunches=relaunches) -> bool:
                # An actor's death is recovered once the service relaunched (its count of relaunches grew:
                # the status comes from the new actors) and serves an epoch it sealed since.
                h = svc.health() or {}
                if fault.startswith("kill") and h.get("recoveries", 0) <= relaunches:
                    return False
                return e["epoch"] > before and h.get("ingest") == "running"

            svc.wait_for(recovered, timeout=300)
            out.recoveries.append(Recovery(fault, before, time.monotonic() - t0))
            log(f"fault {i + 1}/{len(plan)}: {fault} at epoch {before}: served again after {out.recoveries[-1].seconds:.1f} s")
        producer.halt.set()
        producer.join(timeout=300)
        records = consume_all(broker.bootstrap, topic)
        want = end_vector(records)
        final = svc.wait_for(lambda e: e["vector"] == want, timeout=300)
        out.final_epoch = final["epoch"]
        deadline = time.monotonic() + 60
        while (svc.health() or {}).get("ingest") != "running" and time.monotonic() < deadline:
            time.sleep(0.5)
        health = svc.health() or {}
        assert health.get("ingest") == "running" and health.get("status") == "ok", health
        svc.wait_checkpointed(final["epoch"])  # --checkpoint-every 1
    finally:
        producer.halt.set()
        svc.stop()
    vector, graph = checkpointed_graph(data)
    assert vector == want, (vector, want)
    assert graph == reference(records, want, "tweets"), "the final graph is not the reference"
    assert_one_history(data)
    letters = consume_all(broker.bootstrap, f"{topic}.dlq", with_headers=True)
    keys = [(h["partition"].decode(), int(h["offset"])) for recs in letters.values() for _, _, h in recs]
    assert len(keys) == len(set(keys)), "a dead letter was written twice"
    bad = {(p, o) for p, recs in records.items() for o, v in recs if v in BAD}
    assert set(keys) == bad, "dead letters missing or extra"
    out.records = sum(len(r) for r in records.values())
    out.bad_records = len(bad)
    return out
