"""The functional front door, with JAX's conventions: `grad`, `value_and_grad`, `vjp`, `jvp`, `hvp`, `hessian`.

Each takes a function of arrays (eager NumPy code on Tensors, or an
`@ad.function`) and returns plain NumPy results of the arguments' shapes and
dtypes, so `scipy.optimize.minimize(ad.value_and_grad(f), x0, jac=True)` works
as it is. They are built on the tape: `vjp` and `value_and_grad` on a
`GradientTape`, `jvp` on a `ForwardAccumulator`, `hvp` on an accumulator around
a tape (forward over reverse), `hessian` on the jacobian of a gradient. A
compiled function's gradient skips the tape: its compiled forward and adjoint
are called directly.
"""
import numbers

import numpy as np

from .accumulator import ForwardAccumulator
from .function import Function
from .tape import GradientTape
from .tensor import Tensor

__all__ = ["grad", "value_and_grad", "vjp", "jvp", "hvp", "hessian"]


def grad(f, argnums=0):
    """The gradient of the scalar function `f` with respect to argument(s) `argnums` (an int or a tuple)."""
    both = value_and_grad(f, argnums)

    def gradient(*args, **kwargs):
        return both(*args, **kwargs)[1]
    gradient.__name__ = f"grad_of_{_name(f)}"
    return gradient


def value_and_grad(f, argnums=0):
    """`(f(*args), gradient)`: the gradient as in `grad`, the value a float (or a NumPy scalar)."""
    def value_and_gradient(*args, **kwargs):
        positions = _positions(f, argnums, args)
        direct = _compiled_value_and_grad(f, argnums, positions, args, kwargs)
        if direct is not None:
            return direct
        sources = [_source(f, args[i], i) for i in positions]
        with GradientTape() as tape:
            tape.watch(sources)
            out = f(*_substituted(args, positions, sources), **kwargs)
        _check_scalar(f, out)
        grads = tape.gradient(out, sources, unconnected_gradients="zero")
        return _plain(out), _like_argnums(argnums, [_as_argument(g, args[i]) for g, i in zip(grads, positions)])
    value_and_gradient.__name__ = f"value_and_grad_of_{_name(f)}"
    return value_and_gradient


def vjp(f, *primals):
    """`(f(*primals), vjp_fn)`: `vjp_fn(cotangent)` returns one cotangent per primal (a tuple), for a
    cotangent of the output's structure (a tuple of them for a function returning a tuple)."""
    positions = tuple(range(len(primals)))
    sources = [_source(f, p, i) for i, p in enumerate(primals)]
    tape = GradientTape(persistent=True)
    with tape:
        tape.watch(sources)
        out = f(*sources)

    def vjp_fn(cotangent):
        grads = tape.gradient(out, sources, output_gradients=cotangent, unconnected_gradients="zero")
        return tuple(_as_argument(g, primals[i]) for g, i in zip(grads, positions))
    return _plain(out), vjp_fn


def jvp(f, primals, tangents):
    """`(f(*primals), J t)` for the tangents `tangents` (one per primal), by forward mode."""
    primals, tangents = tuple(primals), tuple(tangents)
    if len(primals) != len(tangents):
        raise ValueError(f"jvp of {_name(f)}: {len(primals)} primals but {len(tangents)} tangents; give one "
                         f"tangent per primal")
    sources = [_source(f, p, i) for i, p in enumerate(primals)]
    with ForwardAccumulator(sources, [_tangent_like(t, p, i, f) for i, (t, p) in enumerate(zip(tangents, primals))]) \
            as acc:
        out = f(*sources)
    return _plain(out), _plain(acc.jvp(out, unconnected_gradients="zero"))


def hvp(f, x, v):
    """The Hessian of the scalar function `f` at `x` times `v` (forward over reverse)."""
    source = _source(f, x, 0)
    with ForwardAccumulator(source, _tangent_like(v, x, 0, f)) as acc:
        with GradientTape() as tape:
            tape.watch(source)
            out = f(source)
        _check_scalar(f, out)
        g = tape.gradient(out, source, unconnected_gradients="zero")
    return _as_argument(acc.jvp(g, unconnected_gradients="zero"), x)


def hessian(f):
    """`hessian(f)(x)`: the Hessian of the scalar function `f`, of shape `x.shape + x.shape`."""
    def of(x):
        source = _source(f, x, 0)
        with GradientTape() as outer:
            outer.watch(source)
            with GradientTape() as inner:
                inner.watch(source)
                out = f(source)
            _check_scalar(f, out)
            g = inner.gradient(out, source, unconnected_gradients="zero")
        h = outer.jacobian(g, source, unconnected_gradients="zero")
        return np.asarray(h.numpy(), dtype=np.asarray(x).dtype)
    of.__name__ = f"hessian_of_{_name(f)}"
    return of


# ---- arguments and results -----------------------------------------------------------------------

def _name(f):
    return getattr(f, "__name__", type(f).__name__)


def _positions(f, argnums, args):
    many = isinstance(argnums, (tuple, list))
    positions = tuple(argnums) if many else (argnums,)
    for i in positions:
        if isinstance(i, bool) or not isinstance(i, numbers.Integral):
            raise TypeError(f"argnums of {_name(f)} must be an int or a tuple of ints, got {argnums!r}")
        if not -len(args) <= i < len(args):
            raise ValueError(f"argnums {i} of {_name(f)} is out of range: it was called with {len(args)} "
                             f"positional argument{'s' * (len(args) != 1)}")
    return tuple(i % len(args) for i in positions)


def _source(f, value, i):
    """Argument `i` as a Tensor to differentiate: float values only (an integer has no gradient)."""
    return Tensor._wrap(np.array(_float_argument(f, value, i)))


def _float_argument(f, value, i):
    """Argument `i` as a NumPy value, refused unless it is a float (an integer has no gradient)."""
    array = value._value if isinstance(value, Tensor) else np.asarray(value)
    if array.dtype.kind != "f":
        raise TypeError(f"argument {i} of {_name(f)} has dtype {array.dtype}: only float arguments can be "
                        f"differentiated; pass it as a float (e.g. {array.astype(np.float64)!r}) or leave it out "
                        f"of argnums")
    return array


def _tangent_like(t, primal, i, f):
    shape = np.shape(primal._value if isinstance(primal, Tensor) else primal)
    t = np.asarray(t._value if isinstance(t, Tensor) else t, dtype=np.float64)
    if t.shape != shape:
        raise ValueError(f"the tangent of argument {i} of {_name(f)} has shape {t.shape}, its primal {shape}")
    return t


def _substituted(args, positions, sources):
    out = list(args)
    for i, s in zip(positions, sources):
        out[i] = s
    return out


def _check_scalar(f, out):
    value = out._value if isinstance(out, Tensor) else np.asarray(out) if out is not None else None
    if value is None or np.ndim(value) != 0:
        shape = "None" if value is None else f"an output of shape {np.shape(value)}"
        raise TypeError(f"grad of {_name(f)} needs a scalar output, got {shape}; use ad.vjp or ad.jacobian "
                        f"for a function with more outputs")


def _plain(out):
    """NumPy values in place of Tensors, through tuples and lists."""
    if isinstance(out, Tensor):
        return out._value
    if isinstance(out, (tuple, list)):
        return type(out)(_plain(o) for o in out)
    return out


def _as_argument(g, arg):
    """A gradient as a NumPy value of its argument's shape and dtype (a float for a Python float)."""
    if type(g) is np.ndarray and type(arg) is np.ndarray and g.dtype == arg.dtype and g.shape == arg.shape:
        return g
    value = np.asarray(g._value if isinstance(g, Tensor) else g)
    like = np.asarray(arg._value if isinstance(arg, Tensor) else arg)
    value = value.astype(like.dtype, copy=False).reshape(like.shape)
    return float(value) if isinstance(arg, float) else value


def _like_argnums(argnums, grads):
    return tuple(grads) if isinstance(argnums, (tuple, list)) else grads[0]


def _compiled_value_and_grad(f, argnums, positions, args, kwargs):
    """The gradient of an `@ad.function` from its compiled forward and adjoint, without a tape (a few
    microseconds over calling them: checks on the fast path first)."""
    if type(f) is not Function or f.has_vjp_rule:
        return None
    for a in args:
        if isinstance(a, Tensor):
            return None
    values = f.values_of(f._bind(args, kwargs))
    for i in positions:
        v = values[i]
        if not (isinstance(v, float) or isinstance(v, np.ndarray) and v.dtype.kind == "f"):
            _float_argument(f, v, i)    # checked, not copied: the compiled code reads it as it is
    active = tuple(i in positions for i in range(len(values)))
    outputs, grads = f.value_and_gradient(values, active)
    if not isinstance(outputs, float):
        _check_scalar(f, outputs)
    return _plain(outputs), _like_argnums(argnums, [_as_argument(g, args[i]) for g, i in zip(grads, positions)])
