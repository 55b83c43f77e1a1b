"""A secured Kafka broker for the tests, as a team runs one: SASL_SSL (PLAIN, SCRAM-SHA-512) and mutual TLS.

The certificates are made here with openssl (Debian's): a CA, the broker's certificate for the name
``localhost`` (its key encrypted, in a PEM key store, as Kafka 4 reads them), a client certificate
for mutual TLS (its key encrypted too), and a second CA that signed nothing the broker holds (an
untrusted one). Users: a PLAIN one (a cloud API key's shape) and a SCRAM-SHA-512 one, created when
tools/kafka.sh formats the broker's storage (kafka-storage --add-scram), each with a random password.
"""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import KAFKA_SH


def _openssl(*args: str, cwd: Path) -> None:
    out = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)}: {out.stderr}")


def make_ca(d: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "3",
             "-subj", f"/CN=pulsegraph test {name}", cwd=d)


def make_cert(d: Path, name: str, cn: str, ca: str, password_file: str, san: str | None = None, cipher: list[str] | None = None) -> None:
    """``name``.key (PKCS#8, encrypted with the password in ``password_file``) and ``name``.crt signed by ``ca``."""
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.plain.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=d)
    ext = d / f"{name}.ext"
    ext.write_text(f"subjectAltName={san}\n" if san else "basicConstraints=CA:FALSE\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial", "-out", f"{name}.crt",
             "-days", "2", "-extfile", ext.name, cwd=d)
    _openssl("pkcs8", "-topk8", *(cipher or ["-v2", "aes-256-cbc"]), "-in", f"{name}.plain.key", "-out", f"{name}.key", "-passout", f"file:{password_file}", cwd=d)
    (d / f"{name}.plain.key").unlink()


@dataclass
class SecureBroker:
    directory: Path
    pki: Path = field(init=False)
    plaintext: str = ""  # the operator's listener (super user): topics and ACLs
    sasl_ssl: str = ""
    ssl: str = ""
    users: dict[str, str] = field(default_factory=dict)  # name -> password
    key_password: str = ""  # of the client certificate's key

    def __post_init__(self) -> None:
        self.pki = self.directory / "pki"
        self.pki.mkdir(parents=True, exist_ok=True)
        self.users = {"apikey": secrets.token_urlsafe(24), "alice": secrets.token_urlsafe(24)}
        self.key_password = secrets.token_urlsafe(16)
        (self.pki / "broker.password").write_text(secrets.token_urlsafe(16))
        (self.pki / "client.password").write_text(self.key_password)
        make_ca(self.pki, "ca")
        make_ca(self.pki, "other-ca")
        # Java 17 decrypts PKCS#8 keys with PBES1 only (PBES2 "SecretKeyFactory not available"): the broker's is 3DES.
        make_cert(self.pki, "broker", "localhost", "ca", "broker.password", san="DNS:localhost", cipher=["-v1", "PBE-SHA1-3DES"])
        make_cert(self.pki, "client", "pulsegraph-client", "ca", "client.password")
        (self.pki / "broker.pem").write_text((self.pki / "broker.key").read_text() + (self.pki / "broker.crt").read_text())
        (self.pki / "plain-users").write_text(f"apikey:{self.users['apikey']}\n")
        (self.pki / "scram-users").write_text(f"alice:{self.users['alice']}\n")

    def start(self) -> None:
        out = subprocess.run(["bash", str(KAFKA_SH), "start-secure", str(self.directory / "broker"), str(self.pki)],
                             capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            raise RuntimeError(f"tools/kafka.sh start-secure failed:\n{out.stdout}\n{out.stderr}")
        listeners = dict(kv.split("=", 1) for kv in out.stdout.strip().splitlines()[-1].split())
        self.plaintext, self.sasl_ssl, self.ssl = listeners["PLAINTEXT"], listeners["SASL_SSL"], listeners["SSL"]

    def stop(self) -> None:
        subprocess.run(["bash", str(KAFKA_SH), "stop", str(self.directory / "broker")], check=True, timeout=120)

    def properties(self, kind: str, name: str | None = None, **override: str) -> Path:
        """A properties file in librdkafka's names for ``kind``: scram, plain (a cloud API key) or mtls."""
        ca = str(self.pki / "ca.pem")
        if kind == "scram":
            props = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
                     "sasl.password": self.users["alice"], "ssl.ca.location": ca}
        elif kind == "plain":
            props = {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "apikey",
                     "sasl.password": self.users["apikey"], "ssl.ca.location": ca}
        elif kind == "mtls":
            props = {"security.protocol": "SSL", "ssl.ca.location": ca, "ssl.certificate.location": str(self.pki / "client.crt"),
                     "ssl.key.location": str(self.pki / "client.key"), "ssl.key.password": self.key_password}
        else:
            raise ValueError(kind)
        props.update(override)
        path = self.directory / f"{name or kind}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        path.chmod(0o600)
        return path
