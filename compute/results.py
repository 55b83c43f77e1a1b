"""The output type of the compute stage: the results of one sealed epoch.

Arrays are indexed by global vertex id (see :class:`pulsegraph.compute.graph.GlobalGraph`).
Ids are dense; without a window they are append-only, so a consumer that knows
the first ``n`` names only needs the names added since. With a window an id may
be given to another name once its vertex has been out of the snapshot while the
watermark advanced ``reuse_after`` seconds (:class:`pulsegraph.compute.ids.NameChanges`
says which).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import numpy as np

from pulsegraph.compute.apps.base import AppResult
from pulsegraph.compute.changes import EdgeChanges


def _iso(t: float | None) -> str | None:
    return None if t is None else dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat()


@dataclass
class EpochResult:
    epoch: int
    vector: dict[str, int]
    records: int
    vertices: int
    edges: int
    committed_at: float
    commit_ms: float
    timeliness_ms: dict[str, float]
    scores: dict[str, np.ndarray] = field(default_factory=dict)
    out_degree: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    in_degree: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    compute_ms: dict[str, float] = field(default_factory=dict)
    iterations: dict[str, int] = field(default_factory=dict)
    # What changed in this epoch, so a consumer can keep the graph itself (neighbors, time travel):
    # edges as global ids with their new absolute state, ``types`` names the type ids.
    edge_changes: EdgeChanges | None = None
    # True when ``edge_changes`` holds the whole graph (the first epoch after a restore from a
    # checkpoint): a consumer that kept the graph replaces it instead of missing epochs before.
    full_changes: bool = False
    types: list[str] = field(default_factory=list)
    # How each algorithm was solved this epoch ("power", "push"), and the time spent absorbing
    # the changes into the resident graph and copying the scores to the host.
    methods: dict[str, str] = field(default_factory=dict)
    graph_ms: float = 0.0
    # Each application's result by its name ("components", "trends", "topics", "landmarks"; one
    # pulsegraph.compute.apps.base.AppResult each, typed per application), and the milliseconds each took.
    apps: dict[str, AppResult] = field(default_factory=dict)
    apps_ms: dict[str, float] = field(default_factory=dict)
    # Sealed epochs merged into this one without results of their own (the compute stage had
    # fallen behind the cuts and ranked the newest): the API serves none of them.
    skipped: list[int] = field(default_factory=list)
    # Per ranking, the L1 distance of ``scores`` from the exact solution that the solver's stopping rule
    # proves (see pulsegraph.compute.pagerank / pulsegraph.compute.tunkrank); a score is then within it of its exact value too.
    error_bounds: dict[str, float] = field(default_factory=dict)
    # Windows (--window T): T in seconds and the epoch's watermark W_e (the largest event time below its
    # vector; the snapshot holds the events in (W_e - T, W_e]); None when windows are off. ``late``:
    # events of this epoch (and the ones merged into it) that arrived already outside the window.
    window: float | None = None
    watermark: float | None = None
    late: int = 0
    # Window mode: per vertex id, is it in the snapshot (a live edge, or attributes written inside the
    # window); ``vertices`` counts these. None outside window mode, where every id below the vertex
    # count is in it.
    present: np.ndarray | None = None
    # Window mode: a vertex id out of the snapshot while the watermark advanced this many seconds may
    # name another vertex from then on, so a consumer keeps no epoch whose watermark is at or below
    # ``watermark - reuse_after`` (its ids may name other vertices now). None: ids are never reused.
    reuse_after: float | None = None
    # When the compute stage finished this epoch's results (Unix seconds; ``committed_at`` is when it was
    # sealed): how long a reader waited for them. None for epochs archived before it was kept.
    ranked_at: float | None = None

    def known_vertices(self) -> int:
        """Vertex ids this epoch knows (the length of its per-vertex arrays): ``vertices`` outside
        window mode; in it, more (ids stay for vertices that left the window)."""
        return len(self.out_degree) if getattr(self, "present", None) is not None else self.vertices

    def holds(self, i: int) -> bool:
        """Is vertex id ``i`` in this epoch's snapshot."""
        present = getattr(self, "present", None)
        if present is None:
            return i < self.vertices
        return i < len(present) and bool(present[i])

    def bound(self, algo: str) -> float | None:
        """The proven L1 error bound of ``algo``'s scores; None for an epoch archived before bounds were kept."""
        return (getattr(self, "error_bounds", None) or {}).get(algo)

    def info(self) -> dict:
        """The epoch object of the API contract."""
        return {
            "epoch": self.epoch,
            "vector": dict(self.vector),
            "records": self.records,
            "vertices": self.vertices,
            "edges": self.edges,
            "committed_at": _iso(self.committed_at),
            "timeliness_ms": dict(self.timeliness_ms),
            "skipped": list(self.skipped),
            # The proven L1 error of each ranking's scores (what a top-k answer's certificate rests on).
            "error_bounds": dict(getattr(self, "error_bounds", None) or {}),
            # The window (seconds) and the watermark (event time, seconds since the epoch); null when off.
            "window": getattr(self, "window", None),
            "watermark": getattr(self, "watermark", None),
            "late": int(getattr(self, "late", 0) or 0),
            "ranked_at": _iso(getattr(self, "ranked_at", None)),
        }
