"""``/v1/search``: vertex ids by prefix, in name order."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api.deps import JSON, MAX_ID_BYTES, EpochQ, Store, errors
from api.models import SearchResult

MAX_SEARCH = 100

router = APIRouter()


@router.get("/v1/search", response_model=SearchResult, responses=errors(404))
async def search(
    store: Store,
    prefix: Annotated[str, Query(min_length=1, max_length=MAX_ID_BYTES)],
    limit: Annotated[int, Query(ge=1, le=MAX_SEARCH)] = 10,
    epoch: EpochQ = None,
) -> JSON:
    view = store.get(epoch)
    return JSON({"epoch": view.result.epoch, "items": store.search(prefix, limit, view.result.vertices)})
