"""Rankings: ``/v1/algorithms``, ``/v1/rank/top`` (its fast path: :mod:`pulsegraph.api.routes.fast`), ``/v1/movers``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from pulsegraph.api import queries
from pulsegraph.api.deps import JSON, AlgoQ, EpochQ, Store, errors
from pulsegraph.api.models import Algorithms, Movers, TopRanking
from pulsegraph.api.ranking import TOP_CACHE

# Per-request bound of movers: answered from memory in well under a millisecond per item.
MAX_MOVERS = 100

router = APIRouter()


@router.get("/v1/algorithms", response_model=Algorithms, responses=errors())
async def algorithms(store: Store) -> JSON:
    return JSON({"items": list(store.algorithms)})


@router.get("/v1/rank/top", response_model=TopRanking, responses=errors(404))
async def top(
    store: Store,
    k: Annotated[int, Query(ge=1, le=TOP_CACHE)] = 10,
    algo: AlgoQ = "pagerank",
    epoch: EpochQ = None,
) -> JSON:
    return JSON(queries.top_body(store, k, algo, epoch))


@router.get(
    "/v1/movers",
    response_model=Movers,
    responses=errors(404),
    summary="vertices whose rank rose and fell most between two retained epochs (in either order; the same epoch twice: none)",
)
def movers(
    store: Store,
    algo: AlgoQ = "pagerank",
    from_: Annotated[int | None, Query(alias="from", ge=1, le=2**53, description="default: the ranked epoch before `to`; any retained epoch, before or after `to`")] = None,
    to: Annotated[int | None, Query(ge=1, le=2**53, description="default: the newest")] = None,
    k: Annotated[int, Query(ge=1, le=MAX_MOVERS)] = 10,
) -> JSON:
    return JSON(queries.movers(store, algo, from_, to, k))
