"""What a shard's checkpoint costs: the time to write it and the memory it takes above the shard's own.

Fills one shard (:class:`pulsegraph.snapshots.store.ShardStore`) with ``--tweets`` synthetic tweets (the growing
stream: ``--users``, ``--hashtags``), applies them as one epoch, then writes ``--repeat`` checkpoints
of it as the shard actor does (``CheckpointStore.write_shard(epoch, shard, store.state())``) into a
temporary folder, and reports the median seconds and the largest transient memory of one (tracemalloc's
peak above what was held before it: NumPy's buffers and Python's objects) beside the file's size.

    .venv/bin/python -m bench.checkpoint --tweets 2000000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from bench.apps import filled_shards
from bench.index import measure
from bench.machine import describe
from pulsegraph.snapshots.checkpoint import CheckpointStore


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tweets", type=int, default=2_000_000)
    ap.add_argument("--users", type=int, default=3_000_000)
    ap.add_argument("--hashtags", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    (store,) = filled_shards(args.tweets, 1, args.users, args.hashtags)
    store.apply(1, {"p": args.tweets})
    with tempfile.TemporaryDirectory(prefix="pg-ckpt-") as tmp:
        checkpoints = CheckpointStore(tmp)
        run = measure(lambda _: checkpoints.write_shard(1, 0, store.state()), args.repeat)
        size = Path(checkpoints.folder(1), "shard-0.ckpt").stat().st_size
    print(f"machine: {describe()}", file=sys.stderr)
    print("| tweets | live edges | vertices | file MB | checkpoint s (median) | transient MB (largest) |")
    print(f"| {args.tweets:,} | {store.edges.live():,} | {len(store.vertices.names):,} | {size / 1e6:.0f} "
          f"| {run['median_ms'] / 1000:.2f} | {run['peak_mb']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
