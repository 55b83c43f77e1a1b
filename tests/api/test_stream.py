"""The event stream's fan-out: a client that does not read holds one frame, the newest, and never blocks a publisher."""

from __future__ import annotations

import asyncio
import threading

from pulsegraph.api.stream import Broadcaster, sse_frame


def test_a_slow_client_keeps_only_the_newest_epoch():
    b = Broadcaster()

    async def run():
        slow, other = b.subscribe(), b.subscribe()
        # The feed thread publishes 500 epochs while neither client reads.
        t = threading.Thread(target=lambda: [b.publish(sse_frame(e, b"{}")) for e in range(1, 501)])
        t.start()
        await asyncio.to_thread(t.join)
        for _ in range(50):  # let the loop run the hand-offs the feed thread scheduled
            await asyncio.sleep(0)
        for q in (slow, other):
            assert q.qsize() == 1
            assert (await q.get()).startswith(b"id: 500\n")
        assert b.dropped == 2 * 499
        b.unsubscribe(slow)
        b.unsubscribe(other)
        assert b.clients == 0

    asyncio.run(run())


def test_a_stream_starts_with_the_newest_epoch_and_unsubscribes_when_closed():
    b = Broadcaster()

    async def run():
        q = b.subscribe()
        gen = b.stream(q, sse_frame(7, b'{"epoch":7}'))
        first = await gen.__anext__()
        assert b"id: 7\n" in first and first.startswith(b"retry:")
        b.publish(sse_frame(8, b'{"epoch":8}'))
        assert (await gen.__anext__()).startswith(b"id: 8\n")
        await gen.aclose()
        assert b.clients == 0

    asyncio.run(run())


def test_closing_ends_every_stream():
    b = Broadcaster()

    async def run():
        q = b.subscribe()
        frames = []

        async def read():
            async for frame in b.stream(q, None):
                frames.append(frame)

        task = asyncio.create_task(read())
        await asyncio.sleep(0)
        b.close()
        await asyncio.wait_for(task, 5)
        assert b.clients == 0 and b.subscribe() is None

    asyncio.run(run())
