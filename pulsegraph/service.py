"""``pulsegraph run``: the pipeline and the API in one process, until Ctrl-C."""

from __future__ import annotations

import logging
import resource
import signal
import socket
import threading

import uvicorn

from pulsegraph.api.app import create_app
from pulsegraph.api.edge import EdgeLimits, server_config
from pulsegraph.api.store import EpochView
from pulsegraph.errors import PipelineError, PulsegraphError
from pulsegraph.ingest.eventlog import EventLog
from pulsegraph.ingest.sources.kafka_config import KafkaConfig
from pulsegraph.ingest.transforms import get_transform
from pulsegraph.settings import Settings
from pulsegraph.topology import Pipeline

log = logging.getLogger("pulsegraph")

# How long a POST waits for Kafka to acknowledge its events before answering 503 (the client may retry).
KAFKA_SEND_TIMEOUT_S = 10.0

# Open /v1/stream connections never finish on their own; on Ctrl-C uvicorn waits this long for them, then closes them.
GRACEFUL_SHUTDOWN_S = 3
# File descriptors the API process keeps for itself beyond its connections: Ray's driver (~40 sockets and
# pipes), logs, the epoch and dead-letter files, the Kafka producer, a write of the result archive, plus
# one per retained epoch (each archived epoch is one memory map, which holds its file open).
FD_RESERVE = 512
# Below this many connections the API is not worth serving: the operator must raise `ulimit -n`.
MIN_CONNECTIONS = 64


def print_epoch(view: EpochView) -> None:
    r = view.result
    # Where a ranked epoch's time went (the merge and copies, each ranking, each application): what an
    # operator reads first when ranked epochs fall behind the cuts.
    parts = "  ".join(f"{name} {ms:.0f}" for name, ms in [("graph", r.graph_ms), *r.compute_ms.items(), *r.apps_ms.items()])
    log.info(
        "epoch %d (merged %d)  records %d  vertices %d  edges %d  commit %.1f ms  timeliness p50 %.0f ms  ms: %s",
        r.epoch, len(r.skipped) + 1, r.records, r.vertices, r.edges, r.commit_ms, r.timeliness_ms["p50"], parts,
    )


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def kafka_sink(bootstrap: str, topic: str, config: KafkaConfig | None = None):
    """POSTed events to the Kafka topic the pipeline consumes, one event per message, acknowledged by every
    in-sync replica before the API answers 202. The producer is made at the first POST, so the API starts
    even while the broker is still coming up."""
    made: dict = {}
    lock = threading.Lock()

    def send(records: list[bytes]) -> None:
        from kafka import KafkaProducer

        from pulsegraph.ingest.sources.kafka_clients import kafka_python_config

        with lock:
            if "producer" not in made:
                made["producer"] = KafkaProducer(**kafka_python_config(bootstrap, config, acks="all", linger_ms=2))
        producer = made["producer"]
        futures = [producer.send(topic, value=r) for r in records]
        producer.flush(timeout=KAFKA_SEND_TIMEOUT_S)
        for f in futures:
            f.get(timeout=KAFKA_SEND_TIMEOUT_S)  # raises the broker's error: the app answers 503

    return send


def events_sink(settings: Settings, pipeline: Pipeline):
    """Where POST /v1/events appends: the Kafka topic of --source kafka, else the embedded log the pipeline follows."""
    if settings.source == "kafka":
        return kafka_sink(str(getattr(settings, "bootstrap")), str(getattr(settings, "topic")), pipeline.kafka_config)
    return EventLog(str(pipeline.events_log)).append


def open_files_limit() -> int:
    """The process's file descriptor limit, raised to its hard limit first (ours to take: many systems
    start processes at a soft 1024)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20  # the kernel's usual nr_open
    if soft == resource.RLIM_INFINITY or soft >= hard:
        return hard if soft == resource.RLIM_INFINITY else soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return hard
    except (ValueError, OSError):
        return soft


def edge_limits(settings: Settings, open_files: int) -> EdgeLimits:
    """The API's bounds from the settings; connections lowered so that they can never take the
    descriptors the result feed and the archive need (they share the process's limit)."""
    reserve = FD_RESERVE + settings.retain_epochs
    connections = min(settings.max_connections, open_files - reserve)
    if connections < MIN_CONNECTIONS:
        raise PipelineError(
            f"the process may open {open_files} files and keeps {reserve} for the pipeline, leaving {max(connections, 0)} "
            f"API connections. Operator action: raise the limit (ulimit -n {reserve + settings.max_connections}) or lower --retain-epochs."
        )
    if connections < settings.max_connections:
        log.warning("at most %d API connections, not --max-connections %d: the process may open %d files and keeps %d "
                    "for the pipeline (raise `ulimit -n` for more)", connections, settings.max_connections, open_files, reserve)
    return EdgeLimits(
        max_connections=connections,
        max_header_bytes=settings.max_header_bytes,
        header_timeout_s=settings.header_timeout,
        keep_alive_s=settings.keep_alive_timeout,
        send_timeout_s=settings.send_timeout,
        max_streams=min(settings.max_streams, connections // 2),
        max_concurrent_writes=settings.max_concurrent_writes,
    )


def build_app(settings: Settings, pipeline: Pipeline, limits: EdgeLimits | None = None):
    """The API over the pipeline: its store and status, and POSTed events appended to its event log.

    The events sink is the one seam of the write path: the embedded log's append, or a
    Kafka producer's send for --source kafka.
    """
    token = settings.bearer_token()
    if token is None and settings.allow_anonymous_writes and settings.host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("anyone who can reach %s:%d can write events (--allow-anonymous-writes without a token)", settings.host, settings.port)
    return create_app(
        pipeline.store,
        pipeline.status,
        events_sink=events_sink(settings, pipeline),
        event_transform=get_transform(settings.transform_name),
        api_token=token,
        allow_anonymous_writes=settings.allow_anonymous_writes,
        protect_reads=settings.protect_reads,
        cors_origins=settings.cors_origins,
        path_bfs_budget=settings.path_bfs_budget,
        limits=limits,
        alerts=pipeline.alerts,
    )


class _Server(uvicorn.Server):
    """uvicorn, ending the open event streams as soon as it is told to stop, so it need not wait them out."""

    def __init__(self, config: uvicorn.Config, on_exit) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig, frame) -> None:
        self._on_exit()
        super().handle_exit(sig, frame)


def listen(host: str, port: int) -> socket.socket:
    """The API's listening socket, bound now: before Ray starts, whose processes take ports of their own
    (one could take a port picked for the API between the pick and a late bind), and so that a port in
    use stops the service at once, not after the pipeline's start. Port 0 takes a free one."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise PipelineError(f"the API cannot listen on {host}:{port} ({exc.strerror}). Operator action: free the port or pass another --port") from exc
    return sock


def serve(settings: Settings) -> int:
    try:
        limits = edge_limits(settings, open_files_limit())
        sock = listen(settings.host, settings.port)
    except PipelineError as exc:
        log.error("%s", exc)
        return 1
    try:
        return _serve(settings, limits, sock)
    finally:
        sock.close()


def _serve(settings: Settings, limits: EdgeLimits, sock: socket.socket) -> int:
    try:
        pipeline = Pipeline(settings, on_epoch=print_epoch)
    except PulsegraphError as exc:  # its data folder's files cannot be trusted (the alert rules)
        log.error("%s", exc)
        return 1
    try:
        pipeline.open()  # the folder's lock, and its archived history taken back to serve at once
    except PulsegraphError as exc:
        log.error("%s", exc)
        return 1
    app = build_app(settings, pipeline, limits)
    server = _Server(
        server_config(
            app, settings.host, settings.port, log_level="warning", access_log=False,
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        ),
        on_exit=app.state.broadcaster.close,
    )
    server.config.load()  # uvicorn's own imports, on this thread, before the pipeline's thread starts Ray
    host, port = sock.getsockname()[:2]
    # Serving starts now, on the archived epochs; Ray and the actors start meanwhile (seconds), and an
    # error only the operator can fix there ends the service below (pipeline.fatal), as one later would.
    log.info("starting: source %s, Ray %s", settings.source, settings.ray_address or "embedded")
    pipeline.start_in_background()
    log.info("serving on http://%s:%d/  (top ranks: /v1/rank/top?k=10, API docs: /docs)", host, port)
    # uvicorn shuts down gracefully on SIGINT and SIGTERM, then re-raises the
    # signal; make SIGTERM an interrupt too, so the pipeline below is stopped.
    signal.signal(signal.SIGTERM, _interrupt)

    def exit_when_fatal() -> None:
        # A pipeline that gave up leaves nothing to serve but a stale history: exit, loudly, so a
        # supervisor (systemd, Kubernetes) shows the failure and the operator reads why.
        pipeline.fatal.wait()
        server.should_exit = True

    threading.Thread(target=exit_when_fatal, name="exit-when-fatal", daemon=True).start()
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        log.info("stopping the pipeline")
        pipeline.stop()
    if pipeline.fatal.is_set():
        log.error("stopped: %s", pipeline.fatal_error)
        return 1
    return 0
