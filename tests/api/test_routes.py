"""The reading routes on the running pipeline: history, movers, neighbors, search, metrics, the event stream, the write path."""

from __future__ import annotations

import threading
import time
import uuid
from urllib.parse import quote

import httpx
import orjson
import pytest

from tests.api.conftest import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_history_is_oldest_first_and_ends_at_the_newest_rank(running):
    _, client = running
    top = client.get("/v1/rank/top", params={"k": 3}).json()
    name = top["items"][2]["vertex"]
    h = client.get(f"/v1/vertices/{name}/history", params={"limit": 1000}).json()
    assert h["vertex"] == name and h["algo"] == "pagerank"
    epochs = [p["epoch"] for p in h["items"]]
    assert epochs == sorted(epochs) and len(epochs) >= 2
    assert all(p["rank"] >= 1 and p["score"] > 0 for p in h["items"])
    at = {p["epoch"]: p for p in h["items"]}
    if top["epoch"] in at:  # the newest epoch, unless one arrived between the two calls
        assert at[top["epoch"]]["rank"] == 3 and at[top["epoch"]]["score"] == top["items"][2]["score"]
    assert len(client.get(f"/v1/vertices/{name}/history", params={"limit": 2}).json()["items"]) == 2


def test_movers_between_two_epochs(running):
    _, client = running
    e = client.get("/v1/epochs", params={"limit": 6}).json()["items"]
    to, frm = e[0]["epoch"], e[-1]["epoch"]
    m = client.get("/v1/movers", params={"from": frm, "to": to, "k": 5}).json()
    assert (m["from"], m["to"], m["algo"]) == (frm, to, "pagerank")
    assert len(m["rising"]) <= 5 and len(m["falling"]) <= 5 and m["rising"]
    for item in m["rising"]:
        assert item["change"] == item["from_rank"] - item["to_rank"] > 0
    for item in m["falling"]:
        assert item["change"] < 0
    changes = [i["change"] for i in m["rising"]]
    assert changes == sorted(changes, reverse=True)
    # The rank a mover reached is the rank /v1/rank/top shows for that epoch.
    best = m["rising"][0]
    if best["to_rank"] <= 1000:
        ranked = client.get("/v1/rank/top", params={"k": best["to_rank"], "epoch": to}).json()["items"]
        assert ranked[-1]["vertex"] == best["vertex"]
    # Any two retained epochs compare, in either order: backwards, what rose fell; the same epoch twice, nothing moved.
    back = client.get("/v1/movers", params={"from": to, "to": frm, "k": 5}).json()
    assert (back["from"], back["to"]) == (to, frm)
    assert back["rising"][0]["change"] == -m["falling"][0]["change"] and back["falling"][0]["change"] == -m["rising"][0]["change"]
    same = client.get("/v1/movers", params={"from": to, "to": to}).json()
    assert same["rising"] == same["falling"] == []


def test_neighbors_agree_with_degrees_now_and_in_an_older_epoch(running):
    _, client = running
    epochs = client.get("/v1/epochs", params={"limit": 10}).json()["items"]
    for epoch in (epochs[0]["epoch"], epochs[-1]["epoch"]):
        for item in client.get("/v1/rank/top", params={"k": 5, "epoch": epoch}).json()["items"]:
            name = item["vertex"]
            v = client.get(f"/v1/vertices/{name}", params={"epoch": epoch}).json()
            for direction, degree in (("in", v["in_degree"]), ("out", v["out_degree"])):
                nb = client.get(
                    f"/v1/vertices/{name}/neighbors", params={"direction": direction, "limit": 1000, "epoch": epoch}
                ).json()
                assert nb.get("epoch") == epoch and len(nb["items"]) == min(degree, 1000), (epoch, name, direction, nb)
                weights = [(n["weight"], n["multiplicity"]) for n in nb["items"]]
                assert weights == sorted(weights, reverse=True)
                assert all(n["multiplicity"] > 0 and n["type"] in ("mentions", "tags") for n in nb["items"])
    name = epochs and client.get("/v1/rank/top", params={"k": 1}).json()["items"][0]["vertex"]
    only = client.get(f"/v1/vertices/{name}/neighbors", params={"direction": "in", "type": "tags"}).json()
    assert only["items"] == []  # a user is mentioned, never tagged


def test_search_by_prefix(running):
    _, client = running
    r = client.get("/v1/search", params={"prefix": "user1", "limit": 7}).json()
    assert 1 <= len(r["items"]) <= 7
    assert all(n.startswith("user1") for n in r["items"]) and r["items"] == sorted(r["items"])
    assert client.get("/v1/search", params={"prefix": "#"}).json()["items"][0].startswith("#")
    assert client.get("/v1/search", params={"prefix": "no-such-vertex"}).json()["items"] == []


def test_algorithms_come_from_the_epochs(running):
    _, client = running
    assert "pagerank" in client.get("/v1/algorithms").json()["items"]


def test_metrics_in_prometheus_text(running):
    _, client = running
    client.get("/v1/rank/top")
    # Per-epoch figures are observed as epochs reach the app: wait for one after it was made (when this is
    # the first test to use it, it may be a few milliseconds old); the pipeline's status, for the first
    # status poll (once a second).
    deadline = time.monotonic() + 10
    while True:
        r = client.get("/metrics")
        seen = 'pulsegraph_compute_seconds_count{algo="pagerank"}' in r.text and "pulsegraph_compute_queue_bytes" in r.text
        if seen or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    for name in (
        "pulsegraph_records_ingested_total", "pulsegraph_dead_letters_total", "pulsegraph_epoch_commit_seconds_bucket",
        'pulsegraph_epoch_timeliness_seconds{stat="p99"}', 'pulsegraph_compute_seconds_count{algo="pagerank"}',
        'pulsegraph_http_request_duration_seconds_count{method="GET",route="/v1/rank/top",status="200"}',
        "pulsegraph_compute_queue_bytes", 'pulsegraph_ingest_paused_seconds_total{cause="compute_queue"}',
    ):
        assert name in text, name


@pytest.mark.parametrize(
    ("path", "params", "status", "code"),
    [
        ("/v1/vertices/nobody/history", {}, 404, "vertex_not_found"),
        ("/v1/vertices/user1/history", {"algo": "hits"}, 422, "invalid_request"),  # the schema's enum
        ("/v1/vertices/user1/history", {"limit": 10**6}, 422, "invalid_request"),
        ("/v1/vertices/user1/neighbors", {"direction": "sideways"}, 422, "invalid_request"),
        ("/v1/vertices/user1/neighbors", {"limit": 5000}, 422, "invalid_request"),
        ("/v1/vertices/user1/neighbors", {"epoch": 10**9}, 404, "epoch_not_found"),
        ("/v1/movers", {"to": 10**9}, 404, "epoch_not_found"),
        ("/v1/movers", {"from": 10**9}, 404, "epoch_not_found"),
        ("/v1/movers", {"k": 0}, 422, "invalid_request"),
        ("/v1/search", {}, 422, "invalid_request"),
        ("/v1/search", {"prefix": "u", "limit": 1000}, 422, "invalid_request"),
        ("/v1/epochs/0", {}, 422, "invalid_request"),
        ("/v1/epochs/999999999", {}, 404, "epoch_not_found"),
    ],
)
def test_bad_reads_get_a_json_error(running, path, params, status, code):
    _, client = running
    r = client.get(path, params=params)
    assert (r.status_code, r.json()["error"]["code"]) == (status, code)


def test_posted_events_reach_the_graph(running):
    p, client = running
    user, friend = f"poster-{uuid.uuid4().hex[:8]}", f"friend-{uuid.uuid4().hex[:8]}"
    events = [
        {"user": user, "mentions": [friend], "hashtags": ["api"], "text": "hello", "ts": time.time()},
        {"user": "", "mentions": [], "hashtags": [], "text": "", "ts": 1.0},  # an empty id
        {"mentions": ["x"]},  # no user
        [1, 2],
    ]
    r = client.post("/v1/events", content=orjson.dumps(events), headers=AUTH)
    assert r.status_code == 202, r.text
    body = r.json()
    assert (body["accepted"], body["rejected"]) == (1, 3)
    assert [e["index"] for e in body["errors"]] == [1, 2, 3] and all(e["reason"] for e in body["errors"])
    p.wait_for_epoch(lambda v: user in p.store.index and p.store.index[user] < v.result.vertices, timeout=60)
    nb = client.get(f"/v1/vertices/{user}/neighbors").json()["items"]
    assert {(n["vertex"], n["type"]) for n in nb} == {(friend, "mentions"), ("#api", "tags")}


@pytest.mark.parametrize(
    ("headers", "body", "status", "code"),
    [
        ({}, b"[]", 401, "unauthorized"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, b"[]", 401, "unauthorized"),
        ({"Authorization": "Bearer not-the-token-at-all"}, b"[]", 403, "bad_token"),
        (AUTH, b"{not json", 400, "invalid_json"),
        (AUTH, b'{"op": "add_edge"}', 400, "invalid_request"),
        (AUTH, orjson.dumps([{}] * 10_001), 422, "too_many_events"),
        (AUTH, b"[" + b" " * (5 * 1024 * 1024) + b"]", 413, "payload_too_large"),
    ],
)
def test_bad_writes(running, headers, body, status, code):
    _, client = running
    r = client.post("/v1/events", content=body, headers=headers)
    assert (r.status_code, r.json()["error"]["code"]) == (status, code)
    if status == 401:
        assert r.headers["www-authenticate"] == "Bearer"


def test_stream_sends_one_event_per_epoch(server):
    seen = []
    with httpx.stream("GET", f"{server}/v1/stream", timeout=30) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                seen.append(orjson.loads(line[6:])["epoch"])
                if len(seen) == 3:
                    break
    assert seen == sorted(seen) and len(set(seen)) == 3


def test_the_fast_latest_epoch_path_answers_what_the_route_answers(running):
    _, client = running
    for _ in range(3):  # epochs keep coming: a pair read back to back may straddle one, not three
        fast = client.get("/v1/epochs/latest")
        route = client.get("/v1/epochs/latest?via=route")  # past the fast path, to the FastAPI route
        if fast.json()["epoch"] == route.json()["epoch"]:
            break
    assert fast.status_code == route.status_code == 200
    assert fast.content == route.content and fast.headers["content-type"] == route.headers["content-type"]


def test_the_fast_vertex_path_answers_what_the_route_answers(running):
    _, client = running
    epoch = client.get("/v1/epochs", params={"limit": 2}).json()["items"][-1]["epoch"]
    names = [item["vertex"] for item in client.get("/v1/rank/top", params={"k": 5}).json()["items"]]
    for name in names:
        path = "/v1/vertices/" + quote(name, safe="")
        for query in ("", f"?epoch={epoch}"):
            fast = client.get(path + query)
            # An unknown parameter takes the request past the fast path to the FastAPI route, which ignores it.
            route = client.get(path + (query + "&" if query else "?") + "via=route")
            assert fast.status_code == route.status_code == 200, (fast.text, route.text)
            assert fast.content == route.content and fast.headers["content-type"] == route.headers["content-type"]
            assert fast.json()["vertex"] == name
    for query, status in (("?epoch=0", 422), ("?epoch=999999999", 404), ("?epoch=x", 422)):
        r = client.get("/v1/vertices/" + quote(names[0], safe="") + query)
        assert r.status_code == status and r.json()["error"]["code"], (query, r.text)
    r = client.get("/v1/vertices/no-such-vertex-anywhere")
    assert r.status_code == 404 and r.json()["error"]["code"] == "vertex_not_found", r.text


def test_the_fast_neighbors_path_answers_what_the_route_answers(running, monkeypatch):
    pipeline, client = running
    store = pipeline.store
    reads = {"now": 0, "waiting": 0}

    def counted(name: str, kind: str):
        read = getattr(store.graph, name)

        def call(*args):
            reads[kind] += 1
            return read(*args)
        return call

    monkeypatch.setattr(store.graph, "neighbors_now", counted("neighbors_now", "now"))
    monkeypatch.setattr(store.graph, "neighbors", counted("neighbors", "waiting"))
    epoch = client.get("/v1/epochs", params={"limit": 2}).json()["items"][-1]["epoch"]
    names = [item["vertex"] for item in client.get("/v1/rank/top", params={"k": 3}).json()["items"]]
    queries = ("", f"?epoch={epoch}", "?direction=in&limit=1000", f"?limit=3&type=mentions&epoch={epoch}",
               "?type=tags&direction=in", "?type=nosuchtype")
    asked = 0
    for name in names:
        path = "/v1/vertices/" + quote(name, safe="") + "/neighbors"
        for query in queries:
            for _ in range(3):  # epochs keep coming: a pair read without an epoch may straddle one, not three
                fast = client.get(path + query)
                # An unknown parameter takes the request past the fast path to the FastAPI route, which ignores it.
                route = client.get(path + (query + "&" if query else "?") + "via=route")
                asked += 1
                if fast.json()["epoch"] == route.json()["epoch"]:
                    break
            assert fast.status_code == route.status_code == 200, (fast.text, route.text)
            assert fast.content == route.content and fast.headers["content-type"] == route.headers["content-type"], query
    # Each plain request was read on the loop (again, if it met an epoch being written), each other by the route.
    assert reads["now"] >= asked and reads["waiting"] >= asked, reads
    # Errors are the route's, whatever path the request took.
    for query, status in (("?direction=sideways", 422), ("?limit=5000", 422), ("?limit=0", 422), ("?type=" + "t" * 33, 422),
                          ("?epoch=999999999", 404), ("?epoch=0", 422)):
        r = client.get("/v1/vertices/" + quote(names[0], safe="") + "/neighbors" + query)
        assert r.status_code == status and r.json()["error"]["code"], (query, r.text)
    r = client.get("/v1/vertices/no-such-vertex-anywhere/neighbors")
    assert r.status_code == 404 and r.json()["error"]["code"] == "vertex_not_found", r.text
    # While an epoch is being written into the graph view, the read waits for it on the loop, not on a thread.
    before = dict(reads)

    def write():
        with store.graph._lock.write():
            deadline = time.monotonic() + 5
            while reads["now"] == before["now"] and time.monotonic() < deadline:  # until the read was turned away
                time.sleep(0.001)
    writer = threading.Thread(target=write)
    writer.start()
    plain = "/v1/vertices/" + quote(names[0], safe="") + "/neighbors"
    r = client.get(plain)
    writer.join(timeout=10)
    assert r.status_code == 200 and r.json()["vertex"] == names[0] and r.json()["items"]
    assert reads["now"] >= before["now"] + 2 and reads["waiting"] == before["waiting"], (before, reads)
    # A vertex with more edges than the loop may read is read by the route, with the same bytes.
    monkeypatch.setattr("pulsegraph.api.routes.vertices.LOOP_NEIGHBORS", 0)
    before = dict(reads)
    path = "/v1/vertices/" + quote(names[0], safe="") + f"/neighbors?direction=in&epoch={epoch}"  # ranked first: in-edges
    assert client.get(path).content == client.get(path + "&via=route").content
    assert reads["waiting"] == before["waiting"] + 2, reads
    # A hub's answer is kept: asked again for the same epoch, it is read from the graph view no more.
    monkeypatch.setattr("pulsegraph.api.queries.HUB_EDGES", 0)  # every vertex a hub
    first = client.get(path + "&limit=7")
    before = dict(reads)
    for again in (path + "&limit=7", path + "&limit=7&via=route"):
        assert client.get(again).content == first.content
    assert reads == before and len(store.hubs), reads
    client.get(path + "&limit=8")  # another answer: read (by the route: the loop's bound is still 0 here)
    assert reads["waiting"] == before["waiting"] + 1, reads


def test_the_fast_top_path_answers_what_the_route_answers(running):
    _, client = running
    epoch = client.get("/v1/epochs", params={"limit": 2}).json()["items"][-1]["epoch"]
    for query in (f"k=7&epoch={epoch}", f"epoch={epoch}&algo=pagerank&k=1000", f"epoch={epoch}"):
        fast = client.get(f"/v1/rank/top?{query}")
        # An unknown parameter takes the request past the fast path to the FastAPI route, which ignores it.
        route = client.get(f"/v1/rank/top?{query}&via=route")
        assert fast.status_code == route.status_code == 200
        assert fast.content == route.content and fast.headers["content-type"] == route.headers["content-type"]
    for query in ("k=0", "k=1001", "epoch=0", "algo=nope", "epoch=999999999", "k=%31"):
        r = client.get(f"/v1/rank/top?{query}")
        assert r.status_code in (400, 404, 422) or (query == "k=%31" and r.status_code == 200), query
        if r.status_code != 200:
            assert r.json()["error"]["code"]
