"""GradientTape: records operations per thread and runs the backward sweep.

Every recording tape sits on a per-thread stack.  An operation is recorded on a
tape when one of its inputs is *tracked* by that tape (watched, or produced by
an operation the tape recorded) and has a differentiable dtype.  Recording
appends one ``Node`` shared by all tapes that record it.  ``gradient`` walks a
tape's nodes backwards, calling each node's VJP; the VJPs are srcad operations
themselves, so tapes that are still recording record the backward pass too,
which is how higher-order derivatives work.
"""

import collections
import contextlib
import enum
import logging
import threading
import types

import numpy as np

from .tensor import Tensor, Variable

__all__ = ["GradientTape", "UnconnectedGradients"]

_log = logging.getLogger("srcad")
_DIFFERENTIABLE_KINDS = frozenset("fc")
_ndarray = np.ndarray
_warned_persistent_inside = False   # TF logs this warning once per process


class UnconnectedGradients(enum.Enum):
    """What ``gradient`` returns for a source the target does not depend on."""

    NONE = "none"
    ZERO = "zero"


_UNCONNECTED_NONE = UnconnectedGradients.NONE  # a module constant: the enum's attribute lookup is slow


class _ThreadTapes(threading.local):
    def __init__(self):
        self.tapes = []
        self.watchers = []   # custom_gradient's variable watchers (see custom.py)


_thread = _ThreadTapes()


def recording_tapes():
    """The tapes recording on this thread (innermost last); empty means eager."""
    return _thread.tapes


class Node(collections.namedtuple("Node", "op inputs outputs attrs")):
    """One recorded operation.

    ``op.vjp(node, output_grads, needed)`` returns one cotangent per input:
    ``None`` where ``needed`` is False (or the input gets no gradient).
    """

    __slots__ = ()


_new_node = tuple.__new__  # builds a Node without a Python-level __new__: the recording hot path
_NO_ATTRS = types.MappingProxyType({})  # the attrs of every operation recorded without any


def record(op, inputs, outputs, attrs=_NO_ATTRS, tapes=None):
    """Put an operation on every recording tape that tracks one of its inputs.

    ``inputs`` may hold Variables; they are replaced by their read tensors, and
    the tapes that watch (or auto-watch) the variable start tracking the read.
    ``tapes``: this thread's recording tapes, when the caller has them at hand.
    Returns the inputs as recorded (reads in place of variables).
    """
    if tapes is None:
        tapes = _thread.tapes
    for x in inputs:
        if type(x) is Variable:
            inputs = _reads_in_place_of_variables(inputs, tapes)
            break
    node = None
    for tape in tapes:
        tracked = tape._tracked
        for x in inputs:
            if id(x) in tracked and x._value.dtype.kind in _DIFFERENTIABLE_KINDS:
                if node is None:
                    node = _new_node(Node, (op, inputs, outputs, attrs))
                tape._nodes.append(node)
                for out in outputs:
                    if out is not None:        # a compiled function may return None
                        tracked[id(out)] = out
                break
    return inputs


def _reads_in_place_of_variables(inputs, tapes):
    """Each Variable replaced by its read, tracked by the tapes that watch (or auto-watch) it."""
    watchers = _thread.watchers
    recorded = []
    for x in inputs:
        if type(x) is Variable:
            read = x._read
            if read is None:
                read = x.read_value()
            for tape in tapes:
                if id(read) not in tape._tracked and tape._watches(x):
                    tape._track_variable(x, read)
            if watchers and x.trainable:
                for watcher in watchers:
                    watcher.add(x)
            x = read
        recorded.append(x)
    return recorded


def needs_gradient(x, tapes):
    """Would one of ``tapes`` record an operation that reads ``x``?"""
    if not isinstance(x, Tensor) or x._value.dtype.kind not in _DIFFERENTIABLE_KINDS:
        return False
    if type(x) is Variable:
        return any(t._watches(x) for t in tapes)
    return any(id(x) in t._tracked for t in tapes)


def flatten(structure, what=None):
    """Leaves of a nest of lists, tuples and dicts (dict values in key order).  ``what`` names the
    argument in the error raised for a dict whose keys cannot be sorted."""
    if isinstance(structure, Tensor):
        return [structure]
    if isinstance(structure, (list, tuple)):
        return [leaf for item in structure for leaf in flatten(item, what)]
    if isinstance(structure, dict):
        return [leaf for key in sorted_keys(structure, what) for leaf in flatten(structure[key], what)]
    return [structure]


def sorted_keys(mapping, what=None):
    """A dict's keys in sorted order, the order nests flatten it in (as tf.nest does)."""
    try:
        return sorted(mapping)
    except TypeError:
        types = sorted({type(k).__name__ for k in mapping})
        where = f"Argument `{what}` holds a dict" if what else "A dict"
        raise TypeError(f"nest only supports dicts with sortable keys: {where} with keys {list(mapping)!r} (types "
                        f"{', '.join(types)}), which cannot be flattened, because its values are flattened in "
                        f"sorted key order. Use keys of one type (all str, or all numbers).") from None


def _pack_like(structure, leaves):
    """Rebuild ``structure`` with ``leaves`` (an iterator) in place of its leaves."""
    if isinstance(structure, (list, tuple)):
        items = [_pack_like(item, leaves) for item in structure]
        return type(structure)(*items) if hasattr(structure, "_fields") else type(structure)(items)
    if isinstance(structure, dict):
        packed = {key: _pack_like(structure[key], leaves) for key in sorted_keys(structure)}
        try:
            return type(structure)((key, packed[key]) for key in structure)  # the caller's key order
        except TypeError:  # dict subclasses with other constructors (defaultdict)
            return {key: packed[key] for key in structure}
    return next(leaves)


def pack_like(structure, flat):
    if isinstance(structure, Tensor):
        return flat[0]
    return _pack_like(structure, iter(flat))


def parse_unconnected(value):
    if isinstance(value, UnconnectedGradients):
        return value
    try:
        return UnconnectedGradients(value)
    except ValueError:
        raise ValueError(f"Unknown value for unconnected_gradients: {value!r}") from None


class GradientTape:
    """Records operations for reverse-mode differentiation (as ``tf.GradientTape``)."""

    def __init__(self, persistent=False, watch_accessed_variables=True):
        self._persistent = bool(persistent)
        self._watch_accessed_variables = bool(watch_accessed_variables)
        self._recording = False
        self._created = False   # a tape exists once the first __enter__ made one
        self._consumed = False  # a non-persistent tape after its one gradient/jacobian
        self._clear()

    def _clear(self):
        self._nodes = []
        self._tracked = {}            # id -> tensor, for every tensor this tape follows
        self._watched_variables = {}  # id -> Variable
        self._variable_keys = {}      # id(variable) -> [its id, then the ids of its reads tracked here]

    # -- context ---------------------------------------------------------------
    def __enter__(self):
        if self._recording:
            raise ValueError("Tape is still recording, This can happen if you try to re-enter an already-active tape.")
        if self._consumed:   # a used non-persistent tape starts afresh (watches made before entering are kept)
            self._clear()
            self._consumed = False
        self._created = True
        _thread.tapes.append(self)
        self._recording = True
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._recording:
            tapes = _thread.tapes
            if tapes and tapes[-1] is self:
                tapes.pop()
                self._recording = False
            else:
                self._pop("exited (__exit__)")
        return False

    def _push(self):
        _thread.tapes.append(self)
        self._recording = True

    def _pop(self, action):
        """Take this tape off this thread's stack.  A recording tape that is not on it was entered on
        another thread: its stack cannot be changed from here, so ``action`` (what the caller does, for
        the message) is refused and the tape keeps recording there."""
        tapes = _thread.tapes
        for i in range(len(tapes) - 1, -1, -1):
            if tapes[i] is self:
                del tapes[i]
                self._recording = False
                return
        if self._recording:
            raise RuntimeError(
                f"GradientTape {action} on thread '{threading.current_thread().name}', but it was entered on "
                f"another thread, whose operations it records: tapes are per thread. Enter and exit a tape (and "
                f"call reset, stop_recording or a non-persistent gradient inside it) on the same thread; give "
                f"each thread a tape of its own.")

    # -- watching ----------------------------------------------------------------
    def watch(self, tensor):
        """Track a Tensor, a Variable or a nest of them."""
        for x in flatten(tensor, "tensor"):
            if not isinstance(x, Tensor):
                raise ValueError(
                    f"Passed in object {x} of type '{type(x).__name__}', not ad.Tensor or ad.Variable.")
            if x.dtype.kind not in _DIFFERENTIABLE_KINDS:
                _log.warning("The dtype of the watched tensor must be floating (e.g. float32), got %s", x.dtype)
            if self._consumed:
                self._clear()
                self._consumed = False
            if isinstance(x, Variable):
                self._watched_variables[id(x)] = x
                self._tracked[id(x)] = x
                if x._read is not None:
                    self._track_variable(x, x._read)
            else:
                self._tracked[id(x)] = x

    def _watches(self, variable):
        """Does this tape follow ``variable``: watched, or auto-watched when read because it is trainable?"""
        return id(variable) in self._watched_variables or (self._watch_accessed_variables and variable.trainable)

    def _track_variable(self, variable, read):
        self._watched_variables[id(variable)] = variable
        if id(read) not in self._tracked:
            self._tracked[id(read)] = read
            self._variable_keys.setdefault(id(variable), [id(variable)]).append(id(read))

    def watched_variables(self):
        """Variables this tape watches, in the order they were created."""
        return tuple(sorted(self._watched_variables.values(), key=lambda v: v._order))

    # -- recording control -----------------------------------------------------------
    @contextlib.contextmanager
    def stop_recording(self):
        """Suspend recording on this tape (other tapes keep recording)."""
        if not self._recording:
            if self._created and not self._consumed:
                raise ValueError("Tape is not recording.")
            raise RuntimeError("Trying to stop recording a tape which is not recording.")
        self._pop("stop_recording() called")
        try:
            yield
        finally:
            self._push()

    def reset(self):
        """Discard everything recorded so far and keep recording on a fresh tape."""
        if not self._recording:
            raise ValueError("Tape is not recording.")
        self._pop("reset() called")
        self._clear()
        self._push()

    # -- gradients -----------------------------------------------------------------
    def _check_usable(self):
        if not self._created or self._consumed:
            raise RuntimeError(
                "A non-persistent GradientTape can only be used to compute one set of gradients (or jacobians)")

    def _begin_gradient(self):
        """The common prologue of gradient/jacobian: usability, and leaving our own context."""
        global _warned_persistent_inside
        self._check_usable()
        if self._recording:
            if not self._persistent:
                self._pop("gradient() or jacobian() called inside its context")
            elif not _warned_persistent_inside:
                _warned_persistent_inside = True
                _log.warning(
                    "Calling GradientTape.gradient on a persistent tape inside its context is significantly less "
                    "efficient than calling it outside the context (it causes the gradient ops to be recorded on "
                    "the tape, leading to increased CPU and memory usage). Only call GradientTape.gradient inside "
                    "the context if you actually want to trace the gradient in order to compute higher order "
                    "derivatives.")

    def _end_gradient(self):
        if not self._persistent:
            self._consumed = True
            self._nodes = []
            self._tracked = {}

    def gradient(self, target, sources, output_gradients=None, unconnected_gradients=UnconnectedGradients.NONE):
        """Gradients of the sum of ``target`` with respect to each of ``sources``."""
        unconnected = unconnected_gradients
        if unconnected is not _UNCONNECTED_NONE:
            unconnected = parse_unconnected(unconnected)
        if self._recording or not self._created or self._consumed:
            self._begin_gradient()
        if output_gradients is None and isinstance(target, Tensor) and isinstance(sources, Tensor) \
                and sources._value.dtype.kind in _DIFFERENTIABLE_KINDS:
            try:  # the common case, without the nest handling below
                grad = self._backprop((target,), (_ones(target._value),), (sources,))[0]
            finally:
                self._end_gradient()
            return grad if grad is not None or unconnected is _UNCONNECTED_NONE else _zeros_like(sources)
        if target is None:
            raise TypeError("Argument `target` should be a list or nested structure of Tensors, Variables or "
                            "CompositeTensors to be differentiated, but received None.")
        targets = [_as_target(t) for t in flatten(target, "target")]
        flat_sources = check_sources(sources)
        seeds = _seed_gradients(targets, output_gradients)
        try:
            grads = self._backprop(targets, seeds, flat_sources)
        finally:
            self._end_gradient()
        result = [g if g is not None or unconnected is _UNCONNECTED_NONE else _zeros_like(s)
                  for g, s in zip(grads, flat_sources)]
        return pack_like(sources, result)

    def _backprop(self, targets, seeds, sources):
        """Run the backward sweep from ``targets`` (with cotangents ``seeds``) to ``sources``.

        Cotangents may carry leading batch axes (jacobians); every VJP rule
        accepts them.  Returns one gradient (or None) per source.  Only tensors
        of a differentiable dtype that depend on a source receive gradients.
        Cotangents may reach an op's ``vjp`` as plain NumPy values (when no
        tape records the sweep); ops that need Tensors wrap them.
        """
        source_keys = []   # per source, the ids its gradient is summed from (a variable: its reads)
        reachable = set()
        for s in sources:
            key = id(s)
            if type(s) is Variable:
                keys = self._variable_keys.get(key) or (key,)
            else:
                keys = (key,) if key in self._tracked else ()
            source_keys.append(keys)
            if s._value.dtype.kind in _DIFFERENTIABLE_KINDS:
                reachable.update(keys)
        # Forward over the tape: the nodes on a path from a source, each with its inputs' ids, which
        # of them lead back to a source (final by then: a source, or an earlier node's output), and
        # its outputs' ids.
        path = []
        for node in self._nodes[:] if self._recording else self._nodes:  # a recording tape grows as we go
            inputs = node.inputs
            if len(inputs) == 2:
                keys = (id(inputs[0]), id(inputs[1]))
                needed = [keys[0] in reachable, keys[1] in reachable]
            elif len(inputs) == 1:
                keys = (id(inputs[0]),)
                needed = [keys[0] in reachable]
            else:
                keys = tuple(map(id, inputs))
                needed = [k in reachable for k in keys]
            if True in needed:
                outputs = node.outputs          # None where a compiled function returned None
                if len(outputs) == 1:
                    out_keys = id(outputs[0])
                    if outputs[0] is not None and outputs[0]._value.dtype.kind in _DIFFERENTIABLE_KINDS:
                        reachable.add(out_keys)
                else:
                    out_keys = tuple(map(id, outputs))
                    reachable.update(k for k, out in zip(out_keys, outputs)
                                     if out is not None and out._value.dtype.kind in _DIFFERENTIABLE_KINDS)
                path.append((node, keys, needed, out_keys))

        raw = not _thread.tapes  # nothing records this sweep: the rules may run on plain NumPy values
        grads = {}
        get = grads.get
        for t, seed in zip(targets, seeds):
            if raw:
                if isinstance(seed, Tensor):
                    seed = seed._value
            elif not isinstance(seed, Tensor):
                seed = Tensor._wrap(seed)
            key = id(t)
            prev = get(key)
            grads[key] = seed if prev is None else prev + seed

        for node, keys, needed, out_keys in reversed(path):
            if type(out_keys) is int:  # one output
                g = get(out_keys)
                if g is None:
                    continue
                out_grads = (g,)
            else:
                out_grads = [get(k) for k in out_keys]
                if all(g is None for g in out_grads):
                    continue
            for key, g in zip(keys, node.op.vjp(node, out_grads, needed)):
                if g is not None:  # ops return None for inputs that are not needed
                    prev = get(key)
                    grads[key] = g if prev is None else prev + g

        result = []
        for s, keys in zip(sources, source_keys):
            total = None
            for k in keys:
                g = get(k)
                if g is not None:
                    total = g if total is None else total + g
            if total is not None:
                if not isinstance(total, Tensor):
                    wrapped = object.__new__(Tensor)
                    wrapped._value = total if isinstance(total, (np.ndarray, np.generic)) else np.asarray(total)
                    total = wrapped
                value, source_value = total._value, s._value  # equal NumPy scalar types: equal dtypes
                if (type(value) is not type(source_value) or type(value) is _ndarray) \
                        and value.dtype != source_value.dtype:
                    total = _in_dtype(total, source_value.dtype)
            result.append(total)
        return result

    def jacobian(self, target, sources, unconnected_gradients=UnconnectedGradients.NONE,
                 parallel_iterations=None, experimental_use_pfor=True):
        """Full Jacobian of ``target`` with respect to each of ``sources``."""
        from .jacobians import jacobian
        return jacobian(self, target, sources, unconnected_gradients, parallel_iterations, experimental_use_pfor)

    def batch_jacobian(self, target, source, unconnected_gradients=UnconnectedGradients.NONE,
                       parallel_iterations=None, experimental_use_pfor=True):
        """Per-example Jacobians ``[b, y..., x...]`` of ``target[i]`` with respect to ``source[i]``."""
        from .jacobians import batch_jacobian
        return batch_jacobian(self, target, source, unconnected_gradients, parallel_iterations,
                              experimental_use_pfor)


def check_sources(sources):
    """The flat sources, each a Tensor or Variable (TypeError otherwise; integer ones only logged)."""
    flat_sources = flatten(sources, "sources")
    for s in flat_sources:
        if not isinstance(s, Tensor):
            raise TypeError(f"Argument `sources` should be a Tensor, a Variable or a nested structure of them, but "
                            f"it holds {s!r} of type '{type(s).__name__}'.")
        if s._value.dtype.kind not in _DIFFERENTIABLE_KINDS:
            _log.warning("The dtype of the source tensor must be floating (e.g. float32) to get a gradient, got %s: "
                         "its gradient is None (or zeros with unconnected_gradients='zero').", s.dtype)
    return flat_sources


def _as_target(t):
    if isinstance(t, Tensor):
        return t
    if t is None:
        raise TypeError("Argument `target` should be a list or nested structure of Tensors, Variables or "
                        "CompositeTensors to be differentiated, but received None.")
    raise TypeError(f"Argument `target` should be a Tensor, a Variable or a nested structure of them, but it holds "
                    f"{t!r} of type '{type(t).__name__}'.")


def _seed_gradients(targets, output_gradients):
    """One cotangent per target: ones, or the caller's values broadcast to the target's shape."""
    if output_gradients is None:
        return [_ones_like(t) for t in targets]
    given = (flatten(output_gradients, "output_gradients") if isinstance(output_gradients, (list, tuple, dict))
             else [output_gradients])
    if len(targets) == 1 and len(given) != 1 and isinstance(output_gradients, (list, tuple)):
        given = [output_gradients]   # one target, its cotangent written as a nested list of numbers
    if len(given) != len(targets):
        raise ValueError(f"output_gradients must hold one entry per target: got {len(given)} for {len(targets)} "
                         f"targets.")
    seeds = [_ones_like(t) if g is None else fit_cotangent(g, t.shape, "output_gradients entry", "its target")
             for t, g in zip(targets, given)]
    for i, (t, g) in enumerate(zip(targets, seeds)):
        if g._value.dtype.kind == "c" and t._value.dtype.kind != "c":
            raise TypeError(
                f"output_gradients entry {i} has the complex dtype {g.dtype}, but its target has the real dtype "
                f"{t.dtype}: the cotangent of a real target must be real (tf.GradientTape fails on the dtype "
                f"mismatch too). Pass a real value; for a complex cotangent a + ib, take the gradients with a and "
                f"with b separately.")
    return seeds


def fit_cotangent(g, shape, what, of_what):
    """``g`` as a Tensor of ``shape``: equal, or broadcast from a compatible one; anything else is an error.

    ``what`` and ``of_what`` name the value and its owner in the messages.
    """
    from .ops import broadcast_to
    from .tensor import convert_to_tensor

    if not isinstance(g, Tensor):
        try:
            g = convert_to_tensor(g)
        except (TypeError, ValueError) as err:
            raise TypeError(f"{what} for {of_what} is {g!r} of type '{type(g).__name__}': expected a number, an "
                            f"array or a Tensor of shape {shape}.") from err
    if g.shape == shape:
        return g
    try:
        compatible = np.broadcast_shapes(g.shape, shape) == shape
    except ValueError:
        compatible = False
    if not compatible:
        raise ValueError(f"{what} for {of_what} has shape {g.shape}, incompatible with {of_what}'s shape {shape}: "
                         f"expected that shape or one that broadcasts to it.")
    return broadcast_to(g, shape)


def _in_dtype(grad, dtype):
    """A gradient in its source's dtype, as TensorFlow returns it (NumPy's type promotion may have widened
    it, e.g. float64 cotangents reaching a float32 source): a real source takes the real part, as tf.cast."""
    from .ops import rules

    if grad._value.dtype.kind == "c" and dtype.kind != "c":
        grad = rules.real(grad)
    return rules.cast(grad, dtype)


def _ones(value):
    return value.dtype.type(1) if value.ndim == 0 else np.ones(value.shape, value.dtype)


def _ones_like(t):
    return Tensor._wrap(_ones(t._value))


def _zeros_like(source):
    return Tensor._wrap(np.zeros_like(source._value))
