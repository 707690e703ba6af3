"""Gradient control: stop_gradient, custom_gradient, RegisterGradient, no_gradient, Operation.

* ``stop_gradient(x)``: the value of ``x`` as a constant.
* ``@custom_gradient``: ``f(*args) -> (outputs, grad_fn)``; the outputs are
  recorded as *one* op whose inputs are the flat arguments (plus the trainable
  variables ``f`` read), and whose VJP is ``grad_fn(*dys)``.
* ``RegisterGradient("OpType")`` / ``no_gradient("OpType")``: a global
  registry of gradient functions keyed by op-type string, consulted at backprop
  time by the ops made with ``Operation``::

      square = ad.Operation("MySquare", lambda x: x * x)   # NumPy forward

      @ad.RegisterGradient("MySquare")
      def _square_grad(op, dy):                          # op: inputs, outputs, attrs
          return 2.0 * op.inputs[0] * dy

      y = square(x)                                       # recorded as a "MySquare" op

  The forward function receives NumPy values (and keyword attributes) and may
  return one array or a tuple of arrays (several outputs).  The gradient
  function receives a ``_MockOp`` (``inputs``, ``outputs``, ``attrs``,
  ``get_attr(name)``, ``skip_input_indices``, ``type``, ``name``) and one
  upstream gradient per output, and returns one gradient (or None) per input.
  An op type with no registration raises ``LookupError`` when its gradient is
  needed; ``no_gradient`` registrations give None gradients.
"""

import functools
import inspect
import os

import numpy as np

from .jacobians import map_vjp_over_batch
from .tape import _thread, fit_cotangent, flatten, pack_like, record
from .tensor import Tensor

__all__ = ["stop_gradient", "custom_gradient", "RegisterGradient", "no_gradient", "Operation"]


# -- stop_gradient ---------------------------------------------------------------------

def stop_gradient(x):
    """The value of ``x`` as a constant: no gradient flows back through it."""
    return Tensor._wrap(x._value if isinstance(x, Tensor) else Tensor(x)._value)


# -- custom_gradient ---------------------------------------------------------------------

class _VariableWatcher:
    """Collects the trainable variables read while it is active (``tape.record`` reports them)."""

    __slots__ = ("variables", "_seen")

    def __init__(self):
        self.variables = []
        self._seen = set()

    def add(self, variable):
        if id(variable) not in self._seen:
            self._seen.add(id(variable))
            self.variables.append(variable)


class _Inert:
    """Stands on the tape stack while a custom_gradient function runs with no tape recording, so that
    operations on variables report their reads to the watcher.  It tracks nothing and records nothing."""

    _tracked = {}

    def _watches(self, variable):
        return False


_INERT = _Inert()


def custom_gradient(f=None):
    """Decorator: ``f(*args, **kwargs)`` returns ``(outputs, grad_fn)``; see the module docstring."""
    if f is None:
        return custom_gradient
    return _CustomGradientFunction(f)


class _CustomGradientFunction:
    """The decorated function; as a descriptor it also works on methods (``self`` is not an input)."""

    def __init__(self, f, bound_to=None):
        self._f = f
        self._bound_to = bound_to
        functools.update_wrapper(self, f)

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        return _CustomGradientFunction(self._f, instance)

    def __call__(self, *args, **kwargs):
        if self._bound_to is not None:
            return _call_custom(self._f, (self._bound_to,), args, kwargs)
        return _call_custom(self._f, (), args, kwargs)

    def __repr__(self):
        return f"<srcad custom_gradient {getattr(self._f, '__qualname__', self._f)!r}>"


def _call_custom(f, bound, args, kwargs):
    name = getattr(f, "__name__", "custom_gradient")
    watcher = _VariableWatcher()
    watchers, tapes = _thread.watchers, _thread.tapes
    watchers.append(watcher)
    inert = not tapes
    if inert:
        tapes.append(_INERT)
    try:
        returned = f(*bound, *args, **kwargs)
    finally:
        watchers.remove(watcher)
        if inert:
            tapes.remove(_INERT)
    if not isinstance(returned, (tuple, list)) or len(returned) != 2 or not callable(returned[1]):
        raise TypeError(f"@ad.custom_gradient function '{name}' must return a pair (outputs, grad_fn) with a "
                        f"callable grad_fn, but returned {_describe(returned)}.")
    result, grad_fn = returned

    flat_args = flatten(list(args))
    all_inputs = flat_args + flatten([kwargs[k] for k in sorted(kwargs)])
    variables = [v for v in watcher.variables if all(v is not x for x in all_inputs)]
    if variables and not _accepts_variables(grad_fn):
        raise TypeError(f"@ad.custom_gradient grad_fn must accept keyword argument 'variables', since function "
                        f"uses variables: {variables}")

    flat_result = flatten(result)
    outputs = tuple(_identity(y, name) for y in flat_result)
    if _thread.tapes:
        inputs = tuple(_as_input(x) for x in flat_args) + tuple(variables)
        op = _CustomOp(name, grad_fn, len(flat_args), variables, len(outputs))
        record(op, inputs, outputs)
    if not isinstance(result, (list, tuple, dict)):
        return outputs[0]
    return pack_like(result, list(outputs))


def _describe(value):
    return f"a {type(value).__name__} of length {len(value)}" if isinstance(value, (tuple, list)) \
        else f"{type(value).__name__}"


def _accepts_variables(fn):
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True   # cannot inspect (a builtin): let the call decide
    for p in params:
        if p.kind is p.VAR_KEYWORD:
            return True
        if p.name == "variables" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            return True
    return False


def _identity(y, name):
    """A new tensor with ``y``'s value: the op's outputs are never its inputs or a captured constant."""
    if isinstance(y, Tensor):
        return Tensor._wrap(y._value)
    try:
        return Tensor(y)
    except TypeError as err:
        raise TypeError(f"@ad.custom_gradient function '{name}' returned {y!r} of type '{type(y).__name__}' as an "
                        f"output: expected Tensors, arrays or numbers (or a nest of them).") from err


def _as_input(x):
    """What the op records for a flat argument: Tensors as they are, numbers and arrays as constants."""
    if isinstance(x, Tensor):
        return x
    try:
        return Tensor(x)
    except (TypeError, ValueError):
        return Tensor._wrap(np.asarray(0.0))  # not numeric (a string, a callable): never differentiated


def _output_cotangents(node, out_grads):
    """One Tensor cotangent per output for a user's gradient function: zeros where none flows back."""
    return [Tensor._wrap(np.zeros_like(out._value)) if g is None else g if isinstance(g, Tensor) else Tensor(g)
            for g, out in zip(out_grads, node.outputs)]


class _CustomOp:
    """The tape op of one custom_gradient call: its VJP is the user's ``grad_fn``."""

    __slots__ = ("name", "grad_fn", "arg_count", "variables", "n_outputs", "vjp")

    def __init__(self, name, grad_fn, arg_count, variables, n_outputs):
        self.name = name
        self.grad_fn = grad_fn
        self.arg_count = arg_count
        self.variables = variables
        self.n_outputs = n_outputs
        self.vjp = map_vjp_over_batch(self._vjp)

    def _vjp(self, node, out_grads, needed):
        dys = _output_cotangents(node, out_grads)
        if self.variables:
            returned = self.grad_fn(*dys, variables=list(self.variables))
            if not isinstance(returned, (tuple, list)) or len(returned) != 2:
                raise ValueError(f"@ad.custom_gradient grad_fn of '{self.name}' uses variables, so it must return a "
                                 f"pair (input_grads, variable_grads), but returned {_describe(returned)}.")
            input_grads, variable_grads = returned
            variable_grads = [None] if variable_grads is None else list(flatten(variable_grads))
            if len(variable_grads) != len(self.variables):
                raise ValueError("Must return gradient for each variable from @custom_gradient grad_fn.")
        else:
            input_grads, variable_grads = self.grad_fn(*dys), []
        flat_grads = flatten(input_grads)
        if len(flat_grads) != self.arg_count:
            raise ValueError(f"custom_gradient function expected to return {self.arg_count} gradients, but returned "
                             f"{len(flat_grads)} instead.")
        grads = []
        for i, (g, x) in enumerate(zip(flat_grads + variable_grads, node.inputs)):
            grads.append(_fit(g, x, self.name, i) if g is not None and needed[i] else None)
        return grads

    def __repr__(self):
        return f"<srcad custom_gradient op {self.name}>"


def _fit(g, x, name, i):
    """A gradient in its input's shape (broadcast from a compatible one)."""
    return fit_cotangent(g, x.shape, f"the gradient that '{name}' returned", f"input {i}")


# -- RegisterGradient / no_gradient / Operation ------------------------------------------

_GRADIENTS = {}   # op type -> (gradient function or None, where it was registered)


def _register(op_type, fn, depth):
    if not isinstance(op_type, str):
        raise TypeError("op_type must be a string")
    if op_type in _GRADIENTS:
        previous = _GRADIENTS[op_type][1]
        raise KeyError(f"Registering two gradient with name '{op_type}'! (Previous registration was in {previous})")
    frame = inspect.stack()[depth] if depth is not None else None
    where = (f"{getattr(fn, '__name__', fn)} {os.path.basename(frame.filename)}:{frame.lineno}"
             if frame is not None else str(fn))
    _GRADIENTS[op_type] = (fn, where)


class RegisterGradient:
    """Decorator registering ``fn(op, *out_grads) -> grads per input`` for ops of type ``op_type``."""

    def __init__(self, op_type):
        if not isinstance(op_type, str):
            raise TypeError("op_type must be a string")
        self._op_type = op_type

    def __call__(self, fn):
        _register(self._op_type, fn, 2)
        return fn


def no_gradient(op_type):
    """Declare that ops of type ``op_type`` have no gradient (their input gradients are None)."""
    _register(op_type, None, 2)


def gradient_registered(op_type):
    """The registered gradient function of ``op_type`` (None for ``no_gradient``); LookupError if none."""
    try:
        return _GRADIENTS[op_type][0]
    except KeyError:
        raise LookupError(f"No gradient defined for operation '{op_type}' (op type: {op_type}). Register one with "
                          f"@ad.RegisterGradient('{op_type}'), or declare it non-differentiable with "
                          f"ad.no_gradient('{op_type}').") from None


class _MockOp:
    """What a registered gradient function receives in place of the operation."""

    __slots__ = ("type", "name", "inputs", "outputs", "attrs", "skip_input_indices")

    def __init__(self, op_type, inputs, outputs, attrs, skip_input_indices):
        self.type = op_type
        self.name = op_type
        self.inputs = inputs
        self.outputs = outputs
        self.attrs = attrs
        self.skip_input_indices = skip_input_indices

    def get_attr(self, name):
        try:
            return self.attrs[name]
        except KeyError:
            raise ValueError(f"Operation '{self.type}' has no attr named '{name}'.") from None

    def __repr__(self):
        return f"<_MockOp {self.type}: {len(self.inputs)} inputs, {len(self.outputs)} outputs>"


class Operation:
    """A named operation: ``fn`` computes it on NumPy values, its gradient is looked up by ``op_type``.

    ``Operation(op_type, fn)(*inputs, **attrs)`` runs ``fn`` on the inputs'
    values and, under a recording tape, records one op of type ``op_type``.
    At backprop time the gradient registered with ``RegisterGradient(op_type)``
    is called as ``grad(op, *out_grads)``.  Returns one Tensor, or a tuple when
    ``fn`` returns a tuple.
    """

    __slots__ = ("op_type", "fn", "vjp")

    def __init__(self, op_type, fn):
        if not isinstance(op_type, str):
            raise TypeError("op_type must be a string")
        if not callable(fn):
            raise TypeError(f"Operation '{op_type}': fn must be callable, got {fn!r}")
        self.op_type = op_type
        self.fn = fn
        self.vjp = map_vjp_over_batch(self._vjp)

    def __call__(self, *inputs, **attrs):
        inputs = tuple(x if isinstance(x, Tensor) else Tensor(x) for x in inputs)
        result = self.fn(*[x._value for x in inputs], **attrs)
        multiple = isinstance(result, tuple)
        outputs = tuple(Tensor._wrap(np.asarray(r)) for r in (result if multiple else (result,)))
        if _thread.tapes:
            record(self, inputs, outputs, attrs)
        return outputs if multiple else outputs[0]

    def _vjp(self, node, out_grads, needed):
        fn = gradient_registered(self.op_type)
        n = len(node.inputs)
        if fn is None:
            return [None] * n
        dys = _output_cotangents(node, out_grads)
        skip = tuple(i for i, need in enumerate(needed) if not need)
        op = _MockOp(self.op_type, list(node.inputs), list(node.outputs), dict(node.attrs), skip)
        grads = fn(op, *dys)
        grads = list(grads) if isinstance(grads, (list, tuple)) else [grads]
        if len(grads) != n:
            raise ValueError(f"The gradient registered for '{self.op_type}' returned {len(grads)} gradients for an "
                             f"op with {n} inputs: expected one gradient (or None) per input.")
        return [_fit(g, x, self.op_type, i) if g is not None and needed[i] else None
                for i, (g, x) in enumerate(zip(grads, node.inputs))]

    def __repr__(self):
        return f"<srcad Operation {self.op_type}>"
