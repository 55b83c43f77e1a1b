"""Every compression codec Kafka has, written by a producer outside Python, read by both clients.

kcat (librdkafka's command-line client, Debian's package, installed by ``make test-deps``) writes
batches in gzip, snappy, lz4 and zstd, in turn, to every partition of a real broker's topic; the
pipeline (real Ray actors) must end in the reference graph of exactly what was written, with each
client. The reference is built from the lines given to kcat (offsets are their order in a partition:
no transactions here), not from any Kafka client's reading of the topic.
"""

from __future__ import annotations

import json
import random
import subprocess
import time

import pytest
import ray
from kafka.admin import KafkaAdminClient, NewTopic

from pulsegraph.topology import Pipeline
from tests.graphref import reference, without_attrs
from tests.ingest.test_kafka import CLIENTS, kafka_settings, open_kafka

CODECS = ["gzip", "snappy", "lz4", "zstd"]


def kcat_write(bootstrap: str, topic: str, partition: int, codec: str, lines: list[bytes]) -> None:
    """One kcat run: ``lines`` to ``partition``, compressed with ``codec``, acknowledged by the broker."""
    out = subprocess.run(
        ["kcat", "-P", "-b", bootstrap, "-t", topic, "-p", str(partition), "-z", codec, "-X", "linger.ms=50", "-X", "acks=all"],
        input=b"\n".join(lines) + b"\n", capture_output=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr.decode()


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, partitions, 1)])
    admin.close()


def tweets(rng: random.Random, n: int, start: int) -> list[bytes]:
    return [
        json.dumps({"user": f"u{rng.randrange(300)}", "mentions": [f"u{rng.randrange(300)}" for _ in range(rng.randrange(1, 3))],
                    "hashtags": [f"t{rng.randrange(40)}"], "text": "x", "ts": float(start + i)}).encode()
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def every_codec(kafka_broker):
    """A 3-partition topic whose every partition holds batches in all four codecs, in turn, twice over."""
    topic, rng, ts = kafka_broker.topic(), random.Random(11), 0
    create_topic(kafka_broker.bootstrap, topic, 3)
    written: dict[str, list[tuple[int, bytes]]] = {f"{topic}:{p}": [] for p in range(3)}
    for _ in range(2):
        for codec in CODECS:
            for p in range(3):
                lines = tweets(rng, 700, ts)
                ts += len(lines)
                kcat_write(kafka_broker.bootstrap, topic, p, codec, lines)
                recs = written[f"{topic}:{p}"]
                recs.extend(enumerate(lines, start=len(recs)))
    vector = {p: len(recs) for p, recs in written.items()}
    return topic, vector, reference(written, vector, "tweets")


@pytest.mark.parametrize("client", CLIENTS)
def test_batches_in_every_codec_end_in_the_reference_graph_with_both_clients(ray_cluster, kafka_broker, tmp_path, client, every_codec):
    topic, vector, want = every_codec
    p = Pipeline(kafka_settings(tmp_path, kafka_broker, topic, kafka_client=client)).start()
    try:
        view = p.wait_for_epoch(lambda v: v.result.vector == vector, timeout=180)
        assert view.result.records == sum(vector.values()) == 3 * 2 * 4 * 700
        assert ray.get(p.compute.snapshot.remote()) == without_attrs(want)
        deadline = time.monotonic() + 30  # the status is a cache refreshed every second
        while p.status().get("ingest") not in ("running", "finished") and time.monotonic() < deadline:
            time.sleep(0.2)
        health = p.status()
        assert health["status"] == "ok" and health["ingest"] in ("running", "finished"), health
    finally:
        p.stop()


def test_a_codec_kafka_python_cannot_read_stops_that_partition_with_the_fix_never_unreachable(kafka_broker, monkeypatch):
    """Without the snappy library (a fake: the library is uninstalled for this process only, as an
    environment built without the service's dependencies would be), the partition whose records turn
    snappy stops at the first of them, and says so with what to install; the broker answers, so the
    client stays connected and the other partitions are read to their end."""
    import kafka.codec

    monkeypatch.setattr(kafka.codec, "snappy", None)
    topic = kafka_broker.topic()
    create_topic(kafka_broker.bootstrap, topic, 3)
    rng = random.Random(3)
    kcat_write(kafka_broker.bootstrap, topic, 0, "gzip", tweets(rng, 300, 0))
    kcat_write(kafka_broker.bootstrap, topic, 1, "gzip", tweets(rng, 100, 0))
    kcat_write(kafka_broker.bootstrap, topic, 1, "snappy", tweets(rng, 200, 0))
    kcat_write(kafka_broker.bootstrap, topic, 2, "zstd", tweets(rng, 300, 0))
    parts = open_kafka(kafka_broker, topic, "kafka-python", {}, partitions=3)
    got = {p.name: [] for p in parts}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
            parts[0].position() == 300 and parts[2].position() == 300 and parts[1].health().get("fault")
        ):
            for p in parts:
                got[p.name].extend(r.offset for r in p.next_batch(100))
        for _ in range(20):  # and it stays stopped, never retrying the record into an outage
            for p in parts:
                got[p.name].extend(r.offset for r in p.next_batch(100))
        health = parts[1].health()
    finally:
        for p in parts:
            p.close()
    assert got == {f"{topic}:0": list(range(300)), f"{topic}:1": list(range(100)), f"{topic}:2": list(range(300))}
    assert parts[1].position() == 100
    assert health["connected"] is True, health
    fault = health["fault"]
    assert fault == health["error"]
    assert f"{topic}:1 stopped at offset 100" in fault and "snappy" in fault, fault
    assert "Operator action: pip install python-snappy" in fault and "--kafka-client confluent" in fault, fault
    assert "unreachable" not in fault and "disconnected" not in fault
    assert parts[0].health() == {**parts[0].health(), "connected": True, "fault": None, "error": None}
