"""The feed: a thread that pulls new epoch results from the compute actor into the store.

One actor call per poll, not per request: the API answers from memory.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

import ray

from api.store import EpochView, ResultStore

log = logging.getLogger(__name__)

# Polls per second: well under the epoch interval, so an epoch shows up within ~100 ms.
POLL_S = 0.1


class ResultFeed:
    def __init__(self, compute, store: ResultStore, on_epoch: Callable[[EpochView], None] | None = None) -> None:
        self.compute = compute  # swapped by the wiring when it relaunches the pipeline
        self._store = store
        self._on_epoch = on_epoch
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="result-feed", daemon=True)

    def start(self) -> "ResultFeed":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def poll(self) -> list[EpochView]:
        results, names = ray.get(self.compute.results_after.remote(self._store.latest_epoch, len(self._store.names)))
        views = self._store.add(results, names)
        if self._on_epoch:
            for v in views:
                self._on_epoch(v)
        return views

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                self.poll()
            except Exception:  # noqa: BLE001 - keep serving the last epoch; the next poll retries
                log.exception("result feed poll failed")
