"""Scale-out on Ray's multi-node test cluster: three nodes, shards and three ranking partitions spread over
them, a node lost mid-stream.

Each scenario runs in its own process (tests/pulsegraph/cluster_scenario.py): a
process joins one Ray cluster, and this session already holds the embedded one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pulsegraph.produce import produce
from tests.ingest.test_kafka import produce_args

TOP = Path(__file__).resolve().parent.parent.parent


def scenario(broker, topic: str, data_dir: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "tests.pulsegraph.cluster_scenario", "--bootstrap", broker.bootstrap,
         "--topic", topic, "--data-dir", str(data_dir)],
        cwd=TOP, capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, f"the scenario failed:\n{out.stdout[-3000:]}\n{out.stderr[-6000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])


# One scenario, not two: a cluster takes ~20 s to start on two cores, and the spread it checks first
# is what the lost node then takes shards away from.
def test_shards_and_partitions_over_three_nodes_losing_one_mid_stream_end_in_the_exact_graph_and_ranks(kafka_broker, tmp_path):
    topic = kafka_broker.topic()
    produce(produce_args(kafka_broker, topic, limit=500, partitions=4))
    result = scenario(kafka_broker, topic, tmp_path / "data")
    assert result["shard_nodes"] > 1 and result["recoveries"] >= 1 and result["records"] == 12_500
