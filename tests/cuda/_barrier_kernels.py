"""Kernels with shared memory and barriers (`cuda.syncthreads()`), as Numba users write them."""
import math

from numba import cuda, float32, float64


def block_sums(x, out):
    """The norm of each block's elements: their squares summed in shared memory by a tree reduction
    (a barrier in a `while` loop whose `step` every thread computes alike)."""
    tile = cuda.shared.array(32, float64)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    v = 0.0
    if i < x.shape[0]:
        v = x[i] * x[i]
    tile[t] = v
    cuda.syncthreads()
    step = cuda.blockDim.x // 2
    while step > 0:
        if t < step:
            tile[t] += tile[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        out[cuda.blockIdx.x] = math.sqrt(tile[0])


def halo_stencil(x, c, out):
    """A 1-D stencil reading its neighbours from a tile with a halo element at each end."""
    tile = cuda.shared.array(34, float64)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    n = x.shape[0]
    tile[t + 1] = 0.0
    if i < n:
        tile[t + 1] = x[i]
    if t == 0:
        tile[0] = 0.0
        if 1 <= i <= n:
            tile[0] = x[i - 1]
    if t == cuda.blockDim.x - 1:
        tile[t + 2] = 0.0
        if i + 1 < n:
            tile[t + 2] = x[i + 1]
    cuda.syncthreads()
    if i < n:
        out[i] = c[0] * (tile[t] - 2.0 * tile[t + 1] + tile[t + 2]) + math.sin(tile[t + 1])


def smooth_in_blocks(x, n_iter, out):
    """`n_iter` smoothing sweeps within each block's tile: neighbours read, a barrier, the tile written,
    a barrier (a `for` loop over a number passed to the launch; `left`, `right` live across a barrier)."""
    tile = cuda.shared.array(32, float64)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    tile[t] = x[i]
    cuda.syncthreads()
    for sweep in range(n_iter):
        left = tile[t]
        right = tile[t]
        if t > 0:
            left = tile[t - 1]
        if t < cuda.blockDim.x - 1:
            right = tile[t + 1]
        cuda.syncthreads()
        tile[t] = 0.25 * left + 0.5 * tile[t] + 0.25 * right + 0.1 * math.tanh(tile[t])
        cuda.syncthreads()
    out[i] = tile[t]


def barrier_under_thread_test(x, out):
    tile = cuda.shared.array(32, float64)
    i = cuda.grid(1)
    if i < x.shape[0]:
        tile[cuda.threadIdx.x] = x[i]
        cuda.syncthreads()
        out[i] = tile[0]


def returns_before_barrier(x, out):
    tile = cuda.shared.array(32, float64)
    i = cuda.grid(1)
    if i >= x.shape[0]:
        return
    tile[cuda.threadIdx.x] = x[i]
    cuda.syncthreads()
    out[i] = tile[0]


def shared_in_branch(x, out):
    i = cuda.grid(1)
    if i < x.shape[0]:
        tile = cuda.shared.array(32, float64)
        tile[0] = x[i]
    cuda.syncthreads()
    out[i] = x[i]


TILE = 4


def tiled_matmul(A, B, C):
    """Numba's documented shared-memory matrix product as public projects copy it (float32 tiles, a 2-D
    grid, the tile loop over the grid's width around two barriers), with `tmp = 0.0` for `float32(0.0)`."""
    sA = cuda.shared.array(shape=(TILE, TILE), dtype=float32)
    sB = cuda.shared.array(shape=(TILE, TILE), dtype=float32)
    x, y = cuda.grid(2)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    bpg = cuda.gridDim.x
    tmp = 0.0
    for i in range(bpg):
        sA[ty, tx] = 0
        sB[ty, tx] = 0
        if y < A.shape[0] and (tx + i * TILE) < A.shape[1]:
            sA[ty, tx] = A[y, tx + i * TILE]
        if x < B.shape[1] and (ty + i * TILE) < B.shape[0]:
            sB[ty, tx] = B[ty + i * TILE, x]
        cuda.syncthreads()
        for j in range(TILE):
            tmp += sA[ty, j] * sB[j, tx]
        cuda.syncthreads()
    if y < C.shape[0] and x < C.shape[1]:
        C[y, x] = tmp
