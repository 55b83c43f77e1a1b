"""Response models: the API's contract shapes, as documented in OpenAPI at /docs."""

from __future__ import annotations

from pydantic import BaseModel, Field


class Timeliness(BaseModel):
    p50: float
    p99: float
    max: float


class EpochInfo(BaseModel):
    epoch: int
    vector: dict[str, int]
    records: int
    vertices: int
    edges: int
    committed_at: str
    timeliness_ms: Timeliness


class EpochList(BaseModel):
    items: list[EpochInfo]


class RankItem(BaseModel):
    rank: int
    vertex: str
    score: float
    previous_rank: int | None = Field(None, description="rank in the epoch before, while it is retained")


class TopRanking(BaseModel):
    epoch: int
    algo: str
    items: list[RankItem]


class Vertex(BaseModel):
    vertex: str
    epoch: int
    out_degree: int
    in_degree: int
    scores: dict[str, float]


class Health(BaseModel):
    status: str
    epoch: int


class HistoryPoint(BaseModel):
    epoch: int
    score: float
    rank: int


class History(BaseModel):
    vertex: str
    algo: str
    items: list[HistoryPoint] = Field(description="oldest first")


class Mover(BaseModel):
    vertex: str
    from_rank: int
    to_rank: int
    change: int = Field(description="places gained (negative: lost)")
    score: float = Field(description="score in the `to` epoch")


class Movers(BaseModel):
    algo: str
    from_epoch: int = Field(alias="from")
    to_epoch: int = Field(alias="to")
    rising: list[Mover]
    falling: list[Mover]


class Neighbor(BaseModel):
    vertex: str
    type: str
    weight: float
    multiplicity: int


class Neighbors(BaseModel):
    vertex: str
    epoch: int
    direction: str
    items: list[Neighbor] = Field(description="heaviest first")


class SearchResult(BaseModel):
    epoch: int
    items: list[str]


class Rejected(BaseModel):
    index: int
    reason: str


class Accepted(BaseModel):
    accepted: int
    rejected: int
    errors: list[Rejected] = Field(description="the first rejected events and why")


class Algorithms(BaseModel):
    items: list[str]


class ErrorBody(BaseModel):
    code: str
    message: str


class Error(BaseModel):
    error: ErrorBody
