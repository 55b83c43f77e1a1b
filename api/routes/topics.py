"""``/v1/topics``: hashtags with their K-exposure curves."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from fastapi import APIRouter, Query

from pulsegraph.api import queries
from pulsegraph.api.deps import JSON, EpochQ, Store, errors
from pulsegraph.api.models import TopicList

# A list computed per epoch: bounded by what the epoch carries.
MAX_TOPICS = 1000
Sort = Literal["controversy", "usage", "users"]
SORTS: tuple[str, ...] = get_args(Sort)

router = APIRouter()


# On the event loop: the orders by usage and users (a sort of every hashtag) are derived once an epoch
# (EpochView.derived), so a read is its k items.
@router.get(
    "/v1/topics", response_model=TopicList, responses=errors(404),
    summary="hashtags with their K-exposure curves, most controversial (persistent) first",
)
async def topics(
    store: Store,
    sort: Sort = "controversy",
    k: Annotated[int, Query(ge=1, le=MAX_TOPICS)] = 20,
    epoch: EpochQ = None,
) -> JSON:
    return JSON(queries.topics(store, sort, k, epoch))
