"""Reversed loops whose iterations are independent run ascending in the adjoint (`opt/loop_order.py`);
loops that carry anything from one iteration to the next keep the reverse order."""
import numba
import numpy as np

from srcad.compiler import pipeline, transform
from srcad.compiler.ir import Const, For
from srcad.compiler.ir.visit import walk
from srcad.testing import finite_differences
from test_ir import second_order_check

rng = np.random.default_rng(47)


def triangular_norm(L, x):
    """|L x|^2 over the lower triangle: the adjoint of the inner loop adds into d_L[row, col] and
    d_x[col], each iteration at its own elements."""
    total = 0.0
    for row in range(x.shape[0]):
        s = 0.0
        for col in range(row + 1):
            s += L[row, col] * x[col]
        total += s * s
    return total


def differences(x, w):
    """Neighbouring elements: iteration i adds into d_x[i] and d_x[i - 1], which iteration i - 1 adds
    into too, and every iteration adds into d_w[0]."""
    total = 0.0
    for i in range(1, x.shape[0]):
        total += w[0] * (x[i] - x[i - 1]) ** 2
    return total


def recurrence(x, a):
    """y carried from one iteration to the next: the adjoint restores it, iteration by iteration."""
    y = 1.0
    for i in range(x.shape[0]):
        y = y * a + np.sin(x[i])
    return y


VECTOR, MATRIX = numba.float64[::1], numba.float64[:, ::1]


def _steps(fn, types, active):
    """{source line of a loop: the steps of its reversed loops} in the adjoint after `loop_order`."""
    adjoint = pipeline.run(fn, types, active, until="loop_order").plain_adjoint
    steps = {}
    for s in walk(adjoint.body):
        if isinstance(s, For):
            steps.setdefault(s.origin.text.strip(), []).append(s.step)
    return steps


def _check_gradients(fn, args, active):
    t = transform(fn, [numba.typeof(a) for a in args], active)
    _, saved = t.forward(*args)
    grads = t.adjoint(*args, saved, 1.0)
    k = 0
    for i, a in enumerate(active):
        if a:
            np.testing.assert_allclose(grads[k], finite_differences(lambda v: fn(*v), args, i), rtol=1e-6, atol=1e-8)
            k += 1
    second_order_check(fn, args, active)


def test_a_loop_adding_into_its_own_elements_runs_ascending():
    steps = _steps(triangular_norm, (MATRIX, VECTOR), (True, True))
    assert steps["for col in range(row + 1):"] == [Const(1)]
    assert steps["for row in range(x.shape[0]):"] == [Const(-1)]       # it restores s
    _check_gradients(triangular_norm, (rng.normal(size=(6, 6)), rng.normal(size=6)), (True, True))


def test_loops_sharing_elements_or_values_keep_the_reverse_order():
    assert _steps(differences, (VECTOR, VECTOR), (True, True))["for i in range(1, x.shape[0]):"] == [Const(-1)]
    assert _steps(recurrence, (VECTOR, numba.float64), (True, True))["for i in range(x.shape[0]):"] == [Const(-1)]
    _check_gradients(differences, (rng.normal(size=7), np.array([0.7])), (True, True))
    _check_gradients(recurrence, (rng.normal(size=7), 0.8), (True, True))
