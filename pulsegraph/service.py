"""``pulsegraph run``: the pipeline and the API in one process, until Ctrl-C."""

from __future__ import annotations

import logging
import signal

import uvicorn

from api.app import create_app
from api.store import EpochView
from ingest.eventlog import EventLog
from ingest.transforms import get_transform
from pulsegraph.settings import Settings
from pulsegraph.topology import Pipeline

log = logging.getLogger("pulsegraph")

# Open /v1/stream connections never finish on their own; on Ctrl-C uvicorn waits this long for them, then closes them.
GRACEFUL_SHUTDOWN_S = 3


def print_epoch(view: EpochView) -> None:
    r = view.result
    log.info(
        "epoch %d  records %d  vertices %d  edges %d  commit %.1f ms  timeliness p50 %.0f ms  pagerank %.0f ms",
        r.epoch, r.records, r.vertices, r.edges, r.commit_ms, r.timeliness_ms["p50"], r.compute_ms.get("pagerank", 0.0),
    )


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def build_app(settings: Settings, pipeline: Pipeline):
    """The API over the pipeline: its store and status, and POSTed events appended to its event log.

    The events sink is the one seam for the write path: a Kafka source will pass a
    producer's send here instead of the embedded log's append.
    """
    token = settings.bearer_token()
    if token is None and settings.allow_anonymous_writes and settings.host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("anyone who can reach %s:%d can write events (--allow-anonymous-writes without a token)", settings.host, settings.port)
    # The embedded log is followed only by the synthetic and file sources; other sources bring their own sink.
    sink = EventLog(str(pipeline.events_log)).append if settings.source in ("synthetic", "file") else None
    return create_app(
        pipeline.store,
        pipeline.status,
        events_sink=sink,
        event_transform=get_transform(settings.transform_name),
        api_token=token,
        allow_anonymous_writes=settings.allow_anonymous_writes,
        protect_reads=settings.protect_reads,
        cors_origins=settings.cors_origins,
    )


def serve(settings: Settings) -> int:
    pipeline = Pipeline(settings, on_epoch=print_epoch)
    log.info("starting: source %s, %d shards, %d ingest actors", settings.source, settings.shards, settings.ingest_actors)
    pipeline.start()
    app = build_app(settings, pipeline)
    server = uvicorn.Server(
        uvicorn.Config(
            app, host=settings.host, port=settings.port, log_level="warning", access_log=False,
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        )
    )
    log.info("serving on http://%s:%d/  (top ranks: /v1/rank/top?k=10, API docs: /docs)", settings.host, settings.port)
    # uvicorn shuts down gracefully on SIGINT and SIGTERM, then re-raises the
    # signal; make SIGTERM an interrupt too, so the pipeline below is stopped.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        log.info("stopping the pipeline")
        pipeline.stop()
    return 0
