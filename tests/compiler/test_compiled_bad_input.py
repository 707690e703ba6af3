"""Bad input to @ad.function: a clear error naming the function and parameter, IEEE results like the
eager tape, IndexError for an index out of range; never a Numba typing error, a None gradient or garbage
(issue 9)."""

import math

import numpy as np
import pytest

import srcad as ad


@ad.function
def scatter(x, out):
    for i in range(x.shape[0]):
        out[i] = 2.0 * x[i]
    return np.sum(out * x)


@ad.function
def scatter_via_alias(x, out):
    o = out
    for i in range(x.shape[0]):
        o[i] = x[i]
    return np.sum(x)


@ad.function
def edge_cases(x, y, z, w):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.sqrt(x[i]) + math.log(x[i]) + 1.0 / y[i] + math.sqrt((z[i] - w[i]) ** 2)
    return s


def sum_of_squares(x, n):
    s = 0.0
    for i in range(n):
        s += x[i] * x[i]
    return s


def guarded_reads(x, n, m):
    s = 0.0
    for i in range(n):
        if i < m:
            s += x[i]                   # never past x's end when m <= len(x), whatever n is
    return s


def inner_reads(x, n):
    s = 0.0
    for i in range(n):
        for j in range(i):
            s += x[i - 1] * 0.5         # only read when the inner loop runs
    return s


def gather(x, idx):
    s = 0.0
    for k in range(idx.shape[0]):
        s += x[idx[k]] * x[idx[k]]
    return s


def triangle(x, d, m):
    s = 0.0
    for col in range(d):
        for row in range(col + 1, m):
            s += x[row] * x[col]
    return s


def triangle_columns(x, y, d):
    s = 0.0
    for col in range(d):
        for row in range(col + 1, y.shape[0]):
            s += y[row] * x[col]
    return s


def descending(x, m):
    s = 0.0
    for i in range(1, -m, -1):
        s += x[i]
    return s


def shifted(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * y[i + 1]
    return s


def test_written_parameters_are_known():
    scatter(np.ones(2), np.zeros(2))
    assert scatter._last.written_params == ("out",)
    edge_cases(*[np.ones(2)] * 4)
    assert edge_cases._last.written_params == ()
    scatter_via_alias(np.ones(2), np.zeros(2))
    assert scatter_via_alias._last.written_params == ("out",)


def test_written_argument_sharing_memory_with_an_active_input_is_refused():
    v = ad.Variable(np.array([1.0, 2.0, 3.0]))
    with ad.GradientTape():
        with pytest.raises(ValueError, match=r"scatter\(\): argument `out`, which the function writes into, "
                                             r"shares memory with argument `x`"):
            scatter(v, v.numpy())
        with pytest.raises(ValueError, match="shares memory"):
            scatter(v, v.numpy()[::-1])
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0, 3.0])


def test_disjoint_halves_of_one_buffer_are_not_aliases():
    buf = np.array([1.0, 2.0, 3.0, 0.0, 0.0, 0.0])
    x = ad.constant(buf[:3])
    with ad.GradientTape() as tape:
        tape.watch(x)
        y = scatter(x, buf[3:])
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), 4.0 * buf[:3])


@pytest.mark.parametrize("bad, expected", [
    ({"a": 1.0}, r"is dict \{'a': 1.0\}"),
    (b"1.0", r"is bytes b'1.0'"),
    (len, r"is builtin_function_or_method"),
    (np.ones(3, dtype=complex), r"is a complex array \(complex128\); complex numbers are not supported"),
    (1j, r"is a complex number; complex numbers are not supported"),
    (np.array(["a"], dtype=object), r"is a NumPy value of dtype object"),
    ((np.ones(2), "s"), r"is a tuple holding str"),
])
def test_unsupported_arguments_are_a_type_error_naming_function_and_parameter(bad, expected):
    with pytest.raises(TypeError, match=r"scatter\(\): argument `x` " + expected):
        scatter(bad, np.zeros(3))


def test_watched_complex_input_is_refused_not_a_none_gradient():
    x = ad.constant(np.ones(3, dtype=complex))
    with ad.GradientTape() as tape:
        tape.watch(x)
        with pytest.raises(TypeError, match=r"scatter\(\): argument `x` is a complex array"):
            scatter(x, np.zeros(3))


def test_wrong_rank_names_the_function_and_the_argument_types():
    with pytest.raises(ad.TransformError, match=r"scatter .*line \d+\): Numba cannot compile .*\n.*scatter was "
                                                r"called with x: array\(float64, 2d, C\), out: array\(float64, 1d"):
        scatter(np.ones((2, 2)), np.zeros(2))


def test_division_by_zero_log_and_sqrt_at_zero_follow_ieee_like_the_eager_tape_but_a_zero_partial_adds_nothing():
    args = [np.array([0.0, 1.0, 4.0]), np.array([0.0, 2.0, -1.0]), np.array([1.0, 1.0, 2.0]),
            np.array([1.0, 3.0, 2.0])]
    variables = [ad.Variable(a) for a in args]
    with ad.GradientTape(persistent=True) as tape:
        compiled = edge_cases(*variables)
    with np.errstate(all="ignore"), ad.GradientTape(persistent=True) as eager_tape:
        x, y, z, w = variables
        eager = np.sum(np.sqrt(x) + np.log(x) + 1.0 / y + np.sqrt((z - w) ** 2))
    np.testing.assert_array_equal(compiled.numpy(), eager.numpy())
    np.testing.assert_array_equal(edge_cases(*args).numpy(), eager.numpy())
    for v in variables:
        with np.errstate(all="ignore"):
            expected = eager_tape.gradient(eager, v).numpy()
        if v is variables[2] or v is variables[3]:
            # sqrt((z - w) ** 2) at z == w: the slope of sqrt at 0 (inf) times that of the square (0) is nan on the
            # eager tape, as in TensorFlow; compiled code takes a partial that is exactly 0 as contributing nothing
            assert np.array_equal(np.isnan(expected), args[2] == args[3])
            expected[args[2] == args[3]] = 0.0
        np.testing.assert_array_equal(tape.gradient(compiled, v).numpy(), expected)
    assert np.isinf(tape.gradient(compiled, variables[0]).numpy()[0])


def test_index_out_of_range_raises_in_the_plain_call_and_the_gradient():
    f = ad.function(sum_of_squares)
    message = r"sum_of_squares \(.*test_compiled_bad_input.py, line \d+\): index {} is out of range for axis 0 of " \
              r"`x` \(size {}\) in `s \+= x\[i\] \* x\[i\]`"
    with pytest.raises(IndexError, match=message.format(3, 3)):    # the first index Python would fail on
        f(np.ones(3), 5)
    with pytest.raises(IndexError, match=message.format(0, 0)):
        f(np.empty(0), 1)
    v = ad.Variable(np.ones(3))
    with ad.GradientTape():
        with pytest.raises(IndexError, match=message.format(3, 3)):
            f(v, 4)
    assert f(np.ones(3), 3).numpy() == 3.0
    x = ad.Variable(np.array([1.0, 2.0, 3.0]))
    with ad.GradientTape() as tape:
        y = f(x, 3)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), [2.0, 4.0, 6.0])


def test_an_index_read_from_an_array_is_checked_where_it_is_used():
    f = ad.function(gather)
    with pytest.raises(IndexError, match=r"gather .*index 7 is out of range for axis 0 of `x` \(size 3\)"):
        f(np.ones(3), np.array([0, 2, 7]))
    assert f(np.array([1.0, 2.0, 3.0]), np.array([0, 2, -1])).numpy() == 1.0 + 9.0 + 9.0   # -1: the last, as in Python


def test_checks_never_fire_where_python_would_not_read():
    x = np.array([1.0, 2.0])
    assert ad.function(guarded_reads)(x, 5, 2).numpy() == 3.0
    inner = ad.function(inner_reads)
    assert inner(np.empty(0), 1).numpy() == 0.0            # the inner loop never runs: x[-1] is never read
    assert inner(x, 2).numpy() == 0.5 and inner_reads(x, 2) == 0.5


def test_a_loop_index_is_checked_once_before_the_loop():
    f = ad.function(shifted)
    with pytest.raises(IndexError, match=r"index 4 is out of range for axis 0 of `y` \(size 4\) in "
                                         r"`s \+= x\[i\] \* y\[i \+ 1\]`"):
        f(np.ones(4), np.ones(4))
    primal = ad.show_source(f, "primal")
    loop = primal.index("for i in")
    assert primal.count("check_loop_index(") == 2 and primal.rindex("check_loop_index(") < loop
    assert "check_index(" not in primal
    assert f(np.ones(4), np.ones(5)).numpy() == 4.0


def test_checks_of_triangular_loops_are_made_once_and_exactly():
    f = ad.function(triangle)
    x = np.arange(1.0, 5.0)
    assert f(x, 4, 4).numpy() == triangle(x, 4, 4)
    assert f(x, 9, 4).numpy() == triangle(x, 9, 4)         # col >= 3: the inner loop never runs, x[col] never read
    with pytest.raises(IndexError, match=r"index 4 is out of range for axis 0 of `x` \(size 4\) in "
                                         r"`s \+= x\[row\] \* x\[col\]`"):
        f(x, 2, 5)
    primal = ad.show_source(f, "primal")
    assert primal.index("check_loop_index(x, 0, 1, m") < primal.index("for col in")   # the rows, once


def test_an_outer_index_read_under_a_triangular_loop_is_checked_once_and_exactly():
    """`x[col]` under `for row in range(col + 1, m)` is read while col < m - 1: one check before the
    loops over that range, firing where Python raises and nowhere else."""
    f = ad.function(triangle_columns)
    x, y = np.arange(1.0, 5.0), np.linspace(0.5, 2.0, 5)
    assert f(x, y, 9).numpy() == triangle_columns(x, y, 9)    # col >= 4: the inner loop never runs
    long_y = np.linspace(0.5, 2.0, 7)
    assert f(x, long_y, 4).numpy() == triangle_columns(x, long_y, 4)
    with pytest.raises(IndexError, match=r"index 4 is out of range for axis 0 of `x` \(size 4\) in "
                                         r"`s \+= y\[row\] \* x\[col\]`"):
        f(x, long_y, 9)
    primal = ad.show_source(f, "primal")
    assert primal.index("check_loop_index(x, 0, 0, min(") < primal.index("for col in")


def test_a_descending_loop_fails_at_the_first_index_past_the_start_of_the_array():
    """x[1], x[0], x[-1], ... on 3 elements: Python fails at x[-4], and so does the check made before the loop."""
    f = ad.function(descending)
    assert f(np.arange(1.0, 4.0), 3).numpy() == descending(np.arange(1.0, 4.0), 3)
    with pytest.raises(IndexError, match=r"index -4 is out of range for axis 0 of `x` \(size 3\)"):
        f(np.arange(1.0, 4.0), 6)


def test_checks_are_dropped_on_request(monkeypatch):
    quiet = ad.function(shifted, boundscheck=False)
    quiet(np.ones(4), np.ones(5))
    assert "check_" not in ad.show_source(quiet, "primal")
    monkeypatch.setenv("SRCAD_BOUNDSCHECK", "0")
    from_env = ad.function(shifted)
    from_env(np.ones(4), np.ones(5))
    assert "check_" not in ad.show_source(from_env, "primal")


def test_boundscheck_option_is_checked():
    with pytest.raises(TypeError, match="boundscheck must be True, False or None, got 'yes'"):
        ad.function(sum_of_squares, boundscheck="yes")


def test_a_float_bound_of_range_is_a_type_error_as_in_python():
    """Numba runs range() over floats; Python refuses them, and so does srcad (plain call and tape)."""
    f = ad.function(sum_of_squares)
    with pytest.raises(TypeError, match=r"sum_of_squares .*line \d+\): range\(\) takes integers, and `n` is "
                                        r"float64 in `for i in range\(n\):`"):
        f(np.ones(3), 2.0)
    x = ad.Variable(np.array([1.0, 2.0, 3.0]))
    with ad.GradientTape() as tape, pytest.raises(TypeError, match=r"range\(\) takes integers, and `n`"):
        f(x, 2.0)
    with ad.GradientTape() as tape:
        y = f(x, 2)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [2.0, 4.0, 0.0])
