"""A data folder's history belongs to one source: a launch on another (a replaced file, another
transform, another synthetic seed) is refused naming what changed; the same source resumes."""

from __future__ import annotations

import json
import os

import pytest

from pulsegraph.errors import PipelineError
from pulsegraph.identity import FILE
from pulsegraph.settings import Settings
from pulsegraph.topology import Pipeline
from tests.pulsegraph.test_pipeline import edge_lines, write


def run_once(settings: Settings) -> None:
    p = Pipeline(settings).start()
    try:
        p.wait_for_epoch(lambda v: v.result.epoch >= 1, timeout=60)
    finally:
        p.stop()


def refused(settings: Settings) -> str:
    """Start, expect the refusal, and release what start took (as ``pulsegraph run`` does)."""
    p = Pipeline(settings)
    try:
        with pytest.raises(PipelineError) as err:
            p.start()
    finally:
        p.stop()
    return str(err.value)


def test_a_file_replaced_at_its_path_or_another_transform_is_refused(ray_cluster, tmp_path):
    path = tmp_path / "events.jsonl"
    write(path, edge_lines(400, seed=31))
    settings = Settings(source="file", path=path, data_dir=tmp_path / "data", epoch_interval="50ms", shards=2)
    run_once(settings)
    stored = json.loads((tmp_path / "data" / FILE).read_text())
    assert stored == {"kind": "file", "transform": "edges", "window": "off", "path": str(path.resolve()), "inode": path.stat().st_ino}
    Pipeline(settings).start().stop()  # the same source resumes
    # Another transform makes other transactions of the same lines.
    assert "its transform was 'edges', now 'tweets'" in refused(settings.model_copy(update={"transform": "tweets"}))
    # Replaced by another file at the same path (log rotation, a fresh export): a new inode.
    other = tmp_path / "other.jsonl"
    write(other, edge_lines(400, seed=32))
    os.replace(other, path)
    why = refused(settings)
    assert "the file at this path was replaced" in why and "Operator action" in why, why


def test_another_synthetic_seed_is_refused(ray_cluster, tmp_path):
    settings = Settings(source="synthetic", data_dir=tmp_path / "data", epoch_interval="50ms", rate=2000, shards=2)
    run_once(settings)
    assert "its seed was 7, now 8" in refused(settings.model_copy(update={"seed": 8}))
