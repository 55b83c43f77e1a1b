"""Where the bytes go: the growing stream through the real stages in one process, then each structure's size.

Runs the synthetic tweet stream (``--users`` large enough that the graph keeps
growing) through the code the actors run, without Ray: transform, router, shard
stores, the compute stage (ranking and applications) and the API's result store
(its graph view and undo records, with its archive in a temporary folder as the
service has it: all but the newest two retained epochs are served memory-mapped
from it, file pages the kernel may drop, not counted here). Then it walks each stage's attributes and sums what each one holds,
NumPy buffers and Python objects alike, each object counted once per process, and prints the
table by structure, in bytes per live edge and per vertex: where the memory per edge goes,
measured rather than estimated.

    .venv/bin/python -m bench.bytes --events 2000000 --per-epoch 50000
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.machine import describe as machine


def deep_size(obj, seen: set[int]) -> int:
    """Bytes held by ``obj`` and everything it refers to that ``seen`` does not hold yet (NumPy data
    counted at the array that owns it)."""
    total, stack = 0, [obj]
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, type):
            continue
        seen.add(id(o))
        if isinstance(o, np.ndarray):
            total += sys.getsizeof(o) if o.base is None else 112
            if o.base is not None:
                stack.append(o.base)
            if o.dtype == object:
                stack.extend(o.ravel().tolist())
            continue
        total += sys.getsizeof(o)
        stack.extend(gc.get_referents(o))
    return total


def breakdown(name: str, obj, seen: set[int]) -> list[tuple[str, int]]:
    rows = []
    for attr, value in sorted(vars(obj).items()):
        rows.append((f"{name}.{attr}", deep_size(value, seen)))
    return rows


def main(argv: list[str] | None = None) -> int:
    from bench.replay import sealed_epochs
    from pulsegraph.api.archive import ResultArchive
    from pulsegraph.api.store import ResultStore
    from pulsegraph.compute.apps.runner import AppConfig
    from pulsegraph.compute.stage import ComputeStage, SealedEpoch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--per-epoch", type=int, default=50_000)
    ap.add_argument("--users", type=int, default=3_000_000)
    ap.add_argument("--hashtags", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--retain", type=int, default=120)
    ap.add_argument("--topics-budget", type=float, default=0.2,
                    help="K-exposure's share of the time, as the service runs it (0: recount every epoch, slow)")
    args = ap.parse_args(argv)

    archive_dir = tempfile.TemporaryDirectory(prefix="pg-bytes-")
    archive = ResultArchive(Path(archive_dir.name) / "results", args.retain)
    apps = AppConfig(topics_budget=args.topics_budget or None)
    stage, api = ComputeStage(("mentions",), apps=apps), ResultStore(args.retain, archive)
    t0 = time.perf_counter()
    stream = sealed_epochs(args.events, args.per_epoch, args.users, args.hashtags, args.partitions, args.shards)
    last = -1
    for info, deltas, stores in stream:
        known = len(api.names)
        result = stage.apply([SealedEpoch(info, deltas)])
        # What the compute actor's results_after sends the API's feed: the name changes since its last pull.
        api.add([result], stage.graph.name_changes(last, known))
        stage.graph.forget_renames(result.epoch)
        last = result.epoch
    built = time.perf_counter() - t0
    edges, vertices = stage.graph.live_edges(), stage.graph.n
    # One set of counted objects per process: in the service each stage holds its own copies (names
    # and arrays cross a process boundary), while here the stages share the objects they passed on.
    rows = []
    for i, s in enumerate(stores):
        rows += breakdown(f"shard{i}", s, set())
    seen: set[int] = set()
    rows += breakdown("compute", stage.graph, seen)
    rows += breakdown("pulsegraph.compute.engine", stage.engine, seen)
    rows += breakdown("pulsegraph.compute.apps", stage.apps, seen)
    rows += breakdown("api", api, set())
    print(f"# {machine()}; {args.events:,} events in {built:.0f} s: {edges:,} live edges, {vertices:,} vertices, "
          f"{args.shards} shards, retain {args.retain}")
    print("| structure | MB | B per live edge | B per vertex |")
    print("|---|---|---|---|")
    for name, size in sorted(rows, key=lambda r: -r[1]):
        if size >= 1 << 20:
            print(f"| `{name}` | {size / 1e6:,.0f} | {size / max(edges, 1):.0f} | {size / max(vertices, 1):.0f} |")
    by_stage: dict[str, int] = {}
    for name, size in rows:
        key = name.split(".")[0] if not name.startswith("shard") else "shards"
        by_stage[key] = by_stage.get(key, 0) + size
    for key, size in by_stage.items():
        print(f"| **{key}** | {size / 1e6:,.0f} | {size / max(edges, 1):.0f} | {size / max(vertices, 1):.0f} |")
    archive_dir.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
