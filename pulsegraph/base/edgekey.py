"""The packed key of a typed edge: ``src:26 | dst:26 | type:12`` bits of a uint64.

One layout for every index that keys edges by their ends and type (a shard's
edge table, the API's graph view), so that they hold integers rather than
tuples: at most 2**26 (67 M) vertex ids and 4096 edge types. A vertex's
out-edges are one range of keys (:func:`src_range`).
"""

from __future__ import annotations

import numpy as np

ID_BITS = 26
TYPE_BITS = 12
MAX_VERTICES = 1 << ID_BITS
MAX_TYPES = 1 << TYPE_BITS
SRC_SHIFT = np.uint64(ID_BITS + TYPE_BITS)
DST_SHIFT = np.uint64(TYPE_BITS)
_ID_MASK = np.uint64(MAX_VERTICES - 1)
_TYPE_MASK = np.uint64(MAX_TYPES - 1)


def pack(src: np.ndarray, dst: np.ndarray, etype: np.ndarray) -> np.ndarray:
    """The key of each (src, dst, type); each must be below its maximum (the caller checks)."""
    return (src.astype(np.uint64) << SRC_SHIFT) | (dst.astype(np.uint64) << DST_SHIFT) | etype.astype(np.uint64)


def unpack(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(src, dst, type)`` of each key: int32, int32, int16."""
    return ((keys >> SRC_SHIFT).astype(np.int32), ((keys >> DST_SHIFT) & _ID_MASK).astype(np.int32),
            (keys & _TYPE_MASK).astype(np.int16))


def src_range(vertex: int) -> tuple[int, int | None]:
    """The keys ``[lo, hi)`` of the edges out of ``vertex`` (``hi`` None: up to the largest key)."""
    lo = vertex << int(SRC_SHIFT)
    hi = (vertex + 1) << int(SRC_SHIFT)
    return lo, (hi if hi < 1 << 64 else None)
