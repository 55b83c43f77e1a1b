"""CPU per event of the ingest and shard stages, in one process, against another revision's code.

The growing synthetic stream (``--users 3000000``), 4 partitions, rounds of 2,000 records a partition
as the ingest actor reads them, routed to 2 shards, an epoch cut every 48 k events. Per event, the
thread CPU time of

* ingest: the transform (decode, ids, routing) and the pickling of each shard's batch, as Ray ships it;
* shard receive: the unpickling and :meth:`ShardStore.receive`, as a shard actor takes a batch;
* shard apply: :meth:`ShardStore.apply` at each epoch cut.

The synthetic source's own generation is left out (a Kafka consumer replaces it). On a 2-core machine
the sealed rate is what these stages leave of the cores, so their CPU per event is what a change to
them trades. With ``--ref REV`` the same run goes first on the code of git revision ``REV``, from a
temporary worktree in its own process, so the two figures are side by side on the same machine.

    .venv/bin/python -m bench.stages --epochs 20 --ref 9d28401
"""

from __future__ import annotations

import argparse
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.machine import describe as machine

ROOT = Path(__file__).resolve().parent.parent


def run(epochs: int) -> str:
    from pulsegraph.ingest.batch import Router
    from pulsegraph.ingest.sources import SourceSpec, open_partitions
    from pulsegraph.ingest.transforms import Event, get_transform
    from pulsegraph.snapshots.store import ShardStore

    clock = time.thread_time
    spec = SourceSpec(kind="synthetic", partitions=4, rate=None, seed=7, users=3_000_000, hashtags=100_000)
    names = spec.partition_names()
    parts = open_partitions(spec, names, {n: 0 for n in names})
    transform, router, stores = get_transform("tweets"), Router(2), [ShardStore(0), ShardStore(1)]
    ingest = receive = apply = 0.0
    events = 0
    for e in range(1, epochs + 1):
        for _ in range(6):
            for p in parts:
                records = p.next_batch(2000)
                t0 = clock()
                transform.feed(router, p.name, [Event(r.offset, 0, r.value) for r in records])
                ingest += clock() - t0
                events += len(records)
            t0 = clock()
            blobs = [pickle.dumps(b, protocol=5) for b in router.take()]
            t1 = clock()
            for store, blob in zip(stores, blobs):
                store.receive(pickle.loads(blob))
            t2 = clock()
            ingest, receive = ingest + t1 - t0, receive + t2 - t1
        vector = {p.name: p.position() for p in parts}
        t0 = clock()
        for store in stores:
            store.apply(e, vector)
        apply += clock() - t0
    us = 1e6 / events
    live = sum(s.edges.live() for s in stores)
    return (f"{events:,} events, {live:,} live edges: ingest {ingest * us:.2f} µs an event; shards: receive "
            f"{receive * us:.2f}, apply {apply * us:.2f}, together {(receive + apply) * us:.2f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=20, help="epochs of 48 k events")
    ap.add_argument("--ref", help="a git revision whose code runs the same first, from a temporary worktree")
    ap.add_argument("--here", action="store_true", help=argparse.SUPPRESS)  # one run, this code, this process
    args = ap.parse_args(argv)
    if args.here:
        print(run(args.epochs), flush=True)
        return 0
    print(f"# {machine()}; stages, {args.epochs} epochs")
    for rev in ([args.ref] if args.ref else []) + [None]:
        with tempfile.TemporaryDirectory(prefix="pg-stages-") as tmp:
            code = ROOT
            if rev:
                code = Path(tmp) / "tree"
                subprocess.run(["git", "worktree", "add", "--detach", "-q", str(code), rev], cwd=ROOT, check=True)
            try:
                env = {**os.environ, "PYTHONPATH": str(code)}
                # A copy of this file, run as a script against the other tree's packages (that tree need not
                # hold it; a copy, so that the script's own folder on sys.path is not bench/, whose ingest.py
                # would stand in for the ingest package).
                script = Path(tmp) / "stages_here.py"
                shutil.copy(__file__, script)
                out = subprocess.run([sys.executable, str(script), "--here", "--epochs", str(args.epochs)],
                                     cwd=code, env=env, check=True, capture_output=True, text=True).stdout
            finally:
                if rev:
                    subprocess.run(["git", "worktree", "remove", "--force", str(code)], cwd=ROOT, check=False)
        print(f"{rev or 'now'}: {out.strip()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
