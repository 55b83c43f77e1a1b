"""A user's own transform for the fault tests: ``--transform tests.pulsegraph.faulty_transform:faulty``.

It is the ``edges`` transform with two faults a user's code really has:

- its function raises ``ValueError`` for an edge whose ``src`` is ``"raise"`` (a bug
  that one record triggers): that record is a dead letter, the stream goes on;
- its batch path raises ``RuntimeError`` for an edge whose ``src`` names a file
  that exists (``"crash-once:/path"``), removing the file first: an error of the
  ingest loop itself, once, which relaunches the pipeline; replayed, the record
  is an ordinary edge.
"""

from __future__ import annotations

import os

from pulsegraph.ingest.events import AddEdge, GraphEvent
from pulsegraph.ingest.transforms import (
    TRANSFORMS,
    Transform,
    edges_transform,
    register_transform,
)

CRASH_ONCE = "crash-once:"


def apply(event: GraphEvent):
    if isinstance(event, AddEdge) and event.src == "raise":
        raise ValueError("the user's transform does not take this edge")
    return edges_transform(event)


def emit(router, part, offsets, decoded, slow) -> None:
    for k, event in enumerate(decoded):
        src = getattr(event, "src", "")
        if src.startswith(CRASH_ONCE) and os.path.exists(src[len(CRASH_ONCE):]):
            os.remove(src[len(CRASH_ONCE):])
            raise RuntimeError("the ingest loop itself failed")
        slow(k)


if "tests.pulsegraph.faulty_transform:faulty" not in TRANSFORMS:
    register_transform(Transform("tests.pulsegraph.faulty_transform:faulty", GraphEvent, apply, emit=emit))
