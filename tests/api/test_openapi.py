"""schemathesis against the app's own OpenAPI, over real sockets, with every check it has and its own expectations.

No expected status is relaxed: a value the schema allows is never refused (positive data acceptance), a
value it forbids is refused with 4xx (negative data rejection), every answer is documented and has the
documented shape and type, auth is not ignored, unsupported methods are 405 with a true ``Allow``, and
every answer comes within MAX_RESPONSE_S. The server is uvicorn with the service's edge
(:func:`pulsegraph.api.edge.server_config`) over a store filled with the shared pipeline's real epochs; POSTed
events go to a list, so random events never reach the pipeline's log.
"""

from __future__ import annotations

import threading
import time

import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig

from pulsegraph.api.app import create_app
from pulsegraph.api.edge import server_config
from pulsegraph.api.models import ALGORITHMS
from pulsegraph.api.store import ResultStore
from pulsegraph.compute.ids import NameChanges
from pulsegraph.ingest.transforms import get_transform
from tests.api.conftest import TOKEN, free_port

# Enough to reach every parameter's edges; ~20 operations x this stays around a minute.
EXAMPLES = 25
# Answers come from memory in about a millisecond; a second means something is wrong, not slow.
MAX_RESPONSE_S = 1.0
CHECKS = [
    "not_a_server_error", "status_code_conformance", "content_type_conformance", "response_schema_conformance",
    "response_headers_conformance", "positive_data_acceptance", "negative_data_rejection", "use_after_free",
    "ensure_resource_availability", "missing_required_header", "ignored_auth", "object_level_authorization",
    "unsupported_method", "allow_header_conformance",
]
CONFIG = SchemathesisConfig.from_dict(
    {"checks": {"enabled": True, **{name: {"enabled": True} for name in CHECKS}, "max_response_time": MAX_RESPONSE_S}}
)
STORE = ResultStore()
SUNK: list = []  # random events must not flood the pipeline's own log
APP = create_app(STORE, events_sink=SUNK.extend, event_transform=get_transform("tweets"), api_token=TOKEN)
# Read when pytest collects (the schema does not depend on the data); the requests go to the live server below.
# The event streams never end; they have their own tests.
schema = schemathesis.openapi.from_dict(APP.openapi(), config=CONFIG).exclude(path=["/v1/stream", "/v1/alerts/stream"])


@pytest.fixture(scope="module")
def live(pipeline):
    views = pipeline.store.recent(10**6)[::-1]
    STORE.add([v.result for v in views], NameChanges(0, list(pipeline.store.names)))
    assert STORE.latest_epoch >= 3
    port = free_port()
    srv = uvicorn.Server(server_config(APP, "127.0.0.1", port, log_level="warning", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=srv.run, name="openapi-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(timeout=10)


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_api_keeps_its_own_contract(case, live):
    case.call_and_validate(base_url=live, headers={"Authorization": f"Bearer {TOKEN}"})


def test_the_schema_names_the_algorithms_the_compute_stage_ranks(ray_cluster):
    from pulsegraph.compute.engine import RankEngine

    assert tuple(sorted(RankEngine().algorithms)) == tuple(sorted(ALGORITHMS))
