"""Regression tests for the families of code that gave silently wrong gradients or
wrong primal results (issue 8): each kernel's compiled result equals plain Python and
its tape gradient equals central finite differences (srcad.testing.check_function)."""
import numpy as np
import pytest

import _regression_cases as R
from corpus import Case, check_case, decorated

rng = np.random.default_rng(8)


def vec(n, lo=0.2, hi=1.1):
    return rng.uniform(lo, hi, n)


def well_conditioned(n):
    return rng.uniform(-0.5, 0.5, (n, n)) + n * np.eye(n)


def A(*args):
    return lambda: tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)


CASES = [
    Case(R.shrinking_slices, A(vec(6))),
    Case(R.growing_slices, A(vec(6))),
    Case(R.syrk_lower, A(rng.uniform(-1, 1, (5, 3)), 0.7), active=(0, 1)),
    Case(R.gaussian_elimination, A(well_conditioned(5), vec(5)), active=(0, 1)),
    Case(R.covariance_rows, A(rng.uniform(-1, 1, (6, 4)))),
    Case(R.nested_moving_windows, A(vec(5))),
    Case(R.alias_scaled, A(vec(6))),
    Case(R.helper_scales_argument, A(vec(6), 1.3), active=(0, 1)),
    Case(R.alias_in_loop, A(vec(5))),
    Case(R.delay_line, A(vec(6))),
    Case(R.copy_same_element, A(vec(6), 2, 2), name="copy_same_element_equal"),
    Case(R.copy_same_element, A(vec(6), 2, 4), name="copy_same_element_distinct"),
    Case(R.shift_back, A(vec(6))),
    Case(R.fresh_array_updated_in_slices, A(vec(5), vec(4)), active=(0, 1)),
    Case(R.constant_branch_in_loop, A(vec(6), 0.1), active=(0, 1)),
    Case(R.constant_branch_array, A(vec(6))),
    Case(R.rebind_array_to_scalar, A(vec(5))),
    Case(R.tuple_packing, A(0.3, 0.7), active=(0, 1)),
    Case(R.tuple_argument, A(0.4, (1.5, -0.5))),
    Case(R.tuple_state_in_loop, A(0.7, 1.3), active=(0, 1)),
    Case(R.dtype_and_defaults, A(vec(5), 2.0), active=(0, 1)),
    Case(R.newaxis_outer, A(vec(5))),
    Case(R.inverse_hyperbolic, A(vec(5, 0.1, 0.9))),
    Case(R.copy_of_a_slice, A(vec(5))),
    Case(R.helper_returns_its_argument, A(vec(5))),
    Case(R.read_only_view_of_written_array, A(vec(5), 0.9), active=(0, 1)),
    Case(R.view_read_after_write, A(vec(5))),
    Case(R.writes_through_row_views, A(rng.uniform(-1, 1, (4, 3)), 0.8), active=(0, 1)),
    Case(R.column_view_read_after_writes, A(rng.uniform(-1, 1, (4, 3)))),
    Case(R.rotated_buffers, A(vec(6), 0.7), active=(0, 1)),
    Case(R.tiled, A(vec(4), rng.uniform(-1, 1, (2, 3))), active=(0, 1)),
    Case(R.names_of_runtime_helpers, A(vec(5), 5)),
    Case(R.gathers, A(rng.uniform(-1, 1, 6), rng.uniform(-1, 1, (6, 3)), np.array([0, 2, 2, 5, 2])), active=(0, 1)),
    Case(R.scatters, A(rng.uniform(-1, 1, 6), vec(4), np.array([1, 4, 1, 0])), active=(0, 1)),
    Case(R.products_and_moments, A(vec(5), rng.uniform(0.5, 1.5, (2, 3))), active=(0, 1)),
    Case(R.products_and_moments, A(np.array([0.7, 0.0, 1.3, 0.9]), rng.uniform(0.5, 1.5, (2, 3))), active=(0, 1),
         name="products_and_moments_with_a_zero"),
    Case(R.shape_of_a_partial_view, A(vec(5), rng.uniform(-1, 1, (3, 4))), active=(0, 1)),
    Case(R.view_returned_after_its_index_moves, A(vec(5))),
    Case(R.rotated_elementwise, A(vec(6), 0.3), active=(0, 1)),
    Case(R.tests_for_none, A(vec(4), 1), name="tests_for_none_array"),
    Case(R.tests_for_none, A(vec(4), 0), name="tests_for_none_none"),
    Case(R.linspace_default_count, A(0.2, 1.3), active=(0, 1)),
    Case(R.fresh_array_filled_in_loop, A(rng.uniform(-1, 1, (3, 2)), 0.5), active=(0, 1)),
    Case(R.resampled_by_a_filled_index_array, A(vec(8), 3)),
    Case(R.sums_of_gathered_rows, A(rng.uniform(-1, 1, (6, 2)), np.array([1, 4, 4]), np.array([0, 1, 2, 0, 1, 1]))),
    Case(R.gathers_through_parts_of_index_arrays, A(vec(6), np.stack([rng.permutation(6), rng.permutation(6)]), 2)),
    Case(R.rebound_from_parts_of_itself, A(vec(6), np.array([3, 0, 0, 2, 5, 1]))),
    Case(R.regions_of_two_ranks, A(rng.uniform(-0.5, 0.5, (4, 4)), 0.3), active=(0, 1)),
    Case(R.attributes_of_expressions, A(rng.uniform(-1, 1, (5, 3)), np.array([4, 1, 1]))),
    Case(R.early_return_of_an_array_updated_in_place, A(vec(3), 2.3)),
    Case(R.rebound_through_a_temporary, A(np.array([0.3, 0.7, 1.1]))),
    Case(R.product_with_a_moving_block, A(np.array([[0.5, -0.3, 0.8], [0.1, 0.9, -0.4], [-0.6, 0.2, 0.7]]),
                                          np.array([0.4, -0.7, 0.3])), active=(0, 1)),
    Case(R.columns_and_blocks_read, A(np.array([[0.2, -0.5, 0.9], [0.4, 0.1, -0.3]]))),
    Case(R.optional_arguments, A(np.array([0.3, -0.7, 1.1])), name="optional_arguments_none"),
    Case(R.optional_arguments, A(np.array([0.3, -0.7, 1.1]), np.array([1.0, 2.0, 0.5]), 0.3), active=(0, 1, 2),
         name="optional_arguments_given"),
    Case(R.copied_loop_scalar, A(np.array([0.3, -0.7, 0.5]))),
    Case(R.axes_given_by_position, A(rng.uniform(-1, 1, (3, 4)), rng.uniform(-1, 1, (3, 3)),
                                     rng.uniform(-1, 1, (2, 3, 2))), active=(0, 1, 2)),
    Case(R.builtins_and_bounds_on_arrays, A(np.array([0.3, -0.7, 0.9]), rng.uniform(-1, 1, (2, 3))), active=(0, 1)),
    Case(R.tables_of_module_constants, A(np.linspace(0.1, 1.2, 9), 0.3), active=(0, 1)),
    Case(R.masks_on_row_views_in_a_loop, A(rng.uniform(-1, 1, (4, 3)), rng.uniform(-1, 1, (3, 5))), active=(0, 1)),
    Case(R.eigenvalues_squared, A(vec(3))),
    Case(R.first_pass_flag, A(rng.uniform(-0.3, 0.3, (3, 3)) + np.eye(3), vec(4), 5), active=(0, 1)),
    Case(R.triangle_of_qr, A(vec(3))),
    Case(R.full_truncation_variance, A(np.array([0.5, -2.5, -1.9, 0.3, 1.2, -0.4]), 0.04, 1.5, 0.04, 0.9, 0.1),
         active=(0, 1, 2, 3, 4, 5)),
    Case(R.one_of_two_arrays, A(vec(5))),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_gradient_matches_finite_differences(case):
    check_case(case)


def test_inplace_update_changes_the_callers_array_outside_a_tape():
    """`B *= alpha` in a helper, and `z *= 2` through an alias, write into the array."""
    x = vec(4)
    expected = R.helper_scales_argument(x.copy(), 1.3)
    assert float(decorated(CASES[7])(x.copy(), 1.3).numpy()) == pytest.approx(expected, rel=1e-12)

    f = decorated(Case(R.scale_argument, A(vec(3), 2.0)))
    arr = np.array([1.0, 2.0, 3.0])
    assert float(f(arr, 2.0).numpy()) == 12.0
    np.testing.assert_array_equal(arr, [2.0, 4.0, 6.0])


def test_constant_branch_is_folded_before_differentiating():
    import srcad as ad
    f = decorated(CASES[14])
    f(vec(6), 0.1)
    text = ad.show_source(f, "forward")
    assert "damping" not in text and "ORDER" not in text and "2 > 1" not in text


def test_default_argument_values_are_used():
    f = decorated(CASES[20])
    x = vec(4)
    assert float(f(x.copy()).numpy()) == pytest.approx(R.dtype_and_defaults(x.copy()), rel=1e-12)


def test_a_view_that_cannot_be_followed_is_refused_with_the_users_names():
    """A view bound in two branches is not one region of its array; a write into the array while it is
    still read afterwards is refused, naming the user's write, the view and the fix."""
    import srcad as ad
    f = ad.function(R.view_in_two_branches)
    x = ad.constant(vec(5))
    with pytest.raises(ad.TransformError, match=r"view_in_two_branches .*`y\[2\] = 5.0` writes into `y` while "
                                                r"`v` \(line \d+: `v = y\[1:\]`\), which shares its memory, is read "
                                                r"afterwards.*Hint: make `v` an independent array with .copy\(\)"):
        with ad.GradientTape() as tape:
            tape.watch(x)
            f(x, 1)


def test_writes_through_views_change_the_array_outside_a_tape():
    """`row = B[i, :]; row *= s` scales the row of B itself, in the plain call as in NumPy."""
    import srcad as ad
    A_ = rng.uniform(-1, 1, (4, 3))
    assert float(ad.function(R.writes_through_row_views)(A_, 0.8).numpy()) == \
        pytest.approx(R.writes_through_row_views(A_, 0.8), rel=1e-12)


@pytest.mark.parametrize("base", [-1.5, 0.0, 2.0])
def test_power_rule_agrees_with_the_eager_tape_at_non_positive_bases(base):
    """d/dy x ** y is 0 where x <= 0 in both layers (TensorFlow's convention), not nan."""
    import srcad as ad
    f = decorated(Case(R.power_of_base, A(base, 2.0), active=(0, 1)))
    grads = []
    for fn in (f, R.power_of_base):
        x, y = ad.constant(base), ad.constant(2.0)
        with ad.GradientTape() as tape:
            tape.watch([x, y])
            out = fn(x, y)
        grads.append([float(g.numpy()) for g in tape.gradient(out, [x, y])])
    assert grads[0] == grads[1]
    assert grads[0][1] == (0.0 if base <= 0 else pytest.approx(np.log(base) * base ** 2))


def test_saves_of_nested_loops_fit_any_buffer_the_forward_is_handed():
    """A loop saving after its inner loops saved onto the same stack: a reservation taken before the
    outer loop is used up by the inner ones, so every push makes room itself. The forward is run with
    buffers of every size from 1 to 47 (a reservation ending exactly at the end of the buffer once
    wrote past it, and growing the buffer then dropped that entry: a wrong gradient)."""
    import numba
    from srcad.compiler import transform
    from srcad.testing import finite_differences
    from _foreign_kernels import lu      # Doolittle LU in place
    A0 = well_conditioned(5)
    W = rng.uniform(-1, 1, (5, 5))
    t = transform(lu, (numba.float64[:, ::1],), (True,))
    fd = finite_differences(lambda a: np.sum(lu(a[0]) * W), (A0,), 0)
    for size in range(1, 48):
        buffers = tuple(np.empty(size, d) for d in t._workspace)
        out, saved = t._forward(A0, *buffers)
        np.testing.assert_allclose(out, lu(A0), rtol=1e-12, err_msg=f"buffer of {size}")
        np.testing.assert_allclose(t._adjoint(A0, *saved, W)[0], fd, rtol=1e-6, atol=1e-8,
                                   err_msg=f"buffer of {size}")


def test_rotated_buffers_give_the_same_gradient_every_time_and_a_jacobian():
    """The adjoint restores rotated buffers in place, so it runs once per forward; a second gradient
    from a persistent tape (the forward runs again) and a jacobian (one adjoint per row) still agree
    with finite differences."""
    import srcad as ad
    from srcad.testing import finite_differences
    u0 = vec(6)
    f = ad.function(R.rotated_buffers)
    x, c = ad.Variable(u0), ad.Variable(0.7)
    with ad.GradientTape(persistent=True) as tape:
        y = f(x, c)
        s = np.sum(y * np.arange(6.0))
    first, second = tape.gradient(s, [x, c]), tape.gradient(s, [x, c])
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_allclose(first[0].numpy(), finite_differences(
        lambda a: np.sum(R.rotated_buffers(a[0], 0.7) * np.arange(6.0)), (u0,), 0), rtol=1e-6, atol=1e-9)
    fd = np.stack([finite_differences(lambda a: R.rotated_buffers(a[0], 0.7)[k], (u0,), 0) for k in range(6)])
    np.testing.assert_allclose(tape.jacobian(y, x).numpy(), fd, rtol=1e-6, atol=1e-9)


def test_rotating_an_argument_that_needs_a_gradient_among_written_buffers_is_refused_with_its_name():
    """`u, v = v, u` then a write into `v`: the second write goes into the caller's array `u`."""
    import srcad as ad
    f = ad.function(R.rotates_its_argument)
    u, c = ad.constant(vec(5)), ad.constant(0.7)
    with pytest.raises(ad.TransformError, match=r"rotates_its_argument .*`v\[:\] = u \* c` writes into its input "
                                                r"`u` which needs a gradient; copy it first: u = u.copy\(\)"):
        with ad.GradientTape() as tape:
            tape.watch([u, c])
            f(u, c)


def test_an_argument_rotated_among_written_buffers_is_written_as_in_python():
    """The same rotation with `u` not differentiated (issue 17): the caller's `u` is written as Python
    writes it, after the call and after the gradient, and d/dc matches finite differences."""
    import srcad as ad
    from srcad.testing import finite_differences
    u0 = vec(5)
    u_py = u0.copy()
    expected = R.rotates_its_argument(u_py, 0.7)
    f = ad.function(R.rotates_its_argument)
    u, c = u0.copy(), ad.constant(0.7)
    with ad.GradientTape() as tape:
        tape.watch(c)
        out = f(u, c)
    np.testing.assert_allclose(u, u_py, rtol=1e-12)
    grad = tape.gradient(out, c)
    np.testing.assert_allclose(u, u_py, rtol=1e-12)
    assert float(out.numpy()) == pytest.approx(expected, rel=1e-12)
    assert float(grad.numpy()) == pytest.approx(float(finite_differences(
        lambda a: R.rotates_its_argument(u0.copy(), a[0]), (0.7,), 0)), rel=1e-6)


def test_indexing_with_an_array_is_checked_like_any_index():
    """Each entry of an index array, and the length of a mask, as NumPy checks them."""
    import srcad as ad
    f = ad.function(R.gathers)
    x, A_ = rng.uniform(-1, 1, 6), rng.uniform(-1, 1, (6, 3))
    with pytest.raises(IndexError, match=r"gathers .*index 9 is out of range for axis 0 of `A` \(size 6\)"):
        f(x, A_, np.array([0, 9]))
    g = ad.function(R.scatters)
    with pytest.raises(IndexError, match=r"scatters .*index -7 is out of range for axis 0 of `y` \(size 6\)"):
        g(x, np.ones(2), np.array([1, -7]))


def test_other_indexing_with_an_array_is_refused_where_a_gradient_flows():
    """An index array after a slice (`A[:, idx]`): refused, naming the line; its plain call runs."""
    import srcad as ad
    f = ad.function(R.gather_columns)
    A_ = rng.uniform(-1, 1, (3, 4))
    idx = np.array([0, 3, 3])
    assert float(f(A_, idx).numpy()) == pytest.approx(R.gather_columns(A_, idx), rel=1e-12)
    with pytest.raises(ad.TransformError, match=r"gather_columns .*`return np.sum\(A\[:, idx\] \*\* 2\)` indexes an "
                                                r"array that carries a gradient with arrays of indices other than one "
                                                r"1-d index array or mask after integer indices only.*Hint: index "
                                                r"with one such array"):
        with ad.GradientTape() as tape:
            a = ad.Variable(A_)
            f(a, idx)


def test_a_value_returned_by_a_helper_then_written_by_another_is_refused_where_it_was_returned():
    """`y = first(u)` returns u from inside its loop; `second(u)` then writes into u while y is read: the
    message says where the value was returned (the name srcad reads it by is its own)."""
    import srcad as ad
    f = ad.function(R.returned_array_written_by_the_next_helper)
    b = vec(3)
    assert float(f(b).numpy()) == pytest.approx(R.returned_array_written_by_the_next_helper(b.copy()), rel=1e-12)
    with pytest.raises(ad.TransformError, match=r"_shift .*`u \+= c` writes into `u` while the value returned at "
                                                r"line \d+ \(`return u`\), which shares its memory, is read afterwards"
                                                r".*Hint: make the value returned at line \d+ an independent array"):
        with ad.GradientTape() as tape:
            x = ad.constant(b)
            tape.watch(x)
            f(x)


def test_an_argument_passed_none_and_used_as_a_value_is_a_type_error_naming_it():
    import srcad as ad
    f = ad.function(R.optional_arguments)
    with pytest.raises(TypeError, match=r"optional_arguments .*line \d+\): argument `x` is None here, and `w = "
                                        r"np.ones_like\(x\)` uses it as a value. Hint: pass a value for `x`"):
        f(None)


@pytest.mark.parametrize("fn, message", [
    (R.manhattan_norm, r"no derivative rule for `np.linalg.norm` of a 1-d array, ord=1 in `return np.linalg.norm"),
    (R.left_singular_vectors_of, r"no derivative rule for `srcad.left_singular_vectors` \(the derivatives of "
                                 r"singular vectors are not built.*\) in `u = np.linalg.svd"),
])
def test_functions_without_a_rule_for_these_arguments_are_refused_not_silently_wrong(fn, message):
    """A norm other than the 2-norm, and a function returning a tuple (its values carry derivatives), are
    refused under a tape naming the function; they gave wrong gradients silently before."""
    import srcad as ad
    f = ad.function(fn)
    x = ad.constant(np.array([0.3, -0.7, 0.5]))
    with pytest.raises(ad.TransformError, match=rf"{fn.__name__} .*line \d+\): {message}"):
        with ad.GradientTape() as tape:
            tape.watch(x)
            f(x)


def test_a_boolean_mask_of_two_dimensions_is_refused_naming_the_line():
    """Numba indexes with 1-d masks only; a 2-d one failed inside Numba with an empty AssertionError."""
    import srcad as ad
    f = ad.function(R.two_dimensional_mask)
    with pytest.raises(ad.TransformError, match=r"two_dimensional_mask .*line \d+\): `B\[B < 0.0\] = 0.0` indexes "
                                                r"with a boolean mask of 2 dimensions.*Hint: use np.where"):
        f(rng.uniform(-1, 1, (2, 3)))


def test_a_name_holding_one_of_the_rotated_buffers_is_refused():
    """`c = a` then `a, b = b, a` in a loop that writes into b: the write may change what c holds."""
    import srcad as ad
    f = ad.function(R.holds_a_rotated_buffer)
    with pytest.raises(ad.TransformError, match=r"holds_a_rotated_buffer .*`b\[:\] = np.sin\(a\) \* 1.5` writes into "
                                                r"`b` while `c` \(line \d+: `c = a`\).*Hint: make `c` an independent"):
        with ad.GradientTape():
            f(ad.Variable(vec(3)))


def test_a_second_adjoint_runs_the_forward_again_on_the_arguments_as_they_were():
    """Rotated buffers: the adjoint runs once per forward, a second one runs the forward again, on copies
    of the arguments as the first call got them (it doubles `w` once, and both gradients are right)."""
    import srcad as ad
    from srcad.testing import finite_differences
    x0, w0 = vec(3), vec(3)
    w = w0.copy()
    x = ad.Variable(x0)
    with ad.GradientTape(persistent=True) as tape:
        s = np.sum(ad.function(R.rotates_and_scales_an_argument)(x, w) * np.arange(1.0, 4.0))
    fd = finite_differences(lambda a: np.sum(R.rotates_and_scales_an_argument(a[0], w0.copy()) *
                                             np.arange(1.0, 4.0)), (x0,), 0)
    np.testing.assert_allclose(tape.gradient(s, x).numpy(), fd, rtol=1e-6)
    np.testing.assert_allclose(tape.gradient(s, x).numpy(), fd, rtol=1e-6)
    np.testing.assert_array_equal(w, 2.0 * w0)


def test_index_messages_name_the_users_variables():
    """A parameter renamed because generated code uses its name (`tile`) keeps the user's name in messages."""
    import srcad as ad
    f = ad.function(R.names_of_runtime_helpers)
    with pytest.raises(IndexError, match=r"of `sum_into` \(size 3\)"):
        f(vec(3), 5)
