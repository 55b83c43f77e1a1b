"""The ranked graph kept resident on the device, absorbing each epoch's changes in place.

Owns the weighted adjacency ``A[s, d]`` the ranking algorithms read: a base CSR
with rows by source (pushes read a vertex's row; a pull sweep ``A^T v`` reads it
transposed), an overlay of per-pair weight *differences* against the base, and
each vertex's exact out-weight. On a GPU the base and overlay are kept a second
time with rows by destination, so that a sweep is cuSPARSE's plain gather; on the
host that copy is not kept: 12 bytes an edge in the process that holds the most,
and SciPy's transposed product (a scatter into the destinations, which a social
graph concentrates in its hubs) took 57 ms where the gather over random sources
took 134-137 in two runs, at 27 M edges (BENCHMARKS.md, "Ranking"). An epoch's changes are additive: they merge
into the overlay (host keys, device CSR copies rebuilt from it, small) and into
the out-weights; the base is rebuilt (compacted) only when the overlay grows
past ``compact_fraction`` of it. Nothing is ever rebuilt from the shards.

Weights are kept in the snapshot stage's fixed-point units (integers), so sums
and differences are exact in float64 and a removed edge leaves an exact zero:
a vertex whose last out-edge goes is dangling again, not holding 1e-17 of
weight. PageRank and TunkRank only use ``A / out``, which is unit-free.
Must not know about shards, Ray or the algorithms.
"""

from __future__ import annotations

import numpy as np

from pulsegraph.base.arrays import unique
from pulsegraph.compute.backend import Backend, numpy_backend

# Overlay entries are keyed by src << 32 | dst: vertex ids stay below 2**31.
_KEY_SHIFT = np.int64(32)
_KEY_MASK = np.int64((1 << 32) - 1)


class ResidentGraph:
    def __init__(
        self,
        backend: Backend | None = None,
        dtype=np.float64,
        compact_fraction: float = 0.05,
        # Below this many overlay entries compaction is never worth a rebuild.
        compact_min: int = 4096,
    ) -> None:
        self.be = backend or numpy_backend()
        self.dtype = np.dtype(dtype)
        self.compact_fraction = compact_fraction
        self.compact_min = compact_min
        self.n = 0
        # Exact (integer units in float64); on the device with the rest, so that an epoch's merge never
        # leaves it (see :meth:`apply`).
        self.out_weight = self.be.xp.zeros(0, dtype=np.float64)
        self.inv_out = self.be.xp.zeros(0, dtype=self.dtype)  # 1/out, 0 for dangling vertices
        self.out_degree = self.be.xp.zeros(0, dtype=np.int64)  # stored entries per row, base + overlay
        # Rows by destination as well (GPU): sweeps gather instead of scatter. None: sweeps use the transpose.
        self._by_dst = self.be.is_gpu
        self._base_out = self._empty(0)
        self._base_in = self._empty(0) if self._by_dst else None
        self._ov_keys = self.be.xp.zeros(0, dtype=np.int64)  # sorted src << 32 | dst
        self._ov_vals = self.be.xp.zeros(0, dtype=np.float64)
        self._ov_out = None
        self._ov_in = None
        self.compactions = 0

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_edges(cls, n: int, src, dst, weight, backend: Backend | None = None, **kw) -> "ResidentGraph":
        g = cls(backend, **kw)
        g.grow(n)
        g.apply(np.asarray(src), np.asarray(dst), np.asarray(weight, dtype=np.float64))
        g.compact()
        return g

    @classmethod
    def from_device_edges(cls, n: int, src, dst, weight, backend: Backend, **kw) -> "ResidentGraph":
        """Straight into the base CSRs on the device (repeated pairs summed), without the host overlay
        path: for graphs too big to pass through host arrays, such as bench/gpu_check.sh's."""
        g = cls(backend, **kw)
        g.grow(n)
        xp, dtype = backend.xp, g.dtype
        base = backend.sparse.coo_matrix((xp.asarray(weight, dtype=dtype), (src, dst)), shape=(n, n)).tocsr()
        base.sum_duplicates()
        g._base_out = base
        g._base_in = base.T.tocsr() if g._by_dst else None
        g.out_weight = xp.asarray(base.sum(axis=1)).ravel().astype(np.float64)
        g.inv_out = g._inverse(g.out_weight)
        g._rebuild_overlay()
        return g

    @classmethod
    def from_scipy(cls, adjacency, backend: Backend | None = None, **kw) -> "ResidentGraph":
        coo = adjacency.tocoo()
        return cls.from_edges(adjacency.shape[0], coo.row, coo.col, coo.data, backend, **kw)

    def _empty(self, n: int):
        xp = self.be.xp
        return self.be.sparse.csr_matrix(
            (xp.zeros(0, dtype=self.dtype), xp.zeros(0, dtype=np.int32), xp.zeros(n + 1, dtype=np.int32)), shape=(n, n)
        )

    @property
    def nnz(self) -> int:
        """Stored entries of the base (the overlay is at most ``compact_fraction`` of it)."""
        return int(self._base_out.nnz)

    @property
    def overlay_nnz(self) -> int:
        return len(self._ov_keys)

    def nbytes(self) -> int:
        """Device bytes of the resident graph: both base CSRs, the overlay copies and the per-vertex arrays."""
        total = 0
        for m in (self._base_out, self._base_in, self._ov_out, self._ov_in):
            if m is not None:
                total += m.data.nbytes + m.indices.nbytes + m.indptr.nbytes
        return total + self.inv_out.nbytes + self.out_degree.nbytes

    # -- changes ------------------------------------------------------------------------------

    def grow(self, n: int) -> None:
        """Make room for vertices ``self.n .. n-1`` (no edges yet)."""
        if n <= self.n:
            return
        xp = self.be.xp
        extra = n - self.n
        self.out_weight = xp.concatenate([self.out_weight, xp.zeros(extra, dtype=np.float64)])
        self.inv_out = xp.concatenate([self.inv_out, xp.zeros(extra, dtype=self.dtype)])
        self.out_degree = xp.concatenate([self.out_degree, xp.zeros(extra, dtype=np.int64)])
        self._base_out = self._pad(self._base_out, n)
        if self._base_in is not None:
            self._base_in = self._pad(self._base_in, n)
        self.n = n
        self._rebuild_overlay()

    def open_gap(self, at: int, count: int) -> None:
        """Insert ``count`` vertices with no edges at index ``at``: vertices ``at ..`` become ``at + count ..``.

        Only for a graph whose vertices from ``at`` on have no out-edges (a compute partition's ghosts,
        which stand for remote destinations: :mod:`pulsegraph.compute.partitioned`), so that only
        column indices move: by-source rows past ``at`` are empty and stay so, by-destination rows get
        ``count`` empty rows at ``at``. One pass over the stored entries; a partition calls it when its
        owned vertices outgrow the room kept for them, a geometric number of times."""
        if count <= 0:
            return
        if at > self.n:
            raise ValueError(f"open_gap at {at} beyond the {self.n} vertices")
        if at < self.n and bool((self.out_degree[at:] > 0).any()):
            raise ValueError("open_gap: vertices from `at` on must have no out-edges")
        be, xp = self.be, self.be.xp
        n = self.n + count

        def shift_columns(m):
            idx = xp.where(m.indices >= at, m.indices + count, m.indices).astype(m.indices.dtype)
            indptr = xp.concatenate([m.indptr, xp.full(count, m.indptr[-1], dtype=m.indptr.dtype)])
            return be.sparse.csr_matrix((m.data, idx, indptr), shape=(n, n))

        def insert_rows(m):
            fill = xp.full(count, m.indptr[at], dtype=m.indptr.dtype)
            indptr = xp.concatenate([m.indptr[: at + 1], fill, m.indptr[at + 1:]])
            return be.sparse.csr_matrix((m.data, m.indices, indptr), shape=(n, n))

        self._base_out = shift_columns(self._base_out)
        if self._base_in is not None:
            self._base_in = insert_rows(self._base_in)
        # Keys are src << 32 | dst with src < at: shifting the destinations keeps them sorted.
        dst = self._ov_keys & _KEY_MASK
        self._ov_keys = xp.where(dst >= at, self._ov_keys + count, self._ov_keys)
        # The per-vertex arrays are zero from ``at`` on (no out-edges): the gap is a zero tail.
        self.out_weight = xp.concatenate([self.out_weight, xp.zeros(count, dtype=np.float64)])
        self.inv_out = xp.concatenate([self.inv_out, xp.zeros(count, dtype=self.dtype)])
        self.n = n
        self._rebuild_overlay()

    def _pad(self, m, n: int):
        xp = self.be.xp
        tail = xp.full(n - m.shape[0], m.indptr[-1], dtype=m.indptr.dtype)
        indptr = xp.concatenate([m.indptr, tail])
        return self.be.sparse.csr_matrix((m.data, m.indices, indptr), shape=(n, n))

    def apply(self, src: np.ndarray, dst: np.ndarray, dweight: np.ndarray) -> None:
        """Add ``dweight`` (host arrays, fixed-point units, repeats summed) to ``A[src, dst]``.

        The merge runs where the graph lives: on a GPU the overlay, the out-weights and their sums
        stay on the device (an H200 at 500 M edges spent 157-178 ms of a 267-288 ms epoch sorting the
        overlay and scattering 500 k changes into 33 M out-weights on the host)."""
        if len(src) == 0:
            return
        be, xp = self.be, self.be.xp
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        if max(int(src.max()), int(dst.max())) >= self.n:
            raise ValueError("edge refers to a vertex beyond grow(n)")
        s, d = be.asarray(src), be.asarray(dst)
        w = be.asarray(dweight, dtype=np.float64)
        keys = xp.concatenate([self._ov_keys, (s << _KEY_SHIFT) | d])
        vals = xp.concatenate([self._ov_vals, w])
        uniq, inv = xp.unique(keys, return_inverse=True)
        summed = xp.zeros(len(uniq), dtype=np.float64)
        be.scatter_add(summed, inv.ravel(), vals)
        keep = summed != 0.0
        self._ov_keys, self._ov_vals = uniq[keep], summed[keep]
        be.scatter_add(self.out_weight, s, w)
        rows = xp.unique(s) if be.is_gpu else unique(src)
        self.inv_out[rows] = self._inverse(self.out_weight[rows])
        if len(self._ov_keys) > max(self.compact_min, self.compact_fraction * self.nnz):
            self.compact()
        else:
            self._rebuild_overlay()

    def _inverse(self, out):
        """``1 / out`` in the ranking's dtype, 0 where a vertex has no out-weight (dangling)."""
        xp = self.be.xp
        safe = xp.where(out > 0, out, 1.0)
        return xp.where(out > 0, 1.0 / safe, 0.0).astype(self.dtype)

    def _rebuild_overlay(self) -> None:
        be, xp = self.be, self.be.xp
        n = self.n
        if len(self._ov_keys) == 0:
            self._ov_out = self._ov_in = None
        else:
            s_dev = (self._ov_keys >> _KEY_SHIFT).astype(np.int32)
            d_dev = (self._ov_keys & _KEY_MASK).astype(np.int32)
            v = self._ov_vals.astype(self.dtype)
            # Keys are sorted by (src, dst): the by-source CSR is the keys themselves.
            self._ov_out = be.sparse.coo_matrix((v, (s_dev, d_dev)), shape=(n, n)).tocsr()
            self._ov_in = be.sparse.coo_matrix((v, (d_dev, s_dev)), shape=(n, n)).tocsr() if self._by_dst else None
        deg = xp.diff(self._base_out.indptr).astype(np.int64)
        if self._ov_out is not None:
            deg += xp.diff(self._ov_out.indptr).astype(np.int64)
        self.out_degree = deg

    def compact(self) -> None:
        """Fold the overlay into the base on the device; exact zeros (removed pairs) are dropped."""
        self._rebuild_overlay()
        if self._ov_out is None:
            return
        # Both directions the same way: base plus overlay, a linear merge of sorted rows each (the by-
        # destination side was a transpose of the merged by-source one, a scatter over every entry:
        # slower, and the same sums, since each entry adds the same two numbers either way).
        self._base_out = self._merged(self._base_out, self._ov_out)
        if self._base_in is not None:
            self._base_in = self._merged(self._base_in, self._ov_in)
        self._ov_keys = self.be.xp.zeros(0, dtype=np.int64)
        self._ov_vals = self.be.xp.zeros(0, dtype=np.float64)
        self.compactions += 1
        self._rebuild_overlay()

    def _merged(self, base, overlay):
        merged = (base + overlay).tocsr()
        if self.dtype != np.float64:
            # float32 sums of large fixed-point weights can miss zero by rounding; units are integers.
            merged.data = self.be.xp.rint(merged.data)
        merged.eliminate_zeros()
        merged.sort_indices()
        return merged

    # -- the two access patterns of the algorithms ---------------------------------------------

    def pull(self, v):
        """``A^T v``: for each vertex, the sum over its in-edges of weight times ``v[src]``."""
        if self._base_in is None:
            out = self._base_out.T @ v
            if self._ov_out is not None:
                out += self._ov_out.T @ v
            return out
        out = self._base_in @ v
        if self._ov_in is not None:
            out += self._ov_in @ v
        return out

    def push(self, rows, coef, out) -> int:
        """``out[d] += coef[i] * A[rows[i], d]`` for every stored entry of the given rows; returns entries read."""
        be = self.be
        read = 0
        for m in (self._base_out, self._ov_out):
            if m is None or len(rows) == 0:
                continue
            starts = m.indptr[rows].astype(np.int64)
            lens = m.indptr[rows + 1].astype(np.int64) - starts
            pos, owner = be.gather_ranges(starts, lens)
            if len(pos) == 0:
                continue
            be.scatter_add(out, m.indices[pos], m.data[pos] * coef[owner])
            read += len(pos)
        return read

    # -- for tests and the reference paths -----------------------------------------------------

    def to_scipy(self):
        """The effective adjacency (base + overlay) as a host SciPy CSR."""
        import scipy.sparse as sp  # noqa: PLC0415

        def host(m):
            if m is None:
                return sp.csr_matrix((self.n, self.n))
            if self.be.is_gpu:
                return m.get()
            return m

        a = (host(self._base_out) + host(self._ov_out)).tocsr()
        a.eliminate_zeros()
        return a
