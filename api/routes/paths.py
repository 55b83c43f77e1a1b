"""``/v1/paths``: approximate shortest paths by landmarks, confirmed by a budgeted BFS."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Query

from pulsegraph.api import queries
from pulsegraph.api.deps import JSON, MAX_ID_BYTES, Ctx, EpochQ, errors
from pulsegraph.api.exceptions import Unavailable
from pulsegraph.api.models import PathAnswer
from pulsegraph.api.paths import find_path
from pulsegraph.compute.apps.landmarks import LandmarksResult

log = logging.getLogger(__name__)

router = APIRouter()


@router.get(
    "/v1/paths", response_model=PathAnswer, responses=errors(404, 503),
    summary="approximate shortest path by landmarks, confirmed by a budgeted bidirectional BFS",
)
def paths(
    ctx: Ctx,
    src: Annotated[str, Query(min_length=1, max_length=MAX_ID_BYTES)],
    dst: Annotated[str, Query(min_length=1, max_length=MAX_ID_BYTES)],
    epoch: EpochQ = None,
) -> JSON:
    store = ctx.store
    view = store.get(epoch)
    a, b = queries.vertex_in(store, view, src), queries.vertex_in(store, view, dst)
    queries.apps_of(view, LandmarksResult)
    try:
        return JSON(find_path(store, view, a, b, ctx.path_bfs_budget))
    except ValueError as exc:  # the epoch's distances and graph disagree: a bug, said plainly, not a 500
        log.error("path %s -> %s at epoch %d: %s", src, dst, view.result.epoch, exc)
        raise Unavailable(f"the landmark distances of epoch {view.result.epoch} are inconsistent: {exc}", code="paths_unavailable") from None
