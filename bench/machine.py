"""The machine a benchmark ran on, in one line for BENCHMARKS.md."""

from __future__ import annotations

import datetime as dt
import os
import platform


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "unknown CPU")
    except OSError:
        return "unknown CPU"


def describe() -> str:
    return f"{os.cpu_count()} cores (nproc), {cpu_model()}, Python {platform.python_version()}, {dt.date.today().isoformat()}"
