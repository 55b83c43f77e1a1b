"""The API's graph view split over partitions by vertex, so that the API process holds none of it.

With one partition the API keeps its graph view itself (:class:`~pulsegraph.api.graph.GraphHistory`). With
``--compute-partitions P`` above 1 the view is :class:`PartitionedGraph`: P parts, each a
:class:`GraphPart` (a ``GraphHistory`` of the edges with an end it owns, vertex ``v`` owned by part
``v % P``, as the compute partitions own the ranking's rows), as Ray actors spread over the nodes
(:mod:`pulsegraph.graph_parts`). An edge whose ends two parts own is kept by both: a vertex's edges
either way, as of any retained epoch, are all on its owner, so a neighbors read is one call to one part, and
the answer is what one ``GraphHistory`` of the whole graph gives, byte for byte (every part applies every
epoch, so their epochs, undo records and retention are the same).

Owns the routing only: each epoch's edge changes split by owner (:func:`rows_of`), a read sent to the
vertex's owner, a search's frontier to its owners in one round (:meth:`PartitionedGraph.neighbors_many`),
and a mirror of what every part answers alike (the newest epoch applied, the oldest kept, the epochs
missed), so that an epoch the parts do not keep is refused without a call. Reaching the parts is the
port's (:class:`PartsPort`); this module knows nothing of Ray.

What the parts do not do that the whole view does: their undo records stay in their own memory (20 bytes
per change within the retention, spread over the parts), not in the epochs' archive files; and a clean stop
keeps no view file of them (:mod:`pulsegraph.api.viewfile`), so after a restart the graph routes answer from
the pipeline's first epoch on, as after a crash. A part that dies takes the whole view with it: reads
answer 503 until the pipeline's relaunch (``on_lost``) brings new parts the whole graph.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from pulsegraph.api.exceptions import NotFound, Unavailable
from pulsegraph.api.graph import Edges, GraphHistory, check_capacity, require_kept
from pulsegraph.base.errors import PulsegraphError
from pulsegraph.compute.changes import EdgeChanges

log = logging.getLogger(__name__)


class PartLost(PulsegraphError):
    """A part of the graph view is gone (its actor died); the view is whole again after the next relaunch."""


class GraphPart:
    """One part of the view: the edges with an end it owns. Its calls answer what the view mirrors."""

    OPS = frozenset({"apply", "forget_before", "clear", "neighbors_many", "sizes"})  # what an actor's caller may call

    def __init__(self, retain: int = 120) -> None:
        self.graph = GraphHistory(retain)

    def _facts(self) -> tuple[int, int, int]:
        g = self.graph
        return g.epoch, g.kept_from, g.missed_epochs

    def apply(self, epoch: int, changes: EdgeChanges, full: bool, since: int | None) -> tuple[int, int, int]:
        self.graph.apply(epoch, changes, full, since)
        return self._facts()

    def forget_before(self, epoch: int) -> tuple[int, int, int]:
        self.graph.forget_before(epoch)
        return self._facts()

    def clear(self) -> tuple[int, int, int]:
        self.graph.clear()
        return self._facts()

    def neighbors_many(self, vertices: list[int], direction: str, epoch: int) -> list[Edges] | None:
        """The edges of ``vertices`` as of ``epoch``; None when this part no longer keeps it (a retention
        that moved on between the view's check and this call)."""
        try:
            return self.graph.neighbors_many(vertices, direction, epoch)
        except NotFound:
            return None

    def sizes(self) -> tuple[int, int, int]:
        """Slots, slots holding an edge, bytes held."""
        g = self.graph
        return g.slots, g.held, g.nbytes


class PartsPort(Protocol):
    """How the view reaches its parts: ``each`` runs ``op`` on every part with its own arguments, in one round
    (the answers by part); ``some`` on the parts named. Either raises :class:`PartLost` for a dead part."""

    parts: int

    def each(self, op: str, args: Sequence[tuple]) -> list[Any]: ...

    def some(self, calls: dict[int, tuple[str, tuple]]) -> dict[int, Any]: ...


class LocalParts:
    """:class:`PartsPort` over parts in this process (the tests: the same answers as the actors give)."""

    def __init__(self, parts: int, retain: int = 120) -> None:
        self.parts = parts
        self.members = [GraphPart(retain) for _ in range(parts)]

    def each(self, op: str, args: Sequence[tuple]) -> list[Any]:
        return [getattr(m, op)(*a) for m, a in zip(self.members, args, strict=True)]

    def some(self, calls: dict[int, tuple[str, tuple]]) -> dict[int, Any]:
        return {i: getattr(self.members[i], op)(*a) for i, (op, a) in calls.items()}


def rows_of(ch: EdgeChanges, parts: int) -> list[EdgeChanges]:
    """``ch`` split by owner: part ``i`` gets the rows with an end ``i`` owns (a row whose ends two parts own
    goes to both), in their order."""
    if parts == 1:
        return [ch]
    src, dst = ch.src % parts, ch.dst % parts
    out = []
    for i in range(parts):
        at = np.flatnonzero((src == i) | (dst == i))
        out.append(EdgeChanges(ch.src[at], ch.dst[at], ch.etype[at], ch.mult[at], ch.weight[at],
                               None if ch.first_ts is None else ch.first_ts[at]))
    return out


class PartitionedGraph:
    """The graph view over a :class:`PartsPort`: :class:`~pulsegraph.api.graph.GraphHistory`'s reads and writes.
    Written by the feed thread only; read from worker threads (never on the event loop: a read is a call)."""

    def __init__(self, port: PartsPort | None, on_lost: Callable[[str], None] | None = None) -> None:
        self._port = port  # None until the wiring gives it parts (:meth:`replace`): nothing is kept yet
        self.on_lost = on_lost
        self._lock = threading.Lock()  # the mirror's three numbers change together
        self.epoch = 0
        self._kept = 0
        self.missed_epochs = 0
        self._lost: str | None = None  # why the view is not whole, until new parts take a whole graph in

    @property
    def port(self) -> PartsPort | None:
        return self._port

    @property
    def parts(self) -> int:
        return 0 if self._port is None else self._port.parts

    def _mirror(self, facts: list[tuple[int, int, int]]) -> None:
        with self._lock:
            self.epoch, self._kept, self.missed_epochs = facts[0]

    def _fail(self, exc: PartLost) -> None:
        with self._lock:
            first = self._lost is None
            self._lost, self.epoch, self._kept = str(exc), 0, 0
        if first:
            log.error("graph view lost a part (%s); the graph routes answer 503 until the pipeline relaunches", exc)
            if self.on_lost is not None:
                self.on_lost(f"graph view part lost: {exc}")

    def replace(self, port: PartsPort) -> None:
        """Go on over new, empty parts (the old ones died): the view is whole again with the next whole epoch."""
        with self._lock:
            self._port, self.epoch, self._kept = port, 0, 0

    def apply(self, epoch: int, changes: EdgeChanges | None, full: bool = False, since: int | None = None) -> None:
        """:meth:`GraphHistory.apply <pulsegraph.api.graph.GraphHistory.apply>`, each part its rows. After a part
        was lost, only a whole epoch is taken in (what the parts held before it is gone)."""
        if self._port is None or (self._lost is not None and not full):
            return
        ch = changes if changes is not None else EdgeChanges.empty()
        check_capacity(ch)  # raised here, as by the whole view, not inside an actor
        if self._each("apply", [(epoch, rows, full, since) for rows in rows_of(ch, self.parts)]):
            self._lost = None

    def forget_before(self, epoch: int) -> None:
        self._each("forget_before", [(epoch,)] * self.parts)

    def clear(self) -> None:
        self._each("clear", [()] * self.parts)

    def _each(self, op: str, args: list[tuple]) -> bool:
        """``op`` on every part, their answer mirrored; False where there are no parts or one was lost."""
        if self._port is None:
            return False
        try:
            self._mirror(self._port.each(op, args))
        except PartLost as exc:
            self._fail(exc)
            return False
        return True

    @property
    def kept_from(self) -> int:
        return self._kept

    def require(self, epoch: int) -> None:
        if self._lost is not None:
            raise Unavailable(f"the graph view lost a part ({self._lost}); it is whole again after the pipeline's relaunch",
                              code="graph_view_lost")
        with self._lock:
            newest, kept = self.epoch, self._kept
        require_kept(epoch, newest, kept)

    def neighbors(self, vertex: int, direction: str, epoch: int | None = None) -> Edges:
        return self.neighbors_many([vertex], direction, epoch)[0]

    def neighbors_many(self, vertices: list[int], direction: str, epoch: int | None = None) -> list[Edges]:
        """The edges of each of ``vertices`` as of ``epoch``: one call to each part that owns some of them."""
        at = self.epoch if epoch is None else epoch
        self.require(at)
        port = self._port
        if port is None:  # replaced meanwhile by no parts: nothing kept
            require_kept(at, 0, 0)
            return []
        owners = [v % self.parts for v in vertices]
        calls = {p: ("neighbors_many", ([v for v, o in zip(vertices, owners) if o == p], direction, at)) for p in set(owners)}
        try:
            got = port.some(calls)
        except PartLost as exc:
            self._fail(exc)
            self.require(at)
            raise
        if any(g is None for g in got.values()):
            self.require(at)  # the retention moved on meanwhile: says which epochs are kept now
            raise NotFound(f"the graph as of epoch {at} is not kept any more", code="graph_not_retained")
        nth = {p: iter(g) for p, g in got.items()}
        return [next(nth[o]) for o in owners]

    def neighbors_now(self, vertex: int, direction: str, epoch: int | None, most: int) -> Edges | None:
        """Never on the event loop: a read is a call to a part (the route reads it on a worker thread)."""
        return None

    @property
    def writing(self) -> bool:
        return False

    # What the whole view keeps in the result archive and the view file: the parts keep theirs themselves.
    def undo_record(self, epoch: int) -> dict[str, np.ndarray] | None:
        return None

    def map_undo(self, epoch: int, arrays: dict[str, np.ndarray]) -> bool:
        return False

    def state(self) -> dict | None:
        return None

    def load_state(self, state: dict, undo_of: Callable[[int], dict | None]) -> bool:
        return False

    def sizes(self) -> list[tuple[int, int, int]]:
        """Each part's slots, slots holding an edge and bytes held."""
        return [] if self._port is None else self._port.each("sizes", [()] * self.parts)

    @property
    def slots(self) -> int:
        return sum(s for s, _, _ in self.sizes())

    @property
    def held(self) -> int:
        return sum(h for _, h, _ in self.sizes())

    @property
    def nbytes(self) -> int:
        return 0  # the parts hold the view; this process only routes
