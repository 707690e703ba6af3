"""Custom rules of compiled functions (`f.defjvp`, `f.defvjp`): used from eager and compiled callers,
at first and second order, in both modes, proved used by rules that differ from the true derivative
(twice or three times it), against closed forms; and every error path."""
import numpy as np
import pytest

import srcad as ad


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# ---- defjvp: softplus whose rule gives twice the true derivative ----------------------------------

@ad.function
def softplus(x):
    return np.log(1.0 + np.exp(x))


@softplus.defjvp
def softplus_jvp(primals, tangents):
    x, = primals
    dx, = tangents
    return np.log(1.0 + np.exp(x)), 2.0 * dx / (1.0 + np.exp(-x))


@ad.function
def weighted_softplus(v):
    """sum_i softplus(v_i) * v_i: with the rule, the gradient is 2 s(v) v + softplus(v) and the Hessian
    diagonal 2 s'(v) v + 4 s(v) (s the sigmoid)."""
    total = 0.0
    for i in range(v.shape[0]):
        total += softplus(v[i]) * v[i]
    return total


X = np.array([0.3, -1.2, 2.0])


def rule_gradient(v):
    return 2.0 * sigmoid(v) * v + np.log1p(np.exp(v))


def rule_hessian(v):
    s = sigmoid(v)
    return np.diag(2.0 * s * (1.0 - s) * v + 4.0 * s)


def test_defjvp_from_eager_code_first_and_second_order():
    x = ad.Variable(X)
    with ad.GradientTape() as outer:
        with ad.GradientTape() as inner:
            y = softplus(x)
        g = inner.gradient(y, x)
    np.testing.assert_allclose(g.numpy(), 2.0 * sigmoid(X), rtol=1e-12)
    s = sigmoid(X)
    np.testing.assert_allclose(outer.gradient(g, x).numpy(), 2.0 * s * (1.0 - s), rtol=1e-10)


def test_defjvp_plain_call_runs_the_function():
    np.testing.assert_allclose(softplus(X).numpy(), np.log1p(np.exp(X)), rtol=1e-14)


def test_defjvp_from_a_compiled_caller_first_and_second_order():
    np.testing.assert_allclose(ad.grad(weighted_softplus)(X), rule_gradient(X), rtol=1e-12)
    np.testing.assert_allclose(ad.hessian(weighted_softplus)(X), rule_hessian(X), rtol=1e-10, atol=1e-14)
    v = np.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(ad.hvp(weighted_softplus, X, v), rule_hessian(X) @ v, rtol=1e-10)


def test_defjvp_keeps_float32_float32():
    """The midpoint the rule is evaluated at is computed in the argument's own precision."""
    import numba
    from srcad.compiler.runtime import rule_midpoint
    midpoint = numba.njit(lambda x, t: rule_midpoint(x, t))
    assert midpoint(np.float32(1.5), np.float32(0.0)) == 1.5
    assert midpoint.nopython_signatures[-1].return_type == numba.float32
    assert midpoint(np.ones(3, np.float32), np.zeros(3, np.float32)).dtype == np.float32
    g = ad.grad(weighted_softplus)(X.astype(np.float32))
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, rule_gradient(X), rtol=1e-5)
    h = ad.hessian(weighted_softplus)(X.astype(np.float32))
    assert h.dtype == np.float32
    np.testing.assert_allclose(h, rule_hessian(X), rtol=1e-4, atol=1e-6)


def test_defjvp_in_forward_mode_from_compiled_and_eager_callers():
    t = np.array([1.0, -2.0, 0.5])
    value, tangent = ad.jvp(weighted_softplus, (X,), (t,))
    np.testing.assert_allclose(tangent, rule_gradient(X) @ t, rtol=1e-12)
    x = ad.constant(X)
    with ad.ForwardAccumulator(x, t) as acc:
        y = softplus(x)
    np.testing.assert_allclose(acc.jvp(y).numpy(), 2.0 * sigmoid(X) * t, rtol=1e-12)


def test_defjvp_third_order_is_refused():
    """Raised once the third derivative is prepared: the second under a third recording tape."""
    x = ad.Variable(0.3)
    with pytest.raises(ad.TransformError, match="third order through a function with a custom rule"):
        with ad.GradientTape() as t3:
            with ad.GradientTape() as t2:
                with ad.GradientTape() as t1:
                    y = softplus(x)
                g = t1.gradient(y, x)
            h = t2.gradient(g, x)
        t3.gradient(h, x)


# ---- defjvp: several arguments (one an integer), a tuple output -----------------------------------

@ad.function
def scaled_polar(r, theta, k):
    return k * r * np.cos(theta), k * r * np.sin(theta)


@scaled_polar.defjvp
def scaled_polar_jvp(primals, tangents):
    r, theta, k = primals
    dr, dtheta, _ = tangents
    c, s = np.cos(theta), np.sin(theta)
    # the true tangent in r, three times the true one in theta
    return (k * r * c, k * r * s), (k * (c * dr - 3.0 * r * s * dtheta), k * (s * dr + 3.0 * r * c * dtheta))


@ad.function
def polar_energy(r, theta):
    x, y = scaled_polar(r, theta, 2)
    return x * x + 3.0 * y


def test_defjvp_with_tuple_output_and_integer_argument():
    r, th = 1.5, 0.4
    gr, gth = ad.grad(polar_energy, argnums=(0, 1))(r, th)
    x, y = 2 * r * np.cos(th), 2 * r * np.sin(th)
    dx = (2 * np.cos(th), -3.0 * 2 * r * np.sin(th))
    dy = (2 * np.sin(th), 3.0 * 2 * r * np.cos(th))
    np.testing.assert_allclose([gr, gth], [2 * x * dx[0] + 3 * dy[0], 2 * x * dx[1] + 3 * dy[1]], rtol=1e-12)


# ---- defvjp: a norm whose rule gives three times the gradient in x --------------------------------

@ad.function
def scaled_norm(x, scale):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return scale * np.sqrt(s)


def scaled_norm_fwd(x, scale):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    r = np.sqrt(s)
    return scale * r, (x, r, scale)


def scaled_norm_bwd(residuals, g):
    x, r, scale = residuals
    return 3.0 * g * scale * x / r, g * r


scaled_norm.defvjp(scaled_norm_fwd, scaled_norm_bwd)
V = np.array([1.0, 2.0, 2.0])


def test_defvjp_from_eager_code_first_order():
    gx, gs = ad.grad(scaled_norm, argnums=(0, 1))(V, 2.0)
    np.testing.assert_allclose(gx, 3.0 * 2.0 * V / 3.0, rtol=1e-14)
    assert gs == pytest.approx(3.0)


def test_defvjp_second_order_differentiates_the_rule():
    x = ad.Variable(V)
    with ad.GradientTape() as outer:
        with ad.GradientTape() as inner:
            y = scaled_norm(x, 2.0)
        g = inner.gradient(y, x)
    r = 3.0
    np.testing.assert_allclose(outer.jacobian(g, x).numpy(), 6.0 * (np.eye(3) / r - np.outer(V, V) / r ** 3),
                               rtol=1e-12)


@ad.function
def squared_norms(A):
    """sum_k scaled_norm(A_k, 2) ** 2: with the rule, the gradient is 24 A_k per row, and the Hessian of one
    row's term 24 I + 48 x x^T / r^2 (the rule differentiated: its r through fwd, its g through the rule)."""
    total = 0.0
    for k in range(A.shape[0]):
        total += scaled_norm(A[k], 2.0) ** 2
    return total


def test_defvjp_from_a_compiled_caller_first_and_second_order():
    A = np.array([[1.0, 2.0, 2.0], [0.5, -1.0, 3.0]])
    np.testing.assert_allclose(ad.grad(squared_norms)(A), 24.0 * A, rtol=1e-12)
    x = A[:1]
    expected = 24.0 * np.eye(3) + 48.0 * np.outer(x, x) / (x @ x.T)
    np.testing.assert_allclose(ad.hessian(squared_norms)(x).reshape(3, 3), expected, rtol=1e-10)


def test_defvjp_in_forward_mode_is_the_rule_transposed():
    t = np.array([1.0, 0.0, -1.0])
    _, tangent = ad.jvp(lambda z: scaled_norm(z, 2.0), (V,), (t,))
    assert tangent == pytest.approx(2.0 * V @ t)


# ---- errors ---------------------------------------------------------------------------------------

def cube_and_caller():
    """A fresh `cube` and a compiled caller of it (a caller freezes the rule of `cube` it first sees)."""
    @ad.function
    def cube(x):
        return x * x * x

    @ad.function
    def calls_cube(x):
        return cube(x) + 1.0
    return cube, calls_cube


def test_a_jvp_rule_returning_three_values_is_refused():
    def bad(primals, tangents):
        x, = primals
        dx, = tangents
        return x ** 3, 3.0 * x * x * dx, 0.0
    cube, calls_cube = cube_and_caller()
    cube.defjvp(bad)
    with pytest.raises(ValueError, match=r"jvp rule of `cube` \(bad\) returns a tuple of 3; expected two"):
        ad.grad(calls_cube)(2.0)


def test_a_jvp_rule_with_one_parameter_is_refused():
    cube, _ = cube_and_caller()
    cube.defjvp(one_parameter)
    with pytest.raises(ValueError, match=r"takes 1 parameters; expected two: \(primals, tangents\)"):
        ad.grad(cube)(2.0)


def one_parameter(primals):
    return primals, primals


def test_a_jvp_rule_with_a_tangent_of_another_shape_is_refused():
    def wrong_shape(primals, tangents):
        x, = primals
        dx, = tangents
        return x * x * x, np.sum(3.0 * x * x * dx)
    cube, _ = cube_and_caller()
    cube.defjvp(wrong_shape)
    with pytest.raises(ValueError, match="returns an out_tangent of another shape than its out"):
        ad.grad(lambda v: np.sum(cube(v)))(np.array([1.0, 2.0]))


def cube_fwd(x):
    return x * x * x, x


def cube_bwd(x, g):
    return (3.0 * x * x * g,)


def test_forward_mode_through_a_vjp_rule_in_compiled_code_is_refused():
    cube, calls_cube = cube_and_caller()
    cube.defvjp(cube_fwd, cube_bwd)
    with pytest.raises(ad.TransformError, match=r"forward mode .* through a function with a custom VJP \(defvjp\)"):
        ad.jvp(calls_cube, (2.0,), (1.0,))


def test_a_vjp_rule_of_a_tuple_function_from_a_compiled_caller():
    """pair(x) = (x, x^2) with a rule three times the true VJP: d/dx (a + b) = 3 (1 + 2 x) = 15 at 2, and
    the rule differentiated again (its x is fwd's residual): 6."""
    @ad.function
    def pair(x):
        return x, x * x

    @ad.function
    def calls_pair(x):
        a, b = pair(x)
        return a + b
    pair.defvjp(pair_fwd, pair_bwd)
    assert ad.grad(calls_pair)(2.0) == pytest.approx(15.0)
    x = ad.Variable(2.0)
    with ad.GradientTape() as outer:
        with ad.GradientTape() as inner:
            y = calls_pair(x)
        g = inner.gradient(y, x)
    assert outer.gradient(g, x).numpy() == pytest.approx(6.0)


def pair_fwd(x):
    return (x, x * x), x


def pair_bwd(x, g):
    return (3.0 * (g[0] + 2.0 * x * g[1]),)


def test_a_bwd_rule_of_the_wrong_count_in_compiled_code_is_refused():
    cube, calls_cube = cube_and_caller()
    cube.defvjp(cube_fwd, two_cotangents)
    with pytest.raises(ValueError, match=r"bwd rule of `cube` \(two_cotangents\) returns a tuple of 2; expected a "
                                         r"tuple of 1 cotangents"):
        ad.grad(calls_cube)(2.0)


def test_vjp_rules_returning_the_wrong_values_are_refused():
    cube, _ = cube_and_caller()
    cube.defvjp(one_value, cube_bwd)
    with pytest.raises(ValueError, match=r"fwd rule of `cube` returns a tuple of 1; expected two values"):
        ad.grad(cube)(2.0)
    cube.defvjp(cube_fwd, two_cotangents)
    with pytest.raises(ValueError, match=r"bwd rule of `cube` returns a tuple of 2; expected a tuple of 1"):
        ad.grad(cube)(2.0)
    cube.defvjp(cube_fwd, wrong_cotangent_shape)
    with pytest.raises(ValueError, match=r"cotangent of shape \(2,\) for argument 0, of shape \(\)"):
        ad.grad(cube)(2.0)


def one_value(x):
    return (x * x * x,)


def two_cotangents(x, g):
    return 3.0 * x * x * g, g


def wrong_cotangent_shape(x, g):
    return (np.array([g, g]),)


def test_rules_must_be_functions():
    cube, _ = cube_and_caller()
    with pytest.raises(TypeError, match="defjvp: `jvp` must be a Python function"):
        cube.defjvp(3.0)
    with pytest.raises(TypeError, match="defvjp: `bwd` must be a Python function"):
        cube.defvjp(cube_fwd, "bwd")


@ad.function
def norms_times(x, A):
    """A vector output of a 3-element input: its jacobian would go forward, but not through a custom VJP."""
    out = np.zeros(A.shape[0])
    for k in range(A.shape[0]):
        out[k] = scaled_norm(x * A[k], 2.0)
    return out


def test_a_jacobian_through_a_vjp_rule_goes_in_reverse_mode():
    A = np.array([[1.0, 2.0, 0.5], [0.5, -1.0, 3.0], [2.0, 1.0, 1.0], [1.0, 1.0, -1.0]])
    x = ad.Variable(V)
    with ad.GradientTape() as tape:
        y = norms_times(x, A)
    J = tape.jacobian(y, x).numpy()
    w = V * A
    np.testing.assert_allclose(J, 6.0 * w * A / np.linalg.norm(w, axis=1)[:, None], rtol=1e-12)


# ---- a tuple argument of a function with a custom VJP ---------------------------------------------

def quadratic_fwd(p, x):
    a, b = p
    return a * x + b * x * x, (a, b, x)


def quadratic_bwd(residuals, g):
    """Twice the true VJP of a x + b x^2, the tuple (a, b) item by item."""
    a, b, x = residuals
    return (2.0 * g * x, 2.0 * g * x * x), 2.0 * g * (a + 2.0 * b * x)


def quadratic_and_callers():
    @ad.function
    def quadratic(p, x):
        a, b = p
        return a * x + b * x * x

    @ad.function
    def literal(a, b, x):
        return quadratic((a, b), x) * x

    @ad.function
    def bound(a, b, x):
        p = (a, b)
        return quadratic(p, x) * x
    return quadratic, literal, bound


def test_a_tuple_argument_of_a_vjp_rule_gets_its_cotangents_item_by_item():
    """y = q((a, b), x) x with the rule twice q's VJP: dy/da = 2 x^2, dy/db = 2 x^3,
    dy/dx = 2 x (a + 2 b x) + q; and the rule differentiated again: d2y/da dx = 4 x."""
    quadratic, literal, bound = quadratic_and_callers()
    quadratic.defvjp(quadratic_fwd, quadratic_bwd)
    a, b, x = 1.0, 2.0, 3.0
    expected = (2.0 * x * x, 2.0 * x ** 3, 2.0 * x * (a + 2.0 * b * x) + a * x + b * x * x)
    for caller in (literal, bound):
        np.testing.assert_allclose(ad.grad(caller, argnums=(0, 1, 2))(a, b, x), expected, rtol=1e-14)
    va, vx = ad.Variable(a), ad.Variable(x)
    with ad.GradientTape() as outer:
        with ad.GradientTape() as inner:
            y = literal(va, b, vx)
        ga = inner.gradient(y, va)
    assert outer.gradient(ga, vx).numpy() == pytest.approx(4.0 * x)


def one_cotangent_each(residuals, g):
    return g, g


def test_a_bwd_rule_giving_a_tuple_argument_one_cotangent_is_refused():
    quadratic, literal, _ = quadratic_and_callers()
    quadratic.defvjp(quadratic_fwd, one_cotangent_each)
    with pytest.raises(ValueError, match=r"the bwd rule of `quadratic` \(.*\) returns one value for argument 0, "
                                         r"a tuple of 2; expected a tuple of 2 cotangents, one per item"):
        ad.grad(literal)(1.0, 2.0, 3.0)
