"""Joining Ray: the cluster at ``--ray-address``, or the embedded instance on this machine, and what the
wiring asks of it (how many nodes are alive). Owns how the embedded instance is configured: loopback
only, no dashboard, no usage reports, no metrics export. Must not know the pipeline's actors.
"""

from __future__ import annotations

import logging
import os

import ray

from pulsegraph.settings import Settings, drop_secrets_from_environment
from pulsegraph.supervisor import OBJECT_STORE_BYTES

# The embedded Ray instance advertises at least this many CPUs: actors hold
# none while they run, but each needs one to be scheduled.
MIN_LOCAL_CPUS = 4


def init_ray(settings: Settings) -> None:
    """Join the cluster at ``--ray-address``, or start the embedded Ray instance; nothing if already joined.

    Every process Ray starts inherits this one's environment (the GCS and raylets from it, the workers
    from the raylet), so the secrets the settings read from it are dropped from it first: no actor
    needs the API token. The embedded instance is one node on this machine: it listens on loopback
    only, and runs without what the service does not use (the dashboard, usage reports, metrics export).
    """
    if ray.is_initialized():
        return
    drop_secrets_from_environment()
    if settings.ray_address:
        ray.init(address=settings.ray_address, logging_level=logging.WARNING)
        return
    _loopback_node()
    # Usage reports go to Ray's servers once an hour unless told not to; an embedded instance never phones home
    # (an operator who sets the variable decides otherwise).
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(
        address="local",
        num_cpus=max(settings.num_cpus or os.cpu_count() or 1, MIN_LOCAL_CPUS),
        object_store_memory=OBJECT_STORE_BYTES,
        include_dashboard=False,
        logging_level=logging.WARNING,
        # The service has its own /metrics; Ray's per-worker metrics export would only cost CPU. Nor
        # does it list Ray's tasks: their events (every actor call: status polls, epochs) go to the GCS,
        # which keeps 100,000 by default. Ray's own processes rose 0.2 GB over an hour's soak and then
        # levelled off, as a filling buffer would; 1,000 are enough to look at a stuck call.
        _system_config={"enable_metrics_collection": False, "task_events_max_num_task_in_gcs": 1000},
    )


def _loopback_node() -> None:
    """Make the embedded Ray node's address 127.0.0.1, so that its GCS, raylet, workers, runtime-env agent
    and autoscaler metrics bind loopback only (Ray binds its servers to the node's address, or every
    interface). ``ray.init(_node_ip_address="127.0.0.1")`` cannot do it: Ray swaps a loopback address
    for the machine's outward one. Ray uses loopback itself where it does not run clusters (its
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` switch, read when ray is imported); the switch is set here
    for this instance. tests/pulsegraph/test_exposure.py checks what listens where, so a Ray that
    changes this fails there, not silently."""
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False


def alive_nodes() -> int:
    return max(1, sum(1 for n in ray.nodes() if n.get("Alive")))
