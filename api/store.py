"""The API process's in-memory results: the retained epochs, the vertex names, and the graph.

Requests read from here and never call an actor. The feed thread adds each new
epoch; the oldest ones beyond the retention drop off. Per epoch it keeps the
score arrays and, computed once when the epoch arrives, every vertex's rank per
algorithm (ties broken by vertex id), so history and movers are lookups. Hot
answers (the epoch object, the top of a ranking) are encoded to JSON once per
epoch. The graph itself, for neighbors as of any retained epoch, is kept from
the epochs' edge changes in :class:`~pulsegraph.api.graph.GraphHistory`. Where a window
reuses vertex ids, the names follow the compute stage's renames and no epoch
whose watermark is ``reuse_after`` or more below the newest one's is kept.

With a :class:`~pulsegraph.api.archive.ResultArchive`, each new epoch is written to it,
and every epoch but the newest :data:`HOT_EPOCHS` is served from its file,
memory-mapped: the per-vertex arrays of 120 retained epochs would otherwise
cost ~32 bytes per vertex each. So are the undo records of each cold epoch: the
graph view's (24 bytes per edge it changed) and those of the applications'
per-vertex arrays (component labels, landmark distances: 10-12 bytes per entry
the epoch changed). The answers are the same bytes either way.

The algorithms are whatever score arrays the epochs carry; nothing here names one.
"""

from __future__ import annotations

import collections
import logging
import threading
from dataclasses import dataclass, field
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Callable

import numpy as np
import orjson

from pulsegraph.api.archive import ResultArchive
from pulsegraph.api.exceptions import NotFound
from pulsegraph.api.graph import GraphHistory
from pulsegraph.api.graphparts import PartitionedGraph
from pulsegraph.api.history import ArrayHistory
from pulsegraph.api.hubs import HubEdges
from pulsegraph.api.namebook import NameBook
from pulsegraph.api.names import NamesUpdate, as_patch, names_update, scan_id, scan_index, search_names
from pulsegraph.api.ranking import TOP_CACHE, certified_ranks, rank_order, top_of
from pulsegraph.compute.apps.base import AppResult
from pulsegraph.compute.ids import NameChanges
from pulsegraph.compute.results import EpochResult

if TYPE_CHECKING:
    from pulsegraph.api.viewfile import ViewReader

log = logging.getLogger(__name__)

# Epochs whose arrays stay in memory: the newest (what nearly every read asks for) and the one
# before it (previous ranks of the top, movers' default). Older ones are read from the archive.
HOT_EPOCHS = 2


@dataclass
class EpochView:
    result: EpochResult
    info: dict
    top: dict[str, np.ndarray]  # algo -> vertex ids, best first (the first TOP_CACHE)
    ranks: dict[str, np.ndarray] = field(default_factory=dict)  # algo -> 1-based rank by vertex id
    info_json: bytes = b""
    previous: "EpochView | None" = None  # the ranked epoch before, while it is retained
    cold: bool = False  # its arrays are memory maps of its archive file
    _top_items: dict[str, list[bytes]] = field(default_factory=dict)
    _certified: dict[str, int] = field(default_factory=dict)
    _derived: dict[str, np.ndarray] = field(default_factory=dict)

    def derived(self, key: str, compute: Callable[[], np.ndarray]) -> np.ndarray:
        """``compute()``, kept under ``key`` while the epoch is hot (its arrays in memory; :data:`HOT_EPOCHS`):
        what a read derives from a whole epoch, such as every component's size or the topics' order, is
        computed once an epoch, not per request (a vertex read counting its component's size passed over
        every vertex: 65 ms at 2.6 M)."""
        got = self._derived.get(key)
        if got is None:
            got = compute()
            if not self.cold:
                self._derived[key] = got
        return got

    def certified_ranks(self, algo: str) -> int:
        """How many leading ranks of ``algo`` (of the first TOP_CACHE) the epoch's error bound puts in a proven order."""
        m = self._certified.get(algo)
        if m is None:
            ids = np.asarray(self.top[algo])
            scores = np.asarray(self.result.scores[algo])
            m = self._certified[algo] = certified_ranks(scores[ids] if len(ids) else np.zeros(0), self.result.bound(algo))
        return m

    def top_items(self, algo: str, names: Sequence[str]) -> list[bytes]:
        """The top of ``algo`` as JSON objects ``{"rank","vertex","score","previous_rank"}``, encoded once."""
        items = self._top_items.get(algo)
        if items is None:
            scores = self.result.scores[algo]
            prev = self.previous.ranks.get(algo) if self.previous is not None else None
            items = []
            for i, v in enumerate(self.top[algo].tolist()):
                p = int(prev[v]) if prev is not None and v < len(prev) else None
                items.append(kept_json({"rank": i + 1, "vertex": names[v], "score": float(scores[v]), "previous_rank": p}))
            self._top_items[algo] = items
        return items


def kept_json(obj) -> bytes:
    """JSON for a value kept for the life of an epoch: orjson's result copied to its own size (each small
    orjson result otherwise keeps a ~4 KB allocation: 1,000 cached top items were 4 MB an epoch)."""
    return bytes(memoryview(orjson.dumps(obj)))


def _watermark_of(view: EpochView) -> float:
    """An epoch's watermark; one without (windows off when it was cut) counts as older than any."""
    w = view.result.watermark
    return float("-inf") if w is None else w


class ResultStore:
    def __init__(self, retain: int = 120, archive: ResultArchive | None = None, graph: PartitionedGraph | None = None) -> None:
        self.retain = retain
        self.archive = archive
        # The names by id, their index and order; while the names taken back at a start are being packed,
        # ``names`` is their list (see take_back).
        self._book = NameBook()
        self.names: Sequence[str] = self._book
        self.types: list[str] = []
        self.graph: GraphHistory | PartitionedGraph = graph or GraphHistory(retain)  # partitioned: pulsegraph.api.graphparts
        # The applications' per-vertex arrays (pulsegraph.compute.apps), kept as undo records like the graph.
        self.components = ArrayHistory(retain, fill=-1)
        self.landmarks_to = ArrayHistory(retain, fill=65535)
        self.landmarks_from = ArrayHistory(retain, fill=65535)
        # A patch did not apply (the feed missed a result): the feed asks the compute stage for whole arrays.
        self.resend_whole = False
        # Names taken back at a start that a thread is packing meanwhile: until it is done, a lookup scans this
        # list (see take_back).
        self._unindexed: list[str] | None = None
        self._indexing: threading.Thread | None = None
        self._epochs: collections.OrderedDict[int, EpochView] = collections.OrderedDict()
        self._merged_into: dict[int, int] = {}  # a retained epoch without results -> the ranked one holding it
        self._algorithms: tuple[str, ...] = ()
        self._listeners: list[Callable[[EpochView], None]] = []
        self._lock = threading.Lock()
        self.hubs = HubEdges()
        # Serving epochs taken back at a start, until the pipeline's first epoch settles them (take_back, add).
        self.provisional = False
        # Reads back the graph view a clean stop kept (pulsegraph.api.viewfile), set by the wiring after take_back.
        self.view_reader: ViewReader | None = None

    def subscribe(self, listener: Callable[[EpochView], None]) -> None:
        """Call ``listener(view)`` from the feed thread for each epoch added from now on; it must not block."""
        with self._lock:
            self._listeners.append(listener)

    def unsubscribe(self, listener: Callable[[EpochView], None]) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def add(
        self, results: list[EpochResult], names: NameChanges | None, notify: bool = True,
        ranks_of: dict[int, dict[str, np.ndarray]] | None = None, settle: int | None = None,
        tops_of: dict[int, dict[str, np.ndarray]] | None = None,
    ) -> list[EpochView]:
        """Keep new epochs (ignoring ones already kept) and what the vertex names did since (None:
        nothing); listeners hear of each new epoch unless ``notify`` is false. ``ranks_of``: ranks
        already known, by epoch (an archived epoch's); the others are computed, and so are the tops not in
        ``tops_of``. ``settle``: these are the
        pipeline's first epochs after epochs were taken back (:meth:`take_back`), which are kept below
        ``settle`` (:meth:`ResultArchive.confirm`) and dropped from it on, in the same swap: no reader
        sees the store between the two."""
        views = []
        for r in sorted(results, key=lambda r: r.epoch):
            top: dict[str, np.ndarray] = {}
            ranks = dict((ranks_of or {}).get(r.epoch) or {})
            known = (tops_of or {}).get(r.epoch) or {}
            present = getattr(r, "present", None)
            # Window mode: the top lists only vertices in the snapshot (they rank ahead of the others).
            shown = TOP_CACHE if present is None else min(TOP_CACHE, r.vertices)
            for algo, scores in r.scores.items():
                if algo in known:
                    top[algo] = np.array(known[algo])  # a copy of the few ids, not a map of the file
                elif algo in ranks:
                    top[algo] = top_of(ranks[algo])[:shown]
                else:
                    order, ranks[algo] = rank_order(np.asarray(scores), present)
                    # A copy: a slice would keep the whole order (8 bytes per vertex) alive for as
                    # long as the epoch is retained, memory-mapped or not.
                    top[algo] = order[:shown].copy()
            info = r.info()
            # An archived epoch given with its ranks is read from its file already.
            views.append(EpochView(r, info, top, ranks, kept_json(info), cold=r.epoch in (ranks_of or {})))
        # Worked out outside the lock (the feed thread is the only writer); swapped in under it.
        update = None
        if names is not None and (names.start == 0 or names.names or len(names.ids)):
            self._await_index()  # the changes patch the index
            # A whole list mostly as the store has it (a restart's first pull) costs what differs; the journal
            # below still takes it whole (it may hold records past the names taken back).
            update = names_update(self._book, as_patch(self._book, names))
        self._take_view(settle)
        undo = self._keep_changes(views)
        if self.archive is not None and notify:
            self.archive.save([v.result for v in views], {v.result.epoch: v.ranks for v in views}, undo,
                              {v.result.epoch: v.top for v in views})
        with self._lock:
            if settle is not None:
                self._settle(settle)
            if update is not None:
                self._apply_names(update)
            for v in views:
                if v.result.epoch in self._epochs:
                    continue
                last = self._epochs[next(reversed(self._epochs))] if self._epochs else None
                # The ranked epoch before: the one just before this epoch and the epochs it merged.
                before = (v.result.skipped[0] if v.result.skipped else v.result.epoch) - 1
                v.previous = last if last is not None and last.result.epoch == before else None
                for e in v.result.skipped:
                    self._merged_into[e] = v.result.epoch
                self._epochs[v.result.epoch] = v
                if len(v.result.types) >= len(self.types):
                    self.types = list(v.result.types)
            newest = self._epochs[next(reversed(self._epochs))].result if self._epochs else None
            reuse = getattr(newest, "reuse_after", None) if newest is not None else None
            # A window gives ids back: an epoch whose watermark is at or below the newest one's minus
            # reuse_after may hold an id that names another vertex now, and would answer with the wrong
            # names. The newest one always stays.
            stale = newest.watermark - reuse if newest is not None and reuse is not None and newest.watermark is not None else None
            while len(self._epochs) > self.retain or (
                stale is not None and len(self._epochs) > 1 and _watermark_of(self._epochs[next(iter(self._epochs))]) <= stale
            ):
                _, dropped = self._epochs.popitem(last=False)
                for e in dropped.result.skipped:
                    self._merged_into.pop(e, None)
                first = next(iter(self._epochs.values()), None)
                if first is not None:
                    first.previous = None
            self._refresh_algorithms()
            listeners = list(self._listeners) if notify else []
            cold = list(self._epochs.values())[:-HOT_EPOCHS]
            oldest = next(iter(self._epochs), None)
        if oldest is not None:
            # The histories keep no undo record that only serves epochs no longer retained (with reused
            # ids the store keeps fewer than ``retain``; the graph view's dead edges go with them).
            self.graph.forget_before(oldest)
            for history in self.histories().values():
                history.forget_before(oldest)
        if self.archive is not None and update is not None and names is not None and not self.provisional:
            # After the swap: a journal rewritten whole writes the list as it is now (this is the only writer).
            # Not the names taken back at a start: the journal holds them already.
            self.archive.save_names(newest.epoch if newest is not None else 0, names, self.names)
        self._book.settle()
        self._cool(cold)
        for v in views:
            for listener in listeners:
                try:
                    listener(v)
                except Exception:  # noqa: BLE001 - a consumer's fault must not stop the feed
                    log.exception("epoch listener failed")
        return views

    def take_back(
        self, results: list[EpochResult], names: NameChanges, ranks_of: dict[int, dict[str, np.ndarray]],
        tops_of: dict[int, dict[str, np.ndarray]],
    ) -> None:
        """At a start, before the pipeline is up: the archived epochs (:meth:`ResultArchive.take_back`), served
        provisionally until the pipeline's first epochs settle them (:meth:`add`); no listener hears of them,
        and the archive is not written."""
        self.provisional = True
        if names.start == 0:
            # Their ids are named at once; the names packed with their index and order, seconds at millions of
            # names, on a thread of its own, so serving starts without them.
            # The thread starts once the API serves (serving), not to take the interpreter from its start.
            whole = list(names.names)
            with self._lock:
                self.names, self._unindexed = whole, whole
            self._indexing = threading.Thread(target=self._build_index, args=(whole,), name="names-index", daemon=True)
        self.add(results, None if names.start == 0 else names, notify=False, ranks_of=ranks_of, tops_of=tops_of)

    def _take_view(self, settle: int | None) -> None:
        """Before an epoch is applied: the graph view read back at the start is kept, rolled back or dropped."""
        reader, self.view_reader = self.view_reader, None
        if reader is not None:
            reader.settle(settle)

    def serving(self) -> None:
        """The API serves: start what a restart deferred until then, the index of the names taken back
        (:meth:`take_back`; the feed's first names wait for it, :meth:`_await_index`) and the read of the graph
        view kept at the last stop (:attr:`view_reader`)."""
        with self._lock:  # the event loop and the feed thread may both ask
            t = self._indexing
            if t is not None and t.ident is None:
                t.start()
            if self.view_reader is not None:
                self.view_reader.start()

    def _build_index(self, names: list[str]) -> None:
        book = NameBook(names)
        with self._lock:
            self.names = self._book = book
            self._unindexed = None

    def _await_index(self) -> None:
        """Wait for the index of the names taken back (only the feed thread changes names, and it calls this first)."""
        if self._indexing is not None:
            self.serving()
            self._indexing.join()
            self._indexing = None

    def drop_taken(self, epochs: list[int]) -> None:
        """Stop serving these epochs taken back at the start (their files failed the check the take-back
        deferred: :meth:`ResultArchive.verify_taken`)."""
        with self._lock:
            for e in epochs:
                self._drop(e)
            self._refresh_algorithms()

    def _drop(self, epoch: int) -> None:
        """Stop serving a retained epoch (under the lock): the epochs merged into it, and any later one's link
        to it as its previous, go with it."""
        view = self._epochs.pop(epoch, None)
        if view is None:
            return
        for s in view.result.skipped:
            self._merged_into.pop(s, None)
        for later in self._epochs.values():
            if later.previous is view:
                later.previous = None

    def _settle(self, keep_below: int) -> None:
        """Keep the epochs taken back below ``keep_below`` (0: none, they were another history) and drop the
        rest, which the pipeline publishes again (under the lock; see :meth:`add`)."""
        dropped = [e for e in self._epochs if e >= keep_below]
        for e in dropped:
            self._drop(e)
        self._refresh_algorithms()
        self.provisional = False
        if dropped:
            log.info("result store: %d epochs served from the archive (%d..%d) %s", len(dropped), dropped[0], dropped[-1],
                     "are published again by the pipeline" if keep_below else "were another history: dropped")

    def _keep_changes(self, views: list[EpochView]) -> dict[int, dict[str, np.ndarray]]:
        """Move the epochs' edge changes into the graph view and their applications' per-vertex arrays into
        the histories; the undo records that made, by epoch (to archive with each)."""
        undo: dict[int, dict[str, np.ndarray]] = {}
        for v in views:
            full = bool(getattr(v.result, "full_changes", False))
            e = v.result.epoch
            rec: dict[str, np.ndarray] = {}
            if v.result.edge_changes is not None or full:  # archived epochs carry no graph
                skipped = v.result.skipped
                self.graph.apply(e, v.result.edge_changes, full, skipped[0] if skipped else None)
                v.result.edge_changes = None  # the graph history has them now
                rec.update(self.graph.undo_record(e) or {})
            if self._keep_apps(v):
                for (app, f), history in self.histories().items():
                    rec.update({f"{app}.{f}.{k}": a for k, a in (history.undo_record(e) or {}).items()})
            if rec:
                undo[e] = rec
        return undo

    def _refresh_algorithms(self) -> None:
        """The algorithms any retained epoch has scores for (under the lock)."""
        algos: set[str] = set()
        for v in self._epochs.values():
            algos.update(v.result.scores)
        self._algorithms = tuple(sorted(algos))

    def _apply_names(self, u: NamesUpdate) -> None:
        """Write a :func:`names_update` (under the lock)."""
        if u.book is not None:
            self.names = self._book = u.book
        else:
            self._book.apply(u.writes, u.tail, u.index, u.recent)

    def _cool(self, views: list[EpochView]) -> None:
        """Serve ``views`` from their archive files from now on (those still in memory, and archived)."""
        if self.archive is None:
            return
        for v in views:
            if v.cold:
                continue
            got = self.archive.mapped_with_undo(v.result.epoch)
            if got is None:
                continue  # not archived (a disk error): it stays in memory
            result, ranks, undo = got
            if ranks is not None:
                v.ranks = ranks
            if undo is not None:
                self.graph.map_undo(v.result.epoch, undo)
                for (app, f), history in self.histories().items():
                    prefix = f"{app}.{f}."
                    history.map_undo(v.result.epoch, {k[len(prefix):]: a for k, a in undo.items() if k.startswith(prefix)})
            v.result = result
            v.cold = True
            v._derived = {}

    def histories(self) -> dict[tuple[str, str], ArrayHistory]:
        """The histories of the applications' per-vertex fields, by (application, field); their undo
        records are archived under ``application.field.`` keys."""
        return {
            ("components", "labels"): self.components,
            ("landmarks", "dist_to"): self.landmarks_to, ("landmarks", "dist_from"): self.landmarks_from,
        }

    def _keep_apps(self, v: EpochView) -> bool:
        """Move the epoch's big per-vertex arrays into the histories; the view keeps the small parts.
        True when any was kept."""
        apps = getattr(v.result, "apps", None) or {}
        e = v.result.epoch
        histories = self.histories()
        kept = False
        for name, r in list(apps.items()):
            arrays = r.per_vertex() if isinstance(r, AppResult) else {}
            if arrays and all((name, f) in histories for f in arrays):  # else the view keeps them whole
                for f, a in arrays.items():
                    if not histories[(name, f)].push(e, a):
                        self.resend_whole = True  # a patch of an epoch the history missed
                apps[name] = r.without_per_vertex()
                kept = True
        return kept

    @property
    def algorithms(self) -> tuple[str, ...]:
        """The algorithms that any retained epoch has scores for."""
        return self._algorithms

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
            if view is None and epoch in self._merged_into:
                raise NotFound(
                    f"epoch {epoch} was sealed but not ranked on its own (ranking had fallen behind, or the "
                    f"service restarted before ranking it): epoch {self._merged_into[epoch]} contains it", code="epoch_not_ranked",
                )
            if view is None:
                first, last = next(iter(self._epochs)), next(reversed(self._epochs))
                raise NotFound(f"epoch {epoch} is not retained (retained: {first}..{last})", code="epoch_not_found")
            return view

    def recent(self, limit: int) -> list[EpochView]:
        """The newest ``limit`` epochs, newest first."""
        with self._lock:
            out: list[EpochView] = []
            for v in reversed(self._epochs.values()):
                if len(out) >= limit:
                    break
                out.append(v)
            return out

    def epoch_numbers(self, after: int = 0) -> list[int]:
        """The retained (ranked) epochs above ``after``, oldest first."""
        with self._lock:
            return [e for e in self._epochs if e > after]

    def retained(self) -> int:
        with self._lock:
            return len(self._epochs)

    @property
    def index(self) -> Mapping[str, int]:
        """The names' index (name -> id), read-only: what a test compares with a dict."""
        return self._book.by_name

    def id_of(self, name: str) -> int | None:
        """The id a vertex's name has now (None: no vertex has it)."""
        pending = self._unindexed  # read first: the book is swapped in before this is cleared
        return scan_id(pending, name) if pending is not None else self._book.get(name)

    def vertex_id(self, name: str) -> int:
        i = self.id_of(name)
        if i is None:
            raise NotFound(f"unknown vertex {name!r}", code="vertex_not_found")
        return i

    def search(self, prefix: str, limit: int, vertices: int, scan: int = 10_000, present: np.ndarray | None = None) -> list[str]:
        """Up to ``limit`` names starting with ``prefix`` among the first ``vertices`` ids, in name order
        (``present``, window mode: only the ids it marks).

        Looks at no more than ``scan`` candidates, so a prefix shared by most
        vertices of a later epoch cannot make one request walk the whole index.
        The book's name order holds each indexed name once (never an empty name), and
        maybe names no longer indexed; each is checked on the id the index maps
        it to now: with reused ids a name that moved is listed for its new id only.
        """
        pending = self._unindexed
        if pending is not None:  # the names taken back are being indexed: the ones with this prefix, by a pass
            index = scan_index(pending, prefix)
            return search_names(index.get, iter(sorted(index)), prefix, limit, vertices, scan, present)
        book = self._book
        return search_names(book.get, book.starting(prefix), prefix, limit, vertices, scan, present)
