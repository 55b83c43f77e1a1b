"""The wiring's errors. The root of every error, :class:`PulsegraphError`, is in :mod:`pulsegraph.base.errors`
(the bottom layer, which every stage imports); it is named here too for the wiring's callers."""

from __future__ import annotations

from pulsegraph.base.errors import PulsegraphError

__all__ = ["PipelineError", "ProduceError", "PulsegraphError", "ResultsError"]


class PipelineError(PulsegraphError):
    """The wiring cannot build or recover the pipeline."""


class ProduceError(PulsegraphError):
    """``pulsegraph produce`` cannot set up or reach its topic."""


class ResultsError(PulsegraphError):
    """The results topic (``--results-topic``) cannot be reached, set up or trusted."""
