"""The readers-writer lock of the API's graph view: readers share it, a writer has it alone and is not starved."""

from __future__ import annotations

import threading
import time

from pulsegraph.base.rwlock import ReadWriteLock


def test_readers_share_the_lock_and_the_loop_gets_a_share_beside_them():
    lock = ReadWriteLock()
    inside, release = threading.Barrier(3), threading.Event()

    def reader():
        with lock.read():
            inside.wait(timeout=5)
            release.wait(timeout=5)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait(timeout=5)  # both readers hold it at once
    assert lock.try_read()  # and the event loop's read is not turned away by them
    lock.release_read()
    release.set()
    for t in threads:
        t.join(timeout=5)


def test_a_writer_waits_for_readers_then_holds_new_readers_back_until_it_is_done():
    lock = ReadWriteLock()
    order: list[str] = []
    lock_taken = threading.Event()

    def writer():
        with lock.write():
            order.append("write")
            lock_taken.set()
            time.sleep(0.05)
            order.append("written")

    with lock.read():
        w = threading.Thread(target=writer)
        w.start()
        deadline = time.monotonic() + 5
        while not lock._writers_waiting:  # the writer queued behind this read
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert not lock.try_read()  # a waiting writer turns the loop's read away: the writer goes first
        order.append("read done")
    assert lock_taken.wait(timeout=5)
    assert not lock.try_read()  # the writer holds it
    with lock.read():  # a blocking read waits for the write to end
        order.append("read after")
    w.join(timeout=5)
    assert order == ["read done", "write", "written", "read after"]
    assert lock.try_read()
    lock.release_read()
