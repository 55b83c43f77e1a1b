"""The service exposed: a real ``pulsegraph run`` (embedded Ray, synthetic stream) probed as an attacker would, on
127.0.0.1 only, with bounded counts and time: what listens where, which processes hold the token, a
connection flood, huge and slow request heads, idle connections.

The service runs with a small open-files limit (FILES), as a crowded host would give it, so that a flood
without the connection cap would exhaust it (and the result archive with it).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import resource
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import pytest

from tests.pulsegraph.test_cli import EXE, free_port

# Each test starts the service as a process of its own (a real Ray instance in it).
pytestmark = pytest.mark.integration

TOKEN = secrets.token_urlsafe(32)
# The service's descriptor limit: its ~200 descriptors of its own plus the 600 connections below leave
# room; a flood of FLOOD sockets without the cap would not.
FILES = 2048
MAX_CONNECTIONS = 600
FLOOD = 3000
HEADER_TIMEOUT_S = 3.0
KEEP_ALIVE_S = 2.0


@dataclass
class Service:
    proc: subprocess.Popen
    port: int
    data: Path
    log: Path

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def _limit_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FILES, FILES))


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    top = tmp_path_factory.mktemp("exposed")
    port = free_port()
    log = top / "service.log"
    env = {**os.environ, "PULSEGRAPH_API_TOKEN": TOKEN}
    args = [
        EXE, "run", "--port", str(port), "--data-dir", str(top / "data"), "--epoch-interval", "200ms", "--num-cpus", "4",
        "--rate", "2000", "--users", "2000", "--hashtags", "100", "--max-connections", str(MAX_CONNECTIONS),
        "--header-timeout", f"{HEADER_TIMEOUT_S}s", "--keep-alive-timeout", f"{KEEP_ALIVE_S}s",
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_limit_files,
                                start_new_session=True, cwd=top)
    svc = Service(proc, port, top / "data", log)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, svc.log_text()[-4000:]
            assert time.monotonic() < deadline, "no ranked epoch within 180 s:\n" + svc.log_text()[-4000:]
            try:
                if httpx.get(svc.url("/health"), timeout=2).json().get("epoch", 0) >= 5:
                    break
            except (httpx.TransportError, ValueError):
                pass
            time.sleep(0.3)
        yield svc
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# ---- helpers -----------------------------------------------------------------------------------
def get(port: int, path: str, headers: dict | None = None, timeout: float = 5.0) -> tuple[int, bytes, float]:
    """One GET on a fresh connection (raw socket, Connection: close): status, body and seconds taken."""
    lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    elapsed = time.perf_counter() - t0
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body, elapsed


@contextlib.contextmanager
def quiet_gc():
    """No garbage collection in this (large) test process while it times the server: a full collection
    here takes longer than the answers it would be added to."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def top_latency(port: int) -> float:
    status, body, elapsed = get(port, "/v1/rank/top?k=10")
    assert status == 200 and orjson.loads(body)["items"], body[:200]
    return elapsed


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def name(pid: int) -> str:
    """The process's name as ps shows it (``gcs_server``, ``raylet``, ``ray::ShardActor``)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _address(hex_addr: str) -> str:
    addr, port = hex_addr.split(":")
    raw = bytes.fromhex(addr)
    if len(raw) == 4:
        return f"{socket.inet_ntop(socket.AF_INET, raw[::-1])}:{int(port, 16)}"
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return f"[{socket.inet_ntop(socket.AF_INET6, words)}]:{int(port, 16)}"


def listening(pids: list[int]) -> list[tuple[int, str, str]]:
    """(pid, process, local address) of every TCP socket in LISTEN state that one of ``pids`` holds."""
    inodes: dict[str, str] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A":  # TCP_LISTEN
                inodes[f[9]] = _address(f[1])
    out = []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                out.append((pid, name(pid), inodes[target[8:-1]]))
    return out


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


# ---- who holds the token, what listens where ---------------------------------------------------------
def test_no_ray_process_has_the_token_in_its_environment(service):
    pids = descendants(service.proc.pid)
    names = " ".join(command(p) for p in pids)
    # The real thing, not an empty list: Ray's GCS, its raylet and the pipeline's actors are among them.
    assert "gcs_server" in names and "raylet" in names and names.count("ray::") >= 4, names
    holders = []
    for pid in pids:
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if TOKEN.encode() in env or TOKEN.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
            holders.append(command(pid)[:120])
    assert holders == [], f"the API token reached {holders}"


def test_everything_the_service_starts_listens_on_loopback_only(service):
    sockets = listening([service.proc.pid, *descendants(service.proc.pid)])
    names = " ".join(s[1] for s in sockets)
    assert any(s[2] == f"127.0.0.1:{service.port}" for s in sockets), sockets  # the API itself
    assert "gcs_server" in names and "raylet" in names, sockets
    exposed = [s for s in sockets if not s[2].startswith(("127.0.0.1:", "[::1]:", "[::ffff:127.0.0.1]:"))]
    assert exposed == [], f"listening beyond loopback: {exposed}"


# ---- connection flood ----------------------------------------------------------------------------------
def _archived(data: Path) -> set[int]:
    return {int(p.name[6:18]) for p in (data / "results").glob("epoch-*.res")}


def test_a_connection_flood_neither_starves_reads_nor_the_archive(service):
    for _ in range(3):
        top_latency(service.port)  # warm-up
    before = httpx.get(service.url("/v1/epochs/latest"), timeout=5).json()["epoch"]
    flood = subprocess.Popen(
        [sys.executable, "-m", "tests.pulsegraph.flood", "--port", str(service.port), "--sockets", str(FLOOD), "--seconds", "30"],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2],
    )
    latencies: list[float] = []  # every request's time
    samples: list[float] = []  # the faster of two back to back: one scheduling hiccup of a shared 2-core box is not the service's latency
    peak_files = 0
    try:
        burst = json.loads(flood.stdout.readline())  # type: ignore[union-attr]
        assert burst["peak_open"] >= FLOOD * 0.9, burst
        time.sleep(0.3)  # the burst's accept queue is taken in; the flood goes on, reopening what the server drops
        # Probed for as long as the flood needs to give 20 samples (a loaded box gives them slower), at most 25 s.
        t0 = time.monotonic()
        with quiet_gc():
            while flood.poll() is None and len(samples) < 20 and time.monotonic() - t0 < 25:
                peak_files = max(peak_files, open_files(service.proc.pid))
                pair = [top_latency(service.port), top_latency(service.port)]
                latencies += pair
                samples.append(min(pair))
                time.sleep(0.1)
        assert flood.poll() is None, "the flood ended before the probes did"
        flood.send_signal(signal.SIGTERM)
        end = json.loads(flood.communicate(timeout=30)[0].splitlines()[-1])
    finally:
        if flood.poll() is None:
            flood.kill()
    health = httpx.get(service.url("/health"), timeout=5).json()
    # Measured, not guessed, while thousands of sockets are held and reopened. The bound is the issue's; the
    # measure is robust to a loaded CI box: each sample the faster of two requests, the bound on 9 in 10 samples,
    # and every request answered (a reset or a refused connection fails the probe itself).
    ordered = sorted(latencies)
    typical = sorted(samples)[int(0.9 * len(samples)) - 1]
    print(f"flood: {burst} then {end}; /v1/rank/top over {len(latencies)} requests: p50 {1000 * ordered[len(ordered) // 2]:.1f} ms, "
          f"max {1000 * ordered[-1]:.1f} ms, samples p90 {1000 * typical:.1f} ms; service descriptors peak {peak_files}; "
          f"edge {health['edge']['connections']}")
    assert len(samples) >= 10, "every probe was answered, while the flood held"
    assert typical < 0.1, f"/v1/rank/top took {1000 * typical:.0f} ms under the flood (9 samples in 10)"
    assert ordered[-1] < 1.0, "no request waited for a retransmitted SYN"
    assert peak_files < FILES - 100, "the connections came near the process's descriptor limit"
    assert health["edge"]["connections"]["evicted"] > 0, "the cap was never reached: the flood did not test it"
    # Epochs kept coming, and each ranked one is in the archive: no gap a restart could not serve.
    after = service.proc.pid and httpx.get(service.url("/v1/epochs/latest"), timeout=5).json()["epoch"]
    assert after > before + 5
    time.sleep(0.5)
    ranked = {e["epoch"] for e in httpx.get(service.url("/v1/epochs"), params={"limit": 1000}, timeout=5).json()["items"]}
    missing = sorted(e for e in ranked if before <= e <= after and e not in _archived(service.data))
    assert missing == [], f"epochs {missing} are not in the archive"
    text = service.log_text()
    assert "Too many open files" not in text and "not kept on disk" not in text


# ---- request heads ----------------------------------------------------------------------------------
def test_a_20_mib_header_is_refused_fast_while_others_are_served(service):
    for _ in range(3):
        top_latency(service.port)
    answer: dict = {}
    # Built before anything is timed: making 20 MiB holds this process's GIL for a while.
    request = b"GET /v1/epochs HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (20 * 1024 * 1024) + b"\r\n\r\n"

    def attack() -> None:
        with socket.create_connection(("127.0.0.1", service.port), timeout=10) as s:
            t0 = time.perf_counter()
            sender = threading.Thread(target=_send_quietly, args=(s, request))
            sender.start()
            data = b""
            while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < 20:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            answer["elapsed"] = time.perf_counter() - t0
            answer["data"] = data
            sender.join(timeout=10)

    t = threading.Thread(target=attack)
    served = []
    with quiet_gc():
        t.start()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.5:  # the attack is over within ~50 ms: this covers it
            served.append(top_latency(service.port))
        t.join(timeout=20)
    head, _, body = answer["data"].partition(b"\r\n\r\n")
    print(f"20 MiB header: {head.split(chr(13).encode())[0]!r} in {1000 * answer['elapsed']:.1f} ms; "
          f"/v1/rank/top meanwhile p50 {1000 * sorted(served)[len(served) // 2]:.1f} ms, max {1000 * max(served, default=0):.1f} ms over {len(served)}")
    assert head.startswith(b"HTTP/1.1 431 ")
    assert b"application/json" in head and b'"headers_too_large"' in body
    assert answer["elapsed"] < 0.5, "the refusal must come after the limit's worth of bytes, not the whole header"
    # The bound on 9 requests in 10 (a loaded CI box stalls a process now and then, attack or not), every one answered.
    ordered = sorted(served)
    assert len(served) >= 10 and ordered[int(0.9 * len(ordered)) - 1] < 0.1 and ordered[-1] < 1.0, ordered


def _send_quietly(s: socket.socket, data: bytes) -> None:
    try:
        s.sendall(data)
    except OSError:
        pass  # the server stopped reading after its answer; the rest of the header is never wanted


def test_a_slow_head_gets_408_and_an_idle_connection_is_closed(service):
    with socket.create_connection(("127.0.0.1", service.port), timeout=10) as slow:
        slow.sendall(b"GET /v1/epochs HTTP/1.1\r\nHost: x\r\n")  # and never the rest
        t0 = time.perf_counter()
        data = slow.recv(65536)
        waited = time.perf_counter() - t0
    assert data.startswith(b"HTTP/1.1 408 ") and b'"request_timeout"' in data
    assert HEADER_TIMEOUT_S - 0.5 < waited < HEADER_TIMEOUT_S + 2
    with socket.create_connection(("127.0.0.1", service.port), timeout=10) as idle:
        t0 = time.perf_counter()
        assert idle.recv(1) == b""  # a fresh connection that sends nothing: closed without a word
        assert time.perf_counter() - t0 < HEADER_TIMEOUT_S + 2
    with socket.create_connection(("127.0.0.1", service.port), timeout=10) as kept:
        kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        first = kept.recv(65536)
        assert first.startswith(b"HTTP/1.1 200 ")
        t0 = time.perf_counter()
        while kept.recv(65536):
            pass
        assert time.perf_counter() - t0 < KEEP_ALIVE_S + 2


def test_garbage_is_a_json_400(service):
    status, body, _ = get(service.port, "/v1/epochs\x00bad")
    assert status == 400 and orjson.loads(body)["error"]["code"]


# ---- hostile bodies ------------------------------------------------------------------------------------
def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def test_32_bodies_of_a_million_empty_objects_at_once_cost_little(service):
    """The issue's bomb: 5 MB of `{}` (1.7 M objects), 32 at once. Each is refused before it is parsed; at most
    max_concurrent_writes are looked at, the others are pushed back at once; the process barely grows."""
    bomb = b"[" + b",".join([b"{}"] * 1_700_000) + b"]"
    assert len(bomb) <= 5 * 1024 * 1024
    before = rss(service.proc.pid)
    peak = [before]
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss(service.proc.pid))
            time.sleep(0.005)

    answers: list[tuple[int, str]] = []
    lock = threading.Lock()

    def post() -> None:
        r = httpx.post(service.url("/v1/events"), content=bomb, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
        with lock:
            answers.append((r.status_code, r.json()["error"]["code"]))

    watcher = threading.Thread(target=watch)
    watcher.start()
    posters = [threading.Thread(target=post) for _ in range(32)]
    t0 = time.perf_counter()
    for t in posters:
        t.start()
    for t in posters:
        t.join(timeout=120)
    took = time.perf_counter() - t0
    done.set()
    watcher.join()
    codes = sorted({a for a in answers})
    grew = (peak[0] - before) / 2**20
    print(f"32 bombs: {codes} ({sum(a[0] == 503 for a in answers)} pushed back) in {took:.1f} s; API process RSS "
          f"{before / 2**20:.0f} MB -> peak {peak[0] / 2**20:.0f} MB (+{grew:.0f} MB)")
    assert len(answers) == 32 and set(codes) <= {(413, "too_many_values"), (503, "writes_busy")}
    assert (413, "too_many_values") in codes
    assert grew < 250, f"the API process grew {grew:.0f} MB"
    health = httpx.get(service.url("/health"), timeout=5).json()["edge"]["writes"]
    assert health["in_flight"] == 0 and health["max"] == 4
