"""A restarted service answers from its retained epochs before Ray and the pipeline are up.

The whole service is SIGKILLed and started again on its data folder (bench/restart.py, which also
times it on the growing stream; BENCHMARKS.md has the figures): its first answers are the epochs
served before the crash, fact for fact, and then the pipeline's new epochs follow on from them. After a
clean stop (SIGINT) the graph of those epochs is answered before the pipeline's first epoch too, from the
view the stop kept (pulsegraph.api.viewfile).
"""

from __future__ import annotations

import time

import pytest

from bench.restart import Service, measure, restarted

# Starts the service twice as processes of their own (a real Ray instance in each).
pytestmark = pytest.mark.integration


def test_the_retained_epochs_are_answered_first_as_before_the_crash_and_new_ones_follow(tmp_path):
    got = measure(tmp_path, ["--epoch-interval", "300ms", "--num-cpus", "4", "--checkpoint-every", "2"], run_s=8, min_epochs=5)
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


def test_after_a_clean_stop_the_graph_of_the_retained_epochs_is_answered_as_before_ahead_of_the_pipeline(tmp_path):
    args = ["--epoch-interval", "300ms", "--num-cpus", "4", "--checkpoint-every", "4"]
    svc = Service(tmp_path / "data", tmp_path / "service.log", args)
    svc.start()
    try:
        deadline = time.monotonic() + 120
        while len(epochs := svc.epochs() or []) < 6 and time.monotonic() < deadline:
            svc.alive()
            time.sleep(0.3)
        assert len(epochs) >= 6, epochs
        kept = [e["epoch"] for e in epochs]
        hub = svc.get("/v1/rank/top", k=1, epoch=kept[0]).json()["items"][0]["vertex"]
        probe = tuple(f"/v1/vertices/{hub}/neighbors?direction={d}&epoch={e}" for e in (kept[0], kept[2], kept[-1]) for d in ("out", "in"))
        answers = {p: (r.status_code, r.json()) for p in probe if (r := svc.get(p)) is not None}
        assert all(status == 200 for status, _ in answers.values()) and any(a["items"] for _, a in answers.values()), answers
    finally:
        svc.stop()  # SIGINT: a clean stop, which keeps the graph view
    again = Service(tmp_path / "data", tmp_path / "service.log", args)
    try:
        got = restarted(again, [], 120, probe)
    finally:
        again.stop()
    assert got.graph_s is not None and got.graph_s < got.new_epoch_s, (got.graph_s, got.new_epoch_s)
    assert got.probed == answers, "the graph of each retained epoch as it was answered before the stop"
    assert "graph view of epoch" in (tmp_path / "service.log").read_text()
