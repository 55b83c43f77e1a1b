"""Errors of the compute stage."""

from pulsegraph.base.errors import PulsegraphError


class ComputeError(PulsegraphError):
    """A compute-stage failure."""


class PowerIterationFailedConvergence(ComputeError):
    """An iterative solver hit its iteration limit before its tolerance: no result is better than a wrong one."""

    def __init__(self, algorithm: str, iterations: int, error: float, tol: float) -> None:
        super().__init__(
            f"{algorithm} did not converge in {iterations} iterations (L1 error bound {error:.3g} > tol {tol:.3g}). "
            "Operator action: raise the iteration limit or the tolerance."
        )
        self.iterations = iterations
        self.error = error


class BackendUnavailable(ComputeError):
    """The configured device cannot be used here."""


class PartitionLost(ComputeError):
    """A compute partition (a Ray actor of --compute-partitions) died while the ranking needed it."""
