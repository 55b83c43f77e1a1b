"""``/v1/epochs``: the retained ranked epochs' facts, pre-encoded once per epoch."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from pulsegraph.api.deps import JSON, Store, errors
from pulsegraph.api.models import EpochInfo, EpochList

# A page of epochs; the store retains more, but a dashboard never needs them at once.
MAX_EPOCH_PAGE = 1000

router = APIRouter()


# Before /v1/epochs/{epoch}, which would take "latest" for an epoch number.
@router.get("/v1/epochs/latest", response_model=EpochInfo, responses=errors(404))
async def latest_epoch(store: Store) -> JSON:
    return JSON(store.get().info_json)


@router.get("/v1/epochs/{epoch}", response_model=EpochInfo, responses=errors(404))
async def one_epoch(store: Store, epoch: Annotated[int, Path(ge=1, le=2**53)]) -> JSON:
    return JSON(store.get(epoch).info_json)


@router.get("/v1/epochs", response_model=EpochList, responses=errors())
async def epochs(store: Store, limit: Annotated[int, Query(ge=1, le=MAX_EPOCH_PAGE)] = 20) -> JSON:
    return JSON(b'{"items":[' + b",".join(v.info_json for v in store.recent(limit)) + b"]}")
