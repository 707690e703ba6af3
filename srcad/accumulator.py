"""ForwardAccumulator: forward mode (Jacobian-vector products), as ``tf.autodiff.ForwardAccumulator``.

An accumulator stands on the same per-thread stack as the recording tapes.  When
an operation reads a tensor the accumulator has a tangent for, ``tape.record``
hands it the node, and the accumulator computes the outputs' tangents at once.

Every operation that can be recorded already has a VJP, and a VJP is linear in
its cotangent ``u``: ``vjp(u) = J^T u``.  So the tangent ``J t`` is the gradient
with respect to ``u`` of ``<vjp(u), t>``, taken by a private tape at ``u = 0``.
That gives forward mode for every primitive, custom gradient and registered
gradient without a second rule table (TensorFlow derives its JVPs the same way).

Stack order is entry order: while an accumulator computes a tangent, only the
tapes and accumulators entered before it are on the stack, so outer ones see
(and differentiate) the tangent computation of inner ones and inner ones never
see an outer one's: ``outer.jvp(inner.jvp(y))`` is a second derivative, and an
accumulator around a tape gives Hessian-vector products
(``acc.jvp(tape.gradient(y, x))``).
"""

import numpy as np

from .tape import (_DIFFERENTIABLE_KINDS, _thread, GradientTape, UnconnectedGradients, flatten, pack_like,
                   parse_unconnected, sorted_keys)
from .tensor import Tensor, Variable, convert_to_tensor

__all__ = ["ForwardAccumulator"]


class ForwardAccumulator:
    """Computes Jacobian-vector products with forward-mode autodiff (as ``tf.autodiff.ForwardAccumulator``).

    ``primals``: a Tensor, a Variable or a nest of them; ``tangents``: the same nest of values of the
    same shapes (the vector the Jacobian multiplies).  Inside ``with acc:``, every operation on
    them (eager NumPy operations, custom gradients) computes its outputs' tangents as it runs;
    ``acc.jvp(y)`` looks the tangent of ``y`` up."""

    def __init__(self, primals, tangents):
        self._recording = False
        self._tangents = {}                # id(tensor) -> its tangent
        self._tracked = {}                 # id(tensor) -> tensor: what tape.record tests membership in
        self._variable_tangents = {}       # id(variable) -> the tangent its reads carry
        self._nodes = _TangentSink(self)   # tape.record appends a node here: its tangents are computed
        seen = set()
        for primal in flatten(primals, "primals"):
            if id(primal) in seen:
                raise ValueError(f"Tensor {primal} was specified as a primal multiple times. This may indicate an "
                                 f"error. If it was intended, please sum the corresponding tangents.")
            seen.add(id(primal))
        self.watch(primals, tangents)

    # -- context ---------------------------------------------------------------
    def __enter__(self):
        if self._recording:
            raise ValueError("Accumulator is already recording.")
        _thread.tapes.append(self)
        self._recording = True
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._recording:
            stack = _thread.tapes
            at = _position(stack, self)
            del stack[at:at + 1]
            self._recording = False
        return False

    # -- watching ----------------------------------------------------------------
    def watch(self, primals, tangents):
        """Give ``primals`` (a nest) the ``tangents`` (the same nest down to the primals; a tangent may be
        a Tensor, an array or nested lists of numbers); watching a tensor again adds to its tangent, as
        TensorFlow does."""
        for primal, tangent in _pairs(primals, tangents):
            self._watch_one(primal, tangent)

    def _watch_one(self, primal, tangent):
        if not isinstance(primal, Tensor):
            raise ValueError(f"Passed in object {primal} of type '{type(primal).__name__}', not ad.Tensor or "
                             f"ad.Variable: only Tensors and Variables can be primals of a ForwardAccumulator.")
        tangent = convert_to_tensor(tangent._value if isinstance(tangent, Tensor) else tangent, dtype=primal.dtype)
        if tangent.shape != primal.shape:
            raise ValueError(f"A tangent has shape {tangent.shape}, but its primal {primal} has shape "
                             f"{primal.shape}: each tangent must have its primal's shape.")
        table = self._variable_tangents if type(primal) is Variable else self._tangents
        previous = table.get(id(primal))
        table[id(primal)] = tangent if previous is None else previous + tangent
        if type(primal) is Variable:
            if primal._read is not None:
                self._track_variable(primal, primal._read)
        else:
            self._tracked[id(primal)] = primal

    def _watches(self, variable):
        """Do the reads of ``variable`` carry a tangent here (it was given one)?"""
        return id(variable) in self._variable_tangents

    def _track_variable(self, variable, read):
        self._tracked[id(read)] = read
        self._tangents[id(read)] = self._variable_tangents[id(variable)]

    # -- results -----------------------------------------------------------------
    def jvp(self, primals, unconnected_gradients=UnconnectedGradients.NONE):
        """The tangents computed for ``primals`` (a nest): None where there is none, or zeros with
        ``unconnected_gradients='zero'``.  Computes nothing: tangents are made as operations run."""
        unconnected = parse_unconnected(unconnected_gradients)

        def fetch(x):
            tangent = self._tangent_of(x) if isinstance(x, Tensor) else None
            if tangent is None and unconnected is UnconnectedGradients.ZERO and isinstance(x, Tensor):
                return Tensor._wrap(np.zeros_like(x._value))
            return tangent

        return pack_like(primals, [fetch(x) for x in flatten(primals, "primals")])

    def _tangent_of(self, x):
        if type(x) is Variable:
            return self._variable_tangents.get(id(x))
        return self._tangents.get(id(x))

    def _record(self, node):
        """Compute the tangents of ``node``'s outputs from its inputs' tangents."""
        stack = _thread.tapes
        _thread.tapes = stack[:_position(stack, self)]   # only those entered before this one see it
        try:
            out_tangents = node_tangents(node, [self._tangents.get(id(x)) for x in node.inputs])
        finally:
            _thread.tapes = stack
        for y, t in zip(node.outputs, out_tangents):
            if t is not None:
                self._tangents[id(y)] = t

    def __repr__(self):
        state = "recording" if self._recording else "not recording"
        return f"<srcad ForwardAccumulator, {state}, {len(self._tangents)} tangents>"


class _TangentSink:
    """What ``tape.record`` appends a ForwardAccumulator's nodes to: each one gets its tangents at once
    (an accumulator keeps no nodes)."""

    __slots__ = ("_accumulator",)

    def __init__(self, accumulator):
        self._accumulator = accumulator

    def append(self, node):
        self._accumulator._record(node)


def _pairs(primals, tangents):
    """(primal, tangent) for each primal of the nest ``primals``, its tangent where ``tangents`` holds it."""
    if isinstance(primals, (list, tuple)):
        if not isinstance(tangents, (list, tuple)) or len(tangents) != len(primals):
            raise ValueError(f"The two structures don't have the same nested structure: primals is a "
                             f"{type(primals).__name__} of {len(primals)}, tangents is {_describe(tangents)}.")
        return [pair for p, t in zip(primals, tangents) for pair in _pairs(p, t)]
    if isinstance(primals, dict):
        if not isinstance(tangents, dict) or set(tangents) != set(primals):
            raise ValueError(f"The two structures don't have the same nested structure: primals is a dict with "
                             f"keys {sorted(primals, key=repr)}, tangents is {_describe(tangents)}.")
        return [pair for k in sorted_keys(primals, "primals") for pair in _pairs(primals[k], tangents[k])]
    return [(primals, tangents)]


def _describe(value):
    if isinstance(value, dict):
        return f"a dict with keys {sorted(value, key=repr)}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}"
    return f"a {type(value).__name__}"


def node_tangents(node, tangents, rows=None):
    """The tangents of a recorded node's outputs (None where there is none) from its inputs' (None: zero):
    the op's own `jvp` where it has one (a compiled segment), else derived from its VJP. `rows`: the
    tangents carry a leading axis of that many rows (a batch, for `jacobian`), and so do the results."""
    inputs, outputs = node.inputs, node.outputs
    needed = [t is not None and x._value.dtype.kind in _DIFFERENTIABLE_KINDS for x, t in zip(inputs, tangents)]
    live = [k for k, y in enumerate(outputs) if y is not None and y._value.dtype.kind in _DIFFERENTIABLE_KINDS]
    made = [None] * len(outputs)
    if not live or True not in needed:
        return made
    given = [t if need else None for t, need in zip(tangents, needed)]
    if rows is not None:
        found = _tangent_rows(node, given, live, rows)
    elif hasattr(node.op, "jvp"):
        found = node.op.jvp(node, given)
        found = [found[k] for k in live]
    else:
        found = _tangents_through_vjp(node, tangents, needed, live)
    for k, t in zip(live, found):
        made[k] = t
    return made


def _tangent_rows(node, tangents, live, rows):
    """The tangents of the outputs in `live` for a batch of `rows` tangents: in one call where the op
    takes a batch (`jvp_rows`, a compiled segment), else row by row."""
    batched = getattr(node.op, "jvp_rows", None)
    found = batched(node, tangents, rows) if batched is not None else None
    if found is not None:
        return [found[k] for k in live]
    per_row = [node_tangents(node, [None if t is None else Tensor._wrap(t._value[r]) for t in tangents])
               for r in range(rows)]
    return [Tensor._wrap(np.stack([np.zeros_like(node.outputs[k]._value) if p[k] is None else np.asarray(p[k]._value)
                                   for p in per_row])) for k in live]


def _position(stack, item):
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] is item:
            return i
    return len(stack)


def _tangents_through_vjp(node, tangents, needed, live):
    """``J t`` for each output in ``live``: the gradient in ``u`` of ``sum_i <vjp_i(u), t_i>`` at ``u = 0``
    (a VJP is linear in its cotangent, so this is exact)."""
    outputs = node.outputs
    dummies = [Tensor._wrap(np.zeros_like(outputs[k]._value)) for k in live]
    with GradientTape() as tape:
        tape.watch(dummies)
        out_grads = [None] * len(outputs)
        for k, u in zip(live, dummies):
            out_grads[k] = u
        grads = node.op.vjp(node, out_grads, needed)
        total = None
        for g, t, need in zip(grads, tangents, needed):
            if need and g is not None:
                term = np.sum(_as_tensor(g) * t)
                total = term if total is None else total + term
    if total is None:
        return [None] * len(live)
    return tape.gradient(total, dummies, unconnected_gradients=UnconnectedGradients.ZERO)


def _as_tensor(g):
    return g if isinstance(g, Tensor) else Tensor._wrap(np.asarray(g))
