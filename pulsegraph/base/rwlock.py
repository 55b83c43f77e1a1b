"""A readers-writer lock: many readers at once, or one writer; a waiting writer holds new readers back.

Owns nothing but the lock. The API's graph view needs it: its reads (neighbors) come from the event loop
and from worker threads at once, and only the feed thread taking an epoch in writes. With a plain mutex a
reader on a worker thread that loses the GIL mid-read holds the lock for a whole switch interval (5 ms),
and the event loop, which must not wait, finds it taken; readers that share the lock do not exclude each
other, so the loop is turned away only while an epoch is being written.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ReadWriteLock:
    """Writer-preferring: once a writer waits, new readers wait behind it, so a stream of reads cannot
    starve the writer (the feed thread would fall behind the epochs). Not reentrant."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writing = False
        self._writers_waiting = 0

    @contextmanager
    def read(self) -> Iterator[None]:
        with self._cond:
            while self._writing or self._writers_waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            self.release_read()

    def try_read(self) -> bool:
        """Take a read share without waiting at all (for the event loop): False when a writer holds or waits
        for the lock, or the lock's own mutex is held this instant; True means :meth:`release_read` is owed."""
        if not self._cond.acquire(blocking=False):
            return False
        try:
            if self._writing or self._writers_waiting:
                return False
            self._readers += 1
            return True
        finally:
            self._cond.release()

    @property
    def writer(self) -> bool:
        """A writer holds the lock or waits for it (a read now would wait, or be turned away)."""
        return self._writing or self._writers_waiting > 0

    def release_read(self) -> None:
        with self._cond:
            self._readers -= 1
            if not self._readers:
                self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            try:
                while self._writing or self._readers:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()
