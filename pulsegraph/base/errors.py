"""The root of every error pulsegraph raises, and the errors of the shared primitives.

Each stage defines its own one-line subclasses in its ``exceptions.py``; the
wiring's are in :mod:`pulsegraph.errors`.
"""

from __future__ import annotations


class PulsegraphError(Exception):
    """Base class of all pulsegraph errors."""


class LockHeld(PulsegraphError):
    """Another process holds the lock of a file (see :func:`pulsegraph.base.durable.lock_exclusively`)."""

    def __init__(self, path: str, holder: str) -> None:
        super().__init__(f"{path} is locked by process {holder}")
        self.holder = holder
