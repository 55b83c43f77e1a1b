"""``--compute-partitions``: an applications' actor killed, mid-stream or once the whole stream is served.

Mid-stream the next epoch fails on the loss; at the stream's end no epoch is left to fail on it, and the status poll
finds it (the compute actor pings the actors it owns without waiting). Either way the pipeline relaunches from the
newest checkpoint with new actors and ends in the stream's graph and ranks (the runs of
tests/pulsegraph/test_compute_partitions.py, a file of their own so that the suite's workers share them)."""

from __future__ import annotations

import pytest

from tests.pulsegraph.test_compute_partitions import killed_and_relaunched


@pytest.mark.parametrize(("victim", "at_end"), [(-2, True), (-1, False)],
                         ids=["the graph's applications' actor, the stream served", "the topics' applications' actor, mid-stream"])
def test_an_applications_actor_killed_relaunches_with_new_actors_and_the_same_answer(ray_cluster, tmp_path, victim, at_end):
    killed_and_relaunched(tmp_path, victim, at_end)
