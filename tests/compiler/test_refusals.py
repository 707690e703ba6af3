"""Every construct outside the subset is refused with function, line, construct and hint."""
import inspect

import numba
import numpy as np
import pytest

from srcad.compiler import TransformError, transform

import _refusal_cases as R

F64 = numba.float64
ARR = numba.float64[::1]


def line_of(fn, text):
    lines, first = inspect.getsourcelines(fn)
    for k, line in enumerate(lines):
        if text in line:
            return first + k
    raise AssertionError(text)


REFUSALS = [
    (R.uses_try, (F64,), "try/except", "try:"),
    (R.uses_with, (F64,), "`with` statement", "with open"),
    (R.uses_generator, (ARR,), "generator expression", "sum("),
    (R.uses_listcomp, (F64,), "a list comprehension of lists over a sequence that is not made of constants",
     "a = ["),
    (R.uses_dict, (F64,), "dict", "d = {"),
    (R.uses_set, (F64,), "set", "s = {"),
    (R.uses_class, (F64,), "class definition", "class Local"),
    (R.uses_attribute, (F64,), "`BOX.items` (a list used as a value)", "BOX.items"),
    (R.writes_global, (F64,), "`global` statement", "global COUNTER"),
    (R.uses_yield, (F64,), "yield", "yield x"),
    (R.uses_string, (F64,), "the constant b'hello'", "hello"),
    (R.for_over_reversed, (ARR,), r"`for` over reversed(...)", "for v in reversed"),
    (R.bare_raise, (F64,), "a bare `raise` (re-raising)", "raise\n"),
    (R.raise_formatted, (F64,), "a formatted or non-constant string in an exception", "raise ValueError"),
    (R.raise_not_a_class, (F64,), "raising something other than an exception class", "raise x"),
    (R.empty_list, (ARR,), "an empty list used as a value", "len([])"),
    (R.global_array, (ARR,), "module-level array `TABLE` of dtype object", "TABLE"),
    (R.appends_masks, (ARR,), "a list of array(bool, 1d, C), `acc`", "acc.append"),
    (R.reads_a_missing_field, (F64,), "field `third` of a named tuple with fields first, second", "p.third"),
    (R.named_tuple_rebound, (F64,), "`p` bound to a named tuple and to another tuple", "p = (x"),
]


@pytest.mark.parametrize("fn,types,construct,marker", REFUSALS, ids=[r[0].__name__ for r in REFUSALS])
def test_refused_construct_names_function_file_line_and_hint(fn, types, construct, marker):
    line = line_of(fn, marker)
    with pytest.raises(TransformError) as info:
        transform(fn, types, tuple(isinstance(t, numba.types.Float) or
                                   getattr(t, "dtype", None) == numba.float64 for t in types))
    msg = str(info.value)
    assert msg.startswith(fn.__name__), msg
    assert "_refusal_cases.py" in msg and f"line {line}" in msg, msg
    assert construct in msg and "Hint:" in msg, msg


def test_recursion():
    with pytest.raises(TransformError, match=r"recursive .*line \d+.*recursion \(`recursive` calls itself\).*Hint"):
        transform(R.recursive, (F64, numba.int64), (True, False))


def test_mutual_recursion():
    with pytest.raises(TransformError, match=r"_pong .*recursion \(`_ping` calls itself\)"):
        transform(R.mutual, (F64,), (True,))


def test_write_into_active_input():
    line = line_of(R.writes_input, "x[0] = 1.0")
    with pytest.raises(TransformError, match=rf"writes_input .*line {line}.*writes into its input `x` which "
                                             r"needs a gradient; copy it first: x = x.copy\(\)"):
        transform(R.writes_input, (ARR,), (True,))


def test_write_into_inactive_input_is_allowed():
    t = transform(R.writes_input, (ARR,), (False,))
    x = np.ones(3)
    assert t.primal(x) == 3.0 and x[0] == 1.0


def test_write_into_active_input_through_helper():
    with pytest.raises(TransformError, match=r"writes into its input `x`"):
        transform(R.helper_writes_input, (ARR,), (True,))


def test_write_through_an_alias_is_a_write_into_the_array():
    """`z = y; z[0] = 2.0` writes into y (it used to be refused as aliasing)."""
    t = transform(R.aliasing, (ARR,), (True,))
    x = np.array([1.0, 2.0, 3.0])
    out, saved = t.forward(x)
    assert out == 2.0 * 1.0 + 2.0 * 2.0 + 3.0 * 3.0
    np.testing.assert_allclose(t.adjoint(x, saved, 1.0)[0], [2.0, 4.0, 6.0])


def test_view_read_after_a_write_into_its_base_sees_the_write():
    """`v = y[1:]` then `y[1] = 3.0`: v reads the new value, as in NumPy (the view is a region of y)."""
    t = transform(R.view_after_write, (ARR,), (True,))
    x = np.array([1.0, 2.0, 3.0, 4.0])
    out, saved = t.forward(x)
    assert out == R.view_after_write(x.copy()) == 3.0 * 2.0 + 3.0 * 3.0 + 4.0 * 4.0
    np.testing.assert_allclose(t.adjoint(x, saved, 1.0)[0], [0.0, 3.0, 6.0, 8.0])


def test_missing_derivative_rule():
    line = line_of(R.no_rule, "np.linalg.svd")
    with pytest.raises(TransformError, match=rf"no_rule .*line {line}.*no derivative rule for "
                                             r"`srcad.left_singular_vectors`.*Hint"):
        transform(R.no_rule, (ARR,), (True,))


def test_numba_typing_error_points_at_user_line():
    line = line_of(R.typing_error, "math.sin(y)")
    with pytest.raises(TransformError, match=rf"typing_error .*_refusal_cases.py, line {line}\).*"
                                             r"Numba cannot compile `z = math.sin\(y\)`") as info:
        transform(R.typing_error, (ARR,), (True,))
    assert len(str(info.value)) < 600


def test_in_place_update_of_an_inactive_input_writes_into_it():
    t = transform(R.inplace_input, (ARR,), (False,))
    x = np.array([1.0, 2.0])
    assert t.primal(x) == 5.0
    np.testing.assert_array_equal(x, [2.0, 3.0])


def test_in_place_update_of_an_active_input_is_refused():
    line = line_of(R.inplace_input, "x += 1.0")
    with pytest.raises(TransformError, match=rf"inplace_input .*line {line}.*writes into its input `x` which needs "
                                             r"a gradient; copy it first"):
        transform(R.inplace_input, (ARR,), (True,))


def test_in_place_update_after_copy_is_fine():
    t = transform(R.inplace_after_copy, (ARR,), (True,))
    x = np.array([1.0, 2.0])
    out, saved = t.forward(x)
    np.testing.assert_allclose(t.adjoint(x, saved, 1.0)[0], 2 * (x + 1.0))
    np.testing.assert_array_equal(x, [1.0, 2.0])


@pytest.mark.parametrize("flag", [1, 0], ids=["array", "none"])
def test_value_that_may_be_none_is_differentiated_where_it_is_not(flag):
    """`extra` is None on one path and an array on the other: under a tape the call returns None or
    the array, as the plain call does; the gradient takes the array's cotangent where there is one
    (checked against finite differences, a jacobian, and again from a persistent tape)."""
    import srcad as ad
    from srcad.testing import finite_differences
    f = ad.function(R.none_on_one_path)
    x0 = np.array([0.5, -1.2, 2.0])
    x = ad.Variable(x0)
    with ad.GradientTape(persistent=True) as tape:
        total, extra = f(x, flag)
        loss = total + (np.sum(extra * extra) if extra is not None else 0.0)
    assert (extra is None) == (flag == 0)

    def plain(a):
        t, e = R.none_on_one_path(a[0], flag)
        return t + (np.sum(e * e) if e is not None else 0.0)
    expected = finite_differences(plain, (x0,), 0)
    for _ in range(2):
        np.testing.assert_allclose(tape.gradient(loss, x).numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(tape.gradient(total, x).numpy(), 2.0 * x0)
    if extra is not None:
        np.testing.assert_allclose(tape.jacobian(extra, x).numpy(), 2.0 * np.eye(3))


def test_value_that_may_be_none_is_refused_where_it_is_read():
    line = line_of(R.none_then_read, "total = np.sum(extra * x)")
    none = line_of(R.none_then_read, "extra = None")
    with pytest.raises(TransformError, match=rf"none_then_read .*line {line}\).*reads `extra`, which is None "
                                             rf"where line {none} .*Hint: test it first \(`if y is not None:`\)"):
        transform(R.none_then_read, (ARR, numba.int64), (True, False))


@pytest.mark.parametrize("keep", [True, False])
def test_an_array_made_and_written_under_one_flag_is_differentiated(keep):
    import srcad as ad
    from srcad.testing import finite_differences
    x0 = np.array([0.3, 0.7, 1.1])
    x = ad.Variable(x0)
    with ad.GradientTape() as tape:
        s, out = ad.function(R.kept_under_flag)(x, keep)
    expected_s, expected_out = R.kept_under_flag(x0, keep)
    assert float(s.numpy()) == pytest.approx(expected_s, rel=1e-14)
    assert (out is None) == (expected_out is None)
    if out is not None:
        np.testing.assert_allclose(out.numpy(), expected_out, rtol=1e-14)
    np.testing.assert_allclose(tape.gradient(s, x).numpy(),
                               finite_differences(lambda a: R.kept_under_flag(a[0], keep)[0], (x0,), 0), rtol=1e-6)


def test_an_array_read_under_a_flag_bound_anew_is_refused():
    line = line_of(R.flag_rebound, "out[0] = x[0]")
    with pytest.raises(TransformError, match=rf"flag_rebound .*line {line}\).*reads `out`, which is None"):
        transform(R.flag_rebound, (ARR, numba.boolean), (True, False))


def test_a_test_kept_in_a_name_says_where_the_value_is_not_none():
    import srcad as ad
    from srcad.testing import check_function
    from test_ir import second_order_check
    check_function(ad.function(R.best_so_far), (np.array([0.3, 0.7, 1.1]), 4), (0,))
    second_order_check(R.best_so_far, (np.array([0.3, 0.7, 1.1]), 4), (True, False))


def test_an_output_that_is_none_on_every_path_takes_no_cotangent():
    import srcad as ad
    from srcad.testing import finite_differences
    x0 = np.array([0.3, 0.7, 1.1])
    x = ad.Variable(x0)
    with ad.GradientTape(persistent=True) as tape:
        v, y = ad.function(R.none_after_the_loop)(x, 3)
        loss = np.sum(v * v)
    assert y is None
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), finite_differences(
        lambda a: float(np.sum(R.none_after_the_loop(a[0], 3)[0] ** 2)), (x0,), 0), rtol=1e-6)
    np.testing.assert_allclose(tape.jacobian(v, x).numpy(), np.stack(
        [finite_differences(lambda a: R.none_after_the_loop(a[0], 3)[0][k], (x0,), 0) for k in range(3)]), rtol=1e-6)

    def gradient(a):
        with ad.GradientTape() as inner:
            inner.watch(a)
            w, _ = ad.function(R.none_after_the_loop)(a, 3)
            total = np.sum(w * w)
        return inner.gradient(total, a)
    with ad.GradientTape() as outer:
        g = gradient(x)
    hessian = outer.jacobian(g, x).numpy()
    np.testing.assert_allclose(hessian, np.stack([finite_differences(lambda a: gradient(ad.constant(a[0])).numpy()[k],
                                                                     (x0,), 0) for k in range(3)]), rtol=1e-6)


def test_value_that_may_be_none_is_returned_as_none_by_a_plain_call():
    import srcad as ad
    f = ad.function(R.none_on_one_path)
    total, extra = f(np.array([1.0, 2.0]), 0)
    assert extra is None and float(total.numpy()) == 5.0
    np.testing.assert_array_equal(f(np.array([1.0, 2.0]), 1)[1].numpy(), [2.0, 4.0])
