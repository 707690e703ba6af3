"""The save-size analysis (`ad.saving.save_sizes`): how many values each stack of a forward receives,
computed before the call from the arguments, against the values the forward actually pushes.

Each case is transformed up to the IR before target lowering; the count of every stack the forward
pushes onto is printed as a function of the arguments, and the forward is printed and run (as plain
Python: only heights are compared, and that keeps a few hundred programs cheap); each stack's final
height (in `saved`) must equal its count, or stay within it where the count is a bound (a branch
counted as its larger side). Stacks pushed inside a while loop have no count: the analysis says so.
A forward transformed under a policy without growable storage (`saving.SIZED`) is sized exactly and
gives the gradient; a save in a while loop is then refused, naming the loop, its line and the fix.
"""
import inspect
import itertools
import math
import os
import re
import sys
import tempfile
from dataclasses import replace

import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st
from numba.core import types as nt
from numba.np.numpy_support import as_dtype

from srcad.compiler import pipeline
from srcad.compiler.ad.reverse import reverse
from srcad.compiler.ad.saving import SIZED, Unsized, save_sizes
from srcad.compiler.backends import base, numba_cpu as cpu
from srcad.compiler.backends.cache import import_module, write_module
from srcad.compiler.errors import TransformError
from srcad.compiler.ir import Function, Push, Reserve, Tuple, While
from srcad.compiler.ir.facts import Facts, Reverse
from srcad.compiler.ir.visit import clone, walk
from srcad.compiler.runtime import EXPORTS
import srcad as ad
from srcad.testing import check_function, finite_differences, fresh

sys.path.insert(0, os.path.dirname(__file__))
import corpus                                # noqa: E402
import test_foreign_kernels as foreign       # noqa: E402
import test_random_programs as randprog      # noqa: E402
import test_regressions as regressions       # noqa: E402

_TMP = tempfile.mkdtemp(prefix="srcad_savesizes_")
_counter = itertools.count()


class _Lists:
    """Typed lists (stacks of arrays) as Python lists: run as plain Python, Numba's typed list would be
    handed arrays of any layout."""

    @staticmethod
    def empty_list(item):
        return []


def _exec(fn):
    """A printed IR function (lowered for the CPU target), run as plain Python."""
    src, _ = cpu.module_source([fn], fn.name)
    path = os.path.join(_TMP, f"{fn.name}_{next(_counter)}.py")
    module = import_module(write_module(path, src))
    module.List = _Lists
    for name in EXPORTS:          # compiled helpers without a Python entry point, as the Python they are
        helper = getattr(module, name, None)
        if hasattr(helper, "py_func"):
            setattr(module, name, helper.py_func)
    return getattr(module, fn.name)


def _types(args):
    return tuple(numba.typeof(a) for a in args)


def with_defaults(fn, args):
    bound = inspect.signature(fn).bind(*args)
    bound.apply_defaults()
    return tuple(bound.arguments.values())


def forward_of(fn, args, active, policy=None):
    """The forward IR of `fn` for `args` (before target lowering), transformed under `policy`;
    `active`: the indices of the arguments to differentiate."""
    flags = [i in active for i in range(len(args))]
    if policy is None:
        return pipeline.run(fn, _types(args), flags, until="accumulate", boundscheck=False).forward
    program = pipeline.run(fn, _types(args), flags, until="optional", boundscheck=False)
    return reverse(program.primal, policy=policy)[0]


def predicted_and_pushed(forward, args):
    """{stack: (count, exact, height after the forward)} for the stacks `forward` pushes onto; count None
    where the analysis finds none (a while loop)."""
    pushed = sorted({t.stack for t in walk(forward.body) if isinstance(t, Push)})
    user = [p for p in forward.params if p not in forward.workspace]
    sizes = {}
    for k in pushed:
        try:
            sizes[k] = save_sizes(forward.body, [k], forward.types, forward.names)[k]
        except Unsized as why:      # a while loop, or bounds computed from array elements
            assert isinstance(why.stmt, While) if why.why == "while" else why.names, why.why
            sizes[k] = None
    if not pushed:
        return {}
    counted = [k for k in pushed if sizes[k] is not None]
    setup = [t for k in counted for t in clone(sizes[k].setup)]
    counter = Function(f"{forward.name}_sizes", user, setup, [Tuple(tuple(sizes[k].count for k in counted))],
                       False, forward.types, {}, Facts(), forward.names)
    counts = dict(zip(counted, _exec(counter)(*fresh(args))))
    lowered = cpu.lower_for_target(_arrays_as_objects(pipeline.copy_function(forward)))
    buffers = [[] if isinstance(forward.stacks[w].item, nt.Array) else np.empty(3, as_dtype(forward.stacks[w].item))
               for w in forward.workspace]
    _, saved = _exec(lowered)(*fresh(args), *buffers)
    names = forward.facts.of(Reverse).saved
    return {k: (counts.get(k), sizes[k] is not None and sizes[k].exact, saved[names.index(forward.stacks[k].top)])
            for k in pushed}


def _arrays_as_objects(fn):
    """`fn` (in place) with its saved arrays kept as objects in lists, whose heights count arrays (copies
    end to end in one buffer count elements)."""
    fn.stacks = {k: replace(stack, by_value=False) for k, stack in fn.stacks.items()}
    return fn


def check_sizes(fn, args, active):
    """Compare the count of each stack with its height; skip a case that saves nothing on a stack."""
    args = with_defaults(fn, args)
    forward = forward_of(fn, args, active)
    sizes = predicted_and_pushed(forward, args)
    if not sizes:
        pytest.skip("nothing is saved on a stack")
    assert_counts_fit(fn.__name__, sizes)


def assert_counts_fit(name, sizes):
    for k, (count, exact, height) in sizes.items():
        if count is None:
            continue
        if exact:
            assert count == height, f"{name}: stack {k} receives {height} values, {count} predicted"
        else:
            assert height <= count, f"{name}: stack {k} receives {height} values, bound {count}"


# ---- the corpora --------------------------------------------------------------------------------

@pytest.mark.parametrize("case", regressions.CASES, ids=[c.name for c in regressions.CASES])
def test_regression_cases(case):
    check_sizes(case.fn, case.make_args(), case.active)


@pytest.mark.parametrize("case", corpus.CASES, ids=[c.name for c in corpus.CASES])
def test_corpus(case):
    check_sizes(case.fn, case.make_args(), case.active)


@pytest.mark.parametrize("case", corpus.sweep(foreign.CASES, every=3, start=1),
                         ids=corpus.sweep(foreign.IDS, every=3, start=1))
def test_foreign_kernels(case):
    check_sizes(case.fn, case.args, case.active)


# ---- nested, triangular, stepped, branching, early exits ----------------------------------------

def triangular_both(A):
    """LU-style: saves in the outer loop and in the inner loops, onto the same stacks."""
    B = A.copy()
    n = B.shape[0]
    for i in range(n):
        for j in range(i + 1, n):
            B[j, i] = B[j, i] / B[i, i]
            for k in range(i + 1, n):
                B[j, k] -= B[j, i] * B[i, k]
    return np.sum(B * B)


def stepped_bounds(x, m):
    """Steps of 2 and -1, an inner range that ends at the outer index, bounds from an integer argument."""
    s = 0.0
    for i in range(1, m, 2):
        for j in range(m - 1, i, -1):
            s = s * 0.5 + math.sin(x[j] * s + x[i])
    return s


def bounds_from_temporaries(x):
    """Inner bounds computed in the outer loop from its index (`w = i + 1`), and a rebound size."""
    s = 0.0
    n = x.shape[0]
    for i in range(n):
        w = i + 1
        for j in range(w):
            s = math.sin(s + x[j])
        n = n - 1
        for j in range(n):
            s = math.cos(s * x[j])
    return s


def branch_in_loop(x):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > 0.0:
            s = math.sin(s + x[i])
        else:
            for j in range(i):
                s = s * x[j]
    return s


def early_exit(x, tol):
    s = 0.0
    for i in range(x.shape[0]):
        s = math.sin(s + x[i])
        if s > tol:
            break
    return s


def data_dependent_bound(x, idx):
    """An inner trip count read from an array: counted only once the array is read."""
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(idx[i]):
            s = math.sin(s + x[j])
    return s


def while_loop(x):
    s = 0.0
    i = 0
    while i < x.shape[0] and s < 2.0:
        s = math.sin(s) + x[i] * x[i]
        i += 1
    return s


def shapes_of_products(A, x):
    """Bounds from shapes of arrays computed in the function: a matrix product, a transpose, a negated
    product, a broadcast of views with new axes, an elementwise function of it."""
    G = A.T @ A
    b = -(A.T @ x)
    d = x[:, np.newaxis] - x[np.newaxis, :]
    E = np.exp(-d * d)
    s = 0.0
    for i in range(G.shape[0]):
        for j in range(i, b.shape[0]):
            s = math.sin(s + G[i, j] * b[j])
    for i in range(E.shape[0]):
        s = math.cos(s * E[i, i] + s)
    return s


_X = np.linspace(0.1, 0.9, 7)
KERNELS = [
    (triangular_both, (np.eye(5) * 3.0 + np.linspace(0.1, 0.5, 25).reshape(5, 5),), (0,)),
    (stepped_bounds, (_X, 7), (0,)),
    (stepped_bounds, (_X, 0), (0,)),
    (bounds_from_temporaries, (_X,), (0,)),
    (branch_in_loop, (np.array([0.3, -0.2, 0.5, -0.7, 0.1]),), (0,)),
    (early_exit, (_X, 0.5), (0, 1)),
    (early_exit, (_X, 9.0), (0, 1)),
    (data_dependent_bound, (_X, np.array([1, 0, 3, 2, 7, 5, 4])), (0,)),
    (while_loop, (_X,), (0,)),
    (shapes_of_products, (np.linspace(0.2, 1.4, 12).reshape(4, 3), np.linspace(-0.5, 0.5, 4)), (0, 1)),
]


@pytest.mark.parametrize("fn, args, active", KERNELS, ids=[f"{k[0].__name__}-{i}" for i, k in enumerate(KERNELS)])
def test_kernels(fn, args, active):
    check_sizes(fn, args, active)


def test_loops_with_known_trip_counts_are_counted_exactly():
    for fn, args, active in KERNELS[:5]:
        forward = forward_of(fn, args, active)
        for k, (count, exact, height) in predicted_and_pushed(forward, args).items():
            assert count is not None and (exact or fn is branch_in_loop), (fn.__name__, k)


def test_shapes_of_arrays_computed_in_the_function_are_counted_exactly():
    """Products, transposes, broadcasts and elementwise results: their shapes come from the arguments',
    so storage is sized exactly before the call, and the gradient under that storage is right."""
    fn, args, active = KERNELS[-1]
    forward = forward_of(fn, args, active, policy=SIZED)
    sizes = predicted_and_pushed(forward_of(fn, args, active), args)
    assert sizes and all(count == height and exact for count, exact, height in sizes.values())
    assert all(forward.stacks[k].size is not None for k in {t.stack for t in walk(forward.body) if isinstance(t, Push)})
    f = ad.function(fn, target=SizedCPU.name)
    check_function(f, args, active)


def test_a_loop_with_a_break_is_bounded_by_its_range_and_a_while_loop_has_no_count():
    forward = forward_of(early_exit, (_X, 0.5), (0, 1))
    sizes = predicted_and_pushed(forward, (_X, 0.5)).values()
    assert sizes and all(count == _X.shape[0] and not exact and 0 < height < count for count, exact, height in sizes)
    forward = forward_of(while_loop, (_X,), (0,))
    assert all(count is None for count, _, _ in predicted_and_pushed(forward, (_X,)).values())


def test_the_cpu_reserves_once_before_the_outermost_loop():
    """Saves of an outer loop and of its inner loops onto one stack: room is taken once, before the
    loops, not checked inside them."""
    forward = forward_of(triangular_both, KERNELS[0][1], (0,))
    reserves = [t for t in walk(forward.body) if isinstance(t, Reserve)]
    assert reserves and all(any(t is r for t in forward.body) for r in reserves)
    assert not any(s.checked for s in forward.stacks.values())


# ---- random programs ----------------------------------------------------------------------------

@settings(max_examples=int(os.environ.get("SRCAD_SAVESIZES_EXAMPLES", "25" if os.environ.get("SRCAD_FULL_SWEEPS")
                                                                    else "6")), deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(randprog.programs(fragments=6), st.integers(0, randprog.N))
def test_random_programs(program, n):
    helpers, frags, seed = program
    mod = randprog.load_program(randprog.build_source(helpers, frags))
    inputs = randprog.make_inputs(seed)
    args = inputs[:4] + (n,) + inputs[5:]
    try:
        mod.prog(*fresh(args))
    except (ValueError, IndexError, ZeroDivisionError):
        assume(False)           # Python itself cannot run the program at this length: nothing to count
    assert_counts_fit("prog", predicted_and_pushed(forward_of(mod.prog, args, randprog.ACTIVE), args))


# ---- storage that cannot grow -------------------------------------------------------------------

def test_a_policy_without_growable_storage_sizes_every_stack_exactly():
    for fn, args, active in KERNELS[:7]:
        forward = forward_of(fn, args, active, policy=SIZED)
        assert not forward.workspace and not any(isinstance(t, Reserve) for t in walk(forward.body))
        pushed = {t.stack for t in walk(forward.body) if isinstance(t, Push)}
        assert pushed and all(forward.stacks[k].size is not None for k in pushed), fn.__name__


class SizedCPU(cpu.NumbaCPU):
    """The CPU printer with storage sized before the call and never grown."""
    name = "cpu-sized-storage"
    policy = SIZED


base.register(SizedCPU())


@pytest.mark.parametrize("fn, args, active", KERNELS[:7], ids=[f"{k[0].__name__}-{i}" for i, k in
                                                                enumerate(KERNELS[:7])])
def test_gradients_with_storage_sized_before_the_call(fn, args, active):
    f = ad.function(fn, target=SizedCPU.name)
    for i in active:
        def phi(a):
            return fn(*a)
        xs = [ad.Variable(np.asarray(a, np.float64)) if k == i else a for k, a in enumerate(args)]
        with ad.GradientTape() as tape:
            y = f(*xs)
        g = np.asarray(tape.gradient(y, xs[i]).numpy())
        np.testing.assert_allclose(g, finite_differences(phi, tuple(args), i), rtol=1e-6, atol=1e-8)


def test_a_while_loop_is_refused_where_storage_cannot_grow_naming_its_line_and_the_fix():
    line = inspect.getsourcelines(while_loop)[1] + 3
    with pytest.raises(TransformError, match=rf"while_loop: values are saved inside the while loop at line "
                                             rf"{line}: .* the sized target .* `for it in range\(max_iter\):`"):
        forward_of(while_loop, (_X,), (0,), policy=SIZED)


def test_bounds_read_from_arrays_are_refused_where_storage_cannot_grow_naming_them():
    with pytest.raises(TransformError, match=r"data_dependent_bound: the loop at line \d+: `for j in range\(idx"
                                             r"\[i\]\):` saves values, and its bounds depend on `.*` computed"):
        forward_of(data_dependent_bound, KERNELS[7][1], (0,), policy=SIZED)


_UNSIZED = r"values are saved inside the while loop|its bounds depend on"


@pytest.mark.parametrize("case", corpus.sweep(regressions.CASES, every=8),
                         ids=[c.name for c in corpus.sweep(regressions.CASES, every=8)])
def test_regression_gradients_with_storage_sized_before_the_call(case):
    """Every regression case compiles with storage sized exactly before the call and matches finite
    differences, or is refused for saves no count exists for."""
    try:
        check_function(ad.function(case.fn, target=SizedCPU.name), case.make_args(), case.active,
                              fd_fn=case.fd_fn, name=case.name)
    except TransformError as exc:
        assert re.search(_UNSIZED, str(exc)), str(exc)


@pytest.mark.parametrize("case", corpus.sweep(foreign.CASES, every=16, start=5),
                         ids=corpus.sweep(foreign.IDS, every=16, start=5))
def test_foreign_gradients_with_storage_sized_before_the_call(case):
    """The foreign kernels (code this project never saw) under the test backend: storage sized exactly
    before the call, never grown, and the gradient of finite differences; or the refusal of saves no
    count exists for. A sample by default, every kernel with SRCAD_FULL_SWEEPS=1."""
    try:
        check_function(ad.function(case.fn, target=SizedCPU.name), case.make_args(), case.active, name=case.name)
    except TransformError as exc:
        assert re.search(_UNSIZED, str(exc)), str(exc)
