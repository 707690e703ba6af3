"""Partials taken from results the forward computed (`rules.FROM_RESULT`, `ad/results.py`), and index
temporaries computed again from an outer loop's (`saving._find_replays`): the adjoint calls no
transcendental function the primal already called, saves no integer it can recompute, and its
derivatives, first and second, are those of the function."""
import math
import re

import numba
import numpy as np
import pytest

import srcad as ad
from srcad.compiler import pipeline
from srcad.compiler.ir.printer import function_text
from srcad.testing import check_function, check_grads, finite_differences
from test_ir import second_order_check

rng = np.random.default_rng(11)


def gated_cells(w, x):
    """An LSTM-like cell per element: sigmoids written out, tanh inside products, a square root, and the
    rows of `w` picked by a temporary of the outer loop (`row + 1`)."""
    h = x.copy()
    total = 0.0
    for layer in range(w.shape[0] // 2):
        row = 2 * layer
        for i in range(h.shape[0]):
            gate = 1.0 / (1.0 + math.exp(-(w[row, i] * h[i] + w[row + 1, i])))
            cell = math.tanh(w[row + 1, i] * h[i])
            h[i] = gate * math.tanh(cell) + math.sqrt(1.0 + cell * cell)
            total += h[i] * cell
    return total


def lines_calling(source, fn):
    return [line for line in source.splitlines() if f"{fn}(" in line and "# from" not in line]


def args_of_cells():
    return rng.uniform(-0.8, 0.8, (4, 5)), rng.uniform(-1.0, 1.0, 5)


@pytest.fixture(scope="module")
def cells():
    return ad.function(gated_cells)


def test_the_adjoint_calls_no_function_whose_result_the_forward_kept(cells):
    w, x = args_of_cells()
    adjoint = ad.show_source(cells, "adjoint", w, x)
    forward = ad.show_source(cells, "forward", w, x)
    for fn in ("math.exp", "math.tanh", "math.sqrt"):
        assert not lines_calling(adjoint, fn), (fn, lines_calling(adjoint, fn))
    # the calls inside larger expressions got names, and their values are kept as the loop overwrites them;
    # a sigmoid's partial is read from the sigmoid, and its exp is not kept
    assert "exp_result" not in forward and "tanh_result = math.tanh(cell)" in forward
    assert "1.0 - tanh_result * tanh_result" in adjoint and "1.0 - cell * cell" in adjoint
    assert "gate * (1.0 - gate)" in adjoint
    assert "0.5 / sqrt_result" in adjoint


def test_an_index_temporary_of_an_inner_loop_is_computed_again_from_the_outer_loops(cells):
    """`row + 1` reads `row`, a temporary of the layer loop: the reverse sweep recomputes both, and no
    integer goes on a stack."""
    w, x = args_of_cells()
    forward = ad.show_source(cells, "forward", w, x)
    adjoint = ad.show_source(cells, "adjoint", w, x)
    pushed = {line.split("[")[0].strip() for line in forward.splitlines() if re.search(r"_top\] = ", line)}
    assert pushed and not {p for p in pushed if re.fullmatch(r"t\d*_stack|saved_u?int\d*", p)}, pushed
    assert "row = 2 * layer" in adjoint and "= row + 1" in adjoint


def test_gradients_equal_finite_differences(cells):
    w, x = args_of_cells()
    check_function(cells, (w, x), (0, 1))


def test_second_derivatives_equal_finite_differences_of_the_gradient(cells):
    w, x = args_of_cells()
    v = rng.uniform(-1.0, 1.0, w.shape)

    def directional(wv):
        ww = ad.constant(wv)
        with ad.GradientTape() as tape:
            tape.watch(ww)
            out = cells(ww, x)
        return float(np.sum(tape.gradient(out, ww).numpy() * v))

    ww = ad.constant(w)
    with ad.GradientTape() as outer:
        outer.watch(ww)
        with ad.GradientTape() as inner:
            inner.watch(ww)
            out = cells(ww, x)
        g = inner.gradient(out, ww)
        gv = np.sum(g * v)
    hv = outer.gradient(gv, ww).numpy()
    np.testing.assert_allclose(hv, finite_differences(lambda a: directional(a[0]), (w,), 0), rtol=1e-6, atol=1e-8)


def soft_sign(x):
    return math.exp(-x * x) * math.tanh(x)


@pytest.mark.parametrize("target, kept", [("cpu", True), ("cuda", False)])
def test_only_a_target_that_keeps_results_names_them(target, kept):
    """A GPU thread computes a call again rather than keep its value (`Policy.keeps_results`)."""
    program = pipeline.run(soft_sign, (numba.float64,), (True,), until="reverse", target=target)
    primal, adjoint = function_text(program.primal), function_text(program.adjoint)
    assert ("exp_result = math.exp(" in primal) == kept and ("tanh_result = math.tanh(" in primal) == kept
    assert bool(lines_calling(adjoint, "math.tanh")) != kept


def sigmoid(z):
    return 1.0 / (1.0 + math.exp(-z))


def parallel_cells(w, x):
    """A prange loop calling a helper, tanh inside products."""
    out = np.empty(x.shape[0])
    for i in numba.prange(x.shape[0]):
        c = math.tanh(w[0] * x[i])
        out[i] = sigmoid(w[1] * x[i]) * math.tanh(c) + math.sqrt(1.0 + c * c)
    return np.sum(out * out)


def rewritten_work(w, x):
    """A while loop around a reversed loop rewriting one work array in place."""
    work = np.zeros(x.shape[0])
    k = 0
    total = 0.0
    while k < w.shape[0]:
        for i in range(x.shape[0] - 1, -1, -1):
            work[i] = math.exp(-work[i] * w[k]) * math.tanh(x[i] + work[i])
            total += work[i] * math.sqrt(1.0 + work[i] ** 2)
        k += 1
    return total


@pytest.mark.parametrize("fn", [parallel_cells, rewritten_work])
def test_programs_written_otherwise_at_first_and_second_order(fn):
    w, x = rng.uniform(0.1, 0.9, 3), rng.uniform(-1.0, 1.0, 6)
    f = ad.function(fn)
    check_function(f, (w, x), (0, 1))
    check_grads(lambda a, b: f(a, b), w, x, order=2)


def test_float32_gradients_follow_the_float64_ones():
    w, x = rng.uniform(0.1, 0.9, 2), rng.uniform(-1.0, 1.0, 7)
    f = ad.function(parallel_cells)
    grads = []
    for dtype in (np.float32, np.float64):
        vs = [ad.Variable(a.astype(dtype)) for a in (w, x)]
        with ad.GradientTape() as tape:
            y = f(*vs)
        grads.append([g.numpy() for g in tape.gradient(y, vs)])
    for g32, g64 in zip(*grads):
        assert g32.dtype == np.float32
        np.testing.assert_allclose(g32, g64, rtol=2e-4, atol=1e-5)


def array_cells(w, x, steps):
    """Calls on arrays inside larger expressions, once per call and in a loop whose vectors keep their
    shape: the sigmoid's exp, tanh inside products, a square root."""
    h = np.tanh(w[0] * x) * x
    total = np.sum(np.sqrt(1.0 + h * h))
    for t in range(steps):
        gate = 1.0 / (1.0 + np.exp(-(w[1] * h + w[2])))
        h = gate * np.tanh(w[0] * h) + 0.5 * x
        total += np.sum(h * h)
    return total


def growing_cells(w, steps):
    """A vector one element longer each step (a join with a vector of the loop): the tanh of it changes
    shape from one iteration to the next."""
    h = w.copy()
    total = 0.0
    for t in range(steps):
        h = np.concatenate((h, w[:1])) * 0.9
        total += np.sum(h * np.tanh(h))
    return total


def joined_gates(w, x, steps):
    """Gates of a recurrent cell made from one concatenation per step, as vectorised LSTMs are written: the
    save analysis cannot tell that the join keeps its shape, so every vector of the loop may vary."""
    n = x.shape[0]
    h = x * 0.5
    total = 0.0
    for t in range(steps):
        z = np.concatenate((h, x)) * w[0] + w[1]
        gate = 1.0 / (1.0 + np.exp(-z[:n]))
        h = gate * np.tanh(z[n:])
        total += np.sum(h * x)
    return total


def test_calls_on_arrays_are_named_and_their_results_read_by_the_adjoint():
    w, x = rng.uniform(-0.8, 0.8, (3, 6)), rng.uniform(-1.0, 1.0, 6)
    f = ad.function(array_cells)
    forward = ad.show_source(f, "forward", w, x, 4)
    adjoint = ad.show_source(f, "adjoint", w, x, 4)
    assert "exp_result" not in forward and "tanh_result" in forward         # the sigmoid kept whole
    for fn in ("np.exp", "np.tanh", "np.sqrt"):
        assert not lines_calling(adjoint, fn), (fn, lines_calling(adjoint, fn))
    check_function(f, (w, x, 4), (0, 1))
    second_order_check(array_cells, (w, x, 4), (True, True, False))


@pytest.mark.parametrize("fn, args, active", [
    (growing_cells, (rng.uniform(-0.8, 0.8, 3), 5), (True, False)),
    (joined_gates, (rng.uniform(-0.8, 0.8, (2, 8)), rng.uniform(-1.0, 1.0, 4), 3), (True, True, False)),
], ids=["growing", "joined"])
def test_a_call_on_an_array_that_may_change_shape_in_a_loop_is_named_too(fn, args, active):
    """Its adjoint, made again like each binding, is made after the binding before is back; the partial
    reads the result kept (a tanh costs 17 ns an element here, a kept value a load)."""
    f = ad.function(fn)
    forward = ad.show_source(f, "forward", *args)
    adjoint = ad.show_source(f, "adjoint", *args)
    assert any("tanh_result" in line for line in lines_calling(forward, "vector_tanh"))
    for call in ("np.exp", "np.tanh"):
        assert not lines_calling(adjoint, call), (call, lines_calling(adjoint, call))
    check_function(f, args, tuple(k for k, a in enumerate(active) if a))
    second_order_check(fn, args, active)


def mixed_widths(w, x, steps):
    """A float32 vector made float64 by a float64 number (`1.0 + ...`, as Numba types it; an integer
    keeps it float32), whose tanh is named in the loop."""
    total = 0.0
    for t in range(steps):
        g = 1.0 / (1.0 + np.exp(-(w * x) * (t + 1)))
        total += np.sum(g * np.tanh(x * g))
    return total


def test_a_named_result_has_the_type_numba_gives_mixed_widths():
    w, x = rng.uniform(-0.8, 0.8, 6), rng.uniform(-1.0, 1.0, 6)
    f = ad.function(mixed_widths)
    grads = []
    for dtype in (np.float32, np.float64):
        vs = [ad.Variable(a.astype(dtype)) for a in (w, x)]
        with ad.GradientTape() as tape:
            y = f(*vs, 3)
        grads.append([g.numpy() for g in tape.gradient(y, vs)])
    assert "tanh_result" in ad.show_source(f, "forward", w.astype(np.float32), x.astype(np.float32), 3)
    for g32, g64 in zip(*grads):
        assert g32.dtype == np.float32
        np.testing.assert_allclose(g32, g64, rtol=2e-4, atol=1e-5)
    check_function(f, (w, x, 3), (0, 1))
    second_order_check(mixed_widths, (w, x, 3), (True, True, False))


def sigmoids(w, x):
    """Sigmoids written as code writes them: the whole of an assignment, inside a product (the sum either
    way round, 1 or 1.0; exp(-x), and exp(-a * b), which is exp((-a) * b)), of arrays and of numbers."""
    total = 0.0
    h = x.copy()
    for layer in range(w.shape[0]):
        gate = 1.0 / (1.0 + np.exp(-(w[layer] * h)))
        h = h * (1 / (np.exp(-h) + 1)) + gate
        for i in range(h.shape[0]):
            total += h[i] * (1.0 / (1.0 + math.exp(-h[i] * w[layer, i])))
    return total


def test_a_sigmoid_is_kept_whole_and_its_partial_read_from_it():
    w, x = rng.uniform(-0.8, 0.8, (3, 5)), rng.uniform(-1.0, 1.0, 5)
    f = ad.function(sigmoids)
    forward, adjoint = ad.show_source(f, "forward", w, x), ad.show_source(f, "adjoint", w, x)
    assert "sigmoid_result" in forward and "exp_result" not in forward
    assert "gate * (1.0 - gate)" in adjoint or "gate[e" in adjoint
    for call in ("np.exp", "vector_exp"):
        assert not lines_calling(adjoint, call), (call, lines_calling(adjoint, call))
    check_function(f, (w, x), (0, 1))
    second_order_check(sigmoids, (w, x), (True, True))
