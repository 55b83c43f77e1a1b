"""The FastAPI application: routes over the in-memory :class:`~api.store.ResultStore`, the dashboard, the write path.

Owns the HTTP contract and the one error model ``{"error": {"code", "message"}}``,
which errors take only here, at the edge. It never calls an actor per request:
results come from the store, the pipeline's status from a callable, and POSTed
events go to an events sink (``list[bytes] -> None``) that the wiring passes in
(the embedded event log today, a Kafka producer later).

Security: writes need the bearer token (compared in constant time; 401 without
one, 403 with a wrong one) and are off (403) when none is configured, unless
anonymous writes were asked for; reads are open unless ``protect_reads``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import logging
import re
import time
from importlib import resources
from typing import Annotated, Any, Callable, Literal
from urllib.parse import quote, unquote, unquote_to_bytes

import numpy as np
import orjson
from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.staticfiles import StaticFiles

from api.batch import MAX_BODY_BYTES, MAX_EVENTS, MAX_JSON_VALUES, check_batch, parse_batch
from api.edge import Edge, EdgeLimits
from api.exceptions import ApiError, Forbidden, NotFound, PayloadTooLarge, RequestTimeout, Unauthorized, Unavailable
from api.metrics import Metrics, TimingMiddleware
from api.models import (
    ALGORITHMS,
    Accepted,
    Algorithm,
    Algorithms,
    ComponentList,
    EpochInfo,
    EpochList,
    Error,
    Health,
    History,
    Movers,
    Neighbors,
    PathAnswer,
    SearchResult,
    TopicList,
    TopRanking,
    Trends,
    Usage,
    Vertex,
)
from api.paths import DEFAULT_PATH_BFS_BUDGET, find_path
from api.store import TOP_CACHE, EpochView, ResultStore
from api.stream import ANONYMOUS, AUTHENTICATED, SAME_ORIGIN, Broadcaster, sse_frame
from ingest.events import WEIGHT_SCALE

log = logging.getLogger(__name__)

# A page of epochs; the store retains more, but a dashboard never needs them at once.
MAX_EPOCH_PAGE = 1000
MAX_ID_BYTES = 256
# Per-request bounds of the heavier reads: each is answered from memory in well under a millisecond per item.
MAX_NEIGHBORS = 1000
MAX_SEARCH = 100
MAX_MOVERS = 100
MAX_HISTORY = 100_000
# Issue 6's reads: components and topics are lists computed per epoch, so bounded by what the epoch carries.
MAX_COMPONENTS = 1000
MAX_TOPICS = 1000
MAX_TRENDS = 100
# How many rejected events a 202 names; the count covers all of them.
MAX_REASONS = 100
# A POST's whole body must arrive within this (5 MB in 30 s is 1.4 Mbit/s): a client trickling its body
# would otherwise hold one of the few write slots for as long as it likes.
BODY_TIMEOUT_S = 30.0
# /health names a bound as saturated from this share of it on: the pushback is near.
SATURATED = 0.9

STATIC = resources.files("api") / "static"
# Swagger UI's bundle, stylesheet and icon, as the fastapi-offline package ships them.
DOCS_ASSETS = resources.files("fastapi_offline") / "static"
DOCS_ASSETS_URL = "/docs-assets"


def docs_policy(page: bytes) -> str:
    """The docs page's Content-Security-Policy: scripts from here and the page's one inline script, by its hash.
    (Swagger UI sets inline styles, hence style-src 'unsafe-inline': styles run no code.)"""
    inline = re.search(rb"<script>(.*?)</script>", page, re.DOTALL)
    scripts = ["'self'"]
    if inline is not None:
        scripts.append("'sha256-%s'" % base64.b64encode(hashlib.sha256(inline.group(1)).digest()).decode())
    return (f"default-src 'self'; script-src {' '.join(scripts)}; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
            "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")


class JSON(JSONResponse):
    """orjson, and bytes pass through as they are (pre-encoded answers). A JSONResponse, so OpenAPI shows the models."""

    def render(self, content: Any) -> bytes:
        if isinstance(content, bytes):
            return content
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)


def _error(status: int, code: str, message: str, headers: dict | None = None) -> JSON:
    return JSON({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


EpochQ = Annotated[int | None, Query(ge=1, le=2**53, description="a retained epoch; omitted: the newest")]
# The algorithms the compute stage ranks by: the schema names them, so a value it allows is never refused
# as unknown (one an epoch lacks is a 404 algo_not_in_epoch).
AlgoQ = Annotated[Algorithm, Query(description="the ranking: " + ", ".join(ALGORITHMS))]
VertexP = Annotated[str, Path(
    min_length=1, max_length=MAX_ID_BYTES,
    description="a vertex id, percent-encoded as one path segment (`/` as `%2F`: ids may be URLs)",
)]


class VertexIdConvertor(Convertor):
    """The ``{vertex_id:vertex}`` path segment: one segment of the path :class:`VertexPaths` rewrote,
    decoded back to the id."""

    regex = "[^/]+"

    def convert(self, value: str) -> str:
        return unquote(value)

    def to_string(self, value: str) -> str:
        return quote(value, safe="")


register_url_convertor("vertex", VertexIdConvertor())


class VertexPaths:
    """Routes under ``/v1/vertices/`` take the id from the *raw* path, where a ``/`` inside an id is still
    ``%2F``: the server decodes the path before routing, and an id such as ``https://site.example/alice``
    would otherwise be three segments that no route matches. The id's segment is decoded once and put back
    encoded, so the router sees one segment and the convertor hands the route the id."""

    PREFIX = b"/v1/vertices/"

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith("/v1/vertices/"):
            raw = scope.get("raw_path") or quote(scope["path"]).encode("ascii")
            if raw.startswith(self.PREFIX):
                segment, slash, rest = raw[len(self.PREFIX):].partition(b"/")
                try:
                    vertex = unquote_to_bytes(segment).decode("utf-8")
                except UnicodeDecodeError:
                    vertex = "\ufffd"  # no id that ingest accepts decodes so: the route answers 404
                tail = unquote((slash + rest).decode("latin-1"))
                # In place: the timing middleware outside reads the route the router puts in this scope.
                scope["path"] = "/v1/vertices/" + quote(vertex, safe="") + tail
        await self.app(scope, receive, send)


def _errors(*codes: int) -> dict:
    return {c: {"model": Error} for c in (*codes, 422)}


class Auth:
    """Bearer-token checks: constant-time compare; writes off without a token unless anonymous writes are allowed."""

    def __init__(self, token: str | None, allow_anonymous_writes: bool, protect_reads: bool) -> None:
        self.token = token.encode() if token else None
        self.allow_anonymous_writes = allow_anonymous_writes
        self.protect_reads = protect_reads and self.token is not None

    def _check(self, creds: HTTPAuthorizationCredentials | None) -> None:
        assert self.token is not None
        if creds is None or not creds.credentials:
            raise Unauthorized("this route needs 'Authorization: Bearer <token>'", headers={"WWW-Authenticate": "Bearer"})
        if not hmac.compare_digest(creds.credentials.encode(), self.token):
            raise Forbidden("the bearer token is not valid", code="bad_token")

    def write(self, creds: HTTPAuthorizationCredentials | None) -> None:
        if self.token is None:
            if self.allow_anonymous_writes:
                return
            raise Forbidden(
                "writes are off: the server has no API token (set PULSEGRAPH_API_TOKEN or --api-token-file, "
                "or start it with --allow-anonymous-writes)",
                code="writes_disabled",
            )
        self._check(creds)

    def read(self, creds: HTTPAuthorizationCredentials | None) -> None:
        if self.protect_reads:
            self._check(creds)

    def valid(self, authorization: str | None) -> bool:
        """Whether an ``Authorization`` header carries the token (constant time), for routes open to all
        that treat authenticated clients better."""
        scheme, _, credentials = (authorization or "").partition(" ")
        return (self.token is not None and scheme.lower() == "bearer"
                and hmac.compare_digest(credentials.strip().encode(), self.token))

    @property
    def writes(self) -> str:
        return "token" if self.token else ("anonymous" if self.allow_anonymous_writes else "off")


class _Route:
    """What the timing middleware reads of a matched route: its path template."""

    def __init__(self, path: str) -> None:
        self.path = path


class FastTop:
    """``GET /v1/rank/top`` with plain, valid parameters, answered before FastAPI's routing and per-parameter
    validation, which are about half of the route's cost in the server (the hot read of issue 5's target).

    Anything else (an unknown, repeated or invalid parameter, an epoch or algorithm that is not there) falls
    through to the route itself, which owns every error; a test checks both give the same bytes.
    """

    PATH = "/v1/rank/top"
    _HEADERS = [(b"content-type", b"application/json")]

    def __init__(self, app, answer: Callable[[int, str, int | None], bytes | None]) -> None:
        self.app = app
        self.answer = answer
        self.route = _Route(self.PATH)

    def _params(self, query: bytes) -> tuple[int, str, int | None] | None:
        k, algo, epoch = 10, "pagerank", None
        seen = set()
        for part in query.split(b"&") if query else ():
            key, _, value = part.partition(b"=")
            if key in seen or not value.isalnum():
                return None
            seen.add(key)
            if key == b"k" and value.isdigit() and len(value) <= 4:
                k = int(value)
            elif key == b"epoch" and value.isdigit() and len(value) <= 15:
                epoch = int(value)
            elif key == b"algo" and len(value) <= 64:
                algo = value.decode("ascii")
            else:
                return None
        if not 1 <= k <= TOP_CACHE or (epoch is not None and epoch < 1):
            return None
        return k, algo, epoch

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] == self.PATH and scope["method"] == "GET":
            params = self._params(scope["query_string"])
            body = self.answer(*params) if params is not None else None
            if body is not None:
                scope["route"] = self.route
                await send({"type": "http.response.start", "status": 200,
                            "headers": self._HEADERS + [(b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


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
) -> FastAPI:
    """The app over ``store``.

    ``events_sink`` receives each accepted batch of POSTed events as compact JSON
    records; ``event_transform`` (the pipeline's transform, ``bytes -> updates``,
    raising ``BadRecord``) validates each one first. ``limits``: the bounds of the
    server's edge (``app.state.edge``, which :func:`api.edge.server_config` serves
    with), of the event streams and of concurrent writes.
    """
    limits = limits or EdgeLimits()
    auth = Auth(api_token, allow_anonymous_writes, protect_reads)
    edge = Edge(limits)
    broadcaster = Broadcaster(limits.max_streams)
    writes = {"in_flight": 0, "max": limits.max_concurrent_writes, "refused": 0}
    metrics = Metrics(store, status, broadcaster)
    bearer = HTTPBearer(auto_error=False, description="PULSEGRAPH_API_TOKEN")

    # Default-value style: the module's postponed annotations cannot name the local `bearer`.
    def require_read(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        auth.read(creds)

    def require_write(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        auth.write(creds)

    # Only when reads are protected do read routes carry the check (and its cost on the hot path).
    reads: list = [Depends(require_read)] if auth.protect_reads else []
    read_errors = (401, 403) if auth.protect_reads else ()

    def on_epoch(view: EpochView) -> None:
        metrics.on_epoch(view)
        broadcaster.publish(sse_frame(view.result.epoch, view.info_json))

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI):
        yield
        store.unsubscribe(on_epoch)

    store.subscribe(on_epoch)
    app = FastAPI(
        title="pulsegraph",
        version="0.1.0",
        default_response_class=JSON,
        lifespan=lifespan,
        docs_url=None,  # served below, from the package
        redoc_url=None,
        description="Ranks of a streaming graph, per committed epoch. Errors are `{\"error\": {\"code\", \"message\"}}`.",
    )
    app.state.store = store
    app.state.metrics = metrics
    app.state.broadcaster = broadcaster
    app.state.edge = edge
    app.add_middleware(VertexPaths)
    if not auth.protect_reads:
        app.add_middleware(FastTop, answer=lambda k, algo, epoch: top_body(k, algo, epoch, quiet=True))
    app.add_middleware(TimingMiddleware, metrics=metrics, skip=("/v1/stream",))
    if cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
        )

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSON:
        return _error(exc.status, exc.code, str(exc), exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSON:
        parts = []
        for e in exc.errors():
            where = ".".join(str(x) for x in e.get("loc", ()) if x not in ("query", "path", "body"))
            parts.append(f"{where}: {e.get('msg')}" if where else str(e.get("msg")))
        return _error(422, "invalid_request", "; ".join(parts) or "invalid request")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSON:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error(exc.status_code, code, str(exc.detail), getattr(exc, "headers", None))

    def view_with(epoch: int | None, algo: str | None = None) -> EpochView:
        view = store.get(epoch)
        if algo is not None and algo not in view.result.scores:
            # The schema's enum turned away unknown names; this epoch was ranked without this one.
            raise NotFound(f"epoch {view.result.epoch} has no {algo} scores (it has: {', '.join(view.result.scores)})",
                           code="algo_not_in_epoch")
        return view

    def vertex_in(view: EpochView, name: str) -> int:
        i = store.vertex_id(name)
        if i >= view.result.vertices:
            raise NotFound(f"vertex {name!r} is not in epoch {view.result.epoch}", code="vertex_not_found")
        return i

    def top_body(k: int, algo: str, epoch: int | None, quiet: bool = False) -> bytes | None:
        try:
            view = view_with(epoch, algo)
        except ApiError:
            if quiet:
                return None  # the route answers the error
            raise
        items = view.top_items(algo, store.names)[:k]
        return b'{"epoch":%d,"algo":%s,"items":[%s]}' % (view.result.epoch, orjson.dumps(algo), b",".join(items))

    # ---- dashboard -------------------------------------------------------------------------
    index_html = (STATIC / "index.html").read_bytes() if (STATIC / "index.html").is_file() else b"<h1>pulsegraph</h1>"
    page_headers = {
        # Everything the page needs is served from here: no CDN, no inline script.
        "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }

    @app.get("/", include_in_schema=False)
    async def dashboard() -> Response:
        return Response(index_html, media_type="text/html; charset=utf-8", headers=page_headers)

    if STATIC.is_dir():
        app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")

    # ---- API docs: Swagger UI's files from the package (fastapi-offline ships them), never a CDN: an
    # operator may paste the token into this page, so every script it runs is ours, pinned by the policy.
    docs_page = bytes(get_swagger_ui_html(
        openapi_url=app.openapi_url or "/openapi.json",
        title="pulsegraph API",
        swagger_js_url=f"{DOCS_ASSETS_URL}/swagger-ui-bundle.js",
        swagger_css_url=f"{DOCS_ASSETS_URL}/swagger-ui.css",
        swagger_favicon_url=f"{DOCS_ASSETS_URL}/favicon.png",
        swagger_ui_parameters={"validatorUrl": None},  # no badge fetched from swagger.io
    ).body)
    docs_headers = {**page_headers, "Content-Security-Policy": docs_policy(docs_page)}
    app.mount(DOCS_ASSETS_URL, StaticFiles(directory=str(DOCS_ASSETS)), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> Response:
        return Response(docs_page, media_type="text/html; charset=utf-8", headers=docs_headers)

    # ---- reads -----------------------------------------------------------------------------
    @app.get("/health", response_model=Health, summary="liveness and what is connected")
    async def health() -> JSON:
        body: dict = {"status": "ok", "epoch": store.latest_epoch, "writes": auth.writes, "events_sink": events_sink is not None}
        if status is not None:
            # "degraded" while the ingest is disconnected, recovering or failed; the API itself still serves.
            body.update(status())
        body["edge"] = edge_stats()
        return JSON(body)

    def edge_stats() -> dict:
        """The API's own bounds, what is in use and what was refused; `saturated` names those at 90% or more."""
        got: dict = {"connections": edge.stats(), "streams": broadcaster.stats(), "writes": dict(writes)}
        use = {"connections": got["connections"]["open"], "streams": got["streams"]["open"], "writes": writes["in_flight"]}
        got["saturated"] = [k for k, n in use.items() if n >= SATURATED * got[k]["max"]]
        return got

    @app.get("/v1/algorithms", response_model=Algorithms, dependencies=reads, responses=_errors(*read_errors))
    async def algorithms() -> JSON:
        return JSON({"items": list(store.algorithms)})

    @app.get("/v1/epochs/latest", response_model=EpochInfo, dependencies=reads, responses=_errors(404, *read_errors))
    async def latest_epoch() -> JSON:
        return JSON(store.get().info_json)

    @app.get("/v1/epochs/{epoch}", response_model=EpochInfo, dependencies=reads, responses=_errors(404, *read_errors))
    async def one_epoch(epoch: Annotated[int, Path(ge=1, le=2**53)]) -> JSON:
        return JSON(store.get(epoch).info_json)

    @app.get("/v1/epochs", response_model=EpochList, dependencies=reads, responses=_errors(*read_errors))
    async def epochs(limit: Annotated[int, Query(ge=1, le=MAX_EPOCH_PAGE)] = 20) -> JSON:
        return JSON(b'{"items":[' + b",".join(v.info_json for v in store.recent(limit)) + b"]}")

    @app.get("/v1/rank/top", response_model=TopRanking, dependencies=reads, responses=_errors(404, *read_errors))
    async def top(
        k: Annotated[int, Query(ge=1, le=TOP_CACHE)] = 10,
        algo: AlgoQ = "pagerank",
        epoch: EpochQ = None,
    ) -> JSON:
        return JSON(top_body(k, algo, epoch))

    @app.get("/v1/vertices/{vertex_id:vertex}", response_model=Vertex, dependencies=reads, responses=_errors(404, *read_errors))
    async def vertex(vertex_id: VertexP, epoch: EpochQ = None) -> JSON:
        view = store.get(epoch)
        i = vertex_in(view, vertex_id)
        r = view.result
        return JSON(
            {
                "vertex": vertex_id,
                "epoch": r.epoch,
                "out_degree": int(r.out_degree[i]),
                "in_degree": int(r.in_degree[i]),
                "scores": {algo: float(s[i]) for algo, s in r.scores.items()},
                "component": component_of(view, i),
            }
        )

    def apps_of(view: EpochView, name: str) -> dict:
        got = (getattr(view.result, "apps", None) or {}).get(name)
        if got is None:
            raise NotFound(f"epoch {view.result.epoch} has no {name}", code="app_not_in_epoch")
        return got

    def component_of(view: EpochView, i: int) -> dict | None:
        e, n = view.result.epoch, view.result.vertices
        if "components" not in (getattr(view.result, "apps", None) or {}) or not store.components.covers(e):
            return None  # the application is off, or the epoch is from before a restart (labels not archived)
        label = int(store.components.at(e, np.zeros(1, np.int64), np.array([i]))[0])
        if label < 0:
            return None
        size = int(np.count_nonzero(store.components.row(e, 0, n) == label))
        return {"id": store.names[label], "size": size}

    @app.get(
        "/v1/components", response_model=ComponentList, dependencies=reads, responses=_errors(404, *read_errors),
        summary="the largest weakly connected components",
    )
    async def components(k: Annotated[int, Query(ge=1, le=MAX_COMPONENTS)] = 10, epoch: EpochQ = None) -> JSON:
        view = store.get(epoch)
        c = apps_of(view, "components")
        names = store.names
        items = [
            {"rank": r + 1, "id": names[v], "size": int(sz)}
            for r, (v, sz) in enumerate(zip(c["top"][:k].tolist(), c["top_sizes"][:k].tolist()))
        ]
        return JSON({"epoch": view.result.epoch, "count": int(c["count"]), "items": items})

    @app.get(
        "/v1/topics", response_model=TopicList, dependencies=reads, responses=_errors(404, *read_errors),
        summary="hashtags with their K-exposure curves, most controversial (persistent) first",
    )
    def topics(
        sort: Literal["controversy", "usage", "users"] = "controversy",
        k: Annotated[int, Query(ge=1, le=MAX_TOPICS)] = 20,
        epoch: EpochQ = None,
    ) -> JSON:
        view = store.get(epoch)
        t = apps_of(view, "topics")
        tags = t["tags"]
        if sort == "controversy":
            order = np.arange(len(tags))  # published in this order
        else:
            key = t["usage"] if sort == "usage" else t["users"]
            order = np.lexsort((tags, -key))
        names = store.names
        items = []
        for i in order[:k].tolist():
            curve = t["curve"][i]
            items.append({
                "hashtag": names[int(tags[i])], "usage": int(t["usage"][i]), "users": int(t["users"][i]),
                "persistence": float(t["persistence"][i]),
                "curve": [None if np.isnan(x) else float(x) for x in curve.tolist()],
                "exposed": [int(x) for x in t["reached"][i].tolist()],
            })
        return JSON({"epoch": view.result.epoch, "as_of": int(t.get("as_of", view.result.epoch)), "sort": sort, "items": items})

    def usage_of(view: EpochView) -> dict[int, int]:
        t = (getattr(view.result, "apps", None) or {}).get("trends")
        if t is None:
            raise NotFound(f"epoch {view.result.epoch} has no trends", code="app_not_in_epoch")
        return dict(zip(t["tags"].tolist(), t["usage"].tolist()))

    @app.get(
        "/v1/trends", response_model=Trends, dependencies=reads, responses=_errors(404, *read_errors),
        summary="hashtags whose usage rank rose and fell most between two retained epochs (in either order; the same epoch twice: none)",
    )
    def trends(
        from_: Annotated[int | None, Query(alias="from", ge=1, le=2**53, description="default: the ranked epoch before `to`; any retained epoch, before or after `to`")] = None,
        to: Annotated[int | None, Query(ge=1, le=2**53, description="default: the newest")] = None,
        k: Annotated[int, Query(ge=1, le=MAX_TRENDS)] = 10,
    ) -> JSON:
        b = store.get(to)
        to_e = b.result.epoch
        from_e = from_ if from_ is not None else (b.previous.result.epoch if b.previous is not None else to_e - 1)
        a = store.get(from_e)
        ua, ub = usage_of(a), usage_of(b)
        tags = np.array(sorted(set(ua) | set(ub)), dtype=np.int64)
        u1 = np.array([ua.get(t, 0) for t in tags.tolist()], dtype=np.int64)
        u2 = np.array([ub.get(t, 0) for t in tags.tolist()], dtype=np.int64)
        r1, r2 = np.empty(len(tags), np.int64), np.empty(len(tags), np.int64)
        r1[np.lexsort((tags, -u1))] = np.arange(1, len(tags) + 1)
        r2[np.lexsort((tags, -u2))] = np.arange(1, len(tags) + 1)
        change = r1 - r2
        names = store.names

        def pick(sign: int) -> list[dict]:
            c = change * sign
            cand = np.flatnonzero(c > 0)
            cand = cand[np.lexsort((r2[cand], -c[cand]))][:k]
            return [
                {"vertex": names[int(tags[i])], "from_rank": int(r1[i]), "to_rank": int(r2[i]), "change": int(change[i]),
                 "score": float(u2[i]), "usage_from": int(u1[i]), "usage_to": int(u2[i])}
                for i in cand.tolist()
            ]

        return JSON({"from": from_e, "to": to_e, "rising": pick(1), "falling": pick(-1)})

    @app.get(
        "/v1/trends/usage", response_model=Usage, dependencies=reads, responses=_errors(404, *read_errors),
        summary="a hashtag's usage per retained epoch, oldest first",
    )
    def trend_usage(
        tag: Annotated[str, Query(min_length=1, max_length=MAX_ID_BYTES, description="the hashtag vertex, e.g. #python")],
        limit: Annotated[int, Query(ge=1, le=MAX_HISTORY)] = 120,
    ) -> JSON:
        i = store.vertex_id(tag)
        points: list[dict[str, Any]] = []
        for v in store.recent(limit):
            t = (getattr(v.result, "apps", None) or {}).get("trends")
            if t is None or i >= v.result.vertices:
                continue
            pos = np.searchsorted(t["tags"], i)
            used = int(t["usage"][pos]) if pos < len(t["tags"]) and t["tags"][pos] == i else 0
            points.append({"epoch": v.result.epoch, "usage": used})
        points.reverse()
        for prev, p in zip([None, *points], points):
            p["new"] = p["usage"] - prev["usage"] if prev is not None and prev["epoch"] == p["epoch"] - 1 else None
        return JSON({"hashtag": tag, "items": points})

    @app.get(
        "/v1/paths", response_model=PathAnswer, dependencies=reads, responses=_errors(404, 503, *read_errors),
        summary="approximate shortest path by landmarks, confirmed by a budgeted bidirectional BFS",
    )
    def paths(
        src: Annotated[str, Query(min_length=1, max_length=MAX_ID_BYTES)],
        dst: Annotated[str, Query(min_length=1, max_length=MAX_ID_BYTES)],
        epoch: EpochQ = None,
    ) -> JSON:
        view = store.get(epoch)
        a, b = vertex_in(view, src), vertex_in(view, dst)
        apps_of(view, "landmarks")
        try:
            return JSON(find_path(store, view, a, b, path_bfs_budget))
        except ValueError as exc:  # the epoch's distances and graph disagree: a bug, said plainly, not a 500
            log.error("path %s -> %s at epoch %d: %s", src, dst, view.result.epoch, exc)
            raise Unavailable(f"the landmark distances of epoch {view.result.epoch} are inconsistent: {exc}", code="paths_unavailable") from None

    @app.get(
        "/v1/vertices/{vertex_id:vertex}/history",
        response_model=History,
        dependencies=reads,
        responses=_errors(404, *read_errors),
        summary="score and rank per retained epoch, oldest first",
    )
    def history(
        vertex_id: VertexP,
        algo: AlgoQ = "pagerank",
        limit: Annotated[int, Query(ge=1, le=MAX_HISTORY)] = 120,
    ) -> JSON:
        view_with(None, algo)
        i = store.vertex_id(vertex_id)
        items = []
        for v in store.recent(limit):
            ranks = v.ranks.get(algo)
            if ranks is None or i >= len(ranks):
                continue
            items.append({"epoch": v.result.epoch, "score": float(v.result.scores[algo][i]), "rank": int(ranks[i])})
        items.reverse()
        return JSON({"vertex": vertex_id, "algo": algo, "items": items})

    @app.get(
        "/v1/vertices/{vertex_id:vertex}/neighbors",
        response_model=Neighbors,
        dependencies=reads,
        responses=_errors(404, *read_errors),
        summary="live edges of a vertex, heaviest first",
    )
    def neighbors(
        vertex_id: VertexP,
        direction: Literal["out", "in"] = "out",
        type: Annotated[str | None, Query(min_length=1, max_length=32, description="only edges of this type")] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_NEIGHBORS)] = 20,
        epoch: EpochQ = None,
    ) -> JSON:
        view = store.get(epoch)
        i = vertex_in(view, vertex_id)
        other, et, mult, weight = store.graph.neighbors(i, direction, view.result.epoch)
        types = store.types
        if type is not None:
            t = types.index(type) if type in types else -1
            keep = et == t
            other, et, mult, weight = other[keep], et[keep], mult[keep], weight[keep]
        order = np.lexsort((other, -mult, -weight))[:limit]
        names = store.names
        items = [
            {"vertex": names[o], "type": types[t] if t < len(types) else str(t), "weight": w / WEIGHT_SCALE, "multiplicity": m}
            for o, t, m, w in zip(other[order].tolist(), et[order].tolist(), mult[order].tolist(), weight[order].tolist())
        ]
        return JSON({"vertex": vertex_id, "epoch": view.result.epoch, "direction": direction, "items": items})

    @app.get(
        "/v1/movers",
        response_model=Movers,
        dependencies=reads,
        responses=_errors(404, *read_errors),
        summary="vertices whose rank rose and fell most between two retained epochs (in either order; the same epoch twice: none)",
    )
    def movers(
        algo: AlgoQ = "pagerank",
        from_: Annotated[int | None, Query(alias="from", ge=1, le=2**53, description="default: the ranked epoch before `to`; any retained epoch, before or after `to`")] = None,
        to: Annotated[int | None, Query(ge=1, le=2**53, description="default: the newest")] = None,
        k: Annotated[int, Query(ge=1, le=MAX_MOVERS)] = 10,
    ) -> JSON:
        b = view_with(to, algo)
        to_e = b.result.epoch
        from_e = from_ if from_ is not None else (b.previous.result.epoch if b.previous is not None else to_e - 1)
        a = view_with(from_e, algo)
        n = min(len(a.ranks[algo]), len(b.ranks[algo]))
        r1, r2 = a.ranks[algo][:n].astype(np.int64), b.ranks[algo][:n].astype(np.int64)
        change = r1 - r2
        scores = b.result.scores[algo]
        names = store.names

        def pick(sign: int) -> list[dict]:
            c = change * sign
            cand = np.flatnonzero(c > 0)
            if len(cand) > k:
                cand = cand[np.argpartition(-c[cand], k - 1)[:k]]
            cand = cand[np.lexsort((r2[cand], -c[cand]))]
            return [
                {"vertex": names[v], "from_rank": int(r1[v]), "to_rank": int(r2[v]), "change": int(change[v]), "score": float(scores[v])}
                for v in cand.tolist()
            ]

        return JSON({"algo": algo, "from": from_e, "to": to_e, "rising": pick(1), "falling": pick(-1)})

    @app.get("/v1/search", response_model=SearchResult, dependencies=reads, responses=_errors(404, *read_errors))
    async def search(
        prefix: Annotated[str, Query(min_length=1, max_length=MAX_ID_BYTES)],
        limit: Annotated[int, Query(ge=1, le=MAX_SEARCH)] = 10,
        epoch: EpochQ = None,
    ) -> JSON:
        view = store.get(epoch)
        return JSON({"epoch": view.result.epoch, "items": store.search(prefix, limit, view.result.vertices)})

    @app.get(
        "/v1/stream",
        dependencies=reads,
        responses={200: {"content": {"text/event-stream": {}}, "description": "one `data:` event per sealed epoch: the epoch object"}, **_errors(503, *read_errors)},
        response_class=StreamingResponse,
        summary="server-sent events, one per sealed epoch",
    )
    async def stream(request: Request) -> StreamingResponse:
        if auth.protect_reads or auth.valid(request.headers.get("authorization")):
            standing = AUTHENTICATED
        elif request.headers.get("sec-fetch-site") == "same-origin":
            # Set by the browser (a page cannot forge it): the dashboard's own EventSource. Any other client
            # can claim it, which is why the last slots of all are for authenticated clients only.
            standing = SAME_ORIGIN
        else:
            standing = ANONYMOUS
        q = broadcaster.subscribe(standing)
        if q is None:
            raise Unavailable(
                f"the {broadcaster.limit(standing)} stream slots open to this client are taken; poll /v1/epochs/latest instead",
                code="too_many_streams", headers={"Retry-After": "5"},
            )
        try:
            v = store.get()
            first = sse_frame(v.result.epoch, v.info_json)
        except NotFound:
            first = None
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(broadcaster.stream(q, first), media_type="text/event-stream", headers=headers)

    @app.get("/v1/status", dependencies=reads, responses=_errors(*read_errors), summary="the pipeline's counters and positions")
    async def pipeline_status() -> JSON:
        body = {"epoch": store.latest_epoch, "retained": store.retained(), "time": time.time(), "stream_clients": broadcaster.clients,
                "graph_missed_epochs": store.graph.missed_epochs}
        if status is not None:
            body.update(status())
        return JSON(body)

    @app.get(
        "/metrics",
        dependencies=reads,
        response_class=Response,
        responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}, **_errors(*read_errors)},
    )
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    # ---- writes ----------------------------------------------------------------------------
    def accept(body: bytes) -> dict:
        good, bad = check_batch(parse_batch(body), event_transform)
        if good:
            try:
                events_sink(good)  # type: ignore[misc]
            except Exception as exc:  # noqa: BLE001 - the sink is down: nothing was accepted, the client may retry
                log.exception("events sink failed")
                raise Unavailable(f"the events sink failed: {exc}", code="sink_unavailable") from None
        metrics.events.labels("accepted").inc(len(good))
        metrics.events.labels("rejected").inc(len(bad))
        return {"accepted": len(good), "rejected": len(bad), "errors": [{"index": i, "reason": r} for i, r in bad[:MAX_REASONS]]}

    async def read_body(request: Request) -> bytes:
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY_BYTES:
                raise PayloadTooLarge(f"the body is over {MAX_BODY_BYTES} bytes")
        return bytes(body)

    @app.post(
        "/v1/events",
        status_code=202,
        response_model=Accepted,
        dependencies=[Depends(require_write)],
        responses=_errors(400, 401, 403, 408, 413, 503),
        summary="append events to the stream",
        openapi_extra={
            "requestBody": {
                "required": True,
                "description": (
                    f"a JSON array of events (at most {MAX_EVENTS}, {MAX_BODY_BYTES} bytes and {MAX_JSON_VALUES} JSON values: "
                    f"413 past the bytes or values), each one record for the pipeline's transform"
                ),
                # Items are checked one by one: a bad one is counted in the 202's `rejected`, never fails the batch.
                "content": {"application/json": {"schema": {"type": "array", "maxItems": MAX_EVENTS, "items": {"description": "an event object"}}}},
            }
        },
    )
    async def post_events(request: Request) -> JSON:
        if events_sink is None:
            raise Unavailable("this server has no events sink", code="no_events_sink")
        length = request.headers.get("content-length")
        if length is not None and not length.isdigit():
            raise ApiError("Content-Length is not a number", code="bad_content_length")
        if length is not None and int(length) > MAX_BODY_BYTES:
            raise PayloadTooLarge(f"the body is over {MAX_BODY_BYTES} bytes")
        # Checked after the token and before the body is read: at most this many bodies are in memory at once.
        if writes["in_flight"] >= writes["max"]:
            writes["refused"] += 1
            raise Unavailable(f"{writes['max']} write requests are being processed; retry shortly", code="writes_busy",
                              headers={"Retry-After": "1"})
        writes["in_flight"] += 1
        try:
            try:
                body = await asyncio.wait_for(read_body(request), BODY_TIMEOUT_S)
            except asyncio.TimeoutError:
                raise RequestTimeout(f"the body did not arrive within {BODY_TIMEOUT_S:g} s", code="body_timeout") from None
            return JSON(await run_in_threadpool(accept, body), status_code=202)
        finally:
            writes["in_flight"] -= 1

    return app

