"""The embedded dead-letter sink: one JSON line per refused record."""

from __future__ import annotations

import datetime as dt
import json

from ingest.deadletter import MAX_RECORD_CHARS, DeadLetter, FileDeadLetterSink


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
