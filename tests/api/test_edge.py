"""The API's edge, over real sockets to uvicorn with the service's protocol and bounds, on the
shared pipeline: hostile event bodies, vertex ids that are URLs, stream slots, stream clients that stop reading.

The connection flood, huge headers, slow heads and the token's reach are tested against a real
``pulsegraph run`` in tests/pulsegraph/test_exposure.py.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from urllib.parse import quote

import httpx
import orjson
import pytest
import uvicorn

from pulsegraph.api.edge import EdgeLimits, server_config
from pulsegraph.api.stream import sse_frame
from tests.api.conftest import TOKEN, app_for, free_port

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def nested(depth: int, leaf: bytes = b"1") -> bytes:
    """A JSON object ``depth`` levels deep, as bytes: orjson itself cannot encode it (that was the bug)."""
    return b'{"a":' * depth + leaf + b"}" * depth


def test_an_event_nested_300_deep_is_rejected_by_index_and_the_rest_go_on(server):
    user = f"deep-{uuid.uuid4().hex[:8]}"
    good = orjson.dumps({"user": user, "mentions": ["someone"], "hashtags": [], "text": "", "ts": time.time()})
    deep = b'{"user":"x","mentions":[],"hashtags":[],"text":"","ts":1,"attrs":' + nested(299) + b"}"
    body = b"[" + b",".join([good, deep, good, b"[" * 300 + b"]" * 300]) + b"]"
    r = httpx.post(f"{server}/v1/events", content=body, headers=AUTH, timeout=30)
    assert r.status_code == 202, r.text
    got = r.json()
    assert (got["accepted"], got["rejected"]) == (2, 2)
    assert [e["index"] for e in got["errors"]] == [1, 3]
    assert "nested more than 254 levels" in got["errors"][0]["reason"]
    # Past what the parser takes at all (1024 levels), the body is not JSON: refused whole, with the error model.
    r = httpx.post(f"{server}/v1/events", content=b"[" + b"[" * 1100 + b"]" * 1100 + b"]", headers=AUTH, timeout=30)
    assert (r.status_code, r.json()["error"]["code"]) == (400, "invalid_json")


# Ids as a user of the ingest may pick them: URLs (the README's own example of a valid id), an id that
# looks like a route's tail, percent signs, query and fragment characters, spaces and non-ASCII.
ODD_IDS = [
    "https://site.example/alice", "x/history", "x/neighbors", "50%25 off?", "a%2Fb", "q?x=1&y=2#frag", "two  spaces",
    "ünï/cødé", "..", "trailing/",
]


def test_every_vertex_route_takes_every_id_the_ingest_accepts(server, pipeline):
    tag = uuid.uuid4().hex[:6]
    ids = [f"{i}-{tag}" if not i.endswith("/") else f"{tag}-{i}" for i in ODD_IDS]
    hub = f"https://hub.example/{tag}"
    events = [{"user": i, "mentions": [hub], "hashtags": [], "text": "", "ts": time.time()} for i in ids]
    r = httpx.post(f"{server}/v1/events", content=orjson.dumps(events), headers=AUTH, timeout=30)
    assert r.status_code == 202 and r.json()["accepted"] == len(ids), r.text
    pipeline.wait_for_epoch(lambda v: all(pipeline.store.index.get(i, 1 << 60) < v.result.vertices for i in [*ids, hub]), timeout=60)
    with httpx.Client(base_url=server, timeout=10) as c:
        for name in [*ids, hub]:
            path = "/v1/vertices/" + quote(name, safe="")
            v = c.get(path)
            assert v.status_code == 200 and v.json()["vertex"] == name, (name, v.text)
            h = c.get(path + "/history")
            assert h.status_code == 200 and h.json()["vertex"] == name and h.json()["items"], (name, h.text)
            direction = "in" if name == hub else "out"
            n = c.get(path + "/neighbors", params={"direction": direction})
            assert n.status_code == 200 and n.json()["vertex"] == name, (name, n.text)
            assert n.json()["items"], (name, n.json())
        # The hub's in-neighbors are exactly the odd ids: each one's id came back through the route intact.
        back = c.get("/v1/vertices/" + quote(hub, safe="") + "/neighbors", params={"direction": "in", "limit": 100}).json()
        assert {x["vertex"] for x in back["items"]} == set(ids)
        # What search and paths find, the vertex routes read.
        found = c.get("/v1/search", params={"prefix": f"https://site.example/alice-{tag}"}).json()["items"]
        assert found == [f"https://site.example/alice-{tag}"]
        # An id no ingest could hold (not UTF-8) is a 404, never a 500.
        bad = c.get("/v1/vertices/%FF%FE")
        assert (bad.status_code, bad.json()["error"]["code"]) == (404, "vertex_not_found")


# ---- event streams -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def edge_server(pipeline):
    """A server with small stream bounds: 40 slots (2 kept for the page, 2 more for tokens), 1 s send timeout."""
    limits = EdgeLimits(max_connections=200, max_streams=40, send_timeout_s=1.0)
    app = app_for(pipeline, api_token=TOKEN, limits=limits)
    port = free_port()
    srv = uvicorn.Server(server_config(app, "127.0.0.1", port, log_level="warning", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=srv.run, name="edge-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        assert time.monotonic() < deadline and thread.is_alive()
        time.sleep(0.05)
    yield app, port
    srv.should_exit = True
    thread.join(timeout=10)


def open_stream(port: int, headers: dict | None = None, rcvbuf: int | None = None) -> tuple[socket.socket, int]:
    """A raw /v1/stream request; the socket and the status of its answer (read up to the headers only)."""
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    lines = ["GET /v1/stream HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in (headers or {}).items())]
    s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        assert chunk, "closed before answering"
        head += chunk
    return s, int(head.split(b" ", 2)[1])


def test_stream_slots_are_kept_for_the_page_and_for_tokens(edge_server):
    app, port = edge_server
    b = app.state.broadcaster
    opened: list[socket.socket] = []
    try:
        def fill(headers: dict | None) -> int:
            """Open streams with these headers until one is refused; the number taken."""
            taken = 0
            while True:
                s, status = open_stream(port, headers)
                opened.append(s)
                if status != 200:
                    return taken
                taken += 1

        anonymous = fill(None)
        page = fill({"Sec-Fetch-Site": "same-origin"})
        token = fill(AUTH)
        wrong_token = open_stream(port, {"Authorization": "Bearer not-the-token-at-all-0000000000"})
        opened.append(wrong_token[0])
        assert (anonymous, page, token) == (36, 2, 2)
        assert wrong_token[1] == 503  # a wrong token is anonymous, and those slots are taken
        health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).json()["edge"]
        assert health["streams"]["open"] == 40 and health["streams"]["refused"] >= 4 and "streams" in health["saturated"]
    finally:
        for s in opened:
            s.close()
    deadline = time.monotonic() + 20
    while b.clients and time.monotonic() < deadline:
        time.sleep(0.05)
    assert b.clients == 0, "closed streams give their slots back"


def test_a_stream_client_that_reads_nothing_is_dropped(edge_server):
    app, port = edge_server
    b, edge = app.state.broadcaster, app.state.edge
    stalled_before = edge.counts["stalled"]
    reader, status = open_stream(port)
    assert status == 200
    mute, status = open_stream(port, rcvbuf=4096)  # and never reads again
    assert status == 200
    got = bytearray()
    stop = threading.Event()

    def read() -> None:
        reader.settimeout(0.2)
        while not stop.is_set():
            try:
                chunk = reader.recv(1 << 20)
            except TimeoutError:
                continue
            if not chunk:
                return
            got.extend(chunk)

    t = threading.Thread(target=read)
    t.start()
    try:
        big = b'{"pad":"' + b"x" * (256 * 1024) + b'"}'
        t0 = time.monotonic()
        # Frames the mute client cannot take (its window closes within the first), the reading one takes all.
        while edge.counts["stalled"] == stalled_before and time.monotonic() - t0 < 15:
            b.publish(sse_frame(10**9, big))
            time.sleep(0.2)
        dropped_after = time.monotonic() - t0
        assert edge.counts["stalled"] == stalled_before + 1, "the client that reads nothing was not dropped"
        assert dropped_after < 1.0 + 5, f"dropped after {dropped_after:.1f} s; the send timeout is 1 s"
        mute.settimeout(5)
        try:
            while mute.recv(1 << 20):
                pass  # what the kernels had buffered before the drop; then the end
        except ConnectionResetError:
            pass
        n = len(got)
        b.publish(sse_frame(10**9, b"{}"))
        time.sleep(0.5)
        assert len(got) > n and len(got) > 256 * 1024, "the client that reads keeps its stream"
    finally:
        stop.set()
        t.join(timeout=5)
        reader.close()
        mute.close()
