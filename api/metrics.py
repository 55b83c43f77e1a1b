"""Prometheus metrics of the API process, in the text format at ``/metrics``.

Counters of the pipeline (records, dead letters) are read from its cached
status at scrape time; per-epoch figures (commit latency, timeliness, compute
time per algorithm) are observed as each epoch reaches the store; API latency
is timed per route template by a small ASGI middleware. Each app has its own
registry, so several apps in one process (tests) never collide.
"""

from __future__ import annotations

import time
from typing import Callable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from pulsegraph.api.store import EpochView, ResultStore
from pulsegraph.api.stream import Broadcaster

# Epoch commit and compute times run from ~1 ms (tiny epochs) to seconds (a big graph on the CPU).
EPOCH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# API answers are sub-millisecond from memory; the tail is what the 20 ms p99 target is about.
HTTP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0)


class _PipelineCollector:
    def __init__(self, status: Callable[[], dict] | None, store: ResultStore, broadcaster: Broadcaster | None) -> None:
        self._status = status
        self._store = store
        self._broadcaster = broadcaster

    def collect(self):
        s = self._status() if self._status is not None else {}
        yield CounterMetricFamily("pulsegraph_records_ingested", "records read and turned into transactions", value=s.get("records", 0))
        yield CounterMetricFamily("pulsegraph_dead_letters", "records sent to the dead-letter sink", value=s.get("dead_letters", 0))
        window = s.get("window")
        if window:
            yield CounterMetricFamily(
                "pulsegraph_late_events", "events that arrived with their time already outside the window (never applied)",
                value=window["late"],
            )
            if window["watermark"] is not None:
                wm = GaugeMetricFamily("pulsegraph_watermark_seconds", "the newest epoch's watermark: the largest event time below its vector")
                wm.add_metric([], float(window["watermark"]))
                yield wm
        up = GaugeMetricFamily("pulsegraph_ingest_up", "1 while the ingest actors run, 0 when finished or failed")
        up.add_metric([], 1.0 if s.get("ingest") in ("running", "throttled") else 0.0)
        yield up
        mem = s.get("memory")
        if mem:
            yield CounterMetricFamily(
                "pulsegraph_ingest_throttled_seconds", "time ingest spent paused by the memory budget",
                value=mem["throttled_seconds"],
            )
            for name, doc, key in (
                ("pulsegraph_memory_bytes", "memory the budget counts (anonymous RSS of the service and the object store)", "used_bytes"),
                ("pulsegraph_memory_limit_bytes", "the memory budget (--memory-limit)", "limit_bytes"),
            ):
                g = GaugeMetricFamily(name, doc)
                g.add_metric([], float(mem[key]))
                yield g
        paused = CounterMetricFamily(
            "pulsegraph_ingest_paused_seconds", "time ingest spent paused, by what paused it (the memory budget has its own "
            "pulsegraph_ingest_throttled_seconds)", labels=["cause"],
        )
        for cause in ("compute_queue", "result_lag"):
            if s.get(cause):
                paused.add_metric([cause], s[cause]["throttled_seconds"])
        yield paused
        lag = s.get("result_lag")
        if lag:
            g = GaugeMetricFamily("pulsegraph_result_lag_seconds", "seal time between the newest sealed epoch and the newest ranked one")
            g.add_metric([], float(lag["seconds"]))
            yield g
        queue = s.get("compute_queue")
        if queue:
            g = GaugeMetricFamily("pulsegraph_compute_queue_bytes", "deltas of the sealed epochs not merged yet, queued or being merged")
            g.add_metric([], float(queue["bytes"] + queue["handing_bytes"]))
            yield g
        try:
            r = self._store.get().result
            latest = (r.epoch, r.vertices, r.edges)
        except Exception:  # noqa: BLE001 - no epoch yet
            latest = (0, 0, 0)
        for name, doc, value in zip(
            ("pulsegraph_epoch", "pulsegraph_vertices", "pulsegraph_edges"),
            ("newest epoch with results", "vertices in the newest epoch", "live edges in the newest epoch"),
            latest,
        ):
            g = GaugeMetricFamily(name, doc)
            g.add_metric([], float(value))
            yield g
        g = GaugeMetricFamily("pulsegraph_retained_epochs", "epochs the API can answer ?epoch= for")
        g.add_metric([], float(self._store.retained()))
        yield g
        g = GaugeMetricFamily("pulsegraph_graph_missed_epochs", "epochs whose edge changes the API's graph view never received")
        g.add_metric([], float(self._store.graph.missed_epochs))
        yield g
        if self._broadcaster is not None:
            g = GaugeMetricFamily("pulsegraph_stream_clients", "open /v1/stream connections")
            g.add_metric([], float(self._broadcaster.clients))
            yield g
            yield CounterMetricFamily("pulsegraph_stream_dropped", "epochs a slow stream client skipped for a newer one", value=self._broadcaster.dropped)


class Metrics:
    def __init__(self, store: ResultStore, status: Callable[[], dict] | None = None, broadcaster: Broadcaster | None = None) -> None:
        r = self.registry = CollectorRegistry()
        self.commit = Histogram("pulsegraph_epoch_commit_seconds", "cut to sealed, per epoch", buckets=EPOCH_BUCKETS, registry=r)
        # A gauge of the newest epoch's figures, labelled ``stat``: ``quantile`` is reserved for summaries,
        # whose quantiles are over the observations of the metric itself (promtool check metrics says so).
        self.timeliness = Gauge(
            "pulsegraph_epoch_timeliness_seconds", "read-to-sealed time over the records of the newest epoch: its p50, p99 and max",
            ["stat"], registry=r,
        )
        self.compute = Histogram("pulsegraph_compute_seconds", "time to rank an epoch, per algorithm", ["algo"], buckets=EPOCH_BUCKETS, registry=r)
        self.http = Histogram(
            "pulsegraph_http_request_duration_seconds", "API latency per route", ["route", "method", "status"], buckets=HTTP_BUCKETS, registry=r
        )
        self.events = Counter("pulsegraph_api_events", "events POSTed to /v1/events", ["outcome"], registry=r)
        r.register(_PipelineCollector(status, store, broadcaster))
        self._http_children: dict[tuple, object] = {}

    def on_epoch(self, view: EpochView) -> None:
        res = view.result
        self.commit.observe(res.commit_ms / 1000.0)
        for key in ("p50", "p99", "max"):
            self.timeliness.labels(key).set(res.timeliness_ms.get(key, 0.0) / 1000.0)
        for algo, ms in res.compute_ms.items():
            self.compute.labels(algo).observe(ms / 1000.0)

    def observe_http(self, route: str, method: str, status: int, seconds: float) -> None:
        key = (route, method, status)
        child = self._http_children.get(key)
        if child is None:
            child = self._http_children[key] = self.http.labels(route, method, str(status))
        child.observe(seconds)  # type: ignore[attr-defined]

    def render(self) -> bytes:
        return generate_latest(self.registry)


class TimedRoute:
    """A route as the timing middleware reads it, for a fast path that answers before the router matches one
    (it puts it in the scope): its path template."""

    def __init__(self, path: str) -> None:
        self.path = path


class TimingMiddleware:
    """Times every HTTP request by its route template (``/v1/vertices/{vertex_id}``), not its raw path."""

    def __init__(self, app, metrics: Metrics, skip: tuple[str, ...] = ()) -> None:
        self.app = app
        self.metrics = metrics
        self.skip = skip

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = 500

        async def send_status(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = scope.get("route")
            # The template without convertors: ``{vertex_id}``, not ``{vertex_id:vertex}``.
            path = getattr(route, "path_format", None) or getattr(route, "path", None) or "unmatched"
            if path not in self.skip:
                self.metrics.observe_http(path, scope["method"], status, time.perf_counter() - t0)
