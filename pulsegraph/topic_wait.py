"""The pipeline's wait for its Kafka topic at a launch: the broker's description of the topic, asked again
(with a growing pause) while the broker is unreachable, refuses the service, or the topic is not there yet,
with what /health says meanwhile. Must not launch anything: :mod:`pulsegraph.topology` does, with the answer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from pulsegraph.errors import PipelineError
from pulsegraph.ingest.sources.kafka_clients import TopicInfo, describe_topic
from pulsegraph.ingest.sources.kafka_config import KafkaConfig
from pulsegraph.ingest.sources.kafka_faults import diagnose
from pulsegraph.settings import Settings

log = logging.getLogger(__name__)


def wait_for_topic(
    settings: Settings, kafka_config: KafkaConfig | None, stop: threading.Event, report: Callable[[dict], None],
) -> TopicInfo:
    """The broker's description of the topic; waits (``report``-ing "disconnected", "faulted" or "waiting for
    the topic" as the status) while it cannot have it. Raises PipelineError once ``stop`` is set."""
    from kafka.errors import KafkaError

    from pulsegraph.ingest.exceptions import SourceError

    delay = 0.5
    while True:
        since = time.monotonic()
        try:
            return describe_topic(str(settings.bootstrap), str(settings.topic), kafka_config)
        except (KafkaError, SourceError) as exc:
            # Unreachable, refusing us (credentials, certificates, ACLs: a fault, with the action), or the
            # topic is not there yet (a producer may be about to create it).
            fault = diagnose(exc, str(settings.bootstrap), kafka_config, settings.topic, settings.group,
                             since) if isinstance(exc, KafkaError) else None
            state = "faulted" if fault else "disconnected" if isinstance(exc, KafkaError) else "waiting for the topic"
            report({"status": "degraded", "ingest": state, "error": fault or f"Kafka: {exc}"})
            if fault:
                log.error("%s", fault)
            else:
                log.warning("Kafka at %s: %s; retrying in %.1f s", settings.bootstrap, exc, delay)
            if stop.wait(delay):
                raise PipelineError("stopped while waiting for Kafka") from exc
            delay = min(delay * 2, 10.0)
