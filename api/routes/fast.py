"""The hottest reads answered before FastAPI's routing and per-parameter validation, which are most of a
small read's cost in the server: ``GET /v1/rank/top`` and ``GET /v1/epochs/latest``, the two a dashboard
polls (:class:`FastReads`), and a plain ``GET /v1/vertices/{id}``
(:class:`~pulsegraph.api.routes.vertices.VertexPaths`, which reads the id from the raw path).

Only requests with plain, valid parameters are answered here, with the bytes the route gives; anything
else (an unknown, repeated or invalid parameter, an epoch or algorithm that is not there) goes on to the
route, which owns every error. Tests check both give the same bytes. They are installed only where reads
are open to all: they answer before the read check.
"""

from __future__ import annotations

from collections.abc import Callable

from pulsegraph.api.metrics import TimedRoute
from pulsegraph.api.ranking import TOP_CACHE

_HEADERS = [(b"content-type", b"application/json")]


async def send_json(scope, send, route: TimedRoute, body: bytes) -> None:
    """Answer 200 with ``body`` (JSON), timed as ``route`` by the timing middleware outside."""
    scope["route"] = route
    await send({"type": "http.response.start", "status": 200,
                "headers": _HEADERS + [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def top_params(query: bytes) -> tuple[int, str, int | None] | None:
    """``k``, ``algo`` and ``epoch`` of a plain top query, with the route's defaults; None for anything else."""
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


class FastReads:
    """``top(k, algo, epoch)`` answers ``GET /v1/rank/top``, ``latest()`` ``GET /v1/epochs/latest`` (no
    parameter): the route's bytes, or None where the route answers (an error)."""

    TOP, LATEST = TimedRoute("/v1/rank/top"), TimedRoute("/v1/epochs/latest")

    def __init__(self, app, top: Callable[[int, str, int | None], bytes | None], latest: Callable[[], bytes | None]) -> None:
        self.app = app
        self.top = top
        self.latest = latest

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "GET":
            path, body = scope["path"], None
            if path == self.TOP.path:
                params = top_params(scope["query_string"])
                body = self.top(*params) if params is not None else None
            elif path == self.LATEST.path and not scope["query_string"]:
                body = self.latest()
            if body is not None:
                await send_json(scope, send, self.TOP if path == self.TOP.path else self.LATEST, body)
                return
        await self.app(scope, receive, send)
