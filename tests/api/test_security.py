"""Who may write and read: tokens, anonymous writes, protected reads, CORS, and settings that refuse placeholders."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from pulsegraph.api.app import create_app
from pulsegraph.compute.ids import NameChanges
from pulsegraph.api.store import ResultStore
from pulsegraph.settings import Settings
from tests.api.test_archive import NAMES, result

TOKEN = "hT3v_QwYz8pL0cR5nK2mX9aB7dF4gJ6s-Ue1"  # random, as an operator would generate it


def client(**kwargs) -> tuple[TestClient, list]:
    sunk: list = []
    return TestClient(create_app(ResultStore(), events_sink=sunk.extend, **kwargs)), sunk


def test_writes_are_off_without_a_token():
    c, sunk = client()
    r = c.post("/v1/events", content=b"[{}]")
    assert (r.status_code, r.json()["error"]["code"]) == (403, "writes_disabled")
    assert sunk == []


def test_anonymous_writes_when_asked_for():
    c, sunk = client(allow_anonymous_writes=True)
    r = c.post("/v1/events", json=[{"op": "add_edge", "src": "a", "dst": "b"}, "not an object"])
    assert r.status_code == 202 and r.json()["accepted"] == 1 and r.json()["rejected"] == 1
    assert sunk == [b'{"op":"add_edge","src":"a","dst":"b"}']


def test_a_token_beats_anonymous_writes():
    c, _ = client(api_token=TOKEN, allow_anonymous_writes=True)
    assert c.post("/v1/events", content=b"[]").status_code == 401
    assert c.post("/v1/events", content=b"[]", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 202


def test_reads_open_by_default_and_protected_on_request():
    c, _ = client(api_token=TOKEN)
    assert c.get("/v1/epochs").status_code == 200
    c, _ = client(api_token=TOKEN, protect_reads=True)
    assert c.get("/v1/epochs").status_code == 401
    assert c.get("/metrics").status_code == 401
    assert c.get("/v1/epochs", headers={"Authorization": "Bearer wrong-wrong-wrong"}).status_code == 403
    assert c.get("/v1/epochs", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert c.get("/health").status_code == 200  # liveness stays open
    assert c.get("/").status_code == 200  # the page itself holds no data


def test_protected_reads_cover_the_reads_answered_before_fastapi():
    """The top, the newest epoch and plain vertex and neighbors reads are answered before
    FastAPI's routing when reads are open; with reads protected they go through the read check like every
    other read."""
    store = ResultStore()
    store.add([result(1, full=True)], NameChanges(0, NAMES))
    open_ = TestClient(create_app(store))
    protected = TestClient(create_app(store, api_token=TOKEN, protect_reads=True))
    for path in ("/v1/rank/top?k=3", "/v1/epochs/latest", "/v1/vertices/v1", "/v1/vertices/v1?epoch=1",
                 "/v1/vertices/v1/neighbors", "/v1/vertices/v1/neighbors?direction=in&epoch=1"):
        assert open_.get(path).status_code == 200, path
        assert protected.get(path).status_code == 401, path
        granted = protected.get(path, headers={"Authorization": f"Bearer {TOKEN}"})
        assert granted.status_code == 200 and granted.content == open_.get(path).content, path


def test_cors_only_for_configured_origins():
    c, _ = client()
    r = c.options("/v1/epochs", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"})
    assert "access-control-allow-origin" not in r.headers
    c, _ = client(cors_origins=("https://dash.example",))
    ok = c.get("/v1/epochs", headers={"Origin": "https://dash.example"})
    assert ok.headers["access-control-allow-origin"] == "https://dash.example"
    bad = c.get("/v1/epochs", headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in bad.headers


def test_dashboard_is_served_with_a_strict_policy():
    c, _ = client()
    r = c.get("/")
    assert r.status_code == 200 and b"pulsegraph" in r.content
    assert "default-src 'self'" in r.headers["content-security-policy"]
    assert c.get("/static/app.js").status_code == 200


@pytest.mark.parametrize(
    "bad",
    [
        "changeme", "CHANGEME", "password", "your-token-here", "xxxxxxxxxxxxxxxxxxxx", "short-token",
        # Long enough, and still guessable.
        "abcdabcdabcdabcd", "password12345678", "qwertyuiopasdfghjkl", "correcthorsebatterystaple", "pulsegraph-api-token-2026",
        "s3cr3t-but-not-a-placeholder-42",
    ],
)
def test_placeholder_short_and_guessable_tokens_are_refused(bad, tmp_path):
    with pytest.raises(ValidationError) as err:
        Settings(api_token=bad)
    assert "secrets.token_urlsafe(32)" in str(err.value), "the message shows how to make a good one"
    assert bad not in str(err.value), "and never repeats the token"
    f = tmp_path / "token"
    f.write_text(bad + "\n")
    with pytest.raises(ValidationError):
        Settings(api_token_file=f)


def test_random_tokens_are_accepted():
    import secrets

    for token in (secrets.token_urlsafe(32), secrets.token_hex(20), secrets.token_urlsafe(64) * 3 + "x"):
        assert Settings(api_token=token).bearer_token() == token
    with pytest.raises(ValidationError):
        Settings(api_token=secrets.token_urlsafe(48) * 2)  # one random piece, twice: a repeat


def test_token_settings(tmp_path):
    f = tmp_path / "token"
    f.write_text(TOKEN + "\n")
    assert Settings(api_token_file=f).bearer_token() == TOKEN
    assert Settings(api_token=TOKEN).bearer_token() == TOKEN and TOKEN not in repr(Settings(api_token=TOKEN))
    assert Settings().bearer_token() is None
    with pytest.raises(ValidationError):
        Settings(protect_reads=True)  # nothing to protect them with
    with pytest.raises(ValidationError):
        Settings(api_token=TOKEN, api_token_file=f)
    assert Settings(cors_origins="https://a.example, https://b.example").cors_origins == ("https://a.example", "https://b.example")
