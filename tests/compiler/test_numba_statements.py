"""Python statements Numba accepts, compiled by srcad as Numba runs them (issue 17): raise and assert
(the same exception, type and message, as Python and Numba, naming the user's line), `for` over arrays,
rows, enumerate, zip and tables, loop `else:`, `in` on constant tuples and lists, list literals, and
helpers called with keyword arguments and defaults.

Each kernel (tests/compiler/_statement_cases.py): the result equals Python's and numba.njit's, the tape
gradient equals finite differences (`check_function`), and the generated gradient, differentiated
again, equals finite differences of it (`test_ir.second_order_check`)."""
import inspect

import numba
import numpy as np
import pytest

import srcad as ad
from srcad.compiler import TransformError
from srcad.testing import check_function

import _refusal_cases as R
import corpus
import _statement_cases as S
from test_ir import second_order_check

rng = np.random.default_rng(1717)
X = rng.uniform(0.5, 1.5, 6)
A = rng.uniform(-1.0, 1.0, (3, 4))


def line_of(fn, text):
    lines, first = inspect.getsourcelines(fn)
    return first + next(k for k, line in enumerate(lines) if text in line)


# (kernel, arguments, active arguments); the ids say which construct
CASES = [
    ("raise_not_taken", S.power_sum, (X, 3), (0,)),
    ("raise_in_helper_not_taken", S.weighted_mean, (X, X + 1.0), (0, 1)),
    ("raise_in_loop_else", S.sqrt_newton, (2.0, 50), (0,)),
    ("raise_in_else_branch", S.log_or_raise, (1.5,), (0,)),
    ("assert_holds", S.asserted, (X, 2.0), (0, 1)),
    ("for_over_array", S.sum_of_squares, (X,), (0,)),
    ("for_over_rows", S.row_norms, (A,), (0,)),
    ("enumerate", S.weighted_positions, (X,), (0,)),
    ("zip_of_slices", S.polyline_length, (X, X[::-1].copy()), (0, 1)),
    ("zip_of_range_enumerate_xrange", S.stepped_taps, (np.linspace(0.1, 1.0, 10), X[:3].copy()), (0, 1)),
    ("for_else_break", S.first_above, (X, 1.2), (0,)),
    ("for_else_no_break", S.first_above, (X, 5.0), (0,)),
    ("while_else_break", S.halve_until, (3.0, 0.1), (0,)),
    ("while_else_no_break", S.halve_until, (3.0, 1e-30), (0,)),
    ("nested_for_else", S.nested_else, (X,), (0,)),
    ("for_over_table", S.over_table, (1.5,), (0,)),
    ("in_tuple_in_helper", S.by_mode, (1.5, 1), (0,)),
    ("in_global_tuple", S.by_mode, (1.5, 3), (0,)),
    ("not_in_list", S.by_mode, (1.5, 5), (0,)),
    ("list_literals", S.spherical_to_cartesian, (1.3, 0.4, 0.7), (0, 1, 2)),
    ("list_arguments", S.projected, (X[:3].copy(),), (0,)),
    ("keyword_arguments", S.damped_sum, (X, 0.3), (0, 1)),
    ("functions_passed_to_a_helper", S.integrate_both, (0.7, 0.1, 5), (0, 1)),
    ("distance_function_to_dp_kernel", S.dtw_two_metrics, (X, rng.uniform(0.0, 2.0, 5)), (0, 1)),
    ("function_as_default_value", S.default_function, (1.3,), (0,)),
    ("nested_functions", S.logistic_loss, (X, 0.7, -0.2), (0, 1, 2)),
    ("closure_reads_at_the_call", S.running_closure, (X,), (0,)),
    ("list_comprehensions", S.basis_functions, (1.3, 0.7), (0, 1)),
    ("nested_function_passed_to_helper", S.damped_oscillator, (np.array([1.0, 0.0]), 2.0, 0.3, 0.1, 5),
     (0, 1, 2, 3)),
    ("list_grown_by_append", S.peaks_above, (rng.uniform(0.0, 2.0, 40), 0.8), (0, 1)),
    ("list_past_its_first_storage", S.running_means, (rng.uniform(0.5, 1.5, 40), 3), (0,)),
    ("list_of_indices", S.peak_indices, (rng.uniform(0.0, 2.0, 40), 0.8), (0,)),
    ("list_of_integers_past_its_storage", S.gaps_between_crossings, (rng.uniform(0.0, 1.0, 60),
                                                                     np.array([1, 0, 2], dtype=np.int64)), (0,)),
    ("list_comprehensions_of_any_length", S.selected_energies, (rng.uniform(0.0, 2.0, 12), 0.9), (0, 1)),
    ("named_tuples", S.damped_spring, (1.0, 0.5, 2.0, 30), (0, 1, 2)),
    ("named_tuple_defaults", S.spring_defaults, (1.3,), (0,)),
    ("lambdas", S.local_lambdas, (0.7, 1.3), (0, 1)),
    ("lambdas_passed_on", S.lambdas_passed_on, (0.7, 1.3), (0, 1)),
    ("for_over_tuples", S.over_tuples, (X[:4].copy(), 1.3), (0, 1)),
    ("in_on_arrays_and_lists", S.memberships, (np.array([0.5, 3.0, 1.5, 2.0, 0.7]), 1.0), (0, 1)),
    ("star_on_tuples", S.spread_tuples, (0.7, 1.3), (0, 1)),
    ("constant_fstring", S.constant_fstring, (2.0,), (0,)),
    ("list_of_arrays", S.trajectory_energy, (np.array([1.0, 0.2]), 2.0, 0.05, 20), (0, 1, 2)),
    ("lists_of_arrays_stacked", S.stacked_blocks, (A, 0.7), (0, 1)),
]
IDS = [c[0] for c in CASES]
# np.cross has no derivative rule yet: `projected` is checked in the primal only
NO_RULE = {"list_arguments"}
# plain Python that Numba does not take: a function as a default value, a closure passed to a dispatcher,
# a closure made inside a closure, np.array of a list of arrays
NOT_NUMBA = {"function_as_default_value", "nested_function_passed_to_helper", "named_tuple_defaults",
             "lambdas_passed_on", "lists_of_arrays_stacked"}


@pytest.mark.parametrize("name,fn,args,active", CASES, ids=IDS)
def test_result_and_gradient(name, fn, args, active):
    if name in NO_RULE:
        np.testing.assert_allclose(ad.function(fn)(*args).numpy(), fn(*args), rtol=1e-12)
        return
    check_function(ad.function(fn), args, active)


@pytest.mark.parametrize("name,fn,args,active", CASES, ids=IDS)
def test_result_equals_numba(name, fn, args, active):
    if name in NOT_NUMBA:
        pytest.skip("Numba does not compile this Python")
    np.testing.assert_allclose(np.asarray(ad.function(fn)(*args).numpy()), numba.njit(fn)(*args), rtol=1e-12)


SECOND = ["raise_not_taken", "raise_in_loop_else", "assert_holds", "for_over_rows", "zip_of_slices",
          "zip_of_range_enumerate_xrange", "for_else_break", "while_else_break", "nested_for_else",
          "in_tuple_in_helper", "list_literals", "keyword_arguments", "functions_passed_to_a_helper",
          "distance_function_to_dp_kernel", "nested_functions", "nested_function_passed_to_helper",
          "list_comprehensions", "list_comprehensions_of_any_length", "named_tuples", "list_grown_by_append",
          "list_past_its_first_storage", "list_of_indices", "lambdas", "lambdas_passed_on", "for_over_tuples", "in_on_arrays_and_lists",
          "star_on_tuples", "list_of_arrays", "lists_of_arrays_stacked"]


# out of the default sample (all run with SRCAD_FULL_SWEEPS=1): two RK4 helpers inlined at second order
# compile for minutes, and nested_function_passed_to_helper (RK4 with a function passed in) is in the sample
NOT_SAMPLED = {"functions_passed_to_a_helper"}


@pytest.mark.parametrize("name", [n for n in corpus.sweep(SECOND, every=3)
                                  if corpus.full_sweeps() or n not in NOT_SAMPLED])
def test_second_order(name):
    _, fn, args, active = CASES[IDS.index(name)]
    second_order_check(fn, args, tuple(k in active for k in range(len(args))))


def test_a_list_of_integers_and_floats_is_refused_naming_it():
    line = line_of(S.mixed_list, "acc.append(0.5 * x[i])")
    with pytest.raises(TransformError, match=rf"mixed_list .*line {line}\): the list `acc` gets an item of type "
                                             r"float64 in a list of integers.*append items of one kind"):
        ad.function(S.mixed_list)(X)


def test_a_list_changed_otherwise_than_by_append_is_refused():
    def popped(x):
        acc = []
        acc.append(x[0])
        return acc.pop()
    with pytest.raises(TransformError, match=r"a list changed with .pop\(...\).*grow a list of numbers made with "
                                             r"`acc = \[\]`"):
        ad.function(popped)(X)


def test_a_list_of_arrays_of_two_shapes_raises_naming_it():
    with pytest.raises(ValueError, match="a list of arrays grown by append holds arrays of one shape"):
        ad.function(S.ragged_rows)(X)


def test_keyword_only_parameters_of_a_helper():
    check_function(ad.function(S.keyword_only), (X, 0.7), (0, 1))


# ---- the exceptions raised -------------------------------------------------------------------------

RAISES = [
    (S.power_sum, (X, 0), ValueError, "n must be positive", 'raise ValueError("n must'),
    (S.weighted_mean, (X, X - 1.0), ValueError, "weights must be non-negative", 'raise ValueError("weights'),
    (S.sqrt_newton, (2.0, 2), S.ConvergenceError, "sqrt_newton did not converge", "raise ConvergenceError"),
    (S.log_or_raise, (-1.0,), ArithmeticError, r"log of a non-positive number", "raise ArithmeticError"),
    (S.asserted, (X, -1.0), AssertionError, "scale must be positive", "assert scale"),
    (S.asserted, (X[:1].copy(), 1.0), AssertionError, None, "assert x.shape"),
    (S.constant_fstring, (-1.0,), ValueError, "x must be non-negative", 'raise ValueError(f"x must'),
]
RAISE_IDS = [f"{r[0].__name__}-{r[2].__name__}" for r in RAISES]


def _python_error(fn, args):
    with pytest.raises(BaseException) as info:
        fn(*args)
    return info.value


def _notes_name_the_line(exc, marker):
    """The note of an exception raised in compiled code names the file and line of its `raise`."""
    source = next(f for f in (S.power_sum, S._check_weights.py_func, S.sqrt_newton, S.log_or_raise, S.asserted,
                              S.constant_fstring)
                  if marker in inspect.getsource(f))
    note = " ".join(getattr(exc, "__notes__", []))
    return "_statement_cases.py" in note and f"line {line_of(source, marker)}" in note


@pytest.mark.parametrize("fn,args,error,message,marker", RAISES, ids=RAISE_IDS)
def test_plain_call_raises_as_python(fn, args, error, message, marker):
    expected = _python_error(fn, args)
    with pytest.raises(error, match=message) as info:
        ad.function(fn)(*args)
    assert type(info.value) is type(expected) and info.value.args == expected.args
    assert _notes_name_the_line(info.value, marker), info.value.__notes__


@pytest.mark.parametrize("fn,args,error,message,marker", RAISES, ids=RAISE_IDS)
def test_numba_raises_the_same(fn, args, error, message, marker):
    with pytest.raises(error, match=message) as info:
        numba.njit(fn)(*args)
    assert info.value.args == _python_error(fn, args).args


@pytest.mark.parametrize("fn,args,error,message,marker", RAISES, ids=RAISE_IDS)
def test_call_under_a_tape_raises_and_the_tape_stays_usable(fn, args, error, message, marker):
    f = ad.function(fn)
    first = ad.Variable(np.asarray(args[0], dtype=float))
    with ad.GradientTape() as tape:
        with pytest.raises(error, match=message) as info:
            f(first, *args[1:])
        y = np.sum(first * first)
    assert _notes_name_the_line(info.value, marker)
    np.testing.assert_allclose(tape.gradient(y, first).numpy(), 2.0 * np.asarray(args[0]))


def test_generated_gradient_raises_as_python():
    """The gradient code, transformed again, keeps the check: called where Python raises, it raises."""
    second = second_order_check(S.power_sum, (X, 3), (True, False))
    with pytest.raises(ValueError, match="n must be positive"):
        second.primal(X.copy(), 0, 1.0)


# ---- what stays refused ------------------------------------------------------------------------------

REFUSED = [
    (R.helper_unknown_keyword, (1.5,), r"keyword argument `offset` in a call to `_scaled`", "offset="),
    (R.helper_missing_argument, (1.5,), r"call to `_scaled` without its parameter `factor`",
     "_scaled(x)"),
    (R.calls_context_manager, (1.5,), r"a context manager \(`_managed`, a contextlib.contextmanager\)",
     "_managed()"),
    (R.function_as_value, (1.5,), r"function `_scaled` used as a value", "g = _scaled"),
    (R.nested_function_as_value, (1.5,), r"function `inner` used as a value", "h = inner"),
    (R.decorated_nested_function, (1.5,), r"a nested function with decorators", "def inner"),
    (R.appends_to_list, (1.5,), r"a list changed with \.append\(\.\.\.\)", "acc.append"),
    (R.rebinds_function_parameter, (1.5,), r"`_swap_function` rebinds its parameter `f`, a function",
     "_swap_function(_scaled"),
]


@pytest.mark.parametrize("fn,args,match,marker", REFUSED, ids=[r[0].__name__ for r in REFUSED])
def test_refused_with_construct_and_line(fn, args, match, marker):
    with pytest.raises(TransformError, match=rf"{fn.__name__} .*line {line_of(fn, marker)}\): {match}.*Hint:"):
        ad.function(fn)(*args)


def test_a_helper_failing_in_a_test_is_not_called_recursive():
    """A test tried as a constant inlines its helper; a refusal there leaves no trace of it (it was
    reported as recursion)."""
    line = line_of(R._reversed_sum_positive, "for v in reversed")
    with pytest.raises(TransformError, match=rf"_reversed_sum_positive .*line {line}\): `for` over reversed"):
        ad.function(R.failing_helper_in_a_test)(X)


# ---- functions as arguments of the compiled function ----------------------------------------------------

def test_function_arguments_compile_once_per_function():
    """A function passed to the compiled function is a constant of the compile, as in Numba: inlined and
    differentiated through, one compile per function and activity, none more for a repeated call."""
    f = ad.function(S.euler)
    check_function(f, (S.logistic_growth, 0.3, 0.1, 6), (1, 2))
    check_function(f, (S._decay, 0.3, 0.1, 6), (1, 2))
    compiled = len(f._transforms)
    assert compiled == 4, compiled      # two functions, with and without a gradient
    same = ad.function(S._decay.py_func)    # the Python function of a dispatcher passed before
    np.testing.assert_allclose(f(same, 0.3, 0.1, 6).numpy(), S.euler(S._decay, 0.3, 0.1, 6), rtol=1e-12)
    f(S.logistic_growth, 0.5, 0.1, 6)
    assert len(f._transforms) == compiled


def test_function_argument_handed_to_a_helper():
    check_function(ad.function(S.integrate_with), (S._rotation, np.array([1.0, 0.5]), 0.1, 4), (1, 2))
    y0 = np.array([1.0, 0.5])
    np.testing.assert_allclose(ad.function(S.integrate_with)(S._rotation, y0, 0.1, 4).numpy(),
                               numba.njit(S.integrate_with)(S._rotation, y0, 0.1, 4), rtol=1e-12)
    second_order_check(S.integrate_with, (S._decay, 0.7, 0.1, 4), (False, True, True, False))
