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

from .compiler.backends.base import check as check_target
from .compiler.front.rules_of_functions import RULE, CustomRule
from .jacobians import batch_shape
from .source import capture_source
from .tape import needs_gradient, record, recording_tapes
from .tensor import Tensor

__all__ = ["function", "show_source", "Function"]

_KINDS = ("primal", "forward", "adjoint", "plain adjoint", "tangent")


def function(pyfunc=None, *, target="cpu", boundscheck=None):
    """Compile ``pyfunc`` (plain numeric Python) into a differentiable function.

    Usable as ``@ad.function`` or ``@ad.function(target="cpu", boundscheck=False)``.
    An index out of range raises IndexError naming the line, the array and the
    index, as in Python (never garbage, never a crash). The checks are made once
    per loop where the index is the loop's own (see docs/design.md), so they cost
    little; ``boundscheck=False`` drops them for the last percent, and then such
    an index reads or writes memory it should not. None (the default) follows the
    environment variable ``SRCAD_BOUNDSCHECK`` (``0`` turns the checks off).
    ``target`` names where it is compiled for: ``"cpu"`` (Numba on this machine), or ``"cuda"``, where
    ``pyfunc`` is a scalar function applied elementwise on the GPU, with NumPy's broadcasting
    (docs/cuda.md); another name is a ValueError listing the targets there are.
    """
    try:
        check_target(target)
    except ValueError as exc:
        raise ValueError(f"@ad.function: {exc}") from None
    if boundscheck not in (None, True, False):
        raise TypeError(f"@ad.function: boundscheck must be True, False or None, got {boundscheck!r}")
    if pyfunc is None:
        return functools.partial(function, target=target, boundscheck=boundscheck)
    if isinstance(pyfunc, Function):
        return pyfunc
    if not inspect.isfunction(pyfunc):
        raise TypeError(f"@ad.function expects a Python function, got {pyfunc!r} of type {type(pyfunc).__name__}")
    if target == "cuda":              # a scalar function, applied elementwise on the GPU (docs/cuda.md)
        from .cuda.elementwise import Elementwise
        return Elementwise(pyfunc, boundscheck)
    return Function(pyfunc, boundscheck, target)


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

    def __init__(self, pyfunc, boundscheck=None, target="cpu"):
        self.python_function = pyfunc
        self.target = target     # the name of the compilation target (`srcad.compiler.backends`)
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

    def defjvp(self, jvp):
        """Give this function its own derivative, JAX's ``custom_jvp`` convention:
        ``jvp(primals, tangents) -> (out, out_tangent)``, plain compilable Python, linear in
        ``tangents``. Used wherever the function is differentiated: called from eager code or from
        another ``@ad.function``, in forward and reverse mode, at every order (the rule is differentiated
        in turn; a third derivative through it is refused). Define rules before the first call of a
        compiled function that calls this one, or ``recompile()`` it after. Returns ``jvp``, so it can
        decorate it (docs/functional.md)."""
        self._set_rule(CustomRule(jvp=_plain_rule(jvp, "defjvp", "jvp")))
        return jvp

    def defvjp(self, fwd, bwd):
        """Give this function its own reverse-mode derivative, JAX's ``custom_vjp`` convention:
        ``fwd(*args) -> (out, residuals)`` and ``bwd(residuals, g) -> one cotangent per argument``
        (None for an argument without one), plain compilable Python. Used wherever the function is
        differentiated in reverse mode: called from eager code (a tape, ``ad.grad``...) or from another
        ``@ad.function`` (whose adjoint runs ``bwd``), at every order where ``fwd`` and ``bwd`` can be
        differentiated. Forward mode through it (``ad.jvp``, ``ad.hvp``) needs ``defjvp`` instead. A later
        rule replaces an earlier one (docs/functional.md)."""
        self._set_rule(CustomRule(fwd=_plain_rule(fwd, "defvjp", "fwd"), bwd=_plain_rule(bwd, "defvjp", "bwd")))

    @property
    def has_vjp_rule(self):
        """Was it given a custom VJP (``defvjp``), which its compiled adjoint does not know?"""
        rule = getattr(self.python_function, RULE, None)
        return rule is not None and rule.bwd is not None

    def _set_rule(self, rule):
        setattr(self.python_function, RULE, rule)
        self.recompile()

    def __reduce__(self):
        """Pickle by source and closure, never the compiled code: see srcad/serialize.py."""
        from .serialize import reduce_function
        return reduce_function(self)

    def __call__(self, *args, **kwargs):
        args = self._bind(args, kwargs)
        values = tuple(map(_argument_value, args))
        tapes = recording_tapes()
        active = tuple(isinstance(a, Tensor) and needs_gradient(a, tapes) and a.dtype.kind == "f" for a in args) \
            if tapes else (False,) * len(args)
        if self.has_vjp_rule and any(active):
            from .rule_calls import call_with_vjp
            return call_with_vjp(self, getattr(self.python_function, RULE), args, values)
        transformed = self._transform(values, active)
        if not any(active):
            return _wrap_outputs(transformed.run_primal(*values))
        if transformed.written_params:
            self._refuse_shared_memory(values, transformed.written_params)
        return _recorded_call(self, transformed, args, values, active)

    def value_and_gradient(self, values, active):
        """(output, gradients of the `active` arguments) by the compiled forward and adjoint, without a
        tape (``ad.value_and_grad``); the gradients are None where the output is not one float."""
        transformed = self._transform(values, active)
        values, (output, saved) = _run_forward(self, transformed, values)
        if transformed.returns_tuple or not isinstance(output, (float, np.floating)):
            return output, None
        return output, transformed.adjoint(*values, saved, type(output)(1.0))

    def parameters(self, transformed=None):
        """The names of the parameters (as a transform's `written_params` name them)."""
        return list(self._signature.parameters)

    def values_of(self, args):
        """What the compiled code receives for the (bound) arguments `args`."""
        return tuple(_argument_value(a) for a in args)

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
        types_ = tuple(map(_numba_type, values))
        try:
            return transform(self._frozen[0], types_, active, boundscheck=self._frozen[1], target=self.target)
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
        if kind == "tangent":
            if after is not None:
                raise ValueError("the tangent is made after every pass: show_source(f, 'tangent') takes no `after`")
            return _derived_ops().tangent_of(transformed).source
        if after is None:
            return transformed.source(kind)
        return self._ir_after(kind, after)

    def _ir_after(self, kind, after):
        import numba

        from .compiler import pipeline
        values, active = self._last_call
        program = pipeline.run(self._frozen[0], tuple(map(_numba_type, values)), active, until=after,
                               boundscheck=self._frozen[1], target=self.target)
        fn = getattr(program, kind.replace(" ", "_"))
        if fn is None:
            made_by = "'zero_guards', on a target that runs one" if kind == "plain adjoint" else "'reverse'"
            raise ValueError(f"there is no {kind} after the pass {after!r}: it is made by the pass {made_by}")
        return pipeline.function_text(fn)


def show_source(f, kind="adjoint", *example_args, after=None):
    """Print and return the generated ``kind`` source ('primal', 'forward', 'adjoint', or 'plain adjoint':
    the adjoint without zero-cotangent guards that runs first, where there is one) of ``f``; with
    ``after`` (a compiler pass: 'lower', 'activity', 'reverse', 'cleanup'...), its IR after that pass."""
    if not isinstance(f, Function):
        raise TypeError(f"show_source expects a function decorated with @ad.function, got {f!r}")
    text = f.source(kind, *example_args, after=after)
    print(text)
    return text


def _run_forward(owner, transformed, values):
    """Run the forward of `owner` (a Function or a `DerivedFunction`); returns the argument values its
    adjoint must get, and the forward's result.

    An adjoint that restores shared buffers in place (arrays rotated by rebinding, a work array a
    helper fills and returns) would restore the caller's arrays to what they held before the call:
    such a forward runs on copies, which the caller's written arrays then take the contents of, as
    after the Python call, and its adjoint gets the copies."""
    if not transformed.restores_in_place:
        return values, transformed.forward(*values)
    private = tuple(np.copy(v) if isinstance(v, np.ndarray) else v for v in values)
    result = transformed.forward(*private)
    params = owner.parameters(transformed)
    for p in transformed.written_params:
        np.copyto(values[params.index(p)], private[params.index(p)])
    return private, result


def _recorded_call(owner, transformed, args, values, active):
    """Run the compiled forward of `owner` (a Function, or a `DerivedFunction`) and record the call as one
    compiled segment; the arguments it writes into are kept as the call got them (for a higher order)."""
    params = owner.parameters(transformed) if transformed.written_params else []
    written = {params.index(p): np.copy(values[params.index(p)]) for p in transformed.written_params
               if isinstance(values[params.index(p)], np.ndarray)}
    values, (outputs, saved) = _run_forward(owner, transformed, values)
    wrapped = _wrap_outputs(outputs)
    flat = wrapped if isinstance(wrapped, tuple) else (wrapped,)
    segment = CompiledSegment(owner, transformed, active)
    record(segment, args, flat, {"values": values, "saved": saved, "written": written})
    return wrapped


class CompiledSegment:
    """The tape op of one call of a compiled function: its VJP runs the compiled adjoint, its JVP the
    compiled tangent. Where a recording tape differentiates those again (nested tapes, an accumulator
    around a tape), they run as compiled functions of their own (`DerivedFunction`), recorded the same
    way: derivatives of any order."""

    __slots__ = ("function", "transformed", "active")

    def __init__(self, function, transformed, active):
        self.function = function
        self.transformed = transformed
        self.active = active

    @property
    def name(self):
        return self.function.__name__

    @property
    def makes_tangents(self):
        """Can forward mode go through it? Not through a call with a custom VJP (`defvjp`) inside."""
        made = self.transformed.derived.get("makes_tangents")
        if made is None:
            from .compiler.ir import Call
            from .compiler.ir.visit import own_exprs, subexpressions, walk
            made = self.transformed.derived["makes_tangents"] = not any(
                isinstance(e, Call) and e.fn == "srcad.rule_vjp"
                for s in walk(self.transformed.ir.primal.body) for x in own_exprs(s) for e in subexpressions(x))
        return made

    def vjp(self, node, out_grads, needed):
        if _needs_higher_order(node, out_grads):
            return self._recorded_vjp(node, out_grads, needed)
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

    def jvp(self, node, tangents):
        """The outputs' tangents ``J t`` (a ForwardAccumulator's), one per output, from the compiled
        tangent; arguments without a tangent get zeros."""
        inputs = self._inputs_as_called(node)
        tans = [_value(t) if t is not None else np.zeros_like(np.asarray(v), dtype=np.float64) if np.ndim(v) else 0.0
                for t, v, a in zip(tangents, inputs, self.active) if a]
        tapes = recording_tapes()
        if tapes and any(needs_gradient(x, tapes) for x in (*node.inputs, *tangents) if x is not None):
            self._refuse_optional_outputs("tangents")
            derived = self._derived("tangent", _derived_ops().tangent_transform)
            given = [t if t is not None else z for t, z in zip([t for t, a in zip(tangents, self.active) if a], tans)]
            result = derived(*self._recorded_inputs(node, inputs), *given)
            return list(result[self.transformed.n_outputs:])
        _, out_tangents = _derived_ops().tangent_of(self.transformed)(*_copies_of_written(inputs, node), *tans)
        return [None if y is None else Tensor._wrap(np.asarray(t, dtype=y.dtype))
                for y, t in zip(node.outputs, out_tangents)]

    def jvp_rows(self, node, tangents, rows):
        """`jvp` for a batch of `rows` tangents (leading axis: the rows) in one compiled call, for
        `jacobian` in forward mode; None where it cannot: a tape would differentiate it, or the function
        writes into its arguments (each row starts from them as called)."""
        if self.transformed.written_params or recording_tapes():
            return None
        inputs = self._inputs_as_called(node)
        tans = [np.ascontiguousarray(_value(t)) if t is not None else np.zeros((rows,) + np.shape(v))
                for t, v, a in zip(tangents, inputs, self.active) if a]
        wanted = [k for k, y in enumerate(node.outputs) if y is not None]
        if not wanted:
            return [None] * len(node.outputs)
        buffers = [np.empty((rows,) + node.outputs[k].shape, node.outputs[k].dtype) for k in wanted]
        _derived_ops().tangent_of(self.transformed).rows(inputs, tans, wanted, buffers)
        found = dict(zip(wanted, buffers))
        return [Tensor._wrap(found[k]) if k in found else None for k in range(len(node.outputs))]

    def _recorded_vjp(self, node, out_grads, needed):
        """The VJP as a call of the gradient function (compiled again from the forward and adjoint IR),
        recorded on the tapes that differentiate it; a batch of cotangents goes through row by row."""
        from .ops import stack

        self._refuse_optional_outputs("gradients")
        outputs = node.outputs
        cotangents = [g if g is not None or out is None else Tensor._wrap(np.zeros(out.shape, out.dtype))
                      for g, out in zip(out_grads, outputs)]
        lead = batch_shape([np.asarray(_value(c)) for c in cotangents], outputs)
        tapes = recording_tapes()
        watching = sum(any(needs_gradient(x, [t]) for x in (*node.inputs, *out_grads)) for t in tapes)
        versioned = watching <= 1       # second order: worth its compile time; beyond, compiled at every order
        derived = self._derived("gradient", lambda transformed, types, active: _derived_ops().gradient_of(
            transformed, types, active, versioned), versioned)
        inputs = self._recorded_inputs(node, self._inputs_as_called(node))
        if not lead:
            rows = [_as_tuple(derived(*inputs, *cotangents))]
        else:
            rows = [_as_tuple(derived(*inputs, *[c[index] for c in cotangents])) for index in np.ndindex(*lead)]
        grads, k = [], 0
        for a, need in zip(self.active, needed):
            if not a:
                grads.append(None)
                continue
            if need:
                g = rows[0][k] if not lead else stack([r[k] for r in rows]).reshape(lead + rows[0][k].shape)
                grads.append(g)
            else:
                grads.append(None)
            k += 1
        return grads

    def _derived(self, kind, make, variant=None):
        """The `DerivedFunction` of `kind` (and `variant`) for this segment's transform (one per transform)."""
        key = ("called", kind, variant)
        made = self.transformed.derived.get(key)
        if made is None:
            made = self.transformed.derived[key] = DerivedFunction(
                f"{self.name}_{kind}", lambda types, active: make(self.transformed, types, active))
        return made

    def _inputs_as_called(self, node):
        """The argument values as the call got them (a written argument as it was before the call)."""
        values = list(node.attrs["values"])
        for i, before in node.attrs.get("written", {}).items():
            values[i] = before
        return values

    def _recorded_inputs(self, node, inputs):
        """The recorded inputs (Tensors the tapes track), with the values as called where it was written."""
        written = node.attrs.get("written", {})
        return [inputs[i] if i in written else x for i, x in enumerate(node.inputs)]

    def _refuse_optional_outputs(self, what):
        if self.transformed._optional:
            raise NotImplementedError(
                f"srcad: {what} of @ad.function '{self.name}' differentiated again, but it may return None; "
                f"higher orders of a function with an output that may be None are not supported. Return a "
                f"value on every path (docs/subset.md).")

    def _zero_cotangent(self, k, out, lead):
        """The cotangent of output `k` that none was given for: zeros (an empty array where it is None)."""
        if out is None:
            return self.transformed.cotangent_of_none(k, lead)
        return np.zeros(lead + out.shape, out.dtype)

    def _adjoint(self, node, cotangents):
        values, saved = node.attrs["values"], node.attrs["saved"]
        transformed = self.transformed
        if transformed.n_outputs != 1 or transformed.returns_tuple:
            d_out = tuple([_as_scalar(c) for c in cotangents])
        else:
            d_out = _as_scalar(cotangents[0])
        active_grads = iter(transformed.adjoint(*values, saved, d_out))
        return [_match(next(active_grads), v) if a else None for a, v in zip(self.active, values)]

    def _adjoint_batched(self, node, cotangents, lead):
        """Jacobians send a batch of cotangents (leading axes ``lead``): one compiled call for the batch
        (`Transformed.adjoint_rows`), or where it cannot, the adjoint once per row."""
        values, n = node.attrs["values"], int(np.prod(lead, dtype=np.int64))
        rows = [None if c is None else np.ascontiguousarray(c).reshape((n,) + c.shape[len(lead):]) for c in cotangents]
        buffers = [np.empty((n,) + np.shape(v), np.asarray(v).dtype) for v, a in zip(values, self.active) if a]
        if not n or self.transformed.adjoint_rows(values, node.attrs["saved"], rows, buffers):
            found = iter(b.reshape(lead + b.shape[1:]) for b in buffers)        # (no rows: empty buffers)
            return [next(found) if a else None for a in self.active]
        rows = [self._adjoint(node, [None if c is None else c[index] for c in cotangents])
                for index in np.ndindex(*lead)]
        return [None if rows[0][i] is None else np.stack([r[i] for r in rows]).reshape(lead + np.shape(rows[0][i]))
                for i in range(len(self.active))]


class DerivedFunction:
    """Compiled code derived from a compiled function (its gradient function, its tangent), called as an
    `@ad.function` is: plainly where no tape would differentiate it, else by its compiled forward,
    recorded as a compiled segment, whose own VJP and JVP derive again."""

    def __init__(self, name, make):
        self.__name__ = name
        self._make = make                  # (argument types, active mask) -> a Transformed
        self._transforms = {}
        self._lock = threading.RLock()

    def parameters(self, transformed):
        """The names of the parameters of `transformed`, as its `written_params` name them."""
        primal = transformed.ir.primal
        return [primal.names.user(p) for p in primal.params]

    def __call__(self, *args):
        values = tuple(_argument_value(a) for a in args)
        tapes = recording_tapes()
        active = tuple(needs_gradient(a, tapes) and a.dtype.kind == "f" for a in args) if tapes \
            else (False,) * len(args)
        key = (tuple(map(_type_key, values)), active)
        with self._lock:
            transformed = self._transforms.get(key)
            if transformed is None:
                transformed = self._transforms[key] = self._make(tuple(map(_numba_type, values)), active)
        if not any(active):
            return _wrap_outputs(transformed.run_primal(*values))
        return _recorded_call(self, transformed, args, values, active)


def _plain_rule(rule, method, what):
    """The Python function of a rule (an ``@ad.function`` or Numba dispatcher given is unwrapped)."""
    from .compiler.front.parse import unwrap
    plain = unwrap(rule)
    if not inspect.isfunction(plain):
        raise TypeError(f"{method}: `{what}` must be a Python function, got {rule!r}")
    return plain


def _derived_ops():
    from .compiler import derived     # the compiler (and Numba) load on the first compiled call
    return derived


def _value(x):
    return x._value if isinstance(x, Tensor) else x


def _as_tuple(result):
    return result if isinstance(result, tuple) else (result,)


def _copies_of_written(inputs, node):
    """The inputs, arrays the call wrote into copied (the tangent runs the function again)."""
    written = node.attrs.get("written", {})
    return [np.copy(v) if i in written else v for i, v in enumerate(inputs)]


def _needs_higher_order(node, out_grads):
    """Would a recording tape differentiate this VJP (an input or a cotangent it tracks)?"""
    tapes = recording_tapes()
    return bool(tapes) and any(needs_gradient(x, tapes) for x in (*node.inputs, *out_grads))


def _argument_value(a):
    """What the compiled code receives: arrays stay arrays, rank-0 values become scalars."""
    kind = type(a)
    if kind is float or kind is int:
        return a
    if isinstance(a, Tensor):
        a = a._value
    if isinstance(a, np.ndarray) and a.ndim == 0:
        a = a[()]
    if isinstance(a, np.float64):
        return float(a)
    if isinstance(a, (np.integer, np.bool_)):
        return a.item()
    if callable(a) and not isinstance(a, np.ufunc):
        return _as_dispatcher(a)
    return a


def _as_dispatcher(f):
    """A function argument as Numba takes one, a dispatcher (its identity a part of the compiled
    signature, so each function passed compiles once); the compiler inlines the Python function
    behind it. Other callables are left for `_unsupported` to name."""
    from .compiler.front.parse import unwrap
    plain = unwrap(f)
    if not inspect.isfunction(plain):
        return f
    known = _DISPATCHERS.get(plain)
    if known is None:               # one per Python function, however it is passed (plain, njit, ad.function)
        known = _DISPATCHERS[plain] = f if hasattr(f, "py_func") else _numba_jit(plain)
    return known


def _numba_jit(plain):
    import numba
    return numba.njit(plain)


_DISPATCHERS = {}


def _type_key(v):
    """What decides Numba's type of an argument, without asking Numba (``numba.typeof``
    costs microseconds per array, on every call)."""
    if isinstance(v, np.ndarray):
        flags = v.flags
        return (v.dtype, v.ndim, flags.c_contiguous, flags.f_contiguous, flags.writeable, flags.aligned)
    if type(v) in _SCALAR_TYPES:
        return type(v)
    if isinstance(v, str):
        return ("str", v)       # an option (`method="linear"`): its value decides the compiled code
    import numba
    return numba.typeof(v)  # anything else (tuples...): Numba's own type is the key


def _numba_type(v):
    """Numba's type of an argument; a string is a literal, a constant of the compile as in Numba."""
    import numba
    return numba.types.literal(v) if isinstance(v, str) else numba.typeof(v)


_SCALAR_TYPES = frozenset((float, int, bool, complex, np.float32, np.float64, np.int32, np.int64, np.bool_))


def _unsupported(v, option=True):
    """Why an argument value cannot go to compiled code, or None. A string is an option (a constant of the
    compile), not an element of a tuple."""
    if isinstance(v, tuple):
        return next((f"a tuple holding {p}" for p in (_unsupported(x, option=False) for x in v) if p), None)
    if isinstance(v, (np.ndarray, np.generic)):
        kind = v.dtype.kind
        if kind == "c":
            return f"a complex array ({v.dtype}); complex numbers are not supported"
        if v.dtype.names and all(v.dtype[f].kind in "fiub" and not v.dtype[f].shape for f in v.dtype.names):
            return None             # a record (structured array) of numbers: fields read by name
        return None if kind in "fiub" else f"a NumPy value of dtype {v.dtype}"
    if isinstance(v, complex):
        return "a complex number; complex numbers are not supported"
    if v is None or isinstance(v, (bool, int, float)) or (option and isinstance(v, str)):   # None: not given
        return None
    if hasattr(v, "py_func") and inspect.isfunction(v.py_func):   # a function, as a Numba dispatcher
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
        if isinstance(value, np.ndarray):
            return value.copy()       # a module-level array: its content at the first compile, for every compile
        return value

    g = fn.__globals__
    scope = {"__builtins__": g.get("__builtins__", builtins), "__name__": g.get("__name__")}
    cells = tuple(types.CellType() for _ in fn.__code__.co_freevars) if fn.__closure__ else None
    copy = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, cells)
    copy.__kwdefaults__, copy.__qualname__ = fn.__kwdefaults__, fn.__qualname__
    capture_source(fn)
    copy.__dict__.update(fn.__dict__)
    memo[id(fn)] = copy
    for name in _global_names(fn.__code__) | set(getattr(fn, "__srcad_globals__", ())):    # (names a rewrite adds)
        if name in g:
            scope[name] = frozen(g[name])
    for new, old in zip(cells or (), fn.__closure__ or ()):
        try:
            new.cell_contents = frozen(old.cell_contents)
        except ValueError:         # a cell not filled yet
            pass
    return copy


def _global_names(code):
    """The global names `code` reads, those of the functions defined inside it included."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


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
    return c[()] if c is not None and c.ndim == 0 else c


def _match(grad, value):
    """A gradient in the argument's dtype and shape."""
    if type(grad) is np.ndarray and type(value) is np.ndarray and grad.dtype == value.dtype \
            and grad.shape == value.shape:
        return grad            # (the common case, on every call: without NumPy's conversions)
    dtype = np.asarray(value).dtype
    return np.asarray(grad, dtype=dtype).reshape(np.shape(value))
