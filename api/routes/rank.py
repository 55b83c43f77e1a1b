"""Rankings: ``/v1/algorithms``, ``/v1/rank/top`` (and its fast path, :class:`FastTop`), ``/v1/movers``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Query

from pulsegraph.api import queries
from pulsegraph.api.deps import JSON, AlgoQ, EpochQ, Store, errors
from pulsegraph.api.metrics import TimedRoute
from pulsegraph.api.models import Algorithms, Movers, TopRanking
from pulsegraph.api.ranking import TOP_CACHE

# Per-request bound of movers: answered from memory in well under a millisecond per item.
MAX_MOVERS = 100

router = APIRouter()


@router.get("/v1/algorithms", response_model=Algorithms, responses=errors())
async def algorithms(store: Store) -> JSON:
    return JSON({"items": list(store.algorithms)})


@router.get("/v1/rank/top", response_model=TopRanking, responses=errors(404))
async def top(
    store: Store,
    k: Annotated[int, Query(ge=1, le=TOP_CACHE)] = 10,
    algo: AlgoQ = "pagerank",
    epoch: EpochQ = None,
) -> JSON:
    return JSON(queries.top_body(store, k, algo, epoch))


@router.get(
    "/v1/movers",
    response_model=Movers,
    responses=errors(404),
    summary="vertices whose rank rose and fell most between two retained epochs (in either order; the same epoch twice: none)",
)
def movers(
    store: Store,
    algo: AlgoQ = "pagerank",
    from_: Annotated[int | None, Query(alias="from", ge=1, le=2**53, description="default: the ranked epoch before `to`; any retained epoch, before or after `to`")] = None,
    to: Annotated[int | None, Query(ge=1, le=2**53, description="default: the newest")] = None,
    k: Annotated[int, Query(ge=1, le=MAX_MOVERS)] = 10,
) -> JSON:
    return JSON(queries.movers(store, algo, from_, to, k))


class FastTop:
    """``GET /v1/rank/top`` with plain, valid parameters, answered before FastAPI's routing and per-parameter
    validation, which are about half of the route's cost in the server (the hottest read: dashboards poll it).

    Anything else (an unknown, repeated or invalid parameter, an epoch or algorithm that is not there) falls
    through to the route itself, which owns every error; a test checks both give the same bytes.
    """

    PATH = "/v1/rank/top"
    _HEADERS = [(b"content-type", b"application/json")]

    def __init__(self, app, answer: Callable[[int, str, int | None], bytes | None]) -> None:
        self.app = app
        self.answer = answer
        self.route = TimedRoute(self.PATH)

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
