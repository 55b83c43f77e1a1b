"""Embedded pipeline throughput: synthetic tweets as fast as the pipeline takes them.

Runs the real pipeline (local Ray, real actors) for ``--seconds`` and reports the
sustained transactions/s measured between sealed epochs, the epoch commit
latency (cut -> sealed) and the timeliness (read -> sealed), then prints a
Markdown table row for BENCHMARKS.md.

    .venv/bin/python -m bench.pipeline --seconds 30 --shards 2 --ingest-actors 1
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time

import numpy as np

from bench.machine import describe as machine
from pulsegraph.settings import Settings
from pulsegraph.topology import Pipeline


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--ingest-actors", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=5000)
    ap.add_argument("--epoch-interval", default="1s")
    args = ap.parse_args()
    data = tempfile.mkdtemp(prefix="pg-bench-")
    settings = Settings(
        source="synthetic", rate=0, shards=args.shards, ingest_actors=args.ingest_actors,
        partitions=args.partitions, batch_size=args.batch_size, epoch_interval=args.epoch_interval,
        data_dir=data,
    )
    seen = []
    p = Pipeline(settings, on_epoch=lambda v: seen.append(v.result)).start()
    try:
        p.wait_for_epoch(lambda v: v.result.epoch >= 2, timeout=120)
        warm = len(seen)
        t_end = time.monotonic() + args.seconds
        while time.monotonic() < t_end:
            time.sleep(0.5)
            print(f"\r{len(seen)} epochs, {seen[-1].records} records", end="", file=sys.stderr)
        print(file=sys.stderr)
    finally:
        p.stop()
        shutil.rmtree(data, ignore_errors=True)
    run = seen[warm:]
    if len(run) < 2:
        print("too few epochs", file=sys.stderr)
        return 1
    rate = (run[-1].records - run[0].records) / (run[-1].committed_at - run[0].committed_at)
    commit = np.array([r.commit_ms for r in run])
    tl50 = np.array([r.timeliness_ms["p50"] for r in run])
    tl99 = np.array([r.timeliness_ms["p99"] for r in run])
    rank = np.array([r.compute_ms.get("pagerank", 0.0) for r in run])
    apps = np.array([sum(getattr(r, "apps_ms", {}).values()) for r in run])
    print(f"machine: {machine()}")
    print("| shards | ingest actors | tx/s | commit p50 / p99 ms | timeliness p50 / p99 ms | pagerank ms (median) | applications ms (median) | vertices / edges at end |")
    print(
        f"| {args.shards} | {args.ingest_actors} | {rate:,.0f} | {np.median(commit):.0f} / {np.percentile(commit, 99):.0f} "
        f"| {np.median(tl50):.0f} / {np.percentile(tl99, 99):.0f} | {np.median(rank):.0f} | {np.median(apps):.0f} | {run[-1].vertices:,} / {run[-1].edges:,} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
