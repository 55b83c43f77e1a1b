"""``/v1/vertices/{id}``, its history and its neighbors; and how an id rides in the path (:class:`VertexPaths`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal
from urllib.parse import quote, unquote, unquote_to_bytes

from fastapi import APIRouter, Query
from starlette.convertors import Convertor, register_url_convertor

from pulsegraph.api import queries
from pulsegraph.api.deps import JSON, AlgoQ, EpochQ, Store, VertexP, errors
from pulsegraph.api.metrics import TimedRoute
from pulsegraph.api.models import History, Neighbors, Vertex
from pulsegraph.api.routes.fast import EPOCH, plain_params, send_json

# Per-request bounds: each item is answered from memory in well under a millisecond.
MAX_NEIGHBORS = 1000
MAX_HISTORY = 100_000


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

    With ``answer`` (reads open to all), a plain ``GET /v1/vertices/{id}`` (no parameter but a valid
    ``epoch``) is answered here, before FastAPI (:mod:`pulsegraph.api.routes.fast`): ``answer(id, epoch)``
    gives the route's bytes, or None where the route answers an error and is handed the request."""

    PREFIX = b"/v1/vertices/"
    ROUTE = TimedRoute("/v1/vertices/{vertex_id}")

    def __init__(self, app, answer: Callable[[str, int | None], bytes | None] | None = None) -> None:
        self.app = app
        self.answer = answer

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith("/v1/vertices/"):
            raw = scope.get("raw_path") or quote(scope["path"]).encode("ascii")
            if raw.startswith(self.PREFIX):
                segment, slash, rest = raw[len(self.PREFIX):].partition(b"/")
                try:
                    vertex = unquote_to_bytes(segment).decode("utf-8")
                except UnicodeDecodeError:
                    vertex = "\ufffd"  # no id that ingest accepts decodes so: the route answers 404
                answer = self.answer if not slash and scope["method"] == "GET" else None
                params = plain_params(scope["query_string"], *EPOCH) if answer is not None else None
                if answer is not None and params is not None:
                    body = answer(vertex, params["epoch"])
                    if body is not None:
                        await send_json(scope, send, self.ROUTE, body)
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
    type: Annotated[str | None, Query(min_length=1, max_length=32, description="only edges of this type")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_NEIGHBORS)] = 20,
    epoch: EpochQ = None,
) -> JSON:
    return JSON(queries.neighbors(store, vertex_id, direction, type, limit, epoch))
