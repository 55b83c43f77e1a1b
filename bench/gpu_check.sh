#!/usr/bin/env bash
# GPU check of the ranking engine, one prepared script for a device machine (issue 4).
#
# Needs only Python with CuPy, NumPy and SciPy (no Ray, FastAPI or msgspec: it imports
# compute.backend/resident/engine/pagerank/tunkrank and nothing else of the project).
#  1. correctness: CuPy against NumPy on a 1M-edge R-MAT graph, from scratch and over
#     incremental epochs;
#  2. scale: a 500M-edge R-MAT graph generated on the GPU, float32; the time of one
#     PageRank sweep (one iteration) and the memory bandwidth it achieves as a share of
#     4.8 TB/s (H200); from-scratch solves by GMRES (the engine's) and by power iteration;
#     then one incremental epoch at 0.1% delta as the engine runs it (warm-started GMRES).
# Prints one JSON line per step; finishes in a few minutes on an H200.
#
#   bash bench/gpu_check.sh                                   # on the GPU machine
#   GPU_CHECK_DEVICE=cpu GPU_CHECK_SCALE=12 GPU_CHECK_EDGES=40000 GPU_CHECK_SCALE_ON_CPU=1 bash bench/gpu_check.sh  # CPU dry run
set -euo pipefail
cd "$(dirname "$0")/.."
export GPU_CHECK_DEVICE="${GPU_CHECK_DEVICE:-cuda}"
export GPU_CHECK_SCALE="${GPU_CHECK_SCALE:-25}"           # 33.5M vertices
export GPU_CHECK_EDGES="${GPU_CHECK_EDGES:-500000000}"
export GPU_CHECK_PEAK_TBS="${GPU_CHECK_PEAK_TBS:-4.8}"
exec "${PYTHON:-python3}" - <<'PY'
import json, os, sys, time
import numpy as np

sys.path.insert(0, os.getcwd())
from compute.backend import get_backend, numpy_backend
from compute.engine import RankConfig, RankEngine
from compute.pagerank import PageRank
from compute.resident import ResidentGraph

DEVICE = os.environ["GPU_CHECK_DEVICE"]
SCALE = int(os.environ["GPU_CHECK_SCALE"])
EDGES = int(os.environ["GPU_CHECK_EDGES"])
PEAK = float(os.environ["GPU_CHECK_PEAK_TBS"]) * 1e12
A, B, C = 0.57, 0.19, 0.19  # Graph500 R-MAT


def say(**kw):
    print(json.dumps(kw), flush=True)


def rmat(xp, scale, m, seed, chunk=50_000_000):
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
        srcs.append(perm[s]); dsts.append(perm[d])
        del s, d
    return xp.concatenate(srcs), xp.concatenate(dsts)


be = get_backend(DEVICE)
cpu = numpy_backend()
xp = be.xp
info = {"backend": be.name}
if be.is_gpu:
    props = xp.cuda.runtime.getDeviceProperties(0)
    info["device"] = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    info["memory_gib"] = round(xp.cuda.runtime.memGetInfo()[1] / 2**30, 1)
say(step="start", date=time.strftime("%Y-%m-%d"), **info)

# 1. Correctness against NumPy: 1M edges (or the small size of a CPU syntax check).
small_scale, small_m = (16, 1 << 20) if be.is_gpu else (SCALE, EDGES)
s, d = rmat(np, small_scale, small_m, seed=1)
n = 1 << small_scale
keys, counts = np.unique(s.astype(np.int64) * n + d, return_counts=True)
src, dst, w = keys // n, keys % n, counts.astype(np.float64)
engines = {name: RankEngine(RankConfig(tol=1e-9), b) for name, b in (("numpy", cpu), ("device", be))}
for e in engines.values():
    e.update(n, src, dst, w)
rng = np.random.default_rng(2)
for epoch in range(3):
    k = max(4, len(keys) // 1000)
    pick = rng.choice(len(keys), size=k, replace=False)
    dw = np.where(rng.random(k) < 0.5, -w[pick], 1.0)
    w[pick] += dw
    for e in engines.values():
        e.update(n, src[pick], dst[pick], dw)
got = {name: e.host_scores() for name, e in engines.items()}
l1 = {a: float(np.abs(got["numpy"][a] - got["device"][a]).sum()) for a in ("pagerank", "tunkrank")}
ok = l1["pagerank"] < 2e-9 and l1["tunkrank"] < 2e-9 * max(1.0, float(got["numpy"]["tunkrank"].sum()))
say(step="correctness", pairs=int(len(keys)), l1_device_vs_numpy=l1, ok=bool(ok))
del engines, got
if not be.is_gpu and not os.environ.get("GPU_CHECK_SCALE_ON_CPU"):
    say(step="done", note="CPU check: set GPU_CHECK_SCALE_ON_CPU=1 to run the scale step at this size too")
    sys.exit(0 if ok else 1)

# 2. Scale: 500M R-MAT pairs generated on the GPU, float32 resident graph.
t = time.perf_counter()
s, d = rmat(xp, SCALE, EDGES, seed=3)
n = 1 << SCALE
g = ResidentGraph.from_device_edges(n, s, d, xp.ones(len(s), dtype=np.float32), be, dtype=np.float32)
del s, d
if be.is_gpu:
    xp.get_default_memory_pool().free_all_blocks()
be.synchronize()
say(step="build", vertices=n, pairs=g.nnz, seconds=round(time.perf_counter() - t, 1),
    resident_bytes_per_edge=round(g.nbytes() / g.nnz, 2))

cfg = RankConfig(device=DEVICE, dtype="float32", tol=1e-5)
pr = PageRank(g, cfg.damping, cfg.tol, cfg.max_iter, cfg.dense_switch)
pr.solver.grow()
pr.solver.recompute_residual()
for _ in range(2):  # warm up cuSPARSE
    pr.solver._sweep()
be.synchronize()
reps = 10
t = time.perf_counter()
for _ in range(reps):
    pr.solver._sweep()
be.synchronize()
sweep_s = (time.perf_counter() - t) / reps
# The least a pull sweep must move: the in-CSR (4-byte index + 4-byte weight per edge, the row
# pointers), one 4-byte gather per edge, and ~6 passes over n-float vectors (scale, update, residual).
moved = g.nnz * (4 + 4 + 4) + (n + 1) * 4 + 6 * n * 4
say(step="sweep", ms=round(sweep_s * 1000, 2), bytes=moved, tb_per_s=round(moved / sweep_s / 1e12, 3),
    share_of_peak=round(moved / sweep_s / PEAK, 3))

for method in ("krylov", "power"):
    t = time.perf_counter()
    stats = pr.solver.scratch(method)
    be.synchronize()
    say(step="scratch", method=method, ms=round((time.perf_counter() - t) * 1000, 1), iterations=stats.iterations)

# One incremental epoch at 0.1% of the pairs: half new R-MAT pairs, half re-weighted existing ones.
# As RankEngine runs an epoch of that size: no retract; one sweep recomputes the residual, then GMRES.
k = g.nnz // 1000
rs = np.random.default_rng(4)
ns, nd = rmat(np, SCALE, k // 2, seed=5)
rows = rs.integers(0, n, size=k - k // 2)
indptr = be.to_host(g._base_out.indptr)
has = indptr[rows + 1] > indptr[rows]
rows = rows[has]
cols = be.to_host(g._base_out.indices[be.asarray(indptr[rows])])
src = np.concatenate([ns, rows]).astype(np.int64)
dst = np.concatenate([nd, cols]).astype(np.int64)
dw = np.ones(len(src))
method = "push" if len(src) <= cfg.push_max_delta * g.nnz else "sweep"
t = time.perf_counter()
rows_dev = be.asarray(np.unique(src))
if method == "push":
    pr.retract(rows_dev)
else:
    pr.forget()
g.apply(src, dst, dw)
stats = pr.update(rows_dev, method)
be.synchronize()
ms = (time.perf_counter() - t) * 1000
say(step="incremental", delta=float(len(src) / g.nnz), ms=round(ms, 1), method=stats.method,
    iterations=stats.iterations, sweeps=stats.sweeps, target_ms=100)
say(step="done")
PY
