"""A multi-node scenario on Ray's own test cluster (``ray.cluster_utils.Cluster``), run in its own process.

The test session already holds an embedded Ray instance, and a process joins one
cluster only; so tests/pulsegraph/test_cluster.py runs this script. It starts a
head and two worker nodes, runs the pipeline against the real Kafka broker with
``ray_address`` set and three ranking partitions (``--compute-partitions 3``; the
shards must spread over the nodes), removes a worker node holding shards
mid-stream, and checks the outcome: a relaunch with new partitions, the exact graph
at the end (the compute stage's and the API's graph view, in three parts), and PageRank within
its published bound of networkx's on that graph.
Exit code 0 and a JSON line on stdout mean every check held; anything else is a
failure with the reason.

    python -m tests.pulsegraph.cluster_scenario --bootstrap B --topic T --data-dir D
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

import networkx as nx
import numpy as np
import ray
from ray.cluster_utils import Cluster

from pulsegraph.produce import produce
from pulsegraph.settings import Settings
from pulsegraph.topology import Pipeline
from tests.graphref import live_digraph, reference, without_attrs
from tests.ingest.test_kafka import consume_all, end_vector, produce_args
from tests.pulsegraph.test_compute_partitions import api_edges
from tests.pulsegraph.test_recovery import relaunched

# Small nodes: three of them share this machine's two cores and memory.
NODE = {"num_cpus": 2, "object_store_memory": 120 * 1024 * 1024}


def live_counts(graph: dict) -> tuple[int, int]:
    return len(graph["vertices"]), sum(1 for m, _ in graph["edges"].values() if m > 0)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--data-dir", required=True)
    args = ap.parse_args()

    cluster = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
    workers = [cluster.add_node(**NODE) for _ in range(2)]
    cluster.wait_for_nodes()
    settings = Settings(
        source="kafka", bootstrap=args.bootstrap, topic=args.topic, transform="tweets", ray_address=cluster.address,
        shards=4, ingest_actors=2, epoch_interval="300ms", data_dir=args.data_dir, checkpoint_every=2,
        compute_partitions=3, pagerank_tol=1e-9,
    )
    sealed: list = []
    p = Pipeline(settings, on_epoch=lambda v: sealed.append(v.result)).start()
    out: dict = {}
    try:
        if not p.wait_until_launched(120):
            raise AssertionError("the pipeline did not launch")
        shard_nodes = ray.get([s.node_id.remote() for s in p.shards])
        out["shard_nodes"] = len(set(shard_nodes))
        assert len(set(shard_nodes)) > 1, f"all shards on one node: {shard_nodes}"
        before = ray.get(p.compute.owned_actors.remote())
        assert len(before) == 5, f"{len(before)} partition and applications' actors, not 3 and 2"
        feeder = threading.Thread(
            target=produce, args=(produce_args(_Broker(args.bootstrap), args.topic, limit=12_000, rate=2000, seed=21),)
        )
        feeder.start()
        p.wait_for_epoch(lambda v: v.result.records > 3000, timeout=120)
        victim = next(w for w in workers if w.node_id in set(shard_nodes))
        cluster.remove_node(victim)
        out["removed"] = victim.node_id
        # Ray names the node dead after its health checks lapse, seconds later on a loaded machine; the
        # stream may even end first. So wait for the relaunch here, not for the end vector: the old
        # generation could reach it before its loss is noticed, and the checks below would race the relaunch.
        deadline = time.monotonic() + 120
        while not relaunched(p, 1) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert relaunched(p, 1), f"losing a node with shards did not relaunch the pipeline: {p.status()}"
        feeder.join(timeout=180)
        records = consume_all(args.bootstrap, args.topic)
        want_vector = end_vector(records)
        view = p.wait_for_epoch(lambda v: v.result.vector == want_vector, timeout=240)
        deadline = time.monotonic() + 120
        while ray.get(p.coordinator.status.remote())["vector"] != want_vector and time.monotonic() < deadline:
            time.sleep(0.2)
        ray.get(p.coordinator.flush.remote())
        graph = ray.get(p.compute.snapshot.remote())
        assert graph == without_attrs(reference(records, want_vector, "tweets")), "the final graph differs from the reference"
        after = ray.get(p.compute.owned_actors.remote())
        assert len(after) == 5 and not set(after) & set(before), "the relaunch did not make three new partitions and apps"
        # The ranks the partitions solved: within the bound the epoch publishes of networkx's exact ones.
        r = view.result
        exact = nx.pagerank(live_digraph(graph, ("mentions",)), alpha=0.85, tol=1e-14, max_iter=10_000)
        names = p.store.names[: r.vertices]
        off = float(np.abs(r.scores["pagerank"][: len(names)] - np.array([exact[n] for n in names])).sum())
        assert off <= r.error_bounds["pagerank"], f"PageRank is {off} off networkx's, past its bound {r.error_bounds['pagerank']}"
        out["pagerank_l1_off"] = off
        # The API's graph view, in three parts spread like the partitions (one was on the node removed: new ones
        # took the compute stage's graph whole), is the same graph, both ways.
        assert api_edges(p, r.epoch) == {k: v for k, v in graph["edges"].items() if v[0] > 0}, "the API's graph view differs"
        out["graph_part_nodes"] = len(set(ray.get([a.node_id.remote() for a in p.graph_parts.graph.port.actors])))
        # Every sealed epoch the API received is exactly the reference at its vector: no partial transaction.
        for r in sealed:
            assert (r.vertices, r.edges) == live_counts(reference(records, r.vector, "tweets")), f"epoch {r.epoch} is partial"
        out.update(recoveries=p.recoveries, epochs_checked=len(sealed), records=sum(map(len, records.values())))
    finally:
        p.stop()
        ray.shutdown()
        cluster.shutdown()
    print(json.dumps(out))
    return 0


class _Broker:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap


if __name__ == "__main__":
    sys.exit(main())
