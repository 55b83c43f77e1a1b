"""Response models: the API's contract shapes, as documented in OpenAPI at /docs."""

from __future__ import annotations

from pydantic import BaseModel


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


class ErrorBody(BaseModel):
    code: str
    message: str


class Error(BaseModel):
    error: ErrorBody
