"""``pulsegraph run``: the pipeline and the API in one process, until Ctrl-C."""

from __future__ import annotations

import logging
import signal

import uvicorn

from api.app import create_app
from api.store import EpochView
from pulsegraph.settings import Settings
from pulsegraph.topology import Pipeline

log = logging.getLogger("pulsegraph")


def print_epoch(view: EpochView) -> None:
    r = view.result
    log.info(
        "epoch %d  records %d  vertices %d  edges %d  commit %.1f ms  timeliness p50 %.0f ms  pagerank %.0f ms",
        r.epoch, r.records, r.vertices, r.edges, r.commit_ms, r.timeliness_ms["p50"], r.compute_ms.get("pagerank", 0.0),
    )


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def serve(settings: Settings) -> int:
    pipeline = Pipeline(settings, on_epoch=print_epoch)
    log.info("starting: source %s, %d shards, %d ingest actors", settings.source, settings.shards, settings.ingest_actors)
    pipeline.start()
    app = create_app(pipeline.store, pipeline.status)
    server = uvicorn.Server(uvicorn.Config(app, host=settings.host, port=settings.port, log_level="warning"))
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
