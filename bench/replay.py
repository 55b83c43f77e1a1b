"""Record sealed epochs once, replay them through the compute stage without Ray.

``record`` runs the growing synthetic stream through the real ingest and
snapshot code in one process (transform, router, shard stores, the epoch cut:
what the actors run, without the actors) and saves every epoch's shard deltas,
exactly as the compute actor receives them, compressed, to one file.

``replay`` feeds them to :class:`~pulsegraph.compute.stage.ComputeStage` (the engine and
the applications, as the actor calls them) and prints per-epoch times by part
and the process's memory; with ``--against`` it runs a second backend beside the
first and checks every epoch's results against it within the stated tolerance.
With ``--rebuild-apps`` the applications build their adjacency from the graph
every epoch (as before it was kept across epochs); ``--check-apps`` runs a second
stage that does so beside the first, prints its times in the same row, and
checks that every epoch's applications publish exactly the same.

    .venv/bin/python -m bench.replay record --events 3000000 --per-epoch 50000 --out bench/out/epochs.rec
    .venv/bin/python -m bench.replay replay bench/out/epochs.rec
    .venv/bin/python -m bench.replay replay bench/out/epochs.rec --device cuda --against cpu
    .venv/bin/python -m bench.replay replay bench/out/epochs.rec --topics-budget 0.2 --check-apps
    .venv/bin/python -m bench.replay replay bench/out/epochs.rec --device cuda --against cpu --warm 60 --json
    .venv/bin/python -m bench.replay replay bench/out/epochs.rec --held   # then the bytes held, part by part

``--warm N`` hands the first N epochs over as one batch (as after a restore, or when the compute
stage fell behind), so the epochs timed after it run on the graph at its full size sooner. ``--json``
prints one JSON line per ranked epoch instead of the table: each stage's time by part and, with
``--against``, the L1 distance between the two stages' scores beside the sum of their published
bounds (each is proven within its bound of the exact ranking, so they are within the sum of each other).
"""

from __future__ import annotations

import argparse
import gc
import json
import lzma
import pickle
import resource
import sys
import time
from pathlib import Path

import numpy as np

from bench.held import held_table
from bench.machine import describe as machine
from pulsegraph.compute.apps.runner import AppConfig
from pulsegraph.compute.engine import RankConfig
from pulsegraph.compute.stage import ComputeStage, SealedEpoch
from pulsegraph.settings import Settings, parse_duration
from pulsegraph.snapshots.epoch import EpochInfo


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def sealed_epochs(events: int, per_epoch: int, users: int, hashtags: int, partitions: int, shards: int,
                  batch: int = 5000, seed: int = 7, window: float | None = None):
    """The growing synthetic tweet stream through the code the actors run, without the actors
    (transform, router, shard stores, the epoch cut): yields ``(info, deltas, stores)`` epoch by epoch,
    the deltas as the compute actor receives them. With ``window`` (seconds of event time) the shards
    expire it and each epoch carries its watermark, as the coordinator cuts them."""
    from pulsegraph.ingest.batch import Router
    from pulsegraph.ingest.sources import SourceSpec, open_partitions
    from pulsegraph.ingest.transforms import Event, get_transform
    from pulsegraph.snapshots.store import ShardStore

    spec = SourceSpec(kind="synthetic", partitions=partitions, rate=None, seed=seed, users=users, hashtags=hashtags)
    names = spec.partition_names()
    parts = open_partitions(spec, names, {n: 0 for n in names})
    transform = get_transform("tweets")
    router = Router(shards)
    stores = [ShardStore(i, window) for i in range(shards)]
    per_part = max(per_epoch // len(parts), 1)
    watermark = 0.0
    for e in range(1, events // per_epoch + 1):
        vector = {}
        for p in parts:
            got = 0
            while got < per_part:
                records = p.next_batch(min(batch, per_part - got))
                transform.feed(router, p.name, [Event(r.offset, 0, r.value) for r in records])
                if window:
                    latest, _ = router.stamp_times({p.name: {r.offset: r.ts for r in records if r.ts}})
                    watermark = max([watermark, *latest.values()])
                for store, b in zip(stores, router.take()):
                    if len(b):
                        store.receive(b)
                got += len(records)
            vector[p.name] = p.position()
        deltas = [s.apply(e, vector, watermark if window else None)[1] for s in stores]
        info = EpochInfo(epoch=e, vector=vector, records=sum(vector.values()), sealed_at=time.time(),
                commit_ms=0.0, timeliness_ms={"p50": 0.0, "p99": 0.0, "max": 0.0},
                window=window, watermark=watermark if window else None)
        yield info, deltas, stores


def record(args) -> int:
    epochs = args.events // args.per_epoch
    t0 = time.perf_counter()
    with lzma.open(args.out, "wb", preset=1) as f:
        pickle.dump({"users": args.users, "hashtags": args.hashtags, "epochs": epochs, "per_epoch": args.per_epoch,
                     "window": args.window}, f)
        stream = sealed_epochs(args.events, args.per_epoch, args.users, args.hashtags, args.partitions, args.shards,
                               args.batch, args.seed, args.window)
        for info, deltas, stores in stream:
            pickle.dump((info, deltas), f, protocol=5)
            print(f"\rrecorded epoch {info.epoch}/{epochs}  {sum(s.edges.live() for s in stores) / 1e6:.2f}M live edges"
                  f"  {(time.perf_counter() - t0):.0f} s", end="", file=sys.stderr)
    print(f"\n{args.out}: {Path(args.out).stat().st_size / 1e6:.1f} MB", file=sys.stderr)
    return 0


def epochs_of(path: Path):
    with lzma.open(path, "rb") as f:
        header = pickle.load(f)
        yield header
        while True:
            try:
                yield pickle.load(f)
            except EOFError:
                return


def _stage(device: str, budget: float | None, rebuild: bool = False, reuse_after: float | None = None) -> ComputeStage:
    return ComputeStage(("mentions",), RankConfig(device=device), AppConfig(topics_budget=budget, rebuild_every_epoch=rebuild),
                        reuse_after=reuse_after)


def _published(apps: dict, budget: float | None) -> dict:
    """What must not depend on how the adjacency was kept. With a budget, K-exposure's curves are counted
    on a thread and land when they land (``as_of``), so they are left out."""
    return {app: {k: (np.nan_to_num(v, nan=-1.0).tolist() if isinstance(v, np.ndarray) else v) for k, v in got.items()}
            for app, got in apps.items() if budget is None or app != "topics"}


def _adjacency_mb(stage: ComputeStage) -> float:
    adj = stage.apps.adjacency
    return adj.nbytes() / 1e6 if adj is not None else 0.0


def _parts(stage: ComputeStage, r, ms: float) -> dict:
    """One stage's time for one ranked epoch, by part, in ms."""
    return {"backend": stage.engine.be.name, "merge_graph": round(r.graph_ms, 1), **{k: round(v, 1) for k, v in r.compute_ms.items()},
            "apps": {k: round(v, 1) for k, v in r.apps_ms.items()}, "total": round(ms, 1)}


def replay(args) -> int:
    it = epochs_of(args.file)
    header = next(it)
    stage = _stage(args.device, args.topics_budget, args.rebuild_apps, args.id_reuse_after)
    other = _stage(args.against, args.topics_budget, reuse_after=args.id_reuse_after) if args.against else None
    rebuilt = _stage(args.device, args.topics_budget, True, args.id_reuse_after) if args.check_apps else None
    print(f"machine: {machine()}\nreplay of {args.file} ({header}) on {stage.engine.be.name}"
          + (f" against {other.engine.be.name}" if other else "")
          + (", applications' adjacency rebuilt every epoch" if args.rebuild_apps else "")
          + (", beside a stage that rebuilds the applications' adjacency every epoch" if rebuilt else ""))
    extra = " rebuild: app graph ms | rebuild: apps ms | rebuild: total ms |" if rebuilt else ""
    if args.json:
        print(json.dumps({"step": "replay-start", "machine": machine(), "file": str(args.file), **header,
                          "device": stage.engine.be.name, "against": other.engine.be.name if other else None,
                          "warm": args.warm, "merge": args.merge, "topics_budget": args.topics_budget}), flush=True)
    else:
        print("| epoch | edges | vertices | merge+graph ms | pagerank ms | tunkrank ms | apps ms (" + "/".join(
            ["app_graph", "components", "trends", "topics", "landmarks"]) + ") | total ms | adjacency MB | RSS MB |" + extra)
        print("|---|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if rebuilt else ""))
    totals, rebuilt_totals = [], []
    merged_ms, merged_records, last_records = 0.0, 0, 0
    edges = vertices = 0
    batch: list[SealedEpoch] = []
    other_totals: list[float] = []
    warm = args.warm
    for info, deltas in it:
        batch.append(SealedEpoch(info, deltas))
        if len(batch) < max(args.merge, warm):
            continue
        warming, warm = warm > 0, 0
        t = time.perf_counter()
        r = stage.apply(batch)
        ms = (time.perf_counter() - t) * 1000.0
        row = {"epoch": r.epoch, "merged": len(batch), "edges": r.edges, "vertices": r.vertices,
               "warm_up": warming, "device": _parts(stage, r, ms)}
        if other is not None:
            t = time.perf_counter()
            o = other.apply(batch)
            o_ms = (time.perf_counter() - t) * 1000.0
            row["against"] = _parts(other, o, o_ms)
            agree = {}
            for algo, s in r.scores.items():
                err = float(np.abs(np.asarray(s) - np.asarray(o.scores[algo])).sum())
                bound = r.error_bounds[algo] + o.error_bounds[algo]
                agree[algo] = {"l1": err, "bound": bound}
                if err > bound:
                    print(f"epoch {r.epoch}: {algo} differs by L1 {err:.3g}, more than the bounds' sum {bound:.3g}",
                          file=sys.stderr)
                    return 1
            row["agreement"] = agree
            if not warming:
                other_totals.append(o_ms)
            del o
        side = ""
        if rebuilt is not None:
            t = time.perf_counter()
            b = rebuilt.apply(batch)
            b_ms = (time.perf_counter() - t) * 1000.0
            if _published(r.apps, args.topics_budget) != _published(b.apps, args.topics_budget):
                print(f"epoch {r.epoch}: the applications differ from the rebuild path", file=sys.stderr)
                return 1
            rebuilt_totals.append(b_ms)
            side = f" {b.apps_ms['app_graph']:.0f} | {sum(b.apps_ms.values()):.0f} | {b_ms:.0f} |"
            del b
        batch = []
        if not warming:
            totals.append(ms)
            merged_ms += r.graph_ms
            merged_records += r.records - last_records
        last_records = r.records
        edges, vertices = r.edges, r.vertices
        if args.json:
            print(json.dumps({"step": "replay-epoch", **row, "rss_mb": round(rss_mb())}), flush=True)
            del r
            gc.collect()
            if args.epochs and len(totals) >= args.epochs:
                break
            continue
        a = r.apps_ms
        apps = "/".join(f"{a.get(k, 0):.0f}" for k in ("app_graph", "components", "trends", "topics", "landmarks"))
        print(f"| {r.epoch} | {r.edges:,} | {r.vertices:,} | {r.graph_ms:.0f} | {r.compute_ms['pagerank']:.0f} | "
              f"{r.compute_ms['tunkrank']:.0f} | {apps} | {ms:.0f} | {_adjacency_mb(stage):.0f} | {rss_mb():.0f} |{side}",
              flush=True)
        del r
        gc.collect()
        if args.epochs and len(totals) >= args.epochs:
            break
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if not totals:
        print("no epoch was timed: the recording has no more epochs than --warm", file=sys.stderr)
        return 1
    if args.json:
        summary = {"step": "replay-done", "epochs": len(totals), "peak_rss_mb": round(peak),
                   "device": {"backend": stage.engine.be.name, "median_ms": round(float(np.median(totals)), 1)}}
        if other is not None and other_totals:
            summary["against"] = {"backend": other.engine.be.name, "median_ms": round(float(np.median(other_totals)), 1)}
            summary["speedup"] = round(float(np.median(other_totals) / np.median(totals)), 2)
        print(json.dumps(summary), flush=True)
        return 0
    print(f"\nepochs {len(totals)}, median {np.median(totals):.0f} ms, p90 {np.percentile(totals, 90):.0f} ms, peak RSS {peak:.0f} MB")
    if args.held:
        print(f"\nwhat the stage holds after epoch {stage.epoch} ({edges:,} live edges, {vertices:,} vertices):\n")
        print(held_table(stage, edges, vertices))
    # What the merge costs per record over the whole replay: the figure to set a reuse delay against 'never'.
    print(f"merge+graph {merged_ms / 1000:.2f} s for {merged_records:,} records: "
          f"{1000 * merged_ms / max(merged_records, 1):.2f} us per record")
    if rebuilt_totals:
        print(f"rebuild path: median {np.median(rebuilt_totals):.0f} ms, p90 {np.percentile(rebuilt_totals, 90):.0f} ms; "
              "every epoch's applications published the same")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--events", type=int, default=3_000_000)
    rec.add_argument("--per-epoch", type=int, default=50_000)
    rec.add_argument("--users", type=int, default=3_000_000)
    rec.add_argument("--hashtags", type=int, default=100_000)
    rec.add_argument("--partitions", type=int, default=2)
    rec.add_argument("--shards", type=int, default=2)
    rec.add_argument("--batch", type=int, default=5000)
    rec.add_argument("--seed", type=int, default=7)
    rec.add_argument("--window", type=parse_duration, default=None, help="a sliding window of event time, e.g. 10m (default: off)")
    rec.add_argument("--out", type=Path, default=Path("bench/out/epochs.rec"))
    rep = sub.add_parser("replay")
    rep.add_argument("file", type=Path)
    rep.add_argument("--device", default="cpu")
    rep.add_argument("--against", default=None, help="a second device to check every epoch against (cpu)")
    rep.add_argument("--merge", type=int, default=1, help="sealed epochs handed over together (as when compute falls behind)")
    rep.add_argument("--topics-budget", type=float, default=None, help="K-exposure share of time (default: recount every epoch)")
    rep.add_argument("--rebuild-apps", action="store_true", help="build the applications' adjacency from the graph every epoch")
    rep.add_argument("--check-apps", action="store_true",
                     help="run a stage that rebuilds the applications' adjacency every epoch beside, and compare")
    rep.add_argument("--id-reuse-after", type=parse_duration, default=Settings.model_fields["id_reuse_after"].default,
                     help="with a recorded window: event time before a vertex's id is reused, as the service's (0: never)")
    rep.add_argument("--epochs", type=int, default=0, help="stop after this many ranked epochs (0: all)")
    rep.add_argument("--warm", type=int, default=0, help="hand the first N epochs over as one batch, not timed")
    rep.add_argument("--json", action="store_true", help="one JSON line per ranked epoch instead of the table")
    rep.add_argument("--held", action="store_true", help="after the last epoch, the bytes the stage holds part by part")
    args = ap.parse_args()
    if args.cmd == "record":
        args.out.parent.mkdir(parents=True, exist_ok=True)
        return record(args)
    return replay(args)


if __name__ == "__main__":
    sys.exit(main())
