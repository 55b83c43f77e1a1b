"""The backends every algorithm test runs on: NumPy always, CuPy where it sees a GPU (marked ``gpu``)."""

from __future__ import annotations

import pytest

from pulsegraph.compute.backend import cupy_gpu_count, get_backend, numpy_backend


@pytest.fixture(
    params=[
        "numpy",
        pytest.param(
            "cupy",
            marks=[
                pytest.mark.gpu,
                pytest.mark.skipif(cupy_gpu_count() == 0, reason="CuPy is not installed or sees no GPU"),
            ],
        ),
    ]
)
def backend(request):
    return numpy_backend() if request.param == "numpy" else get_backend("cuda")
