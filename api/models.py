"""Response models: the API's contract shapes, as documented in OpenAPI at /docs."""

from __future__ import annotations

from typing import Annotated, Literal, Union, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

# The rankings the compute stage publishes (pulsegraph.compute.engine.RankEngine); a test keeps the two in step.
Algorithm = Literal["pagerank", "tunkrank"]
ALGORITHMS: tuple[str, ...] = get_args(Algorithm)


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
    skipped: list[int] = Field(
        default_factory=list,
        description="sealed epochs merged into this one without results of their own (ranking had fallen behind the cuts, or the service restarted before ranking them)",
    )
    error_bounds: dict[str, float] = Field(
        default_factory=dict, description="per ranking, the L1 error its scores are proven within (empty for epochs archived before bounds were kept)"
    )
    window: float | None = Field(
        None, description="--window T in seconds: the snapshot holds the events with event time in (watermark - T, watermark]; null: windows off"
    )
    watermark: float | None = Field(
        None, description="the largest event time (Unix seconds) among the transactions below the epoch's vector; null: windows off"
    )
    late: int = Field(0, description="events of this epoch that arrived already older than the window (never entered the graph)")
    ranked_at: str | None = Field(
        None, description="when the compute stage finished this epoch's results (committed_at: when it was sealed); null for epochs archived before it was kept"
    )


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
    error_bound: float | None = Field(
        None, description="the L1 error the epoch's scores of algo are proven within (each score is within it too); null: not known"
    )
    certified: bool = Field(False, description="the bound proves the order of these items: every gap between neighbours exceeds twice it")
    certified_ranks: int = Field(0, description="how many leading items are in a proven order")
    items: list[RankItem]


class VertexComponent(BaseModel):
    id: str = Field(description="the component's representative: its vertex with the smallest internal id")
    size: int


class Vertex(BaseModel):
    vertex: str
    epoch: int
    out_degree: int
    in_degree: int
    scores: dict[str, float]
    component: VertexComponent | None = Field(
        None, description="its weakly connected component; null when components are off, or for an epoch from before a restart (the result archive keeps scores, not component labels)",
    )


class ComponentItem(BaseModel):
    rank: int
    id: str
    size: int


class ComponentList(BaseModel):
    epoch: int
    count: int = Field(description="weakly connected components in the epoch, isolated vertices included")
    items: list[ComponentItem] = Field(description="largest first")


class Topic(BaseModel):
    hashtag: str
    usage: int = Field(description="tweets tagging it")
    users: int = Field(description="distinct users who tagged it")
    persistence: float = Field(description="area under p(1..8) over 8 times its peak (Romero et al.'s F)")
    curve: list[float | None] = Field(description="p(k) for k = 1..8: share of users exposed k times who then tagged it")
    exposed: list[int] = Field(description="users who reached k exposures, k = 1..8 (the curve's denominators)")


class TopicList(BaseModel):
    epoch: int
    as_of: int  # the epoch the curves were counted at (they are recounted within a time budget)
    sort: str
    items: list[Topic]


class TrendMover(BaseModel):
    vertex: str
    from_rank: int
    to_rank: int
    change: int = Field(description="places gained by usage (negative: lost)")
    score: float = Field(description="usage in the `to` epoch")
    usage_from: int
    usage_to: int


class Trends(BaseModel):
    from_epoch: int = Field(alias="from")
    to_epoch: int = Field(alias="to")
    rising: list[TrendMover]
    falling: list[TrendMover]


class UsagePoint(BaseModel):
    epoch: int
    usage: int = Field(description="tweets tagging it, up to this epoch")
    new: int | None = Field(description="tweets tagging it in this epoch (null for the oldest retained)")


class Usage(BaseModel):
    hashtag: str
    items: list[UsagePoint] = Field(description="oldest first")


class PathAnswer(BaseModel):
    epoch: int
    src: str
    dst: str
    estimate: int | None = Field(description="min over landmarks l of d(src, l) + d(l, dst); null when none connects them")
    via: str | None = Field(description="the landmark of the estimate")
    path: list[str] = Field(description="src ... via ... dst, estimate + 1 vertices")
    exact: bool = Field(description="a budgeted bidirectional BFS confirmed the estimate is the true distance")
    distance: int | None = Field(description="the true distance when the budgeted BFS settled it")


class HealthWindow(BaseModel):
    window_s: float = Field(description="--window T, in seconds")
    watermark: float | None = Field(description="the newest cut epoch's watermark (Unix seconds)")
    late: int = Field(description="events that arrived with their time already outside the window, since the launch")


class HealthCheckpoint(BaseModel):
    epoch: int = Field(description="the newest epoch checkpointed (0: none yet): a restart re-cuts the epochs after it from the log")
    seconds: float = Field(description="the longest one stage (a shard, the compute actor) stalled writing the last checkpoint")
    paused: int = Field(description="checkpoint epochs passed over since the launch, to keep checkpoints within --checkpoint-budget")


class HealthPause(BaseModel):
    """A bound that pauses ingest while it is reached (what each one keeps it from is in its own fields)."""

    throttled: bool = Field(description="this bound keeps ingest paused now")
    throttled_seconds: float = Field(description="time this bound kept ingest paused since the launch")
    reason: str | None = Field(None, description="why ingest is paused, while it is")


class HealthComputeQueue(HealthPause):
    epochs: int = Field(description="sealed epochs waiting for the compute stage")
    bytes: int = Field(description="their deltas' size")
    handing_bytes: int = Field(description="the deltas of the batch the compute stage is merging now")
    limit_bytes: int | None = Field(description="--compute-queue-limit, on bytes and handing_bytes together (null: only 64 queued epochs bound it)")
    full: bool = Field(description="at the bound: ingest is paused until the compute stage is done with its batch")


class HealthResultLag(HealthPause):
    seconds: float = Field(description="seal time between the newest sealed epoch and the newest ranked one")
    limit_s: float | None = Field(description="--max-result-lag (null: no bound, only reported)")
    over: bool = Field(description="over the bound: ingest is paused until ranking catches up")


class HealthGraphView(BaseModel):
    parts: int = Field(description="the part actors the API's graph view is split over (--compute-partitions)")
    epoch: int = Field(description="the newest epoch it holds (0: none yet)")
    lost: str | None = Field(None, description="why the graph routes answer 503 graph_view_lost now: a part died, and new "
                             "parts are filled with the compute stage's graph once the relaunch has caught up; null: whole")


class Health(BaseModel):
    status: str
    epoch: int
    window: HealthWindow | None = Field(None, description="the sliding window (from the pipeline's status); null: windows off")
    checkpoint: HealthCheckpoint | None = Field(None, description="the newest checkpoint and the checkpoints' cost (null before the first status poll)")
    compute_queue: HealthComputeQueue | None = Field(
        None, description="what waits for the compute stage; when full, ingest is paused (backpressure, as at the memory budget)")
    result_lag: HealthResultLag | None = Field(
        None, description="how far ranked results are behind the cuts (null until this run ranked an epoch); over "
        "--max-result-lag, ingest is paused")
    graph_view: HealthGraphView | None = Field(
        None, description="the API's graph view in parts of its own (--compute-partitions above 1; null: in the API process); "
        "while it is lost, status is degraded")


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


# -- alerts ------------------------------------------------------------------------------------------
# Every constraint of a rule is in its schema (types, bounds, no unknown fields): a rule the schema allows
# is never refused, one it forbids is a 422 with the error body. A vertex or topic that does not exist
# (yet) is allowed: the rule fires once it does.
MAX_NAME = 256  # as the ingest's ids (characters here: a longer UTF-8 id simply never matches)
MAX_RANK = 1000  # the top of each ranking the store keeps per epoch (pulsegraph.api.store.TOP_CACHE)
MAX_COUNT = 2**31 - 1
Direction = Literal["up", "down", "both"]


def _whole(value: object) -> object:
    """JSON Schema's integer includes 5.0: a whole float is that integer (strict refuses "5" and true still)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


WholeInt = Annotated[int, BeforeValidator(_whole)]


class _Rule(BaseModel):
    # Strict: `false` is not 0, "5" is not 5; a rule says what it means or is refused.
    model_config = ConfigDict(extra="forbid", strict=True)

    name: str | None = Field(None, max_length=100, description="a label for people; alerts name the rule by its id")


class TopKRule(_Rule):
    kind: Literal["top_k"] = Field(description="a vertex enters or leaves the top k of a ranking")
    algo: Algorithm = "pagerank"
    k: WholeInt = Field(ge=1, le=MAX_RANK)
    on: Literal["enter", "leave", "both"] = "both"
    vertex: str | None = Field(None, min_length=1, max_length=MAX_NAME, description="watch this vertex only (default: any)")


class RankMoveRule(_Rule):
    kind: Literal["rank_move"] = Field(description="a vertex's rank moves by at least `places` between consecutive ranked epochs")
    algo: Algorithm = "pagerank"
    places: WholeInt = Field(ge=1, le=MAX_COUNT)
    direction: Direction = Field("both", description="up: rose (a smaller rank number), down: fell")
    vertex: str | None = Field(None, min_length=1, max_length=MAX_NAME, description="watch this vertex only, at any rank")
    within: WholeInt = Field(
        100, ge=1, le=MAX_RANK,
        description="without `vertex`: the vertices ranked within the top `within` of either epoch (held in both)",
    )


class ComponentSizeRule(_Rule):
    kind: Literal["component_size"] = Field(
        description="a weakly connected component reaches `size` vertices (a component is named by its representative, its vertex with the smallest internal id)",
    )
    size: WholeInt = Field(ge=2, le=MAX_COUNT)


class TopicPersistenceRule(_Rule):
    kind: Literal["topic_persistence"] = Field(description="a hashtag's persistence (K-exposure F) crosses `value`")
    value: float = Field(ge=0, le=1)
    direction: Direction = Field("up", description="up: rises to `value` or above (a new topic too), down: falls below it")
    topic: str | None = Field(None, min_length=1, max_length=MAX_NAME, description="watch this hashtag only, e.g. #ai (default: any)")
    min_users: WholeInt = Field(1, ge=1, le=MAX_COUNT, description="only topics tagged by at least this many users in the newer epoch")


RuleSpec = Annotated[Union[TopKRule, RankMoveRule, ComponentSizeRule, TopicPersistenceRule], Field(discriminator="kind")]


class AlertRule(BaseModel):
    id: int = Field(description="never reused, also after a delete")
    since_epoch: int = Field(description="the first epoch the rule is evaluated on: the one after the newest when it was made")
    created_at: str
    rule: RuleSpec


class AlertRules(BaseModel):
    max: int = Field(description="the most rules the server keeps")
    items: list[AlertRule] = Field(description="oldest first")


class Alert(BaseModel):
    rule: int = Field(description="the id of the rule that fired")
    kind: str
    epoch: int = Field(description="the ranked epoch it fired on")
    previous_epoch: int = Field(description="the ranked epoch before, which it compared with")
    event: Literal["entered", "left", "rose", "fell", "reached", "rose_above", "fell_below"]
    subject: str = Field(description="the vertex (top_k, rank_move), the component's representative vertex, or the hashtag")
    algo: str | None = Field(description="the ranking, for top_k and rank_move")
    old: float | None = Field(description="rank, size or persistence in previous_epoch (null: it had none)")
    new: float | None = Field(description="rank, size or persistence in epoch")
    message: str


class AlertPage(BaseModel):
    items: list[Alert] = Field(description="oldest first, in the order of their rules")
    through: int | None = Field(description="the newest epoch this page covers; pass it as `since` for the next page")
    more: bool = Field(description="epochs after `through` hold alerts not in this page")
    dropped: int = Field(description="alerts of these epochs past the per-rule and per-epoch bounds, not listed")
