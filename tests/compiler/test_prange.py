"""`numba.prange` loops: the primal, forward and adjoint run them in parallel as Numba does.

Kernels in the styles of public scientific code: iterations writing disjoint rows, scalar
reductions, and cotangents that several iterations add into the same element (shared weights,
gathers through an index array, a scalar parameter). Each is checked against Python (prange is
range there) and numba.njit(parallel=True), its gradient against finite differences, and where
generated code can be differentiated again, at second order.
"""
import math

import numba
import numba as nb
import numpy as np
import pytest
from numba import prange

import srcad as ad
from srcad.compiler import pipeline
from srcad.compiler.backends.numba_cpu import uses_prange
from srcad.testing import check_function, tape_gradients
from test_ir import second_order_check

rng = np.random.default_rng(17)


# ---- kernels ------------------------------------------------------------------------------------------

def row_logsumexp(x):
    """Disjoint writes: one output per row, a running maximum saved per inner iteration."""
    n, d = x.shape
    out = np.empty(n)
    for i in prange(n):
        m = x[i, 0]
        for j in range(1, d):
            m = max(m, x[i, j])
        s = 0.0
        for j in range(d):
            s += math.exp(x[i, j] - m)
        out[i] = m + math.log(s)
    return out


def row_mlp(x, w1, b1, w2):
    """A small per-row MLP: every iteration reads the shared weights (colliding cotangents) and writes
    its own output (disjoint), with a private hidden layer made afresh in each iteration."""
    n, d = x.shape
    h = w1.shape[0]
    out = np.zeros(n)
    for i in numba.prange(n):
        hidden = np.zeros(h)
        for k in range(h):
            a = b1[k]
            for j in range(d):
                a += w1[k, j] * x[i, j]
            hidden[k] = math.tanh(a)
        y = 0.0
        for k in range(h):
            y += w2[k] * hidden[k]
        out[i] = y
    return out


def weighted_energy(x, w, scale):
    """A scalar reduction; `w[0]`, `w[1]` and `scale` are read by every iteration."""
    n = x.shape[0]
    total = 0.0
    for i in nb.prange(n):
        total += scale * (w[0] * x[i] ** 2 + w[1] * math.sin(x[i]))
    return total


def gather_residuals(params, idx, obs):
    """Gathers through an index array: several iterations read (and so add into) one parameter."""
    n = obs.shape[0]
    res = np.empty(n)
    sq = 0.0
    for i in prange(n):
        r = params[idx[i]] * params[idx[i]] - obs[i]
        res[i] = r
        sq += r * r
    return sq + np.sum(res)


def sum_and_rows(x, c):
    """A reduction and disjoint row writes in one loop, whole-row NumPy expressions."""
    n = x.shape[0]
    y = np.zeros_like(x)
    acc = 0.0
    for i in prange(n):
        y[i, :] = np.exp(c * x[i, :])
        acc += np.sum(x[i, :] ** 2)
    return np.sum(y) + acc


def smooth_stencil(u, k):
    """Every iteration reads its neighbours `u[i - 1]`, `u[i + 1]`: their cotangents collide."""
    n = u.shape[0]
    out = np.zeros(n)
    for i in prange(1, n - 1):
        out[i] = k * u[i] + (1.0 - k) * 0.5 * (u[i - 1] + u[i + 1]) ** 2
    return out


def column_sums(x):
    """An array reduction (`acc += x[i, :]`): Numba reduces it; its adjoint is reversed serially."""
    acc = np.zeros(x.shape[1])
    for i in prange(x.shape[0]):
        acc += np.sin(x[i, :])
    return acc


def product_reduction(x):
    """`p *= v` in a prange: Numba reduces it; its adjoint reads `p`, so it is reversed serially."""
    p = 1.0
    for i in prange(x.shape[0]):
        p *= 1.0 + 0.1 * x[i]
    return p


def rows(n, d):
    return rng.normal(size=(n, d))


CASES = {
    "row_logsumexp": (row_logsumexp, lambda: (rows(9, 5),), (0,)),
    "row_mlp": (row_mlp, lambda: (rows(7, 3), rng.normal(size=(4, 3)), rng.normal(size=4), rng.normal(size=4)),
                (0, 1, 2, 3)),
    "weighted_energy": (weighted_energy, lambda: (rng.normal(size=11), rng.normal(size=2), 0.7), (0, 1, 2)),
    "gather_residuals": (gather_residuals, lambda: (rng.normal(size=4), rng.integers(0, 4, 10), rng.normal(size=10)),
                         (0, 2)),
    "sum_and_rows": (sum_and_rows, lambda: (0.3 * rows(6, 4), 0.8), (0, 1)),
    "smooth_stencil": (smooth_stencil, lambda: (rng.normal(size=12), 0.3), (0, 1)),
    "column_sums": (column_sums, lambda: (rows(6, 3),), (0,)),
    "product_reduction": (product_reduction, lambda: (rng.normal(size=8),), (0,)),
}


def copies(args):
    return tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)


# ---- the primal --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CASES))
def test_primal_equals_python_and_numba_parallel(name):
    fn, make, _ = CASES[name]
    args = make()
    got = ad.function(fn)(*copies(args))
    np.testing.assert_allclose(np.asarray(got), fn(*copies(args)), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(got), numba.njit(parallel=True)(fn)(*copies(args)), rtol=1e-12, atol=1e-12)


def test_primal_runs_the_loop_in_parallel():
    f = ad.function(row_logsumexp)
    f(rows(3, 2))
    assert "for i in numba.prange(n):" in ad.show_source(f, "primal")
    (transformed,) = f._transforms.values()
    assert transformed.primal.dispatcher.targetoptions["parallel"]


# ---- gradients ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_against_finite_differences(name):
    fn, make, active = CASES[name]
    check_function(ad.function(fn), make(), active)


@pytest.mark.parametrize("name", ["row_logsumexp", "row_mlp", "weighted_energy", "gather_residuals",
                                  "sum_and_rows"])
def test_forward_and_adjoint_run_in_parallel(name):
    fn, make, active = CASES[name]
    f = ad.function(fn)
    check_function(f, make(), active)
    assert "numba.prange(" in ad.show_source(f, "forward")
    assert "numba.prange(" in ad.show_source(f, "adjoint")


@pytest.mark.parametrize("name", ["row_mlp", "weighted_energy", "gather_residuals", "smooth_stencil"])
def test_colliding_cotangents_go_through_per_thread_partial_sums(name):
    fn, make, active = CASES[name]
    f = ad.function(fn)
    check_function(f, make(), active)
    adjoint = ad.show_source(f, "adjoint")
    assert "numba.get_thread_id()" in adjoint and "thread_count()" in adjoint


def test_reduction_cotangent_is_only_read_in_the_parallel_adjoint():
    f = ad.function(weighted_energy)
    check_function(f, CASES["weighted_energy"][1](), (0, 1, 2))
    adjoint = ad.show_source(f, "adjoint")
    loop = adjoint[adjoint.index("numba.prange("):]
    assert "d_total =" not in loop and "d_total +=" not in loop and "d_total" in loop


@pytest.mark.parametrize("name", ["product_reduction", "column_sums"])
def test_reductions_the_adjoint_cannot_share_are_reversed_serially(name):
    fn, make, active = CASES[name]
    f = ad.function(fn)
    check_function(f, make(), active)
    assert "numba.prange(" in ad.show_source(f, "primal")
    assert "numba.prange(" not in ad.show_source(f, "adjoint")


def test_gradient_does_not_depend_on_the_thread_count():
    fn, make, active = CASES["row_mlp"]
    args = make()
    f = ad.function(fn)
    out, ws, parallel = tape_gradients(f, args, active)
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        _, _, serial = tape_gradients(f, args, active, ws=ws)
    finally:
        numba.set_num_threads(before)
    for g, s in zip(parallel, serial):
        np.testing.assert_allclose(g.numpy(), s.numpy(), rtol=1e-12, atol=1e-13)


def test_plain_code_is_compiled_without_parallel():
    def plain(x):
        s = 0.0
        for i in range(x.shape[0]):
            s += x[i]
        return s
    assert not uses_prange(plain) and uses_prange(row_logsumexp)


# ---- second order ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["row_logsumexp", "weighted_energy", "gather_residuals"])
def test_generated_code_is_differentiated_again(name):
    fn, make, active = CASES[name]
    args = make()
    second_order_check(fn, args, tuple(k in active for k in range(len(args))))


def test_the_ir_prints_parallel_loops_as_prange():
    args = CASES["weighted_energy"][1]()
    program = pipeline.run(weighted_energy, tuple(numba.typeof(a) for a in args), (True, True, True),
                           until="reverse")
    assert "for i in numba.prange(n):" in pipeline.dump(program)



def exp_times(x, out):
    """Each iteration writes its own element of a buffer it was given."""
    for i in numba.prange(x.shape[0]):
        out[i] = math.exp(x[i]) * x[i]
    return out


def exp_times_even(x, start):
    """The even elements of a copy of `start` overwritten: the odd ones keep their starting value."""
    out = start.copy()
    for i in numba.prange(x.shape[0]):
        if i % 2 == 0:
            out[i] = math.exp(x[i]) * x[i]
    return out


def test_an_output_cotangent_read_once_per_iteration_is_not_zeroed_after():
    """The adjoint reads `d_out[i]` once in iteration i and no iteration or later statement reads it again:
    zeroing it after (the cotangent of the buffer's overwritten value) is a store nobody reads, and goes.
    Where the starting value is differentiated, that cotangent flows on to it: the zeroing stays, and
    gives the overwritten elements their zero gradient."""
    f = ad.function(exp_times)
    x = rng.uniform(-1, 1, 30)
    X = ad.Variable(x)
    weights = np.cos(np.arange(30))
    with ad.GradientTape() as tape:
        loss = np.sum(weights * f(X, np.zeros(30)))
    np.testing.assert_allclose(tape.gradient(loss, X).numpy(), weights * np.exp(x) * (1 + x), rtol=1e-12)
    assert "d_out[i] = 0.0" not in f.source("adjoint")
    g = ad.function(exp_times_even)
    start = ad.Variable(np.ones(30))
    with ad.GradientTape() as tape:
        loss = np.sum(weights * g(X, start))
    gx, gstart = tape.gradient(loss, [X, start])
    even = np.arange(30) % 2 == 0
    np.testing.assert_allclose(gx.numpy(), np.where(even, weights * np.exp(x) * (1 + x), 0.0), rtol=1e-12)
    np.testing.assert_array_equal(gstart.numpy(), np.where(even, 0.0, weights))
    assert "d_out[i] = 0.0" in g.source("adjoint")
