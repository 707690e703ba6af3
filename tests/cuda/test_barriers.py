"""Kernels with shared memory and barriers: each phase between barriers is a parallel loop of its own
(srcad/cuda/phases.py). Values against NumPy, gradients against finite differences, second order
against finite differences of the gradient; constructs a phase cannot hold are refused by line."""
import numpy as np
import pytest

pytest.importorskip("numba.cuda")

import srcad as ad  # noqa: E402
from srcad.testing import finite_differences  # noqa: E402

import _barrier_kernels as B  # noqa: E402

WEIGHTS = np.cos(np.arange(200.0))


def _block_sums(x):
    return np.array([np.sqrt(np.sum(x[b:b + 32] ** 2)) for b in range(0, 96, 32)])


def _halo_stencil(x, c):
    padded = np.concatenate([[0.0], x, [0.0]])
    return c[0] * (padded[:-2] - 2.0 * x + padded[2:]) + np.sin(x)


def _smooth_in_blocks(x, n_iter):
    out = x.copy()
    for b in range(0, x.size, 32):
        tile = out[b:b + 32]
        for _ in range(n_iter):
            left, right = np.concatenate([tile[:1], tile[:-1]]), np.concatenate([tile[1:], tile[-1:]])
            tile[:] = 0.25 * left + 0.5 * tile + 0.25 * right + 0.1 * np.tanh(tile)
    return out


CASES = {   # kernel, blocks, threads, arguments (x first; its output buffer last), NumPy's result
    "block_sums": (B.block_sums, 3, 32, lambda x: (x[:70], np.zeros(3)), lambda x: _block_sums(np.r_[x[:70], [0] * 26])),
    "halo_stencil": (B.halo_stencil, 3, 32, lambda x: (x[:80], np.array([0.7]), np.zeros(80)),
                     lambda x: _halo_stencil(x[:80], [0.7])),
    "smooth_in_blocks": (B.smooth_in_blocks, 2, 32, lambda x: (x[:64], 2, np.zeros(64)),
                         lambda x: _smooth_in_blocks(x[:64], 2)),
}
ON_THE_GPU = ["block_sums", "halo_stencil"]    # (what the cuda target takes: see the refusal below)
_KERNELS = {}


def _case(name, target="cpu"):
    fn, blocks, threads, args, expected = CASES[name]
    if (name, target) not in _KERNELS:
        _KERNELS[name, target] = ad.kernel(fn, outputs=["out"], target=target)
    return _KERNELS[name, target], blocks, threads, args, expected


def _loss(name, x, target="cpu"):
    """sum(w * out) of the launch on `x` (a Variable or an array)."""
    k, blocks, threads, args, _ = _case(name, target)
    out = k[blocks, threads](*args(x))
    return np.sum(WEIGHTS[:out.shape[0]] * out)


def _gradient(name, x0, target="cpu"):
    x = ad.Variable(x0)
    with ad.GradientTape() as tape:
        loss = _loss(name, x, target)
    return tape.gradient(loss, x).numpy()


def _x():
    return np.random.default_rng(3).uniform(-1.0, 1.0, 96)


@pytest.mark.parametrize("name", sorted(CASES))
def test_barrier_kernel_value_and_gradient(name):
    k, blocks, threads, args, expected = _case(name)
    x0 = _x()
    np.testing.assert_allclose(k[blocks, threads](*args(x0)).numpy(), expected(x0), rtol=1e-12, atol=1e-14)
    fd = finite_differences(lambda v: float(np.asarray(_loss(name, v[0]))), [x0], 0)
    np.testing.assert_allclose(_gradient(name, x0), fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", ON_THE_GPU)
def test_barrier_kernel_on_the_cuda_target_matches_the_cpu_target(name):
    """The phases as kernels (Numba's CUDA simulator in CI): the cpu target's value and gradient, which
    the test above checks against NumPy and finite differences."""
    k, blocks, threads, args, _ = _case(name, "cuda")
    x0 = _x()
    np.testing.assert_allclose(k[blocks, threads](*args(x0)).numpy(),
                               _case(name)[0][blocks, threads](*args(x0)).numpy(), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(_gradient(name, x0, "cuda"), _gradient(name, x0), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", sorted(CASES))
def test_barrier_kernel_second_order(name):
    """A Hessian-vector product through the kernel's gradient, against finite differences of the gradient."""
    rng = np.random.default_rng(5)
    x0, v = rng.uniform(-1.0, 1.0, 96), rng.uniform(-1.0, 1.0, 96)
    x = ad.Variable(x0)
    with ad.GradientTape() as outer:
        with ad.GradientTape() as inner:
            loss = _loss(name, x)
        s = np.sum(inner.gradient(loss, x) * v)
    hv = outer.gradient(s, x).numpy()
    h = 1e-5
    fd = (_gradient(name, x0 + h * v) - _gradient(name, x0 - h * v)) / (2 * h)
    np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-7)


def _launch(fn, target="cpu", blocks=1):
    k = ad.kernel(fn, outputs=["out"], target=target)
    with ad.GradientTape():
        k[blocks, 32](ad.Variable(np.ones(32 * blocks)), np.zeros(32 * blocks))


def test_constructs_around_barriers_are_refused_by_line():
    with pytest.raises(ad.TransformError, match=r"barrier_under_thread_test \(.*_barrier_kernels.py, line \d+\): a "
                                                r"barrier under control that depends on the thread \(`cuda.grid`\) in "
                                                r"`i = cuda.grid\(1\)`"):
        _launch(B.barrier_under_thread_test)
    with pytest.raises(ad.TransformError, match=r"returns_before_barrier \(.*line \d+\): a `return` before a barrier "
                                                r"in `return` .* put the work under `if`"):
        _launch(B.returns_before_barrier)
    with pytest.raises(ad.TransformError, match=r"shared_in_branch \(.*line \d+\): `cuda.shared.array` inside a "
                                                r"branch or loop .* at the top of the kernel"):
        _launch(B.shared_in_branch)


def test_a_phase_overwriting_what_its_adjoint_needs_is_refused_on_the_cuda_target():
    with pytest.raises(ad.TransformError, match=r"smooth_in_blocks_forward: a value saved by one phase between barriers "
                                                r"for another kernel .*line \d+: `tile\[t\] = 0.25 \* left.*`\) cannot "
                                                r"run on the cuda target. .*target=\"cpu\""):
        with ad.GradientTape():
            _case("smooth_in_blocks", "cuda")[0][2, 32](ad.Variable(_x()[:64]), 2, np.zeros(64))


def test_too_many_phases_in_one_launch_are_refused():
    k = ad.kernel(B.smooth_in_blocks, outputs=["out"], target="cpu")
    with pytest.raises(ad.TransformError, match=r"smooth_in_blocks: this launch runs more than 256 phases between "
                                                r"barriers"):
        k[1, 32](np.ones(32), 200, np.zeros(32))


def test_the_documented_tiled_matrix_product_to_second_order():
    """2-D tiles, a 2-D grid, barriers in a loop over the grid's width (uniform), float32: C = A @ B, its
    gradients W @ B.T and A.T @ W for loss = sum(W * C), and the derivative in B of sum(V * dloss/dA),
    V.T @ W (closed forms)."""
    rng = np.random.default_rng(11)
    A0, B0 = rng.normal(size=(6, 7)).astype(np.float32), rng.normal(size=(7, 5)).astype(np.float32)
    W, V = rng.normal(size=(6, 5)).astype(np.float32), rng.normal(size=(6, 7)).astype(np.float32)
    k = ad.kernel(B.tiled_matmul, outputs=["C"], target="cpu")
    A, Bv = ad.Variable(A0), ad.Variable(B0)
    with ad.GradientTape(persistent=True) as outer:
        with ad.GradientTape() as inner:
            C = k[(2, 2), (B.TILE, B.TILE)](A, Bv, np.zeros((6, 5), np.float32))
            loss = np.sum(C * W)
        gA, gB = inner.gradient(loss, [A, Bv])
        s = np.sum(gA * V)
    np.testing.assert_allclose(C.numpy(), A0 @ B0, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gA.numpy(), W @ B0.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gB.numpy(), A0.T @ W, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outer.gradient(s, Bv).numpy(), V.T @ W, rtol=1e-5, atol=1e-5)
