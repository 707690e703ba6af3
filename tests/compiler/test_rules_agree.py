"""The compiled rule table and the eager one agree: on values, and at the edge points where a
convention decides the derivative (zeros, non-positive bases, ties of max / min, abs(0), sqrt(0))."""
import math

import numpy as np
import pytest

import srcad as ad


def abs_at(x):
    return np.sum(np.abs(x))


def sqrt_at(x):
    return np.sum(np.sqrt(x))


def max_ties(x):
    return np.max(x) + 2.0 * np.min(x)


def maximum_ties(x, y):
    return np.sum(np.maximum(x, y) + 3.0 * np.minimum(x, y))


def power_at(x, y):
    return np.sum(x ** y)


def log_at(x):
    return np.sum(np.log(x))


def scalar_power(a, b):
    return a ** b


def scalar_max_ties(a, b):
    return max(a, b) + 2.0 * min(a, b) + abs(a - b)


def smooth(x, y):
    return np.sum(np.sin(x) * np.exp(y) + np.tanh(x * y) + np.arctan2(x, y) + np.hypot(x, y) + x ** y)


EDGES = [
    (abs_at, (np.array([0.0, -1.0, 2.0, 0.0]),)),
    (sqrt_at, (np.array([0.0, 1.0, 4.0]),)),
    (max_ties, (np.array([2.0, 1.0, 2.0]),)),
    (max_ties, (np.array([[1.0, 3.0], [3.0, 1.0]]),)),
    (maximum_ties, (np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.5, 3.0]))),
    (power_at, (np.array([-1.5, 0.0, 2.0]), np.array([2.0, 2.0, 0.5]))),
    (power_at, (np.array([0.0, 0.0]), np.array([0.0, 1.0]))),
    (log_at, (np.array([0.0, 1.0, 2.0]),)),
    (scalar_max_ties, (1.5, 1.5)),
    (scalar_power, (-np.inf, -1.0)),       # log_or_zero(-inf) is 0 in scalar code as in arrays: not nan
    (scalar_power, (np.inf, 0.0)),         # power_slope with exponent 0 is 0, whatever the base
    (scalar_power, (np.nan, 0.0)),
    (smooth, (np.array([0.3, -0.7, 1.2]), np.array([0.9, 0.4, 1.1]))),
]

_compiled = {}


def gradients(fn, args, compiled):
    f = _compiled.setdefault(fn, ad.function(fn)) if compiled else fn
    xs = [ad.constant(a) for a in args]
    with ad.GradientTape() as tape:
        tape.watch(xs)
        out = f(*xs)
    return float(out.numpy()), [np.asarray(g.numpy()) for g in tape.gradient(out, xs)]


@pytest.mark.parametrize("fn,args", EDGES, ids=[f"{fn.__name__}-{k}" for k, (fn, _) in enumerate(EDGES)])
def test_compiled_and_eager_rules_agree(fn, args):
    with np.errstate(all="ignore"):
        eager_value, eager = gradients(fn, args, compiled=False)
        compiled_value, compiled = gradients(fn, args, compiled=True)
    np.testing.assert_allclose(compiled_value, eager_value, rtol=1e-12)
    for k, (c, e) in enumerate(zip(compiled, eager)):
        np.testing.assert_allclose(c, e, rtol=1e-12, atol=0, err_msg=f"{fn.__name__}: d/d(arg {k})")


def test_edge_conventions_are_tensorflows():
    """The values both layers agree on are the conventions srcad documents (docs/tape.md)."""
    _, (g,) = gradients(max_ties, (np.array([2.0, 1.0, 2.0]),), compiled=True)
    np.testing.assert_array_equal(g, [0.5, 2.0, 0.5])
    _, (g,) = gradients(abs_at, (np.array([0.0, -1.0]),), compiled=True)
    np.testing.assert_array_equal(g, [0.0, -1.0])
    _, (gx, gy) = gradients(power_at, (np.array([-1.5, 0.0]), np.array([2.0, 2.0])), compiled=True)
    np.testing.assert_array_equal(gy, [0.0, 0.0])
    with np.errstate(all="ignore"):
        _, (g,) = gradients(sqrt_at, (np.array([0.0, 4.0]),), compiled=True)
    assert math.isinf(g[0]) and g[1] == 0.25
