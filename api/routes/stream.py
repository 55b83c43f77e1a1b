"""``/v1/stream``: server-sent events, one per sealed epoch, with slots kept for the page and for tokens."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from pulsegraph.api.deps import Context, Ctx, errors
from pulsegraph.api.exceptions import NotFound, Unavailable
from pulsegraph.api.stream import ANONYMOUS, AUTHENTICATED, SAME_ORIGIN, sse_frame

router = APIRouter()


def standing_of(ctx: Context, request: Request) -> int:
    """Which of the kept stream slots a client may take (see pulsegraph.api.stream)."""
    auth = ctx.auth
    if auth.protect_reads or auth.valid(request.headers.get("authorization")):
        return AUTHENTICATED
    if request.headers.get("sec-fetch-site") == "same-origin":
        # Set by the browser (a page cannot forge it): the dashboard's own EventSource. Any other client
        # can claim it, which is why the last slots of all are for authenticated clients only.
        return SAME_ORIGIN
    return ANONYMOUS


def slot(ctx: Context, request: Request):
    """A stream slot (a queue the broadcaster wakes) for this client, or 503 ``too_many_streams``."""
    broadcaster = ctx.broadcaster
    standing = standing_of(ctx, request)
    q = broadcaster.subscribe(standing)
    if q is None:
        raise Unavailable(
            f"the {broadcaster.limit(standing)} stream slots open to this client are taken; poll /v1/epochs/latest instead",
            code="too_many_streams", headers={"Retry-After": "5"},
        )
    return q


@router.get(
    "/v1/stream",
    responses={200: {"content": {"text/event-stream": {}}, "description": "one `data:` event per sealed epoch: the epoch object"}, **errors(503)},
    response_class=StreamingResponse,
    summary="server-sent events, one per sealed epoch",
)
async def stream(ctx: Ctx, request: Request) -> StreamingResponse:
    q = slot(ctx, request)
    try:
        v = ctx.store.get()
        first = sse_frame(v.result.epoch, v.info_json)
    except NotFound:
        first = None
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(ctx.broadcaster.stream(q, first), media_type="text/event-stream", headers=headers)
