"""The arithmetic of the reads: what each route computes from the store, as plain functions of it.

Owns the answers' numbers (ranks, movers, trends, neighbor order, usage points); knows nothing of HTTP
beyond raising the API's errors for what is not there. Everything is read from the
:class:`~pulsegraph.api.store.ResultStore` in memory (or its memory-mapped archive): no actor is called.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import orjson

from pulsegraph.api.exceptions import ApiError, NotFound
from pulsegraph.api.graph import Edges
from pulsegraph.api.ranking import held_in_both, mover_items
from pulsegraph.api.store import EpochView, ResultStore
from pulsegraph.compute.apps.base import AppResult
from pulsegraph.compute.apps.components import ComponentsResult
from pulsegraph.compute.apps.exposure import TopicsResult
from pulsegraph.compute.apps.runner import RESULT_TYPES
from pulsegraph.compute.apps.trends import TrendsResult
from pulsegraph.ingest.events import WEIGHT_SCALE


def view_with(store: ResultStore, epoch: int | None, algo: str | None = None) -> EpochView:
    view = store.get(epoch)
    if algo is not None and algo not in view.result.scores:
        # The schema's enum turned away unknown names; this epoch was ranked without this one.
        raise NotFound(f"epoch {view.result.epoch} has no {algo} scores (it has: {', '.join(view.result.scores)})",
                       code="algo_not_in_epoch")
    return view


def vertex_in(store: ResultStore, view: EpochView, name: str) -> int:
    i = store.vertex_id(name)
    r = view.result
    if i >= r.known_vertices():
        raise NotFound(f"vertex {name!r} is not in epoch {r.epoch}", code="vertex_not_found")
    if not r.holds(i):
        # Known, but every edge and attribute of it has left the window: not in this epoch's snapshot.
        raise NotFound(
            f"vertex {name!r} is outside the window at epoch {r.epoch} (window {r.window} s, watermark {r.watermark}): "
            "it has no live edge and no attribute written inside it",
            code="vertex_outside_window",
        )
    return i


def top_body(store: ResultStore, k: int, algo: str, epoch: int | None) -> bytes:
    """The top ``k`` of ``algo`` as the route's JSON, from the items encoded once per epoch."""
    view = view_with(store, epoch, algo)
    items = view.top_items(algo, store.names)[:k]
    # The certificate of these k: the epoch's proven error bound, and whether it proves their order.
    bound = view.result.bound(algo)
    m = min(view.certified_ranks(algo), len(items))
    cert = b'"error_bound":%s,"certified":%s,"certified_ranks":%d' % (
        orjson.dumps(bound), b"true" if bound is not None and m == len(items) else b"false", m,
    )
    return b'{"epoch":%d,"algo":%s,%s,"items":[%s]}' % (view.result.epoch, orjson.dumps(algo), cert, b",".join(items))


R = TypeVar("R", bound=AppResult)


def app_result(view: EpochView, kind: type[R]) -> R | None:
    """The epoch's result of the application that publishes ``kind``, or None (off, or an epoch before it)."""
    return next((r for r in (getattr(view.result, "apps", None) or {}).values() if isinstance(r, kind)), None)


def apps_of(view: EpochView, kind: type[R]) -> R:
    """As :func:`app_result`; a 404 when the epoch has none."""
    got = app_result(view, kind)
    if got is None:
        name = next((n for n, t in RESULT_TYPES.items() if t is kind), kind.__name__)
        raise NotFound(f"epoch {view.result.epoch} has no {name}", code="app_not_in_epoch")
    return got


def component_of(store: ResultStore, view: EpochView, i: int) -> dict | None:
    e, n = view.result.epoch, view.result.known_vertices()
    if app_result(view, ComponentsResult) is None or not store.components.covers(e):
        return None  # the application is off, or the epoch is from before a restart (labels not archived)
    label = int(store.components.at(e, np.zeros(1, np.int64), np.array([i]))[0])
    if label < 0:
        return None

    def sizes() -> np.ndarray:
        labels = store.components.row(e, 0, n)
        return np.bincount(labels[labels >= 0])

    size = view.derived("component_sizes", sizes)
    return {"id": store.names[label], "size": int(size[label]) if label < len(size) else 0}


def vertex(store: ResultStore, name: str, epoch: int | None) -> dict:
    view = store.get(epoch)
    i = vertex_in(store, view, name)
    r = view.result
    return {
        "vertex": name,
        "epoch": r.epoch,
        "out_degree": int(r.out_degree[i]),
        "in_degree": int(r.in_degree[i]),
        "scores": {algo: float(s[i]) for algo, s in r.scores.items()},
        "component": component_of(store, view, i),
    }


def quietly(query: Callable[..., Any], *args) -> bytes | None:
    """``query(*args)`` as its route's JSON (bytes pass as they are), or None where the route answers an error
    or the query gave None: a fast path (:mod:`pulsegraph.api.routes.fast`) then hands the request on to the route."""
    try:
        got = query(*args)
    except ApiError:
        return None
    if got is None:  # the query declined to answer here (:func:`neighbors`)
        return None
    return got if isinstance(got, bytes) else orjson.dumps(got, option=orjson.OPT_SERIALIZE_NUMPY)


def history(store: ResultStore, name: str, algo: str, limit: int) -> dict:
    view_with(store, None, algo)
    i = store.vertex_id(name)
    items = []
    for v in store.recent(limit):
        ranks = v.ranks.get(algo)
        if ranks is None or i >= len(ranks) or not v.result.holds(i):
            continue
        items.append({"epoch": v.result.epoch, "score": float(v.result.scores[algo][i]), "rank": int(ranks[i])})
    items.reverse()
    return {"vertex": name, "algo": algo, "items": items}


# A vertex with more edges than this the way asked is a hub: the event loop does not read its edges (the
# neighbors route does, on a worker thread: O(degree), ~0.5 ms at 12,621 edges here, ~30 ms at 462 k), and
# its answers are kept (store.hubs).
HUB_EDGES = 16_384


def heaviest(other: np.ndarray, mult: np.ndarray, weight: np.ndarray, k: int, etype: np.ndarray) -> np.ndarray:
    """Positions of the ``k`` heaviest edges, heaviest first: by weight, then multiplicity (both descending),
    then the other end's id, then the type (a total order: the answer does not depend on the order the edges came in). A partition by weight, then a sort of only the edges at or above the k-th
    weight: a sort of every edge of a vertex of 12,621 took 1.2 ms, this 0.2 (distinct weights; ties at the
    k-th weight all go into the sort)."""
    if len(weight) > k:
        kth = np.partition(weight, len(weight) - k)[len(weight) - k]
        cand = np.flatnonzero(weight >= kth)
    else:
        cand = np.arange(len(weight))
    return cand[np.lexsort((etype[cand], other[cand], -mult[cand], -weight[cand]))][:k]


def neighbors(store: ResultStore, name: str, direction: str, type: str | None, limit: int, epoch: int | None,
              most: int | None = None) -> dict | None:
    """The route's answer. With ``most`` (the fast path, on the event loop): None, without waiting, while the
    graph view is taking an epoch in or when the vertex has more than ``most`` edges that way and its answer
    is not kept (:class:`~pulsegraph.api.hubs.HubEdges`); the route then reads it on a worker thread."""
    view = store.get(epoch)
    i = vertex_in(store, view, name)
    key = (view.result.epoch, i, direction, type, limit)

    def pick(edges: Edges) -> tuple[tuple[np.ndarray, ...], bool]:
        """The ``limit`` heaviest of ``edges`` (of ``type``), and whether the vertex is a hub (to keep them)."""
        other, et, mult, weight = edges
        degree = len(other)
        if type is not None:
            keep = et == (store.types.index(type) if type in store.types else -1)
            other, et, mult, weight = other[keep], et[keep], mult[keep], weight[keep]
        order = heaviest(other, mult, weight, limit, et)
        # Kept: a hub's (reading it is O(degree)), and any vertex's where each read is a call to a part of the view.
        return (other[order], et[order], mult[order], weight[order]), degree > HUB_EDGES or store.graph.remote

    if most is None:  # the route, on a worker thread: it may wait for another thread's read of the same answer
        picked = store.hubs.once(key, lambda: pick(store.graph.neighbors(i, direction, view.result.epoch)))
    else:
        got = store.hubs.get(key)
        if got is None:
            edges = store.graph.neighbors_now(i, direction, view.result.epoch, most)
            if edges is None:
                return None
            got, _ = pick(edges)  # at most ``most`` edges: no hub (most <= HUB_EDGES)
        picked = got
    types, names = store.types, store.names
    items = [
        {"vertex": names[o], "type": types[t] if t < len(types) else str(t), "weight": w / WEIGHT_SCALE, "multiplicity": m}
        for o, t, m, w in zip(*(a.tolist() for a in picked))
    ]
    return {"vertex": name, "epoch": view.result.epoch, "direction": direction, "items": items}


def _default_from(b: EpochView) -> int:
    """The ranked epoch before ``b`` (the one it follows, past the epochs it merged)."""
    return b.previous.result.epoch if b.previous is not None else b.result.epoch - 1


def movers(store: ResultStore, algo: str, from_: int | None, to: int | None, k: int) -> dict:
    """The vertices whose rank rose and fell most from ``from_`` to ``to`` (any two retained epochs, either order)."""
    b = view_with(store, to, algo)
    to_e = b.result.epoch
    from_e = from_ if from_ is not None else _default_from(b)
    a = view_with(store, from_e, algo)
    rising, falling = mover_items(a.ranks[algo], b.ranks[algo], b.result.scores[algo], store.names, k,
                                  held_in_both(a.result, b.result))
    return {"algo": algo, "from": from_e, "to": to_e, "rising": rising, "falling": falling}


def topics(store: ResultStore, sort: str, k: int, epoch: int | None) -> dict:
    view = store.get(epoch)
    t = apps_of(view, TopicsResult)
    tags = t.tags
    if sort == "controversy":
        order = np.arange(min(k, len(tags)))  # published in this order
    else:
        key = t.usage if sort == "usage" else t.users
        order = view.derived(f"topics_by_{sort}", lambda: np.lexsort((tags, -key)))  # up to every hashtag's
    names = store.names
    items = []
    for i in order[:k].tolist():
        items.append({
            "hashtag": names[int(tags[i])], "usage": int(t.usage[i]), "users": int(t.users[i]),
            "persistence": float(t.persistence[i]),
            "curve": [None if np.isnan(x) else float(x) for x in t.curve[i].tolist()],
            "exposed": [int(x) for x in t.reached[i].tolist()],
        })
    return {"epoch": view.result.epoch, "as_of": int(t.as_of), "sort": sort, "items": items}


def components(store: ResultStore, k: int, epoch: int | None) -> dict:
    view = store.get(epoch)
    c = apps_of(view, ComponentsResult)
    names = store.names
    items = [
        {"rank": r + 1, "id": names[v], "size": int(sz)}
        for r, (v, sz) in enumerate(zip(c.top[:k].tolist(), c.top_sizes[:k].tolist()))
    ]
    return {"epoch": view.result.epoch, "count": int(c.count), "items": items}


def usage_of(view: EpochView) -> dict[int, int]:
    t = apps_of(view, TrendsResult)
    return dict(zip(t.tags.tolist(), t.usage.tolist()))


def trends(store: ResultStore, from_: int | None, to: int | None, k: int) -> dict:
    """The hashtags whose usage rank rose and fell most from ``from_`` to ``to``, in the movers form."""
    b = store.get(to)
    to_e = b.result.epoch
    from_e = from_ if from_ is not None else _default_from(b)
    a = store.get(from_e)
    ua, ub = usage_of(a), usage_of(b)
    tags = np.array(sorted(set(ua) | set(ub)), dtype=np.int64)
    u1 = np.array([ua.get(t, 0) for t in tags.tolist()], dtype=np.int64)
    u2 = np.array([ub.get(t, 0) for t in tags.tolist()], dtype=np.int64)
    r1, r2 = np.empty(len(tags), np.int64), np.empty(len(tags), np.int64)
    r1[np.lexsort((tags, -u1))] = np.arange(1, len(tags) + 1)
    r2[np.lexsort((tags, -u2))] = np.arange(1, len(tags) + 1)
    change = r1 - r2
    names = store.names

    def pick(sign: int) -> list[dict]:
        c = change * sign
        cand = np.flatnonzero(c > 0)
        cand = cand[np.lexsort((r2[cand], -c[cand]))][:k]
        return [
            {"vertex": names[int(tags[i])], "from_rank": int(r1[i]), "to_rank": int(r2[i]), "change": int(change[i]),
             "score": float(u2[i]), "usage_from": int(u1[i]), "usage_to": int(u2[i])}
            for i in cand.tolist()
        ]

    return {"from": from_e, "to": to_e, "rising": pick(1), "falling": pick(-1)}


def usage(store: ResultStore, tag: str, limit: int) -> dict:
    """A hashtag's usage up to each of the last ``limit`` retained epochs, oldest first, and what each added."""
    i = store.vertex_id(tag)
    points: list[dict[str, Any]] = []
    for v in store.recent(limit):
        t = app_result(v, TrendsResult)
        if t is None or not v.result.holds(i):
            continue
        pos = np.searchsorted(t.tags, i)
        used = int(t.usage[pos]) if pos < len(t.tags) and t.tags[pos] == i else 0
        points.append({"epoch": v.result.epoch, "usage": used})
    points.reverse()
    for prev, p in zip([None, *points], points):
        p["new"] = p["usage"] - prev["usage"] if prev is not None and prev["epoch"] == p["epoch"] - 1 else None
    return {"hashtag": tag, "items": points}
