"""What an epoch's edge changes cost the two edge indexes as the graph grows: the API's graph view
(:class:`pulsegraph.api.graph.GraphHistory`) and a shard's edge table (:class:`pulsegraph.snapshots.edges.EdgeTable`).

Each is filled with ``--edges`` random edges, then takes ``--epochs`` epochs of ``--changes`` changes:
half new edges, half old ones ended (in the graph view; released in the edge table, as a window
does). It reports the median and largest time per epoch and the largest transient memory of one
epoch (tracemalloc's peak above what was held before it). Run it at two sizes: with an index
whose cost follows the change, the median stays about the same when the graph grows.

    .venv/bin/python -m bench.index --edges 15000000 --changes 100000
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

from bench.machine import describe
from pulsegraph.api.graph import GraphHistory
from pulsegraph.base.arrays import unique
from pulsegraph.compute.changes import EdgeChanges
from pulsegraph.snapshots.edges import EdgeTable

VERTICES = 3_000_000
FILL_BATCH = 1_000_000


def _changes(src: np.ndarray, dst: np.ndarray, mult: np.ndarray) -> EdgeChanges:
    n = len(src)
    return EdgeChanges(src=src.astype(np.int64), dst=dst.astype(np.int64), etype=np.zeros(n, np.int64),
                       mult=mult.astype(np.int64), weight=mult.astype(np.int64) * 1000)


def measure(step, epochs: int) -> dict:
    """``step(e)`` for ``e`` in ``range(epochs)``: the median and largest ms, and tracemalloc's largest and
    median peak (MB) above what was held before each call (the other benches time their steps with it)."""
    times, peaks = [], []
    tracemalloc.start()
    try:
        for e in range(epochs):
            tracemalloc.reset_peak()
            held = tracemalloc.get_traced_memory()[0]
            t0 = time.perf_counter()
            step(e)
            times.append(time.perf_counter() - t0)
            peaks.append(tracemalloc.get_traced_memory()[1] - held)
    finally:
        tracemalloc.stop()
    return {"median_ms": 1000 * float(np.median(times)), "max_ms": 1000 * max(times), "peak_mb": max(peaks) / 1e6,
            "median_peak_mb": float(np.median(peaks)) / 1e6}


def graph_view(edges: int, changes: int, epochs: int, retain: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    g = GraphHistory(retain=retain)
    src, dst = rng.integers(0, VERTICES, edges), rng.integers(0, VERTICES, edges)
    for e, i in enumerate(range(0, edges, FILL_BATCH), start=1):
        s, d = src[i:i + FILL_BATCH], dst[i:i + FILL_BATCH]
        g.apply(e, _changes(s, d, np.ones(len(s))))
    first = g.epoch + 1
    half = changes // 2

    def step(e: int) -> None:
        ns, nd = rng.integers(0, VERTICES, half), rng.integers(0, VERTICES, half)
        old = rng.integers(0, edges, half)
        g.apply(first + e, _changes(np.r_[ns, src[old]], np.r_[nd, dst[old]], np.r_[np.ones(half), np.zeros(half)]))
        src[old], dst[old] = ns, nd  # the ended edges' places hold the new ones

    out = measure(step, epochs)
    out["bytes"] = g.nbytes
    return out


def edge_table(edges: int, changes: int, epochs: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    t = EdgeTable()
    for i in range(0, edges, FILL_BATCH):
        n = min(FILL_BATCH, edges - i)
        t.apply(rng.integers(0, VERTICES, n), rng.integers(0, VERTICES, n), np.zeros(n, np.int64), np.ones(n, np.int64), np.ones(n, np.int64))
    half = changes // 2

    def step(e: int) -> None:
        t.apply(rng.integers(0, VERTICES, half), rng.integers(0, VERTICES, half), np.zeros(half, np.int64),
                np.ones(half, np.int64), np.ones(half, np.int64))
        gone = unique(rng.integers(0, len(t), half))
        gone = gone[t.mult.view[gone] > 0]  # held slots (a released one holds nothing)
        t.mult.view[gone] = 0
        t.weight.view[gone] = 0
        t.release(gone)

    out = measure(step, epochs)
    out["bytes"] = t.nbytes
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--edges", type=int, default=5_000_000)
    ap.add_argument("--changes", type=int, default=100_000, help="edge changes an epoch: half new, half ended")
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--retain", type=int, default=30, help="the graph view's retained epochs")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    print(f"machine: {describe()}")
    print(f"{args.edges:,} edges, {args.changes:,} changes an epoch, {args.epochs} epochs\n")
    print("| index | ms an epoch (median / max) | transient MB (median / max) | MB held |")
    print("|---|---|---|---|")
    for name, r in (("api graph view", graph_view(args.edges, args.changes, args.epochs, args.retain, args.seed)),
                    ("shard edge table", edge_table(args.edges, args.changes, args.epochs, args.seed))):
        print(f"| {name} | {r['median_ms']:.0f} / {r['max_ms']:.0f} | {r['median_peak_mb']:.0f} / {r['peak_mb']:.0f} | {r['bytes'] / 1e6:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
