"""docker-compose.yml validates with Debian's docker-compose (no Docker engine needed) and refuses a missing token."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

TOP = Path(__file__).resolve().parent.parent


def compose(*args: str, **env: str) -> subprocess.CompletedProcess:
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.fail("docker-compose is not installed: `make test` installs Debian's package")
    base = {k: v for k, v in os.environ.items() if not k.startswith("PULSEGRAPH_")}
    return subprocess.run([exe, *args], cwd=TOP, env={**base, **env}, capture_output=True, text=True, timeout=120)


def test_compose_file_validates_and_wires_kafka_the_service_and_a_producer():
    out = compose("config", PULSEGRAPH_API_TOKEN="a-test-token-of-enough-length")
    assert out.returncode == 0, out.stderr
    cfg = yaml.safe_load(out.stdout)
    services = cfg["services"]
    assert set(services) == {"kafka", "pulsegraph", "producer"}
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    for name in ("pulsegraph", "producer"):
        assert services[name]["depends_on"]["kafka"]["condition"] == "service_healthy"
    run = services["pulsegraph"]["command"]
    assert run[:2] == ["pulsegraph", "run"] and "--source=kafka" in run
    assert services["producer"]["command"][:2] == ["pulsegraph", "produce"]
    assert "healthcheck" in services["pulsegraph"] and "healthcheck" in services["kafka"]
    assert all(p.startswith("127.0.0.1:") for p in services["pulsegraph"]["ports"]) or all(
        p.get("host_ip") == "127.0.0.1" for p in services["pulsegraph"]["ports"]
    )


def test_compose_refuses_to_start_without_a_token():
    out = compose("config")
    assert out.returncode != 0
    assert "set PULSEGRAPH_API_TOKEN" in out.stderr
