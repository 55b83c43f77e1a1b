"""A restarted service answers from its retained epochs before Ray and the pipeline are up.

The whole service is SIGKILLed and started again on its data folder (bench/restart.py, which also
times it on the growing stream; BENCHMARKS.md has the figures): its first answers are the epochs
served before the crash, fact for fact, and then the pipeline's new epochs follow on from them.
"""

from __future__ import annotations

import pytest

from bench.restart import measure

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
