"""The API's edge below the ASGI app: what one connection may cost before a request reaches a route.

Owns the HTTP protocol the service's uvicorn runs (uvicorn's httptools protocol, with bounds added) and
the table of one server's open connections. The bounds, per server (:class:`EdgeLimits`):

- **connections**: at most ``max_connections`` open at once. At the cap, a new connection evicts the one
  idle longest (no request in flight: a fresh connection that has not sent its request yet, or a
  keep-alive one between requests); when every connection has a request in flight, the new one is
  answered 503 and closed. So connections that send nothing can neither hold the process's file
  descriptors nor shut out a client that sends its request at once.
- **request heads**: the request line and headers must be complete within ``header_timeout_s`` of the
  moment the connection began waiting for them (408 otherwise) and hold at most ``max_header_bytes``
  (431, counted as the bytes arrive, so a huge header is refused after its first read, never buffered).
- **idle connections**: one that has sent nothing ``header_timeout_s`` after it opened, or nothing
  ``keep_alive_s`` after a response (uvicorn's keep-alive timeout), is closed without a word.
- **send stalls**: a connection whose peer has acknowledged none of the bytes waiting for it for
  ``send_timeout_s`` (its receive window is shut: it reads nothing) is dropped, as nginx's
  ``send_timeout`` does; this is what ends a stream client that stopped reading. Linux only (it reads
  the kernel's ``TCP_INFO``); elsewhere stalls are not detected.

Every refusal is a JSON error body, ``{"error": {"code", "message"}}``, like the app's. The edge never
looks at a route or a body: the app owns those, and the write and stream bounds.
"""

from __future__ import annotations

import asyncio
import collections
import fcntl
import logging
import socket
import struct
import termios
from dataclasses import dataclass
from typing import Any

import orjson
import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

log = logging.getLogger(__name__)

# After a refusal (408, 431) the connection reads and drops what the client still sends, for at most
# this long, so that a client still writing its request gets to read the answer: closing a socket with
# unread input makes the kernel reset it, and the client may then never see the status.
LINGER_S = 2.0
# How often open connections are checked for send stalls; a stall is noticed within this of its timeout.
SWEEP_S = 1.0
# struct tcp_info (linux/tcp.h): tcpi_bytes_acked is the u64 at byte 120 (Linux >= 4.1).
_TCPI_BYTES_ACKED = 120
_TCP_INFO = getattr(socket, "TCP_INFO", None)


@dataclass(frozen=True)
class EdgeLimits:
    """The bounds of one API server; the service builds them from its settings."""

    # Open connections. Each holds a file descriptor and ~10 KB; the service lowers this to fit the
    # process's descriptor limit with a reserve for the result feed and the archive.
    max_connections: int = 2048
    # Request line plus headers. Browsers send 1-8 KiB; nginx's default buffers stop at 32 KiB.
    max_header_bytes: int = 32 * 1024
    # The whole request head must arrive within this: a slow link sends a few KiB in well under a second.
    header_timeout_s: float = 10.0
    # An idle connection is closed after this (uvicorn's default).
    keep_alive_s: float = 5.0
    # A peer that takes none of what it is sent for this long is dropped (nginx's send_timeout is 60 s;
    # a stream frame is sent at least every 15 s, so a live client always has something to take).
    send_timeout_s: float = 30.0
    # Open /v1/stream connections (each holds a connection of max_connections and a task).
    max_streams: int = 1000
    # POST /v1/events requests parsed at once (each may hold ~40 MB while it is checked).
    max_concurrent_writes: int = 4


def error_response(status: int, code: str, message: str, extra: tuple[tuple[bytes, bytes], ...] = ()) -> bytes:
    """A complete HTTP/1.1 response with the API's error body that closes the connection."""
    body = orjson.dumps({"error": {"code": code, "message": message}})
    head = [STATUS_LINE[status], b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n"]
    head += [name + b": " + value + b"\r\n" for name, value in extra]
    return b"".join(head) + b"\r\n" + body


class EdgeProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the edge's bounds; a subclass per server binds ``edge``."""

    edge: Edge

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes = 0  # bytes received of the request head being read
        self._in_head = True  # waiting for (the rest of) a request head
        self._refused = False  # answered by the edge: input is dropped until the connection ends
        self._head_timer: asyncio.TimerHandle | None = None
        self._linger: asyncio.TimerHandle | None = None
        self._acked = -1  # the peer's acknowledged bytes at the last sweep that found a backlog
        self._stalled_since: float | None = None

    # ---- connection lifecycle ----------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if not self.edge.admit(self):
            return
        # A fresh connection has until the head deadline to send its first request (uvicorn sets no limit on
        # it at all); the keep-alive timeout is for the idle time between requests.
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self.edge.forget(self)
        for timer in (self._head_timer, self._linger):
            if timer is not None:
                timer.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # lingering after a refusal: read and dropped
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        if self._in_head and not self._refused and self._head_bytes > self.edge.limits.max_header_bytes:
            self._refuse_head()

    # ---- parser callbacks ----------------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self._refused:
            return
        self._in_head = True
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        head = len(self.url) + sum(len(n) + len(v) + 4 for n, v in self.headers)
        if head > self.edge.limits.max_header_bytes:
            # It arrived within one read: the byte count above could not see it coming.
            self._refuse_head()
            return
        self._in_head = False
        self._head_bytes = 0
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        self.edge.busy(self)
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self._refused:
            super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a pipelined request has started: still busy
        self.edge.idle(self)
        if not self.transport.is_closing():
            self._arm_head_timer()

    def send_400_response(self, msg: str) -> None:
        # A request the parser cannot read: the same error model as the app's, not uvicorn's plain text.
        self.edge.counts["bad_requests"] += 1
        self._refuse(400, "bad_http_request", f"the request is not valid HTTP/1.1: {msg}")

    # ---- refusals ------------------------------------------------------------------------------
    def _arm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._head_timer = self.loop.call_later(self.edge.limits.header_timeout_s, self._head_timeout)

    def _head_timeout(self) -> None:
        self._head_timer = None
        if not self._in_head or self._refused or self.transport.is_closing():
            return
        if self._head_bytes == 0:
            self.transport.close()  # nothing started: an idle connection, closed without a word
            return
        self.edge.counts["header_timeouts"] += 1
        self._refuse(408, "request_timeout", f"the request head did not arrive within {self.edge.limits.header_timeout_s:g} s")

    def _refuse_head(self) -> None:
        self.edge.counts["headers_too_large"] += 1
        self._refuse(431, "headers_too_large", f"the request line and headers are over {self.edge.limits.max_header_bytes} bytes")

    def _refuse(self, status: int, code: str, message: str) -> None:
        """Answer ``status`` and end the connection: the answer is flushed, the write side shut, and what
        the client still sends is read and dropped for at most LINGER_S."""
        self._refused = True
        self._unset_keepalive_if_required()
        self.edge.refusing(self)
        self.transport.write(error_response(status, code, message))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._linger = self.loop.call_later(LINGER_S, self.transport.abort)

    def refuse_at_capacity(self) -> None:
        """Every connection has a request in flight: say so and close at once (no lingering: under a
        flood, lingering connections would be the descriptors this bound exists to keep)."""
        self._refused = True
        self.transport.write(error_response(
            503, "too_many_connections", f"the server has {self.edge.limits.max_connections} connections with requests in flight; retry shortly",
            ((b"retry-after", b"1"),),
        ))
        self.transport.close()

    # ---- send stalls ---------------------------------------------------------------------------
    def stalled(self, now: float) -> bool:
        """Whether the peer has taken none of the bytes waiting for it for send_timeout_s."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return False
        sock = transport.get_extra_info("socket")
        if sock is None or _TCP_INFO is None:
            return False
        try:
            unsent = transport.get_write_buffer_size() + struct.unpack(
                "i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]
            if unsent == 0:
                self._stalled_since = None
                return False
            info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _TCPI_BYTES_ACKED + 8)
        except OSError:
            return False
        if len(info) < _TCPI_BYTES_ACKED + 8:
            return False  # a kernel without tcpi_bytes_acked: progress cannot be told from a stall
        acked = struct.unpack_from("Q", info, _TCPI_BYTES_ACKED)[0]
        if acked != self._acked or self._stalled_since is None:
            self._acked, self._stalled_since = acked, now
            return False
        return now - self._stalled_since >= self.edge.limits.send_timeout_s


class Edge:
    """One server's connections: admits, evicts and sweeps them, and counts what it refused.

    Runs on the server's event loop only (protocol callbacks and its own timer), so it needs no lock;
    :meth:`stats` is a read of counters, safe from any thread.
    """

    def __init__(self, limits: EdgeLimits | None = None) -> None:
        self.limits = limits or EdgeLimits()
        # Idle connections, longest idle first; the first is the one a new connection evicts.
        self._idle: collections.OrderedDict[EdgeProtocol, None] = collections.OrderedDict()
        self._busy: set[EdgeProtocol] = set()
        self._sweeping = False
        self.counts = {
            "evicted": 0, "refused": 0, "header_timeouts": 0, "headers_too_large": 0, "bad_requests": 0, "stalled": 0,
        }

    def protocol(self) -> type[EdgeProtocol]:
        """The protocol class for uvicorn's ``http=`` setting, bound to this edge."""
        return type("EdgeProtocol", (EdgeProtocol,), {"edge": self})

    @property
    def open(self) -> int:
        return len(self._idle) + len(self._busy)

    def admit(self, conn: EdgeProtocol) -> bool:
        if self.open >= self.limits.max_connections:
            if not self._idle:
                self.counts["refused"] += 1
                conn.refuse_at_capacity()
                return False
            victim, _ = self._idle.popitem(last=False)
            self.counts["evicted"] += 1
            victim.transport.abort()  # its descriptor is closed on the loop's next turn
        self._idle[conn] = None
        if not self._sweeping:
            self._sweeping = True
            conn.loop.call_later(SWEEP_S, self._sweep, conn.loop)
        return True

    def busy(self, conn: EdgeProtocol) -> None:
        self._idle.pop(conn, None)
        self._busy.add(conn)

    def idle(self, conn: EdgeProtocol) -> None:
        if conn in self._busy:
            self._busy.discard(conn)
            self._idle[conn] = None

    def refusing(self, conn: EdgeProtocol) -> None:
        """A refused connection lingers for a moment: the first to go when room is needed."""
        self._busy.discard(conn)
        self._idle[conn] = None
        self._idle.move_to_end(conn, last=False)

    def forget(self, conn: EdgeProtocol) -> None:
        self._idle.pop(conn, None)
        self._busy.discard(conn)

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        for conn in [*self._busy, *self._idle]:
            if conn.stalled(now):
                self.counts["stalled"] += 1
                log.info("dropping a connection from %s: it took nothing it was sent for %.0f s", conn.client, self.limits.send_timeout_s)
                conn.transport.abort()
        if self.open:
            loop.call_later(SWEEP_S, self._sweep, loop)
        else:
            self._sweeping = False

    def stats(self) -> dict:
        """What /health says of the connections: open, the cap, and what was refused since the start."""
        return {"open": self.open, "max": self.limits.max_connections, "busy": len(self._busy), **self.counts}


def server_config(app: Any, host: str, port: int, **kwargs: Any) -> uvicorn.Config:
    """uvicorn's config for ``app`` (made by :func:`pulsegraph.api.app.create_app`), with the edge's protocol and bounds."""
    edge: Edge = app.state.edge
    return uvicorn.Config(
        app, host=host, port=port, http=edge.protocol(),
        timeout_keep_alive=edge.limits.keep_alive_s,  # type: ignore[arg-type]
        ws="none",  # no route upgrades to a WebSocket
        server_header=False, **kwargs,
    )

