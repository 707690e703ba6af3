"""``@ad.function``: compiled, differentiable functions that record as one tape node.

Outside a recording tape a call runs the compiled primal.  Under a tape that
tracks one of the arguments, the call runs the compiled *forward* (the primal
that also saves what the reverse sweep needs) and records a single *compiled
segment* node; its VJP calls the compiled *adjoint*.  Everything else about the
tape (nesting, jacobians, stop_gradient, custom_gradient) treats that node like
any eager operation.
"""

import functools
import inspect

import numpy as np

from .jacobians import batch_shape
from .source import capture_source
from .tape import needs_gradient, record, recording_tapes
from .tensor import Tensor

__all__ = ["function", "show_source", "Function"]

_KINDS = ("primal", "forward", "adjoint")


def function(pyfunc=None, *, target="cpu"):
    """Compile ``pyfunc`` (plain numeric Python) into a differentiable function.

    Usable as ``@ad.function`` or ``@ad.function(target="cpu")``.
    """
    if target != "cpu":
        raise ValueError(f"@ad.function: target={target!r} is not available; use target='cpu'")
    if pyfunc is None:
        return functools.partial(function, target=target)
    if isinstance(pyfunc, Function):
        return pyfunc
    if not inspect.isfunction(pyfunc):
        raise TypeError(f"@ad.function expects a Python function, got {pyfunc!r} of type {type(pyfunc).__name__}")
    return Function(pyfunc)


class Function:
    """A user function with its compiled primal, forward and adjoint, one set per signature."""

    def __init__(self, pyfunc):
        self.python_function = pyfunc
        capture_source(pyfunc)   # what is compiled is the source as it is now, not after later edits
        self._signature = inspect.signature(pyfunc)
        self._transforms = {}
        self._last = None
        functools.update_wrapper(self, pyfunc)

    def __repr__(self):
        return f"<ad.function {self.python_function.__qualname__}>"

    def __reduce__(self):
        """Pickle by source and closure, never the compiled code: see srcad/serialize.py."""
        from .serialize import reduce_function
        return reduce_function(self)

    def __call__(self, *args, **kwargs):
        args = self._bind(args, kwargs)
        values = tuple(_argument_value(a) for a in args)
        tapes = recording_tapes()
        active = tuple(needs_gradient(a, tapes) and a.dtype.kind == "f" for a in args) if tapes \
            else (False,) * len(args)
        transformed = self._transform(values, active)
        if not any(active):
            return _wrap_outputs(transformed.primal(*values))
        outputs, saved = transformed.forward(*values)
        wrapped = _wrap_outputs(outputs)
        flat = wrapped if isinstance(wrapped, tuple) else (wrapped,)
        segment = CompiledSegment(self, transformed, active)
        record(segment, args, flat, {"values": values, "saved": saved})
        return wrapped

    def _bind(self, args, kwargs):
        if not kwargs and len(args) == len(self._signature.parameters):
            return args
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.python_function.__name__}(): {e}") from None
        bound.apply_defaults()
        return tuple(bound.arguments.values())

    def _transform(self, values, active):
        key = (tuple(map(_type_key, values)), active)
        transformed = self._transforms.get(key)
        if transformed is None:
            import numba  # the compiler (and Numba) load on the first compiled call, not on `import srcad`

            from .compiler import transform

            transformed = self._transforms[key] = transform(
                self.python_function, tuple(numba.typeof(v) for v in values), active)
        self._last = transformed
        return transformed

    def source(self, kind="adjoint", *example_args):
        """Generated source of ``kind`` for ``example_args`` (all float arguments active),
        or for the signature of the last call."""
        if kind not in _KINDS:
            raise ValueError(f"kind must be one of {', '.join(map(repr, _KINDS))}; got {kind!r}")
        if example_args:
            values = tuple(_argument_value(a) for a in self._bind(example_args, {}))
            transformed = self._transform(values, tuple(_is_float(v) for v in values))
        elif self._last is None:
            raise ValueError(f"{self.python_function.__name__} has not been called yet: call it once, or pass "
                             f"example arguments: ad.show_source(f, {kind!r}, *args)")
        else:
            transformed = self._last
        return transformed.source(kind)


def show_source(f, kind="adjoint", *example_args):
    """Print and return the generated ``kind`` source ('primal', 'forward' or 'adjoint') of ``f``."""
    if not isinstance(f, Function):
        raise TypeError(f"show_source expects a function decorated with @ad.function, got {f!r}")
    text = f.source(kind, *example_args)
    print(text)
    return text


class CompiledSegment:
    """The tape op of one call of a compiled function: its VJP runs the compiled adjoint."""

    __slots__ = ("function", "transformed", "active")

    def __init__(self, function, transformed, active):
        self.function = function
        self.transformed = transformed
        self.active = active

    @property
    def name(self):
        return self.function.python_function.__name__

    def vjp(self, node, out_grads, needed):
        if _needs_higher_order(node, out_grads):
            raise NotImplementedError(
                f"srcad: a second derivative through @ad.function '{self.name}' was requested (a recording tape "
                f"watches its gradient computation); higher-order derivatives of compiled functions are not "
                f"supported yet. Take the inner gradient outside the outer tape, or write the function with "
                f"NumPy operations for nested tapes.")
        outputs = node.outputs
        given = [None if g is None else np.asarray(g._value if isinstance(g, Tensor) else g) for g in out_grads]
        lead = batch_shape(given, outputs)
        cotangents = [np.zeros(lead + out.shape, out.dtype) if g is None else g for g, out in zip(given, outputs)]
        if not lead:
            grads = self._adjoint(node, cotangents)
        else:
            grads = self._adjoint_batched(node, cotangents, lead)
        return [Tensor._wrap(g) if g is not None and need else None for g, need in zip(grads, needed)]

    def _adjoint(self, node, cotangents):
        values, saved = node.attrs["values"], node.attrs["saved"]
        d_out = tuple(_as_scalar(c) for c in cotangents)
        d_out = d_out if self.transformed.n_outputs != 1 or self.transformed.returns_tuple else d_out[0]
        active_grads = iter(self.transformed.adjoint(*values, saved, d_out))
        return [_match(next(active_grads), v) if a else None for a, v in zip(self.active, values)]

    def _adjoint_batched(self, node, cotangents, lead):
        """Jacobians send a batch of cotangents (leading axes ``lead``): run the adjoint once per row."""
        rows = [self._adjoint(node, [c[index] for c in cotangents]) for index in np.ndindex(*lead)]
        return [None if rows[0][i] is None else np.stack([r[i] for r in rows]).reshape(lead + np.shape(rows[0][i]))
                for i in range(len(self.active))]


def _needs_higher_order(node, out_grads):
    """Would a recording tape differentiate this VJP (an input or a cotangent it tracks)?"""
    tapes = recording_tapes()
    return bool(tapes) and any(needs_gradient(x, tapes) for x in (*node.inputs, *out_grads))


def _argument_value(a):
    """What the compiled code receives: arrays stay arrays, rank-0 values become scalars."""
    if isinstance(a, Tensor):
        a = a._value
    if isinstance(a, np.ndarray) and a.ndim == 0:
        a = a[()]
    if isinstance(a, np.float64):
        return float(a)
    if isinstance(a, (np.integer, np.bool_)):
        return a.item()
    return a


def _type_key(v):
    """What decides Numba's type of an argument, without asking Numba (``numba.typeof``
    costs microseconds per array, on every call)."""
    if isinstance(v, np.ndarray):
        flags = v.flags
        return (v.dtype, v.ndim, flags.c_contiguous, flags.f_contiguous, flags.writeable, flags.aligned)
    if type(v) in _SCALAR_TYPES:
        return type(v)
    import numba
    return numba.typeof(v)  # anything else (tuples...): Numba's own type is the key


_SCALAR_TYPES = frozenset((float, int, bool, complex, np.float32, np.float64, np.int32, np.int64, np.bool_))


def _is_float(v):
    return np.asarray(v).dtype.kind == "f"


def _wrap_outputs(out):
    if isinstance(out, tuple):
        return tuple(_wrap_outputs(o) for o in out)
    if isinstance(out, (np.ndarray, np.generic)):
        return Tensor._wrap(out)
    return Tensor._wrap(np.asarray(out))


def _as_scalar(c):
    return c[()] if c.ndim == 0 else c


def _match(grad, value):
    """A gradient in the argument's dtype and shape."""
    dtype = np.asarray(value).dtype
    return np.asarray(grad, dtype=dtype).reshape(np.shape(value))
