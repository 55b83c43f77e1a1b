"""The batch path (Transform.feed into the Router's columns) against one record at a time.

Rounds of events, good and bad mixed, go through ``feed`` and through the
per-record path (``transform(raw)`` then ``Router.add``, a dead letter on
BadRecord). Both must give the same batches, row for row and in the same
order (the order of a transaction's vertex updates is its last-writer-wins
tiebreak), and the same rejected events with the same reasons, in order.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulsegraph.ingest import batch as batch_module
from pulsegraph.ingest.batch import Router
from pulsegraph.ingest.events import encode_attrs
from pulsegraph.ingest.exceptions import BadRecord
from pulsegraph.ingest.transforms import (
    MAX_TWEET_FANOUT,
    Event,
    _user_attrs,
    get_transform,
)
from tests.ingest.test_transforms import _records

N_SHARDS = 3
_names = st.sampled_from(["alice", "bob", "carol", "Bob", "é" * 64, "é" * 65, "x" * 256, "x" * 257, "😀" * 64, "😀" * 65, "", "#x", "dave"])
_tags = st.sampled_from(["x", "X", "#x", "##x", "Rust", "rust", "#", "", "é" * 63, "é" * 64, "t" * 255, "t" * 256, "😀" * 63, "😀" * 64])
_ts = st.one_of(st.none(), st.floats(0, 2e9), st.integers(0, 10**6), st.just(1e309), st.sampled_from([1.0, 2.0]))
_tweets = st.fixed_dictionaries(
    {"user": _names},
    optional={
        "mentions": st.lists(_names, max_size=4) | st.lists(st.text(max_size=3), min_size=MAX_TWEET_FANOUT - 1, max_size=MAX_TWEET_FANOUT + 2),
        "hashtags": st.lists(_tags, max_size=4),
        "text": st.text(max_size=5) | st.integers(),
        "ts": _ts,
    },
).map(lambda o: json.dumps(o, ensure_ascii=False).encode("utf-8", "surrogatepass"))
_edge_events = st.fixed_dictionaries(
    {"op": st.sampled_from(["add_edge", "remove_edge", "upsert_vertex"]), "src": _names, "dst": _names, "id": _names},
    optional={"ts": _ts, "weight": st.floats(0, 10), "attrs": st.dictionaries(st.text(max_size=2), st.integers(), max_size=2)},
).map(lambda o: json.dumps(o).encode())
# Events as the ingest actor makes them: no newline but trailing ones, never blank.
_raws = st.tuples(
    st.one_of(_tweets, _tweets, _tweets, _edge_events, _records).map(lambda r: r.replace(b"\n", b" ")),
    st.sampled_from([b"", b"\n", b"\r\n"]),
).map(lambda t: t[0] + t[1]).filter(lambda r: r.strip())
# (partition, events per offset) per round: several events of one offset are a packed message.
_rounds = st.lists(
    st.lists(st.tuples(st.sampled_from(["p:0", "p:1"]), st.lists(_raws, min_size=1, max_size=3)), max_size=12),
    min_size=1,
    max_size=3,
)


def resolved(batches):
    """Batches with every id replaced by its name: comparable whatever the interning."""
    out = []
    for b in batches:
        edges = [
            (b.partitions[b.e_part[i]], int(b.e_off[i]), b.names[b.e_src[i]], b.names[b.e_dst[i]], b.types[b.e_type[i]],
             int(b.e_sign[i]), int(b.e_weight[i]), float(b.e_ts[i]))
            for i in range(len(b.e_off))
        ]
        vertices = [
            (b.partitions[b.v_part[i]], int(b.v_off[i]), b.names[b.v_id[i]], b.v_attrs[i], float(b.v_ts[i]))
            for i in range(len(b.v_off))
        ]
        out.append((edges, vertices))
    return out


def one_at_a_time(transform, router, partition, events):
    rejected = []
    for e in events:
        try:
            updates = transform(e.raw)
        except BadRecord as exc:
            rejected.append((e, str(exc)))
            continue
        router.add(partition, e.offset, updates)
    return rejected


def check_rounds(name, rounds):
    transform = get_transform(name)
    fast, slow = Router(N_SHARDS), Router(N_SHARDS)
    offsets = {"p:0": 0, "p:1": 0}
    for rnd in rounds:
        by_part: dict[str, list[Event]] = {}
        for part, raws in rnd:
            by_part.setdefault(part, []).extend(Event(offsets[part], i, r) for i, r in enumerate(raws))
            offsets[part] += 1
        for part, events in by_part.items():
            got = [(e, reason) for e, reason in transform.feed(fast, part, events)]
            assert got == one_at_a_time(transform, slow, part, events)
        assert resolved(fast.take()) == resolved(slow.take())


@pytest.mark.slow  # ~8 s of random rounds: make test runs it, make check does not
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(rounds=_rounds, name=st.sampled_from(["tweets", "edges"]))
def test_batch_path_equals_one_record_at_a_time(rounds, name):
    check_rounds(name, rounds)


@pytest.mark.slow  # ~3 s: make test runs it, make check does not
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(rounds=_rounds)
def test_same_when_the_name_table_is_dropped_every_round(rounds):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(batch_module, "MAX_TABLE_NAMES", 0)
        check_rounds("tweets", rounds)


def test_a_bad_record_in_a_large_round_rejects_only_itself():
    """One malformed event among many: the halving keeps the rest on the batch path, and order holds."""
    good = [json.dumps({"user": f"u{i % 7}", "mentions": [f"u{i % 5}"], "hashtags": ["T"], "ts": float(i)}).encode() for i in range(500)]
    raws = good[:123] + [b'{"user": "u1", "mentions": [7]}'] + good[123:400] + [b"{not json"] + good[400:]
    events = [Event(o, 0, r) for o, r in enumerate(raws)]
    transform = get_transform("tweets")
    fast, slow = Router(N_SHARDS), Router(N_SHARDS)
    rejected = transform.feed(fast, "p:0", events)
    assert [(e.offset, reason.split(":")[0]) for e, reason in rejected] == [(123, "invalid event"), (401, "malformed JSON")]
    assert rejected == one_at_a_time(transform, slow, "p:0", events)
    assert resolved(fast.take()) == resolved(slow.take())


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=20))
def test_the_batch_path_encodes_an_authors_attributes_as_the_shards_would(stamps):
    """The batch path writes a tweet's author's attributes already encoded, one encoder call for the
    lot; the bytes must be what encoding the dict gives, whatever the float (the shards keep them)."""
    assert _user_attrs(stamps) == [encode_attrs({"kind": "user", "last_seen": t}) for t in stamps]
