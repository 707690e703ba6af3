"""Primitives: NumPy functions paired with their VJP rules, and NumPy dispatch.

A ``Primitive`` runs its NumPy function on plain values and, when a tape is
recording, puts itself on the tape.  Its VJP rules (one per input, autograd
style) are written with srcad operations, so they are differentiable again, and
they accept cotangents with extra *leading batch axes* (``jacobian`` sends a
whole batch of cotangents through one backward sweep): a rule finds the number
of batch axes as ``g.ndim - ans.ndim``.

``UFUNCS`` and ``FUNCTIONS`` map NumPy callables to srcad implementations; the
Tensor's ``__array_ufunc__`` / ``__array_function__`` look them up here.
"""

import numpy as np

from ..tape import _NO_ATTRS, _thread, needs_gradient, record
from ..tensor import Tensor

_PYTHON_SCALARS = (float, int, bool, complex)
_new_object = object.__new__
UFUNCS = {}
FUNCTIONS = {}


class Primitive:
    """A NumPy function with one VJP rule per input (``None``: no gradient to it).

    ``unbroadcast``: for elementwise functions whose inputs broadcast together,
    the function that sums a result-shaped cotangent down to an input's shape.
    Their rules then return cotangents at the result's shape, and ``vjp`` sums
    only those whose shape differs (the common equal-shape case costs nothing).
    """

    __slots__ = ("name", "fn", "vjps", "unbroadcast")

    def __init__(self, name, fn, vjps, unbroadcast=None):
        self.name = name
        self.fn = fn
        self.vjps = vjps
        self.unbroadcast = unbroadcast

    def __call__(self, *args, **attrs):
        out = self.fn(*[a._value if isinstance(a, Tensor) else a for a in args], **attrs)
        if type(out) in _PYTHON_SCALARS:  # operator-based arithmetic on two Python numbers
            out = np.asarray(out)[()]
        result = _new_object(Tensor)
        result._value = out
        if self.vjps is not None:
            tapes = _thread.tapes
            if tapes:
                record(self, args, (result,), attrs, tapes)
        return result

    def vjp(self, node, out_grads, needed):
        """Input cotangents.  A plain NumPy cotangent means no tape records the
        backward pass (see ``GradientTape._backprop``): the rules then run on plain
        values, which is much faster; a Tensor cotangent keeps everything recorded."""
        g, ans, inputs = out_grads[0], node.outputs[0], node.inputs
        raw = not isinstance(g, Tensor)
        if raw:
            ans = ans._value
        vjps, attrs = self.vjps, node.attrs
        n = len(vjps)
        if len(needed) == 2 and n >= 2:  # binary operators: the hot path
            x, y = inputs
            if raw:
                x = x._value if isinstance(x, Tensor) else x
                y = y._value if isinstance(y, Tensor) else y
            rx, ry = vjps[0], vjps[1]
            if attrs:
                gx = rx(g, ans, x, y, **attrs) if needed[0] and rx is not None else None
                gy = ry(g, ans, x, y, **attrs) if needed[1] and ry is not None else None
            else:
                gx = rx(g, ans, x, y) if needed[0] and rx is not None else None
                gy = ry(g, ans, x, y) if needed[1] and ry is not None else None
            unbroadcast = self.unbroadcast
            if unbroadcast is not None:
                if gx is not None and gx.shape != x.shape:
                    gx = unbroadcast(gx, x, ans)
                if gy is not None and gy.shape != y.shape:
                    gy = unbroadcast(gy, y, ans)
            return [gx, gy]
        if raw:
            inputs = [x._value if isinstance(x, Tensor) else x for x in inputs]
        grads = [vjps[i](g, ans, *inputs, **attrs) if need and i < n and vjps[i] is not None else None
                 for i, need in enumerate(needed)]
        if self.unbroadcast is not None:
            grads = [gi if gi is None else self.unbroadcast(gi, x, ans) for gi, x in zip(grads, inputs)]
        return grads

    def __repr__(self):
        return f"<srcad primitive {self.name}>"


def operator_method(op):
    """``Tensor.__add__`` and kin: ``op(self, other)``, with the primitive's body inlined because
    eager arithmetic on small values is dominated by Python call overhead."""
    fn = op.fn

    def method(self, other):
        result = _new_object(Tensor)
        result._value = fn(self._value, other._value if isinstance(other, Tensor) else other)
        tapes = _thread.tapes
        if tapes:
            record(op, (self, other), (result,), _NO_ATTRS, tapes)
        return result

    return method if op.vjps is not None else lambda self, other: op(self, other)


def primitive(fn, *vjps, name=None):
    """Make a differentiable primitive from a NumPy function and its VJP rules."""
    return Primitive(name or fn.__name__, fn, vjps)


def nondifferentiable(fn, name=None):
    """A primitive whose result never carries a gradient (comparisons, argmax, floor ...)."""
    return Primitive(name or fn.__name__, fn, None)


def value(x):
    """The NumPy value of a Tensor or of a plain value."""
    return x._value if isinstance(x, Tensor) else x


def batch_ndim(g, ans):
    """How many leading batch axes the cotangent ``g`` carries beyond ``ans``'s shape."""
    return np.ndim(value(g)) - np.ndim(value(ans))


def _qualified_name(func):
    module = getattr(func, "__module__", None) or "numpy"
    return f"{module}.{getattr(func, '__name__', repr(func))}"


def _raise_if_differentiating(name, args):
    """An op without a rule may run only where no tape would need its gradient."""
    tapes = _thread.tapes
    if tapes and any(needs_gradient(a, tapes) for a in _flatten_args(args)):
        raise NotImplementedError(
            f"srcad has no gradient rule for {name}, and a recording tape needs one here. Compute it on "
            f"values outside the tape (x.numpy()), wrap it with ad.stop_gradient, or give it a gradient "
            f"with ad.custom_gradient.")


def _flatten_args(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _flatten_args(a)
        else:
            yield a


def _unwrap_nested(a):
    if isinstance(a, Tensor):
        return a._value
    if isinstance(a, (list, tuple)):
        return type(a)(_unwrap_nested(x) for x in a)
    return a


def _wrap_result(result):
    if isinstance(result, (np.ndarray, np.generic)):
        return Tensor._wrap(result)
    if isinstance(result, (list, tuple)):
        return type(result)(_wrap_result(r) for r in result)
    return result


def _run_without_gradient(func, name, args, kwargs):
    _raise_if_differentiating(name, args)
    return _wrap_result(func(*_unwrap_nested(args), **{k: _unwrap_nested(v) for k, v in kwargs.items()}))


def dispatch_ufunc(ufunc, method, inputs, kwargs):
    """``Tensor.__array_ufunc__``: a registered ufunc records; others (and calls with options such as
    ``where=``, ``dtype=``) run without a gradient, raising if a tape would need one."""
    if "out" in kwargs:
        raise TypeError(f"numpy.{ufunc.__name__}(..., out=...) cannot write into a Tensor: Tensors are immutable")
    impl = UFUNCS.get(ufunc) if method == "__call__" and not kwargs else None
    if impl is not None:
        return impl(*inputs, **kwargs)
    name = f"numpy.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}") + (
        f"(..., {', '.join(f'{k}=' for k in kwargs)})" if kwargs else "")
    return _run_without_gradient(getattr(ufunc, method), name, inputs, kwargs)


def dispatch_function(func, args, kwargs):
    """``Tensor.__array_function__``: a registered function records; others run without a gradient."""
    impl = FUNCTIONS.get(func)
    if impl is not None:
        return impl(*args, **kwargs)
    return _run_without_gradient(func, _qualified_name(func), args, kwargs)
