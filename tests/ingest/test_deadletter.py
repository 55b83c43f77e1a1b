"""The embedded dead-letter sink: one JSON line per refused record."""

from __future__ import annotations

import datetime as dt
import json

from pulsegraph.ingest.deadletter import (
    MAX_RECORD_CHARS,
    DeadLetter,
    FileDeadLetterSink,
)


def read_lines(path):
    raw = path.read_bytes()
    assert raw.endswith(b"\n")
    return [json.loads(line) for line in raw.split(b"\n")[:-1]]


def test_one_json_line_per_letter(tmp_path):
    path = tmp_path / "dl" / "dead.jsonl"  # the folder is made by the sink
    sink = FileDeadLetterSink(str(path))
    sink.write(
        [
            DeadLetter("synthetic:0", 12, "malformed JSON: boom", b'{"op": '),
            DeadLetter("file:0", 3, "src is empty", b'{"op":"add_edge","src":"","dst":"b"}\n'),
        ]
    )
    lines = read_lines(path)
    assert len(lines) == 2
    a, b = lines
    assert (a["partition"], a["offset"], a["reason"], a["record"]) == ("synthetic:0", 12, "malformed JSON: boom", '{"op": ')
    assert (b["partition"], b["offset"], b["reason"], b["record"]) == (
        "file:0",
        3,
        "src is empty",
        '{"op":"add_edge","src":"","dst":"b"}\n',
    )
    at = dt.datetime.fromisoformat(a["at"])
    assert at.tzinfo is not None
    assert abs((dt.datetime.now(dt.timezone.utc) - at).total_seconds()) < 60


def test_appends_across_calls_and_sinks(tmp_path):
    path = tmp_path / "dead.jsonl"
    FileDeadLetterSink(str(path)).write([DeadLetter("p", 0, "r0", b"x0")])
    sink = FileDeadLetterSink(str(path))
    sink.write([DeadLetter("p", 1, "r1", b"x1"), DeadLetter("p", 2, "r2", b"x2")])
    sink.write([])  # nothing to write: the file is unchanged
    sink.write([DeadLetter("q", 3, "r3", b"x3")])
    lines = read_lines(path)
    assert [(d["partition"], d["offset"], d["reason"], d["record"]) for d in lines] == [
        ("p", 0, "r0", "x0"),
        ("p", 1, "r1", "x1"),
        ("p", 2, "r2", "x2"),
        ("q", 3, "r3", "x3"),
    ]


def test_empty_write_creates_nothing(tmp_path):
    path = tmp_path / "dead.jsonl"
    FileDeadLetterSink(str(path)).write([])
    assert not path.exists()


def test_huge_records_are_truncated(tmp_path):
    path = tmp_path / "dead.jsonl"
    huge = b"0123456789" * 10_000  # 100 KB
    FileDeadLetterSink(str(path)).write([DeadLetter("p", 7, "too big", huge), DeadLetter("p", 8, "small", b"ok")])
    first, second = read_lines(path)
    assert len(first["record"]) == MAX_RECORD_CHARS == 8192
    assert first["record"] == huge[:MAX_RECORD_CHARS].decode()
    assert (first["offset"], first["reason"]) == (7, "too big")
    assert second["record"] == "ok"
    assert path.stat().st_size < 2 * MAX_RECORD_CHARS


def test_non_utf8_and_newlines_stay_on_one_line(tmp_path):
    path = tmp_path / "dead.jsonl"
    record = b'{"user": "\xff\xfe"}\nsecond line\n'
    FileDeadLetterSink(str(path)).write([DeadLetter("p", 0, "malformed JSON: bad\nreason", record)])
    [line] = read_lines(path)
    assert line["record"] == '{"user": "\ufffd\ufffd"}\nsecond line\n'
    assert line["reason"] == "malformed JSON: bad\nreason"


def letters(partition: str, keys) -> list[DeadLetter]:
    return [DeadLetter(partition, o, f"bad {o}.{i}", f"rec {o}.{i}".encode(), i) for o, i in keys]


def keys_in(path) -> list[tuple[str, int, int]]:
    return [(d["partition"], d["offset"], d["index"]) for d in read_lines(path)]


def test_a_replay_after_recovery_writes_no_letter_twice(tmp_path, monkeypatch):
    """A recovery reopens the sink where its partitions resume and replays the records after it:
    their letters are skipped, the new ones written, once each. Read back in small chunks, so lines
    straddle the chunk boundaries."""
    import pulsegraph.ingest.deadletter as dl

    monkeypatch.setattr(dl, "READ_BACK_BYTES", 37)
    path = tmp_path / "dead.jsonl"
    first = FileDeadLetterSink(str(path), {"p": 0, "q": 0})
    first.write(letters("p", [(1, 0), (4, 0), (4, 2)]) + letters("q", [(2, 0)]))
    first.write(letters("p", [(9, 1)]))
    # The checkpoint was at p=4, q=0: the next generation replays p from 4 and q from 0.
    again = FileDeadLetterSink(str(path), {"p": 4, "q": 0})
    again.write(letters("p", [(4, 0), (4, 2), (9, 1), (9, 2), (12, 0)]) + letters("q", [(2, 0), (3, 0)]))
    assert keys_in(path) == [
        ("p", 1, 0), ("p", 4, 0), ("p", 4, 2), ("q", 2, 0), ("p", 9, 1),
        ("p", 9, 2), ("p", 12, 0), ("q", 3, 0),
    ]
    # A sink of other partitions (another ingest actor) is not held back by these.
    FileDeadLetterSink(str(path), {"r": 0}).write(letters("r", [(0, 0)]))
    assert keys_in(path)[-1] == ("r", 0, 0)


def test_reading_back_stops_at_the_first_letter_below_the_start(tmp_path):
    """The sink reads back only what a replay can repeat: for a partition that had letters before its
    start offset, the letters after the newest of those."""
    path = tmp_path / "dead.jsonl"
    FileDeadLetterSink(str(path)).write(letters("p", [(o, 0) for o in range(1000)]))
    sink = FileDeadLetterSink(str(path), {"p": 990})
    seen = []

    def counting():
        for entry in sink._backwards():
            seen.append(entry)
            yield entry

    assert sink._written.read_back(counting()) == {"p": (999, 0)}
    assert len(seen) == 11  # 999 down to 989, the first below 990
