"""The eager rule table: every differentiable NumPy function and its VJPs.

One entry per function: ``exp = primitive(np.exp, lambda g, ans, x: g * ans)``
reads "the cotangent of x is g times the answer".  Each rule is called as
``rule(g, ans, *inputs, **attrs)`` and must return the cotangent of its input,
built from the primitives in this file (so it can be differentiated again).
Functions whose inputs broadcast together are made with ``elementwise``: their
rules return the cotangent at the result's shape, and the primitive sums it down
to each input's shape.  ``g`` may carry leading batch axes (see
``registry.batch_ndim``).
"""

import builtins
import operator
import math

import numpy as np

from ..tensor import Tensor
from .registry import Primitive, batch_ndim, nondifferentiable, primitive, value


# -- helpers used by the rules ------------------------------------------------------

def _shape(x):
    try:
        return (x._value if isinstance(x, Tensor) else x).shape
    except AttributeError:  # Python numbers and lists
        return np.shape(x)


def unbroadcast(g, x, ans):
    """Sum the cotangent ``g`` of a broadcast result down to ``x``'s shape (batch axes kept)."""
    shape = _shape(x)
    if getattr(g, "shape", None) == shape:  # no broadcast: the common case, kept cheap
        return g
    b = batch_ndim(g, ans)
    extra = np.ndim(value(g)) - b - len(shape)
    if extra:
        g = sum(g, axis=tuple(range(b, b + extra)))
    gshape = _shape(g)
    axes = tuple(b + i for i, n in enumerate(shape) if n == 1 and gshape[b + i] != 1)
    return sum(g, axis=axes, keepdims=True) if axes else g


def elementwise(fn, *vjps, name=None):
    """A primitive of inputs that broadcast together: its rules return cotangents at the result's
    shape, and the primitive sums each one down to its input's shape with ``unbroadcast``."""
    return Primitive(name or fn.__name__, fn, vjps, unbroadcast)


def _axes(axis, ndim):
    """Normalise an ``axis`` argument to a sorted tuple of non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    return tuple(sorted(int(a) % ndim if ndim else 0 for a in axes))


def _restore_reduced(g, ans, x, axis, keepdims):
    """Give a reduction's cotangent back its reduced axes (size 1), then broadcast to ``x``."""
    b, ndim = batch_ndim(g, ans), np.ndim(value(x))
    if not keepdims and ndim:
        g = reshape(g, _shape(g)[:b] + tuple(1 if i in _axes(axis, ndim) else n for i, n in enumerate(_shape(x))))
    return broadcast_to(g, _shape(g)[:b] + _shape(x))


def _with_batch(g, ans, index):
    """Prefix an index (a tuple) with full slices over the cotangent's batch axes."""
    return (slice(None),) * batch_ndim(g, ans) + index


def _index(index):
    """A NumPy index as a tuple of plain values (Tensors in it replaced by their values)."""
    index = index if isinstance(index, tuple) else (index,)
    return tuple(i._value if isinstance(i, Tensor) else i for i in index)


def _power_x(g, ans, x, y):
    if isinstance(y, (int, float)):  # a Python exponent stays weakly typed (float32 stays float32)
        return g * y * x ** (y - 1) if y != 0 else g * 0.0
    return g * y * x ** where(y != 0, y - 1, 0.0)


def _log_base(x):
    """log(x) where x > 0, else 0 (the y-gradient of x ** y is taken as 0 there)."""
    if isinstance(x, (int, float)):
        return math.log(x) if x > 0 else 0.0
    return log(where(x > 0, x, 1.0))


def _swap_last(x):
    return swapaxes(x, -1, -2)


def _is_float(x):
    return np.asarray(value(x)).dtype.kind in "fc"


# -- arithmetic ---------------------------------------------------------------------

add = elementwise(operator.add, lambda g, ans, x, y: g, lambda g, ans, x, y: g, name="add")
subtract = elementwise(operator.sub, lambda g, ans, x, y: g, lambda g, ans, x, y: negative(g), name="subtract")
multiply = elementwise(operator.mul, lambda g, ans, x, y: g * y, lambda g, ans, x, y: g * x, name="multiply")
divide = elementwise(operator.truediv, lambda g, ans, x, y: g / y, lambda g, ans, x, y: negative(g) * ans / y,
                     name="divide")
power = elementwise(np.power, _power_x, lambda g, ans, x, y: g * ans * _log_base(x))
negative = primitive(operator.neg, lambda g, ans, x: negative(g), name="negative")
positive = primitive(np.positive, lambda g, ans, x: g)
reciprocal = primitive(np.reciprocal, lambda g, ans, x: negative(g) * ans * ans)
# maximum/minimum: TensorFlow's rule, a tie (and a NaN) sends the whole cotangent to one side, x's on
# x >= y (x <= y), y's on the complement; fmax/fmin send it to the side they return (the non-NaN one).
maximum = elementwise(np.maximum, lambda g, ans, x, y: where(x >= y, g, 0.0), lambda g, ans, x, y: where(x >= y, 0.0, g))
minimum = elementwise(np.minimum, lambda g, ans, x, y: where(x <= y, g, 0.0), lambda g, ans, x, y: where(x <= y, 0.0, g))
fmax = elementwise(np.fmax, lambda g, ans, x, y: where(logical_or(x >= y, isnan(y)), g, 0.0),
                   lambda g, ans, x, y: where(logical_or(x >= y, isnan(y)), 0.0, g))
fmin = elementwise(np.fmin, lambda g, ans, x, y: where(logical_or(x <= y, isnan(y)), g, 0.0),
                   lambda g, ans, x, y: where(logical_or(x <= y, isnan(y)), 0.0, g))
mod = elementwise(np.mod, lambda g, ans, x, y: g, lambda g, ans, x, y: negative(g) * floor_divide(x, y))
arctan2 = elementwise(np.arctan2, lambda g, ans, y, x: g * x / (x * x + y * y),
                      lambda g, ans, y, x: negative(g) * y / (x * x + y * y))
hypot = elementwise(np.hypot, lambda g, ans, x, y: g * x / ans, lambda g, ans, x, y: g * y / ans)
logaddexp = elementwise(np.logaddexp, lambda g, ans, x, y: g * exp(x - ans), lambda g, ans, x, y: g * exp(y - ans))

# -- elementwise functions -------------------------------------------------------------

exp = primitive(np.exp, lambda g, ans, x: g * ans)
exp2 = primitive(np.exp2, lambda g, ans, x: g * ans * 0.6931471805599453)
expm1 = primitive(np.expm1, lambda g, ans, x: g * (ans + 1.0))
log = primitive(np.log, lambda g, ans, x: g / x)
log2 = primitive(np.log2, lambda g, ans, x: g / (x * 0.6931471805599453))
log10 = primitive(np.log10, lambda g, ans, x: g / (x * 2.302585092994046))
log1p = primitive(np.log1p, lambda g, ans, x: g / (x + 1.0))
sqrt = primitive(np.sqrt, lambda g, ans, x: g * 0.5 / ans)
cbrt = primitive(np.cbrt, lambda g, ans, x: g / (3.0 * ans * ans))
square = primitive(np.square, lambda g, ans, x: g * 2.0 * x)
abs = primitive(np.absolute, lambda g, ans, x: g * sign(x), name="abs")
fabs = primitive(np.fabs, lambda g, ans, x: g * sign(x))
sin = primitive(np.sin, lambda g, ans, x: g * cos(x))
cos = primitive(np.cos, lambda g, ans, x: negative(g) * sin(x))
tan = primitive(np.tan, lambda g, ans, x: g * (1.0 + ans * ans))
arcsin = primitive(np.arcsin, lambda g, ans, x: g / sqrt(1.0 - x * x))
arccos = primitive(np.arccos, lambda g, ans, x: negative(g) / sqrt(1.0 - x * x))
arctan = primitive(np.arctan, lambda g, ans, x: g / (1.0 + x * x))
sinh = primitive(np.sinh, lambda g, ans, x: g * cosh(x))
cosh = primitive(np.cosh, lambda g, ans, x: g * sinh(x))
tanh = primitive(np.tanh, lambda g, ans, x: g * (1.0 - ans * ans))
arcsinh = primitive(np.arcsinh, lambda g, ans, x: g / sqrt(x * x + 1.0))
arccosh = primitive(np.arccosh, lambda g, ans, x: g / sqrt(x * x - 1.0))
arctanh = primitive(np.arctanh, lambda g, ans, x: g / (1.0 - x * x))
where = elementwise(lambda c, x, y: np.where(c, x, y), None,
                    lambda g, ans, c, x, y: where(c, g, 0.0), lambda g, ans, c, x, y: where(c, 0.0, g), name="where")
clip = elementwise(lambda x, lo, hi: np.clip(x, lo, hi),
                   lambda g, ans, x, lo, hi: where(logical_and(x >= lo, x <= hi), g, 0.0),
                   lambda g, ans, x, lo, hi: where(x < lo, g, 0.0),
                   lambda g, ans, x, lo, hi: where(logical_and(x > hi, x >= lo), g, 0.0), name="clip")
real = primitive(np.real, lambda g, ans, x: cast(g, value(x).dtype) if _is_float(x) else None)
cast = primitive(lambda x, dtype: np.asarray(x).astype(dtype),
                 lambda g, ans, x, dtype: cast(g, value(x).dtype) if _is_float(ans) else None, name="cast")

# -- results that carry no gradient ------------------------------------------------------

sign = nondifferentiable(np.sign)
floor = nondifferentiable(np.floor)
ceil = nondifferentiable(np.ceil)
rint = nondifferentiable(np.rint)
trunc = nondifferentiable(np.trunc)
floor_divide = nondifferentiable(np.floor_divide)
less = nondifferentiable(np.less)
less_equal = nondifferentiable(np.less_equal)
greater = nondifferentiable(np.greater)
greater_equal = nondifferentiable(np.greater_equal)
equal = nondifferentiable(np.equal)
not_equal = nondifferentiable(np.not_equal)
logical_and = nondifferentiable(np.logical_and)
logical_or = nondifferentiable(np.logical_or)
logical_not = nondifferentiable(np.logical_not)
logical_xor = nondifferentiable(np.logical_xor)
isfinite = nondifferentiable(np.isfinite)
isnan = nondifferentiable(np.isnan)
isinf = nondifferentiable(np.isinf)
argmax = nondifferentiable(lambda x, axis=None: np.argmax(x, axis=axis), name="argmax")
argmin = nondifferentiable(lambda x, axis=None: np.argmin(x, axis=axis), name="argmin")
round = nondifferentiable(lambda x, decimals=0: np.round(x, decimals), name="round")

# -- reductions ---------------------------------------------------------------------------


def _extremum_vjp(g, ans, x, axis=None, keepdims=False):
    """Share the cotangent equally among the positions that attain the max/min: TensorFlow's reduce_max
    rule, ``[0.5, 0, 0.5]`` for ``[2, 1, 2]``, which the compiled adjoint must match (issue 9)."""
    at_extremum = equal(x, _restore_reduced(ans, ans, x, axis, keepdims))
    weights = cast(at_extremum, value(ans).dtype)
    weights = weights / _restore_reduced(sum(weights, axis=axis, keepdims=keepdims), ans, x, axis, keepdims)
    return _restore_reduced(g, ans, x, axis, keepdims) * weights


def _count(x, axis):
    return float(np.prod([_shape(x)[a] for a in _axes(axis, np.ndim(value(x)))]))


sum = primitive(lambda x, axis=None, keepdims=False: np.sum(x, axis=axis, keepdims=keepdims),
                lambda g, ans, x, axis=None, keepdims=False: _restore_reduced(g, ans, x, axis, keepdims), name="sum")
mean = primitive(lambda x, axis=None, keepdims=False: np.mean(x, axis=axis, keepdims=keepdims),
                 lambda g, ans, x, axis=None, keepdims=False: _restore_reduced(g, ans, x, axis, keepdims) / _count(x, axis),
                 name="mean")
max = primitive(lambda x, axis=None, keepdims=False: np.max(x, axis=axis, keepdims=keepdims), _extremum_vjp, name="max")
min = primitive(lambda x, axis=None, keepdims=False: np.min(x, axis=axis, keepdims=keepdims), _extremum_vjp, name="min")
prod = primitive(lambda x, axis=None, keepdims=False: np.prod(x, axis=axis, keepdims=keepdims),
                 lambda g, ans, x, axis=None, keepdims=False:
                 _restore_reduced(g * ans, ans, x, axis, keepdims) / x, name="prod")

# -- linear algebra ----------------------------------------------------------------------------


def _matmul_vjp_x(g, ans, x, y):
    if np.ndim(value(y)) == 1:
        return unbroadcast(expand_dims(g, -1) * y, x, ans)
    if np.ndim(value(x)) == 1:
        return unbroadcast(sum(expand_dims(g, -2) * y, axis=-1), x, ans)
    return unbroadcast(matmul(g, _swap_last(y)), x, ans)


def _matmul_vjp_y(g, ans, x, y):
    if np.ndim(value(x)) == 1 and np.ndim(value(y)) == 1:
        return unbroadcast(expand_dims(g, -1) * x, y, ans)
    if np.ndim(value(x)) == 1:
        return unbroadcast(expand_dims(x, -1) * expand_dims(g, -2), y, ans)
    if np.ndim(value(y)) == 1:
        return unbroadcast(sum(expand_dims(g, -1) * x, axis=-2), y, ans)
    return unbroadcast(matmul(_swap_last(x), g), y, ans)


matmul = primitive(np.matmul, _matmul_vjp_x, _matmul_vjp_y)


def _einsum_vjp(i):
    """The cotangent of operand ``i`` of an einsum: another einsum with ``g`` in its place."""
    def rule(g, ans, *operands, subscripts):
        ins, out = _parse_einsum(subscripts)
        b = batch_ndim(g, ans)
        batch = "".join([c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in subscripts][:b])
        if len(set(ins[i])) != len(ins[i]):
            raise NotImplementedError(f"srcad: no gradient for einsum '{subscripts}': operand {i} repeats an index")
        others = [o for k, o in enumerate(operands) if k != i]
        present = set(out).union(*[ins[k] for k in range(len(operands)) if k != i])
        kept = "".join(c for c in ins[i] if c in present)
        spec = ",".join([batch + out] + [ins[k] for k in range(len(operands)) if k != i]) + "->" + batch + kept
        grad = einsum(g, *others, subscripts=spec)
        if kept != ins[i]:  # indices only this operand has: the result is constant along them
            shape = _shape(operands[i])
            grad = reshape(grad, _shape(grad)[:b] + tuple(n if c in present else 1 for c, n in zip(ins[i], shape)))
            grad = broadcast_to(grad, _shape(grad)[:b] + shape)
        return grad
    return rule


def _parse_einsum(subscripts):
    spec = subscripts.replace(" ", "")
    if "." in spec:
        raise NotImplementedError(f"srcad: einsum with '...' is not supported ('{subscripts}'); name every axis")
    ins, _, out = spec.partition("->")
    ins = ins.split(",")
    if not _:
        letters = "".join(ins)
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    return ins, out


einsum = primitive(lambda *ops, subscripts: np.einsum(subscripts, *ops), name="einsum")


def _linalg_inv_vjp(g, ans, x):
    return negative(matmul(matmul(_swap_last(ans), g), _swap_last(ans)))


def _linalg_det_vjp(g, ans, x):
    return expand_dims(expand_dims(g * ans, -1), -1) * _swap_last(linalg_inv(x))


def _solve(a, b):
    return np.linalg.solve(a, b[..., None])[..., 0] if np.ndim(b) == 1 else np.linalg.solve(a, b)


def _linalg_solve_vjp_a(g, ans, a, b):
    gb = _linalg_solve_vjp_b(g, ans, a, b)
    if np.ndim(value(b)) == 1:
        return negative(expand_dims(gb, -1) * ans)
    return negative(matmul(gb, _swap_last(ans)))


def _linalg_solve_vjp_b(g, ans, a, b):
    if np.ndim(value(b)) == 1:
        return sum(expand_dims(g, -2) * linalg_inv(_swap_last(a)), axis=-1)
    return linalg_solve(_swap_last(a), g)


def _linalg_cholesky_vjp(g, ans, x):
    """With S = L⁻ᵀ Φ(Lᵀ g) L⁻¹ (Φ: the lower triangle, its diagonal halved): S + Sᵀ below the diagonal,
    S on it, 0 above (np.linalg.cholesky reads the lower triangle only)."""
    n = np.shape(value(ans))[-1]
    back = linalg_inv(ans)
    s = matmul(matmul(_swap_last(back), matmul(_swap_last(ans), g) * (np.tri(n) - 0.5 * np.eye(n))), back)
    return (s + _swap_last(s)) * np.tri(n, k=-1) + s * np.eye(n)


def _norm(x, axis=None, keepdims=False):
    return np.sqrt(np.sum(np.square(x), axis=axis, keepdims=keepdims))


cross = elementwise(np.cross, lambda g, ans, a, b: cross(b, g),      # <g, a × b> = <a, b × g> = <b, g × a>
                    lambda g, ans, a, b: cross(g, a))
linalg_inv = primitive(np.linalg.inv, _linalg_inv_vjp, name="linalg.inv")
linalg_det = primitive(np.linalg.det, _linalg_det_vjp, name="linalg.det")
linalg_solve = primitive(_solve, _linalg_solve_vjp_a, _linalg_solve_vjp_b, name="linalg.solve")
linalg_cholesky = primitive(np.linalg.cholesky, _linalg_cholesky_vjp, name="linalg.cholesky")
linalg_norm = primitive(_norm, lambda g, ans, x, axis=None, keepdims=False:
                        _restore_reduced(g / where(ans > 0, ans, 1.0), ans, x, axis, keepdims) * x, name="linalg.norm")

# -- shapes and indexing ----------------------------------------------------------------------------


def _lead(g, ans):
    return _shape(g)[:batch_ndim(g, ans)]


def _inverse_permutation(axes, ndim):
    axes = tuple(range(ndim))[::-1] if axes is None else tuple(a % ndim for a in axes)
    return tuple(np.argsort(axes))


def _scatter(g, index, shape):
    out = np.zeros(shape, dtype=np.asarray(g).dtype)
    np.add.at(out, index, g)
    return out


reshape = primitive(lambda x, shape: np.reshape(x, shape),
                    lambda g, ans, x, shape: reshape(g, _lead(g, ans) + _shape(x)), name="reshape")
transpose = primitive(lambda x, axes=None: np.transpose(x, axes),
                      lambda g, ans, x, axes=None: transpose(
                          g, tuple(range(batch_ndim(g, ans))) + tuple(
                              batch_ndim(g, ans) + a for a in _inverse_permutation(axes, np.ndim(value(x))))),
                      name="transpose")
swapaxes = primitive(lambda x, a1, a2: np.swapaxes(x, a1, a2),
                     lambda g, ans, x, a1, a2: swapaxes(g, a1 % np.ndim(value(x)) + batch_ndim(g, ans),
                                                        a2 % np.ndim(value(x)) + batch_ndim(g, ans)),
                     name="swapaxes")
expand_dims = primitive(lambda x, axis: np.expand_dims(x, axis),
                        lambda g, ans, x, axis: reshape(g, _lead(g, ans) + _shape(x)), name="expand_dims")
squeeze = primitive(lambda x, axis=None: np.squeeze(x, axis),
                    lambda g, ans, x, axis=None: reshape(g, _lead(g, ans) + _shape(x)), name="squeeze")
broadcast_to = primitive(lambda x, shape: np.broadcast_to(x, shape),
                         lambda g, ans, x, shape: unbroadcast(g, x, ans), name="broadcast_to")
_getitem = primitive(lambda x, index: x[index],
                    lambda g, ans, x, index: scatter_add(g, index=_with_batch(g, ans, index),
                                                         shape=_lead(g, ans) + _shape(x)), name="getitem")
scatter_add = primitive(_scatter, lambda g, ans, x, index, shape: getitem(g, index=_with_batch(g, ans, index)),
                        name="scatter_add")


def getitem(x, index):
    """``x[index]`` (basic, fancy and boolean indices); the cotangent is scattered back."""
    return _getitem(x, index=_index(index))


def diagonal(x, offset=0, axis1=0, axis2=1):
    """``np.diagonal``: the two axes go last, then a fancy index picks the diagonal."""
    ndim = np.ndim(value(x))
    axis1, axis2 = axis1 % ndim, axis2 % ndim
    n1, n2 = _shape(x)[axis1], _shape(x)[axis2]
    k = builtins.max(0, builtins.min(n1 - builtins.max(-offset, 0), n2 - builtins.max(offset, 0)))
    rows, cols = np.arange(k) + builtins.max(-offset, 0), np.arange(k) + builtins.max(offset, 0)
    perm = tuple(a for a in range(ndim) if a not in (axis1, axis2)) + (axis1, axis2)
    return getitem(transpose(x, axes=perm), (Ellipsis, rows, cols))


def _flip(x, axis):
    return _getitem(x, index=(slice(None),) * axis + (slice(None, None, -1),))


def _cumsum_vjp(g, ans, x, axis):
    axis = axis % np.ndim(value(x)) + batch_ndim(g, ans)
    return _flip(cumsum(_flip(g, axis), axis=axis), axis)


cumsum = primitive(lambda x, axis: np.cumsum(x, axis=axis), _cumsum_vjp, name="cumsum")


def _concat_vjp(i):
    def rule(g, ans, *xs, axis):
        start = builtins.sum(_shape(x)[axis % np.ndim(value(ans))] for x in xs[:i])
        size = _shape(xs[i])[axis % np.ndim(value(ans))]
        index = (slice(None),) * (axis % np.ndim(value(ans))) + (slice(start, start + size),)
        return getitem(g, index=_with_batch(g, ans, index))
    return rule


def _stack_vjp(i):
    def rule(g, ans, *xs, axis):
        return getitem(g, index=_with_batch(g, ans, (slice(None),) * (axis % np.ndim(value(ans))) + (i,)))
    return rule


class _PerOperand:
    """Rules for functions of any number of operands (concatenate, stack)."""

    def __init__(self, make_rule):
        self.make_rule = make_rule

    def __getitem__(self, i):
        return self.make_rule(i)

    def __len__(self):
        return 1 << 30


concatenate = primitive(lambda *xs, axis=0: np.concatenate(xs, axis=axis), name="concatenate")
concatenate.vjps = _PerOperand(_concat_vjp)
stack = primitive(lambda *xs, axis=0: np.stack(xs, axis=axis), name="stack")
stack.vjps = _PerOperand(_stack_vjp)
einsum.vjps = _PerOperand(_einsum_vjp)


def _pad(x, pad_width, constant_values=0.0):
    return np.pad(x, pad_width, mode="constant", constant_values=constant_values)


def _pad_vjp(g, ans, x, pad_width, constant_values=0.0):
    widths = np.broadcast_to(np.asarray(pad_width, dtype=int), (np.ndim(value(x)), 2))
    index = tuple(slice(int(lo), int(lo) + n) for (lo, _), n in zip(widths, _shape(x)))
    return getitem(g, index=_with_batch(g, ans, index))


pad_constant = primitive(_pad, _pad_vjp, name="pad")
