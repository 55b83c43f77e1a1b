"""The neighbors answers of hubs, kept: the heaviest edges read for a vertex of many edges, by epoch.

Owns :class:`HubEdges`, which the store holds (``ResultStore.hubs``) and the neighbors query fills; it
never reads the graph itself.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


# Neighbors answers of hubs kept at once (HubEdges), each at most MAX_NEIGHBORS edges (~32 KB).
HUB_ANSWERS = 256


@dataclass
class _Flight:
    """One read of a key in progress, and the threads waiting for it."""

    done: threading.Event = field(default_factory=threading.Event)
    value: tuple[np.ndarray, ...] | None = None
    waiters: int = 0


class HubEdges:
    """The heaviest edges read for the neighbors of a vertex of many edges (a hub: a popular hashtag's
    taggers, a busy user's mentions), by (epoch, vertex id, direction, type, limit). A retained epoch's
    edges never change, reading a hub's is O(degree) (~30 ms at 462 k edges), and dashboards poll the same
    hubs; so the selection is kept, the least recently read dropped first past ``size``. Where the graph view is
    split over parts (:mod:`pulsegraph.api.graphparts`), every vertex's is kept: each read is a call to a part, and a
    kept answer is served from the event loop. Ids, not names: a read names them as the route does, with the names of now."""

    def __init__(self, size: int = HUB_ANSWERS) -> None:
        self.size = size
        self._items: collections.OrderedDict[tuple, tuple[np.ndarray, ...]] = collections.OrderedDict()
        self._flights: dict[tuple, _Flight] = {}  # keys being read now: at most one per worker thread
        self._lock = threading.Lock()  # reads come from the event loop and worker threads

    def once(self, key: tuple, read: Callable[[], tuple[tuple[np.ndarray, ...], bool]]) -> tuple[np.ndarray, ...]:
        """The kept answer of ``key``, or ``read()``'s (the answer, and whether to keep it). While one thread
        reads a key the others asking for it wait for that read instead of making their own: a new epoch's
        first reads of a hub come together (16 connections polling it: 16 reads of its edges at once)."""
        with self._lock:
            got = self._kept(key)
            if got is not None:
                return got
            flight = self._flights.get(key)
            reader = flight is None
            if flight is None:
                flight = self._flights[key] = _Flight()
            else:
                flight.waiters += 1
        if not reader:
            flight.done.wait()
            # None: the read failed (an epoch no longer kept, say): this thread reads, and meets its error.
            return flight.value if flight.value is not None else read()[0]
        try:
            flight.value, keep = read()
            if keep:
                self.put(key, flight.value)
            return flight.value
        finally:
            with self._lock:
                del self._flights[key]
            flight.done.set()

    def get(self, key: tuple) -> tuple[np.ndarray, ...] | None:
        with self._lock:
            return self._kept(key)

    def _kept(self, key: tuple) -> tuple[np.ndarray, ...] | None:
        """The kept answer of ``key``, now the most recently read (caller holds the lock)."""
        got = self._items.get(key)
        if got is not None:
            self._items.move_to_end(key)
        return got

    def put(self, key: tuple, edges: tuple[np.ndarray, ...]) -> None:
        with self._lock:
            self._items[key] = edges
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)
