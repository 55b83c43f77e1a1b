"""The dashboard in a real browser (Debian's chromium, driven by Playwright) against the running pipeline,
and against a server over windowed epochs (the compute stage's results, no pipeline) for the window card.

`make test` installs chromium when /usr/bin/chromium is missing; Playwright's own
browser download is never used. The screenshot lands in tests/artifacts/.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import threading
import time

import pytest
import uvicorn

from pulsegraph.api.app import create_app
from pulsegraph.api.edge import server_config
from tests.api.conftest import free_port

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = os.path.join(os.path.dirname(__file__), "..", "artifacts")
# The flags a sandboxed CI machine needs, and none of Chromium's background calls home.
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--disable-quic",
]


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield b
        b.close()


def epoch_on(page) -> int:
    text = page.locator("#epoch").inner_text().replace(",", "")
    return int(text) if text.isdigit() else 0


def wait_until(predicate, timeout: float = 30.0, what: str = "") -> None:
    """Poll from Python: the page's CSP forbids the string evaluation wait_for_function relies on."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_dashboard_goes_live_and_opens_a_vertex(browser, server):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server + "/")
    wait_until(lambda: epoch_on(page) > 0, what="the first epoch on the page")
    first = epoch_on(page)
    wait_until(lambda: epoch_on(page) > first + 2, what="the epoch number to increase")
    rows = page.locator("#top-body tr[data-vertex]")
    wait_until(lambda: rows.count() == 20, what="the top 20")
    name = rows.nth(1).get_attribute("data-vertex")
    page.fill("#search", name[:-1])
    page.wait_for_selector(f"#suggestions li:text-is('{name}')", timeout=10_000)
    page.click(f"#suggestions li:text-is('{name}')")
    page.wait_for_selector("#vertex-body:not([hidden])", timeout=10_000)
    assert page.locator("#vertex-title").inner_text() == name
    history = page.locator("#chart-history path.line")
    history.wait_for(state="attached", timeout=10_000)  # a steady rank is a flat line, which Playwright calls hidden
    assert history.get_attribute("d").count("L") >= 2
    assert page.locator("#nb-in tr").count() >= 1
    assert page.locator("#chart-rate path.line").count() == 1
    assert page.locator("#kpi-window").is_hidden()  # no --window: no window card
    os.makedirs(ARTIFACTS, exist_ok=True)
    page.screenshot(path=os.path.join(ARTIFACTS, "dashboard.png"), full_page=True)
    assert page.locator("#banner").is_hidden()
    assert errors == []


def test_a_banner_when_the_api_is_down(browser, server):
    page = browser.new_page()
    page.goto(server + "/")
    wait_until(lambda: epoch_on(page) > 0 and page.locator("#top-body tr[data-vertex]").count() == 20, what="the page to fill")
    # Every API call now fails as if the server were gone; the page must say so, not go blank.
    page.route(re.compile(r".*/(v1|health).*"), lambda route: route.abort())
    page.evaluate("state.stream && state.stream.close(); state.stream = null")
    page.wait_for_selector("#banner:not([hidden])", timeout=15_000)
    assert "down" in page.locator("#banner-text").inner_text()
    assert page.locator("#top-body tr[data-vertex]").count() == 20  # the last data stays on screen
    page.close()




def test_topics_panel_and_path_finder_render(browser, server):
    """The controversial topics with their exposure curves, and a path drawn as a chain."""
    import httpx

    page = browser.new_page(viewport={"width": 1400, "height": 1200})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server + "/")
    topics = page.locator("#topics-body tr[data-hashtag]")
    wait_until(lambda: topics.count() >= 1, what="the controversial topics")
    assert topics.nth(0).get_attribute("data-hashtag").startswith("#")
    assert page.locator("#topics-body svg.spark").count() == topics.count()
    # A pair the landmarks connect, found through the API; the page must draw estimate + 1 vertices.
    top = httpx.get(server + "/v1/rank/top", params={"algo": "tunkrank", "k": 20}).json()
    names = [i["vertex"] for i in top["items"]]
    pair = None
    for src in names[:5]:
        for dst in names[5:]:
            body = httpx.get(server + "/v1/paths", params={"src": src, "dst": dst}).json()
            if body.get("estimate"):
                pair = (src, dst)
                break
        if pair:
            break
    assert pair, "no connected pair among the top vertices"
    page.fill("#path-src", pair[0])
    page.fill("#path-dst", pair[1])
    page.click("#path-form button")
    page.wait_for_selector("#path-chain:not([hidden]) circle", timeout=10_000)
    circles = page.locator("#path-chain circle")
    hops = int(page.locator("#path-info").inner_text().split(" ")[0])
    assert circles.count() == hops + 1 >= 2
    assert page.locator("#path-chain g").first.get_attribute("data-vertex") == pair[0]
    assert page.locator("#path-chain g").last.get_attribute("data-vertex") == pair[1]
    assert page.locator("#path-chain circle.via").count() == 1
    page.screenshot(path=os.path.join(ARTIFACTS, "dashboard-apps.png"), full_page=True)
    assert errors == []
    page.close()


def test_the_latest_alerts_are_listed(browser, server):
    """A rule made through the API, and its alerts on the page, newest first."""
    import httpx

    from tests.api.conftest import TOKEN

    auth = {"Authorization": f"Bearer {TOKEN}"}
    # Some vertex of the top 1000 moves by a place in every epoch of the synthetic stream (the top 20
    # settles once the stream has run for a minute).
    made = httpx.post(server + "/v1/alerts/rules", json={"kind": "rank_move", "places": 1, "within": 1000}, headers=auth)
    assert made.status_code == 201, made.text
    rule = made.json()["id"]
    page = browser.new_page(viewport={"width": 1400, "height": 1400})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(server + "/")
        rows = page.locator(f"#alerts-body tr[data-rule='{rule}']")
        wait_until(lambda: rows.count() >= 1, what="an alert of the new rule")
        epochs = [int(e) for e in page.locator("#alerts-body tr[data-epoch]").evaluate_all("rs => rs.map(r => r.dataset.epoch)")]
        assert epochs == sorted(epochs, reverse=True), "newest first"
        assert min(epochs) >= made.json()["since_epoch"]
        assert re.search(r"(rose|fell) \d+ places? in pagerank: rank \d+ -> \d+", rows.first.inner_text())
        assert "rule" in page.locator("#alerts-info").inner_text()
        page.screenshot(path=os.path.join(ARTIFACTS, "dashboard-alerts.png"), full_page=True)
        assert errors == []
    finally:
        httpx.delete(f"{server}/v1/alerts/rules/{rule}", headers=auth)
        page.close()


def test_the_api_docs_load_from_this_server_only(browser, server):
    """Swagger UI's files come from the package, under a policy that pins the page's one inline script."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    requested: list[str] = []
    problems: list[str] = []
    page.on("request", lambda r: requested.append(r.url))
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.goto(server + "/docs")
    operations = page.locator(".opblock")
    wait_until(lambda: operations.count() >= 15, what="Swagger UI listing the operations")
    assert page.locator(".info .title").inner_text().startswith("pulsegraph")
    elsewhere = [u for u in requested if not u.startswith(server) and not u.startswith("data:")]
    assert elsewhere == [], f"the docs page fetched {elsewhere}"
    assert problems == [], problems  # a blocked script or a policy violation shows up here
    page.close()


@pytest.fixture(scope="module")
def windowed_server():
    """A real server over a store of windowed epochs (no pipeline: nothing new arrives)."""
    from tests.api.test_window import windowed_store  # noqa: PLC0415 - the compute-side fixture data

    store, _ = windowed_store()
    port = free_port()
    srv = uvicorn.Server(server_config(create_app(store), "127.0.0.1", port, log_level="warning", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=srv.run, name="test-window-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the test server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", store
    srv.should_exit = True
    thread.join(timeout=10)


def test_the_window_and_its_watermark_show_on_the_dashboard(browser, windowed_server):
    url, store = windowed_server
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url + "/")
    newest = store.get().result
    wait_until(lambda: epoch_on(page) == newest.epoch, what="the newest windowed epoch on the page")
    wait_until(lambda: not page.locator("#kpi-window").is_hidden(), what="the window card")
    assert page.locator("#k-window").inner_text() == "1 m"  # --window 60s
    when = dt.datetime.fromtimestamp(newest.watermark, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    assert page.locator("#k-watermark").inner_text() == f"watermark {when} UTC"
    assert page.locator("#k-vertices").inner_text().replace(",", "") == str(newest.vertices)
    os.makedirs(ARTIFACTS, exist_ok=True)
    page.screenshot(path=os.path.join(ARTIFACTS, "dashboard-window.png"), full_page=True)
    assert errors == []
    page.close()
