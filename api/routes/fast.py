"""The hottest reads answered before FastAPI's routing and per-parameter validation, which are most of a
small read's cost in the server: ``GET /v1/rank/top``, ``GET /v1/epochs/latest`` and ``GET /v1/topics``
(:class:`FastReads`), and a plain ``GET /v1/vertices/{id}`` and ``GET /v1/vertices/{id}/neighbors``
(:class:`~pulsegraph.api.routes.vertices.VertexPaths`, which reads the id from the raw path).

Only requests with plain, valid parameters are answered here, with the bytes the route gives; anything
else (an unknown, repeated or invalid parameter, an epoch or algorithm that is not there) goes on to the
route, which owns every error. Tests check both give the same bytes. They are installed only where reads
are open to all: they answer before the read check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pulsegraph.api.metrics import TimedRoute
from pulsegraph.api.ranking import TOP_CACHE
from pulsegraph.api.routes.topics import MAX_TOPICS, SORTS

# The neighbors route's bounds (pulsegraph.api.routes.vertices imports them from here: it imports this module).
MAX_NEIGHBORS = 1000
MAX_TYPE_NAME = 32

_HEADERS = [(b"content-type", b"application/json")]


async def send_json(scope, send, route: TimedRoute, body: bytes) -> None:
    """Answer 200 with ``body`` (JSON), timed as ``route`` by the timing middleware outside."""
    scope["route"] = route
    await send({"type": "http.response.start", "status": 200,
                "headers": _HEADERS + [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _count(most: int) -> Callable[[bytes], int | None]:
    return lambda v: int(v) if v.isdigit() and len(v) <= len(str(most)) and 1 <= int(v) <= most else None


def _epoch(v: bytes) -> int | None:
    return int(v) if v.isdigit() and len(v) <= 15 and int(v) >= 1 else None


def _name(choices: tuple[str, ...] | None = None, longest: int = 64) -> Callable[[bytes], str | None]:
    def parse(v: bytes) -> str | None:
        name = v.decode("ascii") if len(v) <= longest else None
        return name if name is not None and (choices is None or name in choices) else None
    return parse


def plain_params(query: bytes, defaults: dict[str, Any], parsers: dict[bytes, Callable[[bytes], Any]]) -> dict[str, Any] | None:
    """``defaults`` with the query's parameters: each once, one of ``parsers``, its value alphanumeric and
    valid by its parser; None for anything else (the route then validates it, and answers its error)."""
    got, seen = dict(defaults), set()
    for part in query.split(b"&") if query else ():
        key, _, value = part.partition(b"=")
        parse = parsers.get(key)
        if parse is None or key in seen or not value.isalnum():
            return None
        seen.add(key)
        parsed = got[key.decode()] = parse(value)
        if parsed is None:
            return None
    return got


EPOCH = ({"epoch": None}, {b"epoch": _epoch})
TOP = ({"k": 10, "algo": "pagerank", "epoch": None}, {b"k": _count(TOP_CACHE), b"algo": _name(), b"epoch": _epoch})
TOPICS = ({"sort": "controversy", "k": 20, "epoch": None}, {b"sort": _name(SORTS), b"k": _count(MAX_TOPICS), b"epoch": _epoch})
NEIGHBORS = (
    {"direction": "out", "type": None, "limit": 20, "epoch": None},
    {b"direction": _name(("out", "in")), b"type": _name(longest=MAX_TYPE_NAME), b"limit": _count(MAX_NEIGHBORS), b"epoch": _epoch},
)


class FastReads:
    """``answers``: by path, the query's parameters (``defaults`` and ``parsers`` for :func:`plain_params`)
    and ``answer(**params)``, the route's bytes or None where the route answers (an error)."""

    def __init__(self, app, answers: dict[str, tuple[tuple[dict, dict], Callable[..., bytes | None]]]) -> None:
        self.app = app
        self.answers = {path: (TimedRoute(path), params, answer) for path, (params, answer) in answers.items()}

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "GET" and scope["path"] in self.answers:
            route, (defaults, parsers), answer = self.answers[scope["path"]]
            params = plain_params(scope["query_string"], defaults, parsers)
            body = answer(**params) if params is not None else None
            if body is not None:
                await send_json(scope, send, route, body)
                return
        await self.app(scope, receive, send)
