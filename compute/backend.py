"""The array backend: one namespace ``xp`` for the algorithms, CuPy on a GPU, NumPy/SciPy otherwise.

Owns the choice of device and the few primitives NumPy and CuPy spell
differently (scatter-add, gathering CSR row ranges, host copies). Calls follow
NumPy/SciPy names, so ``cupy`` and ``cupyx.scipy.sparse`` drop in for
``numpy`` and ``scipy.sparse``. CuPy is imported only when asked for, inside
:func:`get_backend`: a machine without it never touches it at module load.
Nothing here knows about graphs, Ray or the API.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp

from pulsegraph.compute.exceptions import BackendUnavailable

log = logging.getLogger(__name__)

Device = Literal["auto", "cpu", "cuda"]


@dataclass(frozen=True)
class Backend:
    """``xp`` is numpy or cupy; ``sparse`` is scipy.sparse or cupyx.scipy.sparse."""

    name: str  # "numpy" or "cupy"
    xp: Any
    sparse: Any

    def __reduce__(self):
        # By name: a module does not pickle, and a stage written whole (a clean stop's checkpoint) takes
        # the backend of the process that reads it back.
        return _backend_named, (self.name,)

    @property
    def is_gpu(self) -> bool:
        return self.name == "cupy"

    def asarray(self, a, dtype=None):
        """Host (or device) data onto this backend's device."""
        return self.xp.asarray(a, dtype=dtype)

    def to_host(self, a) -> np.ndarray:
        """A NumPy copy; the only way results leave the device."""
        if self.is_gpu:
            return self.xp.asnumpy(a)
        return np.array(a, copy=True)

    def scalar(self, a) -> float:
        return float(a)

    def synchronize(self) -> None:
        if self.is_gpu:
            self.xp.cuda.get_current_stream().synchronize()

    def scatter_add(self, out, idx, vals) -> None:
        """``out[idx] += vals`` with repeated indices summed (numpy.add.at)."""
        if len(idx) == 0:
            return
        if self.is_gpu:
            out += self.xp.bincount(idx, weights=vals, minlength=len(out)).astype(out.dtype, copy=False)
        elif len(idx) * 16 < len(out):
            # A handful of targets: add.at touches only them; bincount would allocate all n.
            np.add.at(out, idx, vals)
        else:
            out += np.bincount(idx, weights=vals, minlength=len(out)).astype(out.dtype, copy=False)

    def gather_ranges(self, starts, lens):
        """Positions ``starts[i] .. starts[i] + lens[i]`` concatenated, and the ``i`` each came from.

        CuPy's ``repeat`` takes no array of counts, so the owner of each position is
        found with ``searchsorted`` on the running total there."""
        xp = self.xp
        ends = xp.cumsum(lens)
        total = int(ends[-1]) if len(ends) else 0
        if total == 0:
            z = xp.zeros(0, dtype=np.int64)
            return z, z
        if self.is_gpu:
            owner = xp.searchsorted(ends, xp.arange(total), side="right")
        else:
            owner = np.repeat(np.arange(len(lens)), lens)
        pos = xp.arange(total) - (ends - lens)[owner] + starts[owner]
        return pos, owner


_NUMPY = Backend("numpy", np, sp)


def numpy_backend() -> Backend:
    return _NUMPY


def _probe_cupy() -> tuple[int, str]:
    """GPUs CuPy can use here, and when none, why (empty when CuPy is simply not installed)."""
    try:
        import cupy  # noqa: PLC0415 - optional, imported only when asked for
    except ImportError:
        return 0, ""
    except Exception as exc:  # noqa: BLE001 - a broken CUDA install fails at import with anything
        return 0, f"CuPy is installed but does not import ({type(exc).__name__}: {exc})"
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # noqa: BLE001 - the driver missing, or older than this CuPy's CUDA
        return 0, (f"CuPy {cupy.__version__} sees no GPU ({type(exc).__name__}: {exc}); its CUDA major version "
                   "must be one the driver supports: pip install '.[gpu-cuda12]' or '.[gpu-cuda13]' to match nvidia-smi")
    return count, "" if count else f"CuPy {cupy.__version__} sees no GPU"


def _backend_named(name: str) -> Backend:
    return _cupy_backend() if name == "cupy" else _NUMPY


def cupy_gpu_count() -> int:
    """GPUs CuPy can use here; 0 when CuPy is not installed or sees no device."""
    return _probe_cupy()[0]


def _cupy_backend() -> Backend:
    import cupy  # noqa: PLC0415
    import cupyx.scipy.sparse as csp  # noqa: PLC0415

    return Backend("cupy", cupy, csp)


def get_backend(device: Device = "auto") -> Backend:
    """``cuda``: CuPy or an error; ``cpu``: NumPy; ``auto``: CuPy when it sees a GPU, else NumPy."""
    if device == "cpu":
        return _NUMPY
    if device not in ("auto", "cuda"):
        raise ValueError(f"unknown device {device!r}: auto, cpu or cuda")
    count, why = _probe_cupy()
    if count > 0:
        return _cupy_backend()
    if device == "cuda":
        raise BackendUnavailable(
            f"--device cuda, but {why or 'CuPy is not installed'}. Operator action: pip install '.[gpu-cuda12]' "
            "(or '.[gpu-cuda13]', matching nvidia-smi's CUDA version) on a machine with a CUDA GPU, or run with --device auto/cpu."
        )
    if why:  # CuPy is there and cannot be used: an operator who installed it wants to know
        log.warning("%s; ranking on the CPU with NumPy/SciPy", why)
    else:
        log.info("CuPy is not installed; ranking on the CPU with NumPy/SciPy")
    return _NUMPY
