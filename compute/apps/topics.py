"""The K-exposure application's types: a hashtag's counts (:class:`Topic`), what the application keeps between
epochs (:class:`ExposureState`) and what it publishes (:class:`TopicsResult`). Must not count anything: the
counting and the application are :mod:`pulsegraph.compute.apps.exposure`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pulsegraph.compute.apps.base import AppResult

# The curve's points: p(1..8), as Kineograph and the dashboard show it.
MAX_K = 8


@dataclass
class Topic:
    usage: int
    users: int
    reached: np.ndarray  # int64[MAX_K]: users who reached k = 1..MAX_K exposures
    adopted: np.ndarray  # int64[MAX_K]: users who adopted with exactly k exposures

    def curve(self) -> list[float | None]:
        return [float(a / r) if r else None for a, r in zip(self.adopted.tolist(), self.reached.tolist())]

    def persistence(self) -> float:
        p = np.where(self.reached > 0, self.adopted / np.maximum(self.reached, 1), 0.0)
        peak = float(p.max()) if len(p) else 0.0
        return float(p.sum() / (MAX_K * peak)) if peak > 0 else 0.0


@dataclass
class ExposureState:
    # Adoption stamps of the taggings whose edge has no time, sorted by key = user << 32 | hashtag.
    keys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    epochs: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    times: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float64))
    topics: dict[int, Topic] = field(default_factory=dict)
    as_of: int = 0  # the epoch the curves were last counted at


@dataclass(frozen=True)
class TopicsResult(AppResult):
    """The hashtags' K-exposure curves, most persistent first: per tag (``tags``, vertex ids) its usage,
    users and persistence, ``curve[i, k-1]`` the share of users exposed k times who adopted (NaN: none
    exposed k times) and ``reached[i, k-1]`` how many were; ``as_of``: the epoch they were counted at."""

    tags: np.ndarray
    usage: np.ndarray
    users: np.ndarray
    persistence: np.ndarray
    curve: np.ndarray
    reached: np.ndarray
    as_of: int
