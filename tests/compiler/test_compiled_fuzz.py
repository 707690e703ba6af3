"""A fuzz of arguments to a compiled function (issue 9): every argument varied through types, ranks,
dtypes, shapes, layouts and aliasing, alone and in pairs. Each call, plain and under a tape, gives
Python's result (and a gradient equal to finite differences of the Python function), or a standard
exception whose message names the argument at fault; never a crash, garbage or a None gradient.

The oracle is the undecorated function run by Python on the same values: where Python raises, srcad
must raise too (IndexError where Python does); where Python computes a result, srcad computes the same
one or refuses the argument by name (a list, None, a complex value: outside the compiled subset)."""

import itertools
import math
import re
import warnings

import numpy as np
import pytest

import srcad as ad
from srcad.testing import finite_differences


def scale_into(x, w, out, n):
    """Writes w * x[:n] into out[:n]; reads x and out back."""
    s = 0.0
    for i in range(n):
        out[i] = w * x[i]
        s += out[i] * x[i] + math.sin(w)
    return s


compiled = ad.function(scale_into)
PARAMS = ("x", "w", "out", "n")
_rng = np.random.default_rng(5)
_X = _rng.uniform(0.5, 1.5, 12)


def _readonly(a):
    a = a.copy()
    a.flags.writeable = False
    return a


# Each argument's variants: (id, value). None of them is a valid program input for every function,
# which is the point: each is either computed exactly as Python computes it, or refused by name.
VARIANTS = {
    "x": [("f64", _X[:5].copy()), ("f32", _X[:5].astype(np.float32)), ("int64", np.arange(1, 6)),
          ("bool", np.ones(5, bool)), ("complex", _X[:5] + 0j), ("object", np.array([1.0] * 5, dtype=object)),
          ("view_step2", _X[::2]), ("reversed", _X[::-1]), ("readonly", _readonly(_X[:5])), ("2d", _X[:6].reshape(6, 1)),
          ("0d", np.array(1.25)), ("scalar", 1.25), ("short", _X[:3].copy()), ("empty", np.zeros(0)),
          ("list", [1.0, 2.0, 3.0, 4.0, 5.0]), ("none", None), ("str", "abc"), ("dict", {"a": 1.0}),
          ("tensor", ad.constant(_X[:5]))],
    "w": [("float", 0.7), ("int", 2), ("f32", np.float32(0.7)), ("0d", np.array(0.7)), ("bool", True),
          ("array1", np.array([0.7])), ("complex", 0.7j), ("none", None), ("str", "0.7")],
    "out": [("f64", np.zeros(5)), ("f32", np.zeros(5, np.float32)), ("int64", np.zeros(5, np.int64)),
            ("long", np.zeros(9)), ("short", np.zeros(2)), ("readonly", _readonly(np.zeros(5))),
            ("2d", np.zeros((5, 2))), ("view_step2", np.zeros(10)[::2]), ("list", [0.0] * 5), ("none", None)],
    "n": [("5", 5), ("0", 0), ("-2", -2), ("7", 7), ("bool", True), ("float", 5.0), ("int32", np.int32(4)),
          ("array", np.array([5])), ("none", None)],
}
BASE = {"x": _X[:5].copy(), "w": 0.7, "out": np.zeros(5), "n": 5}


def _cases():
    """Each variant alone, then pairs of variants of two arguments (a sample of them)."""
    for p, variants in VARIANTS.items():
        for name, value in variants:
            yield pytest.param({p: value}, id=f"{p}={name}")
    pairs = [(p, v, q, u) for (p, q) in itertools.combinations(PARAMS, 2)
             for v in VARIANTS[p] for u in VARIANTS[q]]
    pick = np.random.default_rng(0).choice(len(pairs), 40, replace=False)
    for k in sorted(pick):
        p, (vn, v), q, (un, u) = pairs[k]
        yield pytest.param({p: v, q: u}, id=f"{p}={vn},{q}={un}")


def _arguments(changes):
    args = {**BASE, **changes}
    return [_copy(args[p]) for p in PARAMS]


def _copy(v):
    if isinstance(v, np.ndarray):
        c = v.copy()
        c.flags.writeable = v.flags.writeable
        return c
    if isinstance(v, list):
        return list(v)
    return v


def _run_python(args):
    try:
        with warnings.catch_warnings():         # NumPy's own warnings about what it casts
            warnings.simplefilter("ignore")
            return scale_into(*args), None
    except Exception as err:            # noqa: BLE001 - Python's outcome is the oracle
        return None, err


_STANDARD = (TypeError, ValueError, IndexError, ad.TransformError)


def _check_refusal(err, changes, python_error):
    """A refusal: a standard exception, naming the argument at fault (an index out of range names the
    array and the index instead, as Python's IndexError does)."""
    assert isinstance(err, _STANDARD), f"{type(err).__name__}: {err}"
    if isinstance(err, IndexError):
        assert isinstance(python_error, IndexError), f"srcad: {err}; Python: {python_error!r}"
        assert re.search(r"index -?\d+ is out of range for axis \d+ of `\w+`", str(err)), str(err)
        return
    named = [p for p in changes if re.search(rf"\b{p}\b", str(err))]
    assert named, f"{type(err).__name__} names none of {sorted(changes)}: {err}"


@pytest.mark.parametrize("changes", _cases())
def test_a_plain_call_computes_what_python_does_or_refuses_the_argument(changes):
    args = _arguments(changes)
    expected, python_error = _run_python(_arguments(changes))
    try:
        result = compiled(*args)
    except Exception as err:            # noqa: BLE001 - judged below
        _check_refusal(err, changes, python_error)
        return
    assert python_error is None, f"srcad returned {result!r} where Python raised {python_error!r}"
    np.testing.assert_allclose(np.asarray(result), expected, rtol=1e-6 if _single(args) else 1e-13)
    python_args = _arguments(changes)
    _run_python(python_args)
    if isinstance(args[2], np.ndarray):
        np.testing.assert_allclose(args[2], python_args[2], rtol=1e-6)     # `out` written as Python writes it


@pytest.mark.parametrize("changes", _cases())
def test_a_gradient_matches_finite_differences_or_the_argument_is_refused(changes):
    args = _arguments(changes)
    expected, python_error = _run_python(_arguments(changes))
    watched = [k for k in (0, 1) if _differentiable(args[k])]
    sources = [ad.constant(args[k]) for k in watched]
    for k, t in zip(watched, sources):
        args[k] = t
    try:
        with ad.GradientTape() as tape:
            for t in sources:
                tape.watch(t)
            y = compiled(*args)
        grads = tape.gradient(y, sources)
    except Exception as err:            # noqa: BLE001 - judged below
        _check_refusal(err, changes, python_error)
        return
    assert python_error is None, f"srcad returned {y!r} where Python raised {python_error!r}"
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-6 if _single(args) else 1e-13)
    plain = _arguments(changes)
    for k, g in zip(watched, grads):
        if not _loops(plain):
            assert g is None or not np.any(g.numpy()), g
            continue
        assert g is not None, f"a None gradient for `{PARAMS[k]}`, which the result depends on"
        fd = finite_differences(lambda a: scale_into(*[_copy(v) for v in a]), tuple(map(_float64, plain)), k)
        np.testing.assert_allclose(g.numpy(), fd, rtol=1e-4 if _single(plain) else 1e-6, atol=1e-6)


def _differentiable(v):
    return isinstance(v, (float, np.floating)) or (isinstance(v, np.ndarray) and v.dtype.kind == "f")


def _single(args):
    return any(getattr(a, "dtype", None) == np.float32 for a in args if not isinstance(a, ad.Tensor)) or \
        any(isinstance(a, ad.Tensor) and a.dtype == np.float32 for a in args)


def _float64(v):
    if isinstance(v, np.ndarray) and v.dtype.kind == "f":
        return v.astype(np.float64)
    return float(v) if isinstance(v, np.floating) else v


def _loops(args):
    """Does the loop run (else the result reads neither x nor w)?"""
    return int(args[3]) > 0


def test_the_fuzz_covers_every_argument_and_pairs():
    ids = [c.id for c in _cases()]
    assert all(any(i.startswith(p + "=") for i in ids) for p in PARAMS)
    assert sum("," in i for i in ids) == 40
