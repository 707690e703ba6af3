"""exp and tanh of float64 that loops vectorise (`compiler/vector_math.py`): how close they are to the C
library's, their special values, that a loop calling them is widened, and where compiled code calls them
(elementwise loops only: a sum of exps keeps the C library's), with derivatives checked against finite
differences at first and second order."""
import math
import os
import re
import subprocess
import sys

import numba
import numpy as np
import pytest

import srcad as ad
from srcad.compiler.vector_math import vector_exp, vector_tanh
from srcad.testing import check_function
from test_ir import second_order_check
from test_kept_results import mixed_widths

rng = np.random.default_rng(5)


@numba.njit(error_model="numpy")
def _exp_loop(x, out):
    for i in range(x.shape[0]):
        out[i] = vector_exp(x[i])


@numba.njit(error_model="numpy")
def _tanh_loop(x, out):
    for i in range(x.shape[0]):
        out[i] = vector_tanh(x[i])


LOOPS = {"exp": (_exp_loop, np.exp, 1), "tanh": (_tanh_loop, np.tanh, 3)}     # loop, reference, ulps at most


def _ulps(got, want):
    diff = np.abs(got - want)
    return np.max(np.where(diff == 0, 0.0, diff / np.spacing(np.abs(want))))


@pytest.mark.parametrize("name", LOOPS)
@pytest.mark.parametrize("low, high", [(-1e-9, 1e-9), (-0.35, 0.35), (-1.0, 1.0), (-20.0, 20.0), (-745.1, -700.0),
                                       (700.0, 709.78), (-740.0, 709.0)])
def test_within_a_few_ulps_of_the_c_library(name, low, high):
    loop, reference, ulps = LOOPS[name]
    x = rng.uniform(low, high, 200_000)
    out = np.empty_like(x)
    loop(x, out)
    assert _ulps(out, reference(x)) <= ulps


@pytest.mark.parametrize("name", LOOPS)
def test_special_values_are_the_c_librarys(name):
    loop, reference, _ = LOOPS[name]
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 709.78, 709.79, -745.13, -745.2, -708.5, -720.0, 1e-300,
                  -1e-300, 1e308, -1e308])
    out = np.empty_like(x)
    loop(x, out)
    with np.errstate(over="ignore"):
        want = reference(x)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(np.signbit(out), np.signbit(want))        # tanh(-0.0) is -0.0


_WIDENED = """
import re, numba, numpy as np
from srcad.compiler.vector_math import vector_exp, vector_tanh
@numba.njit(error_model="numpy")
def loop(x, out):
    for i in range(x.shape[0]):
        out[i] = vector_exp(x[i]) + vector_tanh(x[i])
x = np.linspace(-1.0, 1.0, 64)
loop(x, np.empty_like(x))
print(len(re.findall(r"<\\d+ x double>", loop.inspect_llvm(loop.signatures[0]))))
"""


def test_a_loop_calling_them_is_widened():
    """At a user's optimization level (the suite compiles without LLVM's), in a fresh process."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_OPT"}
    out = subprocess.run([sys.executable, "-c", _WIDENED], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) > 0, out.stdout


def gates(w, x, steps):
    """Vector gates in a loop (the compiler fuses each into an elementwise loop) and a scalar sum of exps."""
    h = x * 0.5
    total = 0.0
    for t in range(steps):
        gate = 1.0 / (1.0 + np.exp(-(w[0] * h + w[1])))
        h = gate * np.tanh(w[2] * h) + 0.25 * x
        for i in range(h.shape[0]):
            total += math.exp(-h[i] * h[i])
    return total


def test_elementwise_loops_call_them_and_a_sum_of_exps_does_not():
    w, x = rng.uniform(-0.8, 0.8, (3, 6)), rng.uniform(-1.0, 1.0, 6)
    f = ad.function(gates)
    forward = ad.show_source(f, "forward", w, x, 3)
    assert "vector_exp(" in forward and "vector_tanh(" in forward
    assert re.search(r"total \+= math\.exp\(", forward)                   # a reduction: not widened
    check_function(f, (w, x, 3), (0, 1))
    second_order_check(gates, (w, x, 3), (True, True, False))


def test_float32_keeps_the_c_librarys():
    """(Its gradients follow the float64 ones: test_kept_results.py, `mixed_widths`.)"""
    w, x = rng.uniform(-0.8, 0.8, 6), rng.uniform(-1.0, 1.0, 6)
    f = ad.function(mixed_widths)
    assert "vector_exp(" in ad.show_source(f, "forward", w, x, 3)
    assert "vector_" not in ad.show_source(f, "forward", w.astype(np.float32), x.astype(np.float32), 3)
