"""The FastAPI application: routes over the in-memory :class:`~api.store.ResultStore`.

Owns the HTTP contract and the one error model ``{"error": {"code", "message"}}``,
which errors take only here, at the edge. It never calls an actor per request;
the pipeline's status comes from a callable the wiring passes in.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Callable

import orjson
from fastapi import FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.exceptions import ApiError, NotFound
from api.models import EpochInfo, EpochList, Error, Health, TopRanking, Vertex
from api.store import TOP_CACHE, ResultStore

ALGORITHMS = ("pagerank",)
# A page of epochs; the store retains more, but a dashboard never needs them at once.
MAX_EPOCH_PAGE = 1000
MAX_ID_BYTES = 256


class JSON(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)


def _error(status: int, code: str, message: str) -> JSON:
    return JSON({"error": {"code": code, "message": message}}, status_code=status)


EpochQ = Annotated[int | None, Query(ge=1, description="a retained epoch; omitted: the newest")]
ERRORS: dict = {404: {"model": Error}, 422: {"model": Error}}


def create_app(store: ResultStore, status: Callable[[], dict] | None = None) -> FastAPI:
    app = FastAPI(title="pulsegraph", version="0.1.0", default_response_class=JSON)
    app.state.store = store

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSON:
        return _error(exc.status, exc.code, str(exc))

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
        return _error(exc.status_code, code, str(exc.detail))

    def check_algo(algo: str) -> str:
        if algo not in ALGORITHMS:
            raise ApiError(f"unknown algo {algo!r}; known: {', '.join(ALGORITHMS)}", code="unknown_algo")
        return algo

    @app.get("/health", response_model=Health)
    def health() -> JSON:
        body: dict = {"status": "ok", "epoch": store.latest_epoch}
        if status is not None:
            body.update(status())
        return JSON(body)

    @app.get("/v1/epochs/latest", response_model=EpochInfo, responses=ERRORS)
    def latest_epoch() -> JSON:
        return JSON(store.get().info)

    @app.get("/v1/epochs", response_model=EpochList, responses=ERRORS)
    def epochs(limit: Annotated[int, Query(ge=1, le=MAX_EPOCH_PAGE)] = 20) -> JSON:
        return JSON({"items": [v.info for v in store.recent(limit)]})

    @app.get("/v1/rank/top", response_model=TopRanking, responses=ERRORS)
    def top(
        k: Annotated[int, Query(ge=1, le=TOP_CACHE)] = 10,
        algo: str = "pagerank",
        epoch: EpochQ = None,
    ) -> JSON:
        algo = check_algo(algo)
        view = store.get(epoch)
        ids = view.top[algo][:k]
        scores = view.result.scores[algo]
        names = store.names
        items = [{"rank": i + 1, "vertex": names[v], "score": float(scores[v])} for i, v in enumerate(ids)]
        return JSON({"epoch": view.result.epoch, "algo": algo, "items": items})

    @app.get("/v1/vertices/{vertex_id}", response_model=Vertex, responses=ERRORS)
    def vertex(
        vertex_id: Annotated[str, Path(min_length=1, max_length=MAX_ID_BYTES)],
        epoch: EpochQ = None,
    ) -> JSON:
        view = store.get(epoch)
        i = store.vertex_id(vertex_id)
        r = view.result
        if i >= r.vertices:
            raise NotFound(f"vertex {vertex_id!r} is not in epoch {r.epoch}", code="vertex_not_found")
        return JSON(
            {
                "vertex": vertex_id,
                "epoch": r.epoch,
                "out_degree": int(r.out_degree[i]),
                "in_degree": int(r.in_degree[i]),
                "scores": {algo: float(s[i]) for algo, s in r.scores.items()},
            }
        )

    @app.get("/v1/status")
    def pipeline_status() -> JSON:
        body = {"epoch": store.latest_epoch, "retained": len(store.recent(10**9)), "time": time.time()}
        if status is not None:
            body.update(status())
        return JSON(body)

    return app
