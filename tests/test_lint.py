"""The packages stay free of undefined names, unused imports and syntax errors (ruff's F and E9 rules)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent


def test_ruff_finds_nothing():
    out = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--select", "F,E9", "ingest", "snapshots", "compute", "api", "pulsegraph", "bench", "tests"],
        cwd=TOP, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
