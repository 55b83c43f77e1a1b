"""The data folder's lock: one service per ``--data-dir``, for the life of the service.

Two services on one folder would both append to one epoch log and write one
set of checkpoints, each undoing the other's history. ``DATA_DIR/LOCK`` is held
with an advisory ``flock`` (released by the kernel when the process ends, even
by SIGKILL, so a crash never leaves a stale lock) and names the holder's
process id, so the second service can say who holds it.
"""

from __future__ import annotations

import os
from pathlib import Path

from pulsegraph.base.durable import lock_exclusively
from pulsegraph.base.errors import LockHeld
from pulsegraph.errors import PipelineError


class DataDirLock:
    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / "LOCK"
        self._fd: int | None = None

    def acquire(self) -> "DataDirLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._fd = lock_exclusively(str(self.path))
        except LockHeld as held:
            raise PipelineError(
                f"{self.path.parent} is in use by another pulsegraph service (process {held.holder}). "
                f"Operator action: stop that process, or give this one another --data-dir."
            ) from None
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None
