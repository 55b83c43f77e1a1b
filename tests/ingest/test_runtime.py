"""The processes' memory settings: the C heap's free pages go back to the kernel."""

from __future__ import annotations

import numpy as np
import pytest

from ingest.runtime import HeapTrimmer, _malloc_trim


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS")) / 1024


@pytest.mark.skipif(_malloc_trim() is None, reason="not glibc")
def test_free_heap_pages_go_back_after_a_peak_and_not_more_often_than_asked():
    big = np.ones(2 << 20)  # a large block (16 MB) freed: glibc raises its mmap threshold, later blocks stay in the heap
    del big
    kept, transient = [], []
    for _ in range(300):  # an epoch's transients (512 KiB each), with small survivors between them
        transient.append(np.ones(64 * 1024))
        kept.append(np.ones(2048))
    del transient  # 150 MB free, but inside the heap: below the survivors, so free() cannot give it back
    trimmer = HeapTrimmer(every_s=3600.0)
    assert not trimmer.maybe_trim(), "the first trim waits for its interval"
    before = rss_mb()
    trimmer.every_s = 0.0
    assert trimmer.maybe_trim() and trimmer.trims == 1
    after = rss_mb()
    assert before - after > 100, f"{before:.0f} MB before the trim, {after:.0f} MB after"
    assert sum(len(k) for k in kept) == 300 * 2048
