"""custom_gradient (spec 20), RegisterGradient / no_gradient / Operation (spec 21), stop_gradient (spec 14)."""

import uuid

import numpy as np
import pytest

import srcad as ad
from srcad.testing import fd_jacobian, nested_derivatives, record


def val(t):
    return None if t is None else np.asarray(t.numpy())


@ad.custom_gradient
def log1pexp(x):
    e = np.exp(x)

    def grad(dy):
        return dy * (1 - 1 / (1 + e))
    return np.log(1 + e), grad


# -- outputs and grad_fn ------------------------------------------------------------------------------------

def test_log1pexp_guide_example_is_stable():
    x = ad.constant(100.0)
    with ad.GradientTape() as t:
        t.watch(x)
        y = log1pexp(x)
    assert val(t.gradient(y, x)) == 1.0


def test_first_and_second_order_through_grad_fn():
    for xv in (-1.3, 0.2, 2.0):
        y, d1, d2 = nested_derivatives(log1pexp, xv, order=2)
        sig = 1 / (1 + np.exp(-xv))
        assert val(y) == pytest.approx(np.log1p(np.exp(xv)))
        assert val(d1) == pytest.approx(sig)
        assert val(d2) == pytest.approx(sig * (1 - sig))
        assert val(d2) == pytest.approx(float(fd_jacobian(lambda v: 1 / (1 + np.exp(-v)), xv)), rel=1e-6)


def test_outputs_are_new_tensors_even_when_returning_input_or_constant():
    @ad.custom_gradient
    def f(x):
        return (x, 3.0), lambda da, db: da * 2.0 + db * 5.0

    x = ad.constant(4.0)
    with ad.GradientTape() as t:
        t.watch(x)
        a, b = f(x)
    assert a is not x and isinstance(b, ad.Tensor) and val(b) == 3.0
    assert val(t.gradient([a, b], x)) == 7.0


def test_nested_outputs_and_one_dy_per_flat_output():
    received = []

    @ad.custom_gradient
    def f(x, y):
        out = {"sum": x + y, "parts": [x * y, x - y]}

        def grad(d_parts0, d_parts1, d_sum):   # dict keys in sorted order: "parts" before "sum"
            received.append((val(d_parts0), val(d_parts1), val(d_sum)))
            gx = d_sum + d_parts0 * y + d_parts1
            gy = d_sum + d_parts0 * x - d_parts1
            return gx, gy
        return out, grad

    x, y = ad.Variable(2.0), ad.Variable(5.0)
    with ad.GradientTape() as t:
        out = f(x, y)
        target = out["sum"] * 1.0 + out["parts"][0] * 10.0
    assert set(out) == {"sum", "parts"}
    gx, gy = t.gradient(target, [x, y])
    assert (val(gx), val(gy)) == (1.0 + 50.0, 1.0 + 20.0)
    assert received == [(10.0, 0.0, 1.0)]   # the unused output's dy is zeros


def test_single_and_list_returns_and_none_allowed():
    @ad.custom_gradient
    def f(x, y):
        return x * y, lambda dy: [dy * y, None]

    @ad.custom_gradient
    def g(x):
        return x * 2.0, lambda dy: [dy * 2.0]

    x, y = ad.Variable(3.0), ad.Variable(4.0)
    with ad.GradientTape(persistent=True) as t:
        z = f(x, y)
        w = g(x)
    gx, gy = t.gradient(z, [x, y])
    assert val(gx) == 4.0 and gy is None
    assert val(t.gradient(w, x)) == 2.0


def test_wrong_gradient_count_raises():
    @ad.custom_gradient
    def f(x):
        return x * 1.0, lambda dy: []

    t, x, y = record(f)
    with pytest.raises(ValueError, match="custom_gradient function expected to return 1 gradients, but returned 0 "
                                         "instead."):
        t.gradient(y, x)


def test_exceptions_in_grad_fn_propagate():
    @ad.custom_gradient
    def f(x):
        def grad(dy):
            raise ZeroDivisionError("inside grad_fn")
        return x * 1.0, grad

    t, x, y = record(f)
    with pytest.raises(ZeroDivisionError, match="inside grad_fn"):
        t.gradient(y, x)


def test_numpy_inputs_and_python_number_outputs():
    @ad.custom_gradient
    def f(a, b):
        return float(np.sum(a)) + 1.0, lambda dy: (dy * np.ones_like(a), dy)

    out = f(np.array([1.0, 2.0]), 3.0)
    assert isinstance(out, ad.Tensor) and val(out) == 4.0
    x = ad.Variable([1.0, 2.0])
    with ad.GradientTape() as t:
        y = f(x, np.float64(2.0))
    np.testing.assert_array_equal(val(t.gradient(y, x)), [1.0, 1.0])


def test_decorator_on_methods():
    class Scaler:
        def __init__(self, k):
            self.k = k

        @ad.custom_gradient
        def __call__(self, x):
            return x * self.k, lambda dy: dy * self.k * 10.0   # deliberately not the true gradient

    s = Scaler(2.0)
    x = ad.Variable(1.0)
    with ad.GradientTape() as t:
        y = s(x)
    assert val(y) == 2.0 and val(t.gradient(y, x)) == 20.0


def test_bad_return_value_of_f():
    @ad.custom_gradient
    def f(x):
        return x * 2.0

    with pytest.raises(TypeError, match="must return a pair \\(outputs, grad_fn\\)"):
        f(ad.constant(1.0))


def test_grad_fn_gradient_shape_is_checked():
    @ad.custom_gradient
    def f(x):
        return np.sum(x), lambda dy: np.ones(5)

    @ad.custom_gradient
    def g(x):
        return np.sum(x), lambda dy: dy     # scalar for a (3,) input: broadcast

    x = ad.Variable([1.0, 2.0, 3.0])
    with ad.GradientTape(persistent=True) as t:
        y, z = f(x), g(x)
    with pytest.raises(ValueError, match=r"returned for input 0 has shape \(5,\), incompatible with input 0's shape \(3,\)"):
        t.gradient(y, x)
    np.testing.assert_array_equal(val(t.gradient(z, x)), [1.0, 1.0, 1.0])


# -- variables=

def test_variables_are_collected_and_get_gradients():
    w = ad.Variable(3.0)
    frozen = ad.Variable(7.0, trainable=False)

    @ad.custom_gradient
    def f(x):
        y = x * w * frozen

        def grad(dy, variables=None):
            assert variables == [w]
            return dy * val(w) * 7.0, [dy * val(x) * 7.0 * 100.0]   # scaled to prove it is used
        return y, grad

    x = ad.Variable(2.0)
    with ad.GradientTape() as t:
        y = f(x)
    gx, gw = t.gradient(y, [x, w])
    assert val(gx) == 21.0 and val(gw) == 1400.0


@pytest.mark.parametrize("style", ["keyword_only", "var_keyword"])
def test_variables_accepted_as_keyword_only_or_kwargs(style):
    w = ad.Variable(3.0)
    if style == "keyword_only":
        def grad(dy, *, variables):
            return dy * w, [dy * 2.0]
    else:
        def grad(dy, **kw):
            return dy * w, [dy * 2.0 for _ in kw["variables"]]

    @ad.custom_gradient
    def f(x):
        return x * w, grad

    x = ad.Variable(1.0)
    with ad.GradientTape() as t:
        y = f(x)
    gx, gw = t.gradient(y, [x, w])
    assert val(gx) == 3.0 and val(gw) == 2.0


def test_grad_fn_without_variables_raises_at_forward_call():
    w = ad.Variable(3.0)

    @ad.custom_gradient
    def f(x):
        return x * w, lambda dy: dy * w

    with pytest.raises(TypeError, match="@ad.custom_gradient grad_fn must accept keyword argument 'variables', "
                                        "since function uses variables: \\[<ad.Variable"):
        with ad.GradientTape():
            f(ad.constant(1.0))
    with pytest.raises(TypeError, match="must accept keyword argument 'variables'"):
        f(ad.constant(1.0))   # no tape recording: still detected


def test_wrong_number_of_variable_gradients():
    w, v = ad.Variable(3.0), ad.Variable(4.0)

    @ad.custom_gradient
    def f(x):
        return x * w * v, lambda dy, variables: (dy, [dy])

    t, x, y = record(f)
    with pytest.raises(ValueError, match="Must return gradient for each variable from @custom_gradient grad_fn."):
        t.gradient(y, x)


def test_variables_passed_as_arguments_are_excluded():
    w = ad.Variable(3.0)

    @ad.custom_gradient
    def f(x, w):
        return x * w, lambda dy: (dy * w, dy * x)   # no `variables` needed

    x = ad.Variable(2.0)
    with ad.GradientTape() as t:
        y = f(x, w)
    gx, gw = t.gradient(y, [x, w])
    assert (val(gx), val(gw)) == (3.0, 2.0)


# -- nesting and higher order

def test_custom_gradient_inside_custom_gradient():
    @ad.custom_gradient
    def inner(x):
        return np.sin(x), lambda dy: dy * np.cos(x)

    @ad.custom_gradient
    def outer(x):
        with ad.GradientTape() as t:
            t.watch(x)
            y = inner(x)
        d = t.gradient(y, x)
        return y * 2.0, lambda dy: dy * 2.0 * d

    x = ad.constant(0.4)
    with ad.GradientTape() as t:
        t.watch(x)
        y = outer(x)
    assert val(t.gradient(y, x)) == pytest.approx(2 * np.cos(0.4))


def test_second_order_override_with_nested_custom_gradient():
    """The documented pattern: the first-order computation is itself a custom_gradient of (x, dy)."""
    @ad.custom_gradient
    def f(x):
        @ad.custom_gradient
        def first(x, dy):
            def second(ddx):
                return ddx * dy * 42.0, ddx * 3.0 * x * x   # d/dx overridden; d/ddy is the transpose
            return dy * 3.0 * x * x, second
        return x ** 3, lambda dy: first(x, dy)

    _, d1, d2 = nested_derivatives(f, 2.0, order=2)
    assert val(d1) == 12.0
    assert val(d2) == 42.0


def test_third_order_through_custom_gradient():
    @ad.custom_gradient
    def cube(x):
        return x * x * x, lambda dy: dy * 3.0 * x * x

    _, d1, d2, d3 = nested_derivatives(cube, 1.5, order=3)
    assert (val(d1), val(d2), val(d3)) == pytest.approx((6.75, 9.0, 6.0))


# -- stop_gradient

def test_stop_gradient_values_and_inputs():
    x = ad.Variable([1.0, 2.0])
    with ad.GradientTape() as t:
        y = x * ad.stop_gradient(x)
    np.testing.assert_array_equal(val(t.gradient(y, x)), [1.0, 2.0])
    assert val(ad.stop_gradient(3.0)) == 3.0
    np.testing.assert_array_equal(val(ad.stop_gradient(np.array([1, 2]))), [1, 2])
    with pytest.raises(TypeError, match="Cannot convert None"):
        ad.stop_gradient(None)


# -- RegisterGradient / no_gradient / Operation

def fresh(name):
    return f"{name}_{uuid.uuid4().hex[:8]}"


def test_register_gradient_and_operation():
    name = fresh("MyCube")
    seen = {}

    @ad.RegisterGradient(name)
    def _cube_grad(op, dy):
        seen["op"] = op
        return dy * 3.0 * op.inputs[0] * op.inputs[0] * op.get_attr("scale")

    assert _cube_grad.__name__ == "_cube_grad"        # returned unchanged
    cube = ad.Operation(name, lambda x, scale: scale * x ** 3)
    y, d1, d2 = nested_derivatives(lambda x: cube(x, scale=0.5), 2.0, order=2)
    assert val(y) == 4.0 and val(d1) == 6.0 and val(d2) == 6.0   # 1.5 x^2, then 3 x
    op = seen["op"]
    assert op.type == name and op.attrs == {"scale": 0.5} and op.skip_input_indices == ()
    assert len(op.inputs) == 1 and len(op.outputs) == 1
    with pytest.raises(ValueError, match="has no attr named 'missing'"):
        op.get_attr("missing")


def test_operation_with_several_outputs_and_skip_input_indices():
    name = fresh("SinCos")
    skips = []

    @ad.RegisterGradient(name)
    def _grad(op, d_sin, d_cos):
        skips.append(op.skip_input_indices)
        x = op.inputs[0]
        return d_sin * np.cos(x) - d_cos * np.sin(x), None

    sincos = ad.Operation(name, lambda x, k: (np.sin(x), np.cos(x) * k))
    x, k = ad.Variable(0.3), ad.constant(1.0)
    with ad.GradientTape() as t:
        s, c = sincos(x, k)
        y = s + c
    assert val(t.gradient(y, x)) == pytest.approx(np.cos(0.3) - np.sin(0.3))
    assert skips == [(1,)]


def test_no_gradient_gives_none():
    name = fresh("Floorish")
    ad.no_gradient(name)
    op = ad.Operation(name, np.floor)
    x = ad.Variable(1.5)
    with ad.GradientTape() as t:
        y = op(x) + x
    assert val(t.gradient(y, x)) == 1.0
    with ad.GradientTape() as t:
        y = op(x)
    assert t.gradient(y, x) is None


def test_unregistered_operation_raises_lookup_error_at_backprop():
    name = fresh("Unregistered")
    op = ad.Operation(name, lambda x: x * 2.0)
    t, x, y = record(op)   # recording works: the lookup happens at backprop time
    with pytest.raises(LookupError, match=f"No gradient defined for operation '{name}'"):
        t.gradient(y, x)


def test_register_twice_and_non_string():
    name = fresh("Twice")
    ad.RegisterGradient(name)(lambda op, dy: dy)
    with pytest.raises(KeyError, match=f"Registering two gradient with name '{name}'! \\(Previous registration "
                                       f"was in"):
        ad.RegisterGradient(name)(lambda op, dy: dy)
    with pytest.raises(KeyError, match="Registering two gradient"):
        ad.no_gradient(name)
    with pytest.raises(TypeError, match="op_type must be a string"):
        ad.RegisterGradient(3)
    with pytest.raises(TypeError, match="op_type must be a string"):
        ad.no_gradient(None)


def test_registered_gradient_wrong_count():
    name = fresh("WrongCount")
    ad.RegisterGradient(name)(lambda op, dy: [dy, dy])
    op = ad.Operation(name, lambda x: x + 1.0)
    t, x, y = record(op)
    with pytest.raises(ValueError, match="returned 2 gradients for an op with 1 inputs"):
        t.gradient(y, x)


def test_variables_gradients_inside_jacobians():
    w = ad.Variable(2.0)

    @ad.custom_gradient
    def g(x):
        return x * w, lambda dy, variables: (dy * w, [np.sum(dy * x)])

    xv = np.array([[0.5, 1.0], [2.0, 3.0]])
    xb = ad.constant(xv)
    with ad.GradientTape(persistent=True) as t:
        t.watch(xb)
        y = g(xb)
    np.testing.assert_array_equal(val(t.batch_jacobian(y, xb)), np.stack([2 * np.eye(2)] * 2))
    np.testing.assert_array_equal(val(t.jacobian(y, w)), xv)
    np.testing.assert_array_equal(val(t.jacobian(y, w, experimental_use_pfor=False)), xv)


def test_nested_custom_gradient_sees_inner_variables():
    w = ad.Variable(3.0)

    @ad.custom_gradient
    def inner(x):
        return x * w, lambda dy, variables: (dy * w, [dy * x])

    @ad.custom_gradient
    def outer(x):
        y = inner(x)
        return y * 2.0, lambda dy, variables: (dy * 2.0 * w, [dy * 2.0 * x])

    x = ad.Variable(5.0)
    with ad.GradientTape() as t:
        y = outer(x)
    gx, gw = t.gradient(y, [x, w])
    assert (val(gx), val(gw)) == (6.0, 10.0)
