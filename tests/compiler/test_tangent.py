"""The tangent pass (forward mode, `ad/forward.py`): on every corpus and regression kernel the compiled
tangent agrees with central finite differences and with the adjoint (<J t, w> = <t, J^T w>), and over
the gradient function (forward over reverse) it gives Hessian-vector products equal to finite differences
of the gradient."""
import inspect

import numba
import numpy as np
import pytest

import corpus
import test_regressions
from test_plain_adjoint import Counted
from srcad.compiler import transform
from srcad.compiler.derived import gradient_of, tangent_of
from srcad.testing import fresh

RTOL, ATOL = 1e-5, 1e-6


def typed(args):
    return tuple(numba.typeof(a) for a in args)


def bound(fn, args, active):
    """Arguments with defaults filled in, and the active mask to match (as a call binds them)."""
    b = inspect.signature(fn).bind(*args)
    b.apply_defaults()
    return tuple(b.args), tuple(active) + (False,) * (len(b.args) - len(active))


def random_like(values, seed):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.0, 1.0, np.shape(v)).astype(np.asarray(v).dtype) if np.ndim(v) else
            float(rng.uniform(-1.0, 1.0)) for v in values]


def directional_fd(f, values, active, tangents, h=1e-6):
    """(f(x + h t) - f(x - h t)) / 2h, per output, in float64 (float32 values are taken in float64)."""
    def at(sign):
        moved, k = [corpus._upcast(v) for v in fresh(values)], 0
        for i, a in enumerate(active):
            if a:
                v = np.asarray(values[i], np.float64) + sign * h * np.asarray(tangents[k], np.float64)
                moved[i] = float(v) if np.ndim(values[i]) == 0 else v
                k += 1
        out = f(*moved)
        return out if isinstance(out, tuple) else (out,)
    return [None if p is None else (np.asarray(p, np.float64) - np.asarray(m, np.float64)) / (2 * h)
            for p, m in zip(at(1), at(-1))]


def _dot(a, b):
    return float(np.sum(np.asarray(a, np.float64) * np.asarray(b, np.float64)))


def check_tangent(fn, args, active, fd_fn=None):
    args, active = bound(fn, args, active)
    transformed = transform(fn, typed(args), active)
    tangents = random_like([a for a, on in zip(args, active) if on], seed=3)
    outputs, out_tangents = tangent_of(transformed)(*fresh(args), *tangents)
    expected = transformed.primal(*fresh(args))
    expected = expected if isinstance(expected, tuple) else (expected,)
    for got, want in zip(outputs, expected):
        if want is not None:
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg="the tangent's primal outputs")
    f64 = fd_fn if fd_fn is not None else fn
    fd = directional_fd(lambda *a: f64(*a) if fd_fn is None else fd_fn(args, a), args, active, tangents)
    for k, (got, want) in enumerate(zip(out_tangents, fd)):
        if want is not None:
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"tangent of output {k} vs FD")
    # forward and reverse agree: <J t, w> = <t, J^T w>
    ws = random_like([o for o in expected], seed=5)
    values = fresh(args)               # the adjoint gets what the forward leaves (an array it writes into)
    _, saved = transformed.forward(*values)
    grads = transformed.adjoint(*values, saved, tuple(ws) if transformed.returns_tuple else ws[0])
    forward_side = sum(_dot(t, w) for t, w, o in zip(out_tangents, ws, expected) if o is not None)
    reverse_side = sum(_dot(t, g) for t, g in zip(tangents, grads))
    single = any(np.asarray(a).dtype == np.float32 for a in args)        # float32 arithmetic on both sides
    assert forward_side == pytest.approx(reverse_side, rel=1e-5 if single else 1e-8, abs=1e-9)


_CASES = [pytest.param(c, id=c.name) for c in corpus.sweep(corpus.CASES, every=4, start=1)] + \
    [pytest.param(c, id="regression-" + c.name) for c in corpus.sweep(test_regressions.CASES, every=8, start=3)]


@pytest.mark.parametrize("case", _CASES)
def test_tangents_of_every_kernel_match_fd_and_the_adjoint(case):
    args = case.make_args()
    check_tangent(case.fn, args, tuple(k in case.active for k in range(len(args))), case.fd_fn)


def check_hessian_vector_product(fn, args, active):
    """The tangent of the gradient function (forward over reverse) against FD of the gradient."""
    args, active = bound(fn, args, active)
    transformed = transform(fn, typed(args), active)
    out = fn(*fresh(args))
    outs = out if isinstance(out, tuple) else (out,)
    d_outs = random_like(outs, seed=9)
    values = list(args) + d_outs
    active2 = active + (True,) * len(d_outs)
    grad_fn = gradient_of(transformed, typed(values), active2)
    tangents = random_like([v for v, on in zip(values, active2) if on], seed=4)
    grads, grad_tangents = tangent_of(grad_fn)(*fresh(values), *tangents)
    fd = directional_fd(grad_fn.primal, values, active2, tangents)
    for k, (got, want) in enumerate(zip(grad_tangents, fd)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"HVP, gradient {k}")


SECOND_ORDER = ["energy", "loop_range1", "while_bounded", "loop_break", "branch_in_loop", "nested_loops",
                "arr_recurrence_inplace", "arr_slice_write", "arr_matvec", "softmax_xent", "heat_explicit",
                "rk4_lotka_volterra", "helper_in_loop", "arr_overwrite_repeated"]


@pytest.mark.parametrize("name", corpus.sweep(SECOND_ORDER, every=2))
def test_forward_over_reverse_gives_hessian_vector_products(name):
    case = corpus.case_by_name(name)
    args = case.make_args()
    check_hessian_vector_product(case.fn, args, tuple(k in case.active for k in range(len(args))))


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in corpus.sweep(test_regressions.CASES, every=12)
                                  if not c.name.startswith("products_and_moments")])
def test_forward_over_reverse_on_the_regression_kernels(case):
    args = case.make_args()
    check_hessian_vector_product(case.fn, args, tuple(k in case.active for k in range(len(args))))


def test_show_source_shows_the_tangent():
    import srcad as ad
    case = corpus.case_by_name("rk4_lotka_volterra")
    source = ad.show_source(corpus.decorated(case), "tangent", *case.make_args())
    assert "def rk4_lotka_volterra_tangent(" in source and "# from line" in source and "tan_" in source
    with pytest.raises(ValueError, match="takes no `after`"):
        corpus.decorated(case).source("tangent", after="reverse")


def soft_minimum(a, g):
    """-g log(sum_j exp(-a_j / g)): an a_j = inf adds exp(-inf) = 0, whose partial in g is inf."""
    s = 0.0
    for j in range(a.shape[0]):
        s += np.exp(-a[j] / g)
    return -g * np.log(s)


def test_a_zero_partial_after_an_inf_one_gives_a_zero_tangent_as_the_adjoint_gives():
    """The tangent's products are 0 where a factor is 0 (as `cotangent_times` makes the adjoint's): at
    a_1 = inf the tangent in g is the adjoint's, finite, where plain products made a nan. The tangent with
    plain products runs first; the other is compiled only where it made a nan."""
    import srcad as ad
    from srcad.testing import finite_differences
    a, g = np.array([0.5, np.inf, 1.5]), 0.7
    transformed = transform(soft_minimum, typed((a, g)), (False, True))
    tangent = tangent_of(transformed)
    assert "cotangent_times" in tangent.source and tangent._plain is not None
    tangent._dispatcher = guarded = Counted(tangent._dispatcher)
    (_,), (dg,) = tangent(a, g, 1.0)
    assert guarded.calls == 1             # the plain tangent made a nan: the other one ran
    _, saved = transformed.forward(a, g)
    (reverse,) = transformed.adjoint(a, g, saved, 1.0)
    finite = np.isfinite(a)
    want = finite_differences(lambda v: soft_minimum(a[finite], v[0]), (g,), 0)
    np.testing.assert_allclose([dg, reverse], [float(want), float(want)], rtol=1e-7)
    c = ad.constant(g)
    with ad.ForwardAccumulator(c, 1.0) as acc:
        y = ad.function(soft_minimum)(a, c)
    assert float(acc.jvp(y).numpy()) == dg
    check_hessian_vector_product(soft_minimum, (a, g), (False, True))     # forward over reverse there too


def test_the_plain_tangent_alone_runs_where_it_makes_no_nan():
    a, g = np.array([0.5, 2.0, 1.5]), 0.7
    tangent = tangent_of(transform(soft_minimum, typed((a, g)), (False, True)))
    tangent._dispatcher = guarded = Counted(tangent._dispatcher)
    (_,), (dg,) = tangent(a, g, 1.0)
    assert np.isfinite(dg) and guarded.calls == 0
    assert dg == guarded(a, g, 1.0)[1]       # the same bits as the other one's
