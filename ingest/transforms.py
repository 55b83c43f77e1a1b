"""Transforms: one raw record -> the updates of one transaction.

A transform is a plain function from a decoded event to a list of updates,
registered by name together with the type it decodes. The built-ins are
``edges`` (generic graph events) and ``tweets`` (Kineograph's feed); a user's
own is named ``package.module:NAME`` (see :func:`get_transform`). A record that
fails anywhere here raises :class:`~pulsegraph.ingest.exceptions.BadRecord`, and whatever
a transform's function raises is that record's failure too: the caller sends it
to the dead-letter sink, with the exception as the reason, and goes on.

The ingest actor hands a whole round of records to :meth:`Transform.feed`:
it decodes them in one msgspec call, and a transform with a batch path
(``emit``, here ``tweets``) writes their updates straight into the router's
columns. Whatever that fast path cannot vouch for (a chunk that fails to
decode, an event with an unusual field) goes through the per-record path
instead, at its place in the order, so the updates and the dead letters are
exactly those of one record at a time.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from itertools import chain
from typing import Any, Callable, NamedTuple

import msgspec
import numpy as np

from pulsegraph.ingest.batch import Router
from pulsegraph.ingest.events import (
    MAX_ID_BYTES,
    WEIGHT_SCALE,
    AddEdge,
    EdgeUpdate,
    GraphEvent,
    Tweet,
    Update,
    UpsertVertex,
    VertexUpdate,
    check_edge_type,
    check_id,
    check_ts,
    decode,
    encode_attrs,
    fixed_weight,
)
from pulsegraph.ingest.exceptions import BadRecord, IngestError

# A tweet with more mentions or tags than this is spam or an attack on the
# shard buffers; Twitter's own limit of 280 characters allows far fewer.
MAX_TWEET_FANOUT = 64
# A chunk of a round that fails to decode is halved until its pieces are this
# small, then decoded record by record: one bad record costs a few extra decodes
# instead of sending its whole round down the per-record path.
MIN_DECODE_CHUNK = 16


class Event(NamedTuple):
    """One event of a round: its position and its raw bytes (see :func:`events_of`)."""

    offset: int
    event_index: int  # its place in a message that packs several events
    raw: bytes


_ONE_VALUE = msgspec.json.Decoder()


def events_of(offset: int, raw: bytes) -> list[Event]:
    """The events of one record. A record may pack several newline-delimited events: each is its own
    transaction, numbered (offset, index); they share the offset, so an epoch holds all events of a
    record or none. A record that parses as one JSON value is one event, whatever its newlines (a
    producer that writes ``json.dumps(event, indent=2)``); a packed one fails that parse at its second
    line, after one event's worth of work."""
    body = raw.rstrip(b"\r\n")
    if b"\n" in body:
        try:
            _ONE_VALUE.decode(body)
        except msgspec.DecodeError:
            return [Event(offset, i, e) for i, e in enumerate(raw.split(b"\n")) if e.strip()]
        return [Event(offset, 0, raw)]
    return [Event(offset, 0, raw)] if raw and not raw.isspace() else []  # isspace: strip() without the copy


class Rejected(NamedTuple):
    """An event that cannot become a transaction, and why."""

    event: Event
    reason: str


# An emitter writes a decoded batch's updates into the router's columns. For an
# event it cannot vouch for it calls ``slow(k)``, which runs the per-record path
# for event k in place.
Emitter = Callable[[Router, int, list, list, Callable[[int], None]], None]


@dataclass(frozen=True)
class Transform:
    """A named transform: how to decode a record and what updates it makes."""

    name: str
    schema: Any
    apply: Callable[[Any], list[Update]]
    # The edge types PageRank ranks by default for this kind of stream (None: all types).
    rank_types: tuple[str, ...] | None = None
    # The batch path (see the module docstring); None: every event goes through ``apply``.
    emit: Emitter | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "_decoder", msgspec.json.Decoder(self.schema))

    def __call__(self, raw: bytes) -> list[Update]:
        """Parse and transform one record; raises BadRecord with the reason."""
        return self.apply(decode(self._decoder, raw))  # type: ignore[attr-defined]

    def feed(self, router: Router, partition: str, events: list[Event]) -> list[Rejected]:
        """Transform ``events`` (in offset order) into ``router``; returns the rejected ones, in order."""
        rejected: list[Rejected] = []
        self._feed(router, partition, events, rejected)
        return rejected

    def _feed(self, router: Router, partition: str, events: list[Event], rejected: list[Rejected]) -> None:
        if not events:
            return
        decoded = None
        try:
            # One line per event (an event holds no newline but trailing ones, which make blank
            # lines), and decode_lines skips blank lines: the count check makes sure item k is event k.
            decoded = self._decoder.decode_lines(b"\n".join([e.raw for e in events]))  # type: ignore[attr-defined]
        except (msgspec.DecodeError, RecursionError):
            pass
        if decoded is not None and len(decoded) == len(events):
            self._emit(router, partition, events, decoded, rejected)
        elif len(events) > MIN_DECODE_CHUNK:
            half = len(events) // 2
            self._feed(router, partition, events[:half], rejected)
            self._feed(router, partition, events[half:], rejected)
        else:
            mark, good, decoded = len(rejected), [], []
            for e in events:
                try:
                    decoded.append(decode(self._decoder, e.raw))  # type: ignore[attr-defined]
                    good.append(e)
                except BadRecord as exc:
                    rejected.append(Rejected(e, str(exc)))
            if good:
                self._emit(router, partition, good, decoded, rejected)
            # The emitter's rejections came after the decoder's: back into event order.
            rejected[mark:] = sorted(rejected[mark:], key=lambda r: (r.event.offset, r.event.event_index))

    def _emit(self, router: Router, partition: str, events: list[Event], decoded: list, rejected: list[Rejected]) -> None:
        def slow(k: int) -> None:
            try:
                updates = self.apply(decoded[k])
            except BadRecord as exc:
                rejected.append(Rejected(events[k], str(exc)))
                return
            except Exception as exc:  # noqa: BLE001 - a transform's own failure is the record's, not the stream's
                rejected.append(Rejected(events[k], f"transform {self.name} raised {type(exc).__name__}: {exc}"))
                return
            router.add(partition, events[k].offset, updates)

        if self.emit is None:
            for k in range(len(decoded)):
                slow(k)
        else:
            self.emit(router, router.partition_id(partition), [e.offset for e in events], decoded, slow)


def edges_transform(event: GraphEvent) -> list[Update]:
    if isinstance(event, UpsertVertex):
        return [VertexUpdate(check_id(event.id, "id"), dict(event.attrs), check_ts(event.ts))]
    sign = 1 if isinstance(event, AddEdge) else -1
    return [
        EdgeUpdate(
            check_id(event.src, "src"),
            check_id(event.dst, "dst"),
            check_edge_type(event.type),
            sign,
            fixed_weight(event.weight),
            check_ts(event.ts),
        )
    ]


def tweets_transform(tweet: Tweet) -> list[Update]:
    """user -mentions-> user and user -tags-> #hashtag, plus the kinds of the vertices.

    Each distinct mention and tag counts once per tweet. The hashtag vertices'
    ``kind`` lives on their own shards, so a tweet is a transaction that spans
    shards: it is visible in an epoch entirely or not at all.
    """
    user = check_id(tweet.user, "user")
    ts = check_ts(tweet.ts)
    mentions = list(dict.fromkeys(tweet.mentions))
    tags = list(dict.fromkeys(t.lstrip("#").lower() for t in tweet.hashtags))
    if len(mentions) + len(tags) > MAX_TWEET_FANOUT:
        raise BadRecord(f"tweet has {len(mentions) + len(tags)} mentions and hashtags, more than {MAX_TWEET_FANOUT}")
    one = fixed_weight(1.0)
    out: list[Update] = [VertexUpdate(user, {"kind": "user", "last_seen": ts}, ts)]
    for m in mentions:
        out.append(EdgeUpdate(user, check_id(m, "mentions[]"), "mentions", 1, one, ts))
    for t in tags:
        tag = check_id("#" + t if t else "", "hashtags[]")
        out.append(EdgeUpdate(user, tag, "tags", 1, one, ts))
        out.append(VertexUpdate(tag, {"kind": "hashtag"}, ts))
    return out


def _plain_id(name) -> bool:
    """True when ``name`` certainly passes :func:`~pulsegraph.ingest.events.check_id` (a str of at most
    MAX_ID_BYTES bytes, whatever its characters); anything else takes the per-record path."""
    return type(name) is str and 0 < len(name) <= MAX_ID_BYTES // 4


def _ids_of(router: Router, names: list, owner, plain: np.ndarray) -> list[Any]:
    """The router's ids of ``names``, interning new plain ones; a name that is not plain gives -1
    and sends the tweet that owns it (``owner[j]``) to the per-record path."""
    got: list[Any] = list(map(router.ids.get, names))
    if None in got:
        for j, found in enumerate(got):
            if found is None:
                if _plain_id(names[j]):
                    got[j] = router.vertex_id(names[j])
                else:
                    plain[owner[j]], got[j] = False, -1
    return got


# What a tweet writes to its hashtags, encoded (as pulsegraph.ingest.events.encode_attrs does: one object for all).
_HASHTAG_ATTRS = encode_attrs({"kind": "hashtag"})


def _user_attrs(last_seen: list[float]) -> list[bytes]:
    """``encode_attrs({"kind": "user", "last_seen": t})`` of each finite ``t``, with one encoder call for
    the lot: keys in sorted order, each float as msgspec writes it (no comma in any), so the same bytes
    (the batch path test holds it to the per-record path). A tweet's author is written every tweet: a
    dict each, pickled to the shard and encoded there, cost three times this."""
    if not last_seen:
        return []
    return [b'{"kind":"user","last_seen":%s}' % t for t in msgspec.json.encode(last_seen)[1:-1].split(b",")]


def tweets_emit(router: Router, part: int, offsets: list[int], tweets: list[Tweet], slow) -> None:
    """The batch path of :func:`tweets_transform`: the same updates, in the same order.

    Works on the whole batch at once: a few passes over its fields, then NumPy.
    Ids come from the router's table, so a name seen before costs one dict
    lookup; a raw hashtag maps to its vertex id through a memo of the same
    lifetime. A tweet that is anything but plain (a new long or empty id, too
    many mentions and tags, a ts that is not a finite float) goes to ``slow``
    at its place in the order.
    """
    n = len(tweets)
    plain = np.ones(n, dtype=bool)
    vertex_id = router.vertex_id
    tag_memo = router.memos.setdefault("tweets.tags", {})

    stamps = [t.ts for t in tweets]
    if None in stamps or not set(map(type, stamps)) <= {float}:
        for k, stamp in enumerate(stamps):
            if type(stamp) is not float:
                plain[k] = stamp is None
                stamps[k] = 0.0
    ts = np.array(stamps, dtype=np.float64)
    plain &= np.isfinite(ts)

    user_ids = _ids_of(router, [t.user for t in tweets], range(n), plain)

    mention_lists = [t.mentions for t in tweets]
    of_mention = np.repeat(np.arange(n), list(map(len, mention_lists)))
    mention_ids = _ids_of(router, list(chain.from_iterable(mention_lists)), of_mention, plain)

    tag_lists = [t.hashtags for t in tweets]
    of_tag = np.repeat(np.arange(n), list(map(len, tag_lists)))
    raw_tags = list(chain.from_iterable(tag_lists))
    tag_ids: list[Any] = list(map(tag_memo.get, raw_tags))
    if None in tag_ids:
        for j, t in enumerate(tag_ids):
            if t is None:
                name = "#" + raw_tags[j].lstrip("#").lower()
                if len(name) > 1 and _plain_id(name):
                    tag_ids[j] = tag_memo[raw_tags[j]] = vertex_id(name)
                else:
                    plain[of_tag[j]], tag_ids[j] = False, -1

    # Each distinct mention and tag counts once per tweet (ids are one-to-one with the names).
    m_id, of_mention = _first_per_tweet(np.array(mention_ids, dtype=np.int64), of_mention)
    t_id, of_tag = _first_per_tweet(np.array(tag_ids, dtype=np.int64), of_tag)
    plain &= np.bincount(of_mention, minlength=n) + np.bincount(of_tag, minlength=n) <= MAX_TWEET_FANOUT
    m_keep, t_keep = plain[of_mention], plain[of_tag]
    m_id, of_mention, t_id, of_tag = m_id[m_keep], of_mention[m_keep], t_id[t_keep], of_tag[t_keep]

    # Edges: per tweet its mentions, then its tags (a stable sort by tweet keeps that order).
    order = np.argsort(np.concatenate([of_mention, of_tag]), kind="stable")
    e_tweet = np.concatenate([of_mention, of_tag])[order]
    e_type = np.concatenate(
        [np.full(len(m_id), router.type_id("mentions"), np.int32), np.full(len(t_id), router.type_id("tags"), np.int32)]
    )[order]
    e_dst = np.concatenate([m_id, t_id])[order].astype(np.int32)
    # Vertices: per tweet its user, then its tags.
    users_at = np.flatnonzero(plain)
    order = np.argsort(np.concatenate([users_at, of_tag]), kind="stable")
    v_tweet = np.concatenate([users_at, of_tag])[order]
    user = np.array(user_ids, dtype=np.int32)
    v_id = np.concatenate([user[users_at], t_id.astype(np.int32)])[order]
    attrs = np.empty(len(v_id), dtype=object)
    attrs[:] = _user_attrs(ts[users_at].tolist()) + [_HASHTAG_ATTRS] * len(t_id)
    attrs = attrs[order]
    off = np.array(offsets, dtype=np.int64)

    def rows(a: int, b: int) -> tuple[dict, dict]:
        """Columns of the plain tweets a..b-1."""
        e = slice(*np.searchsorted(e_tweet, [a, b]))
        v = slice(*np.searchsorted(v_tweet, [a, b]))
        et, vt = e_tweet[e], v_tweet[v]
        edges = {
            "part": np.full(len(et), part, np.int32), "off": off[et], "src": user[et], "dst": e_dst[e], "type": e_type[e],
            "sign": np.ones(len(et), np.int8), "weight": np.full(len(et), WEIGHT_SCALE, np.int64),  # fixed_weight(1.0)
            "ts": ts[et],
        }
        vertices = {"part": np.full(len(vt), part, np.int32), "off": off[vt], "id": v_id[v], "attrs": attrs[v], "ts": ts[vt]}
        return edges, vertices

    done = 0
    for k in np.flatnonzero(~plain).tolist():
        if k > done:
            router.extend(*rows(done, k))
        slow(k)
        done = k + 1
    if n > done:
        router.extend(*rows(done, n))


def _first_per_tweet(ids: np.ndarray, tweet: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Keep the first of equal ids within each tweet (rows grouped by tweet, in order)."""
    if len(ids) < 2 or not (tweet[1:] == tweet[:-1]).any():
        return ids, tweet
    _, first = np.unique(tweet * (1 << 32) + ids, return_index=True)
    keep = np.zeros(len(ids), dtype=bool)
    keep[first] = True
    return ids[keep], tweet[keep]


TRANSFORMS: dict[str, Transform] = {}


def register_transform(transform: Transform) -> Transform:
    """Make a transform available by name (``--transform NAME``)."""
    TRANSFORMS[transform.name] = transform
    return transform


def get_transform(name: str) -> Transform:
    """The transform registered as ``name``; ``package.module:name`` imports the module first (its import
    registers the transform), so a user's own transform reaches every ingest actor by its name alone."""
    if name not in TRANSFORMS and ":" in name:
        module, _, _ = name.partition(":")
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise IngestError(f"transform {name!r}: cannot import {module!r}: {exc}") from exc
    try:
        return TRANSFORMS[name]
    except KeyError:
        raise IngestError(
            f"unknown transform {name!r}; known: {sorted(TRANSFORMS)} (a module's own: 'package.module:NAME', "
            f"where importing the module registers NAME with register_transform)"
        ) from None


register_transform(Transform("edges", GraphEvent, edges_transform, rank_types=None))
register_transform(Transform("tweets", Tweet, tweets_transform, rank_types=("mentions",), emit=tweets_emit))
