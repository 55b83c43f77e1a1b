"""The dead-letter sink of embedded mode: a JSONL file of records that could not become transactions.

Each line says where the record came from (partition, offset), why it was
refused, and the record itself (as text, cut to :data:`MAX_RECORD_CHARS`).
Lines are written with one ``O_APPEND`` write per batch and fsynced before the
ingest actor reports the batch as delivered, so no refused record is lost.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import NamedTuple

import orjson

# Keep a refused record whole enough to debug, but never let a huge garbage
# record blow up the sink.
MAX_RECORD_CHARS = 8192


class DeadLetter(NamedTuple):
    partition: str
    offset: int
    reason: str
    record: bytes


class FileDeadLetterSink:
    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

    def write(self, letters: list[DeadLetter]) -> None:
        if not letters:
            return
        now = dt.datetime.now(dt.timezone.utc).isoformat()
        lines = b"".join(
            orjson.dumps(
                {
                    "partition": d.partition,
                    "offset": d.offset,
                    "reason": d.reason,
                    "record": d.record.decode("utf-8", "replace")[:MAX_RECORD_CHARS],
                    "at": now,
                }
            )
            + b"\n"
            for d in letters
        )
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, lines)
            os.fsync(fd)
        finally:
            os.close(fd)
