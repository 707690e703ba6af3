"""Zero-cotangent guards paid for only where a cotangent is zero (`opt/zero_guards.py`): a loop body's
stretch of guarded scalar statements runs unguarded first, and again with its guards from the values
before it where a nan came out; the IR kept has the guards alone, and the gradient function made of it
to differentiate again (`ad/vjp.py`) is versioned the same way."""
import math

import numba
import pytest

import srcad as ad
from srcad.compiler import transform
from srcad.compiler.ad.vjp import vjp_function
from srcad.compiler.ir.printer import function_text
from srcad.testing import finite_differences


def zero_weight_times_sqrt(x, y, w, n):
    """With y = 0 the partial of sqrt(y) is inf, and with w = 0 the cotangent reaching it is 0: the
    unguarded run makes a nan, the guarded run adds nothing (d/dy = 0)."""
    s = 0.0
    for i in range(n):
        r = math.sqrt(y)
        t = r * w
        s = s * x + t + x * x
    return s


F = ad.function(zero_weight_times_sqrt)
N = 4


def value_and_grads(x, y, w):
    vx, vy, vw = ad.Variable(x), ad.Variable(y), ad.Variable(w)
    with ad.GradientTape() as tape:
        out = F(vx, vy, vw, N)
    return [float(g.numpy()) for g in tape.gradient(out, [vx, vy, vw])]


def test_the_compiled_adjoint_runs_unguarded_first_and_the_kept_ir_has_the_guards_alone():
    t = transform(zero_weight_times_sqrt, (numba.float64,) * 3 + (numba.int64,), (True, True, True, False))
    compiled = t.source("adjoint")
    assert "made_nan = written_sum != written_sum" in compiled and "if made_nan:" in compiled
    kept = function_text(t.ir.adjoint)
    assert "made_nan" not in kept and "nonzero" in kept


def test_a_zero_cotangent_meeting_an_infinite_partial_in_a_loop_adds_nothing():
    gx, gy, gw = value_and_grads(0.7, 0.0, 0.0)
    assert gy == 0.0 and gw == 0.0
    expected = finite_differences(lambda a: zero_weight_times_sqrt(a[0], 0.0, 0.0, N), (0.7,), 0)
    assert gx == pytest.approx(float(expected), rel=1e-7)


def test_where_no_zero_meets_an_inf_the_unguarded_run_is_the_gradient():
    for k, g in enumerate(value_and_grads(0.7, 0.4, 0.3)):
        expected = finite_differences(lambda a: zero_weight_times_sqrt(*a, N), (0.7, 0.4, 0.3), k)
        assert g == pytest.approx(float(expected), rel=1e-7)


def test_second_order_differentiates_the_guarded_code():
    x = ad.Variable(0.7)
    with ad.GradientTape() as outer:
        with ad.GradientTape() as inner:
            out = F(x, 0.4, 0.3, N)
        g = inner.gradient(out, x)
    h = float(outer.gradient(g, x).numpy())
    expected = finite_differences(lambda a: value_and_grads(a[0], 0.4, 0.3)[0], (0.7,), 0)
    assert h == pytest.approx(float(expected), rel=1e-6)


def test_the_gradient_function_differentiated_again_is_the_adjoint_as_compiled():
    t = transform(zero_weight_times_sqrt, (numba.float64,) * 3 + (numba.int64,), (True, True, True, False))
    assert "made_nan" in function_text(vjp_function(t.ir.forward, t.ir.adjoint))
    assert "made_nan" not in function_text(vjp_function(t.ir.forward, t.ir.adjoint, versioned=False))


def test_second_order_through_the_guarded_run_has_no_nan():
    """At y = 0, w = 0 the first-order adjoint's unguarded run makes a nan and runs again guarded: the
    second order differentiates that run. The loss does not depend on w there (sqrt(0) * w = 0)."""
    x, w = ad.Variable(0.7), ad.Variable(0.0)
    with ad.GradientTape() as outer:
        with ad.GradientTape() as inner:
            out = F(x, 0.0, w, N)
        gx = inner.gradient(out, x)
    hxx, hxw = (float(h.numpy()) for h in outer.gradient(gx, [x, w]))
    expected = finite_differences(lambda a: value_and_grads(a[0], 0.0, 0.0)[0], (0.7,), 0)
    assert hxx == pytest.approx(float(expected), rel=1e-6) and hxw == 0.0


def test_versioned_where_one_tape_differentiates_the_gradient_as_it_is_where_more_do():
    """Versions pay at second order; a gradient function that two tapes differentiate (third order) is made of
    the adjoint as it is, so that every order above compiles less."""
    f = ad.function(zero_weight_times_sqrt)

    def second_at(a):
        v = ad.Variable(a)
        with ad.GradientTape() as outer:
            with ad.GradientTape() as inner:
                out = f(v, 0.4, 0.3, N)
            g = inner.gradient(out, v)
        return float(outer.gradient(g, v).numpy())
    second = second_at(0.7)
    x = ad.Variable(0.7)
    with ad.GradientTape() as t3:
        with ad.GradientTape() as t2:
            with ad.GradientTape() as t1:
                out = f(x, 0.4, 0.3, N)
            g = t1.gradient(out, x)
        gg = t2.gradient(g, x)
    assert float(gg.numpy()) == pytest.approx(second, rel=1e-12)
    third = float(t3.gradient(gg, x).numpy())
    expected = finite_differences(lambda a: value_and_grads(a[0], 0.4, 0.3)[0], (0.7,), 0)
    assert second == pytest.approx(float(expected), rel=1e-6)
    assert third == pytest.approx(float(finite_differences(lambda a: second_at(float(a[0])), (0.7,), 0)), rel=1e-5)
    made = {k[2] for t in f._transforms.values() for k in t.derived if k[:2] == ("called", "gradient")}
    assert made == {True, False}


def skips_when_zero(x, w, n):
    """A user's own test of `!= 0.0` in a loop whose iterations the adjoint runs again: not a guard, kept
    in the unguarded run too."""
    s = 0.5
    for i in range(n):
        nonzero = w != 0.0
        if nonzero:
            s = s * x + math.sin(s + w)
        s = math.cos(s * x) + x * s
    return s


@pytest.mark.parametrize("w", [0.0, 0.3])
def test_a_users_own_test_against_zero_is_not_taken_for_a_guard(w):
    f = ad.function(skips_when_zero)
    vx = ad.Variable(0.7)
    with ad.GradientTape() as tape:
        out = f(vx, w, 5)
    got = float(tape.gradient(out, vx).numpy())
    assert got == pytest.approx(float(finite_differences(lambda a: skips_when_zero(a[0], w, 5), (0.7,), 0)),
                                rel=1e-7)
