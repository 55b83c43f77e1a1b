"""One service per data folder: a second one refuses at once and names the process that holds it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from pulsegraph.errors import PipelineError
from pulsegraph.lock import DataDirLock

# Each test starts the service as a process of its own (a real Ray instance in it).
pytestmark = pytest.mark.integration


def test_a_second_lock_on_the_folder_is_refused_and_names_the_holder(tmp_path):
    first = DataDirLock(tmp_path).acquire()
    with pytest.raises(PipelineError) as err:
        DataDirLock(tmp_path).acquire()
    assert f"process {os.getpid()}" in str(err.value) and "Operator action" in str(err.value)
    first.release()
    DataDirLock(tmp_path).acquire().release()  # released: free again


def test_a_second_service_on_a_held_folder_exits_at_once_with_the_holder(tmp_path):
    held = DataDirLock(tmp_path / "data").acquire()
    try:
        t0 = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "pulsegraph.cli", "run", "--data-dir", str(tmp_path / "data"), "--port", "0"],
            capture_output=True, text=True, timeout=120,
        )
        assert out.returncode == 1, out.stdout + out.stderr
        assert f"in use by another pulsegraph service (process {os.getpid()})" in out.stdout
        assert time.monotonic() - t0 < 60
        assert not (tmp_path / "data" / "epochs.log").exists(), "it must refuse before it touches the folder"
    finally:
        held.release()
