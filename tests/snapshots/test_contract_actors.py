"""The contract through the real actors: shard actors, the epoch coordinator and the compute actor on Ray.

The test plays the ingest actors' part (routing with the same Router, reporting
progress only for what every shard acknowledged) so that it controls batch
sizes, interleaving, replays and the moments of the cuts; everything
downstream of ingest is the real pipeline.
"""

from __future__ import annotations

import time

import ray
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulsegraph.compute.actor import ComputeActor
from pulsegraph.snapshots.coordinator import CoordinatorConfig
from pulsegraph.snapshots.coordinator_actor import EpochCoordinator
from pulsegraph.snapshots.epoch import EpochLog
from pulsegraph.snapshots.shard import ShardActor
from tests.graphref import merge, reference, without_attrs
from tests.snapshots.streams import route, schedules, streams


class ActorHarness:
    def __init__(self, n_shards: int, log_path: str) -> None:
        self.shards = [ShardActor.remote(shard=i) for i in range(n_shards)]
        self.compute = ComputeActor.remote()
        self.coordinator = EpochCoordinator.remote(shards=self.shards, consumer=self.compute, config=CoordinatorConfig(log_path=log_path))
        self.n = n_shards

    def send(self, partition, records) -> None:
        refs = [s.receive.remote(b) for s, b in zip(self.shards, route(self.n, partition, records)) if len(b)]
        ray.get(refs)

    def report(self, partition, high, valid) -> None:
        ray.get(self.coordinator.report_progress.remote({partition: (high, valid)}, time.time(), valid))

    def cut(self) -> dict | None:
        info = ray.get(self.coordinator.cut.remote())
        ray.get(self.coordinator.flush.remote())
        return info

    def graphs(self) -> tuple[dict, dict]:
        shards = merge(ray.get([s.snapshot.remote() for s in self.shards]))
        return shards, ray.get(self.compute.snapshot.remote())

    def close(self) -> None:
        ray.get(self.coordinator.stop.remote())
        for a in [*self.shards, self.compute, self.coordinator]:
            ray.kill(a)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stream=streams(max_records=20), schedule=schedules, n_shards=st.integers(2, 3))
def test_every_sealed_epoch_equals_the_reference(ray_cluster, tmp_path_factory, stream, schedule, n_shards):
    log_path = str(tmp_path_factory.mktemp("epochs") / "epochs.log")
    h = ActorHarness(n_shards, log_path)
    parts = sorted(stream)
    delivered = {p: 0 for p in parts}
    reported = {p: 0 for p in parts}
    vectors = []

    def cut_and_check() -> None:
        info = h.cut()
        if info is None:
            return
        vectors.append(info.vector)
        want = reference(stream, info.vector, "multi")
        shards, computed = h.graphs()
        assert shards == want
        assert computed == without_attrs(want)
        assert info.records == sum(info.vector.values())

    try:
        for step in schedule:
            p = parts[step[1] % len(parts)] if len(step) > 1 else None
            if step[0] == "deliver":
                recs = stream[p][delivered[p] : delivered[p] + step[2]]
                h.send(p, recs)
                delivered[p] += len(recs)
            elif step[0] == "replay":
                start = int(step[2] * delivered[p])
                h.send(p, stream[p][start : min(start + step[3], delivered[p])])
            elif step[0] == "report":
                high = max(reported[p], int(round(reported[p] + step[2] * (delivered[p] - reported[p]))))
                if high > reported[p]:
                    h.report(p, high, high - reported[p])
                    reported[p] = high
            else:
                cut_and_check()
        for p in parts:
            h.send(p, stream[p][delivered[p] :])
            if len(stream[p]) > reported[p]:
                h.report(p, len(stream[p]), len(stream[p]) - reported[p])
        cut_and_check()
    finally:
        h.close()
    # Vectors only grow, and the epoch log holds exactly the cut vectors, in order.
    for a, b in zip(vectors, vectors[1:]):
        assert all(b.get(p, 0) >= o for p, o in a.items())
    assert [e.vector for e in EpochLog.read(log_path)] == vectors
