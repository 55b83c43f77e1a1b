"""A window over a real Kafka topic: records without a ts take the broker's timestamp.

Tweets are produced with explicit record timestamps (Kafka's CreateTime, stored
with each record) and, for some, a ``ts`` of their own that wins over it. The
graph the shards hold at the topic's end is the window of the definition, for
both clients, and PageRank agrees with networkx on it.
"""

from __future__ import annotations

import json
import random

import networkx as nx
import pytest
import ray
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from tests.graphref import live_digraph, merge, window_reference
from tests.ingest.test_kafka import CLIENTS, kafka_settings

WINDOW = 30.0


def records_with_times(bootstrap: str, topic: str) -> tuple[dict, dict]:
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic))]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    ends = c.end_offsets(tps)
    records: dict = {f"{topic}:{tp.partition}": [] for tp in tps}
    times: dict = {}
    while any(c.position(tp) < ends[tp] for tp in tps):
        for tp, recs in c.poll(timeout_ms=500).items():
            for r in recs:
                records[f"{topic}:{tp.partition}"].append((r.offset, r.value))
                times[(f"{topic}:{tp.partition}", r.offset)] = r.timestamp / 1000.0
    c.close()
    return records, times


@pytest.mark.parametrize("client", CLIENTS)
def test_the_graph_at_the_topic_end_is_the_window_by_broker_time_and_pagerank_agrees(ray_cluster, kafka_broker, tmp_path, client):
    from pulsegraph.topology import Pipeline

    topic = kafka_broker.topic()
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    # The records carry broker times of 2023: with the broker's default retention (7 days by record time)
    # its first retention check, 30 s after it starts, would delete them before the pipeline reads them.
    admin.create_topics([NewTopic(topic, 2, 1, topic_configs={"retention.ms": "-1"})])
    admin.close()
    rng = random.Random(9)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=20)
    base_ms = 1_700_000_000_000
    for i in range(800):
        tweet = {"user": f"u{rng.randrange(50)}", "mentions": [f"u{rng.randrange(50)}"], "hashtags": [f"t{rng.randrange(8)}"]}
        if rng.random() < 0.2:
            tweet["ts"] = (base_ms + i * 250) / 1000.0 - rng.uniform(0, 20)  # its own time wins over the broker's
        producer.send(topic, value=json.dumps(tweet).encode(), partition=i % 2, timestamp_ms=base_ms + i * 250 + rng.randrange(-3000, 3000))
    producer.flush()
    producer.close()
    records, times = records_with_times(kafka_broker.bootstrap, topic)
    want_vector = {p: len(recs) for p, recs in records.items()}
    p = Pipeline(kafka_settings(tmp_path, kafka_broker, topic, kafka_client=client, window=f"{WINDOW:g}s", pagerank_tol=1e-10)).start()
    try:
        view = p.wait_for_epoch(lambda v: v.result.vector == want_vector, timeout=120)
        want, w = window_reference(records, want_vector, WINDOW, "tweets", times)
        assert merge(ray.get([s.snapshot.remote() for s in p.shards])) == want
        assert view.result.watermark == w
        g = live_digraph(want, ("mentions",))
        exact = nx.pagerank(g, alpha=0.85, tol=1e-13, max_iter=10_000)
        # Ranked over the vertices in the window only: the others score exactly 0.
        got = dict(zip(p.store.names, view.result.scores["pagerank"].tolist()))
        assert sum(abs(got[v] - s) for v, s in exact.items()) < 1e-8
        assert all(score == 0.0 for v, score in got.items() if v not in exact)
        assert view.result.vertices == len(want["vertices"])
    finally:
        p.stop()
