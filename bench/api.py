"""API read throughput and tail latency against a real ``pulsegraph run`` while it ingests.

Starts ``pulsegraph run`` (synthetic tweets at ``--rate`` events/s, real local
Ray actors) on 127.0.0.1, waits for a ranking, then drives each route with
Debian's ``wrk`` (``apt-get install -y wrk``) and prints one Markdown table row
per route for BENCHMARKS.md, with the machine it ran on. The pipeline keeps
ingesting and sealing epochs through the whole run; the row says how many.
``--compute-partitions 1 3`` runs the service once per count, one after the other, for
the reads side by side with the ranking over that many partition actors.

    .venv/bin/python -m bench.api --seconds 20 --connections 64
    .venv/bin/python -m bench.api --seconds 15 --compute-partitions 1 3
    .venv/bin/python -m bench.api --seconds 10 --code /tmp/before   # a worktree of the commit to compare with
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import httpx

from pathlib import Path

from bench.machine import describe as machine

ROUTES = {
    "top-10": "/v1/rank/top?k=10",
    "vertex": "/v1/vertices/user12",
    "neighbors": "/v1/vertices/user12/neighbors",
    # The most used hashtag's taggers: soon past the edges a read on the event loop may take, so its route
    # reads it on a worker thread.
    "hub neighbors": "/v1/vertices/%23tag0/neighbors?direction=in",
    "topics": "/v1/topics?k=20",
    "latest epoch": "/v1/epochs/latest",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def to_ms(value: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", value.strip())
    if not m:
        raise ValueError(f"cannot read wrk's latency {value!r}")
    return float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}[m.group(2)]


def wrk(url: str, seconds: float, connections: int, threads: int) -> dict:
    out = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{connections}", f"-d{int(seconds)}s", "--latency", url],
        capture_output=True, text=True, check=True,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    lat = {q: to_ms(re.search(rf"^\s+{q}%\s+(\S+)", out, re.M).group(1)) for q in ("50", "99")}
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    return {"rps": rps, "p50": lat["50"], "p99": lat["99"], "non2xx": int(bad.group(1)) if bad else 0,
            "socket_errors": errors.group(1) if errors else "", "raw": out}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2, help="wrk threads")
    ap.add_argument("--rate", type=float, default=1000, help="events/s the pipeline ingests meanwhile")
    ap.add_argument("--routes", default=",".join(ROUTES), help=f"comma-separated, of: {', '.join(ROUTES)}")
    ap.add_argument("--compute-partitions", type=int, nargs="+", default=[1], help="one service run per count, in turn")
    ap.add_argument("--code", type=Path, help="run the service from this checkout (e.g. a worktree of the commit to compare with)")
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        print("bench.api needs wrk: apt-get install -y wrk", file=sys.stderr)
        return 2
    print(f"machine: {machine()}")
    print(f"wrk -t{args.threads} -c{args.connections} -d{int(args.seconds)}s, pipeline ingesting {args.rate:g} events/s\n")
    print("| partitions | route | requests/s | p50 ms | p99 ms | non-2xx | epochs sealed during the run |")
    print("|---|---|---|---|---|---|---|")
    for parts in args.compute_partitions:
        serve_and_drive(args, parts)
    return 0


def serve_and_drive(args: argparse.Namespace, parts: int) -> None:
    """One ``pulsegraph run`` with ``parts`` ranking partitions, each route driven by wrk in turn."""
    # Another checkout's code is run from its folder with ``-m``, which puts that folder first on the path.
    exe = [sys.executable, "-m", "pulsegraph.cli"] if args.code else [os.path.join(os.path.dirname(sys.executable), "pulsegraph")]
    env = {**os.environ, "PYTHONPATH": str(args.code)} if args.code else None
    port = free_port()
    data = tempfile.mkdtemp(prefix="pg-bench-api-")
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [*exe, "run", "--port", str(port), "--data-dir", data, "--rate", str(args.rate), "--log-level", "WARNING",
         "--compute-partitions", str(parts)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=str(args.code) if args.code else data, env=env,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, "pulsegraph run exited"
            assert time.monotonic() < deadline, "no ranking within 180 s"
            try:
                if len(httpx.get(base + ROUTES["top-10"], timeout=2).json().get("items", [])) == 10:
                    break
            except (httpx.TransportError, ValueError):
                pass
            time.sleep(0.5)
        wrk(base + ROUTES["top-10"], 3, args.connections, args.threads)  # warm-up
        for name in args.routes.split(","):
            e0 = httpx.get(base + "/v1/epochs/latest", timeout=5).json()["epoch"]
            r = wrk(base + ROUTES[name], args.seconds, args.connections, args.threads)
            e1 = httpx.get(base + "/v1/epochs/latest", timeout=5).json()["epoch"]
            print(f"| {parts} | `{ROUTES[name]}` | {r['rps']:,.0f} | {r['p50']:.1f} | {r['p99']:.1f} | {r['non2xx']} | {e1 - e0} |", flush=True)
            if r["socket_errors"]:
                print(f"  (wrk socket errors: {r['socket_errors']})")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
