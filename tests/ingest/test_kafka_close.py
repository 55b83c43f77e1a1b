"""A Kafka client whose library will not close does not hold up the ingest loop.

librdkafka's close waits, without a timeout, for the group coordinator to answer the offset commits
queued to it; in a chaos run a restarted broker's coordinator never answered, and the reopen that was
to get the client going again stood in close() for minutes. The library's close is the one thing made
to hang here (an Event it waits on): the client's own paths (reopen, close) run as they do in service.
"""

from __future__ import annotations

import logging
import threading
import time

from pulsegraph.ingest.sources import kafka_close
from pulsegraph.ingest.sources.kafka import KafkaClient


class _Consumer:
    """A library consumer whose close() waits until ``release`` is set."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release
        self.closed = False

    def close(self) -> None:
        self.release.wait()
        self.closed = True


def test_a_close_that_hangs_is_left_behind_and_their_number_is_bounded(monkeypatch, caplog):
    monkeypatch.setattr(kafka_close, "CLOSE_WAIT_S", 0.2)
    release = threading.Event()
    client = KafkaClient("127.0.0.1:1", "t", [0, 1], {}, "g")
    consumers = []
    caplog.set_level(logging.WARNING, logger=kafka_close.__name__)
    try:
        for _ in range(kafka_close.MAX_STUCK_CLOSES):
            consumers.append(_Consumer(release))
            client._consumer = consumers[-1]
            t0 = time.monotonic()
            client._reopen()
            assert time.monotonic() - t0 < 2.0 and client._consumer is None
        assert len(client._stuck_closes) == kafka_close.MAX_STUCK_CLOSES
        assert sum("did not close within" in r.getMessage() for r in caplog.records) == kafka_close.MAX_STUCK_CLOSES
        # One more than the bound: the oldest is waited for (here, until the library lets go).
        consumers.append(_Consumer(release))
        client._consumer = consumers[-1]
        threading.Timer(0.5, release.set).start()
        t0 = time.monotonic()
        client.close()
        assert time.monotonic() - t0 >= 0.4 and client._consumer is None
        for c in consumers:
            deadline = time.monotonic() + 5
            while not c.closed:
                assert time.monotonic() < deadline
                time.sleep(0.01)
    finally:
        release.set()


def test_a_close_that_returns_is_waited_for():
    client = KafkaClient("127.0.0.1:1", "t", [0], {}, "g")
    release = threading.Event()
    release.set()
    client._consumer = consumer = _Consumer(release)
    client.close()
    assert consumer.closed and client._consumer is None and not client._stuck_closes
