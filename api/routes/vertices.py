"""``/v1/vertices/{id}``, its history and its neighbors; and how an id rides in the path (:class:`VertexPaths`)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Literal
from urllib.parse import quote, unquote, unquote_to_bytes

from fastapi import APIRouter, Query
from starlette.convertors import Convertor, register_url_convertor

from pulsegraph.api import queries
from pulsegraph.api.deps import JSON, AlgoQ, EpochQ, Store, VertexP, errors
from pulsegraph.api.metrics import TimedRoute
from pulsegraph.api.models import History, Neighbors, Vertex
from pulsegraph.api.routes.fast import MAX_NEIGHBORS, MAX_TYPE_NAME, plain_params, send_json

# Per-request bounds: each item is answered from memory in well under a millisecond.
MAX_HISTORY = 100_000
# The most edges a vertex may have (the way asked) for its neighbors to be read on the event loop, before
# FastAPI: reading them is O(degree) (~0.5 ms at 12,621 edges here, the busiest user's on the operator's
# growing stream; a thousand answered add ~0.5 ms). A hub's (more) are read by the route on a worker
# thread, so no request holds the loop for long; its kept answers the loop serves.
LOOP_NEIGHBORS = queries.HUB_EDGES


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
    encoded, so the router sees one segment and the convertor hands the route the id.

    With ``answers`` (reads open to all), a plain ``GET /v1/vertices/{id}`` or ``GET
    /v1/vertices/{id}/neighbors`` (plain, valid parameters only) is answered here, before FastAPI
    (:mod:`pulsegraph.api.routes.fast`): ``answers`` holds, by the path after the id (``""``,
    ``"/neighbors"``), the query's parameters (defaults and parsers for
    :func:`~pulsegraph.api.routes.fast.plain_params`) and ``answer(id, **params)``, the route's bytes or None
    where the route answers (an error, or a read it keeps off the event loop) and is handed the request; an
    answer may be a coroutine (one that waits on the loop for the data it reads)."""

    PREFIX = b"/v1/vertices/"

    def __init__(self, app, answers: dict[str, tuple[tuple[dict, dict], Callable[..., bytes | None | Awaitable[bytes | None]]]] | None = None) -> None:
        self.app = app
        self.answers = {
            tail.encode(): (TimedRoute("/v1/vertices/{vertex_id}" + tail), params, answer)
            for tail, (params, answer) in (answers or {}).items()
        }

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith("/v1/vertices/"):
            raw = scope.get("raw_path") or quote(scope["path"]).encode("ascii")
            if raw.startswith(self.PREFIX):
                segment, slash, rest = raw[len(self.PREFIX):].partition(b"/")
                try:
                    vertex = unquote_to_bytes(segment).decode("utf-8")
                except UnicodeDecodeError:
                    vertex = "\ufffd"  # no id that ingest accepts decodes so: the route answers 404
                fast = self.answers.get(slash + rest) if scope["method"] == "GET" else None
                params = plain_params(scope["query_string"], *fast[1]) if fast is not None else None
                if fast is not None and params is not None:
                    body = fast[2](vertex, **params)
                    if inspect.isawaitable(body):
                        body = await body
                    if body is not None:
                        await send_json(scope, send, fast[0], body)
                        return
                tail = unquote((slash + rest).decode("latin-1"))
                # In place: the timing middleware outside reads the route the router puts in this scope.
                scope["path"] = "/v1/vertices/" + quote(vertex, safe="") + tail
        await self.app(scope, receive, send)


router = APIRouter()


@router.get("/v1/vertices/{vertex_id:vertex}", response_model=Vertex, responses=errors(404))
async def vertex(store: Store, vertex_id: VertexP, epoch: EpochQ = None) -> JSON:
    return JSON(queries.vertex(store, vertex_id, epoch))


@router.get(
    "/v1/vertices/{vertex_id:vertex}/history",
    response_model=History,
    responses=errors(404),
    summary="score and rank per retained epoch, oldest first",
)
def history(
    store: Store,
    vertex_id: VertexP,
    algo: AlgoQ = "pagerank",
    limit: Annotated[int, Query(ge=1, le=MAX_HISTORY)] = 120,
) -> JSON:
    return JSON(queries.history(store, vertex_id, algo, limit))


@router.get(
    "/v1/vertices/{vertex_id:vertex}/neighbors",
    response_model=Neighbors,
    responses=errors(404),
    summary="live edges of a vertex, heaviest first",
)
def neighbors(
    store: Store,
    vertex_id: VertexP,
    direction: Literal["out", "in"] = "out",
    type: Annotated[str | None, Query(min_length=1, max_length=MAX_TYPE_NAME, description="only edges of this type")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_NEIGHBORS)] = 20,
    epoch: EpochQ = None,
) -> JSON:
    return JSON(queries.neighbors(store, vertex_id, direction, type, limit, epoch))
