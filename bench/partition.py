"""Partitioned ranking benchmark: today's RankEngine (P = 1) against PartitionedEngine with P = 2, 4 in one process.

Graphs: R-MAT (bench/rank.py's: Graph500's a, b, c, vertex ids permuted, duplicate pairs summed into
weights), owned ``id % P`` (ids are permuted, so no locality: the worst case, and what a hash of the
vertex name gives); and a community graph whose ids follow its locality (runs of 1024 ids, 98% of the
pairs inside one), owned by runs of ids. Per engine: the first epoch (every pair, from ``y = b``), a
from-scratch solve (``rescore``), and incremental epochs of a few thousand changes (half new pairs, a
quarter deletes, a quarter re-weights; the small size pushed, the larger by GMRES): milliseconds,
sweeps, the values exchanged per sweep against n, the bytes the largest partition holds, and the L1
distance of its ranks from P = 1's (each is within tol of the exact ranks, so at most 2 tol apart).

The partitions run one after another in this process: the figures are the work and the traffic of the
partitioned solve, not a parallel speed-up (that needs the partitions on their own cores or machines;
``python -m bench.partition_ray`` runs the same epochs with the partitions as Ray actors).

    .venv/bin/python -m bench.partition            # R-MAT, 2**19 vertices, 4M edges; a few minutes on 2 cores
    .venv/bin/python -m bench.partition --quick    # 2**16 vertices, 1M edges

Prints a Markdown section for BENCHMARKS.md. Speed is a figure here, never a test.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

# One BLAS thread, as the compute actor runs (see bench/rank.py: on shared cores the Krylov basis's
# small products ran 100-200x slower with a thread per core).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402 - after the thread settings above

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bench.machine import describe  # noqa: E402 - after the path set-up above
from bench.rank import Graph  # noqa: E402
from pulsegraph.compute.engine import RankConfig, RankEngine  # noqa: E402
from pulsegraph.compute.partitioned import BlockOwner, PartitionedEngine, make_rank_engine  # noqa: E402

# The community graph: runs of this many consecutive ids, and the share of drawn pairs inside one.
COMMUNITY = 1024
INSIDE = 0.98


class Communities(Graph):
    """Communities of :data:`COMMUNITY` consecutive ids, :data:`INSIDE` of the pairs inside one (sources
    and targets within it skewed towards low offsets, so there are hubs), the rest uniform: a graph whose
    ids follow its locality, owned by runs of ids (``BlockOwner``) as a locality-aware placement would."""

    def draw(self, m: int) -> tuple[np.ndarray, np.ndarray]:
        rng = self.rng
        s = rng.integers(0, self.n, m)
        inside = rng.random(m) < INSIDE
        offset = np.minimum(rng.zipf(1.5, m), COMMUNITY) - 1
        d = np.where(inside, s // COMMUNITY * COMMUNITY + offset, rng.integers(0, self.n, m))
        return s, d


def held_bytes(engine) -> int:
    """Bytes the largest process holds for ranking: its graph, out-weights and vectors."""
    if isinstance(engine, PartitionedEngine):
        return max(engine.partition_bytes())
    g = engine.graph
    total = g.nbytes() + g.out_weight.nbytes
    for algo in engine.algorithms.values():
        s = algo.solver
        total += s.y.nbytes + s.r.nbytes + (0 if s.b is None else s.b.nbytes)
    return int(total)


def row(kind: str, runs: dict, ms_merge: float | None = None) -> dict:
    pr, tr = runs["pagerank"], runs["tunkrank"]
    out = {
        "kind": kind, "ms": pr.ms + tr.ms, "pr_ms": pr.ms, "tr_ms": tr.ms, "method": pr.stats.method,
        "sweeps": pr.stats.sweeps + tr.stats.sweeps, "merge_ms": ms_merge,
        "values": 0, "exchanged_sweeps": 0, "sparse": 0, "reductions": 0,
    }
    if hasattr(pr, "dense_values"):
        out.update(
            values=pr.dense_values + tr.dense_values, sparse=pr.sparse_values + tr.sparse_values,
            exchanged_sweeps=pr.exchanged_sweeps + tr.exchanged_sweeps, reductions=pr.reductions + tr.reductions,
        )
    return out


def run(parts: int, kind: str, graph_args: tuple, sizes: list[int], epochs: int, cfg: RankConfig) -> dict:
    # The same seed: every engine sees the same graph and epochs.
    graph = (Communities if kind == "communities" else Graph)(*graph_args)
    owner = BlockOwner(parts, COMMUNITY) if kind == "communities" else None
    engine = make_rank_engine(cfg, parts, owner)
    t = time.perf_counter()
    first = engine.update(*graph.initial())
    build_s = time.perf_counter() - t
    merge = engine.merge_ms if isinstance(engine, PartitionedEngine) else engine.graph_ms
    rows = [row("first epoch", first, merge)]
    rows.append(row("from scratch", engine.rescore()))
    print(f"P={parts}: {graph.n} vertices, {graph.pairs} pairs, first epoch {build_s:.1f} s", file=sys.stderr)
    for k in sizes:
        done = []
        t0 = time.perf_counter()
        for e in range(epochs):
            runs = engine.update(graph.n, *graph.epoch(k))
            merge = engine.merge_ms if isinstance(engine, PartitionedEngine) else engine.graph_ms
            done.append(row(f"epoch of {k} changes", runs, merge))
            rate = (e + 1) / (time.perf_counter() - t0)
            print(f"  P={parts} {k} changes: epoch {e + 1}/{epochs} ({rate:.2f} epochs/s) {done[-1]}", file=sys.stderr)
        med = {key: (float(np.median([d[key] for d in done])) if key not in ("kind", "method") else done[0][key])
               for key in done[0] if done[0][key] is not None}
        med["method"] = "/".join(sorted({d["method"] for d in done}))
        rows.append(med)
    out = {
        "graph": kind, "parts": parts, "n": graph.n, "pairs": graph.pairs, "rows": rows, "bytes": held_bytes(engine),
        "scores": engine.host_scores(),
        "boundary": engine.boundary if isinstance(engine, PartitionedEngine) else 0,
    }
    if isinstance(engine, PartitionedEngine):
        out["sizes"] = engine.local_sizes()
    return out


def describe_graph(kind: str, r: dict, args) -> str:
    if kind == "communities":
        return (f"communities: 2^{args.scale} vertices in runs of {COMMUNITY} ids, {args.edges} pairs drawn "
                f"({r['pairs']} distinct), {INSIDE:.0%} inside a community, owned by runs of {COMMUNITY} ids")
    return (f"R-MAT: 2^{args.scale} vertices, {args.edges} edges drawn ({r['pairs']} distinct pairs), permuted "
            f"ids owned `id % P` (no locality)")


def markdown(all_results: list[dict], cfg: RankConfig, args) -> str:
    lines = [
        f"Run on {describe()}, NumPy {np.__version__}; the machine's 2 cores are shared with other jobs, so "
        f"times move with their load. Tol {cfg.tol:g}, damping {cfg.damping}, TunkRank p {cfg.tunkrank_p}; "
        f"{args.epochs} epochs per size, medians; the partitions run one after another in one process. "
        f"Command: `python -m bench.partition {' '.join(sys.argv[1:])}`.",
    ]
    for kind in dict.fromkeys(r["graph"] for r in all_results):
        results = [r for r in all_results if r["graph"] == kind]
        lines += ["", f"**{describe_graph(kind, results[0], args)}**", ""] + table(results)
    return "\n".join(lines)


def table(results: list[dict]) -> list[str]:
    base = results[0]
    n = base["n"]
    lines = [
        "| P | run | method (PageRank) | ms (PR + TR) | sweeps (PR + TR) | values exchanged per sweep | "
        "per sweep / n | values pushed | port rounds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for x in r["rows"]:
            per = x["values"] / x["exchanged_sweeps"] if x["exchanged_sweeps"] else 0
            lines.append(
                f"| {r['parts']} | {x['kind']} | {x['method']} | {x['ms']:.0f} ({x['pr_ms']:.0f} + {x['tr_ms']:.0f}) "
                f"| {x['sweeps']:.0f} | {per:,.0f} | {per / n:.2f} | {x['sparse']:,.0f} | {x['reductions']:.0f} |"
            )
    lines += ["", "| P | bytes held by the largest partition | the same / all stored pairs | boundary (values per "
              "sweep, all pairs) | owned / ghosts per partition | L1 from P = 1: PageRank, TunkRank / sum |",
              "|---|---|---|---|---|---|"]
    for r in results:
        pr = float(np.abs(r["scores"]["pagerank"] - base["scores"]["pagerank"]).sum())
        tr = float(np.abs(r["scores"]["tunkrank"] - base["scores"]["tunkrank"]).sum()) / max(
            float(base["scores"]["tunkrank"].sum()), 1.0)
        sizes = ", ".join(f"{s['owned']:,}/{s['ghosts']:,}" for s in r.get("sizes", [])) or "-"
        lines.append(
            f"| {r['parts']} | {r['bytes'] / 2**20:.1f} MiB | {r['bytes'] / r['pairs']:.1f} B | {r['boundary']:,} "
            f"| {sizes} | {pr:.1e}, {tr:.1e} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="2**16 vertices, 1M edges")
    p.add_argument("--scale", type=int, default=None, help="R-MAT 2**scale vertices (default 19)")
    p.add_argument("--edges", type=int, default=None, help="R-MAT edges drawn (default 4M)")
    p.add_argument("--parts", default="1,2,4")
    p.add_argument("--graphs", default="rmat,communities", help="rmat (no locality), communities (ids follow it)")
    p.add_argument("--changes", default="200,4000", help="changes per incremental epoch, comma-separated")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--tol", type=float, default=1e-7)
    args = p.parse_args(argv)
    args.scale = args.scale or (16 if args.quick else 19)
    args.edges = args.edges or (1 << 20 if args.quick else 4_000_000)
    cfg = RankConfig(device="cpu", tol=args.tol)
    sizes = [int(x) for x in args.changes.split(",")]
    parts = [int(k) for k in args.parts.split(",")]
    if parts[0] != 1 or not isinstance(make_rank_engine(cfg, 1), RankEngine):
        print("the first --parts should be 1: the other rows are compared with it", file=sys.stderr)
    results = [run(k, kind, (args.scale, args.edges, args.scale), sizes, args.epochs, cfg)
               for kind in args.graphs.split(",") for k in parts]
    print(markdown(results, cfg, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
