"""Transactional producers: aborted records never reach the graph, open ones wait for their commit.

A real broker and a real transactional producer (confluent-kafka's Producer with
a ``transactional.id``, flushing before each commit and abort, so the aborted
records really are in the log), read by the real pipeline with each Kafka
client. The reference graph is built from the committed events alone; every
event has its own time, so attribute stamps do not depend on offsets.
"""

from __future__ import annotations

import json
import random
import time

import pytest
import ray
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pulsegraph.topology import Pipeline
from tests.graphref import reference, without_attrs
from tests.ingest.test_kafka import CLIENTS, kafka_settings

PARTITIONS = 2


def tweets(rng: random.Random, start: int, n: int) -> list[bytes]:
    return [
        json.dumps({
            "user": f"u{rng.randrange(60)}", "mentions": [f"u{rng.randrange(60)}" for _ in range(rng.randrange(3))],
            "hashtags": [f"t{rng.randrange(12)}" for _ in range(rng.randrange(3))], "text": "x", "ts": float(start + i),
        }).encode()
        for i in range(n)
    ]


def expected(events: list[bytes]) -> dict:
    return reference({"all": list(enumerate(events))}, {"all": len(events)}, "tweets")


def wait_records(p: Pipeline, n: int, timeout: float = 90):
    return p.wait_for_epoch(lambda v: v.result.records == n, timeout=timeout)


@pytest.mark.parametrize("client", CLIENTS)
def test_aborted_transactions_never_apply_and_an_open_one_waits_for_its_end(ray_cluster, kafka_broker, tmp_path, client):
    topic = kafka_broker.topic()
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=60)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    rng, committed, ts = random.Random(11), [], 0

    def transaction(n: int, end: str | None) -> list[bytes]:
        nonlocal ts
        events = tweets(rng, ts, n)
        ts += n
        producer.begin_transaction()
        for i, e in enumerate(events):
            producer.produce(topic, value=e, partition=i % PARTITIONS)
        producer.flush(30)  # the records are in the log before the transaction ends
        if end == "commit":
            producer.commit_transaction(30)
        elif end == "abort":
            producer.abort_transaction(30)
        return events

    for t in range(16):  # every fourth aborted
        events = transaction(60, "abort" if t % 4 == 3 else "commit")
        if t % 4 != 3:
            committed += events
    p = Pipeline(kafka_settings(tmp_path, kafka_broker, topic, kafka_client=client)).start()
    try:
        wait_records(p, len(committed))
        assert ray.get(p.compute.snapshot.remote()) == without_attrs(expected(committed))
        # Past the commit markers, the lag reaches zero: positions step over offsets no consumer sees.
        deadline = time.monotonic() + 30
        while any(p.status().get("lag", {}).get(f"{topic}:{i}", 1) for i in range(PARTITIONS)):
            assert time.monotonic() < deadline, p.status().get("lag")
            time.sleep(0.2)
        # A transaction left open holds its records back...
        pending = transaction(40, None)
        time.sleep(3.0)
        assert p.store.get().result.records == len(committed)
        # ...until it commits: then they appear.
        producer.commit_transaction(30)
        committed += pending
        wait_records(p, len(committed))
        # An open transaction that aborts never appears; later committed records do.
        transaction(40, None)
        time.sleep(1.0)
        producer.abort_transaction(30)
        committed += transaction(30, "commit")
        view = wait_records(p, len(committed))
        time.sleep(1.0)
        assert p.store.get().result.records == view.result.records == len(committed)
        assert ray.get(p.compute.snapshot.remote()) == without_attrs(expected(committed))
    finally:
        p.stop()
