"""Soak: the service as an operator runs it, on the growing stream, watched from outside.

Starts ``pulsegraph run`` as its own process (synthetic tweets, ``--users`` large
enough that the graph keeps growing), and every ``--every`` seconds samples

* the resident memory of every process of the service by role: the API process
  (the driver: uvicorn, the result store, the feed), ingest actors, shards, the
  epoch coordinator, the compute actor, and Ray's own processes (GCS, raylet,
  idle workers); read from ``/proc`` (RSS, and its anonymous part: file pages of
  memory-mapped archives are the kernel's to drop, anonymous ones are not), and the
  proportional set size (PSS: a page shared by k processes counts 1/k in each, so
  the object store's shared pages, mapped by the store and by every reader, and the
  shared libraries count once in the sum where RSS counts them in every process);
* the CPU time (user + system) every process of the service has used, by the same roles: on a
  small machine every stage competes for the same cores, so the share each takes is what the
  sealed rate trades against (a process that exits takes its seconds with it: Ray's idle workers);
* from the API: the newest epochs (live edges, records, timeliness, when each was
  sealed) and ``/health`` (throttling, memory budget).

At the end it also reads what Ray's object store spilled to disk and read back (the raylet's log of
the service's session): a store too small for what is in flight spills rather than fails, at a cost.
It prints the BENCHMARKS.md rows (per phase and a summary: peak memory,
bytes per live edge above the first epoch, median time between epochs over the
last minutes, timeliness p99, events/s sealed) and writes a PNG plot of memory by
role and timeliness against time, plus the raw samples as JSON.

    .venv/bin/python -m bench.soak --minutes 10 --users 3000000 --hashtags 100000
    .venv/bin/python -m bench.soak --minutes 60 --rate 1000          # the default rate

Every server it starts listens on 127.0.0.1 and is stopped by its process group.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

from bench.machine import describe as machine
from pulsegraph.memory import process_tree

ROLES = ("api", "ingest", "shards", "coordinator", "compute", "ray")
# Ray names a worker's process after its actor class ("ray::ShardActor", "ray::ShardActor.apply").
_ACTOR_ROLES = {"IngestActor": "ingest", "ShardActor": "shards", "EpochCoordinator": "coordinator", "ComputeActor": "compute"}
PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def role_of(pid: int, root: int) -> str:
    if pid == root:
        return "api"
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return "ray"
    if cmd.startswith("ray::"):
        return _ACTOR_ROLES.get(cmd[5:].split(".")[0].split()[0], "ray")
    return "ray"


def memory(pid: int) -> tuple[int, int, int]:
    """(RSS, anonymous RSS, PSS) in bytes."""
    rss = anon = pss = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("RssAnon:"):
                anon = int(line.split()[1]) * 1024
        # The kernel sums the process's mappings here (a page-table walk: milliseconds for gigabytes).
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                pss = int(line.split()[1]) * 1024
                break
    except OSError:
        pass
    return rss, anon, pss


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used so far (0 once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    # After the command's closing parenthesis (it may hold spaces): state is field 3, utime 14, stime 15.
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def get_json(url: str, timeout: float = 5.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return json.loads(r.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def sample(root: int, base: str) -> dict:
    by_role = {r: [0, 0, 0, 0.0] for r in ROLES}
    for pid in process_tree(root):
        rss, anon, pss = memory(pid)
        acc = by_role[role_of(pid, root)]
        acc[0] += rss
        acc[1] += anon
        acc[2] += pss
        acc[3] += cpu_seconds(pid)
    health = get_json(base + "/health") or {}
    epochs = (get_json(base + "/v1/epochs?limit=1000") or {}).get("items", [])
    return {"t": time.time(), "rss": {r: v[0] for r, v in by_role.items()}, "anon": {r: v[1] for r, v in by_role.items()},
            "pss": {r: v[2] for r, v in by_role.items()}, "cpu": {r: v[3] for r, v in by_role.items()}, "health": health, "epochs": epochs}


_SESSION = re.compile(r"(/\S+/session_[^/\s]+)/sockets/raylet")
_SPILL = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)[^]]*\].*?(Spilled|Restored) (\d+) MiB, (\d+) objects", re.M)


def ray_session(root: int) -> Path | None:
    """The Ray session folder of the service below ``root`` (from its raylet's command line), if one runs."""
    for pid in process_tree(root):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        m = _SESSION.search(cmd)
        if m:
            return Path(m.group(1))
    return None


def spills(session: Path | None, started: float) -> dict:
    """What Ray's object store spilled to disk and read back during the run, from the raylet's log: its
    lines count up since the start (MiB, objects), and the first spill's time after ``started``. An
    object store too small for what is in flight spills instead of failing, at a cost in CPU and disk."""
    out = {"spilled_mib": 0, "spilled_objects": 0, "restored_mib": 0, "restored_objects": 0, "first_spill_s": None}
    try:
        text = (session / "logs" / "raylet.out").read_text(errors="replace") if session else ""
    except OSError:
        return out
    for stamp, kind, mib, objects in _SPILL.findall(text):
        key = "spilled" if kind == "Spilled" else "restored"
        out[f"{key}_mib"], out[f"{key}_objects"] = max(out[f"{key}_mib"], int(mib)), max(out[f"{key}_objects"], int(objects))
        if key == "spilled" and out["first_spill_s"] is None:
            out["first_spill_s"] = time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) - started
    return out


def _killed_workers(log_path: Path) -> int:
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return 0
    return text.count("OutOfMemoryError") + text.count("was killed") + text.count("SYSTEM_ERROR")


def summarize(samples: list[dict], started: float, tail_s: float) -> dict:
    """The figures the issue's targets name, from the samples and the epochs the API served."""
    epochs: dict[int, dict] = {}
    for s in samples:
        for e in s["epochs"]:
            epochs[e["epoch"]] = e
    eps = [epochs[k] for k in sorted(epochs)]

    def ts(e: dict, key: str = "committed_at") -> float:
        import datetime as dt

        return dt.datetime.fromisoformat(e[key]).timestamp()

    totals = [sum(s["rss"].values()) for s in samples]
    anon = [sum(s["anon"].values()) for s in samples]
    out: dict = {"peak_rss": max(totals, default=0), "peak_anon": max(anon, default=0), "epochs": len(eps)}
    if samples and "pss" in samples[0]:
        out["peak_pss"] = max(sum(s["pss"].values()) for s in samples)
    if len(eps) >= 2:
        t = np.array([ts(e) for e in eps])
        gaps = np.diff(t)
        tail = t[1:] >= t[-1] - tail_s
        out["gap_median_tail_s"] = float(np.median(gaps[tail])) if tail.any() else float("nan")
        out["timeliness_p99_ms"] = float(np.percentile([e["timeliness_ms"]["p99"] for e in eps], 99))
        out["timeliness_p99_tail_ms"] = float(np.percentile([e["timeliness_ms"]["p99"] for e, keep in zip(eps[1:], tail) if keep] or [0], 99))
        # How long a reader waited for each ranked epoch after it was sealed (the API's ranked_at).
        lag = [ts(e, "ranked_at") - ts(e) for e, keep in zip(eps[1:], tail) if keep and e.get("ranked_at")]
        if lag:
            out["ranked_lag_tail_s"] = {q: float(np.percentile(lag, p)) for q, p in (("p50", 50), ("p90", 90), ("max", 100))}
        out["events_per_s"] = (eps[-1]["records"] - eps[0]["records"]) / max(t[-1] - t[0], 1e-9)
        out["live_edges"] = eps[-1]["edges"]
        out["vertices"] = eps[-1]["vertices"]
        out["records"] = eps[-1]["records"]
    first = next((s for s in samples if s["epochs"]), None)
    if len(samples) >= 4:
        # The whole service's memory over the second half of the run, MB a minute: what says whether a
        # window's memory is flat once the window (and the id-reuse period) has filled.
        half = [s for s in samples if s["t"] >= (samples[0]["t"] + samples[-1]["t"]) / 2]
        t = np.array([s["t"] for s in half]) / 60.0
        rss = np.array([sum(s["rss"].values()) for s in half]) / 1e6
        if len(half) >= 2 and t[-1] > t[0]:
            out["rss_slope_tail_mb_per_min"] = float(np.polyfit(t - t[0], rss, 1)[0])
    # Bytes per live edge grown mean something only while the live edges grow: with a window they
    # stop (or shrink), and growth over a tiny or negative count is noise.
    if first is not None and out.get("live_edges") and out["live_edges"] - first["epochs"][0]["edges"] > 0.1 * out["live_edges"]:
        e0 = first["epochs"][0]["edges"]
        grown = out["live_edges"] - e0
        last = samples[-1]
        out["bytes_per_edge"] = (sum(last["rss"].values()) - sum(first["rss"].values())) / grown
        out["anon_bytes_per_edge"] = (sum(last["anon"].values()) - sum(first["anon"].values())) / grown
        if "pss" in first:
            out["pss_bytes_per_edge"] = (sum(last["pss"].values()) - sum(first["pss"].values())) / grown
            out["role_pss_bytes_per_edge"] = {r: (last["pss"][r] - first["pss"][r]) / grown for r in ROLES}
        out["role_bytes_per_edge"] = {r: (last["rss"][r] - first["rss"][r]) / grown for r in ROLES}
    if len(samples) >= 2 and "cpu" in samples[0]:
        # Cores each role kept busy on average between the first and the last sample.
        wall = max(samples[-1]["t"] - samples[0]["t"], 1e-9)
        out["role_cores"] = {r: max(samples[-1]["cpu"][r] - samples[0]["cpu"][r], 0.0) / wall for r in ROLES}
    out["throttled_samples"] = sum(1 for s in samples if s["health"].get("ingest") == "throttled")
    out["duration_s"] = samples[-1]["t"] - started if samples else 0.0
    return out


def plot(samples: list[dict], started: float, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = np.array([s["t"] - started for s in samples]) / 60.0
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    bottom = np.zeros(len(samples))
    for role in ROLES:
        gb = np.array([s["rss"][role] for s in samples]) / 1e9
        ax1.fill_between(t, bottom, bottom + gb, label=role, step="post", alpha=0.8)
        bottom += gb
    ax1.set_ylabel("resident memory, GB (stacked)")
    ax1.legend(loc="upper left", fontsize=8, ncol=3)
    ax1.set_title(title, fontsize=9)
    edges = np.array([(s["epochs"][0]["edges"] if s["epochs"] else 0) for s in samples]) / 1e6
    ax1b = ax1.twinx()
    ax1b.plot(t, edges, color="black", lw=1.2, label="live edges (M)")
    ax1b.set_ylabel("live edges, millions")
    p99 = [(s["t"] - started, s["epochs"][0]["timeliness_ms"]["p99"] / 1000) for s in samples if s["epochs"]]
    if p99:
        x, y = zip(*p99)
        ax2.plot(np.array(x) / 60.0, y, label="timeliness p99 (s)")
    thr = [(s["t"] - started) / 60.0 for s in samples if s["health"].get("ingest") == "throttled"]
    if thr:
        ax2.scatter(thr, [0] * len(thr), marker="|", color="red", label="ingest throttled")
    ax2.set_ylabel("seconds")
    ax2.set_xlabel("minutes")
    ax2.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=0, help="events/s of the synthetic stream (0: as fast as the pipeline takes them)")
    ap.add_argument("--users", type=int, default=3_000_000)
    ap.add_argument("--hashtags", type=int, default=100_000)
    ap.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    ap.add_argument("--tail", type=float, default=180.0, help="the last seconds over which epoch gaps are summarized")
    ap.add_argument("--out", type=Path, default=Path("bench/out"), help="folder for the plot and the samples")
    ap.add_argument("--name", default=None, help="file stem of the outputs (default: soak-<minutes>m-<rate>)")
    ap.add_argument("--no-plot", action="store_true", help="print the figures only (no matplotlib needed)")
    ap.add_argument("extra", nargs="*", help="more `pulsegraph run` flags, after --")
    args = ap.parse_args()
    if not args.no_plot:
        try:
            import matplotlib  # noqa: F401, PLC0415 - checked before a run of many minutes, not after it
        except ImportError:
            print("bench.soak draws its plot with matplotlib, from the bench extra: .venv/bin/pip install -e '.[bench]' "
                  "(or run with --no-plot)", file=sys.stderr)
            return 2

    data = Path(tempfile.mkdtemp(prefix="pg-soak-"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = data / "service.log"
    cmd = [sys.executable, "-m", "pulsegraph.cli", "run", "--rate", str(args.rate), "--users", str(args.users),
           "--hashtags", str(args.hashtags), "--data-dir", str(data / "data"), "--port", str(port), *args.extra]
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.name or f"soak-{args.minutes:g}m-{'full' if not args.rate else int(args.rate)}"
    print(" ".join(cmd), file=sys.stderr)
    with open(log_path, "wb") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
    started = time.time()
    samples: list[dict] = []
    session: Path | None = None
    try:
        deadline = started + args.minutes * 60.0
        while time.time() < deadline and proc.poll() is None:
            s = sample(proc.pid, base)
            samples.append(s)
            session = session or ray_session(proc.pid)
            e = s["epochs"][0] if s["epochs"] else None
            total = sum(s["rss"].values()) / 1e9
            print(
                f"\r{(s['t'] - started) / 60:5.1f} min  {total:5.1f} GB  "
                + (f"epoch {e['epoch']}  edges {e['edges'] / 1e6:.2f}M  records {e['records'] / 1e6:.2f}M  "
                   f"p99 {e['timeliness_ms']['p99'] / 1000:.1f}s  " if e else "")
                + f"ingest {s['health'].get('ingest', '-')}   ",
                end="", file=sys.stderr,
            )
            time.sleep(max(0.0, args.every - (time.time() - s["t"])))
        print(file=sys.stderr)
    finally:
        alive = proc.poll() is None
        if alive:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        killed = _killed_workers(log_path)
        shutil.copy(log_path, args.out / f"{stem}.log")
        shutil.rmtree(data, ignore_errors=True)
    if not samples:
        print("no samples", file=sys.stderr)
        return 1
    summary = summarize(samples, started, args.tail)
    summary["killed_or_oom_lines"] = killed
    summary["service_exited_early"] = not alive
    summary.update(spills(session, started))
    (args.out / f"{stem}.json").write_text(json.dumps({"summary": summary, "samples": samples, "cmd": cmd}))
    gb = 1e9
    print(f"\nmachine: {machine()}\ncommand: pulsegraph {' '.join(cmd[3:])}")
    print(json.dumps({k: v for k, v in summary.items() if k not in ("role_bytes_per_edge", "role_pss_bytes_per_edge", "role_cores")}, indent=1))
    print("| run | minutes | live edges | peak memory (RSS / anon / PSS) | B per live edge (RSS / PSS) | epoch gap median, last min | timeliness p99 | events/s sealed | killed | memory slope, 2nd half |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {stem} | {summary['duration_s'] / 60:.1f} | {summary.get('live_edges', 0) / 1e6:.2f} M | "
        f"{summary['peak_rss'] / gb:.1f} / {summary['peak_anon'] / gb:.1f} / {summary.get('peak_pss', float('nan')) / gb:.1f} GB | "
        + (f"{summary['bytes_per_edge']:.0f} / {summary.get('pss_bytes_per_edge', float('nan')):.0f} | " if "bytes_per_edge" in summary
           else "n/a: live edges did not grow | ") +
        f"{summary.get('gap_median_tail_s', float('nan')):.2f} s | {summary.get('timeliness_p99_ms', float('nan')) / 1000:.1f} s | "
        f"{summary.get('events_per_s', 0):,.0f} | {killed} | {summary.get('rss_slope_tail_mb_per_min', float('nan')):+.0f} MB/min |"
    )
    per, per_pss = summary.get("role_bytes_per_edge", {}), summary.get("role_pss_bytes_per_edge", {})
    last = samples[-1]
    cores = summary.get("role_cores", {})
    print(f"\n| role | RSS / PSS at the end | B per live edge grown (RSS / PSS) | cores busy (of {os.cpu_count()}) |")
    print("|---|---|---|---|")
    for r in ROLES:
        print(f"| {r} | {last['rss'][r] / gb:.2f} / {last.get('pss', {}).get(r, float('nan')) / gb:.2f} GB | "
              f"{per.get(r, float('nan')):.0f} / {per_pss.get(r, float('nan')):.0f} | {cores.get(r, float('nan')):.2f} |")
    # Last: the rows above are printed (and the samples saved) even where the plot cannot be drawn.
    if not args.no_plot:
        plot(samples, started, args.out / f"{stem}.png", f"{' '.join(cmd[3:])}\n{machine()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
