"""Kernels with constructs a differentiated kernel does not take yet (the refusal tests)."""
from numba import cuda, float64


def block_sum(x, out):
    tile = cuda.shared.array(64, float64)
    i = cuda.grid(1)
    tile[cuda.threadIdx.x] = x[i]
    cuda.syncthreads()
    out[i] = tile[0]


def uses_atomic_result(x, out):
    i = cuda.grid(1)
    old = cuda.atomic.add(out, 0, x[i])
    out[i] = old
