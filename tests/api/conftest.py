"""One real pipeline (synthetic tweets, real Ray actors) for every API test, and a real server over it."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import uvicorn
from fastapi.testclient import TestClient

from pulsegraph.api.app import create_app
from pulsegraph.api.edge import server_config
from pulsegraph.ingest.eventlog import EventLog
from pulsegraph.ingest.transforms import get_transform
from pulsegraph.settings import Settings
from pulsegraph.topology import Pipeline

TOKEN = "t0k3n-for-the-api-tests-9f8e7d"


@pytest.fixture(scope="package")
def pipeline(ray_cluster, tmp_path_factory):
    settings = Settings(
        source="synthetic", rate=4000, partitions=3, shards=2, epoch_interval="150ms",
        data_dir=tmp_path_factory.mktemp("data"), users=2000, hashtags=100,
    )
    p = Pipeline(settings).start()
    p.wait_for_epoch(lambda v: v.result.epoch >= 3 and v.result.vertices >= 10, timeout=120)
    yield p
    p.stop()


def app_for(p: Pipeline, **kwargs):
    """The app as `pulsegraph run` wires it, with the security settings of a test."""
    return create_app(
        p.store, p.status,
        events_sink=EventLog(str(p.events_log)).append,
        event_transform=get_transform(p.settings.transform_name),
        alerts=p.alerts,
        **kwargs,
    )


@pytest.fixture(scope="package")
def running(pipeline):
    with TestClient(app_for(pipeline, api_token=TOKEN)) as client:
        yield pipeline, client


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="package")
def server(pipeline):
    """A real uvicorn server over the pipeline, in a thread: for the browser and the event stream."""
    port = free_port()
    config = server_config(app_for(pipeline, api_token=TOKEN), "127.0.0.1", port, log_level="warning", timeout_graceful_shutdown=1)
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, name="test-api-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the test server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(timeout=10)
