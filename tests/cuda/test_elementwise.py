"""`@ad.function(target="cuda")`: a scalar function applied elementwise with NumPy's broadcasting (Numba's CUDA
simulator in CI, a GPU with SRCAD_GPU=1). Values equal the function applied element by element in Python;
gradients equal finite differences of that, for every way an argument can be broadcast."""
import math

import numpy as np
import pytest

pytest.importorskip("numba.cuda")

import srcad as ad  # noqa: E402
from srcad.testing import finite_differences  # noqa: E402


def softplus(a, x):
    return a * math.log(1.0 + math.exp(x))


def _kink(v):
    return v * v if v < 0.0 else math.sin(v)


def piecewise(x, c, s):
    """A branch and a helper; `s` is a Python number (a constant)."""
    return _kink(x - c) * s + math.tanh(c * x)


SOFTPLUS = ad.function(softplus, target="cuda")
PIECEWISE = ad.function(piecewise, target="cuda")
RNG = np.random.default_rng(3)


def _plain(f, args):
    """`f` applied element by element in Python, with NumPy's broadcasting."""
    return np.vectorize(f, otypes=[np.float64])(*args)


def _weights(shape):
    return np.cos(np.arange(math.prod(shape))).reshape(shape)


def _check(gpu, plain, args, active, rtol=1e-10):
    """Value and gradients of loss = sum(w * f(args)) against Python and finite differences."""
    values = [ad.Variable(a) if k in active else a for k, a in enumerate(args)]
    with ad.GradientTape() as tape:
        out = gpu(*values)
        loss = np.sum(_weights(out.shape) * out)
    grads = tape.gradient(loss, [values[k] for k in active])
    expected = _plain(plain, args)
    assert out.shape == expected.shape
    np.testing.assert_allclose(out.numpy(), expected, rtol=rtol, atol=1e-12)

    def phi(a):
        return np.sum(_weights(expected.shape) * _plain(plain, a))
    for g, k in zip(grads, active):
        assert g.shape == np.shape(args[k])
        np.testing.assert_allclose(g.numpy(), finite_differences(phi, list(args), k), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("a_shape, x_shape", [((), (3, 4)),            # a 0-d Variable: one element, every thread
                                              ((3, 4), (3, 4)),        # the thread's own element
                                              ((4,), (3, 4)),          # a row broadcast down the columns
                                              ((3, 1), (1, 4)),        # both broadcast: an outer product
                                              ((2, 1, 3), (4, 1))])    # three axes, one padded
def test_broadcast_arguments_get_gradients_of_their_own_shape(a_shape, x_shape):
    args = [RNG.uniform(0.5, 2.0, a_shape), RNG.uniform(-2.0, 2.0, x_shape)]
    _check(SOFTPLUS, softplus, args, (0, 1))


def test_a_branch_a_helper_and_a_python_number():
    x = RNG.uniform(-1.0, 1.0, 40)
    x[np.abs(x - 0.3) < 0.05] += 0.2            # away from the kink at x = c
    _check(PIECEWISE, piecewise, [x, np.array([0.3]), 2.5], (0, 1))


def test_float32_stays_float32():
    x = RNG.uniform(-2.0, 2.0, 30).astype(np.float32)
    a = ad.Variable(np.float32(1.5) * np.ones(1, np.float32))
    X = ad.Variable(x)
    with ad.GradientTape() as tape:
        out = SOFTPLUS(a, X)
        loss = np.sum(out)
    da, dx = tape.gradient(loss, [a, X])
    assert out.dtype == np.float32 and dx.dtype == np.float32 and da.dtype == np.float32
    sig = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(dx.numpy(), 1.5 * sig, rtol=1e-5)
    np.testing.assert_allclose(da.numpy(), [np.sum(np.log1p(np.exp(x.astype(np.float64))))], rtol=1e-5)


def test_plain_arrays_give_a_tensor_and_nothing_is_recorded():
    x = np.linspace(-1.0, 1.0, 7)
    out = SOFTPLUS(2.0, x)
    assert isinstance(out, ad.Tensor)
    np.testing.assert_allclose(out.numpy(), 2.0 * np.log1p(np.exp(x)), rtol=1e-12)


def test_call_errors_name_the_function():
    with pytest.raises(TypeError, match=r"softplus\(\) takes 2 arguments \(a, x\), got 1"):
        SOFTPLUS(np.ones(3))
    with pytest.raises(ValueError, match=r"softplus: arguments of shapes \[\(3,\), \(4,\)\] do not broadcast"):
        SOFTPLUS(np.ones(3), np.ones(4))
