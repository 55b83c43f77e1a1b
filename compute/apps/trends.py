"""Hashtag usage per epoch: how many tweets tag each hashtag, kept from the ``tags`` edges' multiplicities.

A tweet adds one unit of multiplicity to each (user, #tag) edge it makes, so a
hashtag's usage is the summed live multiplicity of its in-coming ``tags`` edges;
an epoch moves it by the multiplicity differences of the edges it touched. The
API turns two epochs' usage into rising and falling tags (movers form).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pulsegraph.compute.apps.base import AppDelta, AppGraph, Application, AppResult

TAGS = "tags"


@dataclass
class TrendsState:
    usage: np.ndarray  # int64 per vertex id: tweets tagging it (0 for non-hashtags)


@dataclass(frozen=True)
class TrendsResult(AppResult):
    """The hashtag vertex ids in use (ascending) and how often each is used."""

    tags: np.ndarray
    usage: np.ndarray


class Trends(Application):
    name = "trends"
    reads_pairs = False
    result = TrendsResult

    def initialize(self, graph: AppGraph) -> TrendsState:
        _, dst, mult = graph.typed(TAGS)
        return TrendsState(np.bincount(dst, weights=mult, minlength=graph.n).astype(np.int64))

    def update(self, graph: AppGraph, delta: AppDelta, previous: TrendsState) -> TrendsState:
        usage = previous.usage
        if len(usage) < graph.n:
            usage = np.concatenate([usage, np.zeros(graph.n - len(usage), dtype=np.int64)])
        _, dst, before, after = delta.touched(TAGS)
        if len(dst):
            usage = usage + np.bincount(dst, weights=after - before, minlength=graph.n).astype(np.int64)
        return TrendsState(usage)

    def publish(self, state: TrendsState) -> TrendsResult:
        tags = np.flatnonzero(state.usage > 0)
        return TrendsResult(tags.astype(np.int32), state.usage[tags].astype(np.int64))
