"""Branches decided when compiling (front/lower.py): a test of a local that holds a known number where
it is tested (`k = abs(n)` in a helper called with a constant `n`) keeps only the branch that runs, so
the dead ones never reach Numba or the adjoint. Each function's value equals plain Python, and its
gradient finite differences at first and second order, on both sides of every branch that stays."""
import numpy as np
import pytest

import srcad as ad
from srcad.testing import check_function
from test_ir import second_order_check

rng = np.random.default_rng(4242)


def _power_by_cases(x, n):
    """x ** |n| by cases, as products by squaring are written: one case per small power, a loop past them."""
    k = abs(n)
    out = x * 1.0
    if k == 2:
        out = x * x
    elif k == 3:
        out = x * x * x
    else:
        while k > 1:            # `k` changes in the loop: its tests are not decided
            if k == 2:
                out = out * 1.5
            out = out * x
            k -= 1
    return out


def powers_by_cases(x):
    return np.sum(_power_by_cases(x, -3)) + np.sum(_power_by_cases(x, 5))


def numbers_changed_by_data_and_loops(x):
    """A number rebound in a branch on data, one rebound by each loop iteration, one by augmented
    assignment: none of their tests may be decided from the value before."""
    m = 2
    if x[0] > 0.0:
        m = 3
    s = 0.0
    if m == 2:
        s += 10.0 * x[1]
    first = True
    for i in range(3):
        if first:
            s += x[i] * x[i]
        else:
            s += x[i]
        first = False
    k = 0
    while k < 3:
        if k == 0:
            s += np.sin(x[0])
        k += 1
    j = 1
    j += 1
    if j == 2:
        s += x[1] * x[1] * x[1]
    return s


def comprehension_name_tested(x):
    """Each item of a comprehension over constants decides its own test of the loop name."""
    return np.sum(np.array([x[0] * x[0] if i == 0 else x[1] * i for i in range(3)]) ** 2)


def test_only_the_branch_that_runs_is_compiled_and_differentiated():
    x = rng.uniform(0.5, 1.5, 4)
    f = ad.function(powers_by_cases)
    assert float(f(x).numpy()) == pytest.approx(powers_by_cases(x), rel=1e-13)
    code = [line for line in ad.show_source(f, "forward").splitlines() if not line.strip().startswith("#")]
    assert not any("== 3" in line for line in code), "\n".join(code)   # decided in both calls
    assert sum("== 2" in line for line in code) == 1, "\n".join(code)   # only inside the loop
    check_function(f, (x,), (0,))
    second_order_check(powers_by_cases, (x,), (True,))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_numbers_rebound_by_data_or_loops_are_tested_as_they_run(sign):
    x = sign * rng.uniform(0.5, 1.5, 3)
    f = ad.function(numbers_changed_by_data_and_loops)
    assert float(f(x).numpy()) == pytest.approx(numbers_changed_by_data_and_loops(x), rel=1e-13)
    check_function(f, (x,), (0,))
    second_order_check(numbers_changed_by_data_and_loops, (x,), (True,))


def test_each_item_of_a_comprehension_decides_its_own_test():
    x = rng.uniform(0.5, 1.5, 2)
    f = ad.function(comprehension_name_tested)
    assert float(f(x).numpy()) == pytest.approx(comprehension_name_tested(x), rel=1e-13)
    check_function(f, (x,), (0,))
    second_order_check(comprehension_name_tested, (x,), (True,))


def test_builtins_of_constants_are_typed_as_numba_types_them():
    """min/max of an int and a float are floats in Numba (Python keeps the int): folding keeps Numba's."""
    def halves(x):
        return x[0] * (7 // max(2, 1.5)) + x[1] * abs(-3) + min(4, 2)
    x = rng.uniform(0.5, 1.5, 2)
    from numba import njit
    f = ad.function(halves)
    assert float(f(x).numpy()) == pytest.approx(njit(halves)(x), rel=1e-15)
    check_function(f, (x,), (0,))


def _scaled(v, scale=None):
    """An early return for an option left out, as helpers with optional arguments write it."""
    if scale is None:
        return v * 2.0
    return v * scale


def options_given_in_a_loop(x, w):
    s = 0.0
    for i in range(x.shape[0]):
        s += np.sin(_scaled(x[i], 1.5)) * w[i]
        if x[i] > 5.0:              # never, at the inputs below: the gradient sees both flags at work
            continue
        s += _scaled(x[i]) * w[i]
    return s


def test_a_return_in_a_branch_that_is_not_compiled_guards_nothing():
    """`_scaled(x[i], 1.5)` decides `scale is None` False: its first `return` is never lowered, so the
    statements after it need no flag, in the forward nor as a condition saved per iteration for the
    adjoint; `_scaled(x[i])` returns at once. The `continue` on data still guards the rest of the loop."""
    x, w = rng.uniform(0.5, 1.5, 5), rng.uniform(0.5, 1.5, 5)
    f = ad.function(options_given_in_a_loop)
    assert float(f(x, w).numpy()) == pytest.approx(options_given_in_a_loop(x, w), rel=1e-13)
    forward = ad.show_source(f, "forward")
    assert "_scaled_returned" not in forward and "not skip" in forward, forward
    check_function(f, (x, w), (0, 1))
    second_order_check(options_given_in_a_loop, (x, w), (True, True))


def _doubled_or_tripled(v, flag):
    if flag is None:
        return v * 2.0
    return v * 3.0


def option_in_a_tuple(x, options):
    """An item of a tuple argument may be None: a helper passed it tests it as it runs."""
    return np.sum(_doubled_or_tripled(x, options[0])) * options[1]


def many_comprehensions(x):
    """Comprehensions whose `if` tests and ternaries are copied while lowering, tests of a known number and
    of data among them: each decided from its own node (a copy freed earlier frees its id for another)."""
    k = 1
    n = x.shape[0]
    a0 = np.array([x[i] if x[i] > 0.2 else 0.0 for i in range(n)])
    a1 = np.array([x[i] for i in range(n) if k == 1])
    a2 = np.array([x[i] + 1.0 for i in range(n) if k != 2])
    a3 = np.array([x[i] for i in range(n) if x[i] > 0.0])
    a4 = np.array([x[i] * 3.0 for i in range(n) if x[i] < 0.5])
    a5 = np.array([x[i] if x[i] > 0.2 else 0.0 for i in range(n)])
    return np.sum(a0 * a0) + np.sum(a1 * a1) + np.sum(a2 * a2) + np.sum(a3 * a3) + np.sum(a4 * a4) + np.sum(a5 * a5)


def test_an_item_of_a_tuple_is_tested_for_none_as_it_runs():
    x = rng.uniform(0.5, 1.5, 4)
    f = ad.function(option_in_a_tuple)
    assert float(f(x, (None, 2.0)).numpy()) == pytest.approx(option_in_a_tuple(x, (None, 2.0)), rel=1e-13)
    check_function(f, (x, (None, 2.0)), (0,))


def test_tests_of_comprehensions_are_decided_each_from_its_own_node():
    x = np.array([0.3, 0.7, -0.2, 0.4, 0.1, -0.6])
    f = ad.function(many_comprehensions)
    assert float(f(x).numpy()) == pytest.approx(many_comprehensions(x), rel=1e-13)
    check_function(f, (x,), (0,))
    second_order_check(many_comprehensions, (x,), (True,))


def _case_of(x, n):
    if n == 2:
        return x * x
    return x * 3.0


def numbers_passed_by_name(A, x):
    """A helper's parameter stands for the caller's local, which holds a number; `abs(p)` of it too."""
    p = 2
    q = p + 1
    power = 5
    return np.sum(_case_of(x, p)) + np.sum(_case_of(x, q)) + np.sum(np.linalg.matrix_power(A, power))


def test_a_number_passed_by_name_decides_the_helpers_tests():
    A = np.eye(3) + 0.05 * rng.normal(size=(3, 3))
    x = rng.uniform(0.5, 1.5, 3)
    f = ad.function(numbers_passed_by_name)
    assert float(f(A, x).numpy()) == pytest.approx(numbers_passed_by_name(A, x), rel=1e-13)
    code = [line for line in ad.show_source(f, "forward").splitlines() if not line.strip().startswith("#")]
    assert sum("==" in line for line in code) == 1, "\n".join(code)     # matrix_power's `power % 2 == 1` alone
    check_function(f, (A, x), (0, 1))
    second_order_check(numbers_passed_by_name, (A, x), (True, True))


def _first_above(x, level):
    """An index returned from inside a loop, or -1 after it: the -1 is bound only where no return ran."""
    for i in range(x.shape[0]):
        if x[i] > level:
            return i
    return -1


def results_of_early_returns(x):
    j = _first_above(x, 0.35)
    k = _first_above(x, 5.0)
    s = x[0] * x[1]
    if k == -1:
        s += x[0] * x[0]
    if j >= 0:
        s += x[j] * 2.0
    return s


def test_a_result_bound_after_an_early_return_is_not_known_where_the_return_ran():
    x = np.array([0.3, 0.7, 0.2, 0.4])
    f = ad.function(results_of_early_returns)
    assert float(f(x).numpy()) == pytest.approx(results_of_early_returns(x), rel=1e-13)
    check_function(f, (x,), (0,))
    second_order_check(results_of_early_returns, (x,), (True,))
