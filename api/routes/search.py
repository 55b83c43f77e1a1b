"""``/v1/search``: vertex ids by prefix, in name order."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from pulsegraph.api.deps import JSON, MAX_ID_BYTES, EpochQ, Store, errors
from pulsegraph.api.models import SearchResult

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
    r = view.result
    # Window mode: ids stay for vertices that left the window; only those in the snapshot are found.
    found = store.search(prefix, limit, r.known_vertices(), present=getattr(r, "present", None))
    return JSON({"epoch": r.epoch, "items": found})
