"""K-exposure orders adopters by the tagging tweet's own time, so its curves are a pure function of
the epoch vector: the same stream cut into epochs differently gives the same topics."""

from __future__ import annotations

import json
import random

import numpy as np

from pulsegraph.compute.apps.runner import Applications
from pulsegraph.compute.graph import GlobalGraph
from pulsegraph.ingest.batch import Router
from pulsegraph.ingest.transforms import get_transform
from pulsegraph.snapshots.store import ShardStore

TWEETS = get_transform("tweets")


def stream(n: int, seed: int = 3) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        out.append(json.dumps({
            "user": f"u{rng.randrange(25)}",
            "mentions": [f"u{rng.randrange(25)}" for _ in range(rng.randrange(4))],
            "hashtags": [f"h{rng.randrange(4)}" for _ in range(rng.randrange(1, 3))],
            # Times out of arrival order: "before" must follow them, not the epochs.
            "ts": float(rng.randrange(10_000)),
        }).encode())
    return out


def topics_by_cuts(records: list[bytes], cuts: list[int]) -> dict:
    stores, g, apps = [ShardStore(i) for i in range(3)], GlobalGraph(), Applications()
    router = Router(3)
    for offset, raw in enumerate(records):
        router.add("p", offset, TWEETS(raw))
    for store, batch in zip(stores, router.take()):
        store.receive(batch)
    out = None
    for epoch, high in enumerate(cuts, start=1):
        merged = [g.apply_with_previous(s.apply(epoch, {"p": high})[1]) for s in stores]
        from pulsegraph.compute.changes import EdgeChanges

        changes = EdgeChanges.concat([c for c, _ in merged])
        before = EdgeChanges.concat([b for _, b in merged])
        scores = {"tunkrank": np.zeros(g.n), "pagerank": np.zeros(g.n)}
        out = apps.run(g, epoch, changes, before, False, scores, 0)["topics"]
    return {
        g.names[t]: (out.reached[i].tolist(), np.nan_to_num(out.curve[i], nan=-1).tolist(), out.users[i])
        for i, t in enumerate(out.tags.tolist())
    }


def test_topics_do_not_depend_on_where_epochs_were_cut():
    records = stream(300)
    at_once = topics_by_cuts(records, [len(records)])
    rng = random.Random(7)
    cuts = sorted(rng.sample(range(1, len(records)), 12)) + [len(records)]
    assert topics_by_cuts(records, cuts) == at_once
    assert topics_by_cuts(records, list(range(10, len(records), 10)) + [len(records)]) == at_once
    assert any(reached[0] > 0 for reached, _, _ in at_once.values())  # exposures happened
