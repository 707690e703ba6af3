"""numba.cuda kernels as Numba users write them, for the differentiated-kernel tests.

Each CASES entry: (kernel, outputs, blocks, threads, make_args, active): `make_args(rng)` gives the
launch's arguments (the output buffers among them), `active` the positions differentiated.
"""
import math

import numpy as np
from numba import cuda


def softplus(a, x, out):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = a[0] * math.log(1.0 + math.exp(x[i]))


def affine(w, x, out):
    """Shared parameters: every thread reads w[0] and w[1]."""
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = w[0] * x[i] + w[1] * x[i] * x[i]


def gather(x, w, idx, out):
    """Colliding indices: several threads read the same x[idx[i]]."""
    i = cuda.grid(1)
    if i >= out.shape[0]:
        return
    out[i] = w[0] * math.sin(x[idx[i]])


def scatter(x, idx, out):
    """Threads add into shared elements of the output (an atomic add in the primal)."""
    i = cuda.grid(1)
    if i < x.shape[0]:
        cuda.atomic.add(out, idx[i], x[i] * x[i])


def stencil_1d(x, out):
    i = cuda.threadIdx.x + cuda.blockIdx.x * cuda.blockDim.x
    n = x.shape[0]
    if i >= 1 and i < n - 1:
        out[i] = x[i - 1] - 2.0 * x[i] + x[i + 1] + 0.1 * x[i] ** 3


def stencil_2d(u, c, out):
    i, j = cuda.grid(2)
    if 0 < i < u.shape[0] - 1 and 0 < j < u.shape[1] - 1:
        lap = u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4.0 * u[i, j]
        out[i, j] = u[i, j] + c[0] * lap * math.tanh(u[i, j])


def lv_rhs(a, b, p):
    return p[0] * a - p[1] * a * b, p[2] * a * b - p[3] * b


def ensemble_rk4(y0, p, n_steps, dt, out):
    """One Lotka-Volterra system per thread, RK4 in a loop inside the thread."""
    i = cuda.grid(1)
    if i >= y0.shape[0]:
        return
    a = y0[i, 0]
    b = y0[i, 1]
    for step in range(n_steps):
        k1a, k1b = lv_rhs(a, b, p)
        k2a, k2b = lv_rhs(a + 0.5 * dt * k1a, b + 0.5 * dt * k1b, p)
        k3a, k3b = lv_rhs(a + 0.5 * dt * k2a, b + 0.5 * dt * k2b, p)
        k4a, k4b = lv_rhs(a + dt * k3a, b + dt * k3b, p)
        a = a + dt / 6.0 * (k1a + 2.0 * k2a + 2.0 * k3a + k4a)
        b = b + dt / 6.0 * (k1b + 2.0 * k2b + 2.0 * k3b + k4b)
    out[i, 0] = a
    out[i, 1] = b


@cuda.jit(device=True)
def smooth_abs(v, eps):
    return math.sqrt(v * v + eps)


def device_helper(x, eps, out):
    """A helper decorated as a numba.cuda device function."""
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = smooth_abs(x[i], eps[0]) * x[i]


def row_norms(m, out):
    """A loop inside the thread over a row, with a loop-carried sum."""
    i = cuda.grid(1)
    if i >= m.shape[0]:
        return
    s = 0.0
    for j in range(m.shape[1]):
        s += m[i, j] * m[i, j]
    out[i] = math.sqrt(s)


def two_outputs(x, w, mean, spread):
    i = cuda.grid(1)
    if i < x.shape[0]:
        mean[i] = w[0] * x[i]
        spread[i] = (x[i] - w[1]) ** 2


def keeps_unwritten(x, out):
    """Writes only the even elements: the odd ones keep the buffer's starting value."""
    i = cuda.grid(1)
    if i < x.shape[0] and i % 2 == 0:
        out[i] = math.exp(x[i])


def grid_stride(x, out):
    """Fewer threads than elements: each thread strides over the array by the grid's size."""
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for i in range(start, x.shape[0], stride):
        out[i] = x[i] * x[i] + math.sin(x[i])


def grid_stride_scaled(w, x, out):
    """A grid-stride loop written with the thread intrinsics, and a shared parameter."""
    for i in range(cuda.threadIdx.x + cuda.blockIdx.x * cuda.blockDim.x, x.shape[0],
                   cuda.blockDim.x * cuda.gridDim.x):
        out[i] = w[0] * math.tanh(x[i]) ** 2


def elementwise_scale(x, w):
    """A scalar function, for `@ad.function(target="cuda")`."""
    return w * math.sin(x)


def _vec(n, lo=-1.0, hi=1.0):
    return lambda rng: rng.uniform(lo, hi, n)


CASES = {
    "softplus": (softplus, ["out"], 2, 32, lambda r: (r.uniform(0.5, 2, 1), r.uniform(-2, 2, 50), np.zeros(50)),
                 (0, 1)),
    "softplus_float32": (softplus, ["out"], 2, 32, lambda r: (r.uniform(0.5, 2, 1).astype(np.float32),
                                                              r.uniform(-2, 2, 50).astype(np.float32),
                                                              np.zeros(50, np.float32)), (0, 1)),
    "affine": (affine, ["out"], 2, 32, lambda r: (r.uniform(-1, 1, 2), r.uniform(-1, 1, 60), np.zeros(60)), (0, 1)),
    "gather": (gather, ["out"], 3, 32, lambda r: (r.uniform(-2, 2, 20), np.array([1.5]), r.integers(0, 20, 70),
                                                  np.zeros(70)), (0, 1)),
    "scatter": (scatter, ["out"], 2, 32, lambda r: (r.uniform(-1, 1, 40), r.integers(0, 7, 40), np.zeros(7)), (0,)),
    "stencil_1d": (stencil_1d, ["out"], 2, 32, lambda r: (r.uniform(-1, 1, 50), np.zeros(50)), (0,)),
    "stencil_2d": (stencil_2d, ["out"], (2, 2), (8, 8),
                   lambda r: (r.uniform(-1, 1, (12, 10)), np.array([0.2]), np.zeros((12, 10))), (0, 1)),
    "ensemble_rk4": (ensemble_rk4, ["out"], 2, 16,
                     lambda r: (1 + r.random((20, 2)), np.array([1.0, 0.5, 0.3, 0.8]), 12, 0.05, np.zeros((20, 2))),
                     (0, 1)),
    "device_helper": (device_helper, ["out"], 1, 64, lambda r: (r.uniform(-1, 1, 40), np.array([0.01]), np.zeros(40)),
                      (0, 1)),
    "row_norms": (row_norms, ["out"], 1, 32, lambda r: (r.uniform(-1, 1, (20, 5)), np.zeros(20)), (0,)),
    "two_outputs": (two_outputs, ["mean", "spread"], 2, 16,
                    lambda r: (r.uniform(-1, 1, 30), np.array([0.7, 0.2]), np.zeros(30), np.zeros(30)), (0, 1)),
    "grid_stride": (grid_stride, ["out"], 2, 16, lambda r: (r.uniform(-1, 1, 100), np.zeros(100)), (0,)),
    "grid_stride_scaled": (grid_stride_scaled, ["out"], 3, 8,
                           lambda r: (np.array([0.8]), r.uniform(-1, 1, 90), np.zeros(90)), (0, 1)),
    "keeps_unwritten": (keeps_unwritten, ["out"], 1, 32, lambda r: (r.uniform(-1, 1, 20), r.uniform(-1, 1, 20)),
                        (0,)),
}
