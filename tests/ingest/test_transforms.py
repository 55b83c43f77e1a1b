"""The ``edges`` and ``tweets`` transforms: raw record bytes -> updates, or BadRecord with a reason."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulsegraph.ingest.events import (
    MAX_ID_BYTES,
    WEIGHT_SCALE,
    EdgeUpdate,
    VertexUpdate,
    fixed_weight,
)
from pulsegraph.ingest.exceptions import BadRecord, IngestError
from pulsegraph.ingest.transforms import MAX_TWEET_FANOUT, get_transform

edges = get_transform("edges")
tweets = get_transform("tweets")


def rec(obj) -> bytes:
    return json.dumps(obj).encode()


def bad(transform, raw: bytes) -> str:
    """The reason ``transform`` refuses ``raw`` (fails the test if it is accepted)."""
    with pytest.raises(BadRecord) as info:
        transform(raw)
    return str(info.value)


# --------------------------------------------------------------------------- edges: valid


def test_add_edge_defaults():
    assert edges(rec({"op": "add_edge", "src": "a", "dst": "b"})) == [EdgeUpdate("a", "b", "link", 1, 1_000_000)]


def test_add_edge_weight_is_fixed_point_and_type_kept():
    out = edges(rec({"op": "add_edge", "src": "a", "dst": "b", "weight": 2.5, "type": "follows", "ts": 12.0}))
    assert out == [EdgeUpdate("a", "b", "follows", 1, 2_500_000, 12.0)]
    assert isinstance(out[0].weight, int)


def test_weight_rounds_to_the_nearest_micro_unit():
    [u] = edges(rec({"op": "add_edge", "src": "a", "dst": "b", "weight": 0.1234567}))
    assert u.weight == 123457
    [u] = edges(rec({"op": "add_edge", "src": "a", "dst": "b", "weight": 3}))  # an int is a valid weight
    assert u.weight == 3 * WEIGHT_SCALE


def test_weight_bounds_are_inclusive():
    [u] = edges(rec({"op": "add_edge", "src": "a", "dst": "b", "weight": 0}))
    assert u.weight == 0
    [u] = edges(rec({"op": "add_edge", "src": "a", "dst": "b", "weight": 1e9}))
    assert u.weight == 10**9 * WEIGHT_SCALE


def test_remove_edge_has_sign_minus_one():
    out = edges(rec({"op": "remove_edge", "src": "a", "dst": "b", "weight": 0.5}))
    assert out == [EdgeUpdate("a", "b", "link", -1, 500_000)]
    assert edges(rec({"op": "remove_edge", "src": "x", "dst": "y", "type": "t:1"})) == [
        EdgeUpdate("x", "y", "t:1", -1, 1_000_000)
    ]


def test_upsert_vertex():
    out = edges(rec({"op": "upsert_vertex", "id": "v1", "attrs": {"name": "V", "n": 3, "ok": True, "x": None}, "ts": 5.5}))
    assert out == [VertexUpdate("v1", {"name": "V", "n": 3, "ok": True, "x": None}, 5.5)]


def test_upsert_vertex_defaults_attrs_and_ts():
    assert edges(rec({"op": "upsert_vertex", "id": "v"})) == [VertexUpdate("v", {}, 0.0)]


def test_upsert_vertex_attrs_are_not_shared_between_records():
    a = edges(rec({"op": "upsert_vertex", "id": "v"}))[0]
    a.attrs["mutated"] = 1
    assert edges(rec({"op": "upsert_vertex", "id": "v"}))[0].attrs == {}


def test_unknown_fields_are_ignored_and_whitespace_allowed():
    raw = b'  {"op": "add_edge", "src": "a", "dst": "b", "extra": {"k": [1, 2]}}\n'
    assert edges(raw) == [EdgeUpdate("a", "b", "link", 1, 1_000_000)]


def test_id_of_exactly_max_bytes_is_accepted():
    ascii_id = "a" * MAX_ID_BYTES
    multi = "é" * (MAX_ID_BYTES // 2)  # 128 chars, 256 bytes
    assert len(multi.encode()) == MAX_ID_BYTES
    assert edges(rec({"op": "add_edge", "src": ascii_id, "dst": multi}))[0][:2] == (ascii_id, multi)


# --------------------------------------------------------------------------- edges: refused


def test_malformed_json():
    for raw in (b"", b"{", b'{"op": "add_edge",', b"not json", b"\xff\xfe\x00"):
        assert "malformed JSON" in bad(edges, raw), raw
        assert "malformed JSON" in bad(tweets, raw), raw
    # invalid UTF-8 inside a string the transform reads
    assert "malformed JSON" in bad(edges, b'{"op":"add_edge","src":"a\xff","dst":"b"}')
    assert "malformed JSON" in bad(tweets, b'{"user":"u\xff"}')
    # trailing junk after a valid record
    assert "malformed JSON" in bad(edges, b'{"op":"add_edge","src":"a","dst":"b"} x')
    assert "malformed JSON" in bad(tweets, b'{"user":"u"} x')


@pytest.mark.parametrize("raw", [b"[1, 2]", b'"add_edge"', b"42", b"null", b"true"])
def test_not_an_object(raw):
    assert "Expected `object`" in bad(edges, raw)
    assert "Expected `object`" in bad(tweets, raw)


def test_missing_op():
    assert "missing required field `op`" in bad(edges, rec({"src": "a", "dst": "b"}))


@pytest.mark.parametrize(
    "obj, field",
    [
        ({"op": "add_edge", "dst": "b"}, "src"),
        ({"op": "add_edge", "src": "a"}, "dst"),
        ({"op": "remove_edge", "src": "a"}, "dst"),
        ({"op": "upsert_vertex", "attrs": {}}, "id"),
    ],
)
def test_missing_field(obj, field):
    assert f"missing required field `{field}`" in bad(edges, rec(obj))


@pytest.mark.parametrize(
    "obj, where",
    [
        ({"op": "add_edge", "src": 1, "dst": "b"}, "$.src"),
        ({"op": "add_edge", "src": "a", "dst": None}, "$.dst"),
        ({"op": "add_edge", "src": "a", "dst": "b", "weight": "1"}, "$.weight"),
        ({"op": "add_edge", "src": "a", "dst": "b", "weight": True}, "$.weight"),
        ({"op": "add_edge", "src": "a", "dst": "b", "type": 3}, "$.type"),
        ({"op": "add_edge", "src": "a", "dst": "b", "ts": "now"}, "$.ts"),
        ({"op": "upsert_vertex", "id": ["v"]}, "$.id"),
        ({"op": "upsert_vertex", "id": "v", "attrs": []}, "$.attrs"),
        ({"op": "upsert_vertex", "id": "v", "attrs": {"nested": {"a": 1}}}, "$.attrs"),
        ({"op": 7, "src": "a", "dst": "b"}, "$.op"),
    ],
)
def test_wrong_typed_field(obj, where):
    reason = bad(edges, rec(obj))
    assert reason.startswith("invalid event: Expected"), reason
    assert where in reason, reason


def test_unknown_op():
    reason = bad(edges, rec({"op": "delete_everything", "src": "a", "dst": "b"}))
    assert "'delete_everything'" in reason and "$.op" in reason, reason


def test_non_finite_weight_is_refused():
    # JSON has no NaN/inf, but an overflowing literal would be inf if the decoder accepted it.
    reason = bad(edges, b'{"op":"add_edge","src":"a","dst":"b","weight":1e999}')
    assert "weight" in reason, reason
    reason = bad(edges, b'{"op":"remove_edge","src":"a","dst":"b","weight":-1e999}')
    assert "weight" in reason, reason
    reason = bad(edges, b'{"op":"add_edge","src":"a","dst":"b","weight":' + b"9" * 400 + b"}")
    assert "weight" in reason, reason


def test_fixed_weight_refuses_non_finite_values_itself():
    # The guard behind the decoder: whatever a decoder lets through, inf and NaN never become integers.
    for w in (float("inf"), float("-inf"), float("nan")):
        with pytest.raises(BadRecord, match="not a finite number"):
            fixed_weight(w)


def test_non_finite_ts_is_refused():
    assert "ts" in bad(edges, b'{"op":"add_edge","src":"a","dst":"b","ts":1e999}')
    assert "ts" in bad(edges, b'{"op":"upsert_vertex","id":"v","ts":-1e999}')
    assert "ts" in bad(tweets, b'{"user":"u","ts":1e999}')


@pytest.mark.parametrize("w", [-0.5, -1, -1e-9])
def test_negative_weight(w):
    reason = bad(edges, rec({"op": "add_edge", "src": "a", "dst": "b", "weight": w}))
    assert "outside [0, 1e+09]" in reason and repr(float(w)) in reason, reason
    assert "outside" in bad(edges, rec({"op": "remove_edge", "src": "a", "dst": "b", "weight": w}))


def test_weight_over_the_maximum():
    assert "outside [0, 1e+09]" in bad(edges, rec({"op": "add_edge", "src": "a", "dst": "b", "weight": 1.5e9}))


@pytest.mark.parametrize("field", ["src", "dst"])
def test_edge_id_too_long(field):
    obj = {"op": "add_edge", "src": "a", "dst": "b", field: "x" * (MAX_ID_BYTES + 1)}
    assert bad(edges, rec(obj)) == f"{field} is longer than {MAX_ID_BYTES} bytes"


def test_multibyte_id_under_256_chars_but_over_256_bytes():
    long_id = "é" * 129  # 129 chars, 258 UTF-8 bytes
    assert len(long_id) < MAX_ID_BYTES < len(long_id.encode())
    assert bad(edges, rec({"op": "upsert_vertex", "id": long_id})) == f"id is longer than {MAX_ID_BYTES} bytes"
    emoji = "😀" * 65  # 65 chars, 260 bytes; sent as raw UTF-8, not \u escapes
    raw = json.dumps({"op": "add_edge", "src": emoji, "dst": "b"}, ensure_ascii=False).encode()
    assert bad(edges, raw) == f"src is longer than {MAX_ID_BYTES} bytes"


@pytest.mark.parametrize(
    "obj, reason",
    [
        ({"op": "add_edge", "src": "", "dst": "b"}, "src is empty"),
        ({"op": "remove_edge", "src": "a", "dst": ""}, "dst is empty"),
        ({"op": "upsert_vertex", "id": ""}, "id is empty"),
    ],
)
def test_empty_id(obj, reason):
    assert bad(edges, rec(obj)) == reason


@pytest.mark.parametrize("etype", ["", "has space", "a/b", "x" * 33, "tÿpe", "link\n", "link\r", "\nlink", "lin\nk"])
def test_bad_edge_type(etype):
    reason = bad(edges, rec({"op": "add_edge", "src": "a", "dst": "b", "type": etype}))
    assert reason.startswith("edge type ") and "must match" in reason, reason


def test_good_edge_types():
    for etype in ["a", "x" * 32, "A-z_0.9:b"]:
        assert edges(rec({"op": "add_edge", "src": "a", "dst": "b", "type": etype}))[0].type == etype


def test_deeply_nested_unknown_field_is_a_bad_record():
    # A 2 KB record of brackets in an ignored field must be refused like any other bad record,
    # not escape as RecursionError (which would stop the ingest actor's loop).
    nested = b"[" * 2000 + b"]" * 2000
    for transform, head in ((edges, b'{"op":"add_edge","src":"a","dst":"b","x":'), (tweets, b'{"user":"u","x":')):
        with pytest.raises(BadRecord):
            transform(head + nested + b"}")


# --------------------------------------------------------------------------- tweets


def test_tweet_user_only():
    assert tweets(rec({"user": "alice"})) == [VertexUpdate("alice", {"kind": "user", "last_seen": 0.0}, 0.0)]


def test_tweet_mentions_and_tags():
    out = tweets(rec({"user": "alice", "mentions": ["bob", "carol"], "hashtags": ["#Rust", "go"], "text": "hi", "ts": 100.0}))
    one = WEIGHT_SCALE
    assert out == [
        VertexUpdate("alice", {"kind": "user", "last_seen": 100.0}, 100.0),
        EdgeUpdate("alice", "bob", "mentions", 1, one, 100.0),
        EdgeUpdate("alice", "carol", "mentions", 1, one, 100.0),
        EdgeUpdate("alice", "#rust", "tags", 1, one, 100.0),
        VertexUpdate("#rust", {"kind": "hashtag"}, 100.0),
        EdgeUpdate("alice", "#go", "tags", 1, one, 100.0),
        VertexUpdate("#go", {"kind": "hashtag"}, 100.0),
    ]


def test_tweet_duplicates_count_once():
    out = tweets(rec({"user": "u", "mentions": ["bob", "bob", "amy", "bob"], "hashtags": ["#AI", "ai", "##Ai", "#ml", "ML"]}))
    mentions = [u.dst for u in out if isinstance(u, EdgeUpdate) and u.type == "mentions"]
    tags = [u.dst for u in out if isinstance(u, EdgeUpdate) and u.type == "tags"]
    tag_vertices = [u.id for u in out if isinstance(u, VertexUpdate) and u.attrs.get("kind") == "hashtag"]
    assert mentions == ["bob", "amy"]
    assert tags == ["#ai", "#ml"]
    assert tag_vertices == ["#ai", "#ml"]


def test_tweet_fanout_limit():
    at_limit = {"user": "u", "mentions": [f"m{i}" for i in range(32)], "hashtags": [f"t{i}" for i in range(32)]}
    out = tweets(rec(at_limit))
    assert len(out) == 1 + 32 + 2 * 32
    over = {"user": "u", "mentions": [f"m{i}" for i in range(33)], "hashtags": [f"t{i}" for i in range(32)]}
    reason = bad(tweets, rec(over))
    assert "65 mentions and hashtags" in reason and str(MAX_TWEET_FANOUT) in reason, reason
    assert "65" in bad(tweets, rec({"user": "u", "hashtags": [f"t{i}" for i in range(65)]}))
    # duplicates do not count towards the limit
    assert len(tweets(rec({"user": "u", "mentions": ["b"] * 200, "hashtags": ["#X", "x"] * 100}))) == 4


@pytest.mark.parametrize(
    "obj, reason",
    [
        ({"user": ""}, "user is empty"),
        ({"user": "u", "mentions": ["b", ""]}, "mentions[] is empty"),
        ({"user": "u", "hashtags": ["#"]}, "hashtags[] is empty"),
        ({"user": "u", "hashtags": ["###"]}, "hashtags[] is empty"),
        ({"user": "u" * 257}, "user is longer than 256 bytes"),
        ({"user": "é" * 129}, "user is longer than 256 bytes"),
        ({"user": "u", "mentions": ["é" * 129]}, "mentions[] is longer than 256 bytes"),
        # the stored id is "#" + tag: 256 chars of tag make 257 bytes
        ({"user": "u", "hashtags": ["t" * 256]}, "hashtags[] is longer than 256 bytes"),
    ],
)
def test_tweet_bad_ids(obj, reason):
    assert bad(tweets, rec(obj)) == reason


def test_tweet_tag_of_max_length_is_accepted():
    out = tweets(rec({"user": "u", "hashtags": ["#" + "T" * 255]}))
    assert out[1].dst == "#" + "t" * 255


@pytest.mark.parametrize(
    "obj, text",
    [
        ({"mentions": ["b"]}, "missing required field `user`"),
        ({"user": 5}, "$.user"),
        ({"user": "u", "mentions": "bob"}, "$.mentions"),
        ({"user": "u", "mentions": [1]}, "$.mentions[0]"),
        ({"user": "u", "hashtags": [None]}, "$.hashtags[0]"),
        ({"user": "u", "text": 1}, "$.text"),
        ({"user": "u", "ts": "yesterday"}, "$.ts"),
    ],
)
def test_tweet_invalid_fields(obj, text):
    reason = bad(tweets, rec(obj))
    assert reason.startswith("invalid event:") and text in reason, reason


def test_unknown_transform():
    with pytest.raises(IngestError, match="unknown transform 'nope'"):
        get_transform("nope")


# --------------------------------------------------------------------------- property

_FIELDS = ["op", "src", "dst", "weight", "type", "ts", "id", "attrs", "user", "mentions", "hashtags", "text"]
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.sampled_from(["add_edge", "remove_edge", "upsert_vertex", "#", "", "link", "é" * 129])
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)
_objects = st.dictionaries(st.sampled_from(_FIELDS) | st.text(max_size=4), _values, max_size=8)
_records = st.one_of(
    st.binary(max_size=300),
    _objects.map(lambda o: json.dumps(o, ensure_ascii=False).encode("utf-8", "surrogatepass")),
    _values.map(lambda v: json.dumps(v).encode()),
    # a valid-ish record cut or spliced with junk
    st.tuples(_objects.map(lambda o: json.dumps(o).encode()), st.integers(0, 300), st.binary(max_size=8)).map(
        lambda t: t[0][: t[1]] + t[2]
    ),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=_records, name=st.sampled_from(["edges", "tweets"]))
def test_any_bytes_give_updates_or_bad_record(raw, name):
    try:
        out = get_transform(name)(raw)
    except BadRecord as exc:
        assert str(exc)  # always a reason
        return
    assert isinstance(out, list) and out
    for u in out:
        assert isinstance(u, (EdgeUpdate, VertexUpdate))
        if isinstance(u, EdgeUpdate):
            assert u.sign in (1, -1) and isinstance(u.weight, int) and u.weight >= 0
            assert 0 < len(u.src.encode("utf-8", "surrogatepass")) <= MAX_ID_BYTES
            assert 0 < len(u.dst.encode("utf-8", "surrogatepass")) <= MAX_ID_BYTES
        else:
            assert 0 < len(u.id.encode("utf-8", "surrogatepass")) <= MAX_ID_BYTES
