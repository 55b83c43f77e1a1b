"""``/v1/alerts``: standing alert rules (the write token changes them) and the alerts the retained epochs raised.

The arithmetic and the promise (alerts are a pure function of the retained epochs and the rules) live in
:mod:`pulsegraph.api.alerts`; these routes only read and change the book. The alert stream shares the slots of
``/v1/stream`` (``--max-streams``) and is woken by the same broadcaster; what it sends is read from the
book, so a client that reads slowly is sent every epoch's alerts late, never a subset of them.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, AsyncIterator

from fastapi import APIRouter, Body, Depends, Header, Path, Query, Request
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from pulsegraph.api.alerts import MAX_PAGE, MAX_RULES, AlertBook
from pulsegraph.api.deps import JSON, Context, Ctx, errors, require_write
from pulsegraph.api.models import AlertPage, AlertRule, AlertRules, RuleSpec
from pulsegraph.api.routes.stream import slot
from pulsegraph.api.stream import HEARTBEAT_S, Broadcaster, is_end, sse_frame

router = APIRouter()  # reads: open, or behind the token with --protect-reads
writes = APIRouter()  # changes: always the write token

RuleId = Annotated[int, Path(ge=1, le=2**53, description="a rule's id")]
SinceQ = Annotated[int | None, Query(ge=0, le=2**53, description="only the alerts of epochs after this one")]


def book(ctx: Context) -> AlertBook:
    assert ctx.alerts is not None  # create_app always makes one
    return ctx.alerts


@router.get("/v1/alerts/rules", response_model=AlertRules, responses=errors(), summary="the alert rules, oldest first")
def list_rules(ctx: Ctx) -> JSON:
    return JSON({"max": MAX_RULES, "items": book(ctx).rules()})


@router.get("/v1/alerts/rules/{rule_id}", response_model=AlertRule, responses=errors(404), summary="one alert rule")
def get_rule(ctx: Ctx, rule_id: RuleId) -> JSON:
    return JSON(book(ctx).rule(rule_id))


@writes.post(
    "/v1/alerts/rules", status_code=201, response_model=AlertRule, dependencies=[Depends(require_write)],
    responses=errors(400, 401, 403, 409, 503),
    summary=f"add an alert rule (at most {MAX_RULES}: 409 too_many_rules past them); it applies from the next epoch on",
)
def create_rule(ctx: Ctx, rule: Annotated[RuleSpec, Body()]) -> JSON:
    return JSON(book(ctx).add(rule), status_code=201)


@writes.delete(
    "/v1/alerts/rules/{rule_id}", status_code=204, response_class=Response, dependencies=[Depends(require_write)],
    responses=errors(401, 403, 404, 503), summary="remove an alert rule, and its alerts",
)
def delete_rule(ctx: Ctx, rule_id: RuleId) -> Response:
    book(ctx).delete(rule_id)
    return Response(status_code=204)


@router.get(
    "/v1/alerts", response_model=AlertPage, responses=errors(),
    summary="the alerts of the retained epochs: whole epochs, oldest first; the newest without `since`",
)
def alerts(
    ctx: Ctx,
    since: SinceQ = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="alerts per page (one epoch's are never split)")] = 100,
    rule: Annotated[int | None, Query(ge=1, le=2**53, description="only this rule's alerts")] = None,
) -> JSON:
    return JSON(book(ctx).page(since, limit, rule))


async def _frames(alerts: AlertBook, broadcaster: Broadcaster, q: asyncio.Queue, cursor: int) -> AsyncIterator[bytes]:
    try:
        yield b"retry: 2000\n\n"
        while True:
            # Read from the book off the event loop (the first call after a start may evaluate the history).
            frames, cursor = await run_in_threadpool(alerts.frames_after, cursor)
            for epoch, data in frames:
                yield sse_frame(epoch, data)
            try:
                frame = await asyncio.wait_for(q.get(), HEARTBEAT_S)
            except asyncio.TimeoutError:
                yield b": keep-alive\n\n"
                continue
            if is_end(frame):
                return
    finally:
        broadcaster.unsubscribe(q)


@router.get(
    "/v1/alerts/stream",
    responses={200: {"content": {"text/event-stream": {}}, "description": "one `data:` event per ranked epoch with alerts: the alert record"}, **errors(503)},
    response_class=StreamingResponse,
    summary="server-sent events, one per ranked epoch with alerts (resumes after Last-Event-ID or `since`)",
)
async def alert_stream(
    ctx: Ctx, request: Request, since: SinceQ = None,
    last_event_id: Annotated[str | None, Header(max_length=20, description="the id of the last event seen: the stream resumes after it")] = None,
) -> StreamingResponse:
    alerts = book(ctx)
    cursor = since
    if last_event_id is not None and last_event_id.strip().isdigit():
        cursor = int(last_event_id.strip())
    if cursor is None:
        cursor = ctx.store.latest_epoch  # from now on
    q = slot(ctx, request)
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(_frames(alerts, ctx.broadcaster, q, cursor), media_type="text/event-stream", headers=headers)
