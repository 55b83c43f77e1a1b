"""The ``pulsegraph`` command as a user runs it: flags, validation, and a real ``pulsegraph run``."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from pulsegraph.cli import build_parser, main
from pulsegraph.settings import Settings

# Each test starts the service as a process of its own (a real Ray instance in it).
pytestmark = pytest.mark.integration

EXE = os.path.join(os.path.dirname(sys.executable), "pulsegraph")


def test_every_setting_is_a_flag_that_names_its_variable():
    text = build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    for name in Settings.model_fields:
        assert "--" + name.replace("_", "-") in text
        assert "PULSEGRAPH_" + name.upper() in re.sub(r"\s+", "", text)


def test_the_compute_actor_gets_every_ranking_and_application_setting_by_its_name():
    """The compute configs name their settings once (RANK_SETTINGS, APP_SETTINGS); each is a setting,
    and each one set reaches the typed config the wiring sends the compute actor."""
    from pulsegraph.compute.apps.runner import APP_SETTINGS
    from pulsegraph.compute.engine import RANK_SETTINGS
    from pulsegraph.compute.stage import StageConfig

    assert {*RANK_SETTINGS.values(), *APP_SETTINGS} <= set(Settings.model_fields)
    s = Settings(
        pagerank_tol=1e-9, pagerank_max_iter=77, tunkrank_p=0.3, landmarks=5, landmark_drift=0.5, topics_budget=0.2,
        id_reuse_after="30s", rank_types="mentions",
    )
    config = StageConfig.from_settings(s, s.ranked_types)
    rank, apps = config.rank, config.apps
    assert (rank.tol, rank.max_iter, rank.tunkrank_p) == (1e-9, 77, 0.3)
    assert (apps.landmarks, apps.landmark_drift, apps.topics_budget) == (5, 0.5, 0.2)
    assert (config.reuse_after, config.rank_types) == (30.0, ("mentions",))


def test_invalid_settings_exit_2_with_a_message(capsys):
    assert main(["run", "--shards", "0"]) == 2
    assert "--shards" in capsys.readouterr().err
    assert main(["run", "--source", "file"]) == 2
    assert "--path" in capsys.readouterr().err
    assert main(["run", "--epoch-interval", "soon"]) == 2


def test_environment_variables_and_durations(monkeypatch):
    monkeypatch.setenv("PULSEGRAPH_SHARDS", "5")
    monkeypatch.setenv("PULSEGRAPH_RANK_TYPES", "mentions,tags")
    s = Settings(epoch_interval="250ms")
    assert (s.shards, s.rank_types, s.epoch_interval) == (5, ("mentions", "tags"), 0.25)
    assert Settings(shards=3).shards == 3  # a flag beats the environment
    with pytest.raises(Exception):
        s.shards = 4  # frozen


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_port_in_use_stops_the_service_before_ray_starts(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = subprocess.run(
            [EXE, "run", "--port", str(port), "--data-dir", str(tmp_path / "data")],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60, cwd=tmp_path,
        )
    assert run.returncode == 1, run.stdout
    assert f"the API cannot listen on 127.0.0.1:{port}" in run.stdout and "Operator action" in run.stdout
    assert "starting:" not in run.stdout, "the pipeline was started for an API that cannot serve"


def test_pulsegraph_run_serves_the_top_ten(tmp_path):
    port = free_port()
    proc = subprocess.Popen(
        [EXE, "run", "--port", str(port), "--data-dir", str(tmp_path / "data"), "--epoch-interval", "300ms", "--num-cpus", "4"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp_path,
    )
    try:
        body = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/v1/rank/top", params={"k": 10}, timeout=2)
                if r.status_code == 200 and len(r.json()["items"]) == 10:
                    body = r.json()
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stdout.read().decode()
            time.sleep(0.5)
        assert body is not None, "no ranking within 120 s"
        assert all(i["vertex"].startswith("user") for i in body["items"])
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out = proc.communicate(timeout=60)[0].decode()
        except subprocess.TimeoutExpired:
            proc.kill()
            out = proc.communicate()[0].decode()
    assert proc.returncode == 0, out
    assert "did not stop cleanly" not in out and "Traceback" not in out, out
    assert f"http://127.0.0.1:{port}/" in out
    assert re.search(r"epoch \d+ \(merged \d+\)\s+records \d+\s+vertices \d+\s+edges \d+\s+commit [\d.]+ ms.*ms: graph \d+\s+pagerank \d+", out)
    assert (tmp_path / "data" / "epochs.log").stat().st_size > 0


def test_every_flag_says_what_it_sets():
    """The settings reference (docs/settings.md) and ``--help`` are generated from these descriptions: each
    flag has one, and the generated table lists every flag with its variable."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
    import mkdocs_hooks  # noqa: PLC0415

    table = mkdocs_hooks.settings_table()
    for name, field in Settings.model_fields.items():
        assert field.description and len(field.description) > 10, name
        assert f"| `--{name.replace('_', '-')}` | `PULSEGRAPH_{name.upper()}` |" in table
