"""``/v1/trends`` (hashtags whose usage rank moved most) and ``/v1/trends/usage`` (one hashtag over time)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from pulsegraph.api import queries
from pulsegraph.api.deps import JSON, MAX_ID_BYTES, Store, errors
from pulsegraph.api.models import Trends, Usage

MAX_TRENDS = 100
MAX_HISTORY = 100_000

router = APIRouter()


@router.get(
    "/v1/trends", response_model=Trends, responses=errors(404),
    summary="hashtags whose usage rank rose and fell most between two retained epochs (in either order; the same epoch twice: none)",
)
def trends(
    store: Store,
    from_: Annotated[int | None, Query(alias="from", ge=1, le=2**53, description="default: the ranked epoch before `to`; any retained epoch, before or after `to`")] = None,
    to: Annotated[int | None, Query(ge=1, le=2**53, description="default: the newest")] = None,
    k: Annotated[int, Query(ge=1, le=MAX_TRENDS)] = 10,
) -> JSON:
    return JSON(queries.trends(store, from_, to, k))


@router.get(
    "/v1/trends/usage", response_model=Usage, responses=errors(404),
    summary="a hashtag's usage per retained epoch, oldest first",
)
def trend_usage(
    store: Store,
    tag: Annotated[str, Query(min_length=1, max_length=MAX_ID_BYTES, description="the hashtag vertex, e.g. #python")],
    limit: Annotated[int, Query(ge=1, le=MAX_HISTORY)] = 120,
) -> JSON:
    return JSON(queries.usage(store, tag, limit))
