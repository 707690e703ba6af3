"""Compiled segments at any order through the tape: nested tapes, jacobians of gradients (full Hessians),
accumulators around tapes (Hessian-vector products) and third derivatives over `@ad.function` calls, on the
corpus and regression kernels, each against finite differences of the order below."""
import inspect
import logging
import math

import numpy as np
import pytest

import corpus
import test_regressions
import srcad as ad
from corpus import decorated
from srcad.testing import finite_differences, fresh

rng = np.random.default_rng(21)


def bound(case):
    args = case.make_args()
    b = inspect.signature(case.fn).bind(*args)
    b.apply_defaults()
    return tuple(b.args), [k for k in case.active]


def weights_like(values, seed):
    r = np.random.default_rng(seed)
    return [None if v is None else r.uniform(0.5, 1.5, np.shape(v)) for v in values]


def _outputs(out):
    return list(out) if isinstance(out, tuple) else [out]


def _weighted(outs, ws):
    total = 0.0
    for o, w in zip(outs, ws):
        if o is not None and w is not None:
            total = total + np.sum(o * w)
    return total


def sources_and_call(args, active):
    """Tensors for the active arguments, and the arguments to call with (fresh copies, those Tensors in)."""
    sources = [ad.constant(np.asarray(args[i], np.float64)) for i in active]
    call = list(fresh(args))
    for i, s in zip(active, sources):
        call[i] = s
    return sources, call


def first_gradient(f, args, active, ws):
    """The tape gradient of sum(w * f(args)) in the active arguments (NumPy values)."""
    sources, call = sources_and_call(args, active)
    with ad.GradientTape() as tape:
        tape.watch(sources)
        y = _weighted(_outputs(f(*call)), ws)
    return [g.numpy() for g in tape.gradient(y, sources, unconnected_gradients="zero")]


def check_second_order(case):
    """d/dx <u, grad(x)> by nested tapes over the compiled function, against FD of the tape gradient."""
    f = decorated(case)
    args, active = bound(case)
    ws = weights_like(_outputs(case.fn(*fresh(args))), seed=1)
    us = weights_like([args[i] for i in active], seed=2)
    sources, call = sources_and_call(args, active)
    with ad.GradientTape() as outer:
        outer.watch(sources)
        with ad.GradientTape() as inner:
            inner.watch(sources)
            y = _weighted(_outputs(f(*call)), ws)
        grads = inner.gradient(y, sources, unconnected_gradients="zero")
        q = _weighted(grads, us)
    second = outer.gradient(q, sources, unconnected_gradients="zero")

    def phi(values):
        return _weighted(first_gradient(f, values, active, ws), us)
    for k, i in enumerate(active):
        np.testing.assert_allclose(second[k].numpy(), finite_differences(phi, tuple(args), i), rtol=1e-5, atol=1e-6,
                                   err_msg=f"{case.name}: second derivative in argument {i}")


SECOND_ORDER = ["energy", "loop_range1", "while_bounded", "loop_break", "branch_in_loop", "nested_loops",
                "arr_recurrence_inplace", "arr_slice_write", "arr_matvec", "softmax_xent", "heat_explicit",
                "rk4_lotka_volterra", "helper_in_loop", "arr_overwrite_repeated", "s_float32"]


@pytest.mark.parametrize("name", corpus.sweep(SECOND_ORDER, every=2))
def test_nested_tapes_over_corpus_kernels(name):
    check_second_order(corpus.case_by_name(name))


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in corpus.sweep(test_regressions.CASES, every=8)
                                  if not c.name.startswith("products_and_moments")
                                  and "optional" not in c.name and "none" not in c.name])
def test_nested_tapes_over_regression_kernels(case):
    check_second_order(case)


# ---- Hessians, HVPs and third order of one kernel ------------------------------------------------------

@ad.function
def euler_lotka_volterra_loss(p, y0, n, dt):
    """Explicit Euler steps of the Lotka-Volterra system; the loss is the squared end state. (RK4's loop
    with one stage: the Hessian, HVP and third derivative of RK4 itself compile for minutes and show
    nothing more; RK4 is differentiated twice in test_ir's sweep of the corpus.) The three tests share its
    compiled derivatives."""
    x, y = y0[0], y0[1]
    for _ in range(n):
        x, y = x + dt * (p[0] * x - p[1] * x * y), y + dt * (p[3] * x * y - p[2] * y)
    return x * x + y * y


P0, Y0 = np.array([1.1, 0.4, 0.4, 0.1]), np.array([10.0, 5.0])


def euler_gradient(p):
    return first_gradient(euler_lotka_volterra_loss, (p, Y0, 50, 0.01), [0], [1.0])[0]


def test_full_hessian_by_jacobian_of_the_gradient():
    p = ad.constant(P0)
    with ad.GradientTape() as outer:
        outer.watch(p)
        with ad.GradientTape() as inner:
            inner.watch(p)
            y = euler_lotka_volterra_loss(p, Y0, 50, 0.01)
        g = inner.gradient(y, p)
    H = outer.jacobian(g, p).numpy()
    assert H.shape == (4, 4)
    np.testing.assert_allclose(H, H.T, rtol=1e-9, atol=1e-9 * np.abs(H).max())
    fd = np.stack([finite_differences(lambda a: euler_gradient(a[0]), (P0,), 0)[:, k] for k in range(4)])
    np.testing.assert_allclose(H, fd, rtol=1e-5, atol=1e-6 * np.abs(H).max())


def test_accumulator_around_a_tape_gives_hvp():
    """Against finite differences of the gradient along v (the Hessian itself is the test above's)."""
    v = np.array([0.3, -1.0, 0.5, 2.0])
    p = ad.constant(P0)
    with ad.ForwardAccumulator(p, v) as acc:
        with ad.GradientTape() as tape:
            tape.watch(p)
            y = euler_lotka_volterra_loss(p, Y0, 50, 0.01)
        g = tape.gradient(y, p)
    hvp = acc.jvp(g).numpy()
    fd = finite_differences(lambda a: euler_gradient(P0 + a[0] * v), (0.0,), 0)
    np.testing.assert_allclose(hvp, np.ravel(fd), rtol=1e-5, atol=1e-6 * np.abs(hvp).max())


def test_third_derivatives_through_three_tapes():
    u = np.array([0.2, -0.5, 1.0, 0.7])
    p = ad.constant(P0)
    with ad.GradientTape() as t3:
        t3.watch(p)
        with ad.GradientTape() as t2:
            t2.watch(p)
            with ad.GradientTape() as t1:
                t1.watch(p)
                y = euler_lotka_volterra_loss(p, Y0, 50, 0.01)
            gu = np.sum(t1.gradient(y, p) * u)
        ugu = np.sum(t2.gradient(gu, p) * u)
    third = t3.gradient(ugu, p).numpy()

    def second(a):
        q = ad.constant(a[0])
        with ad.GradientTape() as outer:
            outer.watch(q)
            with ad.GradientTape() as inner:
                inner.watch(q)
                y = euler_lotka_volterra_loss(q, Y0, 50, 0.01)
            gu = np.sum(inner.gradient(y, q) * u)
        return float(np.sum(outer.gradient(gu, q).numpy() * u))
    np.testing.assert_allclose(third, finite_differences(second, (P0,), 0), rtol=1e-5, atol=1e-6)


def test_a_function_writing_into_an_argument_is_differentiated_again_as_called():
    @ad.function
    def scaled_into(x, out):
        for i in range(x.shape[0]):
            out[i] += x[i] * x[i]
        return np.sum(out * x)

    x0 = np.array([0.5, -1.0, 2.0])
    out = np.array([1.0, 2.0, 3.0])
    x = ad.constant(x0)
    with ad.GradientTape() as outer:
        outer.watch(x)
        with ad.GradientTape() as inner:
            inner.watch(x)
            y = scaled_into(x, out)
        g = inner.gradient(y, x)
    np.testing.assert_allclose(out, [1.25, 3.0, 7.0])            # written once, as in Python
    # y = sum((o + x^2) x): dy/dx = o + 3 x^2, d2y/dx2 = diag(6 x)
    np.testing.assert_allclose(g.numpy(), np.array([1.0, 2.0, 3.0]) + 3 * x0 ** 2)
    np.testing.assert_allclose(outer.jacobian(g, x).numpy(), np.diag(6 * x0))


# ---- jacobians of compiled functions: forward mode where it is cheaper ---------------------------------

@ad.function
def logistic_path(p, n):
    """n Euler steps of x' = a x - b x^2: 2 parameters, n outputs."""
    out = np.zeros(n)
    x = 0.1
    for i in range(n):
        x = x + 0.01 * (p[0] * x - p[1] * x * x)
        out[i] = x
    return out


@ad.function
def row_norms(X):
    out = np.zeros(X.shape[0])
    for i in range(X.shape[0]):
        s = 0.0
        for j in range(X.shape[1]):
            s += X[i, j] * X[i, j]
        out[i] = math.sqrt(s)
    return out


def test_jacobian_picks_forward_mode_for_two_inputs_and_a_thousand_outputs(caplog):
    p0 = np.array([1.5, 0.7])
    p = ad.constant(p0)
    with ad.GradientTape(persistent=True) as tape:
        tape.watch(p)
        y = logistic_path(p, 1000)
    with caplog.at_level(logging.DEBUG, logger="srcad"):
        forward = tape.jacobian(y, p).numpy()
    assert "jacobian: forward mode, 2 unit tangents (a batch per source) for 1000 target elements" in caplog.text
    reverse = tape.jacobian(y, p, experimental_use_pfor=False).numpy()        # one adjoint per output
    np.testing.assert_allclose(forward, reverse, rtol=1e-10, atol=1e-14)
    fd = finite_differences(lambda a: logistic_path(a[0], 1000).numpy(), (p0,), 0)
    np.testing.assert_allclose(forward, fd.T, rtol=1e-5, atol=1e-8)


def test_jacobian_stays_in_reverse_mode_for_more_inputs_than_outputs(caplog):
    X0 = rng.uniform(0.5, 1.5, (3, 40))
    X = ad.constant(X0)
    with ad.GradientTape() as tape:
        tape.watch(X)
        y = row_norms(X)
    with caplog.at_level(logging.DEBUG, logger="srcad"):
        J = tape.jacobian(y, X).numpy()
    assert "forward mode" not in caplog.text
    expected = np.zeros((3, 3, 40))
    for i in range(3):
        expected[i, i] = X0[i] / np.linalg.norm(X0[i])
    np.testing.assert_allclose(J, expected, rtol=1e-12)


def _smooth_into(x, work):
    for i in range(1, x.shape[0] - 1):
        work[i] = 0.25 * x[i - 1] + 0.5 * x[i] + 0.25 * x[i + 1]
    work[0] = x[0]
    work[-1] = x[-1]
    return work


@ad.function
def smoothed_energy32(x, work, c):
    """float32 rebound through a helper that fills the caller's work array, summed in a reversed loop."""
    for _ in range(3):
        work = _smooth_into(x, work)
        x = np.tanh(c * work)
    s = np.float32(0.0)
    for j in range(x.shape[0] - 1, -1, -1):
        s += x[j] * x[j]
    return s


def test_float32_rebound_through_a_helper_hessian_and_hvp():
    """Numba widens float32 tangents times float64 partials: the tangent keeps its primal's dtype."""
    x0, c = np.linspace(-1.0, 1.0, 7).astype(np.float32), np.float32(1.3)

    def gradient64(a):
        z = ad.constant(a[0].astype(np.float32))
        with ad.GradientTape() as tape:
            tape.watch(z)
            y = smoothed_energy32(z, np.zeros(7, np.float32), c)
        return tape.gradient(y, z).numpy().astype(np.float64)
    x = ad.constant(x0)
    with ad.GradientTape() as outer:
        outer.watch(x)
        with ad.GradientTape() as inner:
            inner.watch(x)
            y = smoothed_energy32(x, np.zeros(7, np.float32), c)
        g = inner.gradient(y, x)
    H = outer.jacobian(g, x).numpy()
    assert g.dtype == np.float32
    fd = finite_differences(gradient64, (x0.astype(np.float64),), 0, step=1e-2)
    np.testing.assert_allclose(H, fd, rtol=2e-3, atol=2e-3)
    v = np.ones(7, np.float32)
    np.testing.assert_allclose(ad.hvp(lambda z: smoothed_energy32(z, np.zeros(7, np.float32), c), x0, v), H @ v,
                               rtol=1e-4, atol=1e-5)
