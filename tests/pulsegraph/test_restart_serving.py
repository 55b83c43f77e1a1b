"""A restarted service answers from its retained epochs before Ray and the pipeline are up.

The whole service is SIGKILLed and started again on its data folder (bench/restart.py, which also
times it on the growing stream; BENCHMARKS.md has the figures): its first answers are the epochs
served before the crash, fact for fact, and then the pipeline's new epochs follow on from them. After a
clean stop (SIGINT) the graph of those epochs is answered before the pipeline's first epoch too, from the
view the stop kept (pulsegraph.api.viewfile).
"""

from __future__ import annotations

import pytest

from bench.restart import Service, measure, restarted

# Starts the service three times, as processes of their own (a real Ray instance in each).
pytestmark = pytest.mark.integration


def test_the_retained_epochs_are_answered_first_after_a_crash_and_their_graph_too_after_a_clean_stop(tmp_path):
    args = ["--epoch-interval", "300ms", "--num-cpus", "4", "--checkpoint-every", "2"]
    asked: dict = {}

    def ask(svc: Service) -> None:
        """Before the restarted service's clean stop: its graph of the newest epochs (those it has since the crash),
        and of an older one (not kept after a crash: a 404 that says so, after the next start too)."""
        kept = [e["epoch"] for e in svc.epochs() or []]
        hub = svc.get("/v1/rank/top", k=1).json()["items"][0]["vertex"]
        paths = [f"/v1/vertices/{hub}/neighbors?direction={d}&epoch={e}" for e in (kept[0], kept[1], kept[-1]) for d in ("out", "in")]
        asked["answers"] = {p: (r.status_code, r.json()) for p in paths if (r := svc.answer(p)) is not None}

    got = measure(tmp_path, args, run_s=8, min_epochs=5, before_stop=ask)
    before = {e["epoch"]: e for e in got.before}
    first = [e["epoch"] for e in got.first_archived]
    # Served before the pipeline published anything: the history from the archive, each epoch as it was read
    # before the crash. The archive may have taken in an epoch or two between that read and the SIGKILL:
    # only newer ones (a CI run met one).
    assert set(before) <= set(first) and len(first) >= 5, (first, sorted(before))
    assert all(e > max(before) for e in set(first) - set(before)), (first, sorted(before))
    assert all(e == before[e["epoch"]] for e in got.first_archived if e["epoch"] in before)
    assert got.first_health["provisional"] is True and got.first_health["ingest"] == "starting", got.first_health
    assert got.archived_s < got.new_epoch_s

    # measure() stopped the restarted service cleanly, which keeps its graph view: the next start answers the graph
    # of its retained epochs as that service did, before its own pipeline's first epoch.
    answers = asked["answers"]
    assert {status for status, _ in answers.values()} == {200, 404} and any(a.get("items") for _, a in answers.values()), answers
    again = Service(tmp_path / "data", tmp_path / "service.log", args)
    try:
        after = restarted(again, [], 120, tuple(answers))
    finally:
        again.stop()
    assert after.graph_s is not None and after.graph_s < after.new_epoch_s, (after.graph_s, after.new_epoch_s)
    def same(answer):  # a 404's message names the epochs kept, up to the newest: its code is what must not change
        status, body = answer
        return (status, body["error"]["code"]) if status != 200 else (status, body)

    assert {p: same(a) for p, a in (after.probed or {}).items()} == {p: same(a) for p, a in answers.items()}, \
        "the graph of each retained epoch as it was answered before the stop"
    assert "graph view of epoch" in (tmp_path / "service.log").read_text()
