"""Errors of the ingest stage."""

from pulsegraph.base.errors import PulsegraphError


class IngestError(PulsegraphError):
    """An ingest-stage failure that stops a source or an ingest actor."""


class BadRecord(IngestError):
    """A record that cannot become a transaction; it goes to the dead-letter sink, never up the stack."""


class SourceError(IngestError):
    """A source cannot be opened, read or positioned."""


class KafkaConfigError(IngestError):
    """A Kafka properties file that cannot be read, or asks for what a client cannot do."""
