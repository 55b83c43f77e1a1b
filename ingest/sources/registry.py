"""Which partition class each source kind opens: the one module that knows every concrete source.

:mod:`pulsegraph.ingest.sources.base` holds the contract and the spec; the sources import
it, and this module imports them, so no import runs in a circle.
"""

from __future__ import annotations

from pulsegraph.ingest.exceptions import SourceError
from pulsegraph.ingest.sources.base import SourcePartition, SourceSpec
from pulsegraph.ingest.sources.file import FilePartition
from pulsegraph.ingest.sources.synthetic import SyntheticPartition


def open_partitions(spec: SourceSpec, names: list[str], starts: dict[str, int]) -> list[SourcePartition]:
    """Open the named partitions of ``spec``, each resuming at ``starts.get(name, 0)``."""
    all_names = spec.partition_names()
    unknown = set(names) - set(all_names)
    if unknown:
        raise SourceError(f"source {spec.kind!r} has no partitions {sorted(unknown)}")
    if spec.kind == "kafka":
        from pulsegraph.ingest.sources.kafka import (
            BaseKafkaClient,
            KafkaClient,
            KafkaPartition,
            partition_number,
        )

        client_class: type[BaseKafkaClient]
        if spec.kafka_client == "confluent":
            from pulsegraph.ingest.sources.confluent import ConfluentKafkaClient

            client_class = ConfluentKafkaClient
        elif spec.kafka_client == "kafka-python":
            client_class = KafkaClient
        else:
            raise SourceError(f"unknown Kafka client {spec.kafka_client!r}; expected kafka-python or confluent")
        numbers = [partition_number(n) for n in names]
        client = client_class(
            str(spec.bootstrap), str(spec.topic), numbers, {partition_number(n): starts.get(n, 0) for n in names}, spec.group,
            spec.kafka_config,
        )
        return [KafkaPartition(client, p) for p in numbers]
    out: list[SourcePartition] = []
    for n in names:
        start = starts.get(n, 0)
        if n == "events:0":
            out.append(FilePartition(n, str(spec.events_log), start))
        elif spec.kind == "synthetic":
            out.append(SyntheticPartition(spec, all_names.index(n), start))
        else:
            out.append(FilePartition(n, spec.path, start, rate=spec.rate, limit=spec.limit))
    return out
