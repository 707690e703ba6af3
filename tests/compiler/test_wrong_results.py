"""The wrong results of issue 17, each against plain Python and finite differences (or a closed form),
at first and second order: arguments swapped by a tuple assignment, a work array filled through a
helper that the gradient reset, np.array of a differentiable scalar, np.expand_dims with the axis by
keyword, and 0 * inf sent back from a term that is zero in the primal (soft-DTW)."""
import numpy as np
import pytest

import _regression_cases as R
import srcad as ad
import corpus
from corpus import Case, check_case
from srcad.testing import finite_differences
from test_ir import second_order_check

rng = np.random.default_rng(17)

AUTOCORRELATION = np.array([2.0, 0.9, 0.4, 0.1, -0.05])


def A(*args):
    return lambda: tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)


def with_inf(v, k):
    v = v.copy()
    v[k] = np.inf
    return v


CASES = [
    Case(R.levinson, A(AUTOCORRELATION, np.zeros(5), np.full(5, 7.0))),
    Case(R.levinson_own_buffers, A(AUTOCORRELATION, 4)),
    Case(R.three_buffers_rotated, A(rng.uniform(0.2, 0.9, 4), 5)),
    Case(R.scalars_swapped, A(0.9, 1.1, 3), active=(0, 1)),
    Case(R.swap_in_a_helper, A(rng.uniform(0.2, 0.9, 3))),
    Case(R.workspace_filled_by_a_helper, A(rng.uniform(-1, 1, 3), rng.uniform(-1, 1, 3), 3)),
    Case(R.euler_to_quaternion, A(np.array([0.3, 1.1, -0.7]))),
    Case(R.arrays_of_scalars, A(rng.uniform(0.2, 0.9, 3))),
    Case(R.expanded_dims, A(rng.uniform(-1, 1, 3), rng.uniform(-1, 1, (2, 3))), active=(0, 1)),
    Case(R.soft_dtw, A(rng.uniform(0.1, 1.0, (4, 5)), 0.7), active=(0, 1)),
    Case(R.soft_minimum_of_a_vector, A(with_inf(rng.uniform(0.2, 1.0, 4), 2), 0.6), active=(1,)),
    Case(R.soft_minimum_of_a_vector, A(rng.uniform(0.2, 1.0, 4), 0.6), active=(0, 1), name="soft_minimum_finite"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_gradient_matches_finite_differences(case):
    check_case(case)


@pytest.mark.parametrize("case", corpus.sweep(CASES, every=2), ids=[c.name for c in corpus.sweep(CASES, every=2)])
def test_differentiated_again(case):
    args = case.make_args()
    second_order_check(case.fn, args, tuple(k in case.active for k in range(len(args))))


# ---- the caller's arrays after the call and after the gradient ----------------------------------

def _copies(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def assert_callers_arrays_as_in_python(fn, args, active):
    """The plain compiled call, the call under a tape and the gradient after it leave every array
    argument as the Python function leaves it, and return its result."""
    f = ad.function(fn)
    python = _copies(args)
    expected = fn(*python)
    plain = _copies(args)
    np.testing.assert_allclose(f(*plain).numpy(), expected, rtol=1e-12)
    taped = _copies(args)
    watched = [ad.constant(taped[i]) if i in active else taped[i] for i in range(len(args))]
    with ad.GradientTape() as tape:
        for i in active:
            tape.watch(watched[i])
        out = f(*watched)
    after_call = _copies(taped)
    grads = tape.gradient(out, [watched[i] for i in active])
    for k, (want, got, got_then) in enumerate(zip(python, plain, after_call)):
        if isinstance(want, np.ndarray):
            np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=f"argument {k} after the plain call")
            np.testing.assert_allclose(got_then, want, rtol=1e-12, err_msg=f"argument {k} after the taped call")
            np.testing.assert_allclose(taped[k], want, rtol=1e-12, err_msg=f"argument {k} after tape.gradient")
    return out, grads


def test_swapped_argument_buffers_give_pythons_result_and_arrays():
    """`a, tmp = tmp, a` on two arguments once bound both names to one array: the plain call computed
    another result and wrote into the wrong caller array."""
    f = ad.function(R.levinson)
    for p in (1, 2, 3, 4):
        a, tmp = np.zeros(p + 1), np.full(p + 1, 7.0)
        a_py, tmp_py = a.copy(), tmp.copy()
        expected = R.levinson(AUTOCORRELATION, a_py, tmp_py)
        assert float(f(AUTOCORRELATION, a, tmp).numpy()) == pytest.approx(expected, rel=1e-12)
        np.testing.assert_allclose(a, a_py, rtol=1e-12)
        np.testing.assert_allclose(tmp, tmp_py, rtol=1e-12)


def test_swapped_argument_buffers_under_a_tape_are_written_as_in_python():
    """Rotated among themselves, the caller's buffers are apart at every step (the call refuses
    arguments sharing memory with one written into): differentiated, and left as Python leaves them."""
    a, tmp = np.zeros(5), np.full(5, 7.0)
    out, (g,) = assert_callers_arrays_as_in_python(R.levinson, (AUTOCORRELATION, a, tmp), (0,))
    fd = finite_differences(lambda r: R.levinson(r[0], np.zeros(5), np.zeros(5)), (AUTOCORRELATION,), 0)
    np.testing.assert_allclose(g.numpy(), fd, rtol=1e-6, atol=1e-9)


def test_workspace_filled_by_a_helper_keeps_its_values_after_the_gradient():
    """The adjoint restores the work array (rebound, so shared) in place: it restored the caller's,
    which the gradient left as before the call (zeros for a fresh workspace)."""
    x, ca = rng.uniform(-1, 1, 4), np.zeros(4)
    out, (g,) = assert_callers_arrays_as_in_python(R.workspace_filled_by_a_helper, (x, ca, 3), (0,))
    fd = finite_differences(lambda a: R.workspace_filled_by_a_helper(a[0], np.zeros(4), 3), (x,), 0)
    np.testing.assert_allclose(g.numpy(), fd, rtol=1e-6, atol=1e-9)


def test_work_arrays_swapped_in_a_loop_keep_pythons_values():
    """Arguments rotated as buffers of a time stepper the function fills itself."""
    def stepper(x, u, v, n):
        for k in range(n):
            for i in range(x.shape[0]):
                v[i] = 0.5 * u[i] + x[i] * v[i]
            u, v = v, u
        return np.sum(u * u)
    x = rng.uniform(0.2, 0.9, 3)
    args = (x, np.zeros(3), np.ones(3), 3)
    expected = stepper(*_copies(args))
    f = ad.function(stepper)
    u, v = np.zeros(3), np.ones(3)
    assert float(f(x, u, v, 3).numpy()) == pytest.approx(expected, rel=1e-12)
    u_py, v_py = np.zeros(3), np.ones(3)
    stepper(x, u_py, v_py, 3)
    np.testing.assert_allclose(u, u_py, rtol=1e-12)
    np.testing.assert_allclose(v, v_py, rtol=1e-12)


# ---- np.array of a scalar, np.expand_dims ---------------------------------------------------------

def test_array_of_a_scalar_carries_its_gradient():
    """np.array(e) and np.array(e, dtype=np.float64) once gave a zero gradient (the result was taken
    for a value no derivative flows through)."""
    angles = np.array([0.3, 1.1, -0.7])
    f = ad.function(R.euler_to_quaternion)
    x = ad.constant(angles)
    with ad.GradientTape() as tape:
        tape.watch(x)
        q = f(x)
    jac = np.stack([finite_differences(lambda a: R.euler_to_quaternion(a[0])[k], (angles,), 0) for k in range(4)])
    grad = tape.gradient(q, x, output_gradients=ad.constant(np.ones(4))).numpy()
    np.testing.assert_allclose(grad, jac.sum(axis=0), rtol=1e-6, atol=1e-9)
    assert np.all(np.abs(grad) > 1e-3)


@pytest.mark.parametrize("axis", [0, 1, -1, (0, 2), (-1, 0)])
def test_expand_dims_on_the_eager_tape(axis):
    v = rng.uniform(-1, 1, 3)
    x = ad.constant(v)
    with ad.GradientTape() as tape:
        tape.watch(x)
        y = np.expand_dims(x, axis=axis)
        s = np.sum(y * y * np.arange(1.0, 4.0).reshape(np.expand_dims(v, axis).shape))
    np.testing.assert_allclose(tape.gradient(s, x).numpy(), 2.0 * v * np.arange(1.0, 4.0), rtol=1e-12)


def test_expand_dims_by_keyword_under_a_tape():
    """`np.expand_dims(v, axis=0)` raised IndexError from inside srcad (the rule read the axis by position)."""
    v, M = rng.uniform(-1, 1, 3), rng.uniform(-1, 1, (2, 3))
    f = ad.function(R.expanded_dims)
    x = ad.constant(v)
    with ad.GradientTape() as tape:
        tape.watch(x)
        out = f(x, M)
    fd = finite_differences(lambda a: R.expanded_dims(a[0], M), (v,), 0)
    np.testing.assert_allclose(tape.gradient(out, x).numpy(), fd, rtol=1e-6, atol=1e-9)


# ---- a cotangent that is exactly zero contributes nothing -----------------------------------------

def soft_minimum_with_inf(gamma):
    v = np.array([0.3, np.inf, 0.8])
    return R.soft_minimum_of_a_vector(v, gamma)


def test_soft_dtw_gradient_in_the_bandwidth_is_finite():
    D = rng.uniform(0.1, 1.0, (4, 5))
    f = ad.function(R.soft_dtw)
    g = ad.constant(0.7)
    with ad.GradientTape() as tape:
        tape.watch(g)
        out = f(D, g)
    got = float(tape.gradient(out, g).numpy())
    assert np.isfinite(got)
    assert got == pytest.approx(float(finite_differences(lambda a: R.soft_dtw(D, a[0]), (0.7,), 0)), rel=1e-6)


def sqrt_times(u, w):
    return np.sqrt(u) * w + u


def sqrt_times_arrays(u, w):
    return np.sum(np.sqrt(u) * w + u)


@pytest.mark.parametrize("fn, u, w", [(sqrt_times, 0.0, 0.0), (sqrt_times_arrays, np.array([0.0, 4.0]),
                                                                 np.array([0.0, 3.0]))], ids=["scalar", "array"])
def test_zero_cotangent_times_an_infinite_partial_is_zero(fn, u, w):
    """d/du (sqrt(u) w + u) at u = 0, w = 0: the cotangent reaching sqrt(u) is w = 0 and the partial
    1 / (2 sqrt(u)) is inf; the term contributes nothing, not nan (closed form: 1 + w / (2 sqrt(u))
    where u > 0, 1 where w = 0). Not specific to exp: any partial."""
    f = ad.function(fn)
    uu, ww = ad.constant(u), ad.constant(w)
    with ad.GradientTape() as tape:
        tape.watch([uu, ww])
        out = f(uu, ww)
    du, dw = (g.numpy() for g in tape.gradient(out, [uu, ww]))
    u, w = np.asarray(u), np.asarray(w)
    expected = 1.0 + np.where(w == 0, 0.0, w / (2.0 * np.sqrt(np.where(u > 0, u, 1.0))))
    np.testing.assert_allclose(du, expected, rtol=1e-12)
    np.testing.assert_allclose(dw, np.sqrt(u), rtol=1e-12)


def test_products_by_partials_skip_a_zero_cotangent():
    """The zero-cotangent rule in scalar code: a statement's adjoint runs only where its cotangent is not 0
    (one test), and each product along a path, from the cotangent on, goes through `cotangent_times` (0
    where either factor is 0: `w` is the cotangent reaching `sqrt(u)`, and a partial that is 0 after an inf
    one adds nothing); so does each product of a cotangent by a partial in array code."""
    text = ad.show_source(ad.function(sqrt_times), "adjoint", 0.5, 0.7)
    # (sqrt(u) is named, `sqrt_result`, and its partial taken from it: `ad/results.py`)
    assert "nonzero2 = d_t != 0.0" in text and "d_sqrt_result = cotangent_times(d_t, w)" in text
    assert "nonzero = d_sqrt_result != 0.0" in text and "cotangent_times(d_sqrt_result, 0.5 / sqrt_result)" in text
    assert "d_w = cotangent_times(d_t, sqrt_result)" in text and "math.isfinite(" not in text
    text = ad.show_source(ad.function(sqrt_times_arrays), "adjoint", np.array([0.5]), np.array([0.7]))
    assert "cotangent_times(d_t, w)" in text or "cotangent_times(d_t2, w)" in text, text
