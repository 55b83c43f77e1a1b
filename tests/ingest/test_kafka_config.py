"""The Kafka properties file: librdkafka's names as kcat -F reads them, mapped for kafka-python, secrets never shown.

These check the mapping and the refusals without a broker; tests/ingest/test_kafka_secure.py connects
with such files to a real broker's SASL_SSL and mutual-TLS listeners.
"""

from __future__ import annotations

import pickle

import pytest
from pydantic import ValidationError

from pulsegraph.ingest.decode import RegistrySpec
from pulsegraph.ingest.exceptions import KafkaConfigError
from pulsegraph.ingest.sources.kafka_clients import kafka_python_config, librdkafka_config
from pulsegraph.ingest.sources.kafka_config import load_kafka_config
from pulsegraph.settings import Settings

PASSWORD = "Zq8-not-a-real-password-7Hc"


def write(tmp_path, text: str, name: str = "client.properties"):
    for f in ("ca.pem", "client.pem", "client.key"):
        (tmp_path / f).write_text("-----BEGIN CERTIFICATE-----\n")
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_scram_file_maps_to_both_clients_and_its_password_is_never_shown(tmp_path):
    path = write(tmp_path, f"""# as kcat -F takes it
bootstrap.servers=broker.example:9093
security.protocol=sasl_ssl
sasl.mechanism=SCRAM-SHA-512
sasl.username = alice
sasl.password={PASSWORD}
ssl.ca.location={tmp_path}/ca.pem
ssl.endpoint.identification.algorithm=https
debug=security
""")
    config = load_kafka_config(path)
    assert PASSWORD not in repr(config) and PASSWORD not in str(config) and "sasl.password" in repr(config)
    kp = kafka_python_config("b:1", config, acks="all")
    assert kp == {**kp, "bootstrap_servers": "b:1", "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                  "sasl_plain_username": "alice", "sasl_plain_password": PASSWORD, "ssl_cafile": f"{tmp_path}/ca.pem",
                  "ssl_check_hostname": True, "acks": "all"}
    assert "debug" not in kp  # librdkafka's own tuning: kafka-python goes without it
    rd = librdkafka_config("b:1", config, {"group.id": "g"})
    assert rd == {**rd, "bootstrap.servers": "b:1", "security.protocol": "sasl_ssl", "sasl.password": PASSWORD, "debug": "security",
                  "group.id": "g"}
    assert pickle.loads(pickle.dumps(config)).properties() == config.properties()  # travels to the actors in memory


def test_mutual_tls_maps_the_certificate_and_key_and_relative_paths_become_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, "security.protocol=SSL\nssl.ca.location=ca.pem\nssl.certificate.location=client.pem\n"
                 f"ssl.key.location=client.key\nssl.key.password={PASSWORD}\nssl.endpoint.identification.algorithm=none\n")
    config = load_kafka_config(path)
    assert PASSWORD not in repr(config)
    kp = config.kafka_python()
    assert kp == {"security_protocol": "SSL", "ssl_cafile": str(tmp_path / "ca.pem"), "ssl_certfile": str(tmp_path / "client.pem"),
                  "ssl_keyfile": str(tmp_path / "client.key"), "ssl_password": PASSWORD, "ssl_check_hostname": False}


@pytest.mark.parametrize("text, says", [
    ("security.protocol=SASL_SSL\nsasl.mechanism=OAUTHBEARER\n", "OAUTHBEARER is not supported"),
    ("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-999\nsasl.username=a\nsasl.password=b\n", "sasl.mechanism 'SCRAM-SHA-999' is unknown"),
    ("security.protocol=SSL\nsasl.mechanism=PLAIN\n", "set security.protocol=SASL_SSL"),
    ("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=a\n", "needs sasl.username and sasl.password"),
    ("security.protocol=TLS\n", "security.protocol is 'TLS'"),
    ("security.protocol=SSL\nssl.key.pem=SECRETKEYMATERIAL\n", "ssl.key.pem has no equivalent in kafka-python"),
    ("security.protocol=SSL\nenable.ssl.certificate.verification=false\n", "give ssl.ca.location the CA"),
    ("fetch.wait.max.ms=10\n", "fetch.wait.max.ms has no equivalent in kafka-python"),
    ("ssl.ca.location=/nowhere/ca.pem\n", "not a file"),
    (f"sasl.password {PASSWORD}\n", "line 1: not a property"),
])
def test_what_a_client_cannot_honour_is_refused_by_name_without_its_value(tmp_path, text, says):
    path = write(tmp_path, text)
    with pytest.raises(KafkaConfigError) as err:
        load_kafka_config(path)
    assert says in str(err.value) and str(path) in str(err.value)
    assert PASSWORD not in str(err.value) and "SECRETKEYMATERIAL" not in str(err.value)


def test_settings_read_the_file_at_start_hold_its_path_only_and_refuse_a_bad_one(tmp_path):
    good = write(tmp_path, f"security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=k\nsasl.password={PASSWORD}\n")
    s = Settings(source="kafka", bootstrap="b:1", topic="t", kafka_config=good)
    assert PASSWORD not in repr(s) and PASSWORD not in str(s.model_dump())
    assert s.kafka_properties().get("sasl.password") == PASSWORD
    assert s.results_kafka_properties() == s.kafka_properties()  # the results cluster defaults to the same file
    bad = write(tmp_path, f"security.protocol=SASL_SSL\nsasl.mechanism=OAUTHBEARER\nsasl.password={PASSWORD}\n", "bad.properties")
    with pytest.raises(ValidationError) as err:
        Settings(source="kafka", bootstrap="b:1", topic="t", kafka_config=bad)
    assert "OAUTHBEARER" in str(err.value) and PASSWORD not in str(err.value)
    with pytest.raises(ValidationError, match="give --results-topic"):
        Settings(source="kafka", bootstrap="b:1", topic="t", results_kafka_config=good)


def test_schema_registry_settings_take_every_format_refuse_one_without_a_registry_and_hide_the_registry_secret(tmp_path):
    for fmt in ("avro", "jsonschema", "protobuf"):
        s = Settings(source="kafka", bootstrap="b:1", topic="t", format=fmt, schema_registry="http://r:8081")
        assert s.registry() == RegistrySpec(fmt, "http://r:8081")
        with pytest.raises(ValidationError, match=f"--format {fmt} needs --schema-registry"):
            Settings(source="kafka", bootstrap="b:1", topic="t", format=fmt)
    with pytest.raises(ValidationError, match="format"):
        Settings(source="kafka", bootstrap="b:1", topic="t", format="thrift", schema_registry="http://r:8081")
    conf = write(tmp_path, f"basic.auth.user.info=reader:{PASSWORD}\nssl.ca.location={tmp_path}/ca.pem\n", "registry.properties")
    s = Settings(source="kafka", bootstrap="b:1", topic="t", format="avro", schema_registry="https://r:8081", schema_registry_config=conf)
    assert s.registry().config.get("basic.auth.user.info") == f"reader:{PASSWORD}"
    assert PASSWORD not in repr(s.registry()) and PASSWORD not in repr(s)
