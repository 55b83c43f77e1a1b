"""Shared fixtures: a real local Ray instance for the tests that ask for it.

Ray is imported inside its fixture: the compute tests also run on a GPU machine that has only
CuPy, NumPy and SciPy (bench/gpu_check.sh runs the ``gpu`` tests there)."""

from __future__ import annotations

import logging
import os
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

KAFKA_SH = Path(__file__).resolve().parent.parent / "tools" / "kafka.sh"

# A test that asks for one of these (itself or through another fixture) runs real actors or a real
# broker: marked ``integration``. ``make test`` runs every test; ``make check``, the quick lane of
# the edit-test loop, leaves out the integration and slow ones.
INTEGRATION_FIXTURES = frozenset({"ray_cluster", "kafka_broker"})


# The longest test files (~40-200 s each under the three workers of make test), longest first: pytest-xdist
# (--dist loadfile) hands files out in collection order, so these start first and no worker is left
# running one of them alone at the end (longest first is the classic greedy schedule). The Kafka
# security file comes fourth: not among the three that run while every worker starts its broker and
# Ray at once, which slowed its refusals past their bounds. By the durations of a clean-clone CI run
# (2026-12-07, 2-core AMD EPYC): a file that starts three services or a cluster of its own (restart
# serving, the cluster) is short alone (~30 s) but takes 70-125 s under the suite's load.
LONGEST_FILES = (
    "tests/ingest/test_chaos.py",
    "tests/pulsegraph/test_compute_partitions.py",
    "tests/pulsegraph/test_recovery.py",
    "tests/ingest/test_kafka_secure.py",
    "tests/pulsegraph/test_apps_loss.py",
    "tests/pulsegraph/test_restart_serving.py",
    "tests/ingest/test_kafka.py",
    "tests/pulsegraph/test_results_topic.py",
    "tests/ingest/test_kafka_faults.py",
    "tests/pulsegraph/test_cluster.py",
    "tests/compute/test_compute_actor.py",
    "tests/pulsegraph/test_exposure.py",
    "tests/pulsegraph/test_result_lag.py",
    "tests/test_types.py",  # mypy, ~20-50 s with its cache cold (as in CI)
    "tests/pulsegraph/test_compute_queue.py",
    "tests/compute/test_apps_actor.py",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if INTEGRATION_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
    first = {name: i for i, name in enumerate(LONGEST_FILES)}
    top = Path(__file__).resolve().parent.parent
    # Stable: a file's tests keep their order, and every other file its place after these.
    items.sort(key=lambda item: first.get(Path(str(item.path)).relative_to(top).as_posix(), len(first)))


@pytest.fixture(scope="session")
def ray_cluster():
    """A real embedded Ray instance, shared by the session; actors are created per test."""
    import ray  # here, not at the top: see the module docstring

    if not ray.is_initialized():
        ray.init(
            address="local",
            num_cpus=8,
            object_store_memory=256 * 1024 * 1024,
            include_dashboard=False,
            logging_level=logging.WARNING,
        )
    yield ray
    ray.shutdown()


@dataclass
class KafkaBroker:
    """A real single-node Kafka broker started by tools/kafka.sh on a free 127.0.0.1 port."""

    directory: Path
    bootstrap: str = ""

    def start(self) -> str:
        port = self.bootstrap.rsplit(":", 1)[1] if self.bootstrap else ""
        out = subprocess.run(
            ["bash", str(KAFKA_SH), "start", str(self.directory), *([port] if port else [])],
            capture_output=True, text=True, timeout=300,
        )
        if out.returncode != 0:
            raise RuntimeError(f"tools/kafka.sh start failed:\n{out.stdout}\n{out.stderr}")
        self.bootstrap = out.stdout.strip().splitlines()[-1]
        return self.bootstrap

    def stop(self) -> None:
        subprocess.run(["bash", str(KAFKA_SH), "stop", str(self.directory)], check=True, timeout=120)

    def topic(self) -> str:
        return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    """The project's own broker. It is never skipped: a broker that cannot start fails the tests that need it."""
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"))
    try:
        broker.start()
    except Exception as exc:  # noqa: BLE001 - turned into a failure that says what broke
        pytest.fail(f"no Kafka broker (CI={os.environ.get('CI', '')}): {exc}", pytrace=False)
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def secure_kafka(tmp_path_factory):
    """The project's broker with SASL_SSL (PLAIN, SCRAM-SHA-512) and mutual-TLS listeners, certificates made
    by openssl for the session (tests/kafka_secure.py). Never skipped, like kafka_broker."""
    from tests.kafka_secure import SecureBroker

    broker = SecureBroker(tmp_path_factory.mktemp("kafka-secure"))
    try:
        broker.start()
    except Exception as exc:  # noqa: BLE001 - turned into a failure that says what broke
        pytest.fail(f"no secured Kafka broker: {exc}", pytrace=False)
    yield broker
    broker.stop()
