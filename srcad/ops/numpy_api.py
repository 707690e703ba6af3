"""Which srcad operation answers each NumPy call made on Tensors.

``UFUNCS`` answers ``Tensor.__array_ufunc__`` and ``FUNCTIONS`` answers
``Tensor.__array_function__``; adapters translate NumPy's signatures to the
primitives of ``rules``.  A NumPy function missing here still runs, without a
gradient, and raises ``NotImplementedError`` if a recording tape needs one.
"""

import numpy as np

from ..tensor import Tensor
from . import rules as r
from .registry import FUNCTIONS, UFUNCS, value


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
    if ord not in (None, 2, "fro") or (ord == 2 and (axis is None and np.ndim(value(x)) == 2)):
        raise NotImplementedError(f"srcad: np.linalg.norm supports the Euclidean/Frobenius norm only, got ord={ord!r}")
    return r.linalg_norm(x, axis=_axis(axis), keepdims=keepdims)


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
    np.reciprocal: r.reciprocal, np.maximum: r.maximum, np.minimum: r.minimum, np.fmax: r.maximum,
    np.fmin: r.minimum, np.mod: r.mod, np.arctan2: r.arctan2, np.hypot: r.hypot, np.logaddexp: r.logaddexp,
    np.matmul: r.matmul,
    np.exp: r.exp, np.exp2: r.exp2, np.expm1: r.expm1, np.log: r.log, np.log2: r.log2, np.log10: r.log10,
    np.log1p: r.log1p, np.sqrt: r.sqrt, np.cbrt: r.cbrt, np.square: r.square, np.absolute: r.abs,
    np.fabs: r.fabs, np.sin: r.sin, np.cos: r.cos, np.tan: r.tan, np.arcsin: r.arcsin, np.arccos: r.arccos,
    np.arctan: r.arctan, np.sinh: r.sinh, np.cosh: r.cosh, np.tanh: r.tanh, np.arcsinh: r.arcsinh,
    np.arccosh: r.arccosh, np.arctanh: r.arctanh,
    np.sign: r.sign, np.floor: r.floor, np.ceil: r.ceil, np.rint: r.rint, np.trunc: r.trunc,
    np.floor_divide: r.floor_divide, np.less: r.less, np.less_equal: r.less_equal, np.greater: r.greater,
    np.greater_equal: r.greater_equal, np.equal: r.equal, np.not_equal: r.not_equal,
    np.logical_and: r.logical_and, np.logical_or: r.logical_or, np.logical_not: r.logical_not,
    np.logical_xor: r.logical_xor, np.isfinite: r.isfinite, np.isnan: r.isnan, np.isinf: r.isinf,
})

FUNCTIONS.update({
    np.sum: lambda a, axis=None, dtype=None, out=None, keepdims=False, **kw: r.sum(a, axis=_axis(axis), keepdims=keepdims),
    np.mean: lambda a, axis=None, dtype=None, out=None, keepdims=False, **kw: r.mean(a, axis=_axis(axis), keepdims=keepdims),
    np.max: lambda a, axis=None, out=None, keepdims=False, **kw: r.max(a, axis=_axis(axis), keepdims=keepdims),
    np.min: lambda a, axis=None, out=None, keepdims=False, **kw: r.min(a, axis=_axis(axis), keepdims=keepdims),
    np.prod: lambda a, axis=None, dtype=None, out=None, keepdims=False, **kw: r.prod(a, axis=_axis(axis), keepdims=keepdims),
    np.dot: _dot,
    np.einsum: lambda subscripts, *operands, **kw: r.einsum(*operands, subscripts=subscripts),
    np.reshape: lambda a, shape=None, order="C", **kw: r.reshape(a, shape=tuple(np.atleast_1d(kw.get("newshape", shape)))),
    np.transpose: lambda a, axes=None: r.transpose(a, axes=None if axes is None else tuple(axes)),
    np.swapaxes: lambda a, axis1, axis2: r.swapaxes(a, axis1, axis2),
    np.squeeze: lambda a, axis=None: r.squeeze(a, axis=_axis(axis)),
    np.expand_dims: lambda a, axis: r.expand_dims(a, axis=_axis(axis)),
    np.ravel: lambda a, order="C": r.reshape(a, shape=(-1,)),
    np.broadcast_to: lambda array, shape, subok=False: r.broadcast_to(array, shape=tuple(np.atleast_1d(shape))),
    np.concatenate: lambda arrays, axis=0, **kw: r.concatenate(*arrays, axis=axis),
    np.stack: lambda arrays, axis=0, **kw: r.stack(*arrays, axis=axis),
    np.split: _split,
    np.clip: lambda a, a_min=None, a_max=None, **kw: r.clip(a, -np.inf if a_min is None else a_min,
                                                            np.inf if a_max is None else a_max),
    np.pad: _pad,
    np.take: _take,
    np.where: _where,
    np.outer: lambda a, b, out=None: r.multiply(r.reshape(a, shape=(-1, 1)), r.reshape(b, shape=(1, -1))),
    np.copy: lambda a, **kw: r.positive(a),
    np.linalg.norm: _norm,
    np.linalg.solve: lambda a, b: r.linalg_solve(a, b),
    np.linalg.inv: lambda a: r.linalg_inv(a),
    np.linalg.det: lambda a: r.linalg_det(a),
    np.argmax: lambda a, axis=None, **kw: r.argmax(a, axis=axis),
    np.argmin: lambda a, axis=None, **kw: r.argmin(a, axis=axis),
    np.round: lambda a, decimals=0, out=None: r.round(a, decimals),
    np.around: lambda a, decimals=0, out=None: r.round(a, decimals),
})

FUNCTIONS.update({f: _no_gradient(f) for f in (
    np.zeros_like, np.ones_like, np.empty_like, np.full_like, np.shape, np.ndim, np.size, np.argsort,
    np.nonzero, np.count_nonzero, np.allclose, np.isclose, np.array_equal, np.result_type)})
