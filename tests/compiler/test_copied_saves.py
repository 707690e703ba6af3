"""Arrays saved as copies end to end in one buffer (`Stack.by_value`, `Policy.copied_dtypes`).

A rebound name's old array may be saved as a copy where no other name can see its memory, and a
region's old values always (they are a copy already). On the CPU such stacks of float64 arrays are
one growing buffer, handed in from call to call like the stacks of scalars, and a pop gives a view of
the copy; an array of more than `runtime.COPIED_AT_MOST` elements is kept as an object beside it
(a region's as a copy). A name that shares its memory with another (buffers rotated by rebinding)
keeps its arrays as objects, as do arrays of other dtypes. Every gradient is checked against finite
differences at first and second order, with a persistent tape running the adjoint twice over one
forward (its saved copies must come through unchanged), at other lengths (the buffer grows, then is
reused), and with arrays on both sides of the limit on one stack.
"""
import math

import numba
import numpy as np
import pytest

import srcad as ad
from srcad.compiler import transform
from srcad.testing import check_function, finite_differences

from test_ir import second_order_check

rng = np.random.default_rng(11)


def log_sum_exp_steps(w, x, n):
    """Fresh arrays per iteration whose old values the adjoint reads (exp's result, the state `h`)."""
    h = w * 1.0
    total = 0.0
    for i in range(n):
        z = h * x[i]
        e = np.exp(z - np.max(z))
        h = e / np.sum(e) + w
        total += math.log(np.sum(e)) + np.max(z) + e[0] * e[-1]
    return total


def matrix_steps(a, n):
    """A fresh 2-d array per iteration, read by the adjoint of tanh and of a product."""
    total = 0.0
    m = a * 1.0
    for i in range(n):
        m = np.tanh(m @ a * 0.5 + 0.1 * i)
        total += np.sum(m * m)
    return total


def rows_overwritten(x, n):
    """A row written over and over: its old values saved as a region."""
    h = np.zeros((2, x.shape[0]))
    total = 0.0
    for t in range(n):
        h[t % 2] = np.sin(h[(t + 1) % 2] * 1.5 + x)
        total += np.sum(h[t % 2] ** 2)
    return total


def rebound_then_written(x, n):
    """A fresh array written in place after its binding: the adjoint writes its old values back into
    the copy it popped, which must not change what another run of the adjoint pops."""
    total = 0.0
    t = np.zeros(x.shape[0])
    for i in range(n):
        t = np.cos(x * (i + 1))
        t[0] = t[0] * x[1]
        total += np.sum(t * t * x)
    return total


def rotating(x, n):
    """Buffers rotated by rebinding and written in place: each array is seen by two names, so none is
    saved as a copy."""
    a = x * 1.0
    b = x * 2.0
    total = 0.0
    for t in range(n):
        b[:] = np.sin(a) * b + x
        a, b = b, a
        total += np.sum(a * b)
    return total


def varying_lengths(w, n):
    """Arrays on both sides of the copy limit on one stack (`e`, 1 to 663 elements; the adjoint reads the
    exponentials kept, so the state `h` above the limit is not saved)."""
    h = w * 0.5
    total = 0.0
    for i in range(n):
        m = (i * 331) % w.shape[0] + 1
        e = np.exp(h[:m])
        h = h * 0.9 + 0.1 * np.sum(e) / m
        total += np.sum(e * e) / m
    return total


def _transformed(fn, args, active):
    return transform(fn, [numba.typeof(a) for a in args], tuple(i in active for i in range(len(args))))


def _copied_stacks(t):
    return sorted(k for k, s in t.ir.forward.stacks.items() if s.by_value)


def _tape_twice(fn, args, active):
    """The gradients of a persistent tape taken twice over one forward."""
    f = ad.function(fn)
    xs = [ad.Variable(a) if i in active else a for i, a in enumerate(args)]
    with ad.GradientTape(persistent=True) as tape:
        y = f(*xs)
    firsts = [g.numpy() for g in tape.gradient(y, [xs[i] for i in active])]
    seconds = [g.numpy() for g in tape.gradient(y, [xs[i] for i in active])]
    return firsts, seconds


def _width(big):
    """Arrays copied into the buffer (4), or kept as objects beside it (600: over `COPIED_AT_MOST`)."""
    return 600 if big else 4


CASES = {         # (function, its arguments for n steps and small or big arrays, active arguments)
    "log_sum_exp_steps": (log_sum_exp_steps, lambda n, big: (rng.normal(size=_width(big)), rng.normal(size=n), n),
                          (0, 1)),
    "matrix_steps": (matrix_steps, lambda n, big: (0.1 * rng.normal(size=(24, 24) if big else (3, 3)), n), (0,)),
    "rows_overwritten": (rows_overwritten, lambda n, big: (rng.normal(size=_width(big)), n), (0,)),
    "rebound_then_written": (rebound_then_written, lambda n, big: (rng.normal(size=_width(big)), n), (0,)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_copies_stand_for_saved_arrays_at_first_and_second_order(name):
    fn, make, active = CASES[name]
    args = make(6, False)
    t = _transformed(fn, args, active)
    assert _copied_stacks(t), f"{name}: no stack keeps copies"
    assert "push_array(" in t.source("forward") and "popped_array(" in t.source("adjoint")
    check_function(ad.function(fn), args, active)
    second_order_check(fn, args, tuple(i in active for i in range(len(args))))


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_adjoint_run_twice_and_buffers_reused_at_other_lengths(name):
    fn, make, active = CASES[name]
    for n, big in ((6, False), (40, False), (2, False), (5, True), (40, False)):   # grown, then reused
        _check_twice(fn, make(n, big), active, f"{name}, n={n}, {'big' if big else 'small'} arrays")


def _check_twice(fn, args, active, what):
    firsts, seconds = _tape_twice(fn, args, active)
    for k, (g1, g2) in enumerate(zip(firsts, seconds)):
        np.testing.assert_array_equal(g1, g2, err_msg=f"{what}: a second adjoint differs")
        fd = finite_differences(lambda a: fn(*a), args, active[k])
        np.testing.assert_allclose(g1, fd, rtol=1e-5, atol=1e-6, err_msg=what)     # 600 terms: rounding in FD


def test_arrays_on_both_sides_of_the_copy_limit_on_one_stack():
    w = rng.uniform(-1.0, 1.0, 700)
    t = _transformed(varying_lengths, (w, 9), (0,))
    assert "e_stack" in _copied_stacks(t) and "h_stack" not in t.source("forward")
    _check_twice(varying_lengths, (w, 9), (0,), "varying_lengths")
    second_order_check(varying_lengths, (w[:40], 9), (True, False))


def test_a_zero_length_array_is_saved_and_brought_back():
    w, x = np.zeros(0), rng.normal(size=5)

    def sums(w, x, n):
        total = 0.0
        for i in range(n):
            e = np.exp(w * x[i])
            total += np.sum(e) + x[i] ** 2
        return total
    firsts, seconds = _tape_twice(sums, (w, x, 5), (0, 1))
    assert firsts[0].shape == (0,)
    np.testing.assert_allclose(firsts[1], 2 * x, rtol=1e-14)


def test_arrays_seen_by_two_names_and_other_dtypes_are_kept_as_objects():
    x = rng.normal(size=4)
    t = _transformed(rotating, (x, 5), (0,))
    stacks = t.ir.forward.stacks          # the old values of the rows it writes are copies still
    assert not stacks["a_stack"].by_value and not stacks["b_stack"].by_value and stacks["b_regions"].by_value
    assert "a_stack.append(" in t.source("forward") and "push_array(b_regions" in t.source("forward")
    check_function(ad.function(rotating), (x, 5), (0,))
    second_order_check(rotating, (x, 5), (True, False))
    w32 = rng.uniform(0.5, 1.0, 4).astype(np.float32)
    t = _transformed(float32_steps, (w32, 6), (0,))
    assert _copied_stacks(t) and "push_array(" not in t.source("forward")     # copies may stand, not in one buffer
    check_function(ad.function(float32_steps), (w32, 6), (0,))


def float32_steps(w, n):
    h = w * w
    total = np.float32(0.0)
    for i in range(n):
        h = np.tanh(h * w)
        total += np.sum(h)
    return total



def written_through(x, n, kind):
    """A rebound array written through a call that Numba may give back as the array itself or a view of
    it (`kind` picks which): an alias the saving plan must see (a copy of `h` saved would miss the write)."""
    total = 0.0
    h = np.sin(x)
    for i in range(n):
        h = np.sin(x * (i + 1.0))
        total += np.sum(h * h)
        if kind == 0:
            g = np.ascontiguousarray(h)
            g[0] = g[0] * 3.0
            total += np.sum(g * x)
        elif kind == 1:
            g = np.asfortranarray(h)
            g[1] = g[1] * 3.0
            total += np.sum(g * x)
        elif kind == 2:
            m = np.expand_dims(h, 0)
            m[0, 2] = m[0, 2] * 3.0
            total += np.sum(m[0] * x)
        else:
            m = np.atleast_2d(h)
            m[0, 3] = m[0, 3] * 3.0
            total += np.sum(m[0] * x)
    return total


@pytest.mark.parametrize("kind", range(4), ids=["ascontiguousarray", "asfortranarray", "expand_dims", "atleast_2d"])
def test_a_write_through_a_function_that_gives_a_view_reaches_the_saved_array(kind):
    check_function(ad.function(written_through), (rng.normal(size=5), 3, kind), (0,))
    second_order_check(written_through, (rng.normal(size=5), 3, kind), (True, False, False))


def test_reading_an_array_after_a_write_through_such_a_view_is_refused():
    def read_after(x, n):
        total = 0.0
        for i in range(n):
            h = np.sin(x * (i + 1.0))
            g = np.ascontiguousarray(h)
            g[0] = g[0] * 3.0
            total += np.sum(h * x)
        return total
    with pytest.raises(ad.TransformError, match=r"read_after .*line \d+\): `g\[0\] = g\[0\] \* 3.0` writes into `g` "
                                                 r"while `h` .*which shares its memory, is read afterwards"):
        with ad.GradientTape() as tape:
            x = ad.Variable(rng.normal(size=5))
            tape.gradient(ad.function(read_after)(x, 3), x)


def slabs_overwritten(x, n):
    """Regions of a 3-d array, a slab across its first and last axes, written over: their old values
    saved as copies (and the array made of another's shape, `np.zeros(x.shape)`)."""
    h = np.zeros(x.shape)
    total = 0.0
    for t in range(n):
        j = t % x.shape[1]
        h[:, j, :] = np.sin(h[:, j, :] * 1.3 + x[:, j, :])
        total += np.sum(h * h * x)
    return total


def test_slabs_of_a_three_dimensional_array():
    x = rng.normal(size=(3, 4, 2))
    t = _transformed(slabs_overwritten, (x, 7), (0,))
    assert _copied_stacks(t) == ["h_regions"]
    check_function(ad.function(slabs_overwritten), (x, 7), (0,))
    second_order_check(slabs_overwritten, (x, 7), (True, False))


def columns_overwritten(x, n, kind):
    """Columns of a Fortran-ordered array written over: Numba types a column of one as a 1-d 'F' array
    (and `np.copy` of it too), which a stack of C arrays must still take. `kind` picks how the array
    comes to be Fortran-ordered: an argument copied with `np.copy` (order kept), or made so here."""
    if kind == 0:
        y = np.copy(x)
    elif kind == 1:
        y = np.asfortranarray(x.copy())
    else:
        y = np.asfortranarray(x * 1.0)
    for j in range(n):
        c = j % y.shape[1]
        y[:, c] = np.sin(y[:, c]) * y[:, c] + 0.5
    return np.sum(y * y)


@pytest.mark.parametrize("kind", [0, 1, 2])
@pytest.mark.parametrize("order", ["C", "F"])
def test_columns_of_a_fortran_ordered_array_written_over(kind, order):
    x = np.asarray(rng.normal(size=(4, 3)), order=order)
    check_function(ad.function(columns_overwritten), (x, 5, kind), (0,))
    second_order_check(columns_overwritten, (x, 5, kind), (True, False, False))
