"""The API over windowed epochs: epoch objects carry the window and the watermark, a vertex outside the
window at an epoch answers 404 ``vertex_outside_window``, and reads list only the vertices in the snapshot.

The epochs are the compute stage's own results over the hand-built window deltas of
tests/compute/test_window.py (no Ray, no pipeline): a store fed with them, and the app over the store.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import jsonschema
import numpy as np
import pytest
from fastapi.testclient import TestClient

from pulsegraph.api.app import create_app
from pulsegraph.api.archive import ResultArchive
from pulsegraph.api.store import ResultStore
from pulsegraph.compute.ids import NameChanges
from pulsegraph.compute.stage import ComputeStage
from pulsegraph.results_topic import epoch_record
from tests.compute.test_window import RANKED, WINDOW, window_epochs

SCHEMA = json.loads((Path(__file__).parents[2] / "docs" / "results.schema.json").read_text())


def windowed_store(seed: int = 1, epochs: int = 16, archive: ResultArchive | None = None):
    """A store holding every epoch of a windowed stream, and for each epoch its results and model's presence."""
    stage = ComputeStage(RANKED)
    store = ResultStore(retain=50, archive=archive)
    present_at: dict[int, set[str]] = {}
    for model, sealed in window_epochs(seed, epochs=epochs):
        r = stage.apply([sealed])
        new = stage.graph.names[len(store.names):]
        store.add([r], NameChanges(len(store.names), list(new)))
        present_at[r.epoch] = model.present()
    return store, present_at


@pytest.fixture(scope="module")
def client():
    store, present_at = windowed_store()
    with TestClient(create_app(store)) as c:
        yield c, store, present_at


def test_epoch_objects_carry_the_window_and_the_watermark(client):
    c, store, _ = client
    latest = c.get("/v1/epochs/latest").json()
    assert latest["window"] == WINDOW and isinstance(latest["watermark"], float)
    assert latest["watermark"] == store.get().result.watermark and latest["late"] >= 0
    items = c.get("/v1/epochs?limit=5").json()["items"]
    assert all(i["window"] == WINDOW for i in items)
    wm = [i["watermark"] for i in items]
    assert wm == sorted(wm, reverse=True)  # newest first, watermarks only grow
    one = c.get(f"/v1/epochs/{items[-1]['epoch']}").json()
    assert one == items[-1]
    # The SSE stream sends these same bytes (pulsegraph.api.app publishes view.info_json per epoch).
    assert json.loads(store.get().info_json) == latest


def test_a_vertex_outside_the_window_is_a_404_that_says_so(client):
    c, store, present_at = client
    newest = store.latest_epoch
    known = set(store.names)
    gone = sorted(known - present_at[newest])
    here = sorted(present_at[newest])
    assert gone and here
    got = c.get(f"/v1/vertices/{quote(gone[0], safe='')}")
    assert got.status_code == 404
    err = got.json()["error"]
    assert err["code"] == "vertex_outside_window" and "outside the window" in err["message"]
    assert c.get(f"/v1/vertices/{quote(gone[0], safe='')}/neighbors").json()["error"]["code"] == "vertex_outside_window"
    ok = c.get(f"/v1/vertices/{quote(here[0], safe='')}")
    assert ok.status_code == 200 and ok.json()["vertex"] == here[0]
    # As of an epoch where it was in the window, the same vertex answers.
    was = [e for e in sorted(present_at) if gone[0] in present_at[e] and e >= store.get(None).result.epoch - 49]
    if was:
        assert c.get(f"/v1/vertices/{quote(gone[0], safe='')}?epoch={was[-1]}").status_code == 200
    # Its history lists only the epochs that held it.
    hist = c.get(f"/v1/vertices/{quote(gone[0], safe='')}/history?limit=100").json()["items"]
    assert {h["epoch"] for h in hist} == {e for e, p in present_at.items() if gone[0] in p}
    assert c.get("/v1/vertices/nobody-ever").json()["error"]["code"] == "vertex_not_found"


def test_top_search_and_components_list_only_vertices_in_the_window(client):
    c, store, present_at = client
    here = present_at[store.latest_epoch]
    for algo in ("pagerank", "tunkrank"):
        top = c.get(f"/v1/rank/top?k=1000&algo={algo}").json()["items"]
        assert {i["vertex"] for i in top} == here
    pr = c.get("/v1/rank/top?k=1000").json()["items"]
    assert abs(sum(i["score"] for i in pr) - 1.0) < 1e-9
    found = c.get("/v1/search?prefix=v&limit=100").json()["items"]
    assert set(found) == here and found == sorted(found)
    comps = c.get("/v1/components?k=1000").json()
    assert sum(i["size"] for i in comps["items"]) == len(here) and comps["count"] == len(comps["items"])
    for m in (c.get("/v1/movers?k=100").json(),):
        moved = {i["vertex"] for i in m["rising"] + m["falling"]}
        assert moved <= here & present_at[m["from"]]


def test_the_results_record_carries_the_watermark():
    store, _ = windowed_store(epochs=6)
    view = store.get()
    rec = epoch_record(view, store.names, k=5)
    jsonschema.validate(rec, SCHEMA)
    assert rec["watermark"] == view.result.watermark and rec["vertices"] == view.result.vertices


def test_archived_epochs_keep_window_watermark_and_presence(tmp_path):
    archive = ResultArchive(tmp_path / "results", retain=50)
    store, _ = windowed_store(epochs=6, archive=archive)
    r = store.get().result
    got = archive.mapped(r.epoch)
    assert got is not None
    back, _ = got
    assert (back.window, back.watermark, back.late, back.vertices) == (r.window, r.watermark, r.late, r.vertices)
    assert np.array_equal(back.present, r.present)


def test_with_ids_reused_soon_every_retained_epoch_pairs_each_score_with_its_own_vertex():
    """A reuse delay of one second of event time and few users: ids change hands epoch after epoch. The
    store follows every rename and keeps only the epochs whose ids still name the vertices they named, so
    through its names every present vertex of every retained epoch has that vertex's own score."""
    from tests.compute.test_window import shard_window_epochs  # noqa: PLC0415

    stage = ComputeStage(RANKED, reuse_after=1)
    store = ResultStore(retain=50)
    at: dict[int, dict[str, tuple[float, float]]] = {}
    reused, last, before = 0, 0, []
    for _, sealed in shard_window_epochs(3, 30, users=20):
        r = stage.apply([sealed])
        g = stage.graph
        reused += sum(1 for i, name in enumerate(before[: g.n]) if name and g.names[i] and g.names[i] != name)
        before = list(g.names)
        at[r.epoch] = {g.names[i]: (float(r.scores["pagerank"][i]), float(r.scores["tunkrank"][i])) for i in np.flatnonzero(r.present)}
        store.add([r], g.name_changes(last, len(store.names)))
        g.forget_renames(r.epoch)
        last = r.epoch
        assert store.names == g.names and all(store.index[n] == i for i, n in enumerate(g.names) if n)
        for e in store.epoch_numbers():
            result = store.get(e).result
            got = {store.names[i]: (float(result.scores["pagerank"][i]), float(result.scores["tunkrank"][i]))
                   for i in np.flatnonzero(result.present)}
            assert got == at[e], e
    assert reused > 0 and store.retained() < 30  # ids changed hands, and the epochs before the changes went
