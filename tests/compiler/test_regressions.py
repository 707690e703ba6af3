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


def test_a_view_read_after_a_write_into_its_array_is_refused_with_the_users_names():
    import srcad as ad
    f = ad.function(R.view_read_after_write)
    x = ad.constant(vec(5))
    with pytest.raises(ad.TransformError, match=r"view_read_after_write .*`y\[2\] = 5.0` writes into `y` while "
                                                r"`v` \(line \d+: `v = y\[1:\]`\), which shares its memory, is read "
                                                r"afterwards.*Hint: make `v` an independent array with .copy\(\)"):
        with ad.GradientTape() as tape:
            tape.watch(x)
            f(x)


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
