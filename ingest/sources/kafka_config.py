"""The one Kafka configuration: a properties file in librdkafka's names, the file ``kcat -F`` takes.

``--kafka-config FILE`` holds how every Kafka client of the service reaches the cluster:
``security.protocol``, ``sasl.mechanism``, ``sasl.username``, ``sasl.password``, ``ssl.ca.location``,
``ssl.certificate.location``, ``ssl.key.location``, ``ssl.key.password``,
``ssl.endpoint.identification.algorithm``, and any other librdkafka property. It is read once, in
the entry process, into a :class:`KafkaConfig`, which travels to the actors in memory (a constructor
argument, pickled by Ray): never through a command line or an environment variable. Its secret
values are pydantic ``SecretStr``: its repr, and so any log line or error that shows it, names the
properties and never their values.

:meth:`KafkaConfig.librdkafka` gives the properties as they are (confluent-kafka takes librdkafka's
names); :meth:`KafkaConfig.kafka_python` maps them to kafka-python's settings and refuses, with the
property's name and what to do, one kafka-python cannot honour. The service opens kafka-python
clients whichever ``--kafka-client`` reads the source (dead letters, the write path, topic
descriptions, ``pulsegraph produce``), so a file must suit both.

SASL mechanisms: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, over SASL_SSL (or SASL_PLAINTEXT), and
mutual TLS (``security.protocol=SSL`` with a client certificate and key). OAUTHBEARER is refused
on both clients: librdkafka could fetch OIDC tokens by itself, but kafka-python needs a token
provider object the service does not have, and the service's kafka-python clients must connect too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr

from pulsegraph.ingest.exceptions import KafkaConfigError

# librdkafka's name -> kafka-python's, for the properties whose values carry over unchanged.
KAFKA_PYTHON_NAMES = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",  # librdkafka's older name of the same property
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "ssl.crl.location": "ssl_crlfile",
    "ssl.cipher.suites": "ssl_ciphers",
    "sasl.kerberos.service.name": "sasl_kerberos_service_name",
    "client.id": "client_id",
}
# librdkafka properties that tune librdkafka itself and change nothing of where or how a client
# connects: kafka-python clients go without them.
LIBRDKAFKA_TUNING = {"debug", "log_level", "statistics.interval.ms", "socket.keepalive.enable", "api.version.request",
                     "enable.sparse.connections", "client.rack", "client.dns.lookup"}
# Where the brokers are is --bootstrap's (the file's own is not used, so that one flag names the cluster).
BOOTSTRAP_NAMES = {"bootstrap.servers", "metadata.broker.list"}
PROTOCOLS = {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"}
MECHANISMS = {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
# Properties whose values are paths, made absolute at load: every process reads them from the same place.
PATH_NAMES = {"ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.crl.location"}


def is_secret(name: str) -> bool:
    """A property whose value must never be shown: passwords, secrets, inline keys."""
    return "password" in name or "secret" in name or name in (
        "ssl.key.pem", "sasl.oauthbearer.config", "ssl_key", "basic.auth.user.info", "bearer.auth.token")


@dataclass(frozen=True, repr=False)
class KafkaConfig:
    """The properties of one Kafka properties file, its secrets held as ``SecretStr``."""

    source: str  # where it was read from, for messages
    plain: tuple[tuple[str, str], ...] = ()
    secret: tuple[tuple[str, SecretStr], ...] = ()

    def __repr__(self) -> str:
        return f"KafkaConfig({self.source!r}, properties={self.names()})"

    __str__ = __repr__

    def names(self) -> list[str]:
        return sorted([k for k, _ in self.plain] + [k for k, _ in self.secret])

    def get(self, name: str) -> str | None:
        return self.properties().get(name)

    def properties(self) -> dict[str, str]:
        """Every property with its value, secrets included: only to make a client with."""
        return {**dict(self.plain), **{k: v.get_secret_value() for k, v in self.secret}}

    def librdkafka(self) -> dict[str, str]:
        """The properties for confluent-kafka (librdkafka's own names), less the brokers' addresses."""
        props = {k: v for k, v in self.properties().items() if k not in BOOTSTRAP_NAMES}
        self._check_mechanism(props)
        return props

    def kafka_python(self) -> dict[str, Any]:
        """The properties as kafka-python settings. Raises KafkaConfigError for one it cannot honour."""
        out: dict[str, Any] = {}
        props = self.properties()
        self._check_mechanism(props)
        for name, value in props.items():
            if name in BOOTSTRAP_NAMES or name in LIBRDKAFKA_TUNING:
                continue
            if name in KAFKA_PYTHON_NAMES:
                out[KAFKA_PYTHON_NAMES[name]] = value.upper() if name in ("security.protocol", "sasl.mechanism", "sasl.mechanisms") else value
            elif name == "ssl.endpoint.identification.algorithm":
                if value.lower() not in ("https", "none"):
                    raise KafkaConfigError(f"{self.source}: ssl.endpoint.identification.algorithm is {value!r}; it is https or none")
                out["ssl_check_hostname"] = value.lower() == "https"
            elif name == "enable.ssl.certificate.verification" and value.lower() in ("true", "1"):
                continue
            else:
                raise KafkaConfigError(
                    f"{self.source}: property {name} has no equivalent in kafka-python, which the service also uses "
                    f"(dead letters, POST /v1/events, topic descriptions, pulsegraph produce). Operator action: remove it"
                    + (" (and give the certificates as files: ssl.ca.location, ssl.certificate.location, ssl.key.location)"
                       if name.endswith(".pem") else "")
                    + (" and give ssl.ca.location the CA that signed the brokers' certificates"
                       if name == "enable.ssl.certificate.verification" else "")
                )
        return out

    def _check_mechanism(self, props: dict[str, str]) -> None:
        protocol = props.get("security.protocol", "PLAINTEXT").upper()
        if protocol not in PROTOCOLS:
            raise KafkaConfigError(f"{self.source}: security.protocol is {protocol!r}; it is one of {', '.join(sorted(PROTOCOLS))}")
        mechanism = (props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "").upper()
        if mechanism == "OAUTHBEARER" or any(k.startswith("sasl.oauthbearer.") for k in props):
            raise KafkaConfigError(
                f"{self.source}: SASL/OAUTHBEARER is not supported: the service's kafka-python clients (dead letters, "
                f"writes, topic descriptions) cannot fetch OIDC tokens. Operator action: use SCRAM-SHA-512, PLAIN over "
                f"SASL_SSL (a cloud API key) or mutual TLS"
            )
        if mechanism and mechanism not in MECHANISMS and mechanism != "GSSAPI":
            raise KafkaConfigError(
                f"{self.source}: sasl.mechanism {mechanism!r} is unknown. Operator action: set it to one of "
                f"{', '.join(sorted(MECHANISMS))} (the one the cluster's listener enables)"
            )
        if mechanism and not protocol.startswith("SASL_"):
            raise KafkaConfigError(
                f"{self.source}: sasl.mechanism is set but security.protocol is {protocol}: no SASL is spoken. "
                f"Operator action: set security.protocol=SASL_SSL (or SASL_PLAINTEXT on a listener without TLS)"
            )
        if protocol.startswith("SASL_") and mechanism in MECHANISMS and not (props.get("sasl.username") and props.get("sasl.password")):
            raise KafkaConfigError(f"{self.source}: SASL {mechanism} needs sasl.username and sasl.password. Operator action: add them")


def parse_properties(text: str, source: str) -> KafkaConfig:
    """Properties as kcat -F reads them: ``name=value`` a line, ``#`` comments, blank lines."""
    plain: dict[str, str] = {}
    secret: dict[str, SecretStr] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        name, sep, value = line.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name:
            raise KafkaConfigError(f"{source}, line {n}: not a property (name=value)")  # the line may hold a secret: not shown
        if name in PATH_NAMES and value:
            value = os.path.abspath(value)
        if is_secret(name):
            secret[name] = SecretStr(value)
        else:
            plain[name] = value
    return KafkaConfig(source, tuple(sorted(plain.items())), tuple(sorted(secret.items())))


def load_kafka_config(path: str | os.PathLike) -> KafkaConfig:
    """Read and check a properties file; raises KafkaConfigError (without any value of it) when it cannot."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise KafkaConfigError(f"cannot read the Kafka properties file {path}: {exc.strerror}") from None
    config = parse_properties(text, str(path))
    config.kafka_python()  # both clients are opened: it must map, and the mechanism must be one we speak
    for name in PATH_NAMES:
        where = config.get(name)
        if where and not os.path.isfile(where):
            raise KafkaConfigError(f"{path}: {name} names {where}, which is not a file. Operator action: fix the path")
    return config
