"""Durable files: what every log and checkpoint of the service writes through.

A file's fsync keeps its bytes, not its name; a file or folder just created
survives a power cut only once the folder that lists it is fsynced too, so
every creation here fsyncs its parent. Used by the embedded event log, the dead
letters, the epoch log, checkpoints, the alert log and the service's lock.
"""

from __future__ import annotations

import fcntl
import os
import time

from pulsegraph.base.errors import LockHeld


def fsync_dir(path: str | os.PathLike) -> None:
    """Make the entries of folder ``path`` (a file created or renamed in it) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def makedirs_durably(path: str | os.PathLike) -> None:
    """``os.makedirs(path, exist_ok=True)``, each folder it creates made durable in its parent."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    makedirs_durably(parent)
    try:
        os.mkdir(path)
    except FileExistsError:
        return
    fsync_dir(parent)


def open_durably(path: str, flags: int) -> int:
    """``os.open`` with ``O_CREAT``; when it creates the file, its folder is fsynced before it returns."""
    try:
        return os.open(path, flags & ~os.O_CREAT)
    except FileNotFoundError:
        fd = os.open(path, flags | os.O_CREAT, 0o644)
        fsync_dir(os.path.dirname(os.path.abspath(path)))
        return fd


def lock_exclusively(path: str, wait_s: float = 0.0) -> int:
    """A descriptor holding an exclusive ``flock`` on ``path`` (created durably) with this process's id
    written in it, once no other holds it: waits up to ``wait_s``, then raises :class:`LockHeld` naming
    the holder's id. The kernel releases the lock when the descriptor is closed or its process ends,
    SIGKILL included, so a crash never leaves it stale."""
    fd = open_durably(path, os.O_RDWR)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise LockHeld(path, holder) from None
            time.sleep(0.02)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def append_durably(path: str, data: bytes) -> None:
    """One ``O_APPEND`` write (whole lines never interleave with another appender's), then fsync."""
    fd = open_durably(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
