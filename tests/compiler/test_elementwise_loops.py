"""Elementwise array statements run as loops over their elements (`opt/elementwise.py`): the code
compiled has the loops; the gradients agree with finite differences at first and second order, and to
rounding with the same functions compiled as NumPy operations (a target whose policy leaves them: bit for
bit but for the loops' exp and tanh, `compiler/vector_math.py`'s, within 3 ulp of NumPy's); a
broadcast the loop cannot take runs the statement as written, error included."""
import dataclasses
import math

import numba
import numpy as np
import pytest
from numba.core import types as nt

import srcad as ad
from srcad.compiler import transform
from srcad.compiler.ad.saving import CPU
from srcad.compiler.backends import base, numba_cpu
from srcad.compiler.ir import Accumulate, Assign, BinOp, Call, Const, For, Function, Name, Slice, Store, Subscript, \
    UnaryOp
from srcad.compiler.ir.facts import Facts, Reverse
from srcad.compiler.ir.printer import function_text
from srcad.compiler.opt.elementwise import loop_elementwise
from srcad.testing import check_function

from test_ir import second_order_check


class CPUWithoutLoops(numba_cpu.NumbaCPU):
    """The CPU target with array expressions left as NumPy operations."""
    name = "cpu-without-loops"
    policy = dataclasses.replace(CPU, name="cpu-without-loops", elementwise_loops=False)


base.register(CPUWithoutLoops())

rng = np.random.default_rng(7)
W, U, H0 = (rng.uniform(-1.0, 1.0, 6) for _ in range(3))
X = rng.uniform(-1.0, 1.0, (5, 3))
M = rng.uniform(-1.0, 1.0, 3)


def recurrent(w, u, h0):
    """Small vectors updated in a loop over time steps, as a recurrent cell written with NumPy."""
    h = h0.copy()
    total = 0.0
    for t in range(5):
        g = np.tanh(h * w + u)
        h = h * 0.5 + g * (1.0 - g)
        total += np.sum(np.exp(-h * h))
    return total


def centred(x, m, s):
    """Rank 2 with a row aligned on the trailing axis, a column broadcast by a new axis, a scalar."""
    total = 0.0
    for r in range(2):
        rows = np.max(x, axis=1)
        z = (x - m) * (s + r) - rows[:, None]
        total += np.sum(np.exp(z) * z)
    return total


def cell_steps(w, h0):
    """A recurrent cell's vectors rebound each step: their adjoints are made again after each use, in
    their own memory where the shape is the same."""
    b = h0.shape[0]
    h = h0.copy()
    c = np.zeros_like(h0)
    for t in range(3):
        gates = np.concatenate((h, h)) * w
        sig = 1.0 / (1.0 + np.exp(-gates[:b]))
        c = c * sig + np.tanh(gates[b:])
        h = sig * np.tanh(c)
    return np.sum(h * h)


def log_sum_exp_rows(x):
    """A maximum per row: its adjoint's mask (`np.equal`, made after typing) is read by a loop."""
    total = 0.0
    for i in range(x.shape[0]):
        m = np.max(x[i])
        total += m + np.log(np.sum(np.exp(x[i] - m)))
    return total


def broadcast_when_run(a, b):
    """`b` of one element: NumPy broadcasts it, which the loop does not; of another length: an error."""
    total = 0.0
    for r in range(2):
        y = np.sin(a * b * (r + 1.0)) + a
        total += np.sum(y * y)
    return total


def once(a, b):
    """Arithmetic run once per call keeps its NumPy form."""
    return np.sum((a * b + 1.0) * a)


def _sources(fn, args):
    t = transform(fn, tuple(numba.typeof(a) for a in args), (True,) * len(args))
    return t.source("forward"), t.source("adjoint"), function_text(t.ir.adjoint)


def test_array_statements_in_loops_are_loops_in_the_code_compiled_only():
    forward, adjoint, kept = _sources(recurrent, (W, U, H0))
    assert "= np.empty((" in forward and "for e" in forward
    assert "for e" in adjoint and "for e" not in kept         # the IR kept, differentiated again, is not rewritten
    forward, adjoint, _ = _sources(once, (W, U))
    assert "for e" not in forward + adjoint


def _gradients(target, fn, args):
    f = ad.function(fn, target=target)
    params = [ad.constant(a) for a in args]
    with ad.GradientTape() as tape:
        tape.watch(params)
        y = f(*params)
    return [y.numpy()] + [g.numpy() for g in tape.gradient(y, params)]


@pytest.mark.parametrize("fn, args", [(recurrent, (W, U, H0)), (centred, (X, M, 0.7)), (cell_steps, (np.concatenate((W, U)), H0)),
                                      (log_sum_exp_rows, (X,))],
                         ids=["recurrent", "centred", "cell_steps", "log_sum_exp_rows"])
def test_gradients_against_finite_differences_and_numpy_operations(fn, args):
    check_function(ad.function(fn), args, tuple(range(len(args))))
    if fn in (recurrent, cell_steps, log_sum_exp_rows):   # the gradient function, compiled again, runs loops too
        second_order_check(fn, args, (True,) * len(args))
    looped, numpy = _gradients("cpu", fn, args), _gradients(CPUWithoutLoops.name, fn, args)
    for a, b in zip(looped, numpy):
        np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-15)   # a loop's exp is `vector_math`'s (1 ulp)


def test_an_adjoint_made_again_in_a_loop_is_zeroed_in_its_memory_and_a_mask_is_read_in_a_loop():
    _, adjoint, _ = _sources(cell_steps, (np.concatenate((W, U)), H0))
    assert "if d_sig.shape == sig.shape:" in adjoint and "d_sig[:] = 0.0" in adjoint, adjoint
    _, adjoint, _ = _sources(log_sum_exp_rows, (X,))
    lines = [line.strip() for line in adjoint.splitlines()]
    counted = [line for line in lines if line.startswith("total") and "== max_of" in line]
    spread = [line for line in lines if "+=" in line and "== max_of" in line and "/ scalar" in line]
    assert counted and spread, adjoint         # the tied extrema counted and the mask compared in loops
    assert all("np.equal(" not in line or line.startswith("d_x") for line in lines), adjoint   # (the fallback)


def test_tied_maxima_share_the_adjoint_as_numpy_operations_do():
    """np.max's adjoint splits equally among tied extrema: with two or three ties per row, the loops give
    what the NumPy operations give, bit for bit, and the closed form (each tie gets 1/count of the row's
    cotangent)."""
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0], [0.5, -1.0, 0.25], [4.0, 1.0, 4.0], [0.0, 0.0, -3.0]])
    looped, numpy = _gradients("cpu", tied_maxima, (x,)), _gradients(CPUWithoutLoops.name, tied_maxima, (x,))
    for a, b in zip(looped, numpy):
        np.testing.assert_array_equal(a, b)
    ties = x == x.max(axis=1, keepdims=True)
    np.testing.assert_allclose(looped[1], 3.0 * ties / ties.sum(axis=1, keepdims=True), rtol=1e-15)


def tied_maxima(x):
    total = 0.0
    for i in range(x.shape[0]):
        total += 3.0 * np.max(x[i])
    return total


def test_a_broadcast_the_loop_cannot_take_runs_as_written():
    forward, _, _ = _sources(broadcast_when_run, (W, W))
    assert "else:" in forward                                    # the statement as written, where shapes differ
    check_function(ad.function(broadcast_when_run), (W, np.array([0.3])), (0, 1))
    with pytest.raises(ValueError, match="broadcast"):
        ad.function(broadcast_when_run)(W, np.ones(4))


def powers(x, y):
    """`x ** y` with x = -inf: the partial in y is `log_or_zero(x) * x ** y`, 0 there in the array form and
    in the scalar form the loop calls."""
    total = 0.0
    for r in range(2):
        total += np.sum(x ** y)
    return total


def test_helpers_with_a_zero_convention_loop_to_the_same_values():
    x, y = np.array([-np.inf, 2.0, 3.0]), np.array([-1.0, 2.0, 0.5])
    looped, numpy = _gradients("cpu", powers, (x, y)), _gradients(CPUWithoutLoops.name, powers, (x, y))
    assert looped[2][0] == 0.0
    for a, b in zip(looped, numpy):
        np.testing.assert_array_equal(a, b)


def _adjoint_with(stmt):
    ty = nt.Array(nt.float64, 1, "C")
    return Function("f", ["d", "v"], [For("i", Const(0), Const(2), Const(1), [stmt])], [Name("d")],
                    types={"d": ty, "v": ty, "i": nt.intp}, facts=Facts(Reverse(saved=[], adjoints={"d"})))


def test_an_array_the_value_reads_at_another_place_is_not_written_by_a_loop():
    shifted = Store("d", (Slice(Const(1)),), BinOp("*", Subscript(Name("d"), (Slice(None, Const(-1)),)), Const(2.0)))
    assert loop_elementwise(_adjoint_with(shifted)).body[0].body == [shifted]
    same_place = Accumulate(Name("d"), BinOp("*", Name("d"), Name("v")))
    fn = loop_elementwise(_adjoint_with(same_place))
    assert "for e in range(d.shape[0]):" in function_text(fn) and "d[e] += d[e] * v[e]" in function_text(fn)


def gate_steps(w, h0):
    """A sigmoid of an argument in a loop: its exp reads a value that stays, so the adjoint computes it
    again rather than keep it (`local.kept_is_cheaper`)."""
    h = h0.copy()
    for t in range(3):
        sig = 1.0 / (1.0 + np.exp(-w))
        h = h * sig + 0.5
    return np.sum(h * h)


def test_temporaries_only_the_next_statement_reads_go_into_its_loop():
    """The adjoint of a sigmoid reads `exp(-w)` twice: `share` binds it (and `-w`) to temporaries, which go
    into the loop of the one statement that reads them, computed once per element there."""
    _, adjoint, _ = _sources(gate_steps, (0.3 * H0, H0))
    check_function(ad.function(gate_steps), (0.3 * H0, H0), (0, 1))
    looped = [line for line in adjoint.splitlines() if "vector_exp(" in line and "[e" in line]
    assert len(looped) == 1 and "exp_here = vector_exp(-" in looped[0], adjoint
    assert "exp_of" not in adjoint and "np.empty((view" not in adjoint, adjoint


def _block_with(stmts, outputs):
    ty = nt.Array(nt.float64, 1, "C")
    return Function("f", ["d", "v"], [For("i", Const(0), Const(2), Const(1), stmts)], outputs,
                    types={"d": ty, "v": ty, "i": nt.intp}, facts=Facts(Reverse(saved=[], adjoints={"d"})))


def _temporary_then_use():
    return [Assign("tmp", Call("np.exp", (UnaryOp("-", Name("v")),))),
            Accumulate(Name("d"), BinOp("*", Name("tmp"), BinOp("+", Name("tmp"), Const(1.0))))]


def test_a_temporary_read_elsewhere_stays_an_array():
    fused = function_text(loop_elementwise(_block_with(_temporary_then_use(), [Name("d")])))
    assert "tmp" not in fused and "exp_here = np.exp(-v[e])" in fused and "d[e] += exp_here * (exp_here + 1.0)" in fused
    kept = function_text(loop_elementwise(_block_with(_temporary_then_use(), [Name("d"), Name("tmp")])))
    assert "tmp[e] = np.exp(-v[e])" in kept and "d[e2] += tmp[e2] * (tmp[e2] + 1.0)" in kept, kept


def tanh_products(a, b):
    """`math.tanh(a[i])` read by the adjoint's statements for both factors of a product: computed once
    for both; `np.tanh(c)` of a vector rebound in the loop: kept, not computed again."""
    total = 0.0
    c = b * 1.0
    for i in range(a.shape[0]):
        total += math.tanh(a[i]) * b[i]
        c = np.tanh(c) * a[: c.shape[0]] + 0.1
    return total + np.sum(c)


def test_a_mathematical_function_two_statements_read_is_computed_once():
    a, b = rng.uniform(-1.0, 1.0, 6), rng.uniform(-1.0, 1.0, 6)
    _, adjoint, _ = _sources(tanh_products, (a, b))
    code = [line for line in adjoint.splitlines() if not line.strip().startswith("#")]
    assert sum("math.tanh(" in line for line in code) == 1, adjoint
    assert not any("tanh(c" in line for line in code) and "tanh_result" in adjoint, adjoint
    check_function(ad.function(tanh_products), (a, b), (0, 1))
    second_order_check(tanh_products, (a, b), (True, True))


def written_after_the_same_value(x, A):
    """Two names bound to the same value (`np.exp(x)`, `np.linalg.inv(A)`), one written afterwards: each
    keeps an array of its own. (Shared as one temporary, the forward under a tape returned 7.71 for 8.82.)"""
    a = np.exp(x)
    b = np.exp(x)
    b[0] = 0.0
    P = np.linalg.inv(A)
    Q = np.linalg.inv(A)
    Q[0, 1] = 0.0
    return np.sum(a) + 2.0 * np.sum(b) + np.sum(P * P) + 3.0 * np.sum(Q)


def written_through_a_view_of_the_same_value(x, A):
    """The same, written through a view: Numba's flips and `.real` give views. (A second order is refused:
    the gradient function reads the value the view writes into.)"""
    d = np.sin(x)
    c = np.sin(x).real
    c[1] = 0.0
    P = np.linalg.inv(A)
    R = np.flipud(np.linalg.inv(A))
    R[0, 0] = 0.0
    return np.sum(c * d) + np.sum(P * P) + 5.0 * np.sum(R)


def written_through_a_flip(A):
    B = np.zeros((3, 3))
    B[:, :] = A
    C = np.flipud(B)
    v = np.linalg.inv(C)
    B[0:1, :] = 5.0
    return np.sum(v) + np.sum(np.linalg.inv(C))


def test_names_bound_to_one_value_and_written_keep_arrays_of_their_own():
    x, A = rng.uniform(-1.0, 1.0, 3), np.eye(3) * 2.0 + rng.uniform(-0.3, 0.3, (3, 3))
    check_function(ad.function(written_after_the_same_value), (x, A), (0, 1))
    second_order_check(written_after_the_same_value, (x, A), (True, True))
    check_function(ad.function(written_through_a_view_of_the_same_value), (x, A), (0, 1))
    with pytest.raises(ad.TransformError, match=r"written_through_a_flip .*`B\[0:1, :\] = 5.0` writes into `B` "
                                                 r"while `C` .*`C = np.flipud\(B\)`.*which shares its memory"):
        transform(written_through_a_flip, (numba.float64[:, ::1],), (True,))


def rows_of_a_copy(w, state, n):
    """Rows of a copy of an argument updated in a loop: the copy's adjoint is stored whole into the
    argument's at the end (`d_state[:, :] = d_s`), which copies its elements and holds no view of it."""
    s = state.copy()
    total = 0.0
    for t in range(n):
        for r in range(s.shape[0]):
            s[r] = np.tanh(s[r] * w[r]) + 0.5 * s[r]
        total += np.sum(s * s)
    return total


def test_an_adjoint_stored_whole_into_an_array_still_gets_loops():
    w, state = rng.uniform(-1.0, 1.0, (3, 4)), rng.uniform(-1.0, 1.0, (3, 4))
    adjoint = ad.show_source(ad.function(rows_of_a_copy), "adjoint", w, state, 2)
    assert "d_state[:, :] = d_s" in adjoint and "d_s[e" in adjoint, adjoint
    assert not [line for line in adjoint.splitlines() if line.strip().startswith("sum_into(d_s[r]")
                and not line.startswith(" " * 16)], adjoint         # only in the fallbacks, inside `else:`
    check_function(ad.function(rows_of_a_copy), (w, state, 2), (0, 1))
    second_order_check(rows_of_a_copy, (w, state, 2), (True, True, False))


def row_sums(x, m, v):
    """Sums along the last axis, the first and a negative one; `x - m[k]` broadcasts a row, whose adjoint
    sums over the rows into `d_m[k]`."""
    total = 0.0
    for k in range(m.shape[0]):
        c = x - m[k]
        r = np.sum(c * c, axis=1)
        total += np.sum(np.exp(-r)) + np.sum(np.sum(c, axis=0) * np.sum(c * v[k], axis=-2))
    return total


def lse_once(z):
    """A log-sum-exp by rows, run once per call: its exp and its sum along the axis become loops."""
    mx = np.max(z, axis=1)
    return np.sum(np.log(np.sum(np.exp(z - mx[:, None]), axis=1)) + mx)


ROWS = (rng.uniform(-1.0, 1.0, (6, 3)), rng.uniform(-1.0, 1.0, (2, 3)), rng.uniform(-1.0, 1.0, (2, 3)))


def test_sums_along_an_axis_are_loops_adding_in_numbas_order():
    forward, adjoint, _ = _sources(row_sums, ROWS)
    code = [line.strip() for line in (forward + adjoint).splitlines()]
    assert any(line.startswith("r[e") and line.endswith("] = " + line.split()[-1]) and "total" in line
               for line in code), forward                   # over the last axis: a scalar sum, stored once
    assert any(line.startswith("t4[e") and "] += c[e" in line for line in code), forward      # axis=0
    assert any(line.startswith("t6[e") and "] += t5[e" in line for line in code), forward     # axis=-2
    assert any(line.startswith("view") and "] -= d_c[e" in line for line in code), adjoint   # into d_m[k]
    check_function(ad.function(row_sums), ROWS, (0, 1, 2))       # at second order: `shifted_rows`
    looped, numpy = _gradients("cpu", row_sums, ROWS), _gradients(CPUWithoutLoops.name, row_sums, ROWS)
    for a, b in zip(looped, numpy):
        np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-15)   # the sums bit for bit; exp within 1 ulp


def test_a_row_broadcast_along_an_axis_of_length_one_runs_as_written():
    """`m[k]` of one column against three: its adjoint sums over both axes, which the loop does not."""
    x, m, v = ROWS[0], ROWS[1][:, :1].copy(), ROWS[2]
    _, adjoint, _ = _sources(row_sums, (x, m, v))
    assert "else:" in adjoint and "sum_into(d_m[k], " in adjoint, adjoint
    check_function(ad.function(row_sums), (x, m, v), (0, 1, 2))
    looped, numpy = _gradients("cpu", row_sums, (x, m, v)), _gradients(CPUWithoutLoops.name, row_sums, (x, m, v))
    for a, b in zip(looped, numpy):
        np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-15)


def test_a_statement_run_once_that_calls_exp_or_sums_along_an_axis_is_a_loop():
    z = rng.uniform(-2.0, 2.0, (4, 5))
    forward, _, _ = _sources(lse_once, (z,))
    assert "vector_exp(" in forward and "np.sum(t" not in forward.split("else:")[0], forward
    check_function(ad.function(lse_once), (z,), (0,))
    second_order_check(lse_once, (z,), (True,))
    looped, numpy = _gradients("cpu", lse_once, (z,)), _gradients(CPUWithoutLoops.name, lse_once, (z,))
    for a, b in zip(looped, numpy):
        np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-15)


def shifted_rows(z, w):
    """`z * w[r] - mx[:, None]`: the adjoint sums the cotangent along the rows into `d_mx[:, None]`; a sum
    along an axis in a loop, at second order."""
    total = 0.0
    for r in range(2):
        mx = np.max(z, axis=1)
        e = np.exp(z * w[r] - mx[:, None])
        total += np.sum(np.sum(e, axis=1) ** 2)
    return total


def test_a_cotangent_summed_into_a_region_with_a_new_axis_is_a_loop():
    z, w = rng.uniform(-1.0, 1.0, (4, 3)), rng.uniform(0.5, 1.5, 2)
    _, adjoint, _ = _sources(shifted_rows, (z, w))
    region = next(line.split(" = ")[0].strip() for line in adjoint.splitlines() if line.endswith("= d_mx[:, None]"))
    assert any(line.strip().startswith(f"{region}[e") and ", 0] -= " in line for line in adjoint.splitlines()), adjoint
    check_function(ad.function(shifted_rows), (z, w), (0, 1))
    second_order_check(shifted_rows, (z, w), (True, True))
    looped, numpy = _gradients("cpu", shifted_rows, (z, w)), _gradients(CPUWithoutLoops.name, shifted_rows, (z, w))
    for a, b in zip(looped, numpy):
        np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-15)


def column_offsets(alpha, q, r):
    """`alpha[k] + np.sum(q[k])` broadcast down a column: the cotangents of both are the sum of the
    column's, summed once for both."""
    m = np.zeros((r.shape[0], alpha.shape[0]))
    for k in range(alpha.shape[0]):
        m[:, k] = alpha[k] + np.sum(q[k]) - 0.5 * r * q[k, 0]
    return np.sum(m * m)


def test_a_sum_of_an_array_two_statements_read_is_computed_once():
    args = (rng.uniform(-1.0, 1.0, 3), rng.uniform(-1.0, 1.0, (3, 2)), rng.uniform(-1.0, 1.0, 4))
    _, adjoint, _ = _sources(column_offsets, args)
    sums = [line.strip() for line in adjoint.splitlines() if "np.sum(d_" in line and not line.strip().startswith("#")]
    assert len(sums) == 1 and sums[0].startswith("sum_of_d_"), adjoint
    check_function(ad.function(column_offsets), args, (0, 1, 2))
    second_order_check(column_offsets, args, (True, True, True))


def column_sums(x, m):
    """A sum over the rows (axis 0) of a value that broadcasts `m[k]` down them: at second order."""
    total = 0.0
    for k in range(m.shape[0]):
        c = x - m[k]
        total += np.sum(np.sum(c * c, axis=0) * m[k])
    return total


def test_sums_over_the_rows_and_into_a_broadcast_row_at_second_order():
    """The adjoint of the sum over the rows fills `d_t` with `d_t2` down the rows, for one statement to
    read: that statement's loop reads `d_t2[None]` instead, and the fill runs only where its check fails."""
    forward, adjoint, _ = _sources(column_sums, ROWS[:2])
    assert any(line.strip().startswith("t2[e") and "] += t[e" in line for line in forward.splitlines()), forward
    assert any(line.strip().startswith("view") and "] -= d_c[e" in line for line in adjoint.splitlines()), adjoint
    lines = adjoint.splitlines()
    view = next(line for line in lines if line.strip().endswith("= d_t2[None]"))
    fill = next(line for line in lines if line.strip() == "d_t[:, :] = np.expand_dims(d_t2, 0)")
    assert len(fill) - len(fill.lstrip()) > len(view) - len(view.lstrip()), adjoint     # in the fallback only
    assert "d_t.shape[0] ==" in adjoint, adjoint
    check_function(ad.function(column_sums), ROWS[:2], (0, 1))
    second_order_check(column_sums, ROWS[:2], (True, True))
    looped, numpy = _gradients("cpu", column_sums, ROWS[:2]), _gradients(CPUWithoutLoops.name, column_sums, ROWS[:2])
    for a, b in zip(looped, numpy):
        np.testing.assert_array_equal(a, b)


def _fill_then(stmts, outputs):
    """A loop of `stmts` in an adjoint whose own arrays are `d`, `f`, `g` (2-d) and `r` (1-d)."""
    two, one = nt.Array(nt.float64, 2, "C"), nt.Array(nt.float64, 1, "C")
    return Function("f", ["d", "f", "g", "r", "q"], [For("i", Const(0), Const(2), Const(1), stmts)], outputs,
                    types={"d": two, "f": two, "g": two, "q": two, "r": one, "i": nt.intp},
                    facts=Facts(Reverse(saved=[], adjoints={"d", "f", "g", "r"})))


FULL = (Slice(), Slice())
FILL = Store("f", FULL, Call("np.expand_dims", (Name("r"), Const(-1))))
READ = Accumulate(Name("d"), BinOp("*", Name("f"), Name("q")))


def test_a_fill_only_the_next_statement_reads_is_read_where_it_was_filled_from():
    """`f[:, :] = np.expand_dims(r, -1)` then `d += f * q`: one loop reading `r[e, None]`-wise, under a check
    that `f` has the loop's shape; a reset of another own array between them moves after the loop; a fill
    another statement reads too stays."""
    fused = function_text(loop_elementwise(_fill_then([FILL, READ], [Name("d")])))
    assert "view = r[:, None]" in fused and "d[e, e2] += view[e, 0] * q[e, e2]" in fused, fused
    assert "(f.shape[0] == d.shape[0]) & (f.shape[1] == d.shape[1])" in fused, fused
    assert fused.index("f[:, :] = np.expand_dims(r, -1)") > fused.index("else:"), fused
    reset = Store("g", FULL, Const(0.0))
    moved = function_text(loop_elementwise(_fill_then([FILL, reset, READ], [Name("d")])))
    assert moved.index("d[e, e2] += view[e, 0]") < moved.rindex("g[:, :] = 0.0"), moved
    read_twice = [FILL, READ, Accumulate(Name("g"), BinOp("*", Name("f"), Const(2.0)))]
    kept = function_text(loop_elementwise(_fill_then(read_twice, [Name("d"), Name("g")])))
    assert kept.splitlines()[2].strip() == "f[:, :] = np.expand_dims(r, -1)" and "view" not in kept, kept
    into_the_fill = [FILL, Accumulate(Subscript(Name("f"), FULL), BinOp("*", Name("q"), Const(2.0)))]
    written = function_text(loop_elementwise(_fill_then(into_the_fill, [Name("d")])))
    assert written.splitlines()[2].strip() == "f[:, :] = np.expand_dims(r, -1)", written
