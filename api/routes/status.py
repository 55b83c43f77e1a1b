"""``/v1/status`` (the pipeline's counters and positions) and ``/metrics`` (Prometheus text)."""

from __future__ import annotations

import time

from fastapi import APIRouter
from fastapi.responses import Response

from pulsegraph.api.deps import JSON, Ctx, errors

router = APIRouter()


@router.get("/v1/status", responses=errors(), summary="the pipeline's counters and positions")
async def pipeline_status(ctx: Ctx) -> JSON:
    store = ctx.store
    body = {"epoch": store.latest_epoch, "retained": store.retained(), "time": time.time(), "stream_clients": ctx.broadcaster.clients,
            "graph_missed_epochs": store.graph.missed_epochs}
    if ctx.status is not None:
        body.update(ctx.status())
    return JSON(body)


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}, **errors()},
)
async def prometheus(ctx: Ctx) -> Response:
    return Response(ctx.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
