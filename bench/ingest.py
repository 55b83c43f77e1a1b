"""End-to-end ingest through a real Kafka broker: events/s and timeliness at 1 s epochs.

Starts a broker with tools/kafka.sh (or uses ``--bootstrap``), then for each
message packing (one event per message, and ``--pack`` events per message) and
each Kafka client of ``--kafka-client`` (several are measured side by side: the
capacity topic is produced once and drained by each client in turn, ``--repeat``
times, alternating):

1. capacity: pre-produces ``--events`` synthetic tweets to a fresh 4-partition
   topic, starts the pipeline (``--ingest-actors`` x ``--shards``, 1 s epochs)
   and measures events sealed per second, with results, from first to last epoch;
2. timeliness: produces at ``--rate`` events/s while the pipeline runs, and for
   every epoch takes the broker append time (topics use LogAppendTime) of the
   oldest and newest record it added in each partition: published-at minus
   append time is the timeliness of those records. p50/p99 are over epochs.

    .venv/bin/python -m bench.ingest --events 1000000 --rate 10000
    .venv/bin/python -m bench.ingest --kafka-client kafka-python confluent --repeat 2

``--stages N`` instead times the data path's stages on one core, no broker and
no Ray: N synthetic tweets from 4 partitions, in rounds of 2,000 per partition,
through ``Transform.feed`` (decode, transform, route), ``Router.take``, pickling
the batches both ways (what Ray does between actors), ``ShardStore.receive``
and ``apply`` (an epoch every 5 rounds), with the workers' GC settings.
"""

from __future__ import annotations

import argparse
import contextlib
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from bench.machine import describe as machine
from pulsegraph.produce import produce
from pulsegraph.settings import Settings
from pulsegraph.topology import Pipeline

TOP = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def broker(bootstrap: str | None):
    """The broker at ``bootstrap``, or one started with tools/kafka.sh for the duration (then stopped and its folder removed)."""
    if bootstrap:
        yield bootstrap
        return
    folder = tempfile.mkdtemp(prefix="pg-bench-kafka-")
    kafka_sh = ["bash", str(TOP / "tools" / "kafka.sh")]
    out = subprocess.run([*kafka_sh, "start", folder], check=True, capture_output=True, text=True)
    try:
        yield out.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([*kafka_sh, "stop", folder], check=False)
        # stop waits for the broker to exit; its log (hundreds of MB after a 1M-event run) goes with it.
        shutil.rmtree(folder, ignore_errors=True)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, partitions, 1, topic_configs={"message.timestamp.type": "LogAppendTime"})])
    admin.close()


def produce_args(bootstrap, topic, events, rate, pack, seed=7):
    return argparse.Namespace(
        bootstrap=bootstrap, topic=topic, source="synthetic", path=None, rate=rate, limit=events, partitions=4,
        events_per_message=pack, seed=seed, users=20_000, hashtags=1_000, quiet=True,
    )


def append_times(bootstrap: str, topic: str, wanted: dict[str, list[int]]) -> dict[tuple[str, int], float]:
    """Broker append time (s) of each (partition, offset) asked for."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    out = {}
    for name, offsets in wanted.items():
        tp = TopicPartition(topic, int(name.rsplit(":", 1)[1]))
        c.assign([tp])
        for o in sorted(set(offsets)):
            c.seek(tp, o)
            for _ in range(20):
                recs = c.poll(timeout_ms=500, max_records=1).get(tp, [])
                if recs:
                    out[(name, o)] = recs[0].timestamp / 1000.0
                    break
    c.close()
    return out


def run_pipeline(args, bootstrap, topic, data_dir, client: str, **extra) -> tuple[Pipeline, list]:
    """The pipeline on ``topic`` (``extra``: more settings, such as a --format and its registry)."""
    seen: list = []
    settings = Settings(
        source="kafka", bootstrap=bootstrap, topic=topic, transform="tweets", ingest_actors=args.ingest_actors,
        shards=args.shards, epoch_interval="1s", data_dir=data_dir, batch_size=args.batch_size, checkpoint_every=10,
        kafka_client=client, **extra,
    )
    p = Pipeline(settings, on_epoch=lambda v: seen.append((time.time(), v.result))).start()
    return p, seen


def capacity(args, bootstrap: str, pack: int, clients: list[str]) -> dict[str, list[dict]]:
    """Per client, ``args.repeat`` drains of one pre-produced topic, the clients alternating."""
    topic = f"bench-cap-{pack}-{int(time.time())}"
    create_topic(bootstrap, topic, 4)
    t0 = time.monotonic()
    stats = produce(produce_args(bootstrap, topic, args.events, 0, pack))
    print(f"  produced {stats['sent']:,} events in {stats['messages']:,} messages at {stats['sent'] / (time.monotonic() - t0):,.0f}/s", file=sys.stderr)
    out: dict[str, list[dict]] = {c: [] for c in clients}
    for _ in range(args.repeat):
        for client in clients:
            out[client].append(drain(args, bootstrap, topic, client))
            print(f"  {client}: {out[client][-1]}", file=sys.stderr)
    return out


def drain(args, bootstrap: str, topic: str, client: str, **extra) -> dict:
    """Run the pipeline on a pre-produced topic until all ``args.events`` are sealed with results.

    The rate is measured from the end of the first epoch to the last: start-up (Ray, the
    consumers' first fetch) is excluded."""
    data = tempfile.mkdtemp(prefix="pg-bench-")
    p, seen = run_pipeline(args, bootstrap, topic, data, client, **extra)
    try:
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline and (not seen or seen[-1][1].records < args.events):
            time.sleep(0.5)
    finally:
        p.stop()
        shutil.rmtree(data, ignore_errors=True)
    done = [r for _, r in seen]
    if len(done) < 3:
        return {"events_per_s": 0.0, "epochs": len(done)}
    first, last = done[0], done[-1]
    rate = (last.records - first.records) / (last.committed_at - first.committed_at)
    commit = np.array([r.commit_ms for r in done])
    return {
        "events_per_s": rate, "epochs": len(done), "records": last.records,
        "commit_p50": float(np.median(commit)), "commit_p99": float(np.percentile(commit, 99)),
    }


def timeliness(args, bootstrap: str, pack: int, client: str) -> dict:
    topic = f"bench-tl-{pack}-{int(time.time())}"
    create_topic(bootstrap, topic, 4)
    data = tempfile.mkdtemp(prefix="pg-bench-")
    p, seen = run_pipeline(args, bootstrap, topic, data, client)
    try:
        p.wait_until_launched(120)
        time.sleep(3)
        t0 = time.monotonic()
        feeder = threading.Thread(target=produce, args=(produce_args(bootstrap, topic, int(args.rate * args.seconds), args.rate, pack, 9),))
        feeder.start()
        feeder.join()
        produced_s = time.monotonic() - t0
        time.sleep(5)
    finally:
        p.stop()
        shutil.rmtree(data, ignore_errors=True)
    epochs = [(t, r) for t, r in seen if r.records > 0]
    wanted: dict[str, list[int]] = {}
    prev: dict[str, int] = {}
    spans = []
    for t, r in epochs:
        for name, high in r.vector.items():
            low = prev.get(name, 0)
            if high > low:
                wanted.setdefault(name, []).extend([low, high - 1])
                spans.append((t, name, low, high - 1))
        prev = dict(r.vector)
    ts = append_times(bootstrap, topic, wanted)
    oldest = np.array([t - ts[(n, lo)] for t, n, lo, _ in spans if (n, lo) in ts]) * 1000
    newest = np.array([t - ts[(n, hi)] for t, n, _, hi in spans if (n, hi) in ts]) * 1000
    return {
        "offered_per_s": int(args.rate * args.seconds) / produced_s,
        "oldest_p50": float(np.percentile(oldest, 50)), "oldest_p99": float(np.percentile(oldest, 99)),
        "newest_p50": float(np.percentile(newest, 50)),
    }


def stages(n: int) -> dict[str, float]:
    """Microseconds per event spent in each stage of the data path (see the module docstring)."""
    from pulsegraph.base.runtime import tune_gc
    from pulsegraph.ingest.batch import Router
    from pulsegraph.ingest.sources import SourceSpec
    from pulsegraph.ingest.sources.synthetic import SyntheticPartition
    from pulsegraph.ingest.transforms import Event, get_transform
    from pulsegraph.snapshots.store import ShardStore

    parts, shards, per_round = 4, 4, 2000
    spec = SourceSpec(kind="synthetic", partitions=parts, limit=n)
    records = {f"t:{i}": SyntheticPartition(spec, i, 0).next_batch(n) for i in range(parts)}
    tweets, router, stores = get_transform("tweets"), Router(shards), [ShardStore(s) for s in range(shards)]
    tune_gc()
    spent = dict.fromkeys(("feed", "take", "pickle", "unpickle", "receive", "apply"), 0.0)
    longest = max(map(len, records.values()))
    for rnd, start in enumerate(range(0, longest, per_round)):
        marks = [time.perf_counter()]
        for name, recs in records.items():
            tweets.feed(router, name, [Event(r.offset, 0, r.value) for r in recs[start : start + per_round]])
        marks.append(time.perf_counter())
        batches = router.take()
        marks.append(time.perf_counter())
        blobs = [pickle.dumps(b, protocol=5) for b in batches]
        marks.append(time.perf_counter())
        batches = [pickle.loads(b) for b in blobs]
        marks.append(time.perf_counter())
        for store, b in zip(stores, batches):
            store.receive(b)
        marks.append(time.perf_counter())
        if rnd % 5 == 4 or start + per_round >= longest:
            vector = {name: min(start + per_round, len(recs)) for name, recs in records.items()}
            for store in stores:
                store.apply(rnd + 1, vector)
        marks.append(time.perf_counter())
        for key, a, b in zip(spent, marks, marks[1:]):
            spent[key] += b - a
    return {key: v / n * 1e6 for key, v in spent.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", help="an existing broker (default: start one with tools/kafka.sh)")
    # At ~100,000 events/s, 1,000,000 events span about ten 1 s epochs: the rate is measured
    # from the first epoch to the last, and a few epochs make it a matter of where they fall.
    ap.add_argument("--events", type=int, default=1_000_000, help="events pre-produced for the capacity run")
    ap.add_argument("--rate", type=float, default=10_000, help="events/s offered in the timeliness run")
    ap.add_argument("--seconds", type=float, default=20, help="length of the timeliness run")
    ap.add_argument("--pack", type=int, default=50, help="events per message in the packed runs")
    ap.add_argument("--ingest-actors", type=int, default=2)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=5000)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--kafka-client", nargs="+", choices=("kafka-python", "confluent"),
                    default=[Settings.model_fields["kafka_client"].default],
                    help="the Kafka client(s) of the pipeline; several are measured side by side")
    ap.add_argument("--repeat", type=int, default=1, help="capacity drains per client, the clients alternating")
    ap.add_argument("--packs", type=int, nargs="+", help="the events per message to measure (default: 1 and --pack)")
    ap.add_argument("--stages", type=int, metavar="N", help="time the data path's stages on N tweets instead (no broker)")
    args = ap.parse_args()
    if args.stages:
        spent = stages(args.stages)
        print(f"machine: {machine()}")
        print(f"microseconds per event on one core, {args.stages:,} synthetic tweets")
        print("| " + " | ".join(spent) + " | total |")
        print("|" + "---|" * (len(spent) + 1))
        print("| " + " | ".join(f"{v:.2f}" for v in spent.values()) + f" | {sum(spent.values()):.2f} |")
        return 0
    rows = []
    with broker(args.bootstrap) as bootstrap:
        for pack in args.packs or (1, args.pack):
            print(f"events per message: {pack}", file=sys.stderr)
            caps = capacity(args, bootstrap, pack, args.kafka_client)
            for client in args.kafka_client:
                rows.append((pack, client, caps[client], timeliness(args, bootstrap, pack, client)))
    print(f"machine: {machine()}")
    print(f"{args.ingest_actors} ingest actors, {args.shards} shards, 1 s epochs; capacity over {args.events:,} pre-produced events; "
          f"timeliness at {args.rate:,.0f} events/s offered for {args.seconds:.0f} s")
    print("| Kafka client | events/message | capacity events/s | commit p50 ms | offered events/s | timeliness oldest p50 / p99 ms | newest p50 ms |")
    print("|---|---|---|---|---|---|---|")
    for pack, client, caps, tl in rows:
        rate = " / ".join(
            f"{cap['events_per_s']:,.0f}" if cap["epochs"] >= 3 else f"n/a ({cap['epochs']} epochs: raise --events)" for cap in caps
        )
        commit = " / ".join(f"{cap.get('commit_p50', 0):.0f}" for cap in caps)
        print(f"| {client} | {pack} | {rate} | {commit} | {tl['offered_per_s']:,.0f} "
              f"| {tl['oldest_p50']:,.0f} / {tl['oldest_p99']:,.0f} | {tl['newest_p50']:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
