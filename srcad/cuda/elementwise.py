"""`@ad.function(target="cuda")`: a scalar function applied elementwise on the GPU, with NumPy's broadcasting.

A call broadcasts its arguments (arrays, Tensors, Python numbers) against each
other, as NumPy does, and runs the function once per element of the result,
one GPU thread per element. It is a kernel like any other (`kernels.Kernel`),
written here for the pattern of the call's arguments:

    def softplus_elementwise(a, x, srcad_out, srcad_count):
        srcad_i = cuda.grid(1)
        if srcad_i < srcad_count:
            srcad_out[srcad_i] = softplus(a[0], x[srcad_i])

An argument of the result's shape is read at the thread's own element (so its
cotangent is a plain store), a one-element argument at element 0 (its
cotangent is summed per block on the device, then added once per block), an
argument broadcast along some axes at the element the result's index maps to
(its cotangent added atomically: several threads share it), and a Python
number is a constant. The launch is one node of the tape, so the gradient
comes from the generated adjoint kernel, reduced to each argument's shape on
the device.
"""
import ast
import functools
import inspect
import math

import numpy as np
from numba import cuda

from ..source import Source
from ..tensor import Tensor
from .kernels import Kernel

THREADS = 128
INDEX, COUNT, OUT = "srcad_i", "srcad_count", "srcad_out"


class Elementwise:
    """A scalar function applied elementwise over broadcast arrays, as one kernel per argument pattern."""

    def __init__(self, pyfunc, boundscheck):
        self.python_function, self._boundscheck = pyfunc, boundscheck
        self._params = list(inspect.signature(pyfunc).parameters)
        self._kernels = {}
        functools.update_wrapper(self, pyfunc)

    def __call__(self, *args):
        if len(args) != len(self._params):
            raise TypeError(f"{self.__name__}() takes {len(self._params)} arguments ({', '.join(self._params)}), "
                            f"got {len(args)}")
        arrays = [a if isinstance(a, Tensor) else np.asarray(a) for a in args]
        numbers = [isinstance(a, (int, float)) and not isinstance(a, bool) for a in args]
        try:
            shape = np.broadcast_shapes(*(np.shape(a) for a, n in zip(arrays, numbers) if not n))
        except ValueError:
            raise ValueError(f"{self.__name__}: arguments of shapes {[np.shape(a) for a in arrays]} do not "
                             f"broadcast together") from None
        size = math.prod(shape)
        kinds = tuple("number" if n else _kind(np.shape(a), shape) for a, n in zip(arrays, numbers))
        key = (kinds, len(shape) if "spread" in kinds else 0)
        k = self._kernels.get(key)
        if k is None:
            k = self._kernels[key] = Kernel(elementwise_kernel(self.python_function, kinds, len(shape)), (OUT,),
                                            "cuda", self._boundscheck)
        launch_args = [a if n else np.reshape(x, (-1,)) for a, x, n in zip(args, arrays, numbers)]
        strides = [s for a, kind in zip(arrays, kinds) if kind == "spread" for s in _strides(np.shape(a), shape)]
        broadcast = [*_spans(shape), *shape, *strides] if strides else []    # (the kernel's parameters after the count)
        out = np.zeros(size, _result_dtype(arrays, numbers))
        blocks = max(1, -(-size // THREADS))
        result = k[blocks, THREADS](*launch_args, out, size, *broadcast)
        return np.reshape(result, shape)


def _kind(shape, result):
    """How an argument of `shape` is read by the thread of each element of `result`."""
    if tuple(shape) == tuple(result):
        return "own"
    if math.prod(shape) == 1:
        return "one"
    return "spread"


def _spans(shape):
    """Elements per step of each axis of a C-ordered array of `shape`."""
    return [math.prod(shape[d + 1:]) for d in range(len(shape))]


def _strides(shape, result):
    """The element strides of an argument of `shape` broadcast to `result` (0 along broadcast axes)."""
    padded = (1,) * (len(result) - len(shape)) + tuple(shape)
    own = _spans(padded)
    return [0 if n == 1 and r != 1 else s for n, r, s in zip(padded, result, own)]


def _result_dtype(arrays, numbers):
    """float32 where every array is float32, else float64 (the functions differentiated return floats)."""
    found = np.result_type(*(a.dtype for a, n in zip(arrays, numbers) if not n), np.float32) \
        if not all(numbers) else np.float64
    return found if found in (np.float32, np.float64) else np.float64


# ---- the kernel of one argument pattern -------------------------------------------------------------------

def elementwise_kernel(pyfunc, kinds, ndim):
    """The numba.cuda kernel applying `pyfunc` once per element, its arguments read as `kinds` says (see the
    module): parameters are the arguments, the result buffer, the element count, then, where an argument
    is broadcast along some axes, the result's spans and shape and each such argument's strides."""
    name = pyfunc.__name__
    params = list(inspect.signature(pyfunc).parameters)
    callee = name if name not in params else "srcad_scalar_function"
    spread = [p for p, kind in zip(params, kinds) if kind == "spread"]
    spans = [f"srcad_span{d}" for d in range(ndim)] if spread else []
    dims = [f"srcad_dim{d}" for d in range(ndim)] if spread else []
    strides = {p: [f"{p}_stride{d}" for d in range(ndim)] for p in spread}

    def element(p, kind):
        if kind == "number":
            return _name(p)
        if kind == "own":
            return _subscript(p, _name(INDEX))
        if kind == "one":
            return _subscript(p, ast.Constant(0))
        terms = [_binop(_binop(_binop(_name(INDEX), ast.FloorDiv(), _name(spans[d])), ast.Mod(), _name(dims[d])),
                        ast.Mult(), _name(strides[p][d])) for d in range(ndim)]
        return _subscript(p, functools.reduce(lambda a, b: _binop(a, ast.Add(), b), terms))

    value = ast.Call(_name(callee), [element(p, kind) for p, kind in zip(params, kinds)], [])
    store = ast.Assign([ast.Subscript(_name(OUT), _name(INDEX), ast.Store())], value)
    grid = ast.Assign([ast.Name(INDEX, ast.Store())], ast.Call(ast.Attribute(_name("cuda"), "grid", ast.Load()),
                                                               [ast.Constant(1)], []))
    guard = ast.If(ast.Compare(_name(INDEX), [ast.Lt()], [_name(COUNT)]), [store], [])
    names = params + [OUT, COUNT] + spans + dims + [s for p in spread for s in strides[p]]
    kernel_name = f"{name}_elementwise"
    args = ast.arguments([], [ast.arg(n) for n in names], None, [], [], None, [])
    module = ast.fix_missing_locations(ast.Module([ast.FunctionDef(kernel_name, args, [grid, guard], [], None)], []))
    text = ast.unparse(module) + "\n"
    filename = f"<srcad elementwise kernel of {name}>"
    namespace = {"cuda": cuda, callee: pyfunc}
    exec(compile(text, filename, "exec"), namespace)
    made = namespace[kernel_name]
    made.__srcad_source__ = Source(text, filename, 1)
    return made


def _name(n):
    return ast.Name(n, ast.Load())


def _subscript(p, index):
    return ast.Subscript(_name(p), index, ast.Load())


def _binop(a, op, b):
    return ast.BinOp(a, op, b)


__all__ = ["Elementwise", "elementwise_kernel"]
