"""What a shard's checkpoint costs: the time to write it and the memory it takes above the shard's own.

Fills one shard (:class:`snapshots.store.ShardStore`) with ``--tweets`` synthetic tweets (the growing
stream: ``--users``, ``--hashtags``), applies them as one epoch, then writes ``--repeat`` checkpoints
of it as the shard actor does (``CheckpointStore.write_shard(epoch, shard, store.state())``) into a
temporary folder, and reports the median seconds and the largest transient memory of one (tracemalloc's
peak above what was held before it: NumPy's buffers and Python's objects) beside the file's size.

    .venv/bin/python -m bench.checkpoint --tweets 2000000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from bench.machine import describe
from ingest.batch import Router
from ingest.sources import SourceSpec, open_partitions
from ingest.transforms import get_transform
from snapshots.checkpoint import CheckpointStore
from snapshots.store import ShardStore


def fill(tweets: int, users: int, hashtags: int) -> ShardStore:
    spec = SourceSpec("synthetic", partitions=1, limit=tweets, users=users, hashtags=hashtags)
    (part,) = open_partitions(spec, ["synthetic:0"], {})
    transform, router, store = get_transform("tweets"), Router(1), ShardStore(0)
    while not part.exhausted():
        for rec in part.next_batch(20_000):
            router.add("p", rec.offset, transform(rec.value))
        for batch in router.take():
            store.receive(batch)
    store.apply(1, {"p": tweets})
    return store


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tweets", type=int, default=2_000_000)
    ap.add_argument("--users", type=int, default=3_000_000)
    ap.add_argument("--hashtags", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    store = fill(args.tweets, args.users, args.hashtags)
    times, peaks = [], []
    with tempfile.TemporaryDirectory(prefix="pg-ckpt-") as tmp:
        checkpoints = CheckpointStore(tmp)
        for _ in range(args.repeat):
            tracemalloc.start()
            held = tracemalloc.get_traced_memory()[0]
            t0 = time.perf_counter()
            checkpoints.write_shard(1, 0, store.state())
            times.append(time.perf_counter() - t0)
            peaks.append(tracemalloc.get_traced_memory()[1] - held)
            tracemalloc.stop()
        size = Path(checkpoints.folder(1), "shard-0.ckpt").stat().st_size
    print(f"machine: {describe()}", file=sys.stderr)
    print("| tweets | live edges | vertices | file MB | checkpoint s (median) | transient MB (largest) |")
    print(f"| {args.tweets:,} | {store.edges.live():,} | {len(store.vertices.names):,} | {size / 1e6:.0f} "
          f"| {statistics.median(times):.2f} | {max(peaks) / 1e6:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
