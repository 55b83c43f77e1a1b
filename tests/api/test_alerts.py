"""Alerts: the rules API, the evaluator on hand-built epochs, the page and the stream.

The epochs are real :class:`~pulsegraph.compute.results.EpochResult` objects in a real ResultStore (as the feed
adds them); the rules go through the real app, and the stream through a real uvicorn server.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path

import httpx
import jsonschema
import numpy as np
import pytest
import uvicorn
from fastapi.testclient import TestClient

from pulsegraph.api import alert_rules
from pulsegraph.api import alerts as alerts_mod
from pulsegraph.api.alerts import AlertBook, evaluate
from pulsegraph.api.app import create_app
from pulsegraph.api.edge import EdgeLimits, server_config
from pulsegraph.api.exceptions import AlertRulesError
from pulsegraph.api.store import ResultStore
from pulsegraph.compute.apps.components import ComponentsResult
from pulsegraph.compute.apps.exposure import TopicsResult
from pulsegraph.compute.ids import NameChanges
from tests.api.conftest import TOKEN, free_port
from tests.pulsegraph.test_results_topic import result

AUTH = {"Authorization": f"Bearer {TOKEN}"}
SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "alerts.schema.json").read_text())
NAMES = ["v0", "v1", "v2", "v3", "#a", "#b"]


def components(top: list[int], sizes: list[int], count: int) -> ComponentsResult:
    return ComponentsResult(None, count, np.array(top, np.int32), np.array(sizes, np.int64))


def topics(tags: list[int], users: list[int], persistence: list[float], as_of: int) -> TopicsResult:
    n = len(tags)
    return TopicsResult(
        tags=np.array(tags, np.int32), usage=np.array(users, np.int64), users=np.array(users, np.int64),
        persistence=np.array(persistence, np.float64), curve=np.zeros((n, 8)), reached=np.zeros((n, 8), np.int64), as_of=as_of,
    )


def epochs() -> list:
    """Three ranked epochs; 4 is merged into 5 (so 5 follows 3)."""
    a = result(1, {"pagerank": [0.5, 0.3, 0.2, 0.0, 0.0, 0.0]}, {"pagerank": 1e-9})
    a.apps = {"components": components([0, 3], [4, 2], 2), "topics": topics([4, 5], [3, 9], [0.2, 0.6], 1)}
    b = result(3, {"pagerank": [0.2, 0.15, 0.05, 0.6, 0.0, 0.0]}, {"pagerank": 1e-9}, skipped=[2])
    b.apps = {"components": components([0], [6], 1), "topics": topics([4, 5], [3, 9], [0.5, 0.4], 3)}
    c = result(5, {"pagerank": [0.1, 0.4, 0.05, 0.35, 0.0, 0.1]}, {"pagerank": 1e-9}, skipped=[4])
    c.apps = {"components": components([0], [6], 1), "topics": topics([4, 5], [3, 9], [0.5, 0.4], 3)}
    return [a, b, c]


def filled(n: int = 3) -> ResultStore:
    store = ResultStore(retain=10)
    rs = epochs()[:n]
    store.add(rs[:1], NameChanges(0, NAMES))
    for r in rs[1:]:
        store.add([r], None)
    return store


def rule(book: AlertBook, **spec):
    from pydantic import TypeAdapter

    from pulsegraph.api.models import RuleSpec

    return book.add(TypeAdapter(RuleSpec).validate_python(spec))


def two_epochs_and_a_top_2_rule(retain: int) -> tuple[ResultStore, AlertBook, list]:
    """A store holding the first two of :func:`epochs` and a book whose one rule watches PageRank's top 2."""
    store = ResultStore(retain=retain)
    book = AlertBook(store)
    rule(book, kind="top_k", k=2)
    rs = epochs()
    store.add(rs[:1], NameChanges(0, NAMES))
    store.add(rs[1:2], None)
    return store, book, rs


def seen(book: AlertBook, epoch: int) -> list[tuple]:
    got = book.epoch_alerts(epoch)
    assert got is not None
    return [(a["rule"], a["event"], a["subject"], a["old"], a["new"]) for a in got.alerts]


# -- the evaluator ---------------------------------------------------------------------------------------
def test_each_kind_fires_on_what_changed_from_the_ranked_epoch_before():
    store = ResultStore(retain=10)
    book = AlertBook(store)
    top = rule(book, kind="top_k", k=2)
    watch = rule(book, kind="top_k", k=2, on="enter", vertex="v3")
    move = rule(book, kind="rank_move", places=2, within=10)
    comp = rule(book, kind="component_size", size=5)
    topic_up = rule(book, kind="topic_persistence", value=0.45)
    topic_down = rule(book, kind="topic_persistence", value=0.45, direction="down", min_users=5)
    assert {r["since_epoch"] for r in book.rules()} == {1}
    rs = epochs()
    store.add(rs[:1], NameChanges(0, NAMES))
    store.add(rs[1:2], None)
    assert seen(book, 1) == []  # nothing before it to compare with
    got = seen(book, 3)
    # 1 -> 3: v3 jumps from 4th to 1st, v1 falls out of the top 2; the components merge to 6; #a rises to 0.5, #b falls to 0.4.
    assert got == [
        (top["id"], "entered", "v3", 4, 1), (top["id"], "left", "v1", 2, 3),
        (watch["id"], "entered", "v3", 4, 1),
        (move["id"], "rose", "v3", 4, 1),
        (comp["id"], "reached", "v0", 4, 6),
        (topic_up["id"], "rose_above", "#a", 0.2, 0.5),
        (topic_down["id"], "fell_below", "#b", 0.6, 0.4),
    ]
    alerts = book.epoch_alerts(3)
    assert alerts is not None and alerts.previous_epoch == 1  # 2 was merged into 3
    record = book.record(3)
    jsonschema.Draft202012Validator(SCHEMA).validate(record)
    assert record["alerts"][0]["message"] == "v3 entered the top 2 of pagerank: rank 1 (was 4)"
    # 3 -> 5: the same components and the same curves (counted at the same epoch) raise nothing.
    store.add(rs[2:], None)
    assert seen(book, 5) == [
        (top["id"], "entered", "v1", 3, 1), (top["id"], "left", "v0", 2, 3),
        (move["id"], "rose", "v1", 3, 1), (move["id"], "rose", "#b", 6, 4),  # most places first, then by the new rank
    ]


def test_a_vertex_new_in_the_epoch_enters_with_no_old_rank_and_has_not_moved():
    store = ResultStore(retain=10)
    book = AlertBook(store)
    top = rule(book, kind="top_k", k=1)
    move = rule(book, kind="rank_move", places=1)
    store.add([result(1, {"pagerank": [0.6, 0.4]}, {"pagerank": 1e-9})], NameChanges(0, ["a", "b"]))
    store.add([result(2, {"pagerank": [0.3, 0.2, 0.5]}, {"pagerank": 1e-9})], NameChanges(2, ["c"]))
    assert seen(book, 2) == [
        (top["id"], "entered", "c", None, 1), (top["id"], "left", "a", 1, 2),
        (move["id"], "fell", "a", 1, 2), (move["id"], "fell", "b", 2, 3),  # c was not ranked before: it has not moved
    ]
    assert book.record(2)["alerts"][0]["message"] == "c entered the top 1 of pagerank: rank 1 (new vertex)"


def test_with_a_window_a_vertex_that_left_it_leaves_the_top_and_has_not_moved():
    store = ResultStore(retain=10)
    book = AlertBook(store)
    top = rule(book, kind="top_k", k=2)
    move = rule(book, kind="rank_move", places=1)
    a = result(1, {"pagerank": [0.5, 0.3, 0.2]}, {"pagerank": 1e-9})
    a.present = np.array([True, True, True])
    b = result(2, {"pagerank": [0.0, 0.3, 0.2]}, {"pagerank": 1e-9})
    b.present, b.vertices = np.array([False, True, True]), 2  # a's edges all left the window
    store.add([a], NameChanges(0, ["a", "b", "c"]))
    store.add([b], None)
    got = seen(book, 2)
    # b and c rose a place as a left; a itself did not move (it has no rank in the window now).
    assert got == [
        (top["id"], "entered", "c", 3, 2), (top["id"], "left", "a", 1, None),
        (move["id"], "rose", "b", 2, 1), (move["id"], "rose", "c", 3, 2),
    ]
    assert book.record(2)["alerts"][1]["message"] == "a left the top 2 of pagerank: out of the window (was 1)"


def test_a_rule_made_later_applies_from_the_epoch_after_the_newest_and_after_the_floor():
    store = filled(3)
    book = AlertBook(store)
    assert evaluate(store.get(5), [], store).previous_epoch == 3
    r = rule(book, kind="rank_move", places=1)
    # Epoch 5 may be on the results topic already: it keeps the (no) alerts it had.
    assert r["since_epoch"] == 6 and seen(book, 5) == []
    # After a restart, before the feed took the history back, the archive's newest is the floor.
    assert rule(AlertBook(ResultStore(), floor=9), kind="component_size", size=3)["since_epoch"] == 10


def test_the_oldest_retained_epoch_has_no_alerts_as_after_a_restart():
    store, book, rs = two_epochs_and_a_top_2_rule(retain=2)
    assert len(seen(book, 3)) == 2
    store.add(rs[2:], None)  # 1 leaves the retention: 3 is now the oldest, with nothing before it
    assert seen(book, 3) == []
    page = book.page(None, 100)
    assert {a["epoch"] for a in page["items"]} == {5}


def test_bounds_per_rule_are_counted_as_dropped(monkeypatch):
    monkeypatch.setattr(alert_rules, "MAX_PER_RULE", 1)
    store, book, rs = two_epochs_and_a_top_2_rule(retain=10)
    got = book.record(3)
    assert [a["subject"] for a in got["alerts"]] == ["v3"] and got["dropped"] == 1


def test_the_same_epochs_and_rules_give_the_same_alerts_after_a_restart(tmp_path):
    path = tmp_path / "alert-rules.json"
    store = ResultStore(retain=10)
    book = AlertBook(store, path)
    for spec in ({"kind": "top_k", "k": 2}, {"kind": "rank_move", "places": 1}, {"kind": "component_size", "size": 5},
                 {"kind": "topic_persistence", "value": 0.45, "direction": "both"}):
        rule(book, **spec)
    rs = epochs()
    store.add(rs[:1], NameChanges(0, NAMES))
    for r in rs[1:]:
        store.add([r], None)
    before = book.page(0, 1000)
    again = AlertBook(filled(3), path)  # a new process: rules from the file, epochs from the archive
    assert again.rules() == book.rules()
    assert again.page(0, 1000) == before and before["items"]


# -- the rules file -----------------------------------------------------------------------------------------
def test_rules_survive_in_the_file_and_ids_are_never_reused(tmp_path):
    path = tmp_path / "alert-rules.json"
    store = filled(2)
    book = AlertBook(store, path)
    a = rule(book, kind="top_k", k=3, name="top three")
    b = rule(book, kind="component_size", size=100)
    book.delete(b["id"])
    again = AlertBook(store, path)
    assert again.rules() == [a]
    assert rule(again, kind="rank_move", places=5)["id"] == b["id"] + 1
    assert not (tmp_path / "alert-rules.json.tmp").exists()


def test_an_unreadable_rules_file_stops_with_what_to_do(tmp_path):
    path = tmp_path / "alert-rules.json"
    path.write_text('{"format": 1, "next_id": 2, "rules": [{"id": 1, "since_epoch": 1, "created_at": "x", "rule": {"kind": "top_k", "k": 0}}]}')
    with pytest.raises(AlertRulesError, match="Operator action"):
        AlertBook(ResultStore(), path)
    path.write_text("{")
    with pytest.raises(AlertRulesError, match="move it aside"):
        AlertBook(ResultStore(), path)


# -- the rules API --------------------------------------------------------------------------------------------
@pytest.fixture()
def client(tmp_path):
    store = filled(3)
    app = create_app(store, api_token=TOKEN, alerts=AlertBook(store, tmp_path / "alert-rules.json"))
    with TestClient(app) as c:
        yield c


def test_rules_are_made_listed_read_and_deleted_with_the_token(client):
    made = client.post("/v1/alerts/rules", json={"kind": "top_k", "k": 10, "algo": "pagerank"}, headers=AUTH)
    assert made.status_code == 201
    body = made.json()
    assert body["since_epoch"] == 6 and body["rule"] == {"name": None, "kind": "top_k", "algo": "pagerank", "k": 10, "on": "both", "vertex": None}
    listed = client.get("/v1/alerts/rules").json()
    assert listed["max"] == 1000 and listed["items"] == [body]
    assert client.get(f"/v1/alerts/rules/{body['id']}").json() == body
    assert client.delete(f"/v1/alerts/rules/{body['id']}", headers=AUTH).status_code == 204
    gone = client.get(f"/v1/alerts/rules/{body['id']}")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "rule_not_found"
    assert client.delete(f"/v1/alerts/rules/{body['id']}", headers=AUTH).status_code == 404


def test_changing_rules_needs_the_write_token(client, tmp_path):
    spec = {"kind": "component_size", "size": 10}
    assert client.post("/v1/alerts/rules", json=spec).status_code == 401
    wrong = client.post("/v1/alerts/rules", json=spec, headers={"Authorization": "Bearer not-the-token-at-all-1234"})
    assert wrong.status_code == 403 and wrong.json()["error"]["code"] == "bad_token"
    made = client.post("/v1/alerts/rules", json=spec, headers=AUTH).json()
    assert client.delete(f"/v1/alerts/rules/{made['id']}").status_code == 401
    off = TestClient(create_app(ResultStore()))  # no token configured: writes are off
    refused = off.post("/v1/alerts/rules", json=spec)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "writes_disabled"


def test_reads_of_rules_and_alerts_follow_protect_reads():
    c = TestClient(create_app(ResultStore(), api_token=TOKEN, protect_reads=True))
    for path in ("/v1/alerts", "/v1/alerts/rules", "/v1/alerts/stream"):
        assert c.get(path).status_code == 401, path
    assert c.get("/v1/alerts", headers=AUTH).json() == {"items": [], "through": None, "more": False, "dropped": 0}


@pytest.mark.parametrize("body", [
    {"kind": "top_k"},  # k missing
    {"kind": "top_k", "k": 0},
    {"kind": "top_k", "k": 1001},
    {"kind": "top_k", "k": 5, "algo": "hits"},
    {"kind": "top_k", "k": 5, "colour": "red"},  # unknown fields are refused, not ignored
    {"kind": "rank_move", "places": 0},
    {"kind": "component_size", "size": 1},
    {"kind": "topic_persistence", "value": 1.5},
    {"kind": "topic_persistence", "value": "high"},
    {"kind": "topic_persistence", "value": False},  # strict: false is not 0
    {"kind": "top_k", "k": "5"},
    {"kind": "earthquake"},
    {"k": 5},
    [{"kind": "top_k", "k": 5}],
    "top_k",
])
def test_a_bad_rule_is_a_422_with_the_error_body(client, body):
    got = client.post("/v1/alerts/rules", json=body, headers=AUTH)
    assert got.status_code == 422, got.text
    assert got.json()["error"]["code"] == "invalid_request" and got.json()["error"]["message"]
    assert client.get("/v1/alerts/rules").json()["items"] == []


def test_a_body_that_is_not_json_is_a_4xx_with_the_error_body(client):
    got = client.post("/v1/alerts/rules", content=b"{kind: top_k", headers={**AUTH, "Content-Type": "application/json"})
    assert 400 <= got.status_code < 500 and got.json()["error"]["code"]


def test_the_number_of_rules_is_bounded_and_the_error_says_so(client, monkeypatch):
    monkeypatch.setattr(alerts_mod, "MAX_RULES", 3)
    for _ in range(3):
        assert client.post("/v1/alerts/rules", json={"kind": "component_size", "size": 10}, headers=AUTH).status_code == 201
    full = client.post("/v1/alerts/rules", json={"kind": "component_size", "size": 10}, headers=AUTH)
    assert full.status_code == 409
    assert full.json()["error"]["code"] == "too_many_rules" and "at most 3 alert rules" in full.json()["error"]["message"]


# -- GET /v1/alerts ------------------------------------------------------------------------------------------
def test_pages_hold_whole_epochs_oldest_first():
    store = ResultStore(retain=10)
    book = AlertBook(store)
    top = rule(book, kind="top_k", k=2)
    rule(book, kind="component_size", size=5)
    rs = epochs()
    store.add(rs[:1], NameChanges(0, NAMES))
    for r in rs[1:]:
        store.add([r], None)
    client = TestClient(create_app(store, alerts=book))
    everything = client.get("/v1/alerts", params={"since": 0}).json()
    assert [a["epoch"] for a in everything["items"]] == [3, 3, 3, 5, 5]
    assert everything["through"] == 5 and everything["more"] is False and everything["dropped"] == 0
    first = client.get("/v1/alerts", params={"since": 0, "limit": 2}).json()
    # Epoch 3's three alerts are never split; the next page starts after it.
    assert [a["epoch"] for a in first["items"]] == [3, 3, 3] and first["through"] == 3 and first["more"] is True
    rest = client.get("/v1/alerts", params={"since": first["through"], "limit": 2}).json()
    assert [a["epoch"] for a in rest["items"]] == [5, 5] and rest["more"] is False
    newest = client.get("/v1/alerts", params={"limit": 2}).json()
    assert [a["epoch"] for a in newest["items"]] == [5, 5] and newest["through"] == 5
    only = client.get("/v1/alerts", params={"since": 0, "rule": top["id"]}).json()
    assert {a["rule"] for a in only["items"]} == {top["id"]}
    assert client.get("/v1/alerts", params={"limit": 1001}).status_code == 422
    for a in everything["items"]:
        jsonschema.Draft202012Validator(SCHEMA["properties"]["alerts"]["items"]).validate(a)
    # A deleted rule takes its alerts with it.
    book.delete(top["id"])
    assert {a["kind"] for a in client.get("/v1/alerts", params={"since": 0}).json()["items"]} == {"component_size"}


# -- the alert stream -------------------------------------------------------------------------------------------
@contextlib.contextmanager
def serving(app):
    """A real uvicorn server over ``app`` on a free loopback port, in a thread."""
    port = free_port()
    srv = uvicorn.Server(server_config(app, "127.0.0.1", port, log_level="warning", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        assert time.monotonic() < deadline and thread.is_alive()
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(timeout=10)


def test_the_alert_stream_replays_after_since_and_sends_each_new_epoch_with_alerts():
    store, book, rs = two_epochs_and_a_top_2_rule(retain=10)
    with serving(create_app(store, alerts=book)) as base:
        frames: list[dict] = []
        with httpx.stream("GET", f"{base}/v1/alerts/stream", params={"since": 0}, timeout=10) as r:
            assert r.status_code == 200
            ids = []
            for line in r.iter_lines():
                if line.startswith("id: "):
                    ids.append(int(line[4:]))
                if line.startswith("data: "):
                    frames.append(json.loads(line[6:]))
                    if len(frames) == 1:
                        store.add(rs[2:], None)  # the feed adds epoch 5: its alerts follow
                    else:
                        break
        assert ids == [3, 5] and [f["epoch"] for f in frames] == [3, 5]
        for f in frames:
            jsonschema.Draft202012Validator(SCHEMA).validate(f)
        assert frames[0] == book.record(3)
        # Resuming after the last event seen sends nothing twice: only what came after it.
        with httpx.stream("GET", f"{base}/v1/alerts/stream", headers={"Last-Event-ID": "3"}, timeout=10) as r:
            for line in r.iter_lines():
                if line.startswith("id: "):
                    assert int(line[4:]) == 5
                    break


def test_the_alert_stream_takes_a_slot_of_the_event_streams():
    store = filled(3)
    with serving(create_app(store, api_token=TOKEN, limits=EdgeLimits(max_streams=1))) as base:
        with httpx.stream("GET", f"{base}/v1/stream", headers=AUTH, timeout=10) as held:
            assert held.status_code == 200
            refused = httpx.get(f"{base}/v1/alerts/stream", headers=AUTH, timeout=10)
            assert refused.status_code == 503 and refused.json()["error"]["code"] == "too_many_streams"
        deadline = time.monotonic() + 10
        while True:  # the slot is given back once the server sees the first stream close
            with httpx.stream("GET", f"{base}/v1/alerts/stream", headers=AUTH, timeout=10) as r:
                if r.status_code == 200:
                    break
            assert time.monotonic() < deadline, "the slot was not given back"
            time.sleep(0.1)
