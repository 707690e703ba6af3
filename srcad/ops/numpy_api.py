"""Which srcad operation answers each NumPy call and Python operator applied to Tensors.

``UFUNCS`` answers ``Tensor.__array_ufunc__`` and ``FUNCTIONS`` answers
``Tensor.__array_function__``; adapters translate NumPy's signatures to the
primitives of ``rules``.  A NumPy function missing here still runs, without a
gradient, and raises ``NotImplementedError`` if a recording tape needs one.
"""

import numpy as np

from ..tensor import Tensor
from . import rules as r
from .registry import FUNCTIONS, UFUNCS, _run_without_gradient, operator_method, value


def _axis(axis):
    return tuple(axis) if isinstance(axis, list) else axis


def _dot(a, b, out=None):
    if np.ndim(value(a)) == 0 or np.ndim(value(b)) == 0:
        return r.multiply(a, b)
    if np.ndim(value(a)) <= 2 and np.ndim(value(b)) <= 2:
        return r.matmul(a, b)
    raise NotImplementedError("srcad: np.dot of arrays of rank > 2 is not supported; use np.matmul or np.einsum")


def _split(ary, indices_or_sections, axis=0):
    n = np.shape(value(ary))[axis]
    if np.ndim(indices_or_sections) == 0:
        sections = int(indices_or_sections)
        if n % sections:
            raise ValueError(f"array split does not result in an equal division: {n} into {sections}")
        bounds = list(range(0, n + 1, n // sections))
    else:
        bounds = [0] + [int(i) for i in indices_or_sections] + [n]
    lead = (slice(None),) * (axis % np.ndim(value(ary)))
    return [r.getitem(ary, index=lead + (slice(lo, hi),)) for lo, hi in zip(bounds[:-1], bounds[1:])]


def _take(a, indices, axis=None, out=None, mode="raise"):
    indices = np.asarray(value(indices))
    if axis is None:
        return r.getitem(r.reshape(a, (-1,)), index=(indices,))
    return r.getitem(a, index=(slice(None),) * (axis % np.ndim(value(a))) + (indices,))


def _pad(array, pad_width, mode="constant", constant_values=0, **kw):
    if mode != "constant" or kw:
        raise NotImplementedError(f"srcad: np.pad supports mode='constant' only, got mode={mode!r}")
    return r.pad_constant(array, pad_width=pad_width, constant_values=constant_values)


def _norm(x, ord=None, axis=None, keepdims=False):
    n_axes = np.ndim(value(x)) if axis is None else np.size(axis)
    if ord not in (None, 2, "fro") or (ord == 2 and n_axes == 2) or (ord == "fro" and n_axes != 2):
        raise NotImplementedError(f"srcad: np.linalg.norm supports the Euclidean/Frobenius norm only, got ord={ord!r}")
    return r.linalg_norm(x, axis=_axis(axis), keepdims=keepdims)


def _c_order(a, order):
    if order != "C":
        raise NotImplementedError(f"srcad: np.reshape / np.ravel support order='C' only, got order={order!r}")
    return a


def _reduction(prim, func):
    """An adapter for np.sum-like reductions; options a rule cannot honour (out=, where=, initial=) run the
    NumPy function without a gradient instead (raising if a tape needs one)."""
    def run(a, axis=None, dtype=None, out=None, keepdims=False, **kw):
        if out is not None or kw:
            given = (("axis", axis), ("dtype", dtype), ("out", out), ("keepdims", keepdims))
            kw.update((k, v) for k, v in given if v is not None and v is not False)
            return _run_without_gradient(func, f"numpy.{func.__name__}", (a,), kw)
        return prim(a if dtype is None else r.cast(a, dtype), axis=_axis(axis), keepdims=keepdims)
    return run


def _clip(a, a_min=None, a_max=None, out=None, *, min=None, max=None, **kw):
    lo, hi = (a_min if a_min is not None else min), (a_max if a_max is not None else max)
    return r.clip(a, -np.inf if lo is None else lo, np.inf if hi is None else hi)


def _cumsum(a, axis=None, dtype=None, out=None):
    a = a if dtype is None else r.cast(a, dtype)
    return r.cumsum(r.reshape(a, (-1,)), axis=0) if axis is None else r.cumsum(a, axis=axis)


def _moveaxis(a, source, destination):
    ndim = np.ndim(value(a))
    source, destination = [np.atleast_1d(v) % ndim for v in (source, destination)]
    order = [n for n in range(ndim) if n not in source]
    for dst, src in sorted(zip(destination, source)):
        order.insert(dst, src)
    return r.transpose(a, axes=tuple(int(n) for n in order))


def _einsum(subscripts, *operands, **kw):
    """np.einsum; an operand with a repeated index ('ii->i') is replaced by its diagonal first."""
    spec = subscripts.replace(" ", "")
    if "." in spec:  # runs; its gradient rule raises NotImplementedError
        return r.einsum(*operands, subscripts=subscripts)
    ins, arrow, out = spec.partition("->")
    ins, operands = ins.split(","), list(operands)
    if not arrow:
        letters = "".join(ins)
        out, arrow = "".join(sorted(c for c in set(letters) if letters.count(c) == 1)), "->"
    for k, sub in enumerate(ins):
        while len(set(sub)) != len(sub):
            c = next(c for c in sub if sub.count(c) > 1)
            p, q = sub.index(c), sub.index(c, sub.index(c) + 1)
            operands[k] = r.diagonal(operands[k], 0, p, q)
            sub = "".join(ch for n, ch in enumerate(sub) if n not in (p, q)) + c
        ins[k] = sub
    return r.einsum(*operands, subscripts=",".join(ins) + arrow + out)


def _where(condition, x=None, y=None):
    if x is None and y is None:
        return np.nonzero(value(condition))
    return r.where(value(condition), x, y)


def _no_gradient(func):
    """Run ``func`` on values: its result carries no gradient by definition."""
    def run(*args, **kwargs):
        result = func(*[value(a) for a in args], **{k: value(v) for k, v in kwargs.items()})
        return Tensor._wrap(result) if isinstance(result, (np.ndarray, np.generic)) else result
    return run


UFUNCS.update({
    np.add: r.add, np.subtract: r.subtract, np.multiply: r.multiply, np.divide: r.divide,
    np.power: r.power, np.float_power: r.power, np.negative: r.negative, np.positive: r.positive,
    np.reciprocal: r.reciprocal, np.maximum: r.maximum, np.minimum: r.minimum, np.fmax: r.fmax,
    np.fmin: r.fmin, np.mod: r.mod, np.arctan2: r.arctan2, np.hypot: r.hypot, np.logaddexp: r.logaddexp,
    np.matmul: r.matmul,
    np.exp: r.exp, np.exp2: r.exp2, np.expm1: r.expm1, np.log: r.log, np.log2: r.log2, np.log10: r.log10,
    np.log1p: r.log1p, np.sqrt: r.sqrt, np.cbrt: r.cbrt, np.square: r.square, np.absolute: r.abs,
    np.fabs: r.fabs, np.sin: r.sin, np.cos: r.cos, np.tan: r.tan, np.arcsin: r.arcsin, np.arccos: r.arccos,
    np.arctan: r.arctan, np.sinh: r.sinh, np.cosh: r.cosh, np.tanh: r.tanh, np.arcsinh: r.arcsinh,
    np.arccosh: r.arccosh, np.arctanh: r.arctanh,
    np.deg2rad: lambda x: r.multiply(x, np.pi / 180), np.rad2deg: lambda x: r.multiply(x, 180 / np.pi),
    np.sign: r.sign, np.floor: r.floor, np.ceil: r.ceil, np.rint: r.rint, np.trunc: r.trunc,
    np.floor_divide: r.floor_divide, np.less: r.less, np.less_equal: r.less_equal, np.greater: r.greater,
    np.greater_equal: r.greater_equal, np.equal: r.equal, np.not_equal: r.not_equal,
    np.logical_and: r.logical_and, np.logical_or: r.logical_or, np.logical_not: r.logical_not,
    np.logical_xor: r.logical_xor, np.isfinite: r.isfinite, np.isnan: r.isnan, np.isinf: r.isinf,
})

def _tile(A, reps):
    """np.tile as a reshape, a broadcast and a reshape: differentiable to any order by their rules."""
    reps = tuple(int(k) for k in np.atleast_1d(reps))
    shape = np.shape(A._value if hasattr(A, "_value") else A)
    d = max(len(shape), len(reps))
    shape, reps = (1,) * (d - len(shape)) + shape, (1,) * (d - len(reps)) + reps
    x = r.reshape(A, shape=tuple(v for n in shape for v in (1, n)))
    x = r.broadcast_to(x, shape=tuple(v for k, n in zip(reps, shape) for v in (k, n)))
    return r.reshape(x, shape=tuple(k * n for k, n in zip(reps, shape)))


FUNCTIONS.update({
    np.tile: _tile,
    np.sum: _reduction(r.sum, np.sum),
    np.mean: _reduction(r.mean, np.mean),
    np.max: _reduction(r.max, np.max),
    np.min: _reduction(r.min, np.min),
    np.amax: _reduction(r.max, np.amax),  # NumPy 2 made these functions of their own, not aliases
    np.amin: _reduction(r.min, np.amin),
    np.prod: _reduction(r.prod, np.prod),
    np.dot: _dot,
    np.einsum: _einsum,
    np.reshape: lambda a, shape=None, order="C", **kw: r.reshape(_c_order(a, order), shape=tuple(
        np.atleast_1d(kw.get("newshape", shape)))),
    np.transpose: lambda a, axes=None: r.transpose(a, axes=None if axes is None else tuple(axes)),
    np.swapaxes: lambda a, axis1, axis2: r.swapaxes(a, axis1, axis2),
    np.squeeze: lambda a, axis=None: r.squeeze(a, axis=_axis(axis)),
    np.expand_dims: lambda a, axis: r.expand_dims(a, axis=_axis(axis)),
    np.ravel: lambda a, order="C": r.reshape(_c_order(a, order), shape=(-1,)),
    np.broadcast_to: lambda array, shape, subok=False: r.broadcast_to(array, shape=tuple(np.atleast_1d(shape))),
    np.concatenate: lambda arrays, axis=0, **kw: r.concatenate(
        *(arrays if axis is not None else [r.reshape(a, (-1,)) for a in arrays]), axis=0 if axis is None else axis),
    np.stack: lambda arrays, axis=0, **kw: r.stack(*arrays, axis=axis),
    np.split: _split,
    np.clip: _clip,
    np.pad: _pad,
    np.take: _take,
    np.where: _where,
    np.outer: lambda a, b, out=None: r.multiply(r.reshape(a, shape=(-1, 1)), r.reshape(b, shape=(1, -1))),
    np.copy: lambda a, **kw: r.positive(a),
    np.cumsum: _cumsum,
    np.diagonal: lambda a, offset=0, axis1=0, axis2=1: r.diagonal(a, offset, axis1, axis2),
    np.trace: lambda a, offset=0, axis1=0, axis2=1, dtype=None, out=None: r.sum(
        r.diagonal(a, offset, axis1, axis2), axis=-1),
    np.moveaxis: _moveaxis,
    np.flip: lambda m, axis=None: r.getitem(m, tuple(
        slice(None, None, -1) if axis is None or n in np.atleast_1d(axis) % np.ndim(value(m)) else slice(None)
        for n in range(np.ndim(value(m))))),
    np.linalg.norm: _norm,
    np.linalg.solve: lambda a, b: r.linalg_solve(a, b),
    np.linalg.inv: lambda a: r.linalg_inv(a),
    np.linalg.det: lambda a: r.linalg_det(a),
    np.linalg.cholesky: lambda a: r.linalg_cholesky(a),
    np.cross: lambda a, b: r.cross(a, b),
    np.argmax: lambda a, axis=None, **kw: r.argmax(a, axis=axis),
    np.argmin: lambda a, axis=None, **kw: r.argmin(a, axis=axis),
    np.round: lambda a, decimals=0, out=None: r.round(a, decimals),
    np.real: lambda val: r.real(val),
    np.around: lambda a, decimals=0, out=None: r.round(a, decimals),
})

FUNCTIONS.update({f: _no_gradient(f) for f in (
    np.zeros_like, np.ones_like, np.empty_like, np.full_like, np.shape, np.ndim, np.size, np.argsort,
    np.nonzero, np.count_nonzero, np.allclose, np.isclose, np.array_equal, np.result_type)})


# -- Python's arithmetic operators on Tensors ------------------------------------------------------

for _name, _op in (("add", r.add), ("sub", r.subtract), ("mul", r.multiply), ("truediv", r.divide),
                   ("floordiv", r.floor_divide), ("mod", r.mod), ("pow", r.power), ("matmul", r.matmul)):
    setattr(Tensor, f"__{_name}__", operator_method(_op))
    setattr(Tensor, f"__r{_name}__", lambda self, other, op=_op: op(other, self))
