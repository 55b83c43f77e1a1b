"""The processes' memory settings: the C heap's free pages go back to the kernel."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pulsegraph.base.runtime import _malloc_trim

# Run in a fresh interpreter: how much of a freed block glibc keeps depends on the heap's history
# (a long test session has raised its thresholds and left free chunks the blocks would reuse).
PEAK = """
import json
import numpy as np
from pulsegraph.base.runtime import HeapTrimmer

def rss_mb():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS")) / 1024

big = np.ones(2 << 20)  # a large block (16 MB) freed: glibc raises its mmap threshold, later blocks stay in the heap
del big
kept, transient = [], []
for _ in range(300):  # an epoch's transients (512 KiB each), with small survivors between them
    transient.append(np.ones(64 * 1024))
    kept.append(np.ones(2048))
del transient  # 150 MB free, but inside the heap: below the survivors, so free() cannot give it back
trimmer = HeapTrimmer(every_s=3600.0)
waited = not trimmer.maybe_trim()
before = rss_mb()
trimmer.every_s = 0.0
trimmed = trimmer.maybe_trim()
print(json.dumps({"waited": waited, "trimmed": trimmed, "trims": trimmer.trims, "before": before, "after": rss_mb(),
                  "kept": sum(len(k) for k in kept)}))
"""


@pytest.mark.skipif(_malloc_trim() is None, reason="not glibc")
def test_free_heap_pages_go_back_after_a_peak_and_not_more_often_than_asked():
    out = json.loads(subprocess.run([sys.executable, "-c", PEAK], check=True, capture_output=True, text=True).stdout)
    assert out["waited"], "the first trim waits for its interval"
    assert out["trimmed"] and out["trims"] == 1
    assert out["before"] - out["after"] > 100, f"{out['before']:.0f} MB before the trim, {out['after']:.0f} MB after"
    assert out["kept"] == 300 * 2048
