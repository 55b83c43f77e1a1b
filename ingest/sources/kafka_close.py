"""Closing a Kafka client library's consumer without waiting on it for ever.

librdkafka's close waits, without a timeout, for the group coordinator to answer the offset commits
queued to it. After a broker restart in a chaos run its coordinator connection stayed down (REQTMOUT
every 6 s), and the reopen meant to get the client going again stood in close() for the 300 s the test
waited, two partitions unread; the ingest actor's stop hung in the same call. So a close runs on a
thread of its own and is waited for CLOSE_WAIT_S; one still running then is left to finish by itself,
with at most MAX_STUCK_CLOSES of them at once per client (then the oldest is waited for: a bound on the
handles left open). Must not know which library it closes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

CLOSE_WAIT_S = 5.0
MAX_STUCK_CLOSES = 3


def close_within(close: Callable[[Any], None], consumer: Any, stuck: list[threading.Thread], what: str) -> None:
    """``close(consumer)`` on a thread, waited for CLOSE_WAIT_S; ``stuck``: the client's closes still running,
    kept up to date here (``what`` names the client in the log)."""
    closing = threading.Thread(target=_quietly, args=(close, consumer), name="kafka-close", daemon=True)
    closing.start()
    closing.join(CLOSE_WAIT_S)
    stuck[:] = [t for t in stuck if t.is_alive()]
    if closing.is_alive():
        log.warning("%s did not close within %.0f s (it waits for a broker that does not answer); it is left to "
                    "close by itself", what, CLOSE_WAIT_S)
        stuck.append(closing)
    if len(stuck) > MAX_STUCK_CLOSES:
        stuck.pop(0).join()


def _quietly(close: Callable[[Any], None], consumer: Any) -> None:
    try:
        close(consumer)
    except Exception:  # noqa: BLE001 - a client that cannot even close is dropped all the same
        log.exception("closing the Kafka client failed")
