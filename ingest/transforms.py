"""Transforms: one raw record -> the updates of one transaction.

A transform is a plain function from a decoded event to a list of updates,
registered by name together with the type it decodes. The built-ins are
``edges`` (generic graph events) and ``tweets`` (Kineograph's feed). A record
that fails anywhere here raises :class:`~ingest.exceptions.BadRecord`; the
caller sends it to the dead-letter sink and goes on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import msgspec

from ingest.events import (
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
    fixed_weight,
)
from ingest.exceptions import BadRecord, IngestError

# A tweet with more mentions or tags than this is spam or an attack on the
# shard buffers; Twitter's own limit of 280 characters allows far fewer.
MAX_TWEET_FANOUT = 64


@dataclass(frozen=True)
class Transform:
    """A named transform: how to decode a record and what updates it makes."""

    name: str
    schema: Any
    apply: Callable[[Any], list[Update]]
    # The edge types PageRank ranks by default for this kind of stream (None: all types).
    rank_types: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "_decoder", msgspec.json.Decoder(self.schema))

    def __call__(self, raw: bytes) -> list[Update]:
        """Parse and transform one record; raises BadRecord with the reason."""
        return self.apply(decode(self._decoder, raw))  # type: ignore[attr-defined]


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


TRANSFORMS: dict[str, Transform] = {}


def register_transform(transform: Transform) -> Transform:
    """Make a transform available by name (``--transform NAME``)."""
    TRANSFORMS[transform.name] = transform
    return transform


def get_transform(name: str) -> Transform:
    try:
        return TRANSFORMS[name]
    except KeyError:
        raise IngestError(f"unknown transform {name!r}; known: {sorted(TRANSFORMS)}") from None


register_transform(Transform("edges", GraphEvent, edges_transform, rank_types=None))
register_transform(Transform("tweets", Tweet, tweets_transform, rank_types=("mentions",)))
