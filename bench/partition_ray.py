"""Partitioned ranking as Ray actors: P = 1 (today's RankEngine in one actor) against P = 2, 4 partition
actors (compute/partition_actor.py's RankPartitionActor, driven through RayPartitions), side by side in one
run on local Ray, replaying the same epochs as bench/partition.py (R-MAT with ids owned ``id % P``, and
the community graph owned by runs of ids).

All P side by side, each epoch given to every P in turn (a burst of the shared machine's load falls on
all of them). Per P: the first epoch, then incremental epochs of a few thousand changes (pushed, or solved by GMRES),
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
from pulsegraph.base.runtime import HeapTrimmer  # noqa: E402
from pulsegraph.compute.engine import RankConfig, RankEngine  # noqa: E402
from pulsegraph.compute.partition_actor import RayPartitions, spawn_partitions  # noqa: E402
from pulsegraph.compute.partition_actor import process_memory  # noqa: E402
from pulsegraph.compute.partitioned import BlockOwner, ModuloOwner, PartitionedEngine  # noqa: E402

# Empty rounds timed per P for the cost of one round (medians).
EMPTY_ROUNDS = 50


@ray.remote
class EngineActor:
    """P = 1 as the compute actor runs it: today's RankEngine in its own worker."""

    def __init__(self, config: RankConfig) -> None:
        self.engine = RankEngine(config)
        self.trimmer = HeapTrimmer()  # as the compute actor trims after each batch (and the partitions)

    def update(self, *args, **kw):
        runs = self.engine.update(*args, **kw)
        self.trimmer.maybe_trim()
        return runs, self.engine.graph_ms

    def host_scores(self):
        return self.engine.host_scores()

    def ping(self) -> None:
        return None

    def memory(self) -> dict[str, int]:
        self.trimmer.maybe_trim()
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


class Side:
    """One P's engine, its graph (the same seed as the others': the same epochs) and its figures."""

    def __init__(self, parts: int, kind: str, graph_args: tuple, cfg: RankConfig) -> None:
        self.parts, self.kind = parts, kind
        self.graph = (Communities if kind == "communities" else Graph)(*graph_args)
        self.eng, self.port = engine(parts, kind, cfg)
        self.start = self.memory()
        self.empty = self.eng.empty_round_ms() if parts == 1 else timed_median(lambda: self.port.port.each("boundary"))
        self.rows: dict[str, list[dict]] = {}

    def memory(self) -> list[dict[str, int]]:
        return self.eng.memory() if self.parts == 1 else self.port.port.memory()

    def one(self, label: str, *args) -> None:
        if self.port:
            self.port.rounds = 0
        t = time.perf_counter()
        runs = self.eng.update(*args)
        scores = self.eng.host_scores()
        row = epoch_row(label, self.eng, self.port, runs, (time.perf_counter() - t) * 1000.0)
        row["scores"] = scores
        self.rows.setdefault(label, []).append(row)

    def result(self) -> dict:
        end = self.memory()
        (self.eng.close if self.parts == 1 else self.port.port.close)()
        rows = []
        for label, done in self.rows.items():
            med = {key: float(np.median([d[key] for d in done])) for key in done[0] if key not in ("kind", "method", "scores")}
            med.update(kind=label, method="/".join(sorted({d["method"] for d in done})), scores=done[-1]["scores"],
                       spread=(min(d["wall_ms"] for d in done), max(d["wall_ms"] for d in done)))
            rows.append(med)
        return {"graph": self.kind, "parts": self.parts, "n": self.graph.n, "pairs": self.graph.pairs, "rows": rows,
                "empty_ms": self.empty, "start": self.start, "end": end, "scores": rows[-1]["scores"]}


def run(parts: list[int], kind: str, graph_args: tuple, sizes: list[int], epochs: int, cfg: RankConfig) -> list[dict]:
    """Every P side by side: each epoch goes to P = 1, 2, 4 in turn, so a burst of load on the shared
    machine falls on all of them, not on one P's rows."""
    sides = [Side(k, kind, graph_args, cfg) for k in parts]
    for side in sides:
        side.one("first epoch", *side.graph.initial())
    for k in sizes:
        for e in range(epochs):
            for side in sides:
                side.one(f"epoch of {k} changes", side.graph.n, *side.graph.epoch(k))
            print(f"  {kind} {k} changes, epoch {e + 1}: "
                  f"{[round(s.rows[f'epoch of {k} changes'][-1]['wall_ms']) for s in sides]} ms", file=sys.stderr)
    return [side.result() for side in sides]


def table(results: list[dict]) -> list[str]:
    lines = [
        "| P | epoch | method (PageRank) | ms per epoch (whole): median (min-max) | merge ms | solve ms (PR + TR) | sweeps "
        "| port rounds | values per sweep |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for x in r["rows"]:
            lines.append(
                f"| {r['parts']} | {x['kind']} | {x['method']} | {x['wall_ms']:.0f} ({x['spread'][0]:.0f}-{x['spread'][1]:.0f}) "
                f"| {x['merge_ms']:.0f} | "
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
        results = [r for kind in args.graphs.split(",")
                   for r in run(parts, kind, (args.scale, args.edges, args.scale), sizes, args.epochs, cfg)]
    finally:
        ray.shutdown()
    lines = [
        f"Run on {describe()}, NumPy {np.__version__}, Ray {ray.__version__}, local Ray (one node); the machine's cores "
        f"are shared with other jobs, so compare the rows of one run, not absolute times. Tol {cfg.tol:g}; "
        f"{args.epochs} epochs per size, medians, each epoch given to every P in turn (all engines live at once). "
        f"P = 1: RankEngine in one actor; P > 1: that many RankPartitionActor actors driven from this process. Command: `python -m bench.partition_ray {' '.join(sys.argv[1:])}`.",
    ]
    for kind in dict.fromkeys(r["graph"] for r in results):
        rs = [r for r in results if r["graph"] == kind]
        lines += ["", f"**{describe_graph(kind, rs[0], args)}**", ""] + table(rs)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
