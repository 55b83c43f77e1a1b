"""A connection flood against 127.0.0.1 for tests/pulsegraph/test_exposure.py, in a process of its own (its
sockets must not count against the test process's descriptors, nor its loop hold the test's GIL).

Opens ``--sockets`` TCP connections that send nothing, as fast as it can, then for ``--seconds`` keeps
that many open: each one the server closes is opened again, at most ``--reopen-rate`` a second and
``--max-opens`` in all, until SIGTERM. Prints a JSON line when the burst is out and one at the end.
Loopback only.
"""

from __future__ import annotations

import argparse
import errno
import json
import resource
import selectors
import signal
import socket
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--sockets", type=int, default=3000)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--max-opens", type=int, default=20_000)
    ap.add_argument("--reopen-rate", type=float, default=500.0)
    args = ap.parse_args()
    host = "127.0.0.1"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < args.sockets + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, args.sockets + 256), hard))
    sel = selectors.DefaultSelector()
    stats = {"opened": 0, "closed_by_server": 0, "connect_errors": 0, "peak_open": 0}

    def open_one() -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        err = s.connect_ex((host, args.port))
        if err not in (0, errno.EINPROGRESS):
            stats["connect_errors"] += 1
            s.close()
            return
        stats["opened"] += 1
        sel.register(s, selectors.EVENT_READ)

    t0 = time.monotonic()
    while len(sel.get_map()) < args.sockets and stats["opened"] < args.max_opens:
        open_one()
    stats["burst_s"] = round(time.monotonic() - t0, 3)
    stats["peak_open"] = len(sel.get_map())
    print(json.dumps({"burst_done": True, **stats}), flush=True)
    deadline = [t0 + args.seconds]
    # SIGTERM ends the flood early (the test has measured enough), still with its final line.
    signal.signal(signal.SIGTERM, lambda *_: deadline.__setitem__(0, 0.0))
    while time.monotonic() < deadline[0]:
        for key, _ in sel.select(timeout=0.05):
            s = key.fileobj
            try:
                data = s.recv(4096)  # type: ignore[union-attr]
            except OSError:
                data = b""
            if not data:  # closed (or reset) by the server: replaced, as a flood would
                sel.unregister(s)
                s.close()  # type: ignore[union-attr]
                stats["closed_by_server"] += 1
        allowed = args.sockets + int((time.monotonic() - t0) * args.reopen_rate)
        while len(sel.get_map()) < args.sockets and stats["opened"] < min(args.max_opens, allowed):
            open_one()
        stats["peak_open"] = max(stats["peak_open"], len(sel.get_map()))
    for key in list(sel.get_map().values()):
        key.fileobj.close()  # type: ignore[union-attr]
    print(json.dumps(stats), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
