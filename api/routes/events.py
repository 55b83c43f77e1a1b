"""``POST /v1/events``: a batch of events appended to the stream, each checked with the pipeline's transform.

Bounded before anything large is held: the token first, then the write slots (at most
``max_concurrent_writes`` bodies in memory at once), then the body's bytes and its deadline, then its
JSON values (:mod:`pulsegraph.api.batch`). The events sink (the embedded log's append, or a Kafka producer's send)
is the one seam of the write path.
"""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from pulsegraph.api.batch import (
    MAX_BODY_BYTES,
    MAX_EVENTS,
    MAX_JSON_VALUES,
    check_batch,
    parse_batch,
)
from pulsegraph.api.deps import JSON, Context, Ctx, errors, require_write
from pulsegraph.api.exceptions import (
    ApiError,
    PayloadTooLarge,
    RequestTimeout,
    Unavailable,
)
from pulsegraph.api.models import Accepted

log = logging.getLogger(__name__)

# How many rejected events a 202 names; the count covers all of them.
MAX_REASONS = 100
# A POST's whole body must arrive within this (5 MB in 30 s is 1.4 Mbit/s): a client trickling its body
# would otherwise hold one of the few write slots for as long as it likes.
BODY_TIMEOUT_S = 30.0

router = APIRouter()


def accept(ctx: Context, body: bytes) -> dict:
    good, bad = check_batch(parse_batch(body), ctx.event_transform)
    if good:
        try:
            ctx.events_sink(good)  # type: ignore[misc]
        except Exception as exc:  # noqa: BLE001 - the sink is down: nothing was accepted, the client may retry
            log.exception("events sink failed")
            raise Unavailable(f"the events sink failed: {exc}", code="sink_unavailable") from None
    ctx.metrics.events.labels("accepted").inc(len(good))
    ctx.metrics.events.labels("rejected").inc(len(bad))
    return {"accepted": len(good), "rejected": len(bad), "errors": [{"index": i, "reason": r} for i, r in bad[:MAX_REASONS]]}


async def read_body(request: Request) -> bytes:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise PayloadTooLarge(f"the body is over {MAX_BODY_BYTES} bytes")
    return bytes(body)


@router.post(
    "/v1/events",
    status_code=202,
    response_model=Accepted,
    dependencies=[Depends(require_write)],
    responses=errors(400, 401, 403, 408, 413, 503),
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
async def post_events(ctx: Ctx, request: Request) -> JSON:
    if ctx.events_sink is None:
        raise Unavailable("this server has no events sink", code="no_events_sink")
    length = request.headers.get("content-length")
    if length is not None and not length.isdigit():
        raise ApiError("Content-Length is not a number", code="bad_content_length")
    if length is not None and int(length) > MAX_BODY_BYTES:
        raise PayloadTooLarge(f"the body is over {MAX_BODY_BYTES} bytes")
    writes = ctx.writes
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
        return JSON(await run_in_threadpool(accept, ctx, body), status_code=202)
    finally:
        writes["in_flight"] -= 1
