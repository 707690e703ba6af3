"""The runtime helpers generated kernels call, as CUDA device functions.

The CPU helpers (`srcad.compiler.runtime`) are Numba overloads for the CPU
target, which a CUDA kernel cannot call; each helper a kernel body may name
has its scalar twin here, with the same meaning. An index check does not
raise on the device: it records the first failure in the launch's error
record (`errors`: site + 1, index, size) and the thread stops; the host reads
the record after the launch (`launch.run_threads`) and raises as the CPU
target would.
"""
import math

from numba import cuda

_device = cuda.jit(device=True, inline="always")


@_device
def cotangent_times(g, p):
    """g * p, and 0 where g is exactly 0 even if p is inf or nan."""
    return g * p if g != 0 else g * 0.0


@_device
def finite_or_zero(p):
    return p if p - p == 0.0 else 0.0


@_device
def log_or_zero(x):
    return math.log(x) if x > 0 else 0.0 * x


@_device
def reciprocal_or_zero(x):
    return 1.0 / x if x > 0 else 0.0 * x


@_device
def power_slope(a, b):
    return b * a ** (b - 1.0) if b != 0 else 0.0 * a


@_device
def stop_gradient(x):
    return x


@_device
def trip_count(start, stop, step):
    if step > 0:
        return max(0, (stop - start + step - 1) // step)
    return max(0, (start - stop - step - 1) // (-step))


@_device
def index_fails(errors, size, i, site):
    """Unless -size <= i < size: record (site + 1, i, size) in `errors` (the first failure wins) and
    say so, for the thread to stop before it reads or writes there."""
    if -size <= i < size:
        return False
    if cuda.atomic.cas(errors, 0, 0, site + 1) == 0:
        errors[1] = i
        errors[2] = size
    return True


@_device
def block_sum(tile, value):
    """The sum of `value` over the threads of the block, in thread 0 (`tile`: shared memory, one slot per
    thread; the block's size a power of two). Every thread of the block must call it."""
    t = cuda.threadIdx.x
    tile[t] = value
    cuda.syncthreads()
    step = cuda.blockDim.x // 2
    while step > 0:
        if t < step:
            tile[t] += tile[t + step]
        cuda.syncthreads()
        step //= 2
    total = tile[0]
    cuda.syncthreads()             # before the tile is written again
    return total


NAMES = ("cotangent_times", "finite_or_zero", "log_or_zero", "reciprocal_or_zero", "power_slope", "stop_gradient",
         "trip_count", "index_fails")
