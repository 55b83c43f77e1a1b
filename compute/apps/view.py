"""What the applications read of the merged graph, and the copy of it an actor of their own keeps.

:class:`LiveGraph` is that reading, all of it: the vertex count, names and edge types, window
presence, each vertex's ``last_seen`` attribute (K-exposure's stamps of taggings without an edge time)
and, where the applications build their adjacency anew, the live edges. The compute stage's
:class:`~pulsegraph.compute.graph.GlobalGraph` is one. :class:`AppsView` is another, kept by the
applications' own actor (``--compute-partitions`` above 1: :mod:`pulsegraph.compute.apps_actor`) from
what the compute stage sends it each epoch (:class:`AppsInput`): the names' changes (as the API takes
them), the ``last_seen`` of the vertices whose attributes were written, the presence mask, and the whole
live graph only with an epoch that rebuilds. It holds no edge: the applications' own adjacency, kept
from the epoch's changes, is the graph they read.

Must not touch the rank engine or the shards; the actor's Ray half lives elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from pulsegraph.base.arrays import unique
from pulsegraph.compute.changes import EdgeChanges
from pulsegraph.compute.exceptions import ComputeError
from pulsegraph.compute.graph import GlobalGraph
from pulsegraph.compute.ids import NameChanges
from pulsegraph.snapshots.growable import Column


class LiveGraph(Protocol):
    """What an application reads of the graph besides the adjacency it keeps."""

    windowed: bool

    @property
    def n(self) -> int: ...

    @property
    def names(self) -> list[str]: ...

    @property
    def types(self) -> list[str]: ...

    def type_id(self, name: str) -> int | None: ...

    def present(self) -> np.ndarray | None: ...

    def last_seen(self, ids: np.ndarray) -> np.ndarray: ...

    def live(self, types: tuple[str, ...] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...

    def live_of_type(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]: ...


@dataclass
class AppsInput:
    """One run of the applications as the compute stage sends it to their actor: the epoch's edge changes
    (``before``: row for row, the state before), the facts of the graph after it, what the names and the
    ``last_seen`` attributes did since the run before, and ``whole`` (every live edge) where the
    applications build their adjacency anew."""

    epoch: int
    changes: EdgeChanges
    before: EdgeChanges
    full: bool
    new_vertices: int
    types: list[str]
    windowed: bool
    present: np.ndarray | None
    names: NameChanges
    seen_ids: np.ndarray
    seen: np.ndarray
    scores: dict[str, np.ndarray] = field(default_factory=dict)
    whole: EdgeChanges | None = None
    resend_whole: bool = False

    @classmethod
    def of(cls, g: GlobalGraph, since: tuple[int, int], epoch: int, changes: EdgeChanges, before: EdgeChanges,
           full: bool, scores: dict[str, np.ndarray], new_vertices: int, rebuild: bool) -> AppsInput:
        """What ``g``, just merged up to ``epoch``, sends a view whose names are those of ``since`` (an epoch
        and how many ids had names then). ``rebuild``: the applications build their adjacency anew, from
        ``whole``. The ``last_seen`` sent are those of the ids whose attributes the merge wrote and of the
        ids renamed (given back, reused), read after the merge, so a reused id never keeps its old time."""
        names = g.name_changes(*since)
        ids = unique(np.concatenate([g.attr_written, names.ids]).astype(np.int64))
        present = g.present()
        return cls(
            epoch, changes, before, full, new_vertices, list(g.types), g.windowed,
            None if present is None else present.copy(), names, ids, g.last_seen(ids), dict(scores),
            g.whole_changes() if rebuild else None,
        )


class AppsView:
    """:class:`LiveGraph` kept from :class:`AppsInput` after :class:`AppsInput`, in the applications' actor.
    With ``names`` False it counts the vertices and keeps none of their names (~70 bytes a vertex): for
    applications that read none (their ``reads_names``); :attr:`names` is then empty."""

    def __init__(self, names: bool = True) -> None:
        self.keeps_names = names
        self.names: list[str] = []
        self._n = 0
        self.types: list[str] = []
        self._type_index: dict[str, int] = {}
        self.windowed = False
        self._present: np.ndarray | None = None
        self._last_seen = Column(np.float64)
        self._whole: EdgeChanges | None = None

    def __setstate__(self, state: dict) -> None:
        # A view pickled before it could go without names kept them all (a checkpoint of an earlier version).
        self.__dict__.update({"keeps_names": True, "_n": len(state.get("names", ())), **state})

    @property
    def n(self) -> int:
        return self._n

    def take(self, inp: AppsInput) -> None:
        """The graph's facts as of ``inp``'s epoch (its whole live graph, if sent, until :meth:`release`)."""
        c = inp.names
        self._n = c.start + len(c.names)
        if self.keeps_names and c.start == 0:
            self.names = list(c.names)
        elif self.keeps_names:
            for i, name in zip(c.ids.tolist(), c.renamed):
                self.names[i] = name
            del self.names[c.start:]
            self.names.extend(c.names)
        if len(self._last_seen) < self.n:
            self._last_seen.extend(np.zeros(self.n - len(self._last_seen)))
        self._last_seen.view[inp.seen_ids] = inp.seen
        self.types = list(inp.types)
        self._type_index = {t: i for i, t in enumerate(self.types)}
        self.windowed, self._present, self._whole = inp.windowed, inp.present, inp.whole

    def release(self) -> None:
        """Let go of the whole live graph of a rebuild: the applications' adjacency holds it now."""
        self._whole = None

    def type_id(self, name: str) -> int | None:
        return self._type_index.get(name)

    def present(self) -> np.ndarray | None:
        return self._present

    def last_seen(self, ids: np.ndarray) -> np.ndarray:
        return self._last_seen.view[ids].copy()

    def _live(self) -> EdgeChanges:
        if self._whole is None:
            raise ComputeError("the applications asked for the whole graph in an epoch that did not send it")
        w = self._whole
        keep = w.mult > 0
        return EdgeChanges(w.src[keep], w.dst[keep], w.etype[keep], w.mult[keep], w.weight[keep],
                           None if w.first_ts is None else w.first_ts[keep])

    def live(self, types: tuple[str, ...] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        w = self._live()
        if types is None:
            return w.src, w.dst, w.weight
        keep = np.isin(w.etype, [self._type_index[t] for t in types if t in self._type_index])
        return w.src[keep], w.dst[keep], w.weight[keep]

    def live_of_type(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        w = self._live()
        keep = w.etype == self._type_index.get(name, -1)
        first = np.full(int(keep.sum()), np.inf) if w.first_ts is None else w.first_ts[keep]
        return w.src[keep], w.dst[keep], w.mult[keep], first
