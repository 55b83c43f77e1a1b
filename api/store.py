"""The API process's in-memory results: the retained epochs and the vertex names.

Requests read from here and never call an actor. The feed thread adds each new
epoch; the oldest ones beyond the retention drop off. Per epoch it keeps the
score arrays and, sorted once, the top of each ranking.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass

import numpy as np

from api.exceptions import NotFound
from compute.results import EpochResult

# How much of each ranking is sorted when the epoch arrives; `k` is bounded by it.
TOP_CACHE = 1000


@dataclass
class EpochView:
    result: EpochResult
    info: dict
    top: dict[str, np.ndarray]  # algo -> vertex ids, best first


class ResultStore:
    def __init__(self, retain: int = 120) -> None:
        self.retain = retain
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self._epochs: collections.OrderedDict[int, EpochView] = collections.OrderedDict()
        self._lock = threading.Lock()

    def add(self, results: list[EpochResult], new_names: list[str]) -> list[EpochView]:
        views = []
        for r in results:
            top = {}
            for algo, scores in r.scores.items():
                k = min(TOP_CACHE, len(scores))
                if k == 0:
                    top[algo] = np.zeros(0, dtype=np.int64)
                    continue
                part = np.argpartition(-scores, k - 1)[:k]
                # Ties break by vertex id, so the order is stable across requests and replicas.
                top[algo] = part[np.lexsort((part, -scores[part]))]
            views.append(EpochView(r, r.info(), top))
        with self._lock:
            for name in new_names:
                self.index[name] = len(self.names)
                self.names.append(name)
            for v in views:
                self._epochs[v.result.epoch] = v
            while len(self._epochs) > self.retain:
                self._epochs.popitem(last=False)
        return views

    @property
    def latest_epoch(self) -> int:
        with self._lock:
            return next(reversed(self._epochs)) if self._epochs else 0

    def get(self, epoch: int | None = None) -> EpochView:
        with self._lock:
            if not self._epochs:
                raise NotFound("no epoch has been committed yet", code="no_epoch")
            if epoch is None:
                return self._epochs[next(reversed(self._epochs))]
            view = self._epochs.get(epoch)
            if view is None:
                first, last = next(iter(self._epochs)), next(reversed(self._epochs))
                raise NotFound(f"epoch {epoch} is not retained (retained: {first}..{last})", code="epoch_not_found")
            return view

    def recent(self, limit: int) -> list[EpochView]:
        with self._lock:
            return list(reversed(self._epochs.values()))[:limit]

    def vertex_id(self, name: str) -> int:
        i = self.index.get(name)
        if i is None:
            raise NotFound(f"unknown vertex {name!r}", code="vertex_not_found")
        return i
