"""The chaos run, short enough for CI: each kind of fault once, at random moments, against
a real broker and a paced producer; the final graph is the reference edge for edge, no dead letter is
written twice, and /health says running (see tests/chaos.py; ``python -m bench.chaos`` runs it long)."""

from __future__ import annotations

import random

import pytest

from tests.chaos import FAULTS, run_chaos


# Six recoveries, two of them a broker or a service restart: about 3 minutes on a quiet machine, so
# the suite's 5-minute default is too tight; every wait inside has its own bound.
@pytest.mark.timeout(900)
def test_every_kind_of_fault_once_ends_in_the_exact_graph(kafka_broker, tmp_path):
    plan = list(FAULTS)
    random.Random(11).shuffle(plan)
    result = run_chaos(kafka_broker, kafka_broker.topic(), tmp_path, plan, seed=11, between_s=(0.5, 2.0))
    assert [r.fault for r in result.recoveries] == plan
    assert result.bad_records > 0 and result.records > 1000
