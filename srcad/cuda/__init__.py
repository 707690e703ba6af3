"""The GPU side of srcad: differentiable numba.cuda kernels (`kernel`), launched as in Numba.

Needs the `cuda` extra (numba-cuda); without a GPU, Numba's CUDA simulator
(`NUMBA_ENABLE_CUDASIM=1`) runs the same kernels in Python.
"""
try:
    from numba import cuda as _cuda   # noqa: F401  (numba-cuda, or the simulator)
except ImportError as exc:            # pragma: no cover - depends on the installation
    raise ImportError("srcad's cuda target needs numba-cuda: pip install 'srcad[cuda]' (see docs/cuda.md)") from exc

from .kernels import Kernel, kernel

__all__ = ["Kernel", "kernel"]
