"""What a Kafka client's failure to connect means for an operator: an outage, or a fault to fix.

A broker that answers but refuses us (a wrong password, a mechanism its listener does not enable, a
certificate it or we do not trust, a host name its certificate does not carry, an ACL that denies the
topic) is not "unreachable": retrying does not help, the operator must act. :func:`diagnose` names
which, with the action, from what the client libraries said; it returns None for a plain outage.

The libraries do not always say it in the exception a call raises: kafka-python's bootstrap fails with
"Unable to bootstrap" and logs the cause (the SASL or TLS error) on its ``kafka.net`` loggers, and
librdkafka reports one generic "certificate verify failed" for an untrusted CA, an expired certificate
and a host name mismatch alike. So the causes kafka-python logs are kept for a short while
(:class:`_Causes`), and a certificate that failed verification is looked at once more with Python's
own TLS (:func:`_tls_verdict`), which says which check failed. A broker refusing a SASL mechanism over
TLS often closes the connection without the handshake's error reaching the client (it closes after
connection.failed.authentication.delay.ms, and the response in the TLS buffer is lost with it): kafka-python
then sees only "socket disconnected", attempt after attempt. So a disconnect on a SASL listener is looked at
once more with one SaslHandshake of our own (:func:`_sasl_verdict`), which the broker either accepts (the
mechanism is enabled, the disconnect is not about it) or refuses. No message here repeats a secret: the
libraries' texts name the mechanism and the user, never the password.
"""

from __future__ import annotations

import collections
import logging
import socket
import ssl
import struct
import threading
import time

from pulsegraph.ingest.sources.kafka_config import KafkaConfig

# A cause kafka-python logged is taken as the reason of a failure this recent (a bootstrap attempt
# lasts BOOTSTRAP_TIMEOUT_MS, 5 s; its causes are logged within it).
CAUSE_WINDOW_S = 30.0
# How long the TLS look at a broker's certificate may take (a local handshake takes milliseconds).
TLS_PROBE_TIMEOUT_S = 5.0
# SaslHandshake v1 (Kafka protocol): its api key, and the error a broker answers for a mechanism it lacks.
SASL_HANDSHAKE_KEY, UNSUPPORTED_SASL_MECHANISM = 17, 33


class _Causes(logging.Handler):
    """Keeps the exceptions kafka-python's connection code logs (the cause behind "Unable to bootstrap")."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: collections.deque[tuple[float, str]] = collections.deque(maxlen=32)
        self.guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        for a in args:
            if isinstance(a, BaseException):
                with self.guard:
                    self.seen.append((time.monotonic(), f"{type(a).__name__}: {a}"))

    def recent(self, since: float | None = None) -> str:
        """What was logged in the last CAUSE_WINDOW_S, and not before ``since`` (a time.monotonic())."""
        floor = max(time.monotonic() - CAUSE_WINDOW_S, since or 0.0)
        with self.guard:
            return " | ".join(text for at, text in self.seen if at >= floor)


_causes = _Causes()
logging.getLogger("kafka.net").addHandler(_causes)


def _file(config: KafkaConfig | None) -> str:
    return config.source if config is not None else "--kafka-config"


def _tls_verdict(bootstrap: str, config: KafkaConfig | None) -> str | None:
    """Python's own TLS handshake with the first broker, verified as the client verifies it: the check
    that failed ("Hostname mismatch", "certificate has expired", "unable to get local issuer certificate")."""
    try:
        with _connect(bootstrap, config):
            return None
    except ssl.SSLCertVerificationError as exc:
        return str(exc.verify_message or exc)
    except (OSError, ValueError):
        return None


def _connect(bootstrap: str, config: KafkaConfig | None) -> socket.socket:
    """A connection to the first broker, in TLS when ``security.protocol`` says so, verified as the client verifies."""
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    props = config.properties() if config is not None else {}
    sock = socket.create_connection((host, int(port)), timeout=TLS_PROBE_TIMEOUT_S)
    if not props.get("security.protocol", "").upper().endswith("SSL"):
        return sock
    ctx = ssl.create_default_context(cafile=props.get("ssl.ca.location") or None)
    ctx.check_hostname = props.get("ssl.endpoint.identification.algorithm", "https").lower() == "https"
    if props.get("ssl.certificate.location"):
        ctx.load_cert_chain(props["ssl.certificate.location"], props.get("ssl.key.location") or None,
                            props.get("ssl.key.password") or None)
    try:
        return ctx.wrap_socket(sock, server_hostname=host)
    except BaseException:
        sock.close()
        raise


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _sasl_verdict(bootstrap: str, config: KafkaConfig | None) -> str | None:
    """One SaslHandshake (v1) of our own with the first broker: "refused" with the mechanisms it enables when
    it refuses ``sasl.mechanism`` (or closes at the handshake without an answer); None when it accepts the
    mechanism or cannot be reached (the disconnect was something else)."""
    props = config.properties() if config is not None else {}
    body = struct.pack(">hhi", SASL_HANDSHAKE_KEY, 1, 1) + _string("pulsegraph-probe") + _string(props.get("sasl.mechanism", "GSSAPI"))
    try:
        with _connect(bootstrap, config) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            answer = b""
            while len(answer) < 4 or len(answer) < 4 + struct.unpack(">i", answer[:4])[0]:
                chunk = sock.recv(4096)
                if not chunk:
                    return "refused (the broker closed the connection at the SASL handshake)" if answer == b"" else None
                answer += chunk
        _, error, count = struct.unpack(">ihi", answer[4:14])
        names, at = [], 14
        for _ in range(max(count, 0) if error == UNSUPPORTED_SASL_MECHANISM else 0):
            [n] = struct.unpack(">h", answer[at:at + 2])
            names.append(answer[at + 2:at + 2 + n].decode(errors="replace"))
            at += 2 + n
    except (OSError, ValueError, struct.error):
        return None
    if error != UNSUPPORTED_SASL_MECHANISM:
        return None
    return f"refused (it enables {', '.join(names) or 'no mechanism'})"


def diagnose(exc: BaseException | str, bootstrap: str, config: KafkaConfig | None, topic: str | None = None,
             group: str | None = None, since: float | None = None) -> str | None:
    """The operator's reason when ``exc`` (and what kafka-python logged since ``since``, the start of the
    attempt that failed: not another client's failure before it) means the broker answered and refused;
    None when it is an outage (retried)."""
    text = f"{exc} | {_causes.recent(since)}"
    low = text.lower()
    props = config.properties() if config is not None else {}
    where, file = f"Kafka at {bootstrap}", _file(config)
    if "authorization" in low and "topic" in low:
        user = props.get("sasl.username") or "this client's principal"
        return (f"{where} answers, but {user} may not read topic {topic} (the cluster's ACLs deny it). Operator action: grant "
                f"it READ and DESCRIBE on topic {topic} and READ on group {group} (kafka-acls --add --allow-principal "
                f"User:NAME --operation Read --operation Describe --topic {topic}), or use credentials that may")
    refused = "unsupported sasl mechanism" in low or "unsupportedsaslmechanism" in low
    if not refused and props.get("security.protocol", "").upper().startswith("SASL") and "socket disconnected" in low \
            and "authenticationfailed" not in low and "authentication failed" not in low:
        verdict = _sasl_verdict(bootstrap, config)
        refused, text = verdict is not None, f"SaslHandshake {verdict}" if verdict else text
    if refused:
        return (f"{where} answers, but its listener does not enable sasl.mechanism {props.get('sasl.mechanism')} "
                f"({text.split('|')[0].strip()}). Operator action: set sasl.mechanism in {file} to one the listener enables")
    if "authentication failed" in low or "invalid credentials" in low or "saslauthenticationfailed" in low \
            or "invalid username or password" in low:
        return (f"{where} answers, but refused the credentials of {file} (SASL {props.get('sasl.mechanism', '')} "
                f"authentication failed for user {props.get('sasl.username', '?')}: a wrong sasl.username or sasl.password, "
                f"or a user this cluster does not have). Operator action: fix sasl.username and sasl.password in {file} "
                f"(a cloud API key: the key and its secret), then restart")
    if "bad certificate" in low or "certificate required" in low or "unknown ca" in low:
        return (f"{where} answers, but refused this client's certificate (ssl.certificate.location in {file}: missing, or not "
                f"signed by a CA the broker trusts). Operator action: give the certificate and key the cluster's operator "
                f"issued for this client (ssl.certificate.location, ssl.key.location, ssl.key.password)")
    if "certificate verify failed" in low or "could not be verified" in low or "certificate_verify_failed" in low:
        verdict = (_tls_verdict(bootstrap, config) or "").lower()
        if "expired" in verdict or "expired" in low:
            return (f"{where} answers, but its certificate has expired (or this host's clock is wrong). Operator action: "
                    f"have the cluster's certificate renewed, and check this host's clock")
        if "mismatch" in verdict or "mismatch" in low:
            return (f"{where} answers, but its certificate is not for the name {bootstrap.split(',')[0].rpartition(':')[0]} "
                    f"({verdict or 'host name mismatch'}). Operator action: connect by the name in the broker's certificate "
                    f"(--bootstrap and the listener's advertised name), or, only on a private network, set "
                    f"ssl.endpoint.identification.algorithm=none in {file}")
        return (f"{where} answers, but its certificate is not signed by a CA in ssl.ca.location "
                f"({props.get('ssl.ca.location') or 'the system CAs'}: {verdict or 'certificate verify failed'}). "
                f"Operator action: set ssl.ca.location in {file} to the CA that signed the cluster's certificates")
    if "wrong version number" in low and props.get("security.protocol", "").upper().endswith("SSL"):
        return (f"{where} answers, but does not speak TLS on this port. Operator action: check security.protocol in {file} "
                f"and the port of --bootstrap (the cluster's SSL or SASL_SSL listener)")
    return None
