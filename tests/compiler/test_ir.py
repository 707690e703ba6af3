"""The compiler as IR passes: dumps after any pass, generated code differentiated again (second
derivatives against finite differences), the saving policy and the clean-up seen in the IR."""
import ast
import inspect
import math

import numba
import numpy as np
import pytest

import corpus
import _transform_cases as C
import test_regressions
from srcad.compiler import pipeline
from srcad.compiler.ad.reverse import reverse
from srcad.compiler.ad.vjp import vjp_function
from srcad.compiler.driver import transform_function
from srcad.compiler.ir import Function, Pop, Push, Reserve, While
from srcad.compiler.ir.facts import Activity, Aliasing, Bounds, Lowered, MissingFact, Reverse
from srcad.compiler.ir.visit import walk
from srcad.testing import finite_differences

rng = np.random.default_rng(11)


def typed(args):
    return tuple(numba.typeof(a) for a in args)


def fresh(values):
    return [v.copy() if isinstance(v, np.ndarray) else v for v in values]


# ---- the passes -----------------------------------------------------------------------------------

@pytest.mark.parametrize("until", pipeline.PASS_NAMES)
def test_every_pass_returns_ir_that_prints_as_python(until):
    x = np.linspace(0.1, 0.6, 6)
    program = pipeline.run(corpus.energy, typed((x,)), (True,), until=until)
    assert all(isinstance(f, Function) for f in program.functions())
    text = pipeline.dump(program)
    ast.parse(text)
    assert "# from line" in text
    assert (program.forward is not None) == (pipeline.PASS_NAMES.index(until) >= pipeline.PASS_NAMES.index("reverse"))


def test_unknown_pass_is_refused():
    with pytest.raises(ValueError, match="no pass named 'typing'; the passes are lower, webs"):
        pipeline.run(corpus.energy, typed((np.ones(3),)), (True,), until="typing")


def test_show_source_shows_the_ir_after_any_pass():
    import srcad as ad
    f = ad.function(corpus.energy)
    x = np.linspace(0.1, 0.5, 4)
    f(x)
    assert "check_loop_index(" in ad.show_source(f, "primal", after="bounds")
    before = ad.show_source(f, "adjoint", x, after="reverse")
    after = ad.show_source(f, "adjoint", after="cleanup")
    assert "d_y[:] = 0.0" in before and "d_y[:] = 0.0" not in after      # the clean-up dropped a dead store
    with pytest.raises(ValueError, match="there is no forward after the pass 'activity'"):
        f.source("forward", after="activity")
    with pytest.raises(ValueError, match="no pass named 'optimise'"):
        f.source("forward", after="optimise")


def test_analyses_are_stored_on_the_ir():
    program = pipeline.run(corpus.energy, typed((np.ones(3),)), (True,), until="activity")
    facts = program.primal.facts
    assert facts.of(Activity).active == {"x", "acc", "y", "r"}
    assert facts.of(Aliasing).written_params == []
    assert program.primal.types["acc"] == numba.float64


def test_a_pass_run_without_a_fact_it_needs_raises():
    """Activity is the 'activity' pass's: reverse mode run before it fails naming the pass, not on an
    empty default."""
    program = pipeline.run(corpus.energy, typed((np.ones(3),)), (True,), until="aliasing")
    with pytest.raises(MissingFact, match=r"the Activity facts of this function are missing: the 'activity' pass"):
        reverse(program.primal)


def test_a_pass_that_changes_the_ir_drops_the_facts_it_does_not_keep():
    """`inplace` rewrites the primal: what `lower` and `bounds` found stays, anything else is dropped; a
    copy of a function has facts of its own."""
    program = pipeline.run(corpus.energy, typed((np.ones(3),)), (True,), until="types")
    primal = program.primal
    primal.facts.put(Activity({"x"}, {"x"}, {"x"}, ["x"]))
    copied = pipeline.copy_function(primal)
    pipeline.run_passes(program, ["inplace"])
    assert primal.facts.has(Lowered) and primal.facts.has(Bounds) and not primal.facts.has(Activity)
    copied.facts.of(Activity).active.add("y")
    assert copied.facts.of(Activity).active == {"x", "y"}
    with pytest.raises(MissingFact, match="'activity' pass"):
        primal.facts.of(Activity)


def test_comments_name_the_line_after_a_loop_with_break():
    def after_break(x):
        s = 0.0
        while s < 10.0:
            s = s * 2.0 + x
            if s > 5.0:
                break
        t = s * 3.0
        return t
    forward = pipeline.run(after_break, (numba.float64,), (True,)).forward
    text = pipeline.function_text(forward)
    lines = text.splitlines()
    k = next(i for i, line in enumerate(lines) if line.strip() == "t = s * 3.0")
    assert lines[k - 1].strip().endswith("t = s * 3.0") and "# from line" in lines[k - 1]


# ---- the saving policy and the clean-up -----------------------------------------------------------

def test_design_example_keeps_one_buffer_and_reads_nothing_else():
    program = pipeline.run(corpus.energy, typed((np.ones(4),)), (True,), until="cleanup")
    forward = program.forward
    assert list(forward.stacks) == ["r_stack"] and forward.workspace == ["r_stack"]
    assert forward.facts.of(Reverse).saved == ["y", "r_stack", "r_stack_top"]
    pushes = [s for s in walk(forward.body) if isinstance(s, Push)]
    assert [(p.stack, p.value.id) for p in pushes] == [("r_stack", "r")]


def test_integrator_is_checkpointed_per_step_and_saves_no_intermediate():
    args = corpus.case_by_name("rk4_lotka_volterra").make_args()
    program = pipeline.run(corpus.rk4_lotka_volterra, typed(args), (True, True, True, False, False),
                           until="cleanup")
    forward, adjoint = program.forward, program.adjoint
    assert sorted(forward.stacks) == ["x_stack", "y_stack"]
    assert len(forward.facts.of(Reverse).saved) <= 10
    text = pipeline.function_text(adjoint)
    assert "k1x = a * x - b * x * y" in text                    # the stages computed again
    assert "= 0.0" not in text.split("for i in")[1]               # no adjoint zeroed then added to


def test_gmm_saves_nothing_of_its_scratch_arrays():
    """ADBench GMM: the loop over components runs again in the reverse sweep, and its scratch arrays
    (xc, qx: rewritten at the top of each iteration) are recomputed there, never saved: neither the
    forward nor the re-run has a stack for them."""
    import os
    import adbench_models as M
    a = M.gmm_args(M.read_gmm(os.path.join(M.DATA_DIR, "gmm/1k/gmm_d2_K5.txt")))
    program = pipeline.run(M.gmm_objective, typed(a), (True, True, True, False, False, False), until="cleanup")
    stacks = set(program.forward.stacks) | set(program.adjoint.stacks)
    assert not any(s.startswith(("xc_", "qx_")) for s in stacks), sorted(stacks)
    assert "qx[j] = qdiag[k, j] * xc[j]" in pipeline.function_text(program.adjoint)    # recomputed


def test_saves_outside_loops_go_to_locals_and_while_loops_grow_their_stacks():
    def once_then_while(x):
        y = x * 2.0
        z = y * y
        if x > 0.0:
            y = math.sin(z) + y      # y's old value is what z's adjoint reads: kept in a local
        n = 0
        while y < 3.0:
            y = y * 1.5 + 0.1
            n += 1
        return y * n
    program = pipeline.run(once_then_while, (numba.float64,), (True,), until="cleanup")
    forward = program.forward
    assert any(s.endswith("_saved") for s in forward.facts.of(Reverse).saved)
    loop = next(s for s in forward.body if isinstance(s, While))
    assert {s.stack for s in loop.body if isinstance(s, Reserve)} == set(forward.stacks)   # room each iteration
    text = pipeline.function_text(pipeline.run(once_then_while, (numba.float64,), (True,)).forward)
    assert "grow(" in text.split("while more:")[1]


def test_index_temporaries_are_computed_again_not_saved():
    program = pipeline.run(C.loop_carried, typed((np.ones(5), 2)), (True, False), until="cleanup")
    assert not any(name.startswith("t_") for name in program.forward.stacks)
    assert "t = i - 1" in pipeline.function_text(program.adjoint)


def test_an_update_in_place_leaves_no_round_trip_in_the_adjoint():
    """`y[i] += e` is `t = y[i] + e; y[i] = t`, whose adjoint takes `d_y[i]` out, zeroes it and adds it
    back: the clean-up keeps the taking out only, and the gradient is unchanged."""
    import srcad as ad
    from srcad.testing import check_function

    def updated_in_place(x, w):
        y = np.zeros_like(x)
        for i in range(x.shape[0]):
            y[i] += w * x[i] * x[i]
        return np.sum(y * y)
    before = pipeline.function_text(pipeline.run(updated_in_place, typed((np.ones(3), 0.5)), (True, True),
                                                 until="reverse").adjoint)
    after = pipeline.function_text(pipeline.run(updated_in_place, typed((np.ones(3), 0.5)), (True, True),
                                                until="cleanup").adjoint)
    assert "d_y[i] = 0.0" in before and "d_y[i] = 0.0" not in after and "d_y[i] +=" not in after
    check_function(ad.function(updated_in_place), (np.array([0.3, -0.8, 1.2]), 0.7), (0, 1))


def test_forward_buffers_are_reused_once_their_gradient_is_gone():
    import srcad as ad
    f = ad.function(corpus.energy)
    x = ad.Variable(np.linspace(0.1, 0.6, 50))
    ids = []
    for _ in range(3):
        with ad.GradientTape() as tape:
            y = f(x)
        tape.gradient(y, x)
        node_saved = f._last._pool[-1][0] if f._last._pool else None
        ids.append(id(node_saved))
        del tape, y
    assert ids[1] == ids[2] and ids[1] != id(None)


# ---- generated code differentiated again ------------------------------------------------------------

def second_order_check(fn, args, active):
    """The gradient function of `fn` (forward and adjoint IR as one function) transformed again:
    its own gradient (a Hessian-vector product of `fn`) against finite differences of it. Arguments left
    out take their default values, as in a call."""
    bound = inspect.signature(fn).bind(*args)
    bound.apply_defaults()
    args, active = tuple(bound.args), tuple(active) + (False,) * (len(bound.args) - len(args))
    program = pipeline.run(fn, typed(args), active, until="accumulate")
    grad_fn = vjp_function(program.forward, program.adjoint)
    out = fn(*fresh(args))
    outs = out if isinstance(out, tuple) else (out,)
    d_outs = [rng.uniform(0.5, 1.5, np.shape(o)) if np.ndim(o) else float(rng.uniform(0.5, 1.5)) for o in outs]
    values = list(args) + d_outs
    second = transform_function(grad_fn, typed(args) + typed(d_outs), tuple(active) + (True,) * len(d_outs))
    # the gradients through the compiled forward (its outputs are the primal's), not through second.primal:
    # that would compile a third function that shows nothing the forward does not
    grads = second.forward(*fresh(values))[0]
    ws = [rng.uniform(0.5, 1.5, np.shape(g)) if np.ndim(g) else float(rng.uniform(0.5, 1.5)) for g in grads]

    def phi(a):
        return sum(float(np.sum(w * g)) for w, g in zip(ws, second.forward(*fresh(a))[0]))
    _, saved = second.forward(*fresh(values))
    dd = second.adjoint(*fresh(values), saved, tuple(ws))
    k = 0
    for i, a in enumerate(tuple(active) + (True,) * len(d_outs)):
        if a:
            np.testing.assert_allclose(dd[k], finite_differences(phi, tuple(values), i), rtol=1e-5, atol=1e-6,
                                       err_msg=f"second derivative, argument {i}")
            k += 1
    return second


SECOND_ORDER = ["energy", "loop_range1", "while_bounded", "loop_break", "branch_in_loop", "nested_loops",
                "arr_recurrence_inplace", "arr_slice_write", "arr_matvec", "softmax_xent", "heat_explicit",
                "rk4_lotka_volterra", "helper_in_loop", "arr_overwrite_repeated"]


@pytest.mark.parametrize("name", corpus.sweep(SECOND_ORDER, every=2, start=1))
def test_generated_code_is_differentiated_again(name):
    case = corpus.case_by_name(name)
    args = case.make_args()
    second_order_check(case.fn, args, tuple(k in case.active for k in range(len(args))))


# The regression cases of issue 8 differentiated twice: adjoint buffers whose shape changes between
# iterations, rows written in place through a view, buffers rotated by rebinding, scatters and gathers.
_REGRESSIONS = [pytest.param(c, id=c.name) for c in corpus.sweep(test_regressions.CASES, every=6, start=1)
                if not c.name.startswith("products_and_moments")]


@pytest.mark.parametrize("case", _REGRESSIONS)
def test_regression_cases_are_differentiated_again(case):
    args = case.make_args()
    second_order_check(case.fn, args, tuple(k in case.active for k in range(len(args))))


def test_a_zero_partial_after_an_inf_one_adds_nothing_at_second_order_too():
    """Heston's full truncation `sqrt(max(v, 0))` with v < 0 (not in the sweep's sample): the slope of
    `cotangent_times` in each factor is 0 where the other is 0, so the second derivative has no nan either."""
    case = next(c for c in test_regressions.CASES if c.name == "full_truncation_variance")
    args = case.make_args()
    second_order_check(case.fn, args, tuple(k in case.active for k in range(len(args))))


def test_a_float32_scalar_gradient_is_differentiated_again():
    """The gradient of a float32 scalar is returned in its dtype (a cast bound to a name): at second order
    its cotangent is seeded like any other. f(x) = a x^2: d/dx (w f'(x) g) = 2 a w g, d/dg = 2 a x w."""
    def scaled_square(x, a):
        return a * x * x
    program = pipeline.run(scaled_square, (numba.float32, numba.float64), (True, False), until="accumulate")
    grad_fn = vjp_function(program.forward, program.adjoint)
    second = transform_function(grad_fn, (numba.float32, numba.float64, numba.float64), (True, False, True))
    x, a, g, w = np.float32(0.7), 1.5, 0.8, 1.25
    (gx,) = second.primal(x, a, g)
    assert gx == pytest.approx(2 * a * x * g, rel=1e-6)
    _, saved = second.forward(x, a, g)
    dx, dg = second.adjoint(x, a, g, saved, (w,))
    assert dx == pytest.approx(2 * a * w * g, rel=1e-6) and dg == pytest.approx(2 * a * float(x) * w, rel=1e-6)


def test_second_derivatives_of_prod_with_a_zero_entry():
    x, A = np.array([0.7, 0.0, 1.3]), rng.uniform(0.5, 1.5, (2, 3))
    second_order_check(test_regressions.R.products_and_moments, (x, A), (True, True))


def elementwise_rules(x, y):
    """Every elementwise rule of the compiled table, at second order."""
    s = np.sum(np.sin(x) + np.cos(x) + np.tan(x) + np.exp(x) + np.expm1(x) + np.exp2(x) + np.log(x) + np.log1p(x))
    s += np.sum(np.log2(x) + np.log10(x) + np.sqrt(x) + np.cbrt(x) + np.tanh(x) + np.sinh(x) + np.cosh(x))
    s += np.sum(np.arcsin(x) + np.arccos(x) + np.arctan(x) + np.arcsinh(x) + np.arccosh(x + 1.5) + np.arctanh(x))
    s += np.sum(np.abs(x - 0.5) + np.square(x) + np.reciprocal(x) + np.deg2rad(x) + np.rad2deg(x) * 0.01)
    s += np.sum(x ** y + np.power(y, x) + np.arctan2(x, y) + np.hypot(x, y) + np.logaddexp(x, y))
    s += np.sum(np.logaddexp2(x, y) + np.maximum(x, y) * np.minimum(x, y) + x / y + x % 0.3)
    for i in range(x.shape[0]):
        s += math.erf(x[i]) * math.erfc(y[i]) + math.atan2(y[i], x[i]) + max(x[i], y[i]) ** 2
    return s


def test_every_elementwise_rule_at_second_order():
    x = np.array([0.21, 0.37, 0.52, 0.69])
    y = np.array([0.93, 0.58, 0.77, 0.41])
    second_order_check(elementwise_rules, (x, y), (True, True))


def array_rules(a, b, v):
    c = a @ b
    d = np.dot(np.transpose(a), c) @ np.transpose(b) + np.outer(v, v)
    return np.sum(c * c) + np.mean(np.tanh(d)) + np.sum(np.sum(d, axis=0) ** 2) + np.max(v) * np.linalg.norm(v)


def test_array_rules_at_second_order():
    a, b, v = rng.uniform(-1, 1, (3, 4)), rng.uniform(-1, 1, (4, 2)), np.array([0.3, -0.2, 0.9, 0.1])
    second_order_check(array_rules, (a, b, v), (True, True, True))


def filled_and_tiled(x, m, a, b):
    """np.tile (supplied by srcad's runtime: Numba has none), np.full, np.full_like, np.linspace."""
    t = np.tile(x, 3)
    u = np.tile(m, (2, 3))
    w = np.linspace(a, b, x.shape[0]) * np.full(x.shape[0], a * b) + np.full_like(x, b)
    return np.sum(t * t * np.tile(x, (2, 1))[1, 0]) + np.sum(np.sin(u) * u) + np.sum(w * x * x)


def test_fill_and_tile_rules_at_second_order():
    x, m = np.array([0.3, -0.7, 1.1]), rng.uniform(-1, 1, (2, 2))
    second_order_check(filled_and_tiled, (x, m, 0.4, 1.3), (True, True, True, True))


def reshaped_and_joined(x, A):
    """reshape / ravel / cumsum / var / std / trace / diag / concatenate / stack / sort / mean along an axis."""
    m = x.reshape(2, 3)
    s = np.sum(np.cumsum(x) * x) + np.var(x) + np.std(A) + np.trace(A @ A) + np.sum(np.diag(A) ** 3)
    s += np.sum(np.diag(x[:3]) * A) + np.sum(np.ravel(A.T) * np.arange(9.0))
    s += np.sum(np.concatenate((x, np.sin(x[:2]))) ** 2) + np.sum(np.stack((x[:3], A[0]), axis=1) * A[:, :2])
    s += np.sum(np.sort(x) * np.arange(6.0)) + np.sum(np.mean(m, axis=0) ** 2) + np.sum(np.mean(A, axis=-1) * x[:3])
    return s


def test_shape_and_join_rules_at_second_order():
    x = np.array([0.3, -0.7, 1.1, 0.45, -0.2, 0.8])
    A = rng.uniform(-1, 1, (3, 3))
    second_order_check(reshaped_and_joined, (x, A), (True, True))


def test_stacks_have_rules_of_their_own():
    """The gradient function pushes in its first half and pops in its second: its own reverse sweep
    pops the adjoints of what was pushed (Push's rule) and pushes those of what was popped (Pop's)."""
    args = corpus.case_by_name("energy").make_args()
    program = pipeline.run(corpus.energy, typed(args), (True,), until="accumulate")
    grad_fn = vjp_function(program.forward, program.adjoint)
    assert any(isinstance(s, Push) for s in walk(grad_fn.body)) and any(isinstance(s, Pop) for s in walk(grad_fn.body))
    second = second_order_check(corpus.energy, args, (True,))
    adjoint = second.source("adjoint")
    assert "d_r_stack" in adjoint
