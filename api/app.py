"""The FastAPI application: the wiring of the routes (``api/routes/``), their context, the middlewares, and
the one error model ``{"error": {"code", "message"}}``, which errors take only here, at the edge.

It never calls an actor per request: results come from the store, the pipeline's status from a callable,
and POSTed events go to an events sink (``list[bytes] -> None``) that the wiring passes in (the embedded
event log, or a Kafka producer).

Security: writes need the bearer token (compared in constant time; 401 without one, 403 with a wrong one)
and are off (403) when none is configured, unless anonymous writes were asked for; reads are open unless
``protect_reads`` (:class:`~pulsegraph.api.deps.Auth`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import compile_path
from starlette.staticfiles import StaticFiles

from pulsegraph.api import queries
from pulsegraph.api.alerts import AlertBook
from pulsegraph.api.deps import JSON, Auth, Context, error, errors, require_read
from pulsegraph.api.edge import Edge, EdgeLimits
from pulsegraph.api.exceptions import ApiError
from pulsegraph.api.metrics import Metrics, TimingMiddleware
from pulsegraph.api.paths import DEFAULT_PATH_BFS_BUDGET
from pulsegraph.api.routes import (
    alerts as alert_routes,
)
from pulsegraph.api.routes import (
    components,
    epochs,
    events,
    fast,
    health,
    pages,
    paths,
    rank,
    search,
    stream,
    topics,
    trends,
    vertices,
)
from pulsegraph.api.routes import status as status_routes
from pulsegraph.api.store import EpochView, ResultStore
from pulsegraph.api.stream import Broadcaster, sse_frame

log = logging.getLogger(__name__)

def allowed_methods(app: FastAPI, request: Request) -> list[str]:
    """Every method the app's OpenAPI documents at the request's path (compiled once, at the first 405)."""
    table = getattr(app.state, "methods_by_path", None)
    if table is None:
        table = app.state.methods_by_path = [
            (compile_path(path)[0], {m.upper() for m in ops if m != "parameters"}) for path, ops in app.openapi()["paths"].items()
        ]
    path = request.url.path
    return sorted(set().union(*(methods for regex, methods in table if regex.match(path))))


# How long a fast neighbors read waits on the loop for an epoch being written into the graph view, in steps,
# before it hands the request to the route.
WAIT_STEP_S = 0.002
WAIT_FOR_WRITE = 50


def _fast_paths(app: FastAPI, store: ResultStore, open_reads: bool) -> None:
    """The hottest reads, answered before FastAPI (pulsegraph.api.routes.fast) where reads are open to all:
    they answer before the read check. The vertex paths' rewrite is installed either way."""
    if not open_reads:
        app.add_middleware(vertices.VertexPaths)
        return

    async def neighbors(vertex: str, direction: str, type: str | None, limit: int, epoch: int | None) -> bytes | None:
        for _ in range(WAIT_FOR_WRITE):
            body = queries.quietly(queries.neighbors, store, vertex, direction, type, limit, epoch, vertices.LOOP_NEIGHBORS)
            if body is not None or not store.graph.writing:
                return body
            # The feed thread is writing an epoch into the graph view: wait for it here, on the loop, rather
            # than hand the request to the route's worker thread, which would wait for it as well.
            await asyncio.sleep(WAIT_STEP_S)
        return None

    app.add_middleware(vertices.VertexPaths, answers={
        "": (fast.EPOCH, lambda vertex, epoch: queries.quietly(queries.vertex, store, vertex, epoch)),
        "/neighbors": (fast.NEIGHBORS, neighbors),
    })
    app.add_middleware(fast.FastReads, answers={
        "/v1/rank/top": (fast.TOP, lambda k, algo, epoch: queries.quietly(queries.top_body, store, k, algo, epoch)),
        "/v1/epochs/latest": (({}, {}), lambda: queries.quietly(lambda: store.get().info_json)),  # no parameter
        "/v1/topics": (fast.TOPICS, lambda sort, k, epoch: queries.quietly(queries.topics, store, sort, k, epoch)),
    })


def create_app(
    store: ResultStore,
    status: Callable[[], dict] | None = None,
    *,
    events_sink: Callable[[list[bytes]], None] | None = None,
    event_transform: Callable[[bytes], Any] | None = None,
    api_token: str | None = None,
    allow_anonymous_writes: bool = False,
    protect_reads: bool = False,
    cors_origins: tuple[str, ...] | list[str] = (),
    path_bfs_budget: int = DEFAULT_PATH_BFS_BUDGET,
    limits: EdgeLimits | None = None,
    alerts: AlertBook | None = None,
) -> FastAPI:
    """The app over ``store``.

    ``events_sink`` receives each accepted batch of POSTed events as compact JSON
    records; ``event_transform`` (the pipeline's transform, ``bytes -> updates``,
    raising ``BadRecord``) validates each one first. ``limits``: the bounds of the
    server's edge (``app.state.edge``, which :func:`pulsegraph.api.edge.server_config` serves
    with), of the event streams and of concurrent writes.
    """
    limits = limits or EdgeLimits()
    broadcaster = Broadcaster(limits.max_streams)
    book = alerts if alerts is not None else AlertBook(store)
    ctx = Context(
        store=store, auth=Auth(api_token, allow_anonymous_writes, protect_reads), limits=limits, edge=Edge(limits),
        broadcaster=broadcaster, metrics=Metrics(store, status, broadcaster), status=status, events_sink=events_sink,
        event_transform=event_transform, path_bfs_budget=path_bfs_budget,
        writes={"in_flight": 0, "max": limits.max_concurrent_writes, "refused": 0},
        alerts=book,
    )

    def on_epoch(view: EpochView) -> None:
        ctx.metrics.on_epoch(view)
        # Evaluated here, on the feed thread, before the streams wake: a stream reads them from the book.
        try:
            book.catch_up()
        except Exception:  # noqa: BLE001 - a rule's fault must not stop the epoch stream; readers evaluate again
            log.exception("alert evaluation failed")
        broadcaster.publish(sse_frame(view.result.epoch, view.info_json))

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI):
        store.serving()  # what a restart deferred (the names index, the graph view read back) starts now
        yield
        store.unsubscribe(on_epoch)

    store.subscribe(on_epoch)
    app = FastAPI(
        title="pulsegraph",
        version="0.1.0",
        default_response_class=JSON,
        lifespan=lifespan,
        docs_url=None,  # pulsegraph.api.routes.pages serves them, from the package
        redoc_url=None,
        openapi_url=pages.OPENAPI_URL,
        description="Ranks of a streaming graph, per committed epoch. Errors are `{\"error\": {\"code\", \"message\"}}`.",
    )
    app.state.ctx = ctx
    app.state.store = store
    app.state.metrics = ctx.metrics
    app.state.broadcaster = broadcaster
    app.state.edge = ctx.edge

    _fast_paths(app, store, open_reads=not ctx.auth.protect_reads)
    app.add_middleware(TimingMiddleware, metrics=ctx.metrics, skip=("/v1/stream", "/v1/alerts/stream"))
    if cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
        )

    _error_handlers(app)

    for router in (pages.router, health.router):
        app.include_router(router)
    if pages.STATIC.is_dir():
        app.mount("/static", StaticFiles(directory=str(pages.STATIC)), name="static")
    app.mount(pages.DOCS_ASSETS_URL, StaticFiles(directory=str(pages.DOCS_ASSETS)), name="docs-assets")
    # Only when reads are protected do read routes carry the check (and its cost on the hot path).
    protected = ctx.auth.protect_reads
    for router in (rank.router, epochs.router, alert_routes.router, vertices.router, components.router, topics.router, trends.router,
                   paths.router, search.router, stream.router, status_routes.router):
        app.include_router(router, dependencies=[Depends(require_read)] if protected else [],
                           responses=errors(401, 403) if protected else {})
    app.include_router(events.router)
    app.include_router(alert_routes.writes)
    return app


def _error_handlers(app: FastAPI) -> None:
    """Every error, ours or the framework's, as the JSON error body ``{"error": {"code", "message"}}``."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSON:
        return error(exc.status, exc.code, str(exc), exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSON:
        parts = []
        for e in exc.errors():
            where = ".".join(str(x) for x in e.get("loc", ()) if x not in ("query", "path", "body"))
            parts.append(f"{where}: {e.get('msg')}" if where else str(e.get("msg")))
        return error(422, "invalid_request", "; ".join(parts) or "invalid request")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSON:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:
            # Starlette names the methods of the first route of the path only; a path served by routes of
            # two routers (reads and writes of /v1/alerts/rules) must name them all.
            methods = allowed_methods(app, request)
            if methods:  # an undocumented path (the static files) keeps Starlette's answer
                headers = {**(headers or {}), "Allow": ", ".join(methods)}
        return error(exc.status_code, code, str(exc.detail), headers)
