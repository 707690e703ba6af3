"""``@ad.function``: compiled, differentiable functions that record as one tape node.

Outside a recording tape a call runs the compiled primal.  Under a tape that
tracks one of the arguments, the call runs the compiled *forward* (the primal
that also saves what the reverse sweep needs) and records a single *compiled
segment* node; its VJP calls the compiled *adjoint*.  Everything else about the
tape (nesting, jacobians, stop_gradient, custom_gradient) treats that node like
any eager operation.
"""

import builtins
import functools
import inspect
import os
import threading
import types

import numpy as np

from .jacobians import batch_shape
from .source import capture_source
from .tape import needs_gradient, record, recording_tapes
from .tensor import Tensor

__all__ = ["function", "show_source", "Function"]

_KINDS = ("primal", "forward", "adjoint")


def function(pyfunc=None, *, target="cpu", boundscheck=None):
    """Compile ``pyfunc`` (plain numeric Python) into a differentiable function.

    Usable as ``@ad.function`` or ``@ad.function(target="cpu", boundscheck=False)``.
    An index out of range raises IndexError naming the line, the array and the
    index, as in Python (never garbage, never a crash). The checks are made once
    per loop where the index is the loop's own (see docs/design.md), so they cost
    little; ``boundscheck=False`` drops them for the last percent, and then such
    an index reads or writes memory it should not. None (the default) follows the
    environment variable ``SRCAD_BOUNDSCHECK`` (``0`` turns the checks off).
    """
    if target != "cpu":
        raise ValueError(f"@ad.function: target={target!r} is not available; use target='cpu'")
    if boundscheck not in (None, True, False):
        raise TypeError(f"@ad.function: boundscheck must be True, False or None, got {boundscheck!r}")
    if pyfunc is None:
        return functools.partial(function, target=target, boundscheck=boundscheck)
    if isinstance(pyfunc, Function):
        return pyfunc
    if not inspect.isfunction(pyfunc):
        raise TypeError(f"@ad.function expects a Python function, got {pyfunc!r} of type {type(pyfunc).__name__}")
    return Function(pyfunc, boundscheck)


class Function:
    """A user function with its compiled primal, forward and adjoint, one set per signature.

    Module globals and closure variables the function (or a helper it calls)
    reads are constants of the compiled code, as in Numba: their values are
    taken at the first compile and every later compile of this function (a
    new signature, or the call under a tape) uses the same values, so the plain
    call and the gradient always agree. After changing one, call
    ``f.recompile()`` to compile with the new values. The source is the one
    at decoration time. Compiling is thread-safe: concurrent first calls
    compile once and the others wait.
    """

    def __init__(self, pyfunc, boundscheck=None):
        self.python_function = pyfunc
        capture_source(pyfunc)   # what is compiled is the source as it is now, not after later edits
        self._signature = inspect.signature(pyfunc)
        self._boundscheck = boundscheck
        self._lock = threading.RLock()
        self._transforms = {}
        self._frozen = None      # (pyfunc with its globals as at the first compile, boundscheck)
        self._last = None
        functools.update_wrapper(self, pyfunc)

    def recompile(self):
        """Drop the compiled code: the next call compiles again, with the current values
        of the globals it reads (and of ``SRCAD_BOUNDSCHECK``)."""
        with self._lock:
            self._transforms = {}
            self._frozen = None
            self._last = None

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
        if transformed.written_params:
            self._refuse_shared_memory(values, transformed.written_params)
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
        try:
            key = (tuple(map(_type_key, values)), active)
            transformed = self._transforms.get(key)
        except (ValueError, TypeError):    # numba.typeof of something Numba cannot type
            key = transformed = None
        if transformed is None:
            self._check_arguments(values)
            key = (tuple(map(_type_key, values)), active)
            with self._lock:
                transformed = self._transforms.get(key)
                if transformed is None:
                    transformed = self._transforms[key] = self._compile(values, active)
        self._last = transformed
        self._last_call = (values, active)
        return transformed

    def _compile(self, values, active):
        import numba  # the compiler (and Numba) load on the first compiled call, not on `import srcad`

        from .compiler import TransformError, transform

        if self._frozen is None:
            boundscheck = self._boundscheck
            if boundscheck is None:
                boundscheck = os.environ.get("SRCAD_BOUNDSCHECK", "1") not in ("", "0")
            self._frozen = (_frozen_function(self.python_function, {}), boundscheck)
        types_ = tuple(numba.typeof(v) for v in values)
        try:
            return transform(self._frozen[0], types_, active, boundscheck=self._frozen[1])
        except TransformError as exc:
            if "Numba cannot compile" not in str(exc):
                raise
            called = ", ".join(f"{p}: {t}" for p, t in zip(self._signature.parameters, types_))
            raise TransformError(f"{exc}\n  {self.__name__} was called with {called}; an argument of another "
                                 f"rank or dtype than the function body expects makes it invalid") from None

    def _check_arguments(self, values):
        """Refuse, naming the parameter, what the compiled code cannot take (before Numba's typing errors)."""
        for p, v in zip(self._signature.parameters, values):
            problem = _unsupported(v)
            if problem:
                raise TypeError(f"{self.__name__}(): argument `{p}` is {problem}; expected a float, int or bool "
                                f"scalar, a NumPy array (or Tensor) of them, a tuple of those, or None")

    def _refuse_shared_memory(self, values, written):
        """An argument the function writes into must not share memory with another argument
        (``f(v, v.numpy())``): the write would change that input behind the tape's back."""
        params = list(self._signature.parameters)
        for p in written:
            i = params.index(p)
            for j, other in enumerate(values):
                if j != i and isinstance(other, np.ndarray) and isinstance(values[i], np.ndarray) \
                        and np.may_share_memory(values[i], other) and np.shares_memory(values[i], other):
                    raise ValueError(
                        f"{self.__name__}(): argument `{p}`, which the function writes into, shares memory with "
                        f"argument `{params[j]}`; the gradient would be wrong and `{params[j]}` changed. "
                        f"Pass a copy: {p}=np.copy(...)")

    def source(self, kind="adjoint", *example_args, after=None):
        """Generated source of ``kind`` for ``example_args`` (all float arguments active), or for the
        signature of the last call; with ``after``, the IR of ``kind`` after that compiler pass
        (``srcad.compiler.pipeline.PASS_NAMES``) instead of the code that runs."""
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
        if after is None:
            return transformed.source(kind)
        return self._ir_after(kind, after)

    def _ir_after(self, kind, after):
        import numba

        from .compiler import pipeline
        values, active = self._last_call
        program = pipeline.run(self._frozen[0], tuple(numba.typeof(v) for v in values), active, until=after,
                               boundscheck=self._frozen[1])
        fn = getattr(program, kind)
        if fn is None:
            raise ValueError(f"there is no {kind} after the pass {after!r}: it is made by the pass 'reverse'")
        return pipeline.function_text(fn)


def show_source(f, kind="adjoint", *example_args, after=None):
    """Print and return the generated ``kind`` source ('primal', 'forward' or 'adjoint') of ``f``; with
    ``after`` (a compiler pass: 'lower', 'activity', 'reverse', 'cleanup'...), its IR after that pass."""
    if not isinstance(f, Function):
        raise TypeError(f"show_source expects a function decorated with @ad.function, got {f!r}")
    text = f.source(kind, *example_args, after=after)
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
        cotangents = [g if g is not None else self._zero_cotangent(k, out, lead) for k, (g, out) in
                      enumerate(zip(given, outputs))]
        if not lead:
            grads = self._adjoint(node, cotangents)
        else:
            grads = self._adjoint_batched(node, cotangents, lead)
        return [Tensor._wrap(g) if g is not None and need else None for g, need in zip(grads, needed)]

    def _zero_cotangent(self, k, out, lead):
        """The cotangent of output `k` that none was given for: zeros (an empty array where it is None)."""
        if out is None:
            return self.transformed.cotangent_of_none(k, lead)
        return np.zeros(lead + out.shape, out.dtype)

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


def _unsupported(v):
    """Why an argument value cannot go to compiled code, or None."""
    if isinstance(v, tuple):
        return next((f"a tuple holding {p}" for p in map(_unsupported, v) if p), None)
    if isinstance(v, (np.ndarray, np.generic)):
        kind = v.dtype.kind
        if kind == "c":
            return f"a complex array ({v.dtype}); complex numbers are not supported"
        return None if kind in "fiub" else f"a NumPy value of dtype {v.dtype}"
    if isinstance(v, complex):
        return "a complex number; complex numbers are not supported"
    if v is None or isinstance(v, (bool, int, float)):     # None: an optional argument not given
        return None
    return f"{type(v).__name__} {_short_repr(v)}"


def _short_repr(v):
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def _frozen_function(fn, memo):
    """A copy of `fn` whose globals and closure cells hold the values they have now
    (the names it reads; helpers it calls copied the same way), so that later
    compiles see the globals of the first one."""
    from .compiler.front.parse import canonical_callable, is_stop_gradient, unwrap

    if id(fn) in memo:
        return memo[id(fn)]

    def frozen(value):
        if canonical_callable(value) or is_stop_gradient(value):
            return value
        plain = unwrap(value)
        module = getattr(plain, "__module__", None) or ""
        if inspect.isfunction(plain) and not module.startswith(("numpy", "numba", "srcad.")):
            return _frozen_function(plain, memo)
        return value

    g = fn.__globals__
    scope = {"__builtins__": g.get("__builtins__", builtins), "__name__": g.get("__name__")}
    cells = tuple(types.CellType() for _ in fn.__code__.co_freevars) if fn.__closure__ else None
    copy = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, cells)
    copy.__kwdefaults__, copy.__qualname__ = fn.__kwdefaults__, fn.__qualname__
    capture_source(fn)
    copy.__dict__.update(fn.__dict__)
    memo[id(fn)] = copy
    for name in fn.__code__.co_names:
        if name in g:
            scope[name] = frozen(g[name])
    for new, old in zip(cells or (), fn.__closure__ or ()):
        try:
            new.cell_contents = frozen(old.cell_contents)
        except ValueError:         # a cell not filled yet
            pass
    return copy


def _is_float(v):
    return np.asarray(v).dtype.kind == "f"


def _wrap_outputs(out):
    if isinstance(out, tuple):
        return tuple(_wrap_outputs(o) for o in out)
    if out is None:
        return None
    if isinstance(out, (np.ndarray, np.generic)):
        return Tensor._wrap(out)
    return Tensor._wrap(np.asarray(out))


def _as_scalar(c):
    return c[()] if c.ndim == 0 else c


def _match(grad, value):
    """A gradient in the argument's dtype and shape."""
    dtype = np.asarray(value).dtype
    return np.asarray(grad, dtype=dtype).reshape(np.shape(value))
