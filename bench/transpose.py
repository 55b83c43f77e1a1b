"""A pull sweep ``A^T v`` on the host: a by-destination CSR's gather against SciPy's transpose of the by-source one.

The ranked graph (:mod:`pulsegraph.compute.resident`) keeps only the by-source CSR on the host and sweeps
with its transpose (a scatter into the destinations). This measures both, side by side in one
process, on a graph of the 10-minute soak's size: sources uniform, destinations heavy-tailed as
mentions are, or uniform too (``--uniform``).

    .venv/bin/python -m bench.transpose
    .venv/bin/python -m bench.transpose --uniform
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse as sp

from bench.machine import describe as machine


def best_ms(f, repeat: int) -> float:
    f()  # warm
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times) * 1000.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vertices", type=int, default=3_000_000)
    ap.add_argument("--edges", type=int, default=27_000_000)
    ap.add_argument("--uniform", action="store_true", help="destinations uniform (default: Pareto, as mentions)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    n, m = args.vertices, args.edges
    rng = np.random.default_rng(0)
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n, m) if args.uniform else (rng.pareto(1.2, m) * 1000).astype(np.int64) % n
    by_src = sp.csr_matrix((np.ones(m), (src, dst)), shape=(n, n))
    by_src.sum_duplicates()
    by_dst = by_src.T.tocsr()
    v = rng.random(n)
    gather = best_ms(lambda: by_dst @ v, args.repeat)
    scatter = best_ms(lambda: by_src.T @ v, args.repeat)
    assert np.allclose(by_dst @ v, by_src.T @ v)
    print(f"# {machine()}; {n:,} vertices, {by_src.nnz:,} pairs, destinations {'uniform' if args.uniform else 'Pareto(1.2)'}")
    print("| sweep | ms (best of %d) | bytes a pair kept |" % args.repeat)
    print("|---|---|---|")
    print(f"| by-destination CSR (gather) | {gather:.0f} | 24 (both CSRs) |")
    print(f"| transpose of the by-source CSR (scatter) | {scatter:.0f} | 12 |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
