"""The JSONL file source: one record per line, the offset is the line number (from 0).

It follows a growing file: a last line without its newline is not handed out
until the newline arrives. Blank lines hold no event; they use up their offset
and are skipped. A partition reopened at offset ``o`` skips the first ``o``
lines and resumes at line ``o``, the first one not yet applied.
"""

from __future__ import annotations

import os
from typing import IO

from pulsegraph.ingest.exceptions import SourceError
from pulsegraph.ingest.sources.base import RateLimiter, Record, SourcePartition


class FilePartition(SourcePartition):
    def __init__(self, name: str, path: str | None, start: int, rate: float | None = None, limit: int | None = None) -> None:
        if not path:
            raise SourceError("the file source needs --path FILE")
        self.name = name
        self._path = path
        self._limiter = RateLimiter(rate)
        self._end = limit
        self._fh: IO[bytes] | None = None
        self._line = 0
        self._pending = b""  # a trailing line still waiting for its newline
        self._start = start

    def _open(self) -> bool:
        if self._fh is not None:
            return True
        if not os.path.exists(self._path):
            return False  # a followed file may not exist yet
        try:
            self._fh = open(self._path, "rb")
        except OSError as exc:
            raise SourceError(f"cannot open {self._path}: {exc}") from exc
        while self._line < self._start:
            raw = self._fh.readline()
            if not raw.endswith(b"\n"):
                # Fewer lines than the start offset: wait for the file to grow.
                self._pending = raw
                return True
            self._line += 1
        return True

    def position(self) -> int:
        return max(self._line, self._start)

    def exhausted(self) -> bool:
        return self._end is not None and self._line >= self._end

    def next_batch(self, max_records: int) -> list[Record]:
        if not self._open() or self._fh is None:  # _open() True means the file is open
            return []
        if self._end is not None:
            max_records = min(max_records, self._end - self._line)
        n = self._limiter.take(max(max_records, 0))
        out: list[Record] = []
        while len(out) < n:
            chunk = self._fh.readline()
            if not chunk:
                break
            raw = self._pending + chunk
            if not raw.endswith(b"\n"):
                self._pending = raw
                break
            self._pending = b""
            offset = self._line
            self._line += 1
            if offset < self._start:
                continue  # still skipping towards the resume point of a short file
            if raw.strip():
                out.append(Record(offset, raw))
        return out

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
