"""The compute actor answers the status poll while a batch runs.

The supervisor checks the memory budget and refreshes ``/health`` once per status poll, and a batch
of a large graph runs for tens of seconds: a poll queued behind it went unanswered for that long (the
log said "an actor did not answer the status poll within 30 s", and the budget went unchecked).
"""

from __future__ import annotations

import random
import time

import ray

from pulsegraph.compute.actor import ComputeActor
from pulsegraph.compute.stage import SealedEpoch
from pulsegraph.ingest.batch import Router
from pulsegraph.snapshots.epoch import EpochInfo
from pulsegraph.snapshots.store import ShardStore
from tests.compute.test_apps import tweet


def one_large_epoch(tweets: int, shards: int = 2) -> SealedEpoch:
    """One sealed epoch of ``tweets`` random tweets (three edges each): a batch of most of a second."""
    rng = random.Random(1)
    stores, router = [ShardStore(i) for i in range(shards)], Router(shards)
    for off in range(tweets):
        mentions = [f"u{rng.randrange(tweets)}", f"u{rng.randrange(tweets)}"]
        router.add("p", off, tweet(f"u{rng.randrange(tweets)}", mentions, [f"h{rng.randrange(500)}"], ts=1.0))
    for store, batch in zip(stores, router.take()):
        store.receive(batch)
    info = EpochInfo(epoch=1, vector={"p": tweets}, records=tweets, sealed_at=1.0, commit_ms=0.0,
                     timeliness_ms={"p50": 0.0, "p99": 0.0, "max": 0.0})
    return SealedEpoch(info, [s.apply(1, {"p": tweets})[1] for s in stores])


def test_the_status_poll_is_answered_while_a_batch_is_merged_and_ranked(ray_cluster):
    epoch = one_large_epoch(40_000)
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
