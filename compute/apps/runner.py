"""Runs the applications on every sealed epoch, in order, and keeps their state between epochs.

The compute actor calls :meth:`Applications.run` once per epoch after ranking
(landmarks read the epoch's TunkRank). A delta that holds the whole graph (the
first epoch after a restore) or the first epoch builds the applications'
adjacency from the graph and re-initializes every application; otherwise the
adjacency takes in the epoch's changes and each application updates from its
previous state. What comes back is host data only, one typed result per
application (:class:`~pulsegraph.compute.apps.base.AppResult`), for
:attr:`pulsegraph.compute.results.EpochResult.apps`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from pulsegraph.compute.apps.adjacency import (
    COMPACT_FRACTION,
    COMPACT_MIN,
    AppAdjacency,
)
from pulsegraph.compute.apps.base import AppDelta, AppGraph, Application, AppResult
from pulsegraph.compute.apps.components import Components
from pulsegraph.compute.apps.exposure import Exposure
from pulsegraph.compute.apps.landmarks import Landmarks
from pulsegraph.compute.apps.trends import Trends
from pulsegraph.compute.apps.view import AppsInput, AppsView, LiveGraph
from pulsegraph.compute.changes import EdgeChanges
from pulsegraph.compute.exceptions import ComputeError
from pulsegraph.compute.graph import GlobalGraph

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AppConfig:
    """The applications' tuning; :data:`APP_SETTINGS` are the fields that come from the settings (same names)."""

    landmarks: int = 16
    landmark_drift: float = 0.25
    topics_budget: float | None = None  # None: recount the exposure curves every epoch
    # The adjacency's overlay may reach this share of its base before it is rebuilt (pulsegraph.compute.apps.adjacency).
    compact_fraction: float = COMPACT_FRACTION
    compact_min: int = COMPACT_MIN
    # True: build the adjacency from the graph every epoch, as before it was kept (the reference
    # path: tests and bench/replay.py --rebuild-apps compare with it).
    rebuild_every_epoch: bool = False
    # The applications run, by name (empty: all): one group of them where they are split over actors of
    # their own (pulsegraph.compute.apps_actor.APP_GROUPS). Left out of the repr, so of the stage's fingerprint
    # (a stage's config always runs them all): a stage an earlier version wrote whole, with one actor for every
    # application, is read back whole and goes on with that one actor.
    only: tuple[str, ...] = field(default=(), repr=False)

    @classmethod
    def from_settings(cls, settings) -> AppConfig:
        """From the settings' fields (or a dict of some of them); duck-typed like :class:`~pulsegraph.compute.engine.RankConfig`."""
        get = settings.get if isinstance(settings, dict) else lambda k: getattr(settings, k, None)
        kw: dict[str, Any] = {k: get(k) for k in APP_SETTINGS if get(k) is not None}
        return cls(**kw)


# The result type of each application, by its name: the one registration an application needs
# besides its module (readers find the per-vertex fields through it).
RESULT_TYPES: dict[str, type[AppResult]] = {
    app.name: app.result for app in (Components, Trends, Exposure, Landmarks)
}
# Results published as dicts, before they were typed: field names that changed (archives of then).
_RENAMED = {"landmarks": {"to": "dist_to", "from": "dist_from"}}


def typed_results(apps: dict[str, Any] | None, epoch: int) -> dict[str, AppResult]:
    """``apps`` of ``epoch`` with results an earlier version archived as plain dicts made typed (typed ones
    as they are). A field the dict lacks is None, but for ``as_of`` (curves counted at the epoch itself)."""
    out: dict[str, Any] = {}
    for name, got in (apps or {}).items():
        if isinstance(got, dict) and name in RESULT_TYPES:
            kind, renamed = RESULT_TYPES[name], _RENAMED.get(name, {})
            given = {"as_of": epoch, **{renamed.get(k, k): v for k, v in got.items()}}
            got = kind(**{f.name: given.get(f.name) for f in dataclasses.fields(kind)})
        out[name] = got
    return out


# The AppConfig fields an operator sets (the settings fields of the same names); the rest are for tests.
APP_SETTINGS = ("landmarks", "landmark_drift", "topics_budget")


class Applications:
    pairs = True  # the default of applications pickled before they could run without the distinct pairs

    def __init__(self, config: AppConfig | None = None) -> None:
        c = config or AppConfig()
        every: list[Application] = [Components(), Trends(), Exposure(c.topics_budget), Landmarks(c.landmarks, c.landmark_drift)]
        unknown = set(c.only) - {app.name for app in every}
        if unknown:
            raise ComputeError(f"no application is named {sorted(unknown)}")
        self.apps = [app for app in every if not c.only or app.name in c.only]
        self.exposure = next((app for app in self.apps if isinstance(app, Exposure)), None)
        # Applications that read typed edges only (trends, K-exposure) need no table of the distinct pairs.
        self.pairs = any(app.reads_pairs for app in self.apps)
        self.states: dict[str, Any] = {}
        self.ms: dict[str, float] = {}
        self.config = c
        self.adjacency: AppAdjacency | None = None

    def run(
        self, g: LiveGraph, epoch: int, changes: EdgeChanges, before: EdgeChanges, full: bool,
        scores: dict[str, np.ndarray] | None = None, new_vertices: int = 0,
    ) -> dict[str, AppResult]:
        t0 = time.perf_counter()
        adj = self.adjacency
        if adj is None or full or self.config.rebuild_every_epoch:
            c = self.config
            adj = self.adjacency = AppAdjacency.from_graph(g, compact_fraction=c.compact_fraction, compact_min=c.compact_min,
                                                           pairs=self.pairs)
        else:
            adj.apply(g, changes, before)
        graph = AppGraph(g, epoch, adj, dict(scores or {}))
        delta = AppDelta(changes, before, list(g.types), new_vertices, full)
        self.ms = {"app_graph": (time.perf_counter() - t0) * 1000.0}
        out = {}
        for app in self.apps:
            t = time.perf_counter()
            prev = self.states.get(app.name)
            state = app.initialize(graph) if prev is None or full else app.update(graph, delta, prev)
            self.states[app.name] = state
            out[app.name] = app.publish(state)
            self.ms[app.name] = (time.perf_counter() - t) * 1000.0
        return out

    def resend_whole(self) -> None:
        """The next epoch publishes every per-vertex field whole: a consumer lost the chain of patches."""
        for app in self.apps:
            app.resend_whole()

    def state_dict(self) -> dict:
        """What a checkpoint keeps: the adoption stamps (everything else is recomputed from the graph)."""
        st = None if self.exposure is None else self.states.get(self.exposure.name)
        return {"topics": Exposure.state_dict(st)} if st is not None else {}

    def restore(self, saved: dict | None) -> None:
        if saved and "topics" in saved and self.exposure is not None:
            self.exposure.restore(saved["topics"])


class AppsPort(Protocol):
    """The applications of a stage where they run in an actor of their own (``pulsegraph.compute.apps_actor``):
    :class:`Applications`' calls, and the actor's rows in a checkpoint written whole."""

    def submit(self, g: GlobalGraph, epoch: int, changes: EdgeChanges, before: EdgeChanges, full: bool,
               scores: dict[str, np.ndarray] | None = None, new_vertices: int = 0,
               ) -> Callable[[], tuple[dict[str, AppResult], dict[str, float]]]:
        """:meth:`Applications.run` started: the call returned waits for its results and the milliseconds each took."""

    def resend_whole(self) -> None: ...

    def state_dict(self) -> dict: ...

    def write(self, epoch: int, data_dir: str) -> Callable[[], tuple[tuple[str, str], ...]]: ...

    def reopen(self, folder: Path | None, started: Any = None) -> None: ...


class AppsHost:
    """The applications where the merged graph is elsewhere: an :class:`AppsView` of it, kept from what the
    compute stage sends each epoch (:class:`AppsInput`), and the applications run over it."""

    def __init__(self, config: AppConfig | None = None, saved: dict | None = None) -> None:
        self.apps = Applications(config)
        self.apps.restore(saved)
        self.view = AppsView(names=any(app.reads_names for app in self.apps.apps))

    def take(self, inp: AppsInput) -> tuple[dict[str, AppResult], dict[str, float]]:
        """Run the applications on ``inp``'s epoch; their results and the milliseconds each took."""
        if inp.resend_whole:
            self.apps.resend_whole()
        self.view.take(inp)
        try:
            out = self.apps.run(self.view, inp.epoch, inp.changes, inp.before, inp.full, inp.scores, inp.new_vertices)
        finally:
            self.view.release()
        return out, dict(self.apps.ms)

    def state_dict(self) -> dict:
        return self.apps.state_dict()
