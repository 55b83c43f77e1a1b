"""What every route shares: the app's context (store, auth, bounds), the auth checks, the response class, and
the query and path parameters several routes take, as ``Annotated`` dependencies.

Owns the bearer-token checks (constant-time compare; 401 without a token, 403 with a wrong one; writes off
without a configured token unless anonymous writes were asked for) and the one JSON response class. It
holds no route: the routes live in ``api/routes/``, the arithmetic in ``api/queries.py``.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

import orjson
from fastapi import Depends, Path, Query, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from pulsegraph.api.alerts import AlertBook
from pulsegraph.api.edge import Edge, EdgeLimits
from pulsegraph.api.exceptions import Forbidden, Unauthorized
from pulsegraph.api.metrics import Metrics
from pulsegraph.api.models import ALGORITHMS, Algorithm, Error
from pulsegraph.api.paths import DEFAULT_PATH_BFS_BUDGET
from pulsegraph.api.store import ResultStore
from pulsegraph.api.stream import Broadcaster

MAX_ID_BYTES = 256


class JSON(JSONResponse):
    """orjson, and bytes pass through as they are (pre-encoded answers). A JSONResponse, so OpenAPI shows the models."""

    def render(self, content: Any) -> bytes:
        if isinstance(content, bytes):
            return content
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)


def error(status: int, code: str, message: str, headers: dict | None = None) -> JSON:
    return JSON({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


def errors(*codes: int) -> dict:
    """The documented error answers of a route: these statuses and 422, all the error model."""
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


@dataclass
class Context:
    """Everything the routes of one app read: built once by :func:`pulsegraph.api.app.create_app`, kept in ``app.state.ctx``."""

    store: ResultStore
    auth: Auth
    limits: EdgeLimits
    edge: Edge
    broadcaster: Broadcaster
    metrics: Metrics
    status: Callable[[], dict] | None = None
    events_sink: Callable[[list[bytes]], None] | None = None
    event_transform: Callable[[bytes], Any] | None = None
    path_bfs_budget: int = DEFAULT_PATH_BFS_BUDGET
    writes: dict = field(default_factory=dict)  # in_flight, max, refused
    alerts: AlertBook | None = None  # the rules and the retained epochs' alerts (create_app always sets one)


# The dependencies are coroutines though they never wait: FastAPI runs a plain ``def`` one on a worker
# thread, a hop per dependency per request (a read paid three, most of its time under load).
async def context(request: Request) -> Context:
    return request.app.state.ctx


async def store_of(request: Request) -> ResultStore:
    return request.app.state.ctx.store


Ctx = Annotated[Context, Depends(context)]
Store = Annotated[ResultStore, Depends(store_of)]

bearer = HTTPBearer(auto_error=False, description="PULSEGRAPH_API_TOKEN")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


async def require_read(ctx: Ctx, creds: Credentials) -> None:
    ctx.auth.read(creds)


async def require_write(ctx: Ctx, creds: Credentials) -> None:
    ctx.auth.write(creds)


EpochQ = Annotated[int | None, Query(ge=1, le=2**53, description="a retained epoch; omitted: the newest")]
# The algorithms the compute stage ranks by: the schema names them, so a value it allows is never refused
# as unknown (one an epoch lacks is a 404 algo_not_in_epoch).
AlgoQ = Annotated[Algorithm, Query(description="the ranking: " + ", ".join(ALGORITHMS))]
VertexP = Annotated[str, Path(
    min_length=1, max_length=MAX_ID_BYTES,
    description="a vertex id, percent-encoded as one path segment (`/` as `%2F`: ids may be URLs)",
)]
