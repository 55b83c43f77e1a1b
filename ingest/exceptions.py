"""Errors of the ingest stage."""

from pulsegraph.errors import PulsegraphError


class IngestError(PulsegraphError):
    """An ingest-stage failure that stops a source or an ingest actor."""


class BadRecord(IngestError):
    """A record that cannot become a transaction; it goes to the dead-letter sink, never up the stack."""


class LockHeld(IngestError):
    """Another process holds the lock of a file (see :func:`ingest.eventlog.lock_exclusively`)."""

    def __init__(self, path: str, holder: str) -> None:
        super().__init__(f"{path} is locked by process {holder}")
        self.holder = holder


class SourceError(IngestError):
    """A source cannot be opened, read or positioned."""
