"""The packages type-check under mypy (CONVENTIONS: type hints on public functions, mypy in CI)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent


def test_mypy_finds_nothing():
    out = subprocess.run(
        # The namespace, which reaches every stage's folder through pulsegraph/<stage> (see pyproject.toml).
        [sys.executable, "-m", "mypy", "pulsegraph"],
        cwd=TOP, capture_output=True, text=True, timeout=600, check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
