"""A source that changes under the service, with a real broker: partitions added while it runs are
picked up; a topic deleted and re-created, or a log that now ends below the history's offsets, stops
the service with the operator action instead of resuming silently at the old offsets."""

from __future__ import annotations

import json
import logging
import time

import ray
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic

from pulsegraph.identity import FILE
from pulsegraph.topology import Pipeline
from tests.graphref import reference, without_attrs
from tests.ingest.test_kafka import consume_all, end_vector, kafka_settings


def send(broker, topic: str, n: int, partition: int, tag: str) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    for i in range(n):
        producer.send(topic, value=json.dumps({"user": f"{tag}{i % 40}", "mentions": [f"{tag}{i % 7}"]}).encode(), partition=partition)
    producer.flush()
    producer.close()


def create(broker, topic: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(topic, partitions, 1)])
    admin.close()


def recreate(broker, topic: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.delete_topics([topic])
    deadline = time.monotonic() + 30
    while topic in admin.list_topics() and time.monotonic() < deadline:
        time.sleep(0.2)
    while time.monotonic() < deadline:
        try:
            admin.create_topics([NewTopic(topic, partitions, 1)])
            break
        except Exception:  # noqa: BLE001 - the deletion is still being finished by the broker
            time.sleep(0.5)
    admin.close()


def refused(settings) -> str:
    """Start on ``settings`` and return why the launch stopped (with Kafka the launch runs once the broker
    answers, on its own thread: the pipeline gives up there, it does not raise)."""
    p = Pipeline(settings).start()
    try:
        assert p.fatal.wait(60), p.status()
        return str(p.fatal_error)
    finally:
        p.stop()


def test_partitions_added_while_running_are_picked_up_with_their_entries_in_the_vector(ray_cluster, kafka_broker, tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="pulsegraph.topology")
    topic = kafka_broker.topic()
    create(kafka_broker, topic, 1)
    send(kafka_broker, topic, 500, 0, "a")
    p = Pipeline(kafka_settings(tmp_path, kafka_broker, topic, checkpoint_every=2)).start()
    try:
        p.wait_for_epoch(lambda v: v.result.vector.get(f"{topic}:0") == 500, timeout=90)
        admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
        admin.create_partitions({topic: NewPartitions(total_count=3)})
        admin.close()
        send(kafka_broker, topic, 300, 1, "b")
        send(kafka_broker, topic, 200, 2, "c")
        send(kafka_broker, topic, 100, 0, "a")
        records = consume_all(kafka_broker.bootstrap, topic)
        want = end_vector(records)
        assert want == {f"{topic}:0": 600, f"{topic}:1": 300, f"{topic}:2": 200}
        view = p.wait_for_epoch(lambda v: v.result.vector == want, timeout=120)
        assert p.recoveries == 1, p.status()
        assert any("grew from 1 to 3 partitions" in r.getMessage() for r in caplog.records)
        ray.get(p.coordinator.flush.remote())
        assert ray.get(p.compute.snapshot.remote()) == without_attrs(reference(records, view.result.vector, "tweets"))
    finally:
        p.stop()


def test_a_topic_re_created_under_its_name_stops_the_service_and_its_restart(ray_cluster, kafka_broker, tmp_path):
    topic = kafka_broker.topic()
    create(kafka_broker, topic, 1)
    send(kafka_broker, topic, 400, 0, "a")
    settings = kafka_settings(tmp_path, kafka_broker, topic)
    p = Pipeline(settings).start()
    try:
        p.wait_for_epoch(lambda v: v.result.vector.get(f"{topic}:0") == 400, timeout=90)
        recreate(kafka_broker, topic, 1)
        send(kafka_broker, topic, 900, 0, "new")  # offsets 0..899 again: 0..399 would be skipped unseen
        assert p.fatal.wait(90), p.status()
        assert "re-created" in p.fatal_error and "Operator action" in p.fatal_error, p.fatal_error
        assert p.status()["status"] == "failed"
    finally:
        p.stop()
    assert "topic was deleted and re-created" in refused(settings)


def test_a_log_that_ends_below_the_history_is_refused_at_start(ray_cluster, kafka_broker, tmp_path):
    """What an unclean leader election leaves: the partition ends below offsets the history applied.
    (One broker cannot elect uncleanly; a re-created, shorter topic and a folder without its identity file,
    as an older version wrote it, leave the same offsets behind.)"""
    topic = kafka_broker.topic()
    create(kafka_broker, topic, 1)
    send(kafka_broker, topic, 600, 0, "a")
    settings = kafka_settings(tmp_path, kafka_broker, topic)
    p = Pipeline(settings).start()
    try:
        p.wait_for_epoch(lambda v: v.result.vector.get(f"{topic}:0") == 600, timeout=90)
    finally:
        p.stop()
    recreate(kafka_broker, topic, 1)
    send(kafka_broker, topic, 250, 0, "new")
    (tmp_path / "data" / FILE).unlink()
    assert f"{topic}:0 ends at offset 250, below offset 600" in refused(settings)
