"""transform() driven directly: primal equals Python, adjoint equals finite differences."""
import math

import numba
import numpy as np
import pytest

from srcad.compiler import transform

import _transform_cases as C

rng = np.random.default_rng(0)
_CACHE = {}


def compiled(fn, args, active):
    key = (fn.__name__, tuple(str(numba.typeof(a)) for a in args), tuple(active))
    if key not in _CACHE:
        _CACHE[key] = transform(fn, tuple(numba.typeof(a) for a in args), tuple(active))
    return _CACHE[key]


def _weights(out):
    """A fixed cotangent for each output, so one scalar checks every output."""
    if isinstance(out, tuple):
        return tuple(_weights(o) * (k + 1) for k, o in enumerate(out))
    if isinstance(out, np.ndarray):
        return np.linspace(0.5, 1.5, out.size).reshape(out.shape).astype(out.dtype)
    return 1.0


def _dot(out, w):
    if isinstance(out, tuple):
        return sum(_dot(o, v) for o, v in zip(out, w))
    return float(np.sum(np.asarray(out, dtype=np.float64) * w))


def _copy(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def finite_differences(fn, args, k, w, eps):
    a = args[k]
    if isinstance(a, np.ndarray):
        grad = np.zeros(a.shape)
        for idx in np.ndindex(a.shape):
            plus, minus = _copy(args), _copy(args)
            plus[k][idx] += eps
            minus[k][idx] -= eps
            grad[idx] = (_dot(fn(*plus), w) - _dot(fn(*minus), w)) / (2 * eps)
        return grad
    plus, minus = _copy(args), _copy(args)
    plus[k] = a + eps
    minus[k] = a - eps
    return (_dot(fn(*plus), w) - _dot(fn(*minus), w)) / (2 * eps)


def check(fn, args, active, rtol=1e-6, atol=1e-8, eps=1e-6):
    t = compiled(fn, args, active)
    expected = fn(*_copy(args))
    got = t.primal(*_copy(args))
    np.testing.assert_allclose(np.asarray(got, dtype=float) if not isinstance(got, tuple) else
                               np.array([np.sum(g) for g in got]),
                               np.asarray(expected, dtype=float) if not isinstance(expected, tuple) else
                               np.array([np.sum(e) for e in expected]), rtol=1e-12, atol=1e-12)
    run_args = _copy(args)
    out, saved = t.forward(*run_args)
    w = _weights(out)
    grads = t.adjoint(*run_args, saved, w)
    again = t.adjoint(*run_args, saved, w)
    active_ks = [k for k, a in enumerate(active) if a]
    assert len(grads) == len(active_ks)
    for g, g2, k in zip(grads, again, active_ks):
        fd = finite_differences(fn, args, k, w, eps)
        if isinstance(args[k], np.ndarray):
            assert g.shape == args[k].shape and g.dtype == args[k].dtype
        np.testing.assert_allclose(g, fd, rtol=rtol, atol=atol, err_msg=f"gradient of argument {k}")
        np.testing.assert_array_equal(g, g2)
    return t


def vec(n, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, n)


CASES = [
    ("straight", C.straight, (0.7, -1.3), (True, True)),
    ("nested_loops", C.nested_loops, (vec(5), 5), (True, False)),
    ("loop_carried", C.loop_carried, (vec(6), 3), (True, False)),
    ("rebind_array", C.rebind_array, (rng.uniform(-0.5, 0.5, (4, 4)), vec(4), vec(4), 3), (True, True, True, False)),
    ("newton_sqrt", C.newton_sqrt, (2.5,), (True,)),
    ("while_data", C.while_data, (0.9,), (True,)),
    ("with_break", C.with_break, (np.array([0.5, 0.3, 0.2, -0.1, 0.7]),), (True,)),
    ("with_break_none", C.with_break, (np.array([0.5, 0.3, 0.2]),), (True,)),
    ("with_continue", C.with_continue, (vec(6),), (True,)),
    ("early_return_first", C.early_return, (1.5, 0.3), (True, True)),
    ("early_return_loop", C.early_return, (0.5, 0.6), (True, True)),
    ("early_return_end", C.early_return, (0.1, 0.01), (True, True)),
    ("branches", C.branches, (np.array([0.9, 0.3, -0.4, 0.7, 0.1, -0.2]),), (True,)),
    ("tuple_return", C.tuple_return, (0.4, 1.7), (True, True)),
    ("helpers", C.helpers, (vec(4), 0.8), (True, True)),
    ("int_args", C.int_args, (vec(5), 7, 3), (True, False, False)),
    ("arrays", C.arrays, (rng.uniform(-1, 1, (3, 4)), vec(4), vec(3)), (True, True, True)),
    ("arrays_partial", C.arrays, (rng.uniform(-1, 1, (3, 4)), vec(4), vec(3)), (False, True, False)),
    ("swap_unpack", C.swap_unpack, (0.6, 1.1), (True, True)),
    ("cond_expr", C.cond_expr, (vec(6),), (True,)),
    ("aug_assign", C.aug_assign, (vec(5, 0.5, 1.5),), (True,)),
    ("slices", C.slices, (vec(5),), (True,)),
    ("energy", C.energy, (vec(6, 0.1, 1.0),), (True,)),
    ("integrator", C.integrator, (np.array([2.0, 0.3]), 0.8, 50), (True, True, False)),
    ("matrix_loops", C.matrix_loops, (rng.uniform(-1, 1, (3, 4)), vec(4)), (True, True)),
]


@pytest.mark.parametrize("name,fn,args,active", CASES, ids=[c[0] for c in CASES])
def test_gradient_matches_finite_differences(name, fn, args, active):
    check(fn, args, active)


def test_float32_stays_float32():
    x = np.linspace(0.1, 1.0, 4).astype(np.float32)
    c = np.float32(0.7)
    t = compiled(C.float32_fn, (x, c), (True, True))
    out, saved = t.forward(x, c)
    gx, gc = t.adjoint(x, c, saved, 1.0)
    assert gx.dtype == np.float32   # (Numba boxes float32 scalars as Python floats)
    assert np.float32(gc) == gc
    x64, c64 = x.astype(np.float64), float(c)
    expected_gx = np.cos(x64 * c64) * c64 * c64
    np.testing.assert_allclose(gx, expected_gx, rtol=1e-5)


def test_stop_gradient_is_identity_with_zero_derivative():
    t = compiled(C.stop_grad, (1.3,), (True,))
    assert t.primal(1.3) == C.stop_grad(1.3)
    out, saved = t.forward(1.3)
    (g,) = t.adjoint(1.3, saved, 1.0)
    assert g == pytest.approx(1.3 * 1.3 + 1.0)


def test_int_argument_gets_no_gradient():
    x = vec(5)
    t = compiled(C.int_args, (x, 7, 3), (True, False, False))
    out, saved = t.forward(x, 7, 3)
    assert len(t.adjoint(x, 7, 3, saved, 1.0)) == 1


def test_active_int_argument_is_a_type_error():
    with pytest.raises(TypeError, match="only float"):
        transform(C.int_args, (numba.float64[:], numba.int64, numba.int64), (True, True, False))


def test_source_has_line_comments_and_no_waste():
    x = np.linspace(0.1, 1.0, 5)
    t = compiled(C.loop_carried, (x, 2), (True, False))
    adjoint = t.source("adjoint")
    assert "# from line" in adjoint and "def loop_carried_adjoint(x, steps, " in adjoint
    assert "# from line 30: h[i] = h[i] * 0.9 + math.tanh(h[i - 1]) * 0.5" in adjoint
    forward = t.source("forward")
    assert "grow(" in forward   # capacity reserved before the loop
    assert "t = i - 1" in adjoint and " t_stack" not in forward   # an index temporary is computed again


def squares_and_products(x, y):
    return np.sum(x * x * y) + np.sum(x * y)


def test_equal_terms_of_an_adjoint_are_counted_not_summed_again():
    """`x * x` gives x's adjoint two equal terms: computed once, doubled (the same number as their sum)."""
    x, y = np.linspace(0.1, 1.0, 4), np.linspace(2.0, 3.0, 4)
    t = compiled(squares_and_products, (x, y), (True, True))
    adjoint = t.source("adjoint")
    assert "2.0 * " in adjoint
    out, saved = t.forward(x, y)
    d_x, d_y = t.adjoint(x, y, saved, 1.0)
    np.testing.assert_allclose(d_x, 2.0 * x * y + y, rtol=1e-15)
    np.testing.assert_allclose(d_y, x * x + x, rtol=1e-15)


def test_outputs_description():
    t = compiled(C.tuple_return, (0.4, 1.7), (True, True))
    assert t.returns_tuple and t.n_outputs == 2
    assert t.primal(0.4, 1.7) == C.tuple_return(0.4, 1.7)


_SECOND_PROCESS = r"""
import sys, time, numba, numpy as np
sys.path[:0] = [{root!r}, {here!r}]
t0 = time.perf_counter()
from srcad.compiler import transform
import _transform_cases as C
x = np.linspace(0.1, 1.0, 5)
t = transform(C.loop_carried, (numba.typeof(x), numba.int64), (True, False))
out, saved = t.forward(x, 3)
g = t.adjoint(x, 3, saved, 1.0)
primal, forward, adjoint = t.dispatchers
hits = sum(v for d in (primal, forward, adjoint) for v in d.stats.cache_hits.values())
misses = sum(v for d in (forward, adjoint) for v in d.stats.cache_misses.values())
print(hits, misses, time.perf_counter() - t0)
"""


def test_second_process_neither_regenerates_nor_recompiles(tmp_path):
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    env = dict(os.environ, SRCAD_CACHE_DIR=str(tmp_path))
    env.pop("NUMBA_OPT", None)          # a user's optimization level: the suite's own leaves code Numba does not cache
    script = _SECOND_PROCESS.format(root=root, here=here)
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    generated = sorted(tmp_path.glob("*.py"))
    stamps = [p.stat().st_mtime_ns for p in generated]
    second = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert [p.stat().st_mtime_ns for p in generated] == stamps, "generated modules were rewritten"
    hits, misses, _ = second.stdout.split()
    assert int(misses) == 0 and int(hits) >= 2, (first.stdout, second.stdout)


def test_design_example_saves_only_r():
    """The design's `energy`: one buffer for r (handed in, reserved before its loop), nothing for
    acc, no copy of x."""
    t = compiled(C.energy, (vec(6, 0.1, 1.0),), (True,))
    forward, adjoint = t.source("forward"), t.source("adjoint")
    assert "acc_stack" not in forward and "np.copy(x)" not in forward
    assert "def energy_forward(x, r_stack):" in forward and "r_stack = grow(" in forward
    assert "d_r = cotangent_times(d_r, math.cos(r))" in adjoint and "d_y[i] += d_r" in adjoint
    assert "d_x[i] += 2.0 * cotangent_times(d_acc, x[i])" in adjoint and "if nonzero:" in adjoint  # where d_acc != 0


def test_straight_line_loop_saves_only_its_state():
    """An integrator step saves x and v once per iteration; its adjoints read only those
    iteration-start values, so the reverse sweep restores them and recomputes nothing (both on one
    stack, opt/merged_stacks.py)."""
    t = compiled(C.integrator, (np.array([2.0, 0.3]), 0.8, 50), (True, True, False))
    forward = t.source("forward")
    assert "def integrator_forward(p, x0, n, saved_float64):" in forward
    adjoint = [line.strip() for line in t.source("adjoint").splitlines()]
    assert "x = saved_float64[saved_float64_top]" in adjoint and "v = saved_float64[saved_float64_top]" in adjoint
    assert not any(line.startswith(("a = ", "x2 = ")) for line in adjoint)


# ---- save rules: flow-sensitive saves, undone counters, re-run iterations ----

def scratch_mixture(means, q, x):
    """GMM-like: per (i, k) the scratch array xc is rewritten, then updated in place
    with an int counter; sq and se are accumulators, mx a running max."""
    n = x.shape[0]
    d = x.shape[1]
    K = means.shape[0]
    xc = np.empty(d)
    mt = np.empty(K)
    total = 0.0
    for i in range(n):
        for k in range(K):
            for j in range(d):
                xc[j] = x[i, j] - means[k, j]
            idx = 0
            for j in range(d):
                xc[j] = xc[j] * q[k, idx]
                idx += 1
            sq = 0.0
            for j in range(d):
                sq += xc[j] * xc[j]
            mt[k] = -0.5 * sq + math.sin(sq)
        mx = mt[0]
        for k in range(1, K):
            if mt[k] > mx:
                mx = mt[k]
        se = 0.0
        for k in range(K):
            se += math.exp(mt[k] - mx)
        total += math.log(se) + mx
    return total


def partial_scratch(x, w):
    """buf[d - 1] is not rewritten per iteration: it carries state, so the iteration
    cannot be re-run from its scalars alone (fallback to saving)."""
    n = x.shape[0]
    d = x.shape[1]
    buf = np.zeros(d)
    total = 0.0
    for i in range(n):
        for j in range(d - 1):
            buf[j] = x[i, j] * w[j]
        s = 0.0
        for j in range(d):
            s += buf[j] * buf[j]
        buf[d - 1] = 0.1 * s + 0.5 * math.sin(buf[d - 1])
        total += math.sin(s)
    return total


def _mixture_args():
    return (rng.uniform(-1, 1, (3, 4)), rng.uniform(0.5, 1.5, (3, 4)), rng.uniform(-1, 1, (5, 4)))


def test_accumulators_and_int_counters_are_not_saved():
    t = check(scratch_mixture, _mixture_args(), (True, True, False))
    forward, adjoint = t.source("forward"), t.source("adjoint")
    for name in ("sq", "idx", "xc"):
        assert f"{name}_stack" not in forward and f"{name}_elems" not in forward, name
    assert "idx -= 1" in adjoint


def test_scratch_array_loop_reruns_each_iteration():
    """The k loop rewrites xc first: the adjoint re-runs each iteration into small stacks
    allocated once. The forward saves no element of xc or mt: the log-sum-exp's exponentials are
    kept instead (the partial of exp is its value), so no adjoint reads mt's old elements."""
    t = check(scratch_mixture, _mixture_args(), (True, True, True))
    forward, adjoint = t.source("forward"), t.source("adjoint")
    assert "xc_elems_it = np.empty(" in adjoint and "xc_elems" not in forward
    assert "mt_elems" not in forward and "exp_result_stack[exp_result_stack_top] = exp_result" in forward
    assert not [line for line in adjoint.splitlines() if "math.exp(" in line and "# from line" not in line]
    # the scratch array is filled again, once, in the reverse sweep
    assert [line.strip() for line in adjoint.splitlines()].count("xc[j] = t") == 1


def squared_norm_mixture(w, x):
    """Per row, a log-sum-exp over components of terms linear in a squared norm (ADBench GMM's shape):
    `sq` is needed for the value only, its adjoint reads `s`."""
    n, d = x.shape
    K = w.shape[0]
    terms = np.zeros(K)
    total = 0.0
    for i in range(n):
        for k in range(K):
            sq = 0.0
            for r in range(d):
                s = w[k, r] * x[i, r]
                sq += s * s
            terms[k] = -0.5 * sq
        big = np.max(terms)
        total += big + math.log(np.sum(np.exp(terms - big)))
    return total


def test_a_sum_only_the_value_needed_is_not_run_again_in_the_adjoint():
    """The adjoint runs each component's iteration again for `s`, but not `sq += s * s`: only its own
    updates read `sq` there (a faint variable, which liveness alone keeps: each iteration reads the last)."""
    t = check(squared_norm_mixture, (rng.standard_normal((3, 4)), rng.standard_normal((6, 4))), (True, False))
    adjoint = [line.strip() for line in t.source("adjoint").splitlines()]
    assert not [line for line in adjoint if line.startswith("sq ")]
    assert any(line.startswith("s = ") for line in adjoint)


def test_partially_rewritten_scratch_falls_back_to_saving():
    x, w = rng.uniform(-1, 1, (6, 3)), rng.uniform(-1, 1, 3)
    t = check(partial_scratch, (x, w), (True, True))
    assert "_it = np.empty(" not in t.source("adjoint")
    assert "buf_elems" in t.source("forward")


# ---- accumulations into a loop-invariant element go through a local ----

def triangle_product(L, v):
    """out[row] += L[row, col] * v[col] over the strict lower triangle: in the reverse
    sweep d_v[col] is the same element for every row."""
    n = v.shape[0]
    out = np.zeros(n)
    for col in range(n):
        for row in range(col + 1, n):
            out[row] += L[row, col] * v[col]
    s = 0.0
    for j in range(n):
        s += math.sin(out[j])
    return s


def shifting_index(v, w):
    """The accumulated element moves inside the loop (j changes): nothing is hoisted."""
    s = 0.0
    j = 0
    for i in range(v.shape[0]):
        s += v[j] * w[i] * w[i]
        j = (j + 1) % v.shape[0]
    return s


def test_loop_invariant_accumulation_is_summed_in_a_local():
    L, v = rng.uniform(-1, 1, (5, 5)), rng.uniform(-1, 1, 5)
    adjoint = check(triangle_product, (L, v), (True, True)).source("adjoint")
    assert "d_v_sum = 0.0" in adjoint and "d_v[col] += d_v_sum" in adjoint
    # the empty inner loop (col = n - 1) adds nothing and never touches d_v
    L1, v1 = rng.uniform(-1, 1, (1, 1)), rng.uniform(-1, 1, 1)
    check(triangle_product, (L1, v1), (True, True))


def test_accumulation_with_a_changing_index_is_left_alone():
    v, w = rng.uniform(-1, 1, 3), rng.uniform(-1, 1, 7)
    adjoint = check(shifting_index, (v, w), (True, True)).source("adjoint")
    assert "_sum = 0.0" not in adjoint


def running_sum_of_sines(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += np.sin(x[i]) * x[i]
    return s


def test_the_same_code_loaded_again_in_a_process_runs_what_was_compiled():
    """A new `ad.function` of the same function (and signature) loads the same generated module: its
    forward and adjoint are the dispatchers compiled for the first, compiled once (the suite compiles
    without optimizations, code Numba's disk cache does not always keep), and give the same gradient."""
    import srcad as ad

    x = np.linspace(0.1, 1.0, 5)
    made = []
    for _ in range(2):
        f = ad.function(running_sum_of_sines)
        v = ad.Variable(x)
        with ad.GradientTape() as tape:
            y = f(v)
        np.testing.assert_allclose(tape.gradient(y, v).numpy(), np.cos(x) * x + np.sin(x), rtol=1e-14)
        made.append([d.dispatcher for d in f._last.dispatchers[1:]])
    assert all(a is b for a, b in zip(*made)), made
    assert all(len(d.overloads) == 1 for d in made[0])


def damped_cosines(x):
    """Compiled only by the test below: its compile is this process's first."""
    total = 0.0
    for i in range(x.shape[0]):
        total += math.cos(x[i]) * math.exp(-0.5 * i)
    return total


def refused_with_try(x):
    try:
        y = x * 2.0
    except ValueError:
        y = 0.0
    return y


def test_the_cycle_collector_rests_while_a_function_compiles_and_runs_after():
    """No collection runs inside the passes or Numba's compiler while a function is transformed and while
    its forward and adjoint compile on their first call (collections after are as usual); the collector
    is on after, a refused function included, and stays off where the caller had turned it off."""
    import gc
    import traceback

    from srcad.compiler.errors import TransformError
    x = np.linspace(0.1, 1.0, 4)
    warm = transform(running_sum_of_sines, (numba.typeof(x),), (True,))      # srcad's own helpers compiled
    warm.adjoint(x, warm.forward(x)[1], 1.0)
    inside = []

    def count(phase, info):
        if phase == "start":
            files = {f.filename.replace("\\", "/") for f in traceback.extract_stack()}
            inside.append(any(f.endswith(("numba/core/compiler.py", "srcad/compiler/pipeline.py")) for f in files))
    gc.callbacks.append(count)
    try:
        t = transform(damped_cosines, (numba.typeof(x),), (True,))
        _, saved = t.forward(x)
        (grad,) = t.adjoint(x, saved, 1.0)
    finally:
        gc.callbacks.remove(count)
    assert not any(inside) and gc.isenabled(), inside
    np.testing.assert_allclose(grad, -np.sin(x) * np.exp(-0.5 * np.arange(4)), rtol=1e-14)
    with pytest.raises(TransformError, match="try/except"):
        transform(refused_with_try, (numba.float64,), (True,))
    assert gc.isenabled()
    gc.disable()
    try:
        transform(damped_cosines, (numba.typeof(x),), (True,))
        assert not gc.isenabled()
    finally:
        gc.enable()
