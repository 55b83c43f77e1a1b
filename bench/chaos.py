"""The long chaos run: many random faults against a real broker and a paced producer, then the exact answer.

    .venv/bin/python -m bench.chaos --faults 30 --seed 1

Starts its own broker (tools/kafka.sh, on a free 127.0.0.1 port, in a temporary
folder), runs tests/chaos.py's run with ``--faults`` faults drawn at random
(SIGKILL of a shard, an ingest actor, the coordinator or the compute actor; of
the whole service; the broker stopped for ``--outage`` seconds), checks the
final graph against the reference, the dead letters and /health, and prints
the BENCHMARKS.md rows: the faults survived and the recovery time of each kind
(from the fault to the next served epoch with the ingest running).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

from bench.machine import describe as machine
from tests.chaos import FAULTS, run_chaos
from tests.conftest import KafkaBroker


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--faults", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rate", type=float, default=400.0, help="events/s of the paced producer")
    ap.add_argument("--outage", type=float, default=10.0, help="seconds the broker stays down")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pg-chaos-"))
    broker = KafkaBroker(work / "kafka")
    broker.start()
    try:
        result = run_chaos(
            broker, f"chaos-{uuid.uuid4().hex[:8]}", work, args.faults, args.seed, rate=args.rate,
            outage_s=args.outage, log=lambda m: print(m, file=sys.stderr),
        )
    finally:
        broker.stop()
    print(f"machine: {machine()}")
    print(f"{len(result.recoveries)} faults survived; {result.records:,} records ({result.bad_records} malformed), "
          f"final epoch {result.final_epoch}: the graph equals the reference, every dead letter once, /health running")
    print("| fault | times | recovery median | recovery max |")
    print("|---|---|---|---|")
    for fault in FAULTS:
        got = [r.seconds for r in result.recoveries if r.fault == fault]
        if got:
            print(f"| {fault} | {len(got)} | {statistics.median(got):.1f} s | {max(got):.1f} s |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
