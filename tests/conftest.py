"""Shared fixtures: a real local Ray instance for the tests that ask for it."""

from __future__ import annotations

import logging

import pytest
import ray


@pytest.fixture(scope="session")
def ray_cluster():
    """A real embedded Ray instance, shared by the session; actors are created per test."""
    if not ray.is_initialized():
        ray.init(
            address="local",
            num_cpus=8,
            object_store_memory=256 * 1024 * 1024,
            include_dashboard=False,
            logging_level=logging.WARNING,
        )
    yield ray
    ray.shutdown()
