"""A NumPy array that grows by doubling: the storage of every column in a shard."""

from __future__ import annotations

import numpy as np


class Column:
    def __init__(self, dtype, capacity: int = 1024) -> None:
        self._data = np.zeros(capacity, dtype=dtype)
        self.size = 0

    def extend(self, values) -> None:
        values = np.asarray(values, dtype=self._data.dtype)
        need = self.size + len(values)
        if need > len(self._data):
            grown = np.zeros(max(need, 2 * len(self._data)), dtype=self._data.dtype)
            grown[: self.size] = self._data[: self.size]
            self._data = grown
        self._data[self.size : need] = values
        self.size = need

    @property
    def view(self) -> np.ndarray:
        """The live part; writes through it change the column."""
        return self._data[: self.size]

    def __len__(self) -> int:
        return self.size

    @property
    def nbytes(self) -> int:
        return self._data.nbytes
