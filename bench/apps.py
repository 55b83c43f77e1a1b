"""The K-exposure recount on a realistic graph: synthetic tweets through the real shards and merge.

Builds the graph of ``--tweets`` synthetic tweets (the power-law source the
service runs on), cut into ``--epochs`` epochs through the applications, then
times a full recount of every hashtag (``_count_from(..., None)``), the part
that runs on the side and makes the published curves lag (``as_of``), and
traces its peak memory (tracemalloc: NumPy's and SciPy's arrays, above what
the graph holds). Prints a Markdown table row for BENCHMARKS.md: the graph's
size, the median of ``--repeat`` recounts and the largest peak.

    .venv/bin/python -m bench.apps --tweets 200000 --epochs 4
    .venv/bin/python -m bench.apps --tweets 1000000 --users 3000000 --hashtags 100000   # the soak's stream
    .venv/bin/python -m bench.apps --tweets 2000000 --users 3000000 --hashtags 100000 --group-adoptions 250000
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from bench.index import measure
from bench.machine import describe as machine
from pulsegraph.compute.apps import exposure
from pulsegraph.compute.apps.base import AppGraph, csr_pairs
from pulsegraph.compute.apps.exposure import MENTIONS, TAGS, _count_from, _CountInputs
from pulsegraph.compute.apps.runner import Applications
from pulsegraph.compute.changes import EdgeChanges
from pulsegraph.compute.graph import GlobalGraph
from pulsegraph.ingest.batch import Router
from pulsegraph.ingest.sources import SourceSpec, open_partitions
from pulsegraph.ingest.transforms import get_transform
from pulsegraph.snapshots.store import ShardStore


def filled_shards(tweets: int, shards: int, users: int, hashtags: int) -> list[ShardStore]:
    """Shard stores that received ``tweets`` synthetic tweets on partition "p", nothing applied yet."""
    spec = SourceSpec("synthetic", partitions=1, limit=tweets, users=users, hashtags=hashtags)
    (part,) = open_partitions(spec, ["synthetic:0"], {})
    transform = get_transform("tweets")
    stores, router = [ShardStore(i) for i in range(shards)], Router(shards)
    t0 = time.monotonic()
    while not part.exhausted():
        for rec in part.next_batch(10_000):
            router.add("p", rec.offset, transform(rec.value))
        done = part.position()
        print(f"\rtransforming {done:,}/{tweets:,} tweets, {done / (time.monotonic() - t0):,.0f}/s", end="", file=sys.stderr)
    print(file=sys.stderr)
    for store, batch in zip(stores, router.take()):
        store.receive(batch)
    return stores


def build(tweets: int, epochs: int, shards: int = 2, users: int = 20_000, hashtags: int = 1_000):
    """(graph, applications) after ``tweets`` synthetic tweets, sealed in ``epochs`` equal epochs."""
    stores, g, apps = filled_shards(tweets, shards, users, hashtags), GlobalGraph(), Applications()
    for epoch in range(1, epochs + 1):
        merged = [g.apply_with_previous(s.apply(epoch, {"p": tweets * epoch // epochs})[1]) for s in stores]
        changes = EdgeChanges.concat([c for c, _ in merged])
        before = EdgeChanges.concat([b for _, b in merged])
        apps.run(g, epoch, changes, before, False, {"tunkrank": np.zeros(g.n)}, 0)
        print(f"\repoch {epoch}/{epochs} sealed", end="", file=sys.stderr)
    print(file=sys.stderr)
    return g, apps


def sizes(graph: AppGraph) -> tuple[int, int, int]:
    """(mentions edges, tags edges, exposure pairs: a user mentioning an adopter, per hashtag)."""
    t_src, _, _ = graph.typed(TAGS)
    m_src, m_dst, _ = graph.typed(MENTIONS)
    in_ptr, _ = csr_pairs(graph.n, m_dst, m_src)
    return len(m_src), len(t_src), int((in_ptr[t_src + 1] - in_ptr[t_src]).sum())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tweets", type=int, default=200_000)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--users", type=int, default=20_000)
    ap.add_argument("--hashtags", type=int, default=1_000)
    ap.add_argument("--group-adoptions", type=int, default=None,
                    help="hashtags counted in groups of about this many adoptions (default: exposure.GROUP_ADOPTIONS)")
    args = ap.parse_args()
    if args.group_adoptions is not None:
        exposure.GROUP_ADOPTIONS = args.group_adoptions
    g, apps = build(args.tweets, args.epochs, users=args.users, hashtags=args.hashtags)
    graph = AppGraph.build(g, args.epochs)
    inputs = _CountInputs.of(graph, apps.states["topics"])
    topics: dict = {}
    run = measure(lambda _: topics.update(_count_from(inputs, None)), args.repeat)
    mentions, tags, pairs = sizes(graph)
    print(f"machine: {machine()}")
    print("| tweets | users / hashtags | vertices | mentions / tags edges | hashtags tagged | exposure pairs "
          "| adoptions a group | full K-exposure recount ms (median) | peak MB (traced) |")
    print(f"| {args.tweets:,} | {args.users:,} / {args.hashtags:,} | {graph.n:,} | {mentions:,} / {tags:,} | {len(topics):,} "
          f"| {pairs:,} | {exposure.GROUP_ADOPTIONS:,} | {run['median_ms']:.0f} | {run['peak_mb']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
