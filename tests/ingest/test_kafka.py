"""Ingest from a real Kafka broker (tools/kafka.sh), through real Ray actors, to the reference graph.

Each test gets its own uuid topic. The reference is built from the records
read back from the topic itself, so it is exactly what was produced. The key
tests run with both Kafka clients (``--kafka-client``): kafka-python and
confluent-kafka (librdkafka).
"""

from __future__ import annotations

import argparse
import json
import random
import time

import networkx as nx
import numpy as np
import pytest
import ray
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from pulsegraph.ingest.sources import SourceSpec, open_partitions
from pulsegraph.produce import produce
from pulsegraph.settings import Settings
from pulsegraph.topology import Pipeline
from tests.graphref import live_digraph, reference, without_attrs


def consume_all(bootstrap: str, topic: str, with_headers: bool = False) -> dict[str, list]:
    """Every record of ``topic``, per ``topic:partition``, as (offset, value) (and headers)."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    parts = sorted(c.partitions_for_topic(topic))
    tps = [TopicPartition(topic, p) for p in parts]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    ends = c.end_offsets(tps)
    out: dict[str, list] = {f"{topic}:{p}": [] for p in parts}
    deadline = time.monotonic() + 60
    while any(c.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
        for tp, recs in c.poll(timeout_ms=500).items():
            for r in recs:
                item = (r.offset, r.value, dict(r.headers)) if with_headers else (r.offset, r.value)
                out[f"{topic}:{tp.partition}"].append(item)
    c.close()
    return out


def produce_args(broker, topic: str, **kw) -> argparse.Namespace:
    base = dict(
        bootstrap=broker.bootstrap, topic=topic, source="synthetic", path=None, rate=0, limit=1000, partitions=4,
        events_per_message=1, seed=7, users=5000, hashtags=300, quiet=True,
    )
    base.update(kw)
    return argparse.Namespace(**base)


def end_vector(records: dict[str, list]) -> dict[str, int]:
    return {p: (recs[-1][0] + 1 if recs else 0) for p, recs in records.items()}


def kafka_settings(tmp_path, broker, topic: str, **kw) -> Settings:
    base = dict(
        source="kafka", bootstrap=broker.bootstrap, topic=topic, transform="tweets", ingest_actors=2, shards=3,
        epoch_interval="200ms", data_dir=tmp_path / "data", batch_size=5000,
    )
    base.update(kw)
    return Settings(**base)


CLIENTS = ["kafka-python", "confluent"]


def open_kafka(broker, topic: str, client: str, starts: dict[str, int], partitions: int = 2, group: str = "") -> list:
    spec = SourceSpec(kind="kafka", partitions=partitions, bootstrap=broker.bootstrap, topic=topic,
                      group=group or f"g-{topic}", kafka_client=client)
    return open_partitions(spec, spec.partition_names(), starts)


def read_until(parts, ends: dict[str, int], timeout: float = 60) -> dict[str, list]:
    """Everything the partitions hand out until each reaches ``ends[name]``, in batches of at most 300."""
    got: dict[str, list] = {p.name: [] for p in parts}
    deadline = time.monotonic() + timeout
    while any(p.position() < ends[p.name] for p in parts) and time.monotonic() < deadline:
        for p in parts:
            got[p.name].extend((r.offset, r.value) for r in p.next_batch(300))
    assert all(p.position() == ends[p.name] for p in parts), {p.name: p.position() for p in parts}
    return got


@pytest.mark.parametrize("client", CLIENTS)
def test_partitions_resume_at_their_start_offsets_measure_lag_and_commit(kafka_broker, client):
    topic = kafka_broker.topic()
    produce(produce_args(kafka_broker, topic, limit=2000, partitions=2))
    records = consume_all(kafka_broker.bootstrap, topic)
    ends = end_vector(records)
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    admin.delete_records({TopicPartition(topic, 1): 40})  # as retention would: offsets 0..39 of partition 1 are gone
    admin.close()
    starts = {f"{topic}:0": 17, f"{topic}:1": 5}
    parts = open_kafka(kafka_broker, topic, client, starts, group=f"g-{topic}")
    try:
        assert parts[1].next_batch(0) == []  # connects: a start below the log start moves up to it (the loss is logged)
        client_ = parts[0].client
        assert [p.position() for p in parts] == [17, 40]
        client_.probe()
        assert client_.connected and client_.error is None
        assert client_.lag == {0: ends[f"{topic}:0"] - 17, 1: ends[f"{topic}:1"] - 40}
        got = read_until(parts, ends)
        assert got == {f"{topic}:0": records[f"{topic}:0"][17:], f"{topic}:1": records[f"{topic}:1"][40:]}
        client_.probe()
        assert client_.lag == {0: 0, 1: 0}
        client_.commit({0: 100, 1: 200})
    finally:
        for p in parts:
            p.close()
    c = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap, group_id=f"g-{topic}", enable_auto_commit=False)
    assert [c.committed(TopicPartition(topic, p)) for p in (0, 1)] == [100, 200]
    c.close()
    # Reopened mid-log (a checkpoint's vector), each partition hands out exactly from there.
    mid = {f"{topic}:0": 500, f"{topic}:1": 777}
    parts = open_kafka(kafka_broker, topic, client, mid)
    try:
        got = read_until(parts, ends)
        assert got == {name: records[name][o:] for name, o in mid.items()}
    finally:
        for p in parts:
            p.close()


@pytest.mark.parametrize("client", CLIENTS)
def test_a_busy_partition_beside_an_idle_one_queues_a_bounded_number_of_records(kafka_broker, client, monkeypatch):
    """Each round takes a little from the busy partition and asks the idle one, whose empty queue makes the
    client fetch: without a bound the busy partition's queue grows by a fetch every round (400k records
    after 200 rounds, measured). With it nothing is fetched while a queue is full, and the busy
    partition still hands out every record once, in order."""
    import pulsegraph.ingest.sources.kafka as kafka_source

    monkeypatch.setattr(kafka_source, "MAX_QUEUED_RECORDS", 1500)
    topic = kafka_broker.topic()
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    admin.create_topics([NewTopic(topic, 2, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=20)
    for i in range(12_000):
        producer.send(topic, value=b"%d" % i, partition=0)
    producer.flush()
    producer.close()
    busy, idle = open_kafka(kafka_broker, topic, client, {})
    got, deepest = [], 0
    try:
        deadline = time.monotonic() + 90
        while busy.position() < 12_000 and time.monotonic() < deadline:
            assert idle.next_batch(100) == []
            got.extend(r.offset for r in busy.next_batch(100))
            deepest = max(deepest, len(busy.client.queues[0]))
    finally:
        busy.close()
    assert got == list(range(12_000))
    # Full at 1,500; one fill past it brings at most max(100, 500) * 2 partitions more.
    assert deepest <= 1500 + 1000, deepest


@pytest.mark.parametrize("client", CLIENTS)
def test_records_deleted_by_retention_mid_stream_are_counted_lost_never_a_jump_to_the_end(kafka_broker, client):
    """Retention deletes records the client has not fetched yet (it is behind: its prefetch is bounded):
    the client moves to the log start, counts what it lost, and hands out everything after it; it
    never jumps to the log end as auto_offset_reset=latest would."""
    topic = kafka_broker.topic()
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=50, batch_size=1 << 20)
    pad = b"x" * 1200
    for i in range(25_000):  # 30 MB: more than either client prefetches (librdkafka's queue is 16 MB here)
        producer.send(topic, value=b"%d " % i + pad, partition=0)
    producer.flush()
    [part] = open_kafka(kafka_broker, topic, client, {}, partitions=1)
    try:
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 100 and time.monotonic() < deadline:
            got.extend(r.offset for r in part.next_batch(100))
        admin.delete_records({TopicPartition(topic, 0): 22_000})
        for i in range(25_000, 25_500):
            producer.send(topic, value=b"%d " % i + pad, partition=0)
        producer.flush()
        deadline = time.monotonic() + 60
        while part.position() < 25_500 and time.monotonic() < deadline:
            got.extend(r.offset for r in part.next_batch(500))
    finally:
        part.close()
        producer.close()
        admin.close()
    assert part.position() == 25_500
    jump = next(i for i in range(1, len(got)) if got[i] != got[i - 1] + 1)
    assert got[:jump] == list(range(jump)) and got[jump:] == list(range(22_000, 25_500))
    assert part.client.retention_lost == {0: 22_000 - jump}
    assert 100 <= jump < 22_000


def test_a_broker_outage_disconnects_both_clients_and_they_resume_without_loss(kafka_broker):
    """One outage for both clients side by side (a broker restart is the slow part of this test)."""
    topic = kafka_broker.topic()
    produce(produce_args(kafka_broker, topic, limit=600, partitions=2, seed=3))
    opened = {c: open_kafka(kafka_broker, topic, c, {}) for c in CLIENTS}
    down = False
    try:
        ends = end_vector(consume_all(kafka_broker.bootstrap, topic))
        got = {c: read_until(parts, ends) for c, parts in opened.items()}
        kafka_broker.stop()
        down = True
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and any(ps[0].client.connected for ps in opened.values()):
            for parts in opened.values():
                for p in parts:
                    assert p.next_batch(300) == []
            time.sleep(0.05)
        for c, parts in opened.items():
            assert not parts[0].client.connected and parts[0].client.error, c
        kafka_broker.start()
        down = False
        produce(produce_args(kafka_broker, topic, limit=600, partitions=2, seed=4))
        records = consume_all(kafka_broker.bootstrap, topic)
        ends = end_vector(records)
        for c, parts in opened.items():
            for name, recs in read_until(parts, ends, timeout=90).items():
                got[c][name].extend(recs)
            assert got[c] == records, c
            assert parts[0].client.connected and parts[0].client.error is None, c
    finally:
        if down:  # the other tests share the broker
            kafka_broker.start()
        for parts in opened.values():
            for p in parts:
                p.close()


@pytest.fixture(scope="module")
def tweets_100k(kafka_broker):
    """100k tweets on one topic of 4 partitions, read back, with their reference graph and PageRank: made
    once for both clients (producing and checking them costs as much as the pipeline's run)."""
    topic = kafka_broker.topic()
    stats = produce(produce_args(kafka_broker, topic, limit=100_000))
    assert stats == {**stats, "sent": 100_000, "errors": 0}
    records = consume_all(kafka_broker.bootstrap, topic)
    assert sum(map(len, records.values())) == 100_000 and all(records.values())
    want_vector = end_vector(records)
    want = reference(records, want_vector, "tweets")
    nxr = nx.pagerank(live_digraph(want, ("mentions",)), alpha=0.85, tol=1e-13, max_iter=10_000)
    return topic, want_vector, want, nxr


@pytest.mark.parametrize("client", CLIENTS)
def test_100k_tweets_from_4_partitions_end_in_the_reference_graph(ray_cluster, kafka_broker, tmp_path, client, tweets_100k):
    topic, want_vector, want, nxr = tweets_100k
    p = Pipeline(kafka_settings(tmp_path, kafka_broker, topic, pagerank_tol=1e-12, kafka_client=client)).start()
    try:
        view = p.wait_for_epoch(lambda v: v.result.vector == want_vector, timeout=240)
        assert ray.get(p.compute.snapshot.remote()) == without_attrs(want)
        assert view.result.records == 100_000
        ours = view.result.scores["pagerank"]
        assert np.abs(ours - np.array([nxr[n] for n in p.store.names[: view.result.vertices]])).sum() < 1e-7
    finally:
        p.stop()


def test_packed_messages_are_one_transaction_per_event(ray_cluster, kafka_broker, tmp_path):
    topic = kafka_broker.topic()
    produce(produce_args(kafka_broker, topic, limit=12_000, events_per_message=25, partitions=2))
    records = consume_all(kafka_broker.bootstrap, topic)
    assert sum(map(len, records.values())) < 12_000 / 10  # packed
    want_vector = end_vector(records)
    p = Pipeline(kafka_settings(tmp_path, kafka_broker, topic, ingest_actors=1)).start()
    try:
        view = p.wait_for_epoch(lambda v: v.result.vector == want_vector, timeout=120)
        assert view.result.records == 12_000
        assert ray.get(p.compute.snapshot.remote()) == without_attrs(reference(records, want_vector, "tweets"))
    finally:
        p.stop()


def test_a_pretty_printed_event_is_one_event_and_packed_messages_stay_packed(ray_cluster, kafka_broker, tmp_path):
    topic = kafka_broker.topic()
    rng = random.Random(5)

    def tweet(i: int) -> dict:
        return {"user": f"u{rng.randrange(30)}", "mentions": [f"u{rng.randrange(30)}"], "hashtags": ["t1"], "ts": float(i)}

    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    values = [json.dumps(tweet(i), indent=2).encode() for i in range(50)]  # 50 events over ~10 lines each
    values += [b"\n".join(json.dumps(tweet(100 + 3 * i + k)).encode() for k in range(3)) for i in range(20)]  # packed
    for v in values:
        producer.send(topic, value=v, partition=0)
    producer.flush()
    producer.close()
    records = consume_all(kafka_broker.bootstrap, topic)
    want_vector = end_vector(records)
    p = Pipeline(kafka_settings(tmp_path, kafka_broker, topic, ingest_actors=1)).start()
    try:
        view = p.wait_for_epoch(lambda v: v.result.vector == want_vector, timeout=120)
        assert view.result.records == 50 + 60
        time.sleep(1.5)  # the status behind /health is refreshed once a second
        assert p.status()["dead_letters"] == 0
        assert ray.get(p.compute.snapshot.remote()) == without_attrs(reference(records, want_vector, "tweets"))
    finally:
        p.stop()


def test_malformed_records_go_to_the_dlq_topic_once_even_after_a_relaunch(ray_cluster, kafka_broker, tmp_path):
    """Every bad record is in the DLQ topic exactly once, though a relaunch with no checkpoint replays the
    whole topic; one too large for the DLQ topic is cut, with its size in a header."""
    from pulsegraph.ingest.deadletter import MAX_KAFKA_VALUE_BYTES
    from tests.pulsegraph.test_recovery import relaunched

    topic = kafka_broker.topic()
    produce(produce_args(kafka_broker, topic, limit=5000, partitions=2))
    rng = random.Random(5)
    huge = b'{"user": "' + b"x" * 950_000 + b'"}'  # fits the source topic (1 MB), not the DLQ's cut
    bad = [
        b"{not json", b'{"user": 7}', b'{"mentions": ["a"]}', b'{"user": "' + b"x" * 300 + b'"}',
        b'{"user": "a", "hashtags": [1]}', b"[]", b'{"user": "a", "ts": "soon"}',
    ]
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, max_request_size=2_000_000)
    sent_bad = 1
    producer.send(topic, value=huge, partition=1)
    for i in range(1000):  # 5% of these are malformed, spread over both partitions
        if rng.random() < 0.05:
            producer.send(topic, value=rng.choice(bad), partition=i % 2)
            sent_bad += 1
        else:
            producer.send(topic, value=json.dumps({"user": f"late{i % 50}", "mentions": [f"late{i % 7}"]}).encode(), partition=i % 2)
    producer.flush()
    producer.close()
    records = consume_all(kafka_broker.bootstrap, topic)
    want_vector = end_vector(records)
    p = Pipeline(kafka_settings(tmp_path, kafka_broker, topic, checkpoint_every=1000)).start()
    try:
        view = p.wait_for_epoch(lambda v: v.result.vector == want_vector, timeout=120)
        assert ray.get(p.compute.snapshot.remote()) == without_attrs(reference(records, want_vector, "tweets"))
        assert view.result.records == 6001 - sent_bad
        ray.kill(p.ingest[0], no_restart=True)  # relaunched from no checkpoint: every record is read again
        p.wait_for_epoch(lambda v: relaunched(p, 1) and v.result.vector == want_vector, timeout=120)
    finally:
        p.stop()
    letters = consume_all(kafka_broker.bootstrap, f"{topic}.dlq", with_headers=True)
    found: dict = {}
    for recs in letters.values():
        for _, value, headers in recs:
            key = (headers["partition"].decode(), int(headers["offset"]))
            assert key not in found, f"{key} is in the DLQ twice"
            found[key] = (value, headers)
    expected = {(p, o): v for p, recs in records.items() for o, v in recs if v in bad or v == huge}
    assert set(found) == set(expected)
    for k, v in expected.items():
        value, headers = found[k]
        assert headers["reason"]
        if v == huge:
            assert value == huge[:MAX_KAFKA_VALUE_BYTES] and int(headers["original_size"]) == len(huge)
        else:
            assert value == v and "original_size" not in headers
