"""The compute actor answers the status poll and hands over results while a batch runs.

The supervisor checks the memory budget and refreshes ``/health`` once per status poll, and a batch
of a large graph runs for tens of seconds: a poll queued behind it went unanswered for that long (the
log said "an actor did not answer the status poll within 30 s", and the budget went unchecked).
"""

from __future__ import annotations

import random
import time

import ray

from pulsegraph.compute.actor import ComputeActor
from pulsegraph.compute.stage import ComputeStage, SealedEpoch
from tests.compute.test_apps import tweet
from tests.compute.test_stage import seal


def sealed_epochs(*sizes: int, shards: int = 2) -> list[SealedEpoch]:
    """Sealed epochs of ``sizes`` random tweets each (three edges a tweet; 40,000: a batch of a second or more)."""
    rng = random.Random(1)
    users = sum(sizes)

    def one() -> list:
        mentions = [f"u{rng.randrange(users)}", f"u{rng.randrange(users)}"]
        return tweet(f"u{rng.randrange(users)}", mentions, [f"h{rng.randrange(500)}"], ts=1.0)

    return seal([[one() for _ in range(size)] for size in sizes], shards)


def wait_for_batch(actor) -> None:
    deadline = time.monotonic() + 60
    while ray.get(actor.status.remote(), timeout=60)["batch_s"] is None:
        assert time.monotonic() < deadline, "the batch never started"
        time.sleep(0.01)


def test_the_status_poll_is_answered_while_a_batch_is_merged_and_ranked(ray_cluster):
    (epoch,) = sealed_epochs(40_000)
    actor = ComputeActor.remote()
    try:
        assert ray.get(actor.status.remote(), timeout=60) == {"epoch": 0, "batch_s": None}
        batch = actor.apply_epochs.remote([epoch.info], *epoch.deltas)
        seen = []
        while not ray.wait([batch], timeout=0)[0]:
            seen.append(ray.get(actor.status.remote(), timeout=60))
            time.sleep(0.02)
        assert ray.get(batch)["edges"] == sum(int((d.e_mult > 0).sum()) for d in epoch.deltas)
        # Answered during the batch (a poll queued behind it would only ever see it done), saying so.
        during = [s for s in seen if s["batch_s"] is not None]
        assert during, seen
        assert all(s["epoch"] == 1 and s["batch_s"] >= 0 for s in during)
        assert ray.get(actor.status.remote()) == {"epoch": 1, "batch_s": None}
    finally:
        ray.kill(actor)


def test_a_result_is_pulled_while_the_next_batch_runs_with_the_names_as_of_its_epoch(ray_cluster):
    small, large = sealed_epochs(2_000, 60_000)
    reference = ComputeStage()
    reference.apply([small])
    names_1 = list(reference.graph.names)
    reference.apply([large])
    names_2 = list(reference.graph.names)
    actor = ComputeActor.remote()
    try:
        ray.get(actor.apply_epochs.remote([small.info], *small.deltas), timeout=120)
        batch = actor.apply_epochs.remote([large.info], *large.deltas)
        wait_for_batch(actor)
        results, names = ray.get(actor.results_after.remote(0, 0), timeout=60)
        # Beside the batch (queued behind it, the pull would only come back once it was done).
        assert not ray.wait([batch], timeout=0)[0]
        assert [r.epoch for r in results] == [1] and names.start == 0 and names.names == names_1
        ray.get(batch)
        results, names = ray.get(actor.results_after.remote(1, len(names_1)), timeout=60)
        assert [r.epoch for r in results] == [2] and names.start == len(names_1)
        assert names_1 + names.names == names_2 and not len(names.ids)
        # Names that no kept result starts from (the consumer's copy is not one the actor handed out):
        # answered in the actor's order instead, from its names as of now.
        assert ray.get(actor.results_after.remote(1, 5), timeout=60) is None
        results, names = ray.get(actor.results_in_order.remote(1, 5), timeout=60)
        assert [r.epoch for r in results] == [2] and names.start == 5 and names_2[:5] + names.names == names_2
        # The caller with everything: nothing new, from either.
        assert ray.get(actor.results_after.remote(2, len(names_2)), timeout=60)[0] == []
    finally:
        ray.kill(actor)
