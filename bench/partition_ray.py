"""Partitioned ranking as Ray actors: P = 1 (today's RankEngine in one actor) against P = 2, 4 partition
actors (compute/partition_actor.py's RankPartitionActor, driven through RayPartitions), side by side in one
run on local Ray, replaying the same epochs as bench/partition.py (R-MAT with ids owned ``id % P``, and
the community graph owned by runs of ids).

Per P: the first epoch, then incremental epochs of a few thousand changes (pushed, or solved by GMRES),
each timed whole as the compute stage would see it (``update`` and ``host_scores``, the gather of every
rank into one vector); the port's rounds per epoch, counted at the port (every call the driver makes:
the merge, the solves' rounds, the counters, the gather); the values a sweep exchanges; one empty round's
cost (each partition called once, nothing done); and memory: each actor's resident set when new and at
the end, and the largest one's peak (VmHWM), against what the largest partition holds in arrays.

The driver (this process) plays the compute actor's part. On one machine the partitions share its
cores (2 here, shared with other jobs): the figures are ratios side by side, not a cluster's speed-up.

    .venv/bin/python -m bench.partition_ray             # 2**18 vertices, 2M edges
    .venv/bin/python -m bench.partition_ray --quick     # 2**16 vertices, 500k edges

Prints a Markdown section for BENCHMARKS.md. Speed is a figure here, never a test.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one BLAS thread per process, as the compute actor runs

import numpy as np  # noqa: E402 - after the thread settings above
import ray  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bench.machine import describe  # noqa: E402 - after the path set-up above
from bench.partition import COMMUNITY, Communities, describe_graph  # noqa: E402
from bench.rank import Graph  # noqa: E402
from pulsegraph.compute.engine import RankConfig, RankEngine  # noqa: E402
from pulsegraph.compute.partition_actor import RayPartitions, spawn_partitions  # noqa: E402
from pulsegraph.compute.partition_actor import _process_memory as process_memory  # noqa: E402
from pulsegraph.compute.partitioned import BlockOwner, ModuloOwner, PartitionedEngine  # noqa: E402

# Empty rounds timed per P for the cost of one round (medians).
EMPTY_ROUNDS = 50


@ray.remote
class EngineActor:
    """P = 1 as the compute actor runs it: today's RankEngine in its own worker."""

    def __init__(self, config: RankConfig) -> None:
        self.engine = RankEngine(config)

    def update(self, *args, **kw):
        runs = self.engine.update(*args, **kw)
        return runs, self.engine.graph_ms

    def host_scores(self):
        return self.engine.host_scores()

    def ping(self) -> None:
        return None

    def memory(self) -> dict[str, int]:
        g = self.engine.graph
        held = g.nbytes() + g.out_weight.nbytes
        for algo in self.engine.algorithms.values():
            s = algo.solver
            held += s.y.nbytes + s.r.nbytes + (0 if s.b is None else s.b.nbytes)
        return {**process_memory(), "held": int(held)}


class Counted:
    """A PartitionPort that counts its rounds (each call reaches every partition once)."""

    def __init__(self, port: RayPartitions) -> None:
        self.port = port
        self.rounds = 0

    @property
    def parts(self) -> int:
        return self.port.parts

    def each(self, op, *args):
        self.rounds += 1
        return self.port.each(op, *args)

    def each_own(self, op, args):
        self.rounds += 1
        return self.port.each_own(op, args)

    def exchange(self, send, receive, *args):
        self.rounds += 1
        return self.port.exchange(send, receive, *args)


class Single:
    """:class:`EngineActor` behind the calls the bench makes of an engine."""

    def __init__(self, config: RankConfig) -> None:
        self.actor = EngineActor.remote(config)  # type: ignore[attr-defined]
        ray.get(self.actor.ping.remote())
        self.merge_ms = 0.0

    def update(self, *args, **kw):
        runs, self.merge_ms = ray.get(self.actor.update.remote(*args, **kw))
        return runs

    def host_scores(self):
        return ray.get(self.actor.host_scores.remote())

    def memory(self) -> list[dict[str, int]]:
        return [ray.get(self.actor.memory.remote())]

    def empty_round_ms(self) -> float:
        return timed_median(lambda: ray.get(self.actor.ping.remote()))

    def close(self) -> None:
        ray.kill(self.actor)


def timed_median(fn) -> float:
    times = []
    for _ in range(EMPTY_ROUNDS):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000.0)
    return float(np.median(times))


def engine(parts: int, kind: str, cfg: RankConfig):
    if parts == 1:
        return Single(cfg), None
    owner = BlockOwner(parts, COMMUNITY) if kind == "communities" else ModuloOwner(parts)
    port = Counted(spawn_partitions(cfg, parts, owner, log_level="WARNING"))
    port.port.each("boundary")  # every worker up before anything is timed
    return PartitionedEngine(cfg, port, owner), port


def epoch_row(label: str, eng, port, runs, wall_ms: float) -> dict:
    pr, tr = runs["pagerank"], runs["tunkrank"]
    out = {
        "kind": label, "wall_ms": wall_ms, "solve_ms": pr.ms + tr.ms, "merge_ms": eng.merge_ms,
        "method": pr.stats.method, "sweeps": pr.stats.sweeps + tr.stats.sweeps,
        "rounds": port.rounds if port else 0, "per_sweep": 0.0,
    }
    if port:
        sweeps = pr.exchanged_sweeps + tr.exchanged_sweeps
        out["per_sweep"] = (pr.dense_values + tr.dense_values) / sweeps if sweeps else 0.0
    return out


def run(parts: int, kind: str, graph_args: tuple, sizes: list[int], epochs: int, cfg: RankConfig) -> dict:
    graph = (Communities if kind == "communities" else Graph)(*graph_args)  # the same seed: the same epochs
    eng, port = engine(parts, kind, cfg)
    start_mem = eng.memory() if parts == 1 else port.port.memory()  # type: ignore[union-attr]
    empty = eng.empty_round_ms() if parts == 1 else timed_median(lambda: port.port.each("boundary"))  # type: ignore[union-attr]

    def one(label: str, *args) -> dict:
        if port:
            port.rounds = 0
        t = time.perf_counter()
        runs = eng.update(*args)
        scores = eng.host_scores()
        row = epoch_row(label, eng, port, runs, (time.perf_counter() - t) * 1000.0)
        row["scores"] = scores
        return row

    rows = [one("first epoch", *graph.initial())]
    print(f"P={parts} {kind}: {graph.n} vertices, {graph.pairs} pairs, first epoch {rows[0]['wall_ms']:.0f} ms", file=sys.stderr)
    for k in sizes:
        done = [one(f"epoch of {k} changes", graph.n, *graph.epoch(k)) for _ in range(epochs)]
        print(f"  P={parts} {k} changes: {[round(d['wall_ms']) for d in done]} ms", file=sys.stderr)
        med = {key: float(np.median([d[key] for d in done])) for key in done[0] if key not in ("kind", "method", "scores")}
        med.update(kind=done[0]["kind"], method="/".join(sorted({d["method"] for d in done})), scores=done[-1]["scores"])
        rows.append(med)
    end_mem = eng.memory() if parts == 1 else port.port.memory()  # type: ignore[union-attr]
    if parts == 1:
        eng.close()  # type: ignore[union-attr]
    else:
        port.port.close()  # type: ignore[union-attr]
    return {"graph": kind, "parts": parts, "n": graph.n, "pairs": graph.pairs, "rows": rows, "empty_ms": empty,
            "start": start_mem, "end": end_mem, "scores": rows[-1]["scores"]}


def table(results: list[dict]) -> list[str]:
    lines = [
        "| P | epoch | method (PageRank) | ms per epoch (whole) | merge ms | solve ms (PR + TR) | sweeps | port rounds | "
        "values per sweep |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for x in r["rows"]:
            lines.append(
                f"| {r['parts']} | {x['kind']} | {x['method']} | {x['wall_ms']:.0f} | {x['merge_ms']:.0f} | "
                f"{x['solve_ms']:.0f} | {x['sweeps']:.0f} | {x['rounds']:.0f} | {x['per_sweep']:,.0f} |"
            )
    base = results[0]
    lines += ["", "| P | one empty round | largest actor RSS: new, at the end (peak) | its growth | largest held in arrays "
              "| L1 from P = 1: PageRank, TunkRank / sum |", "|---|---|---|---|---|---|"]
    mib = 2 ** 20
    for r in results:
        i = int(np.argmax([m["rss"] for m in r["end"]]))
        end, start = r["end"][i], r["start"][i]
        pr = float(np.abs(r["scores"]["pagerank"] - base["scores"]["pagerank"]).sum())
        tr = float(np.abs(r["scores"]["tunkrank"] - base["scores"]["tunkrank"]).sum()) / max(
            float(base["scores"]["tunkrank"].sum()), 1.0)
        lines.append(
            f"| {r['parts']} | {r['empty_ms']:.2f} ms | {start['rss'] / mib:.0f} MiB, {end['rss'] / mib:.0f} MiB "
            f"({end['peak_rss'] / mib:.0f}) | {(end['rss'] - start['rss']) / mib:.0f} MiB | "
            f"{max(m['held'] for m in r['end']) / mib:.1f} MiB | {pr:.1e}, {tr:.1e} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="2**16 vertices, 500k edges")
    p.add_argument("--scale", type=int, default=None, help="2**scale vertices (default 18)")
    p.add_argument("--edges", type=int, default=None, help="edges drawn (default 2M)")
    p.add_argument("--parts", default="1,2,4")
    p.add_argument("--graphs", default="rmat,communities", help="rmat (no locality), communities (ids follow it)")
    p.add_argument("--changes", default="200,4000", help="changes per incremental epoch, comma-separated")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--tol", type=float, default=1e-7)
    args = p.parse_args(argv)
    args.scale = args.scale or (16 if args.quick else 18)
    args.edges = args.edges or (500_000 if args.quick else 2_000_000)
    cfg = RankConfig(device="cpu", tol=args.tol)
    sizes = [int(x) for x in args.changes.split(",")]
    parts = [int(k) for k in args.parts.split(",")]
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(address="local", num_cpus=max(parts) + 2, include_dashboard=False, logging_level=logging.WARNING,
             object_store_memory=512 * 2 ** 20)
    try:
        results = [run(k, kind, (args.scale, args.edges, args.scale), sizes, args.epochs, cfg)
                   for kind in args.graphs.split(",") for k in parts]
    finally:
        ray.shutdown()
    lines = [
        f"Run on {describe()}, NumPy {np.__version__}, Ray {ray.__version__}, local Ray (one node); the machine's cores "
        f"are shared with other jobs, so compare the rows of one run, not absolute times. Tol {cfg.tol:g}; "
        f"{args.epochs} epochs per size, medians. P = 1: RankEngine in one actor; P > 1: that many RankPartitionActor "
        f"actors driven from this process. Command: `python -m bench.partition_ray {' '.join(sys.argv[1:])}`.",
    ]
    for kind in dict.fromkeys(r["graph"] for r in results):
        rs = [r for r in results if r["graph"] == kind]
        lines += ["", f"**{describe_graph(kind, rs[0], args)}**", ""] + table(rs)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
