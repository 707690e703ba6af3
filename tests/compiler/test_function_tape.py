"""@ad.function on the tape: compiled segments mixed with eager ops, gradients vs closed forms / FD."""

import math

import numpy as np
import pytest

import srcad as ad


@ad.function
def poly(x, a):
    return a * x * x + math.sin(x)


@ad.function
def weighted_norm(v, w, n):
    s = 0.0
    for i in range(n):
        s += w[i] * v[i] * v[i]
    return s


@ad.function
def scale_and_sum(v, c):
    out = np.empty_like(v)
    for i in range(v.shape[0]):
        out[i] = c * v[i] * v[i]
    return out, np.sum(v)


def test_outside_a_tape_runs_the_primal_and_returns_tensors():
    y = poly(2.0, 3.0)
    assert isinstance(y, ad.Tensor)
    assert y.numpy() == pytest.approx(12.0 + math.sin(2.0))


def test_scalar_gradient_matches_closed_form():
    x = ad.Variable(0.7)
    with ad.GradientTape() as tape:
        y = poly(x, 3.0)
    assert tape.gradient(y, x).numpy() == pytest.approx(6.0 * 0.7 + math.cos(0.7))


def test_only_watched_arguments_get_gradients():
    x, a = ad.constant(0.7), ad.constant(3.0)
    with ad.GradientTape(persistent=True) as tape:
        tape.watch(a)
        y = poly(x, a)
    assert tape.gradient(y, x) is None
    assert tape.gradient(y, a).numpy() == pytest.approx(0.49)


def test_eager_ops_and_segments_mix_in_one_tape():
    v = ad.Variable(np.array([1.0, 2.0, 3.0]))
    w = np.array([0.5, 1.5, 2.0])
    with ad.GradientTape() as tape:
        u = np.exp(v) * 0.1                 # eager
        s = weighted_norm(u, w, 3)          # compiled
        z = s * s                           # eager again
    g = tape.gradient(z, v).numpy()
    uv = np.exp(v.numpy()) * 0.1
    s_val = np.sum(w * uv * uv)
    np.testing.assert_allclose(g, 2 * s_val * 2 * w * uv * uv, rtol=1e-12)


def test_integer_arguments_get_no_gradient():
    v = ad.constant(np.array([1.0, 2.0]))
    n = ad.constant(2)
    with ad.GradientTape() as tape:
        tape.watch([v, n])
        s = weighted_norm(v, np.ones(2), n)
    gv, gn = tape.gradient(s, [v, n])
    np.testing.assert_allclose(gv.numpy(), [2.0, 4.0])
    assert gn is None


def test_tuple_outputs_and_output_gradients():
    v = ad.constant(np.array([1.0, -2.0, 0.5]))
    with ad.GradientTape() as tape:
        tape.watch(v)
        out, total = scale_and_sum(v, 2.0)
    assert isinstance(out, ad.Tensor) and isinstance(total, ad.Tensor)
    g = tape.gradient([out, total], v, output_gradients=[np.array([1.0, 2.0, 3.0]), 10.0]).numpy()
    np.testing.assert_allclose(g, 4.0 * v.numpy() * np.array([1.0, 2.0, 3.0]) + 10.0)


def test_persistent_tape_gives_the_same_gradient_twice_and_outputs_stay_intact():
    v = ad.Variable(np.array([0.3, 0.6, 0.9]))
    with ad.GradientTape(persistent=True) as tape:
        out, _ = scale_and_sum(v, 1.5)
    before = out.numpy().copy()
    g1 = tape.gradient(out, v).numpy()
    g2 = tape.gradient(out, v).numpy()
    np.testing.assert_array_equal(g1, g2)
    np.testing.assert_array_equal(out.numpy(), before)
    np.testing.assert_allclose(g1, 3.0 * v.numpy())


def test_jacobian_through_a_segment():
    v = ad.constant(np.array([0.3, 0.6, 0.9]))
    with ad.GradientTape() as tape:
        tape.watch(v)
        out, _ = scale_and_sum(v, 2.0)
    np.testing.assert_allclose(tape.jacobian(out, v).numpy(), np.diag(4.0 * v.numpy()))


def test_float32_gradients_stay_float32():
    v = ad.Variable(np.array([1.0, 2.0], dtype=np.float32))
    with ad.GradientTape() as tape:
        s = weighted_norm(v, np.ones(2, dtype=np.float32), 2)
    g = tape.gradient(s, v)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g.numpy(), [2.0, 4.0])


def test_keyword_arguments_bind_like_python():
    x = ad.Variable(0.2)
    with ad.GradientTape() as tape:
        y = poly(a=2.0, x=x)
    assert tape.gradient(y, x).numpy() == pytest.approx(0.8 + math.cos(0.2))


def test_bad_calls_are_refused_clearly():
    with pytest.raises(TypeError, match="poly\\(\\): missing a required argument: 'a'"):
        poly(1.0)
    with pytest.raises(ValueError, match="target='gpu' is not available"):
        ad.function(target="gpu")
    with pytest.raises(TypeError, match="expects a Python function"):
        ad.function(3)


def test_second_derivative_through_a_segment_by_nested_tapes():
    """poly(x, a) = a x^2 + sin x: the inner gradient's own gradient is compiled from its IR."""
    x = ad.Variable(0.5)
    with ad.GradientTape() as outer:
        with ad.GradientTape() as inner:
            y = poly(x, 1.0)
        dy = inner.gradient(y, x)
    assert dy.numpy() == pytest.approx(2 * 0.5 + math.cos(0.5))
    assert outer.gradient(dy, x).numpy() == pytest.approx(2.0 - math.sin(0.5))


def test_show_source_needs_a_call_or_example_arguments():
    @ad.function
    def never_called(x):
        return x * x

    with pytest.raises(ValueError, match="has not been called yet"):
        ad.show_source(never_called, "adjoint")
    text = ad.show_source(never_called, "adjoint", 1.5)
    assert "line" in text
    with pytest.raises(ValueError, match="kind must be one of"):
        ad.show_source(never_called, "backward")
