"""Server-sent events: one event per sealed epoch, fanned out to any number of clients.

The feed thread publishes; each client has a queue of one, and a newer epoch
replaces an unread one, so a slow client sees fewer epochs but never holds up
the feed, the pipeline or another client. Publishing never blocks and never
awaits.

Slots are bounded, and the last of them are kept: anonymous clients may take
all but ``2 * reserve``, the dashboard page's own streams (a browser's
``Sec-Fetch-Site: same-origin``) all but ``reserve``, authenticated clients
every one. So idle anonymous clients cannot shut out the page or an operator.
A client that stops reading is ended by the server's edge once its socket
stops taking bytes (``pulsegraph.api.edge``: send stalls).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import AsyncIterator

log = logging.getLogger(__name__)

# A comment line this often keeps proxies from closing an idle stream and lets
# the server notice a client that went away between epochs.
HEARTBEAT_S = 15.0
# Open streams at once; each holds a socket and a task, so bound them.
MAX_CLIENTS = 1000
# Standing of a stream client: which of the kept slots it may take.
ANONYMOUS, SAME_ORIGIN, AUTHENTICATED = 0, 1, 2


_END = b""  # the frame that ends a stream: the server is going away


def sse_frame(epoch: int, data: bytes) -> bytes:
    return b"id: %d\ndata: %s\n\n" % (epoch, data)


def is_end(frame: bytes) -> bool:
    """Whether a frame taken from a queue is the one that ends the stream (the server is going away)."""
    return frame is _END


class Broadcaster:
    def __init__(self, max_clients: int = MAX_CLIENTS) -> None:
        self.max_clients = max_clients
        # One slot in twenty is kept for each standing above anonymous (none in a tiny pool).
        self.reserve = max_clients // 20 if max_clients >= 20 else 0
        self._subs: dict[asyncio.Queue, asyncio.AbstractEventLoop] = {}
        self._lock = threading.Lock()
        self.dropped = 0  # epochs a slow client never saw because a newer one replaced them
        self.refused = 0  # streams refused because the slots of their standing were taken
        self.closed = False

    @property
    def clients(self) -> int:
        return len(self._subs)

    def limit(self, standing: int) -> int:
        """The slots a client of ``standing`` may take (all of them when authenticated)."""
        return self.max_clients - self.reserve * (AUTHENTICATED - standing)

    def subscribe(self, standing: int = AUTHENTICATED) -> asyncio.Queue | None:
        """A queue for the calling coroutine's loop, or None when the slots of ``standing`` are taken."""
        q: asyncio.Queue = asyncio.Queue(maxsize=1)
        with self._lock:
            if self.closed or len(self._subs) >= self.limit(standing):
                self.refused += not self.closed
                return None
            self._subs[q] = asyncio.get_running_loop()
        return q

    def stats(self) -> dict:
        return {"open": self.clients, "max": self.max_clients, "kept": 2 * self.reserve, "refused": self.refused}

    def unsubscribe(self, q: asyncio.Queue) -> None:
        with self._lock:
            self._subs.pop(q, None)

    def publish(self, frame: bytes) -> None:
        """Hand ``frame`` to every client; callable from any thread."""
        with self._lock:
            subs = list(self._subs.items())
        for q, loop in subs:
            try:
                loop.call_soon_threadsafe(self._offer, q, frame)
            except RuntimeError:  # the client's loop is closed: it is gone
                self.unsubscribe(q)

    def close(self) -> None:
        """End every open stream (the server is shutting down); callable from any thread."""
        self.closed = True
        self.publish(_END)

    def _offer(self, q: asyncio.Queue, frame: bytes) -> None:
        if q.full():
            q.get_nowait()
            self.dropped += 1
        q.put_nowait(frame)

    async def stream(self, q: asyncio.Queue, first: bytes | None) -> AsyncIterator[bytes]:
        try:
            yield b"retry: 2000\n\n" + (first or b"")
            while True:
                try:
                    frame = await asyncio.wait_for(q.get(), HEARTBEAT_S)
                except asyncio.TimeoutError:
                    yield b": keep-alive\n\n"
                    continue
                if frame is _END:
                    return
                yield frame
        finally:
            self.unsubscribe(q)
