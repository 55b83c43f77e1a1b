"""Process-wide settings for the service's processes (ingest, shard and compute actors, the API).

It owns the log format every process writes (:func:`configure_logging`: the CLI
calls it for the driver, each actor for its Ray worker, which is a process of
its own), the garbage collector's tuning (an actor calls :func:`tune_gc` once,
at the end of its start-up) and the hand-back of the C heap's free pages
(:class:`HeapTrimmer`, called after each unit of work).
"""

from __future__ import annotations

import ctypes
import gc
import logging
import sys
import threading
import time

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: str | int = "INFO") -> None:
    """The one log set-up of a process: its entry point (the CLI, an actor's constructor) calls it first."""
    logging.basicConfig(level=level, format=LOG_FORMAT, stream=sys.stdout)
    logging.getLogger("kafka").setLevel(logging.WARNING)  # its connection chatter is not the user's business


# Every round allocates and frees hundreds of thousands of small containers (decoded
# events, attribute dicts, unpickled batches), none of them in a reference cycle. At
# CPython's default threshold (700) a collection runs every few hundred allocations and
# a full one, over every object the worker holds, every ~70,000: measured at about a
# third of the ingest path's time (micro-timings of 100,000 tweets, see BENCHMARKS.md).
# At 50,000 a young collection still runs several times a round, so cyclic garbage
# stays bounded.
GC_THRESHOLD = (50_000, 20, 100)


def tune_gc() -> None:
    """Move what start-up built (modules, Ray's state) out of the collector's sight and raise its threshold."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


# glibc keeps the pages of freed blocks in its heap for the next allocation, and raises its mmap
# threshold after large frees, so NumPy's transient arrays of an epoch (sorts, merges, products,
# unpickled deltas) end up in a heap that never shrinks: measured in the compute actor during a soak,
# 420 MB free beside 240 MB in use. malloc_trim hands the free pages back to the kernel. It walks the
# heap (about 1 ms per 100 MB here) and the next peak faults the pages in again, so it runs at most
# once every TRIM_EVERY_S, not after every allocation (a fixed low mmap threshold did that, and made
# a churn benchmark three times slower).
TRIM_EVERY_S = 10.0


def _malloc_trim():
    try:
        fn = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to hand back this way
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


class HeapTrimmer:
    """Hands the C heap's free pages back to the kernel, at most once every ``every_s`` seconds.

    Call :meth:`maybe_trim` after a unit of work (an epoch applied, a result pulled), when its
    transient arrays are free, and from what runs while the process waits (a status poll, a throttled
    loop): the trim after the last unit may have come too soon to run, and arrays a background thread
    frees (the K-exposure recount) come with no unit at all. Measured at the end of a 30-minute soak,
    throttled with nothing to do, the compute actor held 0.7 GB of free pages that way (of 6.5 GB).
    It returns at once between trims. Safe from any thread."""

    def __init__(self, every_s: float = TRIM_EVERY_S) -> None:
        self.every_s = every_s
        self.trims = 0
        self.trim_ms = 0.0  # time spent trimming, in all
        self._trim = _malloc_trim()
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def maybe_trim(self) -> bool:
        if self._trim is None or time.monotonic() - self._last < self.every_s:
            return False
        if not self._lock.acquire(blocking=False):
            return False  # another thread is trimming now
        try:
            t0 = time.monotonic()
            self._trim(0)
            self._last = time.monotonic()
            self.trims += 1
            self.trim_ms += (self._last - t0) * 1000.0
            return True
        finally:
            self._lock.release()
