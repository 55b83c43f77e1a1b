"""The alert rule kinds and their evaluation: pure functions of a ranked epoch and the ranked epoch before it.

:mod:`pulsegraph.api.alerts` keeps the rules and the retained alerts and calls :func:`evaluate` once per ranked epoch;
nothing here keeps state between calls, which is what makes an epoch's alerts a pure function of the two
epochs and the rules (see :mod:`pulsegraph.api.alerts` for the promise).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from pulsegraph.api.models import (
    MAX_RANK,
    ComponentSizeRule,
    RankMoveRule,
    TopicPersistenceRule,
    TopKRule,
)
from pulsegraph.api.queries import app_result
from pulsegraph.api.store import EpochView, ResultStore
from pulsegraph.compute.apps.components import ComponentsResult
from pulsegraph.compute.apps.exposure import TopicsResult

# Alerts one rule raises on one epoch, most notable first ("any vertex of the top 1000" can change
# wholesale when a graph is young); past it they are counted as dropped, not listed.
MAX_PER_RULE = 100
# Alerts of one epoch in all, in rule order: bounds the retained alerts' memory (--retain-epochs x this).
MAX_PER_EPOCH = 1000

@dataclass(frozen=True)
class Rule:
    id: int
    since_epoch: int
    created_at: str
    spec: Any  # one of pulsegraph.api.models' rule kinds

    def body(self) -> dict:
        """The rule as the API answers it and the file keeps it (the spec with its defaults filled)."""
        return {"id": self.id, "since_epoch": self.since_epoch, "created_at": self.created_at,
                "rule": self.spec.model_dump(mode="json")}


@dataclass(frozen=True)
class EpochAlerts:
    epoch: int
    previous_epoch: int | None  # None: the ranked epoch before is not retained, so no alerts
    alerts: tuple[dict, ...]
    dropped: int


# -- the rule kinds ------------------------------------------------------------------------------------
# Each returns how many alerts the rule raises on the epoch and the first ``limit`` of them as (event,
# subject, old, new), in a stable order (most notable first), from the two epochs alone. Only those
# listed are built one by one: the count is the arrays' (a young graph can change wholesale).
Found = tuple[str, str, Any, Any]


def _index_of(store: ResultStore, name: str | None, n: int) -> int | None:
    i = store.id_of(name) if name is not None else None
    return i if i is not None and i < n else None


def _holds(view: EpochView, ids: np.ndarray) -> np.ndarray:
    """Per id, is the vertex in the epoch's snapshot (with --window, a known vertex may have left it)."""
    r = view.result
    present = getattr(r, "present", None)
    if present is None:
        return ids < r.vertices
    p = np.asarray(present, dtype=bool)
    return (ids < len(p)) & (p[np.minimum(ids, len(p) - 1)] if len(p) else False)


def _pair_of(view: EpochView, prev: EpochView, algo: str, cand: np.ndarray) -> tuple:
    """(cand, rank now, rank before (0: none), in the snapshot now, in it before) for the vertex ids ``cand``."""
    new_r, old_r = np.asarray(view.ranks[algo]), np.asarray(prev.ranks[algo])
    was_in = _holds(prev, cand) & (cand < len(old_r))  # a vertex new in this epoch had no rank before
    old = np.zeros(len(cand), np.int64)
    old[was_in] = old_r[cand[was_in]]
    return cand, new_r[cand].astype(np.int64), old, _holds(view, cand), was_in


def _ranked_pair(view: EpochView, prev: EpochView, algo: str, memo: dict) -> tuple | None:
    """The vertices in the top MAX_RANK of ``algo`` in either epoch, shared by the rules of one epoch (each
    rule then filters these ~2,000 entries, never the graph)."""
    key = ("ranked", algo)
    if key not in memo:
        got = None
        if algo in view.ranks and algo in prev.ranks:
            cand = np.union1d(np.asarray(view.top[algo][:MAX_RANK]), np.asarray(prev.top[algo][:MAX_RANK])).astype(np.int64)
            got = _pair_of(view, prev, algo, cand)
        memo[key] = got
    return memo[key]


def _one(view: EpochView, prev: EpochView, algo: str, store: ResultStore, name: str) -> tuple | None:
    """The same for one watched vertex, at any rank."""
    if algo not in view.ranks or algo not in prev.ranks:
        return None
    i = _index_of(store, name, len(view.ranks[algo]))
    return _pair_of(view, prev, algo, np.array([i], dtype=np.int64)) if i is not None else None


def _top_k(spec: TopKRule, view: EpochView, prev: EpochView, store: ResultStore, memo: dict, limit: int) -> tuple[int, list[Found]]:
    got = _one(view, prev, spec.algo, store, spec.vertex) if spec.vertex is not None else _ranked_pair(view, prev, spec.algo, memo)
    if got is None:
        return 0, []
    cand, new, old, is_in, was_in = got
    k = spec.k
    was, now = was_in & (old <= k), is_in & (new <= k)
    names = store.names
    out: list[Found] = []
    count = 0
    if spec.on in ("enter", "both"):
        hit = np.flatnonzero(now & ~was)
        count += len(hit)
        for j in hit[np.argsort(new[hit], kind="stable")][:limit].tolist():
            out.append(("entered", names[int(cand[j])], int(old[j]) if was_in[j] else None, int(new[j])))
    if spec.on in ("leave", "both"):
        hit = np.flatnonzero(was & ~now)
        count += len(hit)
        for j in hit[np.argsort(old[hit], kind="stable")][: max(0, limit - len(out))].tolist():
            out.append(("left", names[int(cand[j])], int(old[j]), int(new[j]) if is_in[j] else None))  # None: left the window
    return count, out


def _rank_move(spec: RankMoveRule, view: EpochView, prev: EpochView, store: ResultStore, memo: dict, limit: int) -> tuple[int, list[Found]]:
    if spec.vertex is not None:
        got = _one(view, prev, spec.algo, store, spec.vertex)
        within = None
    else:
        got = _ranked_pair(view, prev, spec.algo, memo)
        within = spec.within
    if got is None:
        return 0, []
    cand, new, old, is_in, was_in = got
    change = old - new  # places gained
    keep = is_in & was_in & (np.abs(change) >= spec.places)  # in both epochs: a vertex new (or gone) has not moved
    if within is not None:
        keep &= (new <= within) | (old <= within)
    if spec.direction == "up":
        keep &= change > 0
    elif spec.direction == "down":
        keep &= change < 0
    hit = np.flatnonzero(keep)
    hit = hit[np.lexsort((new[hit], -np.abs(change[hit])))]
    names = store.names
    return len(hit), [("rose" if change[j] > 0 else "fell", names[int(cand[j])], int(old[j]), int(new[j])) for j in hit[:limit].tolist()]


def _component_size(spec: ComponentSizeRule, view: EpochView, prev: EpochView, store: ResultStore, memo: dict, limit: int) -> tuple[int, list[Found]]:
    # The archive keeps each epoch's largest components (not the labels of every vertex), so this reads
    # those: a component is named by its representative, and sizes beyond the largest 1,000 are not seen.
    if "components" not in memo:
        c, p = app_result(view, ComponentsResult), app_result(prev, ComponentsResult)
        if c is None or p is None:
            memo["components"] = None
        else:
            ptop, psizes = np.asarray(p.top).tolist(), np.asarray(p.top_sizes).tolist()
            complete = len(ptop) >= int(p.count)
            memo["components"] = (list(zip(np.asarray(c.top).tolist(), np.asarray(c.top_sizes).tolist())),
                                  dict(zip(ptop, psizes)), complete, psizes[-1] if psizes else 0)
    if memo["components"] is None:
        return 0, []
    now, before, complete, smallest = memo["components"]
    n = spec.size
    # A representative absent from the previous list had no component of its own then, or (were the list
    # cut at its bound) one no larger than the list's smallest: below n for sure only when that is below n.
    absent_below = complete or smallest < n
    names = store.names
    out: list[Found] = []
    count = 0
    for rep, size in now:
        if size < n:
            break  # largest first
        old = before.get(rep)
        if (old is None and absent_below) or (old is not None and old < n):
            count += 1
            if len(out) < limit:
                out.append(("reached", names[rep], old, int(size)))
    return count, out


def _topics_pair(view: EpochView, prev: EpochView, memo: dict) -> tuple | None:
    """(tags, users, persistence now, persistence before (NaN: the topic had none)), shared by the rules of one epoch."""
    if "topics" in memo:
        return memo["topics"]
    t, p = app_result(view, TopicsResult), app_result(prev, TopicsResult)
    got = None
    # Curves are recounted within a time budget: counted at the same epoch, they are the same curves.
    if t is not None and p is not None and int(t.as_of) != int(p.as_of):
        tags = np.asarray(t.tags).astype(np.int64)
        ptags = np.asarray(p.tags).astype(np.int64)
        order = np.argsort(ptags, kind="stable")
        sorted_tags = ptags[order]
        pos = np.minimum(np.searchsorted(sorted_tags, tags), max(len(ptags) - 1, 0))
        before = np.full(len(tags), np.nan)
        if len(ptags):
            found = sorted_tags[pos] == tags
            before[found] = np.asarray(p.persistence, dtype=np.float64)[order][pos[found]]
        got = (tags, np.asarray(t.users), np.asarray(t.persistence, dtype=np.float64), before)
    memo["topics"] = got
    return got


def _topic_persistence(spec: TopicPersistenceRule, view: EpochView, prev: EpochView, store: ResultStore, memo: dict, limit: int) -> tuple[int, list[Found]]:
    pair = _topics_pair(view, prev, memo)
    if pair is None:
        return 0, []
    tags, users, now, before = pair
    keep = users >= spec.min_users
    if spec.topic is not None:
        i = store.id_of(spec.topic)
        keep &= tags == (i if i is not None else -1)
    v = spec.value
    was_above = before >= v  # False for NaN: a topic new in this epoch rises from nothing
    up = keep & (now >= v) & ~was_above
    down = keep & (now < v) & was_above
    names = store.names
    out: list[Found] = []
    hit = np.flatnonzero(up if spec.direction == "up" else down if spec.direction == "down" else up | down)
    for j in hit[:limit].tolist():  # in the epoch's topic order: most persistent first
        old = None if np.isnan(before[j]) else float(before[j])
        out.append(("rose_above" if up[j] else "fell_below", names[int(tags[j])], old, float(now[j])))
    return len(hit), out


_KINDS: dict[str, Callable[..., tuple[int, list[Found]]]] = {
    "top_k": _top_k, "rank_move": _rank_move, "component_size": _component_size, "topic_persistence": _topic_persistence,
}


def _message(spec: Any, event: str, subject: str, old: Any, new: Any) -> str:
    if spec.kind == "top_k":
        was = f"was {old}" if old is not None else "new vertex"
        now = f"rank {new}" if new is not None else "out of the window"
        return f"{subject} {event} the top {spec.k} of {spec.algo}: {now} ({was})"
    if spec.kind == "rank_move":
        moved = abs(old - new)
        return f"{subject} {event} {moved} place{'s' if moved != 1 else ''} in {spec.algo}: rank {old} -> {new}"
    if spec.kind == "component_size":
        was = f"was {old}" if old is not None else "not a component of its own before"
        return f"the component of {subject} reached {new} vertices ({was})"
    was = f"was {old:.4f}" if old is not None else "a new topic"
    side = "at or above" if event == "rose_above" else "below"
    return f"{subject} persistence {new:.4f}, {side} {spec.value:g} ({was})"


def evaluate(view: EpochView, rules: list[Rule], store: ResultStore) -> EpochAlerts:
    """The alerts of one epoch: a function of it, the ranked epoch before it, and the rules (see the module)."""
    e = view.result.epoch
    prev = view.previous
    if prev is None:
        return EpochAlerts(e, None, (), 0)
    out: list[dict] = []
    dropped = 0
    memo: dict = {}
    for rule in rules:
        if rule.since_epoch > e:
            continue
        spec = rule.spec
        room = max(0, min(MAX_PER_RULE, MAX_PER_EPOCH - len(out)))
        count, found = _KINDS[spec.kind](spec, view, prev, store, memo, room)
        dropped += count - len(found)
        for event, subject, old, new in found:
            out.append({
                "rule": rule.id, "kind": spec.kind, "epoch": e, "previous_epoch": prev.result.epoch, "event": event,
                "subject": subject, "algo": getattr(spec, "algo", None), "old": old, "new": new,
                "message": _message(spec, event, subject, old, new),
            })
    return EpochAlerts(e, prev.result.epoch, tuple(out), dropped)
