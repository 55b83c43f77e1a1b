"""Results to Kafka (--results-topic): the record, its schema, and exactly once against a real broker.

The record tests build epochs in a real ResultStore; the broker tests run the real
pipeline (synthetic source, real Ray actors) and the whole service as a user runs
it, SIGKILLed mid-stream (``Service`` of the fault tests), and read the topic back
with a ``read_committed`` confluent-kafka consumer.
"""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path

import jsonschema
import networkx as nx
import numpy as np
import orjson
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from pulsegraph.api.ranking import certified_ranks
from pulsegraph.api.store import ResultStore
from pulsegraph.compute.ids import NameChanges
from pulsegraph.compute.results import EpochResult
from pulsegraph.produce import produce
from pulsegraph.results_topic import (
    compare_recut,
    encode,
    epoch_record,
    read_last_committed,
    score_decimals,
)
from pulsegraph.settings import Settings
from pulsegraph.topology import Pipeline
from tests.graphref import live_digraph, reference
from tests.ingest.test_kafka import consume_all, produce_args
from tests.ingest.test_kafka_faults import Service

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "results.schema.json").read_text())


def validate(record: dict) -> None:
    jsonschema.Draft202012Validator(SCHEMA).validate(record)


def result(epoch: int, scores: dict[str, list[float]], bounds: dict[str, float], skipped=()) -> EpochResult:
    n = len(next(iter(scores.values())))
    return EpochResult(
        epoch=epoch, vector={"p:1": epoch * 10, "p:0": epoch * 7}, records=epoch * 17, vertices=n, edges=3 * n,
        committed_at=1.7e9 + epoch, commit_ms=1.0, timeliness_ms={"p50": 1.0, "p99": 2.0, "max": 3.0},
        scores={a: np.asarray(s, dtype=np.float64) for a, s in scores.items()}, error_bounds=dict(bounds), skipped=list(skipped),
    )


def read_results(bootstrap: str, topic: str, timeout: float = 60) -> list[tuple[int, int, bytes]]:
    """Every committed record of ``topic`` as (offset, key as int, value), with a read_committed consumer."""
    c = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{topic}", "isolation.level": "read_committed",
        "enable.auto.commit": False, "enable.partition.eof": True,
    })
    out = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    break
                raise AssertionError(msg.error())
            out.append((msg.offset(), int(msg.key()), msg.value()))
    finally:
        c.close()
    return out


# -- the record --------------------------------------------------------------------------------------
def test_certified_ranks_count_the_leading_gaps_wider_than_twice_the_bound():
    s = np.array([0.5, 0.3, 0.29999, 0.1])
    assert certified_ranks(s, 1e-3) == 2  # 0.3 and 0.29999 are within 2e-3: their order is not proven
    assert certified_ranks(s, 1e-7) == 4
    assert certified_ranks(s, None) == 0
    assert certified_ranks(np.zeros(0), 1e-7) == 0


def test_a_record_is_the_epoch_its_top_bounds_and_movers_and_valid_by_the_schema():
    store = ResultStore(retain=10)
    names = [f"v{i}" for i in range(6)]
    a = result(1, {"pagerank": [0.3, 0.2, 0.2, 0.1, 0.1, 0.1], "tunkrank": [5, 4, 3, 2, 1, 0]}, {"pagerank": 1e-7, "tunkrank": 1.5e-6})
    b = result(3, {"pagerank": [0.1, 0.2, 0.3, 0.1, 0.2, 0.1], "tunkrank": [0, 1, 2, 3, 4, 5]}, {"pagerank": 1e-7, "tunkrank": 1.5e-6}, [2])
    store.add([a], NameChanges(0, names))
    store.add([b], None)
    view = store.get(3)
    rec = epoch_record(view, store.names, k=4)
    validate(rec)
    assert rec["epoch"] == 3 and rec["watermark"] is None and rec["skipped"] == [2]
    assert list(rec["vector"]) == ["p:0", "p:1"]  # sorted: the bytes do not depend on dict order
    assert [i["vertex"] for i in rec["top"]["pagerank"]] == ["v2", "v1", "v4", "v0"]
    assert rec["bounds"]["pagerank"] == {"error": 1e-7, "norm": "l1", "certified": False, "certified_ranks": 2}
    assert rec["bounds"]["tunkrank"]["certified"] is True
    assert rec["movers"]["tunkrank"]["from"] == 1
    assert rec["movers"]["tunkrank"]["rising"][0] == {"vertex": "v5", "from_rank": 6, "to_rank": 1, "change": 5, "score": 5.0}
    assert encode(rec) == encode(epoch_record(view, store.names, k=4))
    assert epoch_record(store.get(1), store.names, 4)["movers"] == {"pagerank": None, "tunkrank": None}


def test_scores_are_written_to_the_digits_the_bound_leaves_and_a_recut_compares_within_it():
    assert score_decimals(1e-7) == 8 and score_decimals(5e-4) == 5 and score_decimals(None) is None
    store = ResultStore()
    store.add([result(1, {"pagerank": [0.123456789123, 0.876543210877]}, {"pagerank": 1e-7})], NameChanges(0, ["a", "b"]))
    rec = epoch_record(store.get(1), store.names, 2)
    assert [i["score"] for i in rec["top"]["pagerank"]] == [0.87654321, 0.12345679]
    again = ResultStore()
    again.add([result(1, {"pagerank": [0.12345674, 0.87654326]}, {"pagerank": 1e-7})], NameChanges(0, ["a", "b"]))
    got = compare_recut(encode(rec), encode(epoch_record(again.get(1), again.names, 2)))
    assert got == {"epoch": 1, "bytes_identical": False, "facts_identical": True, "scores_within_bound": True}


# -- settings ----------------------------------------------------------------------------------------
def test_a_results_topic_needs_a_cluster_and_the_kafka_source_lends_its_own(tmp_path):
    with pytest.raises(ValueError, match="--results-bootstrap"):
        Settings(results_topic="out", data_dir=tmp_path)
    with pytest.raises(ValueError, match="--results-topic"):
        Settings(results_bootstrap="127.0.0.1:9", data_dir=tmp_path)
    s = Settings(source="kafka", bootstrap="127.0.0.1:9", topic="in", results_topic="out", group="g", data_dir=tmp_path)
    assert s.results_brokers == "127.0.0.1:9"
    assert s.results_transactional_id == "pulsegraph-results.g.out"
    assert Settings(results_topic="out", results_bootstrap="h:1", data_dir=tmp_path).results_brokers == "h:1"


# -- a real broker -----------------------------------------------------------------------------------
def test_the_synthetic_stream_publishes_each_ranked_epoch_once_and_a_restart_resumes_after_the_last(ray_cluster, kafka_broker, tmp_path):
    out = kafka_broker.topic()

    def settings(limit: int) -> Settings:
        return Settings(
            source="synthetic", rate=4000, limit=limit, users=400, hashtags=40, epoch_interval="200ms",
            data_dir=tmp_path / "data", results_topic=out, results_bootstrap=kafka_broker.bootstrap, results_k=20,
            checkpoint_every=2,
        )

    p = Pipeline(settings(3000)).start()
    try:
        last = p.wait_for_epoch(lambda v: v.result.records >= 3000, timeout=120).result.epoch
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (p.status()["results"]["last_committed"] or 0) < last:
            time.sleep(0.2)
        health = p.status()["results"]
        assert health["last_committed"] == last and health["gaps"] == 0 and health["state"] == "publishing", health
        held = {e: p.store.get(e) for e in p.store.epoch_numbers()}
        names = list(p.store.names)
    finally:
        p.stop()
    got = read_results(kafka_broker.bootstrap, out)
    keys = [k for _, k, _ in got]
    assert keys == sorted(set(keys)) and keys[-1] == last
    for _, key, value in got:
        rec = orjson.loads(value)
        validate(rec)
        assert rec["epoch"] == key
        if key in held:  # what the API served for that epoch is what the topic holds
            assert value == encode(epoch_record(held[key], names, 20))
    assert read_last_committed(kafka_broker.bootstrap, out, "x")[0] == last

    # A second run on the same data folder continues the stream after the last committed epoch.
    p = Pipeline(settings(5000)).start()
    try:
        last2 = p.wait_for_epoch(lambda v: v.result.records >= 5000, timeout=120).result.epoch
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (p.status()["results"]["last_committed"] or 0) < last2:
            time.sleep(0.2)
        assert p.status()["results"]["recut"] is None or p.status()["results"]["recut"]["facts_identical"]
    finally:
        p.stop()
    keys2 = [k for _, k, _ in read_results(kafka_broker.bootstrap, out)]
    assert keys2[: len(keys)] == keys and keys2 == sorted(set(keys2)) and keys2[-1] == last2 > last


# One kill: each restart of the whole service (Ray included) takes 15-50 s on two cores, and the Kafka
# SIGKILL and chaos tests kill it three times more; one restart is what fencing and resuming need.
@pytest.mark.timeout(900)
def test_a_sigkill_during_a_paced_stream_leaves_each_epoch_once_in_order_and_the_last_top_20_is_the_reference(kafka_broker, tmp_path):
    topic, out = kafka_broker.topic(), kafka_broker.topic()
    produce(produce_args(kafka_broker, topic, limit=10, partitions=2, users=600, hashtags=60))
    producer = threading.Thread(
        target=produce,
        args=(produce_args(kafka_broker, topic, limit=8000, rate=2000, seed=8, partitions=2, users=600, hashtags=60),),
        daemon=True,
    )
    svc = Service(kafka_broker, topic, tmp_path / "data", tmp_path / "service.log")
    svc.args += ["--results-topic", out, "--results-k", "20", "--pagerank-tol", "1e-10"]
    rng = random.Random(5)
    recuts = []
    svc.start()
    producer.start()
    try:
        for _ in range(1):
            svc.wait_for(lambda e: True, timeout=120)
            time.sleep(rng.uniform(0.5, 2.5))
            svc.kill()
            svc.start()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                r = (svc.health() or {}).get("results") or {}
                if r.get("state") == "publishing":
                    break
                time.sleep(0.25)
            assert r.get("state") == "publishing", r
        producer.join(timeout=120)
        records = consume_all(kafka_broker.bootstrap, topic)
        want_vector = {p: (recs[-1][0] + 1 if recs else 0) for p, recs in records.items()}
        final = svc.wait_for(lambda e: e["vector"] == want_vector, timeout=180)
        # A restart that restored the final vector cuts one more epoch with it (the restored state carried
        # downstream): wait until the newest epoch, whichever number it has, is committed.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            h = (svc.health() or {}).get("results") or {}
            final = svc.latest() or final
            if h.get("last_committed") == final["epoch"]:
                break
            time.sleep(0.25)
        assert h.get("last_committed") == final["epoch"] and h.get("gaps") == 0, h
        recuts.append(h.get("recut"))
    finally:
        svc.stop()
    got = read_results(kafka_broker.bootstrap, out)
    keys = [k for _, k, _ in got]
    assert len(keys) == len(set(keys)), "no epoch twice"
    assert keys == sorted(keys), "epoch numbers strictly increasing"
    recs = [orjson.loads(v) for _, _, v in got]
    for a, b in zip(recs, recs[1:]):
        assert all(b["vector"].get(p, 0) >= o for p, o in a["vector"].items()), "vectors never go back"
    for r in recs:
        validate(r)
    for rc in recuts:
        assert rc is None or (rc["facts_identical"] and rc["scores_within_bound"]), rc
    last = recs[-1]
    assert last["vector"] == want_vector and last["records"] == 8010
    g = live_digraph(reference(records, want_vector, "tweets"), ("mentions",))
    exact = nx.pagerank(g, alpha=0.85, tol=1e-13, max_iter=10_000)
    want = sorted(exact, key=lambda v: (-exact[v], v))[:20]
    top = last["top"]["pagerank"]
    bound = last["bounds"]["pagerank"]["error"]
    assert bound == 1e-10
    assert all(abs(i["score"] - exact[i["vertex"]]) <= 2 * bound + 1e-11 for i in top)
    # The order is the reference's wherever the bound certifies it (exact ties are broken by id alike).
    m = last["bounds"]["pagerank"]["certified_ranks"]
    assert m >= 5
    assert [i["vertex"] for i in top][:m] == want[:m]
    assert {i["vertex"] for i in top} == set(want) or not last["bounds"]["pagerank"]["certified"]


def test_a_second_service_with_the_same_transactional_id_fences_the_first_and_each_epoch_is_on_the_topic_once(kafka_broker):
    """Two live services publishing as one (same --group and --results-topic): the one that connected last
    fences the other, which stops publishing and says why; the topic never holds an epoch twice."""
    from pulsegraph.results_topic import ResultPublisher

    out, tid = kafka_broker.topic(), f"pulsegraph-results.fence.{kafka_broker.topic()}"
    names = ["a", "b", "c", "d"]

    def store_with(epochs) -> ResultStore:
        store = ResultStore()
        store.add([result(e, {"pagerank": [0.4, 0.3, 0.2, 0.1]}, {"pagerank": 1e-7}) for e in epochs], NameChanges(0, names))
        return store

    def until(predicate, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not predicate():
            time.sleep(0.1)
        assert predicate(), what

    first_store = store_with([1, 2])
    first = ResultPublisher(first_store, kafka_broker.bootstrap, out, tid, k=4).start()
    second = None
    try:
        until(lambda: first.last_committed == 2, f"the first publishes epochs 1-2: {first.status()}")
        second = ResultPublisher(store_with([1, 2, 3]), kafka_broker.bootstrap, out, tid, k=4).start()
        until(lambda: second.last_committed == 3, f"the second resumes after 2: {second.status()}")
        first_store.add([result(4, {"pagerank": [0.4, 0.3, 0.2, 0.1]}, {"pagerank": 1e-7})], None)
        first.notify(first_store.get(4))
        until(lambda: first.state == "fenced", f"the first is fenced: {first.status()}")
        assert "Operator action" in (first.error or "")
    finally:
        first.stop()
        if second is not None:
            second.stop()
    assert [k for _, k, _ in read_results(kafka_broker.bootstrap, out)] == [1, 2, 3]


# -- certificates on the REST answers ----------------------------------------------------------------
def test_the_top_answer_and_the_epoch_object_carry_the_bound_and_whether_it_certifies_the_order():
    from fastapi.testclient import TestClient

    from pulsegraph.api.app import create_app

    store = ResultStore()
    store.add([result(1, {"pagerank": [0.4, 0.3, 0.2999999, 0.0000001]}, {"pagerank": 1e-7})], NameChanges(0, ["a", "b", "c", "d"]))
    client = TestClient(create_app(store))
    two = client.get("/v1/rank/top", params={"k": 2}).json()
    assert two["error_bound"] == 1e-7 and two["certified"] is True and two["certified_ranks"] == 2
    four = client.get("/v1/rank/top", params={"k": 4}).json()
    assert four["certified"] is False and four["certified_ranks"] == 2
    assert [i["vertex"] for i in four["items"]] == ["a", "b", "c", "d"]
    assert client.get("/v1/epochs/latest").json()["error_bounds"] == {"pagerank": 1e-7}
