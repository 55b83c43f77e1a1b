"""``/v1/components``: the largest weakly connected components of an epoch."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from pulsegraph.api import queries
from pulsegraph.api.deps import JSON, EpochQ, Store, errors
from pulsegraph.api.models import ComponentList

# A list computed per epoch: bounded by what the epoch carries.
MAX_COMPONENTS = 1000

router = APIRouter()


@router.get(
    "/v1/components", response_model=ComponentList, responses=errors(404),
    summary="the largest weakly connected components",
)
async def components(store: Store, k: Annotated[int, Query(ge=1, le=MAX_COMPONENTS)] = 10, epoch: EpochQ = None) -> JSON:
    return JSON(queries.components(store, k, epoch))
