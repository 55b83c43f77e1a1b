"""The REST contract while the real pipeline runs (synthetic tweets, real Ray actors)."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from fastapi.testclient import TestClient

from pulsegraph.api.app import create_app
from pulsegraph.api.store import ResultStore

EPOCH_KEYS = {"epoch", "vector", "records", "vertices", "edges", "committed_at", "timeliness_ms", "skipped", "error_bounds",
              "window", "watermark", "late", "ranked_at"}


def assert_epoch_shape(e: dict) -> None:
    assert set(e) == EPOCH_KEYS
    assert isinstance(e["epoch"], int) and e["epoch"] >= 1
    assert all(isinstance(k, str) and isinstance(v, int) for k, v in e["vector"].items())
    assert all(isinstance(e[k], int) for k in ("records", "vertices", "edges", "late"))
    # Without --window (as these tests run) neither a window nor a watermark; see tests/api/test_window.py.
    assert e["window"] is None and e["watermark"] is None and e["late"] == 0
    sealed, ranked = dt.datetime.fromisoformat(e["committed_at"]), dt.datetime.fromisoformat(e["ranked_at"])
    assert sealed.tzinfo is not None and sealed <= ranked, "ranked after it was sealed"
    t = e["timeliness_ms"]
    assert set(t) == {"p50", "p99", "max"} and 0 <= t["p50"] <= t["p99"] <= t["max"]


def grows(older: dict, newer: dict) -> bool:
    return all(newer["vector"].get(p, 0) >= o for p, o in older["vector"].items())


def test_health(running):
    _, client = running
    r = client.get("/health")
    assert r.status_code == 200 and r.json()["status"] == "ok"


def test_epochs_grow_and_vectors_never_shrink(running):
    _, client = running
    seen = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len({e["epoch"] for e in seen}) < 4:
        r = client.get("/v1/epochs/latest")
        assert r.status_code == 200
        assert_epoch_shape(r.json())
        seen.append(r.json())
        time.sleep(0.1)
    assert len({e["epoch"] for e in seen}) >= 4
    for a, b in zip(seen, seen[1:]):
        assert b["epoch"] >= a["epoch"] and grows(a, b) and b["records"] >= a["records"]
    items = client.get("/v1/epochs", params={"limit": 5}).json()["items"]
    assert len(items) == 5
    for e in items:
        assert_epoch_shape(e)
    assert [e["epoch"] for e in items] == sorted((e["epoch"] for e in items), reverse=True)
    for newer, older in zip(items, items[1:]):
        assert grows(older, newer)


def test_top_ranking(running):
    _, client = running
    body = client.get("/v1/rank/top", params={"k": 10}).json()
    assert set(body) == {"epoch", "algo", "error_bound", "certified", "certified_ranks", "items"} and body["algo"] == "pagerank"
    items = body["items"]
    assert [i["rank"] for i in items] == list(range(1, 11))
    assert all(i["vertex"].startswith("user") for i in items)
    scores = [i["score"] for i in items]
    assert scores == sorted(scores, reverse=True) and 0 < scores[-1] < 1
    # An older retained epoch answers as of itself.
    old = client.get("/v1/epochs", params={"limit": 3}).json()["items"][-1]["epoch"]
    body = client.get("/v1/rank/top", params={"k": 3, "epoch": old}).json()
    assert body["epoch"] == old and len(body["items"]) == 3


def test_vertex(running):
    _, client = running
    top = client.get("/v1/rank/top", params={"k": 1}).json()
    name = top["items"][0]["vertex"]
    v = client.get(f"/v1/vertices/{name}", params={"epoch": top["epoch"]}).json()
    assert set(v) == {"vertex", "epoch", "out_degree", "in_degree", "scores", "component"}  # component: the components application's label
    assert v["vertex"] == name and v["epoch"] == top["epoch"]
    assert v["in_degree"] > 0 and v["scores"]["pagerank"] == top["items"][0]["score"]


@pytest.mark.parametrize(
    ("path", "params", "status", "code"),
    [
        ("/v1/vertices/nobody-at-all", {}, 404, "vertex_not_found"),
        ("/v1/rank/top", {"k": 0}, 422, "invalid_request"),
        ("/v1/rank/top", {"k": "ten"}, 422, "invalid_request"),
        ("/v1/rank/top", {"k": 100_000}, 422, "invalid_request"),
        ("/v1/rank/top", {"algo": "hits"}, 422, "invalid_request"),  # not in the schema's enum
        ("/v1/rank/top", {"epoch": 10**9}, 404, "epoch_not_found"),
        ("/v1/rank/top", {"epoch": -1}, 422, "invalid_request"),
        ("/v1/epochs", {"limit": 0}, 422, "invalid_request"),
        ("/v1/vertices/" + "x" * 300, {}, 422, "invalid_request"),
        ("/no/such/route", {}, 404, "not_found"),
    ],
)
def test_bad_input_gets_a_json_error(running, path, params, status, code):
    _, client = running
    r = client.get(path, params=params)
    assert r.status_code == status
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert err["code"] == code and err["message"]


def test_before_the_first_epoch():
    with TestClient(create_app(ResultStore())) as client:
        r = client.get("/v1/epochs/latest")
        assert r.status_code == 404 and r.json()["error"]["code"] == "no_epoch"
        assert client.get("/v1/epochs").json() == {"items": []}
        assert client.get("/health").json()["status"] == "ok"
