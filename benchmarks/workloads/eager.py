"""Eager tapes: the seed's `y = x*x*x` and a Dense layer, srcad's GradientTape against every peer's.

The steps are benchmarks/eager_overhead.py's (one place for each framework's code); here the Dense layer
runs in float64, so that every tool must agree to 1e-8.
"""
import numba
import numpy as np

from .. import eager_overhead as E
from ..harness import Row, Tool, add_tools

# label -> the eager_overhead.py name of the framework's makers
FRAMEWORKS = {"srcad": "srcad", "PyTorch": "torch", "TensorFlow eager": "tensorflow",
              "TensorFlow function": "tf_function", "autograd": "autograd", "JAX": "jax"}


def _tool(make, *args):
    """A Tool from an eager_overhead maker `(step, check)`: the step is timed, its tensors converted only
    when checked."""
    step, _ = make(*args)
    return Tool(gradient=step)


def _row(workload, size, case, primal, args=()):
    """The row of one eager_overhead case (`scalar`, `dense`) with every framework that builds."""
    row = Row(workload, size, primal, {}, reference="srcad", quick=True)
    makers = {label: (lambda name=name: _tool(getattr(E, f"{case}_{name}"), *args))
              for label, name in FRAMEWORKS.items()}
    add_tools(row.tools, row.notes, makers)
    return row


def _cube_primal():
    """y = x*x*x compiled: the scalar row's primal."""
    cube = numba.njit(lambda x: x * x * x)
    return lambda: cube(3.0)


def _dense_primal():
    """sum(relu(x @ W + b)) compiled, on the Dense row's data."""
    forward = numba.njit(lambda x, w, b: np.sum(np.maximum(x @ w + b, 0.0)))
    x, w, b = E.dense_data(np.float64)
    return lambda: forward(x, w, b)


def rows(quick):
    """Both cases have one size, run by --quick too."""
    yield _row("eager x*x*x", "scalar float64", "scalar", _cube_primal())
    yield _row("Dense", f"{E.BATCH}x{E.IN} @ {E.IN}x{E.OUT} float64", "dense", _dense_primal(), (np.float64,))
