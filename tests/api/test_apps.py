"""The applications' routes over the real pipeline: components, topics, trends, paths; shapes, bounds, and 4xx (never 500)."""

from __future__ import annotations

from urllib.parse import quote

import pytest


def epoch_with_topics(client) -> int:
    body = client.get("/v1/topics", params={"k": 5}).json()
    assert body["items"], body
    return body["epoch"]


def test_components_largest_first_and_a_vertex_knows_its_own(running):
    p, client = running
    e = client.get("/v1/epochs/latest").json()
    body = client.get("/v1/components", params={"k": 5, "epoch": e["epoch"]}).json()
    assert body["epoch"] == e["epoch"] and 1 <= body["count"] <= e["vertices"]
    sizes = [c["size"] for c in body["items"]]
    assert sizes == sorted(sizes, reverse=True) and sum(sizes) <= e["vertices"]
    assert [c["rank"] for c in body["items"]] == list(range(1, len(sizes) + 1))
    biggest = body["items"][0]
    v = client.get(f"/v1/vertices/{quote(biggest['id'], safe='')}", params={"epoch": e["epoch"]}).json()
    assert v["component"] == {"id": biggest["id"], "size": biggest["size"]}
    assert {"out_degree", "in_degree", "scores"} <= set(v)  # the existing fields stay


def test_topics_carry_usage_users_persistence_and_a_curve(running):
    _, client = running
    epoch_with_topics(client)
    body = client.get("/v1/topics", params={"sort": "controversy", "k": 20}).json()
    assert body["sort"] == "controversy" and 1 <= len(body["items"]) <= 20
    pers = [t["persistence"] for t in body["items"]]
    assert pers == sorted(pers, reverse=True)
    for t in body["items"]:
        assert t["hashtag"].startswith("#") and t["usage"] >= t["users"] >= 1
        assert 0.0 <= t["persistence"] <= 1.0
        assert len(t["curve"]) == 8 and len(t["exposed"]) == 8
        for p, n in zip(t["curve"], t["exposed"]):
            assert (p is None) == (n == 0) and (p is None or 0.0 <= p <= 1.0)
    by_usage = client.get("/v1/topics", params={"sort": "usage", "k": 5}).json()["items"]
    assert [t["usage"] for t in by_usage] == sorted((t["usage"] for t in by_usage), reverse=True)


def test_the_fast_topics_path_answers_what_the_route_answers(running):
    _, client = running
    e = epoch_with_topics(client)
    for query in ("", "?k=3", f"?sort=usage&k=7&epoch={e}", "?sort=users", f"?epoch={e}&sort=controversy"):
        for _ in range(5):  # without ?epoch= both read the newest, which a new epoch may change between them: again
            fast = client.get("/v1/topics" + query)
            # An unknown parameter takes the request past the fast path to the FastAPI route, which ignores it.
            route = client.get("/v1/topics" + (query + "&" if query else "?") + "via=route")
            if fast.status_code != 200 or route.status_code != 200 or fast.json()["epoch"] == route.json()["epoch"]:
                break
        assert fast.status_code == route.status_code == 200, (query, fast.text)
        assert fast.content == route.content and fast.headers["content-type"] == route.headers["content-type"], query
    for query, status in (("?k=0", 422), ("?k=1001", 422), ("?sort=nope", 422), ("?epoch=999999999", 404)):
        r = client.get("/v1/topics" + query)
        assert r.status_code == status and r.json()["error"]["code"], (query, r.text)


def test_trends_in_movers_form_and_usage_per_epoch(running):
    _, client = running
    epoch_with_topics(client)
    body = client.get("/v1/trends", params={"k": 5}).json()
    # From the ranked epoch before: the one just before, unless ranking fell behind and merged it in.
    to = client.get(f"/v1/epochs/{body['to']}").json()
    assert body["from"] == (to["skipped"][0] if to["skipped"] else body["to"]) - 1
    for m in body["rising"]:
        assert m["change"] > 0 and m["from_rank"] - m["to_rank"] == m["change"] and m["usage_to"] >= m["usage_from"]
    for m in body["falling"]:
        assert m["change"] < 0
    tag = client.get("/v1/topics", params={"sort": "usage", "k": 1}).json()["items"][0]["hashtag"]
    usage = client.get("/v1/trends/usage", params={"tag": tag}).json()
    assert usage["hashtag"] == tag and usage["items"]
    counts = [u["usage"] for u in usage["items"]]
    assert counts == sorted(counts)  # tweets only add
    for a, b in zip(usage["items"], usage["items"][1:]):
        if b["new"] is not None:
            assert b["new"] == b["usage"] - a["usage"]


def test_a_path_through_a_landmark_is_made_of_edges_of_that_epoch(running):
    _, client = running
    top = client.get("/v1/rank/top", params={"algo": "tunkrank", "k": 30}).json()
    e = top["epoch"]
    found = 0
    names = [i["vertex"] for i in top["items"]]
    for src in names[:6]:
        for dst in names[6:]:
            body = client.get("/v1/paths", params={"src": src, "dst": dst, "epoch": e}).json()
            assert set(body) >= {"estimate", "via", "path", "exact", "distance"}
            if body["estimate"] is None:
                assert body["path"] == [] and body["via"] is None
                continue
            found += 1
            path = body["path"]
            assert len(path) == body["estimate"] + 1 and path[0] == src and path[-1] == dst and body["via"] in path
            if body["distance"] is not None:
                assert body["distance"] <= body["estimate"]
                assert body["exact"] == (body["distance"] == body["estimate"])
            for a, b in zip(path, path[1:]):
                nb = client.get(f"/v1/vertices/{quote(a, safe='')}/neighbors", params={"limit": 1000, "epoch": e}).json()
                assert b in {n["vertex"] for n in nb["items"]}, (a, b)
            if found >= 5:
                return
    assert found, "no pair of top vertices is connected through a landmark"


def test_same_vertex_is_an_exact_path_of_length_zero(running):
    _, client = running
    v = client.get("/v1/rank/top", params={"k": 1}).json()["items"][0]["vertex"]
    body = client.get("/v1/paths", params={"src": v, "dst": v}).json()
    assert body["estimate"] == 0 and body["path"] == [v] and body["exact"] is True


@pytest.mark.parametrize(
    "path, params, status, code",
    [
        ("/v1/components", {"k": 0}, 422, "invalid_request"),
        ("/v1/components", {"k": 1001}, 422, "invalid_request"),
        ("/v1/components", {"epoch": 10**12}, 404, "epoch_not_found"),
        ("/v1/topics", {"k": 0}, 422, "invalid_request"),
        ("/v1/topics", {"k": 100000}, 422, "invalid_request"),
        ("/v1/topics", {"sort": "random"}, 422, "invalid_request"),
        ("/v1/topics", {"epoch": 10**12}, 404, "epoch_not_found"),
        ("/v1/trends", {"from": 10**12}, 404, "epoch_not_found"),
        ("/v1/trends", {"k": 101}, 422, "invalid_request"),
        ("/v1/trends/usage", {"tag": "#no-such-tag-anywhere"}, 404, "vertex_not_found"),
        ("/v1/trends/usage", {}, 422, "invalid_request"),
        ("/v1/paths", {"src": "nobody-at-all", "dst": "nobody-either"}, 404, "vertex_not_found"),
        ("/v1/paths", {"src": "x"}, 422, "invalid_request"),
        ("/v1/paths", {"src": "x" * 300, "dst": "y"}, 422, "invalid_request"),
        ("/v1/vertices/nobody-at-all", {}, 404, "vertex_not_found"),
    ],
)
def test_bad_app_reads_get_a_json_error(running, path, params, status, code):
    _, client = running
    r = client.get(path, params=params)
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code
