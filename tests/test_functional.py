"""The functional API (`ad.grad`, `value_and_grad`, `vjp`, `jvp`, `hvp`, `hessian`) on eager and compiled
functions against closed forms, SciPy's optimizers on the Rosenbrock function, and its errors."""
import numpy as np
import pytest
from scipy.optimize import minimize

import srcad as ad


def rosenbrock_np(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


@ad.function
def rosenbrock_compiled(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += 100.0 * (x[i + 1] - x[i] * x[i]) ** 2 + (1.0 - x[i]) ** 2
    return s


def rosenbrock_gradient(x):
    g = np.zeros_like(x)
    g[:-1] = -400.0 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2.0 * (1.0 - x[:-1])
    g[1:] += 200.0 * (x[1:] - x[:-1] ** 2)
    return g


def rosenbrock_hessian(x):
    n = x.shape[0]
    H = np.zeros((n, n))
    for i in range(n - 1):
        H[i, i] += 1200.0 * x[i] ** 2 - 400.0 * x[i + 1] + 2.0
        H[i, i + 1] += -400.0 * x[i]
        H[i + 1, i] += -400.0 * x[i]
        H[i + 1, i + 1] += 200.0
    return H


BOTH = [pytest.param(rosenbrock_np, id="eager"), pytest.param(rosenbrock_compiled, id="compiled")]
X = np.array([-1.2, 1.0, 0.5, 1.3])


@pytest.mark.parametrize("f", BOTH)
def test_grad_and_value_and_grad_match_the_closed_form(f):
    g = ad.grad(f)(X)
    assert isinstance(g, np.ndarray) and g.shape == X.shape and g.dtype == X.dtype
    np.testing.assert_allclose(g, rosenbrock_gradient(X), rtol=1e-12)
    value, g2 = ad.value_and_grad(f)(X)
    assert float(value) == pytest.approx(rosenbrock_np(X), rel=1e-14)
    np.testing.assert_allclose(g2, g, rtol=1e-14)


@pytest.mark.parametrize("f", BOTH)
def test_hvp_and_hessian_match_the_closed_form(f):
    v = np.array([0.3, -1.0, 2.0, 0.5])
    H = rosenbrock_hessian(X)
    np.testing.assert_allclose(ad.hvp(f, X, v), H @ v, rtol=1e-10)
    hessian = ad.hessian(f)(X)
    assert hessian.shape == X.shape + X.shape
    np.testing.assert_allclose(hessian, H, rtol=1e-10)


@pytest.mark.parametrize("f", BOTH)
def test_jvp_and_vjp_agree_with_the_gradient(f):
    t = np.array([1.0, 0.5, -0.25, 2.0])
    out, out_tangent = ad.jvp(f, (X,), (t,))
    assert float(out) == pytest.approx(rosenbrock_np(X))
    assert float(out_tangent) == pytest.approx(rosenbrock_gradient(X) @ t, rel=1e-12)
    out, vjp_fn = ad.vjp(f, X)
    (ct,) = vjp_fn(2.0)
    np.testing.assert_allclose(ct, 2.0 * rosenbrock_gradient(X), rtol=1e-12)


def test_argnums_tuple_gives_one_gradient_per_argument_in_their_dtypes():
    def f(a, b, scale):
        return np.sum(a * b) * scale

    a, b = np.array([1.0, 2.0], np.float32), 3.0
    ga, gb = ad.grad(f, argnums=(0, 1))(a, b, 2.0)
    assert ga.dtype == np.float32 and isinstance(gb, float)
    np.testing.assert_allclose(ga, [6.0, 6.0])
    assert gb == pytest.approx(6.0)


def test_vjp_of_a_function_with_two_outputs():
    def f(x):
        return np.sin(x), np.sum(x ** 2)

    x = np.array([0.1, 0.7])
    (s, q), vjp_fn = ad.vjp(f, x)
    (ct,) = vjp_fn((np.array([1.0, 2.0]), 3.0))
    np.testing.assert_allclose(ct, np.cos(x) * [1.0, 2.0] + 3.0 * 2 * x)


@pytest.mark.parametrize("f", BOTH)
@pytest.mark.parametrize("start", [np.array([-1.2, 1.0, -0.5, 0.8]), np.array([2.0, 2.0, 2.0, 2.0]),
                                   np.array([0.0, 0.0, 0.0, 0.0])])
def test_scipy_minimize_reaches_the_rosenbrock_minimum(f, start):
    bfgs = minimize(ad.value_and_grad(f), start, jac=True, method="BFGS", options={"gtol": 1e-10})
    np.testing.assert_allclose(bfgs.x, np.ones(4), atol=1e-6)
    newton = minimize(f if f is rosenbrock_np else lambda x: float(rosenbrock_compiled(x).numpy()), start,
                      jac=ad.grad(f), hessp=lambda x, p: ad.hvp(f, x, p), method="Newton-CG",
                      options={"xtol": 1e-12})
    np.testing.assert_allclose(newton.x, np.ones(4), atol=1e-6)


def test_argnums_out_of_range_is_refused():
    with pytest.raises(ValueError, match="argnums 2 of rosenbrock_np is out of range: it was called with 1"):
        ad.grad(rosenbrock_np, argnums=2)(X)


def test_argnums_that_is_not_an_int_is_refused():
    with pytest.raises(TypeError, match="argnums of rosenbrock_np must be an int or a tuple of ints"):
        ad.grad(rosenbrock_np, argnums="x")(X)


@ad.function
def sines(x):
    return np.sin(x)


@pytest.mark.parametrize("f", [pytest.param(np.sin, id="eager"), pytest.param(sines, id="compiled")])
def test_grad_of_a_non_scalar_output_is_refused(f):
    with pytest.raises(TypeError, match=r"needs a scalar output, got an output of shape \(2,\)"):
        ad.grad(f)(np.array([0.1, 0.2]))


def test_grad_of_an_integer_argument_is_refused():
    with pytest.raises(TypeError, match="argument 0 of rosenbrock_np has dtype int64: only float arguments"):
        ad.grad(rosenbrock_np)(np.array([1, 2, 3]))


def test_jvp_with_a_tangent_of_another_shape_is_refused():
    with pytest.raises(ValueError, match=r"tangent of argument 0 of rosenbrock_np has shape \(3,\), its primal \(4,\)"):
        ad.jvp(rosenbrock_np, (X,), (np.ones(3),))
