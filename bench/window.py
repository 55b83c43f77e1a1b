"""What expiry costs a shard: the same stream applied with and without ``--window``, side by side.

A shard store (no Ray) receives a stream of edge adds on a steady event-time
clock, ``--per-epoch`` transactions an epoch, over ``--vertices`` vertices
(Zipf-skewed sources, so edges repeat as on a real feed). The windowed store
expires what leaves; the other keeps everything. Per epoch it times ``apply``
(receive excluded: it is the same for both), counts the contributions that
expired, and reports, once the window has filled:

* apply ms per epoch, both stores, and the difference per expired contribution;
* the window's own memory (the contribution log) and the edge slots each store
  holds: the windowed one stays flat, the other grows with the stream.

    .venv/bin/python -m bench.window --epochs 400 --per-epoch 20000 --window-epochs 50
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bench.machine import describe
from pulsegraph.ingest.batch import Router
from pulsegraph.ingest.events import EdgeUpdate
from pulsegraph.snapshots.store import ShardStore


def stream(epochs: int, per_epoch: int, vertices: int, seed: int):
    """Per epoch: (offsets, src names, dst names, ts): one edge per transaction, 1 s of event time an epoch."""
    rng = np.random.default_rng(seed)
    names = np.array([f"u{i}" for i in range(vertices)], dtype=object)
    for e in range(epochs):
        src = np.minimum(rng.zipf(1.6, per_epoch) - 1, vertices - 1)
        dst = rng.integers(0, vertices, per_epoch)
        ts = e + rng.random(per_epoch)  # out of order within the epoch's second
        yield np.arange(e * per_epoch, (e + 1) * per_epoch), names[src], names[dst], ts


def batch_of(offsets, src, dst, ts):
    router = Router(1)
    for o, s, d, t in zip(offsets.tolist(), src.tolist(), dst.tolist(), ts.tolist()):
        router.add("p", o, [EdgeUpdate(s, d, "mentions", 1, 1_000_000, t)])
    router.stamp_times()
    return router.take()[0]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=300)
    ap.add_argument("--per-epoch", type=int, default=20_000)
    ap.add_argument("--window-epochs", type=int, default=50, help="the window, in epochs (1 s of event time each)")
    ap.add_argument("--vertices", type=int, default=2_000_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)

    windowed, plain = ShardStore(0, float(args.window_epochs)), ShardStore(0)
    rows = []
    for e, (offsets, src, dst, ts) in enumerate(stream(args.epochs, args.per_epoch, args.vertices, args.seed), 1):
        batch = batch_of(offsets, src, dst, ts)
        times = []
        held, late = len(windowed._contrib), windowed.late
        for store in (windowed, plain):
            store.receive(batch)
            t0 = time.perf_counter()
            store.apply(e, {"p": int(offsets[-1]) + 1}, float(ts.max()))
            times.append(time.perf_counter() - t0)
        expired = held + args.per_epoch - (windowed.late - late) - len(windowed._contrib)
        rows.append((e, times[0], times[1], expired, windowed._contrib.nbytes, len(windowed.edges), len(plain.edges)))

    steady = [r for r in rows if r[0] > args.window_epochs + 5]
    w_ms = np.median([r[1] for r in steady]) * 1000
    p_ms = np.median([r[2] for r in steady]) * 1000
    expired = np.median([r[3] for r in steady])
    last = rows[-1]
    print(f"machine: {describe()}")
    print(f"{args.epochs} epochs x {args.per_epoch} edges, window {args.window_epochs} epochs, {args.vertices} vertices")
    print("| store | apply ms/epoch (median, window full) | expired/epoch | edge slots at the end | window log |")
    print("|---|---|---|---|---|")
    print(f"| windowed | {w_ms:.1f} | {expired:.0f} | {last[5]:,} | {last[4] / 2**20:.1f} MiB |")
    print(f"| keeps everything | {p_ms:.1f} | 0 | {last[6]:,} | - |")
    print(f"expiry: {(w_ms - p_ms) / max(expired, 1) * 1000:.2f} us per expired contribution "
          f"(windowed/plain apply time {w_ms / p_ms:.2f}x)")
    for frac in (0.25, 0.5, 0.75, 1.0):
        r = rows[int(frac * len(rows)) - 1]
        print(f"  epoch {r[0]}: slots windowed {r[5]:,}, plain {r[6]:,}; window log {r[4] / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
