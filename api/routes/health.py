"""``/health``: liveness, what is connected, and the API's own bounds (always open)."""

from __future__ import annotations

from fastapi import APIRouter

from pulsegraph.api.deps import JSON, Context, Ctx
from pulsegraph.api.graphparts import PartitionedGraph
from pulsegraph.api.models import Health

# /health names a bound as saturated from this share of it on: the pushback is near.
SATURATED = 0.9

router = APIRouter()


def edge_stats(ctx: Context) -> dict:
    """The API's own bounds, what is in use and what was refused; `saturated` names those at 90% or more."""
    got: dict = {"connections": ctx.edge.stats(), "streams": ctx.broadcaster.stats(), "writes": dict(ctx.writes)}
    use = {"connections": got["connections"]["open"], "streams": got["streams"]["open"], "writes": ctx.writes["in_flight"]}
    got["saturated"] = [k for k, n in use.items() if n >= SATURATED * got[k]["max"]]
    return got


@router.get("/health", response_model=Health, summary="liveness and what is connected")
async def health(ctx: Ctx) -> JSON:
    body: dict = {"status": "ok", "epoch": ctx.store.latest_epoch, "writes": ctx.auth.writes, "events_sink": ctx.events_sink is not None}
    if ctx.status is not None:
        # "degraded" while the ingest is disconnected, recovering or failed; the API itself still serves.
        body.update(ctx.status())
    graph = ctx.store.graph
    if isinstance(graph, PartitionedGraph):
        body["graph_view"] = {"parts": graph.parts, "epoch": graph.epoch, "lost": graph.lost}
        if graph.lost is not None and body["status"] == "ok":
            body["status"] = "degraded"  # the graph routes answer 503 until new parts are filled
    body["edge"] = edge_stats(ctx)
    if ctx.alerts is not None:
        body["alerts"] = ctx.alerts.stats()
    return JSON(body)
