"""A NumPy array that grows by doubling: the storage of every column in a shard.

A column of integers may be kept narrow until a value needs more (``wide``): an edge's
multiplicity is an int64 by contract, but billions of adds of one edge are what it would take
to leave int32, and every copy of the edges (shard, compute stage, API) pays 4 bytes an edge
for the headroom. Such a column widens itself, once and for good, before a value that does not
fit is written through :meth:`Column.extend`, :meth:`Column.put` or :meth:`Column.add`; a write
through :attr:`Column.view` is not checked, so code that writes a narrow column must use those.
"""

from __future__ import annotations

import numpy as np

from pulsegraph.base.arrays import add_at


class Column:
    def __init__(self, dtype, capacity: int = 1024, wide=None) -> None:
        self._data = np.zeros(capacity, dtype=dtype)
        self.size = 0
        # The dtype to widen to when a value does not fit (None: the column never widens).
        self._wide = np.dtype(wide) if wide is not None and np.dtype(wide) != np.dtype(dtype) else None

    @classmethod
    def from_array(cls, values, wide=None) -> Column:
        """A column holding a copy of ``values`` (its dtype; widening to ``wide`` as the constructor's)."""
        values = np.array(values)
        col = cls(values.dtype, 0, wide)
        col._data, col.size = values, len(values)
        return col

    def _fit(self, values: np.ndarray) -> None:
        """Widen the column before ``values`` (integers) are written, if any is outside its dtype."""
        if self._wide is None or not len(values):
            return
        info = np.iinfo(self._data.dtype)
        if values.min() < info.min or values.max() > info.max:
            self._data = self._data.astype(self._wide)
            self._wide = None

    def extend(self, values) -> None:
        values = np.asarray(values)
        self._fit(values)
        values = values.astype(self._data.dtype, copy=False)
        need = self.size + len(values)
        if need > len(self._data):
            # Double: one copy an entry, amortized. The spare capacity costs address space, not memory: np.zeros
            # maps zero pages that stay out of the resident set until written (growing by half instead was
            # measured: no change in any process's resident set; BENCHMARKS.md, "Growable columns").
            grown = np.zeros(max(need, 2 * len(self._data)), dtype=self._data.dtype)
            grown[: self.size] = self._data[: self.size]
            self._data = grown
        self._data[self.size : need] = values
        self.size = need

    def put(self, slots: np.ndarray, values) -> None:
        """``view[slots] = values``, widening first where a value needs it."""
        values = np.asarray(values)
        self._fit(values)
        self._data[: self.size][slots] = values

    def add(self, slots: np.ndarray, deltas) -> None:
        """``view[slots] += deltas`` with repeated slots each adding (as ``np.add.at``), widening first where
        a sum needs it; sums are taken in int64."""
        slots = np.asarray(slots, dtype=np.int64)
        if not len(slots):
            return
        u, inv = np.unique(slots, return_inverse=True)
        sums = self._data[u].astype(np.int64)
        add_at(sums, inv, np.asarray(deltas, dtype=np.int64))
        self.put(u, sums)

    @property
    def view(self) -> np.ndarray:
        """The live part; writes through it change the column (unchecked: see the module docstring)."""
        return self._data[: self.size]

    def __len__(self) -> int:
        return self.size

    @property
    def nbytes(self) -> int:
        return self._data.nbytes
