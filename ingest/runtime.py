"""Process-wide settings for the Ray workers on the data path (ingest and shard actors).

It owns the garbage collector's tuning and nothing else; an actor calls
:func:`tune_gc` once, at the end of its start-up.
"""

from __future__ import annotations

import gc

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
