"""How soon a restarted service answers again: its retained epochs, then a new one.

    .venv/bin/python -m bench.restart --users 3000000 --run 120 [--code WORKTREE]

Runs ``pulsegraph run`` on the synthetic stream (``--rate 0``: as fast as it goes) for ``--run``
seconds, SIGKILLs every process of it (the driver, Ray's daemons, the actors: a crash, no final
checkpoint), starts it again on the same data folder and polls ``/v1/epochs`` every 20 ms from the
moment the process is started. Prints, from the process start: when the API first answered,
when it first answered with the retained epochs (and that they are the ones served before the
crash, fact for fact), when the first epoch newer than those was served, and the API process's peak
resident memory by then (it takes that epoch in whole: a restored compute stage publishes the whole graph).

``--from DIR`` restarts on a copy of a stopped service's data folder instead (an operator's, grown for
longer than a bench run can wait), with no run and no crash before: run it once with ``--code`` and
once without, each on its own copy, for a side-by-side figure on the same graph.

    .venv/bin/python -m bench.restart --from /srv/pulsegraph/data [--code WORKTREE] [--times 2]

With ``--times 2`` it is stopped cleanly (SIGINT) after the first start and started again on the same copy: the
second start is the operator's restart after a clean stop, which finds the graph view that stop kept
(:mod:`pulsegraph.api.viewfile`). Each start also says when the graph of the newest epoch taken back (the top
vertex's neighbors) was first answered.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

EXE = os.path.join(os.path.dirname(sys.executable), "pulsegraph")
POLL_S = 0.02
# A clean stop ranks and checkpoints what was sealed first (pulsegraph.topology.FINISH_S), then keeps the graph view.
STOP_WAIT_S = 180.0


@dataclass
class Restart:
    before: list[dict]  # /v1/epochs items served before the crash, newest first
    first_answer_s: float  # the API answered at all (any status)
    archived_s: float  # it answered /v1/epochs with epochs, all from before the crash
    first_archived: list[dict]  # that answer's items
    first_health: dict  # /health right after it
    new_epoch_s: float  # an epoch newer than every one served before the crash
    api_peak_rss: int  # bytes: the service process's (the API's) peak resident set by then
    # The neighbors of the top vertex as of the newest epoch taken back were answered (None: not before the new epoch).
    graph_s: float | None = None
    probed: dict | None = None  # the answers to the probe paths asked the moment the graph was first answered
    stop_s: float | None = None  # the clean stop (SIGINT) that followed, until the process exited


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    def __init__(self, data_dir: Path, log_path: Path, args: list[str], code: Path | None = None) -> None:
        self.data_dir, self.log_path, self.args = data_dir, log_path, args
        # Another checkout's code (a worktree of an older commit), run from its folder: ``-m`` puts the
        # working folder first on the module path, before PYTHONPATH.
        self.exe = [sys.executable, "-m", "pulsegraph.cli"] if code else [EXE]
        self.env = {**os.environ, "PYTHONPATH": str(code)} if code else None
        self.cwd = str(code) if code else None
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def start(self) -> float:
        with open(self.log_path, "ab") as log:
            t0 = time.monotonic()
            self.proc = subprocess.Popen(
                [*self.exe, "run", "--port", str(self.port), "--data-dir", str(self.data_dir), *self.args],
                stdout=log, stderr=log, start_new_session=True, env=self.env, cwd=self.cwd,
            )
        return t0

    def get(self, path: str, **params) -> httpx.Response | None:
        try:
            # No params: None, not {} (which httpx takes as "no query" and drops the one in ``path``).
            return httpx.get(f"http://127.0.0.1:{self.port}{path}", params=params or None, timeout=2)
        except httpx.TransportError:
            return None

    def answer(self, path: str, tries: int = 5) -> httpx.Response | None:
        """:meth:`get`, asked again where no answer came within its timeout (a start shares two cores with Ray's)."""
        for _ in range(tries):
            if (r := self.get(path)) is not None:
                return r
        return None

    def epochs(self) -> list[dict] | None:
        r = self.get("/v1/epochs", limit=1000)
        return r.json()["items"] if r is not None and r.status_code == 200 else None

    def alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError("the service exited:\n" + self.log_path.read_bytes()[-3000:].decode(errors="replace"))

    def peak_rss(self) -> int:
        """The service process's peak resident set (Linux's VmHWM), in bytes; 0 where it cannot be read."""
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                return next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:")), 0)
        except OSError:
            return 0

    def kill(self) -> None:
        """SIGKILL to every process of the service's session, as a crash of the machine's service would."""
        subprocess.run(["pkill", "-KILL", "-s", str(self.proc.pid)], check=False)
        self.proc.wait(timeout=30)

    def stop(self) -> float | None:
        """SIGINT, and what is left of the session SIGKILLed once the process exited (or after
        :data:`STOP_WAIT_S`); the seconds the process took to exit (None: it did not, or had before)."""
        if self.proc is None:
            return None
        took = None
        if self.proc.poll() is None:
            t0 = time.monotonic()
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=STOP_WAIT_S)
                took = time.monotonic() - t0
            except subprocess.TimeoutExpired:
                pass
        subprocess.run(["pkill", "-KILL", "-s", str(self.proc.pid)], check=False)
        return took


def measure(
    work: Path, args: list[str], run_s: float, min_epochs: int = 3, timeout: float = 180.0, code: Path | None = None,
    before_stop: Callable[[Service], None] | None = None,
) -> Restart:
    """Run the service for ``run_s`` seconds (and until it served ``min_epochs``), crash it, restart it; then stop it
    cleanly (SIGINT), after ``before_stop(service)`` when given."""
    svc = Service(work / "data", work / "service.log", args, code)
    svc.start()
    try:
        t0, before = time.monotonic(), []
        while time.monotonic() - t0 < timeout and (time.monotonic() - t0 < run_s or len(before) < min_epochs):
            svc.alive()
            before = svc.epochs() or before
            time.sleep(0.5)
        if len(before) < min_epochs:
            raise RuntimeError(f"{len(before)} epochs served in {timeout} s")
        # The newest ones, as the API had them just before the crash (the archive writes each as it comes).
        before = svc.epochs() or before
        svc.kill()
        got = restarted(svc, before, timeout)
        if before_stop is not None:
            before_stop(svc)
        return got
    finally:
        svc.stop()


def measure_from(folder: Path, work: Path, args: list[str], timeout: float = 600.0, code: Path | None = None,
                 times: int = 1) -> list[Restart]:
    """Start the service on a copy of ``folder`` (a stopped service's data folder) and time it as a restart; ``times``
    more than 1: stop it cleanly (SIGINT) after each and start it again on the same copy."""
    shutil.copytree(folder, work / "data", symlinks=True)
    (work / "data" / "LOCK").unlink(missing_ok=True)  # the copy's own lock is taken anew
    out = []
    for _ in range(times):
        os.sync()  # the folder written out first: its writeback would slow the start it times (seconds at gigabytes)
        svc = Service(work / "data", work / "service.log", args, code)
        try:
            out.append(restarted(svc, [], timeout))
        finally:
            stop_s = svc.stop()
        out[-1].stop_s = stop_s
    return out


def restarted(svc: Service, before: list[dict], timeout: float, probe: tuple[str, ...] = ()) -> Restart:
    """Start ``svc`` on its data folder and poll it until it serves an epoch newer than all it took back; ``probe``:
    paths asked (status and body) the moment the graph of the newest epoch taken back is first answered."""
    t0 = svc.start()
    probed = None
    first = archived = new = graph = None
    first_items: list[dict] = []
    health: dict = {}
    newest = before[0]["epoch"] if before else 0
    neighbors: str | None = None  # the graph route asked of the newest epoch taken back
    while time.monotonic() - t0 < timeout and new is None:
        svc.alive()
        r = svc.get("/v1/epochs", limit=1000)
        now = time.monotonic() - t0
        if r is not None and first is None:
            first = now
        items = r.json()["items"] if r is not None and r.status_code == 200 else []
        if items and archived is None:
            archived, first_items = now, items
            # Newer than every epoch taken back: one archived between the last read and the kill is not new.
            newest = max(newest, items[0]["epoch"])
            health = (svc.get("/health") or httpx.Response(503, json={})).json()
            top = svc.get("/v1/rank/top", k=1, epoch=items[0]["epoch"])
            if top is not None and top.status_code == 200 and top.json()["items"]:
                neighbors = f"/v1/vertices/{top.json()['items'][0]['vertex']}/neighbors?epoch={items[0]['epoch']}"
        if items and items[0]["epoch"] > newest:
            new = now
        if neighbors is not None and graph is None:
            g = svc.get(neighbors)
            if g is not None and g.status_code == 200:
                graph = time.monotonic() - t0
                probed = {p: (r.status_code, r.json()) for p in probe if (r := svc.answer(p)) is not None}
        time.sleep(POLL_S)
    if first is None or archived is None or new is None:
        raise RuntimeError(f"no answer, retained epochs or new epoch within {timeout} s (first {first}, archived {archived})")
    return Restart(before, first, archived, first_items, health, new, svc.peak_rss(), graph, probed)


def main() -> int:
    from bench.machine import describe as machine

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", type=int, default=3_000_000)
    ap.add_argument("--run", type=float, default=120.0, help="seconds the service runs before the crash")
    ap.add_argument("--code", type=Path, help="run the service from this checkout (e.g. a worktree of the commit to compare with)")
    ap.add_argument("--log-level", default="WARNING", help="the service's (its log is service.log in the folder printed)")
    ap.add_argument("--from", dest="folder", type=Path, help="restart on a copy of this stopped service's data folder, "
                    "with no run and no crash before")
    ap.add_argument("--service-arg", action="append", default=[], help="one more argument of pulsegraph run, in one word "
                    "(repeat it: --service-arg=--compute-partitions=2 --service-arg=--checkpoint-whole-every=1; with --from, "
                    "the stopped service's settings, or its checkpoint is not read back whole)")
    ap.add_argument("--times", type=int, default=1, help="with --from: stop cleanly (SIGINT) after each restart and "
                    "start again on the same copy, this many times in all")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pg-restart-"))
    print(f"work folder: {work}", file=sys.stderr)
    service_args = ["--rate", "0", "--users", str(args.users), "--log-level", args.log_level, *args.service_arg]
    if args.folder is not None:
        print(f"machine: {machine()}")
        for i, got in enumerate(measure_from(args.folder, work, service_args, code=args.code, times=args.times)):
            newest = got.first_archived[0]
            graph = "not answered before it" if got.graph_s is None else f"answered {got.graph_s:.2f} s"
            print(f"start {i + 1} on a copy of {args.folder}: {len(got.first_archived)} retained epochs, newest "
                  f"{newest['epoch']} ({newest['vertices']:,} vertices, {newest['edges']:,} edges)")
            print(f"from the process start: API answering {got.first_answer_s:.2f} s; retained epochs answered "
                  f"{got.archived_s:.2f} s; the graph of the newest {graph}; first new epoch {got.new_epoch_s:.2f} s; "
                  f"API peak {got.api_peak_rss / 2**30:.2f} GiB; its clean stop "
                  + ("did not end" if got.stop_s is None else f"{got.stop_s:.1f} s"))
        return 0
    got = measure(work, service_args, args.run, code=args.code)
    before = {e["epoch"]: e for e in got.before}
    # (An epoch archived between the last read and the kill is newer than all before: not compared.)
    same = all(before[e["epoch"]] == e for e in got.first_archived if e["epoch"] in before)
    print(f"machine: {machine()}")
    print(f"before the crash: {len(got.before)} epochs served, newest {got.before[0]['epoch']} "
          f"({got.before[0]['vertices']:,} vertices, {got.before[0]['edges']:,} edges)")
    print(f"after the restart, from the process start: API answering {got.first_answer_s:.2f} s; "
          f"{len(got.first_archived)} retained epochs answered {got.archived_s:.2f} s "
          f"({'each as before the crash' if same else 'NOT as before the crash'}); first new epoch {got.new_epoch_s:.2f} s; "
          f"API peak {got.api_peak_rss / 2**30:.2f} GiB")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
