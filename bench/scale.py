"""Scaling on one machine: events/s and epoch commit latency for 1, 2, 4 shards x 1, 2 ingest actors.

Through a real Kafka broker (tools/kafka.sh, or ``--bootstrap``): ``--events``
synthetic tweets are produced once to a 4-partition topic (packed ``--pack`` per
message, so the client is not what is measured), then each configuration reads
the whole topic from offset 0 into a fresh data dir, at 1 s epochs; the rate is
events sealed with results per second from the first epoch to the last.

    .venv/bin/python -m bench.scale --events 300000
"""

from __future__ import annotations

import argparse
import sys
import time

from bench.ingest import broker, create_topic, drain, produce_args
from bench.machine import describe
from pulsegraph.produce import produce
from pulsegraph.settings import Settings


def measure(args, bootstrap: str, topic: str, shards: int, ingest: int) -> dict:
    return drain(argparse.Namespace(**{**vars(args), "shards": shards, "ingest_actors": ingest}), bootstrap, topic, args.kafka_client)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap")
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--pack", type=int, default=50)
    ap.add_argument("--batch-size", type=int, default=5000)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--kafka-client", choices=("kafka-python", "confluent"), default=Settings.model_fields["kafka_client"].default)
    args = ap.parse_args()
    rows = []
    with broker(args.bootstrap) as bootstrap:
        topic = f"bench-scale-{int(time.time())}"
        create_topic(bootstrap, topic, 4)
        produce(produce_args(bootstrap, topic, args.events, 0, args.pack))
        for ingest in (1, 2):
            for shards in (1, 2, 4):
                r = measure(args, bootstrap, topic, shards, ingest)
                print(f"  {shards} shards, {ingest} ingest: {r['events_per_s']:,.0f} events/s", file=sys.stderr)
                rows.append((shards, ingest, r))
    print(f"machine: {describe()}")
    print(f"{args.events:,} tweets in messages of {args.pack}, 4 partitions, 1 s epochs, Kafka client {args.kafka_client}")
    print("| shards | ingest actors | events/s | commit p50 / p99 ms |")
    print("|---|---|---|---|")
    for shards, ingest, r in rows:
        print(f"| {shards} | {ingest} | {r['events_per_s']:,.0f} | {r.get('commit_p50', 0):.0f} / {r.get('commit_p99', 0):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
