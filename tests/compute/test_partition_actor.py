"""The partitioned ranking over real Ray actors (compute/partition_actor.py) against the same partitions in
one process (InProcessPartitions): fed the same random epochs (inserts, deletes, re-weights, new vertices,
every solve method, window-mode presence flips), the two must publish the same scores to within 1e-12 and
the same error bounds, exchange the same boundary, and a dead partition must fail the epoch with an error
that says what happens next."""

from __future__ import annotations

import numpy as np
import pytest

from pulsegraph.compute.exceptions import PartitionLost
from pulsegraph.compute.partitioned import ModuloOwner, PartitionedEngine
from tests.compute.test_incremental import RandomStream
from tests.compute.test_partitioned import WindowStream, assert_within_bounds, config, exact


def pair(ray_cluster, parts: int) -> tuple[PartitionedEngine, PartitionedEngine]:
    """(over Ray actors, in this process), both compacting often so that compaction is exercised."""
    from pulsegraph.compute.partition_actor import spawn_partitions

    owner = ModuloOwner(parts)
    ray_port = spawn_partitions(config(device="cpu"), parts, owner, compact_min=50)
    return (PartitionedEngine(config(device="cpu"), ray_port, owner),
            PartitionedEngine(config(device="cpu"), parts, owner, compact_min=50))


def assert_same(a: PartitionedEngine, b: PartitionedEngine) -> None:
    sa, sb = a.host_scores(), b.host_scores()
    for name in ("pagerank", "tunkrank"):
        assert np.abs(sa[name] - sb[name]).max(initial=0.0) <= 1e-12, name
    assert a.error_bounds(sa) == b.error_bounds(sb)


@pytest.mark.parametrize("parts", [2, 3])
def test_ray_partitions_rank_as_the_in_process_ones(ray_cluster, parts):
    stream = RandomStream(21, n0=40)
    on_ray, local = pair(ray_cluster, parts)
    try:
        for e, method in enumerate([None, "push", "krylov", "power", None, "push", None, "krylov"]):
            n, src, dst, dw = stream.epoch(150 if e == 0 else int(stream.rng.integers(1, 25)))
            got = on_ray.update(n, src, dst, dw, method)
            want = local.update(n, src, dst, dw, method)
            assert {k: (r.stats.method, r.stats.iterations, r.exchanged_sweeps, r.reductions) for k, r in got.items()} == \
                   {k: (r.stats.method, r.stats.iterations, r.exchanged_sweeps, r.reductions) for k, r in want.items()}
            assert_same(on_ray, local)
        assert_within_bounds(on_ray, exact(stream.adjacency(), on_ray.config.tunkrank_p))
        assert (on_ray.boundary_matrix() == local.boundary_matrix()).all() and on_ray.boundary > 0
        assert on_ray.backend_name() == "numpy"
        memory = on_ray.port.memory()  # type: ignore[attr-defined]
        assert len(memory) == parts and all(m["rss"] > 0 and m["held"] > 0 for m in memory)
    finally:
        on_ray.port.close()  # type: ignore[attr-defined]


def test_window_mode_on_ray(ray_cluster):
    stream = WindowStream(23)
    on_ray, local = pair(ray_cluster, 2)
    try:
        for e in range(8):
            n, src, dst, dw, present, flips = stream.window_epoch(100 if e == 0 else int(stream.rng.integers(1, 15)))
            on_ray.update(n, src, dst, dw, present=present, flips=flips)
            local.update(n, src, dst, dw, present=present, flips=flips)
            assert_same(on_ray, local)
    finally:
        on_ray.port.close()  # type: ignore[attr-defined]


def test_a_dead_partition_fails_the_epoch_with_what_happens_next(ray_cluster):
    import ray

    stream = RandomStream(25, n0=30)
    on_ray, _ = pair(ray_cluster, 2)
    try:
        on_ray.update(*stream.epoch(80))
        ray.kill(on_ray.port.actors[1], no_restart=True)  # type: ignore[attr-defined]
        with pytest.raises(PartitionLost, match="relaunches from the newest checkpoint"):
            on_ray.update(*stream.epoch(5))
    finally:
        on_ray.port.close()  # type: ignore[attr-defined]
