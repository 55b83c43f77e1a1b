"""The embedded event log: a JSONL file that producers without Kafka append to and a file partition follows.

Owns the append side only; reading is the file source's job. Each append is one
``O_APPEND`` write of whole lines, fsynced before it returns, so an event
acknowledged to a client is on disk, and concurrent appenders never interleave
inside a line.

The durable-file primitives it shares with the other logs (the dead letters,
the epoch log, checkpoints) are in :mod:`pulsegraph.base.durable`.
"""

from __future__ import annotations

import os
import threading

from pulsegraph.base.durable import append_durably, makedirs_durably


class EventLog:
    def __init__(self, path: str) -> None:
        self.path = path
        makedirs_durably(os.path.dirname(os.path.abspath(path)))
        self._lock = threading.Lock()

    def append(self, records: list[bytes]) -> None:
        """Append records, one per line. A record must not contain a newline (compact JSON never does)."""
        if not records:
            return
        if any(b"\n" in r for r in records):
            raise ValueError("a record of the event log must not contain a newline")
        with self._lock:
            append_durably(self.path, b"".join(r + b"\n" for r in records))
