"""The ranking engine on a GPU against NumPy, and at scale: the half of ``bench/gpu_check.sh`` that is ours alone.

Needs only Python with CuPy, NumPy and SciPy (it imports pulsegraph.compute.backend/resident/engine/pagerank/
tunkrank and nothing of Ray, FastAPI or the wiring), so it runs on a bare GPU machine.

1. correctness: CuPy against NumPy on a 1M-edge R-MAT graph, from scratch and over incremental
   epochs, each within the bounds the two publish;
2. scale: a 500M-edge R-MAT graph generated on the GPU, float32; the time of one PageRank sweep
   (one iteration) and the memory bandwidth it reaches as a share of the device's peak, numbered at
   random (Graph500) and by out-degree; from-scratch solves by GMRES (the engine's) and by power
   iteration; then three incremental epochs at 0.1% of the pairs each, as the engine runs them
   (warm-started GMRES): the first pays CuPy's kernel compiles once.

One JSON line per step on stdout. A step that raises prints ``{"step": ..., "error": ...}`` and the
next one still runs, so one try on a device shows every failure at once.

    python -m bench.gpu --device cuda                             # on the GPU machine
    python -m bench.gpu --device cpu --scale 12 --edges 40000     # the CPU dry run
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback

import numpy as np

from pulsegraph.compute.backend import Backend, get_backend, numpy_backend
from pulsegraph.compute.engine import RankConfig, RankEngine
from pulsegraph.compute.pagerank import PageRank
from pulsegraph.compute.resident import ResidentGraph

A, B, C = 0.57, 0.19, 0.19  # Graph500 R-MAT


def say(**kw) -> None:
    print(json.dumps(kw), flush=True)


def rmat(xp, scale: int, m: int, seed: int, chunk: int = 50_000_000):
    """R-MAT pairs on the device (xp = cupy) or the host, in chunks to bound the temporaries."""
    rs = xp.random.RandomState(seed)
    perm = xp.asarray(np.random.default_rng(seed).permutation(1 << scale).astype(np.int32))
    srcs, dsts = [], []
    for lo in range(0, m, chunk):
        k = min(chunk, m - lo)
        s = xp.zeros(k, dtype=np.int32)
        d = xp.zeros(k, dtype=np.int32)
        for bit in range(scale):
            r = rs.random_sample(k) if xp is np else rs.random_sample(k, dtype=np.float32)
            s |= (r >= A + B).astype(np.int32) << bit
            d |= (((r >= A) & (r < A + B)) | (r >= A + B + C)).astype(np.int32) << bit
            del r
        srcs.append(perm[s])
        dsts.append(perm[d])
        del s, d
    return xp.concatenate(srcs), xp.concatenate(dsts)


def correctness(be: Backend, scale: int, m: int) -> bool:
    """The engine on ``be`` and on NumPy over a from-scratch solve and three incremental epochs."""
    s, d = rmat(np, scale, m, seed=1)
    n = 1 << scale
    keys, counts = np.unique(s.astype(np.int64) * n + d, return_counts=True)
    src, dst, w = keys // n, keys % n, counts.astype(np.float64)
    engines = {name: RankEngine(RankConfig(tol=1e-9), b) for name, b in (("numpy", numpy_backend()), ("device", be))}
    for e in engines.values():
        e.update(n, src, dst, w)
    rng = np.random.default_rng(2)
    for _ in range(3):
        k = max(4, len(keys) // 1000)
        pick = rng.choice(len(keys), size=k, replace=False)
        dw = np.where(rng.random(k) < 0.5, -w[pick], 1.0)
        w[pick] += dw
        for e in engines.values():
            e.update(n, src[pick], dst[pick], dw)
    got = {name: e.host_scores() for name, e in engines.items()}
    l1, bound = {}, {}
    for algo in ("pagerank", "tunkrank"):
        l1[algo] = float(np.abs(got["numpy"][algo] - got["device"][algo]).sum())
        # Each engine is proven within its published bound of the exact ranking: the two within the sum.
        bound[algo] = sum(e.error_bounds(got[name])[algo] for name, e in engines.items())
    ok = all(l1[a] <= bound[a] for a in l1)
    say(step="correctness", pairs=len(keys), l1_device_vs_numpy=l1, bound=bound, ok=bool(ok))
    return ok


def sweep_time(be: Backend, pr: PageRank, reps: int = 10) -> float:
    """Seconds of one PageRank sweep (``y += r; r = alpha * A^T (r / out)``), after two to warm up cuSPARSE."""
    pr.solver.grow()
    pr.solver.recompute_residual()
    for _ in range(2):
        pr.solver._sweep()
    be.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        pr.solver._sweep()
    be.synchronize()
    return (time.perf_counter() - t) / reps


def say_sweep(step: str, g: ResidentGraph, n: int, sweep_s: float, peak: float) -> None:
    # The least a pull sweep must move: the in-CSR (4-byte index + 4-byte weight per edge, the row
    # pointers), one 4-byte gather per edge, and ~6 passes over n-float vectors (scale, update, residual).
    # A gather that misses the cache moves a 32-byte sector, not 4 bytes: ``sector_bound`` counts that,
    # the most the same sweep could move when no gather hits the L2.
    moved = g.nnz * (4 + 4 + 4) + (n + 1) * 4 + 6 * n * 4
    sectors = moved + g.nnz * (32 - 4)
    say(step=step, ms=round(sweep_s * 1000, 2), bytes=moved, tb_per_s=round(moved / sweep_s / 1e12, 3),
        share_of_peak=round(moved / sweep_s / peak, 3), edges_per_s=round(g.nnz / sweep_s),
        sector_bound_tb_per_s=round(sectors / sweep_s / 1e12, 3))


def build(be: Backend, n: int, s, d) -> ResidentGraph:
    xp = be.xp
    t = time.perf_counter()
    g = ResidentGraph.from_device_edges(n, s, d, xp.ones(len(s), dtype=np.float32), be, dtype=np.float32)
    if be.is_gpu:
        xp.get_default_memory_pool().free_all_blocks()
    be.synchronize()
    say(step="build", vertices=n, pairs=g.nnz, seconds=round(time.perf_counter() - t, 1),
        resident_bytes_per_edge=round(g.nbytes() / g.nnz, 2))
    return g


def incremental_epoch(be: Backend, g: ResidentGraph, pr: PageRank, cfg: RankConfig, scale: int, seed: int) -> None:
    """One epoch at 0.1% of the pairs, half new R-MAT pairs and half re-weighted existing ones, as
    RankEngine runs an epoch of that size (past ``push_max_delta``: no retract; one sweep recomputes
    the residual, then warm-started GMRES)."""
    n = g.n
    k = g.nnz // 1000
    rs = np.random.default_rng(seed)
    ns, nd = rmat(np, scale, k // 2, seed=seed + 1)
    rows = rs.integers(0, n, size=k - k // 2)
    indptr = be.to_host(g._base_out.indptr)
    rows = rows[indptr[rows + 1] > indptr[rows]]
    cols = be.to_host(g._base_out.indices[be.asarray(indptr[rows])])
    src = np.concatenate([ns, rows]).astype(np.int64)
    dst = np.concatenate([nd, cols]).astype(np.int64)
    dw = np.ones(len(src))
    method = "push" if len(src) <= cfg.push_max_delta * g.nnz else "sweep"
    t = time.perf_counter()
    rows_dev = be.xp.unique(be.asarray(src))  # as RankEngine.update finds the rows, on the device
    if method == "push":
        pr.retract(rows_dev)
    else:
        pr.forget()
    g.apply(src, dst, dw)
    be.synchronize()
    t_apply = time.perf_counter()
    stats = pr.update(rows_dev, method)
    be.synchronize()
    t_end = time.perf_counter()
    say(step="incremental", seed=seed, delta=float(len(src) / g.nnz), ms=round((t_end - t) * 1000, 1),
        apply_ms=round((t_apply - t) * 1000, 1), solve_ms=round((t_end - t_apply) * 1000, 1), method=stats.method,
        iterations=stats.iterations, sweeps=stats.sweeps, overlay=g.overlay_nnz, target_ms=100)


def scale_steps(be: Backend, device: str, scale: int, edges: int, peak: float) -> None:
    xp = be.xp
    s, d = rmat(xp, scale, edges, seed=3)
    n = 1 << scale
    cfg = RankConfig(device=device, dtype="float32", tol=1e-5)
    # Graph500's R-MAT numbers its vertices at random: every gather of the sweep lands anywhere in
    # the vector. The same graph numbered by out-degree (hubs first) shows what locality is worth.
    order = xp.argsort(-xp.bincount(s, minlength=n)).astype(np.int32)
    rank = xp.empty(n, dtype=np.int32)
    rank[order] = xp.arange(n, dtype=np.int32)
    del order
    g = build(be, n, rank[s], rank[d])
    del rank
    pr = PageRank(g, cfg.damping, cfg.tol, cfg.max_iter, cfg.dense_switch)
    say_sweep("sweep-by-degree", g, n, sweep_time(be, pr), peak)
    del pr, g
    if be.is_gpu:
        xp.get_default_memory_pool().free_all_blocks()
    g = build(be, n, s, d)
    del s, d
    pr = PageRank(g, cfg.damping, cfg.tol, cfg.max_iter, cfg.dense_switch)
    say_sweep("sweep", g, n, sweep_time(be, pr), peak)
    for method in ("krylov", "power"):
        t = time.perf_counter()
        stats = pr.solver.scratch(method)
        be.synchronize()
        say(step="scratch", method=method, ms=round((time.perf_counter() - t) * 1000, 1), iterations=stats.iterations)
    # The first epoch compiles the overlay's kernels (CuPy JITs each kernel once per process); the
    # service pays that once, the epochs after it are what it pays per epoch.
    for seed in (4, 6, 8):
        incremental_epoch(be, g, pr, cfg, scale, seed)


def guarded(name: str, fn, *args) -> bool:
    try:
        return fn(*args) is not False
    except Exception as exc:  # noqa: BLE001 - a device check reports every failure and goes on
        say(step=name, error=f"{type(exc).__name__}: {exc}", trace=traceback.format_exc(limit=8))
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--scale", type=int, default=25, help="R-MAT scale of the big graph: 2**scale vertices")
    ap.add_argument("--edges", type=int, default=500_000_000, help="R-MAT pairs of the big graph")
    ap.add_argument("--peak-tbs", type=float, default=4.8, help="the device's memory bandwidth, TB/s (H200: 4.8)")
    args = ap.parse_args()
    be = get_backend(args.device)
    info: dict = {"backend": be.name, "numpy": np.__version__}
    if be.is_gpu:
        xp = be.xp
        props = xp.cuda.runtime.getDeviceProperties(0)
        name = props["name"]
        info.update(device=name.decode() if isinstance(name, bytes) else str(name), cupy=xp.__version__,
                    cuda_runtime=xp.cuda.runtime.runtimeGetVersion(), cuda_driver=xp.cuda.runtime.driverGetVersion(),
                    memory_gib=round(xp.cuda.runtime.memGetInfo()[1] / 2**30, 1))
    say(step="start", date=time.strftime("%Y-%m-%d"), **info)
    # 1M edges on a device; on the CPU dry run the small size given.
    small = (16, 1 << 20) if be.is_gpu else (args.scale, args.edges)
    ok = guarded("correctness", correctness, be, *small)
    ok = guarded("scale", scale_steps, be, args.device, args.scale, args.edges, args.peak_tbs * 1e12) and ok
    say(step="ranking-done", ok=ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
