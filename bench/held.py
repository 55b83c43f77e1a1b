"""What a compute stage holds, part by part: the bytes reachable from each of its structures.

``python -m bench.replay replay FILE --held`` prints it after the last epoch, so the parts that keep the
compute actor the largest process of the service (the merge view, the applications, the ranking) are
counted on the stage the actor runs, not estimated. The bytes of a part are its NumPy buffers (each
counted once, in the first part that reaches it, in the order below) plus ``sys.getsizeof`` of the Python
objects on the way (lists of names, dicts of attributes): within a few percent of what the process holds
for them, short of the allocator's slack.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np

_SKIP = (type, types.FunctionType, types.ModuleType, types.MethodType, types.BuiltinFunctionType)
_SCALARS = (int, float, str, bytes, bool, type(None))


def reachable_bytes(obj: Any, seen: set[int]) -> int:
    """Bytes of everything reachable from ``obj`` not in ``seen`` (ids; grown as it goes, so what they name
    must stay alive while ``seen`` is in use: Python gives a dead object's id to the next one)."""
    stack, total = [obj], 0
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, np.ndarray):
            base = o
            while isinstance(base.base, np.ndarray):
                base = base.base
            if base is not o:
                if id(base) in seen:
                    continue
                seen.add(id(base))
            total += base.nbytes
        elif isinstance(o, _SCALARS):
            total += sys.getsizeof(o)
        elif isinstance(o, _SKIP) or not isinstance(getattr(type(o), "__module__", None), str):
            continue
        else:
            total += sys.getsizeof(o)
            if isinstance(o, dict):
                stack.extend(o.keys())
                stack.extend(o.values())
            elif isinstance(o, (list, tuple, set, frozenset)):
                stack.extend(o)
            elif hasattr(o, "__dict__"):
                stack.extend(vars(o).values())
            elif hasattr(o, "__slots__"):
                stack.extend(getattr(o, s) for s in o.__slots__ if hasattr(o, s))
    return total


def held_by_part(stage: Any) -> dict[str, int]:
    """Bytes per part of a :class:`~pulsegraph.compute.stage.ComputeStage`: each attribute of its merge view
    (``graph.*``) and of its applications (``apps.*``, each application's state apart), the ranking
    engine, and whatever else the stage reaches."""
    seen: set[int] = set()
    # The engine first: with partitions in this process the graph's slots are theirs (compute.slots.PartitionSlots).
    parts = {"engine (ranking)": reachable_bytes(stage.engine, seen)}
    parts.update({f"graph.{k}": reachable_bytes(v, seen) for k, v in vars(stage.graph).items()})
    apps = stage.apps
    parts["apps.adjacency"] = reachable_bytes(apps.adjacency, seen)
    for name, state in apps.states.items():
        parts[f"apps.states[{name}]"] = reachable_bytes(state, seen)
    parts["apps (the rest)"] = reachable_bytes(apps, seen)
    parts["the rest"] = reachable_bytes(stage, seen)
    return parts


def held_table(stage: Any, edges: int, vertices: int, floor: float = 1e6) -> str:
    """:func:`held_by_part` as a Markdown table (parts of ``floor`` bytes or more), largest first."""
    parts = held_by_part(stage)
    rows = ["| part | MB | B per live edge | B per vertex |", "|---|---|---|---|"]
    for name, b in sorted(parts.items(), key=lambda kv: -kv[1]):
        if b >= floor:
            rows.append(f"| {name} | {b / 1e6:,.1f} | {b / max(edges, 1):.1f} | {b / max(vertices, 1):.1f} |")
    total = sum(parts.values())
    rows.append(f"| **all** | {total / 1e6:,.1f} | {total / max(edges, 1):.1f} | {total / max(vertices, 1):.1f} |")
    return "\n".join(rows)
