"""ForwardAccumulator: TensorFlow's examples, every eager rule's tangent against finite differences, nesting
with tapes and other accumulators in entry order, compiled functions, and the errors TF raises."""

import os
import sys

import numpy as np
import pytest

import srcad as ad

sys.path.insert(0, os.path.dirname(__file__))
from test_rules import CASES, args  # noqa: E402  (the eager rule table's cases, reused for tangents)


def _directional_fd(fn, xs, ts, h=1e-6):
    """(f(x + h t) - f(x - h t)) / 2h for each output of ``fn``."""
    plus = fn(*[x + h * t for x, t in zip(xs, ts)])
    minus = fn(*[x - h * t for x, t in zip(xs, ts)])
    plus, minus = (plus, minus) if isinstance(plus, (list, tuple)) else ((plus,), (minus,))
    return [(np.asarray(p, np.float64) - np.asarray(m, np.float64)) / (2 * h) for p, m in zip(plus, minus)]


@pytest.mark.parametrize("fn,specs", CASES)
def test_every_eager_rule_tangent_matches_finite_differences(fn, specs):
    xs = args(*specs)
    rng = np.random.default_rng(7)
    ts = [rng.normal(size=np.shape(x)) for x in xs]
    primals = [ad.constant(x) for x in xs]
    with ad.ForwardAccumulator(primals, ts) as acc:
        out = fn(*primals)
    outs = out if isinstance(out, (list, tuple)) else (out,)
    expected = _directional_fd(fn, xs, ts)
    for y, e in zip(outs, expected):
        got = acc.jvp(y, unconnected_gradients="zero").numpy()
        np.testing.assert_allclose(got, e, rtol=1e-5, atol=1e-6)


# -- TensorFlow's documented examples --------------------------------------------------------------

def test_cube_at_two_has_jvp_twelve():
    x = ad.constant(2.0)
    with ad.ForwardAccumulator(x, 1.0) as acc:
        y = x ** 3
    assert acc.jvp(y).numpy() == pytest.approx(12.0)


def test_linear_regression_kernel_and_bias_columns_equal_the_gradient():
    x = np.array([[2.0, 3.0], [1.0, 4.0]])
    targets = np.array([[1.0], [-1.0]])
    kernel, bias = ad.Variable([[0.3], [-0.2]]), ad.Variable([0.1])

    def loss_fn():
        return np.sum((x @ kernel + bias - targets) ** 2.0)

    kernel_fprop = []
    for column in ([[1.0], [0.0]], [[0.0], [1.0]]):
        with ad.ForwardAccumulator(kernel, column) as acc:
            kernel_fprop.append(acc.jvp(loss_fn()).numpy())
    with ad.ForwardAccumulator(bias, [1.0]) as acc:
        bias_fprop = acc.jvp(loss_fn()).numpy()
    with ad.GradientTape() as tape:
        loss = loss_fn()
    kernel_grad, bias_grad = tape.gradient(loss, (kernel, bias))
    np.testing.assert_allclose(kernel_grad.numpy(), np.stack(kernel_fprop)[:, np.newaxis])
    np.testing.assert_allclose(bias_grad.numpy(), np.asarray(bias_fprop)[np.newaxis])


def test_nested_accumulators_give_higher_order_jvps_in_entry_order():
    primal = ad.constant(1.1)
    with ad.ForwardAccumulator(primal, ad.constant(1.0)) as outer:
        with ad.ForwardAccumulator(primal, ad.constant(1.0)) as inner:
            primal_out = primal ** ad.constant(3.5)
    inner_jvp = inner.jvp(primal_out)
    assert inner_jvp.numpy() == pytest.approx(3.5 * 1.1 ** 2.5)
    assert outer.jvp(inner_jvp).numpy() == pytest.approx(3.5 * 2.5 * 1.1 ** 1.5)
    assert inner.jvp(outer.jvp(primal_out)) is None      # an inner accumulator never sees an outer one's work


def test_third_order_through_three_accumulators():
    x = ad.constant(0.7)
    with ad.ForwardAccumulator(x, 1.0) as a3:
        with ad.ForwardAccumulator(x, 1.0) as a2:
            with ad.ForwardAccumulator(x, 1.0) as a1:
                y = np.sin(x) * x
    # d3/dx3 (x sin x) = -3 sin x - x cos x
    assert a3.jvp(a2.jvp(a1.jvp(y))).numpy() == pytest.approx(-3 * np.sin(0.7) - 0.7 * np.cos(0.7))


def test_accumulator_around_a_tape_gives_hessian_vector_products():
    v = ad.Variable([1.0, 2.0])
    with ad.ForwardAccumulator(v, ad.constant([1.0, 0.0])) as acc:
        with ad.GradientTape() as tape:
            y = np.sum(v ** 3.0)
        backward = tape.gradient(y, v)
    np.testing.assert_allclose(backward.numpy(), [3.0, 12.0])
    np.testing.assert_allclose(acc.jvp(backward).numpy(), [6.0, 0.0])


def test_hvp_equals_hessian_times_vector():
    rng = np.random.default_rng(3)
    A = rng.normal(size=(4, 4))
    x0, vec = rng.normal(size=4), rng.normal(size=4)

    def f(x):
        return np.sum(np.tanh(A @ x) ** 2) + np.sum(x ** 4)

    x = ad.constant(x0)
    with ad.ForwardAccumulator(x, vec) as acc:
        with ad.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
        g = tape.gradient(y, x)
    with ad.GradientTape() as outer:
        outer.watch(x)
        with ad.GradientTape() as inner:
            inner.watch(x)
            y = f(x)
        g2 = inner.gradient(y, x)
    hessian = outer.jacobian(g2, x).numpy()
    np.testing.assert_allclose(acc.jvp(g).numpy(), hessian @ vec, rtol=1e-10)


def test_tape_around_an_accumulator_differentiates_its_tangents():
    x = ad.constant(0.4)
    with ad.GradientTape() as tape:
        tape.watch(x)
        with ad.ForwardAccumulator(x, 1.0) as acc:
            y = np.exp(2.0 * x)
        dy = acc.jvp(y)                      # 2 exp(2x), computed while the tape records
    assert tape.gradient(dy, x).numpy() == pytest.approx(4 * np.exp(0.8))


def test_jvp_after_exit_looks_up_and_computes_nothing_new():
    x = ad.constant([1.0, 2.0])
    with ad.ForwardAccumulator(x, [1.0, 1.0]) as acc:
        y = np.sin(x)
    z = np.cos(x)
    np.testing.assert_allclose(acc.jvp(y).numpy(), np.cos([1.0, 2.0]))
    assert acc.jvp(z) is None
    np.testing.assert_array_equal(acc.jvp(z, unconnected_gradients="zero").numpy(), [0.0, 0.0])


def test_nests_of_primals_and_targets():
    a, b = ad.constant(1.5), ad.constant([0.5, -1.0])
    with ad.ForwardAccumulator({"a": a, "b": b}, {"a": 2.0, "b": [1.0, 3.0]}) as acc:
        y = a * b
        z = np.sum(b ** 2)
    got = acc.jvp({"y": y, "pair": (z, None)})
    np.testing.assert_allclose(got["y"].numpy(), 2.0 * np.array([0.5, -1.0]) + 1.5 * np.array([1.0, 3.0]))
    assert got["pair"][0].numpy() == pytest.approx(2 * 0.5 * 1.0 + 2 * -1.0 * 3.0)
    assert got["pair"][1] is None


def test_watch_adds_tangents_and_float32_stays_float32():
    x = ad.constant(np.float32(2.0))
    acc = ad.ForwardAccumulator(x, 1.0)
    acc.watch(x, 2.0)
    with acc:
        y = x * x
    assert acc.jvp(y).dtype == np.float32
    assert acc.jvp(y).numpy() == pytest.approx(2 * 2.0 * 3.0)


def test_integer_results_have_no_tangent():
    x = ad.constant([0.2, 1.7])
    with ad.ForwardAccumulator(x, [1.0, 1.0]) as acc:
        k = np.floor(x).astype(np.int64)
    assert acc.jvp(k) is None


def test_custom_gradient_is_used_for_tangents():
    @ad.custom_gradient
    def clipped_identity(x):
        return x, lambda g: 0.5 * g                # a deliberately different derivative

    x = ad.constant(3.0)
    with ad.ForwardAccumulator(x, 1.0) as acc:
        y = clipped_identity(x) * 2.0
    assert acc.jvp(y).numpy() == pytest.approx(1.0)


# -- compiled functions --------------------------------------------------------------------------------

@ad.function
def _row_squares(x, A):
    y = np.zeros(A.shape[0])
    for i in range(A.shape[0]):
        s = 0.0
        for j in range(x.shape[0]):
            s += A[i, j] * np.sin(x[j])
        y[i] = s * s
    return y


def test_compiled_function_tangents_match_closed_form():
    rng = np.random.default_rng(0)
    A, x0, t = rng.normal(size=(3, 4)), rng.normal(size=4), rng.normal(size=4)
    x = ad.constant(x0)
    with ad.ForwardAccumulator(x, t) as acc:
        y = _row_squares(x, A)
        total = np.sum(y)
    s = A @ np.sin(x0)
    expected = 2 * s * (A @ (np.cos(x0) * t))
    np.testing.assert_allclose(acc.jvp(y).numpy(), expected, rtol=1e-10)
    assert acc.jvp(total).numpy() == pytest.approx(expected.sum())


def test_nested_accumulators_over_a_compiled_function_give_second_directional_derivatives():
    rng = np.random.default_rng(1)
    A, x0, t1, t2 = rng.normal(size=(3, 4)), rng.normal(size=4), rng.normal(size=4), rng.normal(size=4)
    x = ad.constant(x0)
    with ad.ForwardAccumulator(x, t2) as outer:
        with ad.ForwardAccumulator(x, t1) as inner:
            y = _row_squares(x, A)
        first = inner.jvp(y)
    s = A @ np.sin(x0)
    np.testing.assert_allclose(first.numpy(), 2 * s * (A @ (np.cos(x0) * t1)), rtol=1e-10)
    expected = 2 * (A @ (np.cos(x0) * t2)) * (A @ (np.cos(x0) * t1)) + 2 * s * (A @ (-np.sin(x0) * t1 * t2))
    np.testing.assert_allclose(outer.jvp(first).numpy(), expected, rtol=1e-10)


def test_accumulator_around_a_tape_over_a_compiled_function_gives_hessian_vector_products():
    rng = np.random.default_rng(2)
    A, x0, v = rng.normal(size=(3, 4)), rng.normal(size=4), rng.normal(size=4)
    x = ad.constant(x0)
    with ad.ForwardAccumulator(x, v) as acc:
        with ad.GradientTape() as tape:
            tape.watch(x)
            y = np.sum(_row_squares(x, A))
        g = tape.gradient(y, x)
    s, c = A @ np.sin(x0), np.cos(x0)
    # y = sum s_i^2: H = 2 (A diag(c))^T (A diag(c)) - 2 diag(sin x * (A^T s))
    J = A * c
    hessian = 2 * J.T @ J - 2 * np.diag(np.sin(x0) * (A.T @ s))
    np.testing.assert_allclose(g.numpy(), 2 * J.T @ s, rtol=1e-10)
    np.testing.assert_allclose(acc.jvp(g).numpy(), hessian @ v, rtol=1e-10)


# -- errors, as TensorFlow raises them -------------------------------------------------------------------

def test_a_primal_listed_twice_is_refused():
    x = ad.constant(1.0)
    with pytest.raises(ValueError, match="specified as a primal multiple times"):
        ad.ForwardAccumulator([x, x], [1.0, 2.0])


def test_reentering_is_refused():
    acc = ad.ForwardAccumulator(ad.constant(1.0), 1.0)
    with acc:
        with pytest.raises(ValueError, match="Accumulator is already recording."):
            acc.__enter__()


def test_tangent_of_another_shape_is_refused():
    with pytest.raises(ValueError, match=r"tangent has shape \(3,\).*shape \(2,\)"):
        ad.ForwardAccumulator(ad.constant([1.0, 2.0]), [1.0, 2.0, 3.0])


def test_structures_of_different_sizes_are_refused():
    with pytest.raises(ValueError, match="same nested structure: primals is a list of 2, tangents is a list of 1"):
        ad.ForwardAccumulator([ad.constant(1.0), ad.constant(2.0)], [1.0])


def test_a_primal_that_is_not_a_tensor_is_refused():
    with pytest.raises(ValueError, match="not ad.Tensor or ad.Variable"):
        ad.ForwardAccumulator(np.ones(2), np.ones(2))


def test_unknown_unconnected_gradients_value_is_refused():
    acc = ad.ForwardAccumulator(ad.constant(1.0), 1.0)
    with pytest.raises(ValueError, match="Unknown value for unconnected_gradients"):
        acc.jvp(ad.constant(2.0), unconnected_gradients="zeros")


def test_exiting_an_accumulator_inside_a_tape_leaves_the_tape_recording():
    x = ad.constant(1.5)
    with ad.GradientTape() as tape:
        tape.watch(x)
        with ad.ForwardAccumulator(x, 1.0) as acc:
            y = x * x
        z = y * x                                   # after the accumulator: the tape only
    assert acc.jvp(z) is None and acc.jvp(y).numpy() == pytest.approx(3.0)
    assert tape.gradient(z, x).numpy() == pytest.approx(3 * 1.5 ** 2)
