"""The root of every error pulsegraph raises.

This module is a leaf: it imports nothing, so every stage (``ingest``,
``snapshots``, ``compute``, ``api``) may import it without breaking the rule
that imports point one way (ingest <- snapshots <- compute <- api <- pulsegraph).
Each stage defines its own one-line subclasses in its ``exceptions.py``.
"""


class PulsegraphError(Exception):
    """Base class of all pulsegraph errors."""


class PipelineError(PulsegraphError):
    """The wiring cannot build or recover the pipeline."""


class ProduceError(PulsegraphError):
    """``pulsegraph produce`` cannot set up or reach its topic."""


class ResultsError(PulsegraphError):
    """The results topic (``--results-topic``) cannot be reached, set up or trusted."""
