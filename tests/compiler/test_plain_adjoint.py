"""The adjoint with plain products (`opt/plain_adjoint.py`): compiled beside the guarded adjoint and run
first; the guarded one runs, compiled only then, where a gradient of the plain one holds a nan."""
import math

import numba
import numpy as np
import pytest

import srcad as ad
from srcad.compiler import transform
from srcad.function import CompiledSegment
from srcad.testing import finite_differences
from test_ir import second_order_check
from test_rows import work_filled_by_a_helper
from test_custom_rules import squared_norms

rng = np.random.default_rng(31)


def soft_minimum_rows(a, w, g):
    """Per row, the soft minimum -g log(sum_j exp(-a_ij / g)), weighted by w_i. An a_ij = inf adds
    exp(-inf) = 0, and the partial of -a_ij / g in g is inf: its cotangent is 0, so the plain adjoint
    makes 0 * inf = nan in d_g, and the guarded adjoint adds nothing."""
    total = 0.0
    for i in range(a.shape[0]):
        s = 0.0
        for j in range(a.shape[1]):
            s += math.exp(-a[i, j] / g)
        total += w[i] * (-g * math.log(s))
    return total


TYPES = (numba.float64[:, ::1], numba.float64[::1], numba.float64)
ACTIVE = (True, True, True)


def _gradients(t, args):
    _, saved = t.forward(*args)
    return t.adjoint(*args, saved, 1.0)


def test_the_plain_adjoint_keeps_only_guards_of_whole_loops_and_no_guarded_product():
    """The inner loop's body is one guard on d_s, which the loop leaves as it is: the loop runs under it."""
    t = transform(soft_minimum_rows, TYPES, ACTIVE)
    plain, guarded = t.source("plain adjoint"), t.source("adjoint")
    assert "cotangent_times" in guarded and "cotangent_times" not in plain
    assert "def soft_minimum_rows_adjoint_plain(" in plain
    lines = [line.strip() for line in plain.splitlines() if not line.strip().startswith("#")]
    tests = [k for k, line in enumerate(lines) if line.startswith("if nonzero")]
    assert len(tests) == 1 and lines[tests[0] + 1].startswith("for j in range(")
    assert guarded.count("if nonzero") > 1


class Counted:
    """A compiled function that counts its calls (whether it is compiled says nothing: one dispatcher
    serves every load of its code in the process, `numba_cpu.import_jit`)."""

    def __init__(self, dispatcher):
        self.dispatcher, self.calls = dispatcher, 0

    def __call__(self, *args):
        self.calls += 1
        return self.dispatcher(*args)


def test_the_guarded_adjoint_runs_only_where_the_plain_one_makes_a_nan():
    t = transform(soft_minimum_rows, TYPES, ACTIVE)
    t._adjoint = guarded = Counted(t._adjoint)
    a, w, g = rng.uniform(0.5, 2.0, (3, 4)), np.array([0.8, 0.0, 1.3]), 0.7   # row 1: its loop is skipped
    grads = _gradients(t, (a, w, g))
    assert guarded.calls == 0                              # the guarded adjoint never ran
    for k, got in enumerate(grads):
        np.testing.assert_allclose(got, finite_differences(lambda v: soft_minimum_rows(*v), (a, w, g), k),
                                   rtol=1e-7, atol=1e-9)
    a[2, 1] = np.inf
    d_a, d_w, d_g = _gradients(t, (a, w, g))
    assert guarded.calls == 1                              # the plain run made a nan: the guarded one ran
    assert np.all(np.isfinite(d_a)) and d_a[2, 1] == 0.0 and math.isfinite(d_g)
    assert d_g == pytest.approx(float(finite_differences(lambda v: soft_minimum_rows(a, w, v[0]), (g,), 0)),
                                rel=1e-7)
    finite = np.isfinite(a)
    np.testing.assert_allclose(d_a[finite], finite_differences(lambda v: soft_minimum_rows(v[0], w, g), (a,), 0,
                                                               )[finite], rtol=1e-6, atol=1e-9)


def test_second_order_runs_the_plain_adjoint_of_the_gradient_function():
    """The gradient function differentiated again has a plain adjoint of its own: its Hessian-vector
    product against finite differences of the gradient (`test_ir.second_order_check`)."""
    a, w = rng.uniform(0.5, 2.0, (3, 4)), np.array([0.8, 0.5, 1.3])
    second = second_order_check(soft_minimum_rows, (a, w, 0.7), ACTIVE)
    assert second._plain_adjoint is not None and "cotangent_times" not in second.source("plain adjoint")


def test_second_order_where_a_first_order_cotangent_is_exactly_zero():
    """w_1 = 0 makes d_s = 0 in row 1: the statements its guard skips add nothing at first order, but their
    derivative in w_1 is not 0; the gradient function runs them unguarded (`ad/vjp.py`)."""
    a, w = rng.uniform(0.5, 2.0, (3, 4)), np.array([0.8, 0.0, 1.3])
    second_order_check(soft_minimum_rows, (a, w, 0.7), ACTIVE)


soft_minimum_rows_fn = ad.function(soft_minimum_rows)


def _cross(a, w, U, v=None):
    """d/dw of U . d/da soft_minimum_rows (nested tapes over the compiled segment); with `v`, its dot
    with v and the gradient of that in a (a third tape) too."""
    a, w = ad.constant(a), ad.constant(w)
    with ad.GradientTape() as t3:
        t3.watch(a)
        with ad.GradientTape() as t2:
            t2.watch(w)
            with ad.GradientTape() as t1:
                t1.watch([a, w])
                y = soft_minimum_rows_fn(a, w, 0.7)
            gu = np.sum(t1.gradient(y, a) * U)
        cross = t2.gradient(gu, w)
        vcv = np.sum(cross * v) if v is not None else None
    return cross.numpy(), (t3.gradient(vcv, a).numpy() if v is not None else None)


def test_second_and_third_order_through_tapes_where_a_first_order_cotangent_is_exactly_zero():
    """Nested tapes over the compiled segment at w_1 = 0 (its row's d_s is 0): the mixed second derivative
    in w of the gradient in a (the versioned gradient function), and its gradient in a again (the gradient
    function as it is, below it), against finite differences."""
    a, w = rng.uniform(0.5, 2.0, (3, 4)), np.array([0.8, 0.0, 1.3])
    U, v = rng.uniform(-1.0, 1.0, (3, 4)), np.array([0.4, -1.1, 0.6])
    cross, third = _cross(a, w, U, v)
    np.testing.assert_allclose(cross, finite_differences(lambda x: _first(x[0], a, U), (w,), 0), rtol=1e-6,
                               atol=1e-8)
    assert abs(cross[1]) > 0.1                    # the derivative the guard's branch used to lose
    np.testing.assert_allclose(third, finite_differences(lambda x: float(np.sum(_cross(x[0], w, U)[0] * v)), (a,), 0),
                               rtol=1e-5, atol=1e-7)


def _first(w, a, U):
    """U . d/da soft_minimum_rows at (a, w), by one tape."""
    a = ad.constant(a)
    with ad.GradientTape() as tape:
        tape.watch(a)
        y = soft_minimum_rows_fn(a, w, 0.7)
    return float(np.sum(tape.gradient(y, a).numpy() * U))


def sqrt_sum(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.sqrt(x[i]) * x[i]
    return s


def test_a_genuine_nan_in_the_gradient_comes_from_the_guarded_adjoint_too():
    """sqrt at -1 is nan in the primal and in both adjoints: the guarded one runs, and gives it."""
    t = transform(sqrt_sum, (numba.float64[::1],), (True,))
    t._adjoint = guarded = Counted(t._adjoint)
    (d_x,) = _gradients(t, (np.array([4.0, -1.0]),))
    assert guarded.calls == 1 and d_x[0] == pytest.approx(3.0) and math.isnan(d_x[1])


def test_no_plain_adjoint_where_it_could_differ_by_more_than_a_nan():
    """A custom VJP's `bwd` may turn a nan into a number, and an adjoint that restores the forward's
    buffers in place may run once per forward: both keep the guarded adjoint alone."""
    for call, x in ((squared_norms, rng.normal(size=(2, 3))),
                    (lambda v: work_filled_by_a_helper(v, np.zeros(4), 3), rng.uniform(-1.0, 1.0, 4))):
        x = ad.constant(x)
        with ad.GradientTape() as tape:
            tape.watch(x)
            call(x)
        (segment,) = [node.op for node in tape._nodes if isinstance(node.op, CompiledSegment)]
        assert segment.transformed._plain_adjoint is None
        with pytest.raises(ValueError, match=r"kind must be one of \['adjoint', 'forward', 'primal'\], got "
                                             r"'plain adjoint'"):
            segment.transformed.source("plain adjoint")


@ad.function
def soft_minima(a, g):
    """Each row's soft minimum -g log(sum_j exp(-a_ij / g)): a vector, for a Jacobian."""
    out = np.empty(a.shape[0])
    for i in range(a.shape[0]):
        s = 0.0
        for j in range(a.shape[1]):
            s += math.exp(-a[i, j] / g)
        out[i] = -g * math.log(s)
    return out


def test_a_jacobian_batch_runs_again_through_the_guarded_adjoint_where_the_plain_one_makes_a_nan():
    """Jacobian rows in reverse mode (3 outputs, 13 inputs): row 2's cotangent meets 0 * inf in the plain
    adjoint's d_g; the batch runs again through the guarded one, as the rows do one at a time."""
    a0 = rng.uniform(0.5, 2.0, (3, 4))
    a0[2, 1] = np.inf
    a, g = ad.constant(a0), ad.constant(0.7)
    with ad.GradientTape(persistent=True) as tape:
        tape.watch([a, g])
        y = soft_minima(a, g)
    batched = [j.numpy() for j in tape.jacobian(y, [a, g])]
    (segment,) = [node.op for node in tape._nodes if isinstance(node.op, CompiledSegment)]
    ran = {key[1] for key in segment.transformed.derived if key[0] == "adjoint rows"}
    assert ran == {True, False}                        # the plain batch, then the guarded one
    looped = [j.numpy() for j in tape.jacobian(y, [a, g], experimental_use_pfor=False)]
    for b, lo in zip(batched, looped):
        assert np.all(np.isfinite(b))
        np.testing.assert_allclose(b, lo, rtol=1e-12)
    assert batched[0][2, 2, 1] == 0.0
    np.testing.assert_allclose(batched[1], finite_differences(lambda v: soft_minima(a0, v[0]).numpy(), (0.7,), 0),
                               rtol=1e-6)


def test_a_nan_is_found_in_every_form_a_gradient_takes():
    from numba.typed import List
    from srcad.compiler.compiled import holds_nan
    nan_row = np.array([1.0, np.nan])
    for value in (float("nan"), np.float32("nan"), nan_row, (1.0, nan_row), [np.zeros(2), (2.0, nan_row)],
                  List([np.zeros(2), nan_row]), np.array(np.nan), complex(0.0, np.nan)):
        assert holds_nan(value)
    for value in (1.0, np.float32(2.0), np.array([1.0, np.inf]), (None, 3, np.zeros((2, 2))), List([np.ones(3)]),
                  np.arange(3)):
        assert not holds_nan(value)


def test_show_source_prints_the_plain_adjoint_and_its_ir_after_a_pass():
    f = ad.function(soft_minimum_rows)
    args = (rng.uniform(0.5, 2.0, (2, 3)), np.ones(2), 0.7)
    text = ad.show_source(f, "plain adjoint", *args)
    assert "def soft_minimum_rows_adjoint_plain(" in text and "cotangent_times" not in text
    assert "soft_minimum_rows_adjoint_plain" in f.source("plain adjoint", after="elementwise")
    with pytest.raises(ValueError, match=r"there is no plain adjoint after the pass 'reverse': it is made by the "
                                         r"pass 'zero_guards', on a target that runs one"):
        f.source("plain adjoint", after="reverse")
