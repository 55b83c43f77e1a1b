"""Sources (synthetic and file), the rate limiter, and routing of updates to shards."""

from __future__ import annotations

import collections
import hashlib
import statistics
import zlib

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulsegraph.ingest.batch import Router, shard_of
from pulsegraph.ingest.events import EdgeUpdate, Tweet, VertexUpdate
from pulsegraph.ingest.exceptions import SourceError
from pulsegraph.ingest.sources import RateLimiter, Record, SourceSpec, open_partitions
from pulsegraph.ingest.sources.synthetic import BASE_TS, BLOCK, NOMINAL_RATE
from pulsegraph.ingest.transforms import get_transform

tweets = get_transform("tweets")
P0, P1 = "synthetic:0", "synthetic:1"


def synth(limit=None, starts=None, names=(P0, P1), **kw):
    spec = SourceSpec(kind="synthetic", partitions=2, rate=None, limit=limit, **kw)
    return open_partitions(spec, list(names), starts or {})


def read_all(part, n, step=500):
    out: list[Record] = []
    while len(out) < n:
        got = part.next_batch(min(step, n - len(out)))
        if not got:
            break
        out.extend(got)
    return out


# --------------------------------------------------------------------------- synthetic


def test_synthetic_records_are_valid_tweets():
    [p] = synth(names=[P0])
    recs = p.next_batch(1500)
    assert len(recs) == 1500
    dec = msgspec.json.Decoder(Tweet)
    for r in recs:
        t = dec.decode(r.value)
        assert t.user.startswith("user") and t.user not in t.mentions
        assert t.ts == BASE_TS + r.offset / NOMINAL_RATE
        out = tweets(r.value)  # never a BadRecord
        assert out[0] == VertexUpdate(t.user, {"kind": "user", "last_seen": t.ts}, t.ts)


def test_synthetic_offsets_are_consecutive_from_start():
    for start in (0, 17, BLOCK - 1, BLOCK, 5 * BLOCK + 3):
        [p] = synth(starts={P0: start}, names=[P0])
        assert p.position() == start
        offsets = []
        for size in (1, 7, BLOCK, 300, 2 * BLOCK + 5):
            batch = p.next_batch(size)
            assert len(batch) == size
            offsets += [r.offset for r in batch]
        assert offsets == list(range(start, start + len(offsets)))
        assert p.position() == start + len(offsets)


@pytest.mark.parametrize("o", [0, 1, 500, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK, 3 * BLOCK - 2])
def test_synthetic_resume_is_byte_identical(o):
    [first] = synth(names=[P1])
    original = read_all(first, o + 2 * BLOCK + 10, step=333)
    [again] = synth(starts={P1: o}, names=[P1])
    assert again.position() == o
    replay = read_all(again, 2 * BLOCK + 10, step=97)
    assert [r.offset for r in replay] == list(range(o, o + 2 * BLOCK + 10))
    assert replay == original[o:]


# sha256 over (offset, record) of each partition's first 5,000 records, as the generator wrote them when
# pinned here. A restart regenerates records from their offsets: a release that changed them would
# replay other events past a checkpoint than the ones before it, so a change here is a change of stream.
STREAM_DIGESTS = {
    (): ("f095c5221063fff78d98c039eaa132b5fa7e1b935b0e4de78238204505d586d0",
         "7a26be00619b6bdea2d53e89183e2f9823d800ffdd195f70363aee2291a6848e"),
    (("hashtags", 100_000), ("users", 3_000_000)): (
        "eedf31015983ce806bb5654478d154267da1ec85aa8bcf9f679585067877f0bd",
        "740b2c5c3e19cbda54f57ecc903f0da05bfb74bd742e8495948b413b280e2260"),
}


@pytest.mark.parametrize("kw", list(STREAM_DIGESTS))
def test_synthetic_records_are_the_same_stream_in_every_release(kw):
    digests = []
    for part in synth(**dict(kw)):
        h = hashlib.sha256()
        for r in read_all(part, 5000, step=777):
            h.update(r.offset.to_bytes(8, "little"))
            h.update(r.value)
        digests.append(h.hexdigest())
    assert tuple(digests) == STREAM_DIGESTS[kw]


def test_synthetic_depends_on_seed():
    [a] = synth(names=[P0])
    [b] = synth(names=[P0], seed=8)
    assert [r.value for r in a.next_batch(50)] != [r.value for r in b.next_batch(50)]


def test_synthetic_partitions_differ():
    p0, p1 = synth()
    assert (p0.name, p1.name) == (P0, P1)
    v0 = [r.value for r in p0.next_batch(2 * BLOCK)]
    v1 = [r.value for r in p1.next_batch(2 * BLOCK)]
    same = sum(a == b for a, b in zip(v0, v1))
    assert same < len(v0) // 100  # the ts is shared; users, mentions and tags are not


@pytest.mark.parametrize("limit, split", [(5, (3, 2)), (4, (2, 2)), (1, (1, 0)), (2049, (1025, 1024))])
def test_synthetic_limit_splits_across_partitions(limit, split):
    parts = synth(limit=limit)
    for p, expected in zip(parts, split):
        assert p.exhausted() is (expected == 0)
        got = read_all(p, 10_000)
        assert [r.offset for r in got] == list(range(expected))
        assert p.exhausted() is True
        assert p.next_batch(100) == []
        assert p.position() == expected


def test_synthetic_limit_counts_from_zero_when_resumed():
    [p] = synth(limit=10, starts={P0: 3}, names=[P0])
    assert not p.exhausted()
    assert [r.offset for r in p.next_batch(100)] == [3, 4]
    assert p.exhausted()


def test_synthetic_mentions_follow_a_power_law():
    [p] = synth(names=[P0])
    recs = read_all(p, 20 * BLOCK, step=4096)
    assert len(recs) == 20 * BLOCK
    counts = collections.Counter(m for r in recs for m in msgspec.json.decode(r.value)["mentions"])
    top_user, top = counts.most_common(1)[0]
    median = statistics.median(counts.values())
    assert top >= 100 * median, (top_user, top, median)
    assert top >= 0.05 * sum(counts.values())  # one account draws a sizeable share of all mentions
    assert len(counts) > 1000  # ... while the tail is long


def test_unknown_partition_and_kind():
    with pytest.raises(SourceError):
        synth(names=["synthetic:2"])
    with pytest.raises(SourceError):
        SourceSpec(kind="pulsar").partition_names()


# --------------------------------------------------------------------------- rate limiter


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@settings(max_examples=200, deadline=None)
@given(
    rate=st.floats(min_value=0.5, max_value=1e5),
    steps=st.lists(
        st.tuples(st.floats(min_value=0.0, max_value=2.0), st.integers(min_value=0, max_value=10**6)),
        min_size=1,
        max_size=40,
    ),
)
def test_rate_limiter_never_exceeds_rate_times_elapsed_plus_capacity(rate, steps):
    clock = FakeClock()
    limiter = RateLimiter(rate, clock=clock)
    capacity = max(1.0, rate * 0.1)
    start = clock.now
    total = 0
    for dt, wanted in steps:
        clock.now += dt
        n = limiter.take(wanted)
        assert 0 <= n <= wanted
        total += n
        assert total <= rate * (clock.now - start) + capacity + 1e-6


def test_rate_limiter_hands_out_about_the_rate():
    clock = FakeClock()
    limiter = RateLimiter(1000.0, clock=clock)
    assert limiter.take(10_000) == 0  # no tokens before any time has passed
    total = 0
    for _ in range(1000):  # 10 s in steps of 10 ms
        clock.now += 0.01
        total += limiter.take(10_000)
    assert 9_900 <= total <= 10_000
    # an idle stretch does not bank more than the capacity (0.1 s of tokens)
    clock.now += 60.0
    assert limiter.take(10**9) == 100


def test_rate_limiter_without_rate_is_unlimited():
    limiter = RateLimiter(None, clock=FakeClock())
    assert limiter.take(123_456) == 123_456


# --------------------------------------------------------------------------- file source


def file_part(path, start=0, **kw):
    spec = SourceSpec(kind="file", path=str(path), **kw)
    assert spec.partition_names() == ["file:0"]
    [p] = open_partitions(spec, ["file:0"], {"file:0": start} if start else {})
    return p


def lines_of(records):
    return [(r.offset, r.value.rstrip(b"\r\n")) for r in records]


def test_file_offsets_are_line_numbers(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"a":0}\n{"a":1}\n{"a":2}\n')
    p = file_part(path)
    assert p.name == "file:0"
    assert lines_of(p.next_batch(100)) == [(0, b'{"a":0}'), (1, b'{"a":1}'), (2, b'{"a":2}')]
    assert p.position() == 3
    assert p.next_batch(100) == []
    p.close()
    p.close()  # idempotent


def test_file_respects_max_records(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(b"%d\n" % i for i in range(10)))
    p = file_part(path)
    assert [r.offset for r in p.next_batch(4)] == [0, 1, 2, 3]
    assert p.position() == 4
    assert [r.offset for r in p.next_batch(100)] == list(range(4, 10))


def test_file_blank_lines_use_their_offset(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"a":0}\n\n   \n{"a":3}\n\n{"a":5}\n')
    p = file_part(path)
    assert lines_of(p.next_batch(100)) == [(0, b'{"a":0}'), (3, b'{"a":3}'), (5, b'{"a":5}')]
    assert p.position() == 6


def test_file_holds_back_a_line_until_its_newline(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"a":0}\n{"a":')
    p = file_part(path)
    assert lines_of(p.next_batch(100)) == [(0, b'{"a":0}')]
    assert p.position() == 1
    assert p.next_batch(100) == []  # still no newline
    with open(path, "ab") as fh:
        fh.write(b"1")
    assert p.next_batch(100) == []
    assert p.position() == 1
    with open(path, "ab") as fh:
        fh.write(b'}\n{"a":2}\n')
    assert lines_of(p.next_batch(100)) == [(1, b'{"a":1}'), (2, b'{"a":2}')]
    assert p.position() == 3


def test_file_that_does_not_exist_yet(tmp_path):
    path = tmp_path / "later.jsonl"
    p = file_part(path)
    assert p.next_batch(100) == []
    assert p.position() == 0
    assert not p.exhausted()
    path.write_bytes(b'{"a":0}\n')
    assert lines_of(p.next_batch(100)) == [(0, b'{"a":0}')]


@pytest.mark.parametrize("o", [1, 2, 4, 6])
def test_file_reopened_at_start_resumes_there(tmp_path, o):
    path = tmp_path / "events.jsonl"
    content = [b'{"a":0}', b'{"a":1}', b"", b'{"a":3}', b'{"a":4}', b'{"a":5}']
    path.write_bytes(b"".join(line + b"\n" for line in content))
    p = file_part(path, start=o)
    expected = [(i, line) for i, line in enumerate(content) if i >= o and line]
    assert lines_of(p.next_batch(100)) == expected
    assert p.position() == len(content)
    with open(path, "ab") as fh:
        fh.write(b'{"a":6}\n')
    assert lines_of(p.next_batch(100)) == [(6, b'{"a":6}')]


def test_file_reopened_past_the_end_waits_for_the_file_to_grow(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"a":0}\n{"a":1}\n{"a":')
    p = file_part(path, start=4)
    assert p.next_batch(100) == []
    with open(path, "ab") as fh:
        fh.write(b'2}\n{"a":3}\n{"a":4}\n{"a":5}\n')
    assert lines_of(p.next_batch(100)) == [(4, b'{"a":4}'), (5, b'{"a":5}')]
    assert p.position() == 6


def test_file_position_is_the_start_offset_before_anything_is_read(tmp_path):
    # position() is "the first offset not yet handed out": opened at 5, nothing below 5 is ever
    # handed out, so it must never report less than 5 (the ingest actor reports it as progress).
    missing = file_part(tmp_path / "missing.jsonl", start=5)
    assert missing.position() == 5
    short = tmp_path / "short.jsonl"
    short.write_bytes(b"1\n2\n3\n")
    p = file_part(short, start=5)
    assert p.position() == 5
    assert p.next_batch(100) == []
    assert p.position() == 5


def test_file_limit(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(b"%d\n" % i for i in range(10)))
    p = file_part(path, limit=4)
    assert [r.offset for r in p.next_batch(100)] == [0, 1, 2, 3]
    assert p.exhausted()
    assert p.next_batch(100) == []


def test_file_source_needs_a_path():
    with pytest.raises(SourceError):
        open_partitions(SourceSpec(kind="file"), ["file:0"], {})


# --------------------------------------------------------------------------- shards and routing


def test_shard_of_is_stable():
    assert zlib.crc32(b"alice") == 663665735
    assert shard_of("alice", 8) == 663665735 % 8 == 7
    assert shard_of("alice", 1) == 0
    key = "#naïve-😀"
    assert shard_of(key, 13) == zlib.crc32(key.encode("utf-8")) % 13
    for n in (1, 2, 7, 64):
        for k in ("a", "user123", "#tag", "é" * 100):
            assert 0 <= shard_of(k, n) < n


def test_router_puts_updates_on_their_vertex_shard():
    n = 4
    router = Router(n)
    txs = [
        ("synthetic:1", 10, tweets(b'{"user":"alice","mentions":["bob","carol"],"hashtags":["x","Y"],"ts":1.0}')),
        ("synthetic:0", 3, tweets(b'{"user":"dave","mentions":["alice"],"hashtags":["z"],"ts":2.0}')),
        ("file:0", 7, [EdgeUpdate("bob", "alice", "link", -1, 5), VertexUpdate("erin", {"k": 1}, 3.0)]),
    ]
    for part, off, updates in txs:
        router.add(part, off, updates)
    batches = router.take()
    assert len(batches) == n

    got_edges, got_vertices = [], []
    for s, b in enumerate(batches):
        assert len(b) == len(b.e_off) + len(b.v_off)
        assert len(set(b.partitions)) == len(b.partitions)
        assert len(set(b.names)) == len(b.names) and len(set(b.types)) == len(b.types)
        for i in range(len(b.e_off)):
            src, dst = b.names[b.e_src[i]], b.names[b.e_dst[i]]
            assert shard_of(src, n) == s
            e = EdgeUpdate(src, dst, b.types[b.e_type[i]], int(b.e_sign[i]), int(b.e_weight[i]), float(b.e_ts[i]))
            got_edges.append((b.partitions[b.e_part[i]], int(b.e_off[i]), e))
        for i in range(len(b.v_off)):
            vid = b.names[b.v_id[i]]
            assert shard_of(vid, n) == s
            v = VertexUpdate(vid, msgspec.json.decode(b.v_attrs[i]), float(b.v_ts[i]))  # encoded by ingest
            got_vertices.append((b.partitions[b.v_part[i]], int(b.v_off[i]), v))

    want_edges = [(p, o, u) for p, o, us in txs for u in us if isinstance(u, EdgeUpdate)]
    want_vertices = [(p, o, u) for p, o, us in txs for u in us if isinstance(u, VertexUpdate)]
    assert sorted(got_edges) == sorted(want_edges)
    assert sorted(got_vertices, key=repr) == sorted(want_vertices, key=repr)
    # the keys really are spread over more than one shard (otherwise the test proves little)
    assert sum(1 for b in batches if len(b)) >= 2

    # take() starts afresh: partition indices restart for the next round
    router.add("file:0", 8, [EdgeUpdate("bob", "x", "link", 1, 1)])
    again = router.take()
    b = again[shard_of("bob", n)]
    assert b.partitions == ["file:0"] and b.e_part.tolist() == [0] and b.e_off.tolist() == [8]
    assert b.names == ["bob", "x"] and b.types == ["link"]
    assert sum(len(x) for x in again) == 1
    assert all(len(x) == 0 for x in router.take())
