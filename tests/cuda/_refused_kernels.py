"""Kernels with constructs a differentiated kernel does not take yet (the refusal tests)."""
from numba import cuda


def uses_atomic_result(x, out):
    i = cuda.grid(1)
    old = cuda.atomic.add(out, 0, x[i])
    out[i] = old


def reads_a_neighbours_write(x, out):
    """Each thread writes out[i] and reads out[i - 1], which another thread writes: no order to rely on."""
    i = cuda.grid(1)
    if 0 < i < x.shape[0]:
        out[i] = x[i] * x[i]
        x[i] = out[i - 1] + 1.0
