"""POST /v1/events with --source kafka: the accepted events land on the topic, one per message (real broker)."""

from __future__ import annotations

import orjson
from fastapi.testclient import TestClient
from kafka import KafkaConsumer
from kafka.admin import KafkaAdminClient, NewTopic

from pulsegraph.api.app import create_app
from pulsegraph.api.store import ResultStore
from pulsegraph.ingest.transforms import get_transform
from pulsegraph.service import kafka_sink

TOKEN = "kafka-sink-token-7c1e9a2b4d"


def test_posted_events_are_produced_to_the_topic(kafka_broker):
    topic = kafka_broker.topic()
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    admin.close()
    app = create_app(
        ResultStore(), events_sink=kafka_sink(kafka_broker.bootstrap, topic),
        event_transform=get_transform("edges"), api_token=TOKEN,
    )
    events = [{"op": "add_edge", "src": f"k{i}", "dst": "hub"} for i in range(5)] + [{"op": "explode"}]
    with TestClient(app) as client:
        r = client.post("/v1/events", content=orjson.dumps(events), headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 202 and (r.json()["accepted"], r.json()["rejected"]) == (5, 1)
    consumer = KafkaConsumer(topic, bootstrap_servers=kafka_broker.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=15_000, enable_auto_commit=False)
    got = []
    for message in consumer:
        got.append(orjson.loads(message.value))
        if len(got) == 5:
            break
    consumer.close()
    assert sorted(e["src"] for e in got) == [f"k{i}" for i in range(5)]
