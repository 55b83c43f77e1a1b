"""The API's graph view split over partitions by vertex, so that the API process holds none of it.

With one partition the API keeps its graph view itself (:class:`~pulsegraph.api.graph.GraphHistory`). With
``--compute-partitions P`` above 1 the view is :class:`PartitionedGraph`: P parts, each a
:class:`GraphPart` (a ``GraphHistory`` of the edges with an end it owns, vertex ``v`` owned by part
``v % P``, as the compute partitions own the ranking's rows), as Ray actors spread over the nodes
(:mod:`pulsegraph.graph_parts`). An edge whose ends two parts own is kept by both: a vertex's edges
either way, as of any retained epoch, are all on its owner, so a neighbors read is one call to one part, and
the answer holds the edges one ``GraphHistory`` of the whole graph gives (every part applies every epoch, so
their epochs, undo records and retention are the same); in-edges may come in another order (each part numbers
its slots), and the routes answer the same bytes (:func:`~pulsegraph.api.queries.heaviest` orders what it picks
totally; a path search's result does not depend on the order).

Owns the routing only: each epoch's edge changes split by owner (:func:`rows_of`), a read sent to the
vertex's owner, a search's frontier to its owners in one round (:meth:`PartitionedGraph.neighbors_many`),
and a mirror of what every part answers alike (the newest epoch applied, the oldest kept, the epochs
missed), so that an epoch the parts do not keep is refused without a call. Reaching the parts is the
port's (:class:`PartsPort`); this module knows nothing of Ray.

Where the parts differ from the whole view: their undo records are not in the epochs' archive files (which the
API process writes) but, all but the newest epoch's, in files of each part's own, memory-mapped (``spill``); so at
a clean stop each part writes its view with its undo records into a file of its own (:meth:`GraphPart.write`, :func:`part_file`,
beside the API's view file, :mod:`pulsegraph.api.viewfile`, which then keeps only what :meth:`PartitionedGraph.keep`
says of them), and the next start's parts read theirs back once they are made (:meth:`PartitionedGraph.load_state`),
seconds after the API serves rather than at once. A part that dies takes the whole view with it: reads answer 503
until the pipeline's relaunch (``on_lost``) brings new parts the whole graph.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from pulsegraph.api.archive import ArchiveError, read_mapped, write_mapped
from pulsegraph.api.exceptions import NotFound, Unavailable
from pulsegraph.api.graph import Edges, GraphHistory, check_capacity, require_kept
from pulsegraph.base.errors import PulsegraphError
from pulsegraph.compute.changes import EdgeChanges

log = logging.getLogger(__name__)


class PartLost(PulsegraphError):
    """A part of the graph view is gone (its actor died); the view is whole again after the next relaunch."""


class GraphPart:
    """One part of the view: the edges with an end it owns. Its calls answer what the view mirrors."""

    OPS = frozenset({"apply", "forget_before", "clear", "neighbors_many", "sizes", "take_back", "write"})  # what a caller may call

    def __init__(self, retain: int = 120, spill: Path | None = None) -> None:
        """``spill``: a folder of this part's own where the undo records of all but the newest epoch are written and
        read back memory-mapped, so that the retained history costs disk, not memory, as the API process's does
        from the result archive (None: they stay in memory). Emptied now: whatever is there is a former part's."""
        self.graph = GraphHistory(retain)
        self.spill = None if spill is None else Path(spill)
        self._spilled: list[int] = []  # epochs whose undo record is a file in ``spill``, oldest first
        if self.spill is not None:
            shutil.rmtree(self.spill, ignore_errors=True)
            self.spill.mkdir(parents=True, exist_ok=True)

    def take_back(self, path: str, epoch: int) -> tuple[int, int, int]:
        """Go on from the view a clean stop wrote as ``path`` (:meth:`write`) if it is of ``epoch`` and checks out;
        else stay empty (the view is whole again with the pipeline's first epoch, published whole to it). The
        file is read once: a later crash must not find the view of an epoch since replaced."""
        graph = GraphHistory(self.graph.retain)
        try:
            got = read_mapped(Path(path))
            undo = got["undo"]
            taken = got["epoch"] == epoch and graph.load_state(
                got["graph"], lambda e: {k: undo[f"{e}.{k}"] for k in ("slots", "mult", "weight") if f"{e}.{k}" in undo})
            why = None if taken else f"not the view of epoch {epoch}, or its undo records do not fit"
        except (ArchiveError, KeyError, TypeError, ValueError) as exc:
            why = str(exc) or type(exc).__name__
        finally:
            Path(path).unlink(missing_ok=True)
        if why is None:
            self.graph = graph
        else:
            log.warning("graph view part %s not taken back (%s); it takes the pipeline's first epoch whole", path, why)
        return self.facts()

    def write(self, path: str) -> bool:
        """This part's view as of its newest epoch and its undo records as file ``path``, for :meth:`take_back` at the next
        start (the whole view's undo records are in the epochs' archive files; a part's are its own). Whether written."""
        g = self.graph
        state = g.state()
        undo = {f"{e}.{k}": a for e, _, _ in state["undo"] for k, a in (g.undo_record(e) or {}).items()}
        try:
            write_mapped(Path(path), {"epoch": g.epoch, "graph": state, "undo": undo})
        except OSError as exc:
            log.error("graph view part not kept at %s (%s)", path, exc)
            return False
        return True

    def facts(self) -> tuple[int, int, int]:
        """The newest epoch applied, the oldest kept, the epochs missed: what the view mirrors."""
        g = self.graph
        return g.epoch, g.kept_from, g.missed_epochs

    def apply(self, epoch: int, changes: EdgeChanges, full: bool, since: int | None) -> tuple[int, int, int]:
        newest = self.graph.epoch
        self.graph.apply(epoch, changes, full, since)
        if self.graph.epoch != newest:
            self._cool(newest)
        return self.facts()

    def forget_before(self, epoch: int) -> tuple[int, int, int]:
        self.graph.forget_before(epoch)
        self._drop_spilled()
        return self.facts()

    def clear(self) -> tuple[int, int, int]:
        self.graph.clear()
        self._drop_spilled()
        return self.facts()

    def _cool(self, epoch: int) -> None:
        """Read the undo record of ``epoch``, no longer the newest, from a file of its own from now on (memory-mapped)."""
        rec = self.graph.undo_record(epoch) if self.spill is not None and epoch else None
        if self.spill is not None and rec is not None and len(rec["slots"]):
            path = self._spilled_file(epoch)
            try:
                write_mapped(path, rec)
                mapped = read_mapped(path, verify=False)
            except (OSError, ArchiveError) as exc:
                log.warning("graph view part: the undo record of epoch %d stays in memory (%s)", epoch, exc)
            else:
                if self.graph.map_undo(epoch, mapped):
                    self._spilled.append(epoch)
                else:
                    path.unlink(missing_ok=True)
        self._drop_spilled()

    def _spilled_file(self, epoch: int) -> Path:
        assert self.spill is not None  # only a part with a spill folder writes records out
        return self.spill / f"epoch-{epoch:012d}.undo"

    def _drop_spilled(self) -> None:
        """Remove the files of the undo records the view no longer retains (their maps go with the records)."""
        kept = set(self.graph.undo_epochs())
        while self._spilled and self._spilled[0] not in kept:
            self._spilled_file(self._spilled.pop(0)).unlink(missing_ok=True)

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

    def __init__(self, parts: int, retain: int = 120, spill: Path | None = None) -> None:
        self.parts = parts
        self.members = [GraphPart(retain, None if spill is None else Path(spill) / str(q)) for q in range(parts)]

    def each(self, op: str, args: Sequence[tuple]) -> list[Any]:
        return [getattr(m, op)(*a) for m, a in zip(self.members, args, strict=True)]

    def some(self, calls: dict[int, tuple[str, tuple]]) -> dict[int, Any]:
        return {i: getattr(self.members[i], op)(*a) for i, (op, a) in calls.items()}


def part_file(folder: Path, q: int) -> Path:
    """Part ``q``'s file in a clean stop's ``folder`` (the result archive's, beside the API's view file)."""
    return Path(folder) / f"view-part-{q}.res"


def drop_part_files(folder: Path) -> None:
    """Remove every part's file from ``folder``: a view split any way that is not to be taken back (files of
    gigabytes a later start would not read)."""
    for path in Path(folder).glob("view-part-*.res"):
        path.unlink(missing_ok=True)


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

    remote = True  # so a neighbors answer is kept (pulsegraph.api.hubs), and served again from the event loop

    def __init__(self, port: PartsPort | None, on_lost: Callable[[str], None] | None = None, folder: Path | None = None) -> None:
        """``folder``: where a clean stop's parts keep their views (:meth:`keep`; None: nowhere)."""
        self._port = port  # None until the wiring gives it parts (:meth:`replace`): nothing is kept yet
        self.on_lost = on_lost
        self.folder = folder
        self._lock = threading.Lock()  # the mirror's three numbers change together
        self.epoch = 0
        self._kept = 0
        self.missed_epochs = 0
        self._lost: str | None = None  # why the view is not whole, until new parts take a whole graph in
        self._lost_port: PartsPort | None = None  # the parts it was lost with (asked nothing more)
        self.pending: dict | None = None  # a clean stop's view, taken back (load_state) for parts not made yet

    @property
    def port(self) -> PartsPort | None:
        return self._port

    @property
    def parts(self) -> int:
        return 0 if self._port is None else self._port.parts

    def _mirror(self, facts: list[tuple[int, int, int]]) -> None:
        with self._lock:
            self.epoch, self._kept, self.missed_epochs = facts[0]

    def _fail(self, exc: PartLost, port: PartsPort) -> None:
        """``port``'s call failed: the view is lost, unless new parts replaced it meanwhile (the relaunch came first)."""
        with self._lock:
            if port is not self._port:
                return
            first = self._lost is None
            self._lost, self.epoch, self._kept, self._lost_port = str(exc), 0, 0, self._port
        if first:
            log.error("graph view lost a part (%s); the graph routes answer 503 until the pipeline relaunches", exc)
            if self.on_lost is not None:
                self.on_lost(f"graph view part lost: {exc}")

    def replace(self, port: PartsPort) -> None:
        """Go on over new, empty parts: they take back a clean stop's view taken back before them (:meth:`load_state`);
        else (the first parts, or the old ones died) the view is whole again with the compute stage's graph whole
        (:meth:`wants_whole`) or a whole epoch."""
        with self._lock:
            kept, self.pending, old, self._port = self.pending, None, self._port, port
            if kept is None:
                if old is not None and self._lost is None and self.epoch:  # found dead by the relaunch, not by a call
                    self._lost = "its parts were replaced"
                self.epoch, self._kept, self.missed_epochs = 0, 0, 0
        if kept is not None:
            self._take_back(port, kept)

    def apply(self, epoch: int, changes: EdgeChanges | None, full: bool = False, since: int | None = None) -> None:
        """:meth:`GraphHistory.apply <pulsegraph.api.graph.GraphHistory.apply>`, each part its rows. After a part
        was lost, only a whole epoch is taken in (what the parts held before it is gone)."""
        if self._port is None or (self._lost is not None and not full):
            return
        ch = changes if changes is not None else EdgeChanges.empty()
        check_capacity(ch)  # raised here, as by the whole view, not inside an actor
        if self._each("apply", [(epoch, rows, full, since) for rows in rows_of(ch, self.parts)]):
            self._lost = None

    @property
    def lost(self) -> str | None:
        """Why the view is not whole (None: it is): a part died, or parts replaced the ones that held it."""
        return self._lost

    def wants_whole(self) -> bool:
        """New parts that hold nothing yet: given the epochs the API has, only the compute stage's graph whole
        fills them (:meth:`pulsegraph.api.feed.ResultFeed.poll` asks for it), not the next epoch's changes."""
        return self._port is not None and self._port is not self._lost_port and self.epoch == 0

    def forget_before(self, epoch: int) -> None:
        self._each("forget_before", [(epoch,)] * self.parts)

    def clear(self) -> None:
        """Forget everything (the view taken back was not the history the pipeline recovered, or its parts could
        not take it back): the parts start empty, and the files of a clean stop's view go."""
        with self._lock:
            self.pending, self.epoch, self._kept = None, 0, 0
        if self.folder is not None:
            drop_part_files(self.folder)
        self._each("clear", [()] * self.parts)

    def _each(self, op: str, args: list[tuple]) -> bool:
        """``op`` on every part, their answer mirrored; False where there are no parts or one was lost."""
        port = self._port
        if port is None:
            return False
        try:
            self._mirror(port.each(op, args))
        except PartLost as exc:
            self._fail(exc, port)
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
        if port is None:  # a clean stop's view taken back (its epochs mirrored), its parts not made yet
            require_kept(at, 0, 0)  # raises: the graph comes with them
            return []
        owners = [v % self.parts for v in vertices]
        calls = {p: ("neighbors_many", ([v for v, o in zip(vertices, owners) if o == p], direction, at)) for p in set(owners)}
        try:
            got = port.some(calls)
        except PartLost as exc:
            self._fail(exc, port)
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

    def keep(self) -> dict | None:
        """At a clean stop: each part writes its view into :attr:`folder` (:func:`part_file`); what the API's view
        file keeps of them (None: there are none, or a part could not write)."""
        port = self._port
        if not self.epoch or port is None or self.folder is None:
            return None
        try:
            if not all(port.each("write", [(str(part_file(self.folder, q)),) for q in range(port.parts)])):
                return None
        except PartLost as exc:
            self._fail(exc, port)
            return None
        return {"parts": self.parts, "epoch": self.epoch, "kept_from": self._kept, "missed": self.missed_epochs}

    def load_state(self, state: dict, undo_of: Callable[[int], dict | None]) -> bool:
        """Take back what :meth:`keep` gave at the last stop: the parts read their files now, or, made later, then
        (:meth:`replace`; until then reads answer that the graph comes with the pipeline)."""
        if self.folder is None or not {"parts", "epoch", "kept_from", "missed"} <= state.keys():
            return False
        with self._lock:
            self.epoch, self._kept, self.missed_epochs = state["epoch"], state["kept_from"], state["missed"]
            port = self._port
            self.pending = None if port is not None else dict(state)
        if port is not None:
            self._take_back(port, state)
        return True

    def _take_back(self, port: PartsPort, kept: dict) -> None:
        """Each part reads its file of ``kept``; what they took back, or nothing if any did not (a view split another
        way, a file missing or damaged): then the pipeline publishes the graph whole."""
        assert self.folder is not None  # kept only where there is a folder
        if kept["parts"] != port.parts:
            log.warning("graph view kept in %d parts, not %d: not taken back", kept["parts"], port.parts)
            self.clear()
            return
        try:
            facts = port.each("take_back", [(str(part_file(self.folder, q)), kept["epoch"]) for q in range(port.parts)])
        except PartLost as exc:
            self._fail(exc, port)
            return
        if len(set(facts)) != 1 or facts[0][0] != kept["epoch"]:
            log.warning("graph view parts took back epochs %s, not %d: they start empty", sorted({f[0] for f in facts}), kept["epoch"])
            self.clear()
            return
        self._mirror(facts)
        log.info("graph view of epoch %d taken back by its %d parts", kept["epoch"], port.parts)

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
