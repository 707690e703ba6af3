"""Calls of compiled functions with a custom VJP (`f.defvjp(fwd, bwd)`), from eager code.

The call runs the user's `fwd` (compiled with Numba, one dispatcher per function) and records one tape node
that keeps its residuals; the node's VJP runs `bwd` on them. Where a recording
tape differentiates that VJP again (a Hessian, nested tapes, a forward
accumulator), `fwd` and `bwd` run as plain Python on the tape's Tensors, so
that they are differentiated in turn: the residuals are computed again from
the recorded inputs, as functions of them.
"""
import numpy as np

from .function import _as_dispatcher
from .tape import needs_gradient, record, recording_tapes
from .tensor import Tensor


def call_with_vjp(function, rule, args, values):
    """`function(*args)` recorded with the custom VJP `rule` (a `CustomRule` with `fwd` and `bwd`)."""
    out, residuals = _pair(_as_dispatcher(rule.fwd)(*values), function.__name__)
    outputs = out if isinstance(out, tuple) else (out,)
    wrapped = tuple(Tensor._wrap(np.asarray(o)) for o in outputs)
    record(RuleCall(function, rule, isinstance(out, tuple)), args, wrapped, {"residuals": residuals})
    return wrapped if isinstance(out, tuple) else wrapped[0]


class RuleCall:
    """The tape op of a call with a custom VJP: its VJP is the user's `bwd`."""

    __slots__ = ("function", "rule", "returns_tuple")

    def __init__(self, function, rule, returns_tuple):
        self.function, self.rule, self.returns_tuple = function, rule, returns_tuple

    @property
    def name(self):
        return self.function.__name__

    def vjp(self, node, out_grads, needed):
        cotangents = [g if g is not None else Tensor._wrap(np.zeros_like(y._value))
                      for g, y in zip(out_grads, node.outputs)]
        tapes = recording_tapes()
        if tapes and any(needs_gradient(x, tapes) for x in (*node.inputs, *out_grads)):
            residuals = _pair(self.rule.fwd(*node.inputs), self.name)[1]      # recorded: differentiated again
            grads = self.rule.bwd(residuals, self._structured(cotangents))
        else:
            values = [np.asarray(c._value if isinstance(c, Tensor) else c) for c in cotangents]
            grads = _as_dispatcher(self.rule.bwd)(node.attrs["residuals"], self._structured([_scalar(v) for v in values]))
        return [self._checked(g, x, k) if need else None
                for k, (g, x, need) in enumerate(zip(self._per_argument(grads, node), node.inputs, needed))]

    def _structured(self, cotangents):
        return tuple(cotangents) if self.returns_tuple else cotangents[0]

    def _per_argument(self, grads, node):
        if not isinstance(grads, tuple) or len(grads) != len(node.inputs):
            raise ValueError(f"the bwd rule of `{self.name}` returns {_described(grads)}; expected a tuple of "
                             f"{len(node.inputs)} cotangents, one per argument (None for one without)")
        return grads

    def _checked(self, g, x, k):
        if g is None or not isinstance(x, Tensor):
            return None
        value = g._value if isinstance(g, Tensor) else np.asarray(g)
        if np.shape(value) != x.shape:
            raise ValueError(f"the bwd rule of `{self.name}` returns a cotangent of shape {np.shape(value)} for "
                             f"argument {k}, of shape {x.shape}; expected the argument's shape")
        return g if isinstance(g, Tensor) else Tensor._wrap(np.asarray(value, dtype=x.dtype))


def _pair(result, name):
    if not isinstance(result, tuple) or len(result) != 2:
        raise ValueError(f"the fwd rule of `{name}` returns {_described(result)}; expected two values: "
                         f"(out, residuals)")
    return result


def _described(value):
    return f"a tuple of {len(value)}" if isinstance(value, tuple) else f"one value ({type(value).__name__})"


def _scalar(v):
    return v[()] if v.ndim == 0 else v
