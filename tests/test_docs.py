"""The documentation site builds strictly: a broken link, a missing page or a failing generated reference
fails the build (mkdocs.yml; the references come from tools/mkdocs_hooks.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent


def test_the_site_builds_strictly_with_every_setting_and_route(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=TOP, capture_output=True, text=True, timeout=300, env=env, check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    settings = (tmp_path / "settings" / "index.html").read_text()
    api = (tmp_path / "api" / "index.html").read_text()
    assert "PULSEGRAPH_MAX_RESULT_LAG" in settings and "PULSEGRAPH_COMPUTE_QUEUE_LIMIT" in settings
    assert "/v1/rank/top" in api and "/v1/vertices/{vertex_id}/neighbors" in api
