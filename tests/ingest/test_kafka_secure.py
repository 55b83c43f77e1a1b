"""Kafka as teams run it: a real broker with SASL_SSL (PLAIN, SCRAM-SHA-512) and mutual TLS, ACLs on.

tests/kafka_secure.py makes the certificates with openssl and starts the project's broker with the
secured listeners (tools/kafka.sh start-secure); the SCRAM user is created when its storage is
formatted, as an operator would (kafka-storage --add-scram). Topics and ACLs are made over its
PLAINTEXT listener, the operator's. The service connects with a properties file in librdkafka's names
(--kafka-config), the same for both clients.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import time

import httpx
import pytest
import ray
from fastapi.testclient import TestClient
from kafka import KafkaProducer
from kafka.admin import ACL, ACLOperation, ACLPermissionType, KafkaAdminClient, NewTopic, ResourcePattern, ResourceType

from pulsegraph.ingest.sources import SourceSpec, open_partitions
from pulsegraph.ingest.sources.kafka_config import load_kafka_config
from pulsegraph.ingest.sources.kafka_faults import _sasl_verdict, diagnose
from pulsegraph.produce import produce
from pulsegraph.service import build_app
from pulsegraph.settings import Settings
from pulsegraph.topology import Pipeline
from tests.graphref import reference, without_attrs
from tests.ingest.test_kafka import CLIENTS, consume_all, end_vector
from tests.pulsegraph.test_cli import EXE, free_port
from tests.pulsegraph.test_exposure import descendants

# A secure broker of its own (not the kafka_broker fixture, which marks the others): not the quick lane.
pytestmark = pytest.mark.integration

BAD = [b"{not json", b'{"user": 7}', b"\xff\xfe"]


def topic_of(broker, partitions: int = 2) -> str:
    topic = f"s-{os.urandom(5).hex()}"
    admin = KafkaAdminClient(bootstrap_servers=broker.plaintext)
    admin.create_topics([NewTopic(topic, partitions, 1)])
    admin.close()
    return topic


def listener(broker, kind: str) -> str:
    return broker.ssl if kind == "mtls" else broker.sasl_ssl


def settings(tmp_path, broker, topic: str, kind: str, props, **kw) -> Settings:
    base = dict(source="kafka", bootstrap=listener(broker, kind), topic=topic, transform="tweets", kafka_config=props,
                ingest_actors=1, shards=2, epoch_interval="200ms", data_dir=tmp_path / "data", batch_size=2000)
    return Settings(**{**base, **kw})


def health_of(pipeline: Pipeline, settings_: Settings) -> dict:
    with TestClient(build_app(settings_, pipeline)) as client:
        return client.get("/health").json()


@pytest.mark.parametrize("client, kind", [(c, k) for k in ("scram", "mtls") for c in CLIENTS])
def test_a_stream_over_sasl_ssl_and_mutual_tls_ends_in_the_reference_graph(ray_cluster, secure_kafka, tmp_path, client, kind):
    """Every client of the service over the secured listener: pulsegraph produce writes the events, the source
    reads them with ``client``, the dead-letter producer writes the bad ones to TOPIC.dlq, and the results
    producer commits the ranked epochs to a results topic, all with one properties file."""
    topic = topic_of(secure_kafka)
    props = secure_kafka.properties(kind, f"{kind}-{client}")
    stats = produce(argparse.Namespace(
        bootstrap=listener(secure_kafka, kind), topic=topic, kafka_config=str(props), source="synthetic", path=None, rate=0,
        limit=3000, partitions=2, events_per_message=1, seed=5, users=800, hashtags=60, quiet=True,
    ))
    assert stats["sent"] == 3000 and stats["errors"] == 0
    plain = KafkaProducer(bootstrap_servers=secure_kafka.plaintext)
    for bad in BAD:
        plain.send(topic, value=bad, partition=1)
    plain.close()
    records = consume_all(secure_kafka.plaintext, topic)
    vector = end_vector(records)
    s = settings(tmp_path, secure_kafka, topic, kind, props, kafka_client=client, results_topic=f"{topic}.results")
    p = Pipeline(s).start()
    try:
        view = p.wait_for_epoch(lambda v: v.result.vector == vector, timeout=180)
        assert ray.get(p.compute.snapshot.remote()) == without_attrs(reference(records, vector, "tweets"))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
            p.status().get("dead_letters") == len(BAD) and (p.status()["results"]["last_committed"] or 0) >= view.result.epoch
        ):
            time.sleep(0.3)
        health = health_of(p, s)
    finally:
        p.stop()
    assert health["status"] == "ok" and health["ingest"] in ("running", "finished"), health
    assert health["dead_letters"] == len(BAD) and health["results"]["state"] == "publishing", health
    letters = consume_all(secure_kafka.plaintext, f"{topic}.dlq")
    assert sorted(v for recs in letters.values() for _, v in recs) == sorted(BAD)
    assert sum(map(len, consume_all(secure_kafka.plaintext, f"{topic}.results").values())) >= 1


def _without(path, *names: str):
    path.write_text("".join(line + "\n" for line in path.read_text().splitlines() if line.split("=", 1)[0] not in names))
    return path


def _fault_cases(broker) -> dict:
    other_ca = str(broker.pki / "other-ca.pem")
    return {
        "wrong password": (broker.sasl_ssl, broker.properties("scram", "wrong-pw", **{"sasl.password": "Wr0ng-" + "p4ssw0rd-9"}),
                           "refused the credentials"),
        "wrong PLAIN key": (broker.sasl_ssl, broker.properties("plain", "wrong-key", **{"sasl.password": "Wr0ng-" + "p4ssw0rd-9"}),
                            "refused the credentials"),
        "mechanism the listener lacks": (broker.sasl_ssl, broker.properties("scram", "sha256", **{"sasl.mechanism": "SCRAM-SHA-256"}),
                                         "its listener does not enable sasl.mechanism SCRAM-SHA-256"),
        "untrusted CA": (broker.sasl_ssl, broker.properties("scram", "untrusted", **{"ssl.ca.location": other_ca}),
                         "not signed by a CA in ssl.ca.location"),
        "host name": (broker.sasl_ssl.replace("localhost", "127.0.0.1"), broker.properties("scram", "host"),
                      "its certificate is not for the name 127.0.0.1"),
        "no client certificate": (broker.ssl, _without(broker.properties("mtls", "no-cert"), "ssl.certificate.location",
                                  "ssl.key.location", "ssl.key.password"), "refused this client's certificate"),
    }


# What this guards is that a refusal is named at all, not retried for ever as "disconnected": each takes
# ~5 s here (a client's first retries), ~17 s for the first case while three workers start their brokers, and
# once over 30 s on a slower 2-core machine (kafka-python's bootstrap timed out first while the brokers started).
NAMED_WITHIN_S = 60


@pytest.mark.parametrize("client", CLIENTS)
def test_each_refusal_is_named_with_the_action_by_both_clients_within_seconds(secure_kafka, client):
    """The broker answers and refuses: the client says which refusal and what to do, never only "unreachable"."""
    topic = topic_of(secure_kafka, 1)
    named = {}
    for case, (bootstrap, props, says) in _fault_cases(secure_kafka).items():
        config = load_kafka_config(props)
        spec = SourceSpec(kind="kafka", partitions=1, bootstrap=bootstrap, topic=topic, group=f"g-{topic}", kafka_client=client,
                          kafka_config=config)
        [part] = open_partitions(spec, spec.partition_names(), {})
        started = time.monotonic()
        try:
            while time.monotonic() - started < NAMED_WITHIN_S and not part.health().get("fault"):
                assert part.next_batch(10) == []
                time.sleep(0.05)
            health, named[case] = part.health(), time.monotonic() - started
        finally:
            part.close()
        assert health["connected"] is False and health["fault"] == health["error"], (case, health)
        assert says in health["fault"] and "Operator action:" in health["fault"], (case, health)
        for secret in config.properties().get("sasl.password", ""), config.properties().get("ssl.key.password", ""):
            assert not secret or secret not in str(health)
    assert all(seconds < NAMED_WITHIN_S for seconds in named.values()), named


def test_a_sasl_handshake_of_our_own_names_a_mechanism_the_listener_refuses(secure_kafka):
    """A broker refusing a mechanism over TLS often closes without its error reaching kafka-python (only
    "socket disconnected", for tens of seconds in a CI run): the refusal is asked once more, and only it."""
    lacks = load_kafka_config(secure_kafka.properties("scram", "probe-256", **{"sasl.mechanism": "SCRAM-SHA-256"}))
    assert _sasl_verdict(secure_kafka.sasl_ssl, lacks) == "refused (it enables PLAIN, SCRAM-SHA-512)"
    assert "does not enable sasl.mechanism SCRAM-SHA-256" in diagnose("KafkaConnectionError: socket disconnected",
                                                                       secure_kafka.sasl_ssl, lacks)
    # An enabled mechanism with a wrong password is not a mechanism the listener lacks; nor is a broker not there.
    enabled = load_kafka_config(secure_kafka.properties("scram", "probe-512", **{"sasl.password": "Wr0ng-" + "p4ssw0rd-9"}))
    assert _sasl_verdict(secure_kafka.sasl_ssl, enabled) is None
    assert _sasl_verdict(f"localhost:{free_port()}", lacks) is None


def test_a_topic_the_acls_deny_is_named_in_health(ray_cluster, secure_kafka, tmp_path):
    topic = topic_of(secure_kafka, 1)
    admin = KafkaAdminClient(bootstrap_servers=secure_kafka.plaintext)
    # Once a topic has an ACL, only the principals it names may use it: alice may not.
    admin.create_acls([ACL("User:someone-else", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                           ResourcePattern(ResourceType.TOPIC, topic))])
    admin.close()
    s = settings(tmp_path, secure_kafka, topic, "scram", secure_kafka.properties("scram", "acl"))
    p = Pipeline(s).start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and p.status().get("ingest") != "faulted":
            time.sleep(0.2)
        health = health_of(p, s)
    finally:
        p.stop()
    assert health["status"] == "degraded" and health["ingest"] == "faulted", health
    assert f"alice may not read topic {topic}" in health["error"] and "Operator action: grant" in health["error"], health


@pytest.mark.parametrize("case", ["wrong password", "untrusted CA"])
def test_a_wrong_password_and_an_untrusted_ca_are_named_in_health(ray_cluster, secure_kafka, tmp_path, case):
    bootstrap, props, says = _fault_cases(secure_kafka)[case]
    topic = topic_of(secure_kafka, 1)
    s = Settings(source="kafka", bootstrap=bootstrap, topic=topic, kafka_config=props, data_dir=tmp_path / "data", shards=1)
    p = Pipeline(s).start()
    started = time.monotonic()
    try:
        while time.monotonic() - started < 2 * NAMED_WITHIN_S and p.status().get("ingest") != "faulted":
            time.sleep(0.2)
        health = health_of(p, s)
    finally:
        p.stop()
    # Named, not retried for ever as "disconnected": the bound is twice the client's, as the pipeline's own
    # start comes first (a loaded CI run was still "disconnected" at 30 s; quiet runs name it in under 20).
    assert health["status"] == "degraded" and health["ingest"] == "faulted", health
    assert says in health["error"] and "Operator action:" in health["error"], health
    assert "Wr0ng-p4ssw0rd-9" not in str(health)


def test_the_password_is_in_no_command_line_environment_api_answer_or_log_line(secure_kafka, tmp_path):
    """The real service (pulsegraph run) over SASL_SSL, its results topic and POST /v1/events too: the SCRAM
    password is read from the file by the entry process and reaches the Ray workers in memory only."""
    password = secure_kafka.users["alice"]
    topic = topic_of(secure_kafka)
    props = secure_kafka.properties("scram", "service")
    port, log = free_port(), tmp_path / "service.log"
    args = [EXE, "run", "--source", "kafka", "--bootstrap", secure_kafka.sasl_ssl, "--topic", topic, "--kafka-config", str(props),
            "--results-topic", f"{topic}.results", "--port", str(port), "--data-dir", str(tmp_path / "data"), "--num-cpus", "4",
            "--epoch-interval", "200ms", "--allow-anonymous-writes", "true", "--log-level", "DEBUG"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp_path)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 150
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            try:
                if httpx.get(f"{url}/health", timeout=2).json().get("ingest") == "running":
                    break
            except (httpx.TransportError, ValueError):
                pass
            time.sleep(0.3)
        events = [{"op": "add_edge", "src": f"a{i}", "dst": f"b{i}", "ts": float(i)} for i in range(20)]
        assert httpx.post(f"{url}/v1/events", json=events, timeout=30).status_code == 202
        deadline = time.monotonic() + 60
        while httpx.get(f"{url}/health", timeout=5).json().get("records", 0) < 20:
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.3)
        answers = [httpx.get(f"{url}{path}", timeout=10) for path in ("/health", "/v1/status", "/metrics", "/v1/vertices/nobody")]
        assert answers[-1].status_code == 404
        pids = [proc.pid, *descendants(proc.pid)]
        assert len(pids) > 5  # the service, Ray's own processes and its workers
        seen = {}
        for pid in pids:
            for what in ("cmdline", "environ"):
                try:
                    seen[(pid, what)] = open(f"/proc/{pid}/{what}", "rb").read()
                except OSError:
                    pass  # a worker that ended meanwhile
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert all(a.status_code in (200, 404) for a in answers)
    leaked = [k for k, v in seen.items() if password.encode() in v]
    assert not leaked, leaked
    assert any(str(props).encode() in v for v in seen.values())  # the path travels; the secret does not
    for a in answers:
        assert password not in a.text
    text = log.read_text(errors="replace")
    assert "connected to Kafka" in text and password not in text
