"""jacobian and batch_jacobian: many vector-Jacobian products in one backward sweep.

With ``experimental_use_pfor=True`` (the default) the Jacobian of a target with
``n`` elements is one backward sweep over a *batch* of ``n`` one-hot cotangents:
every VJP rule accepts cotangents with leading batch axes, so the rows of the
Jacobian come out of the sweep stacked along a leading axis.
``parallel_iterations`` splits that batch into chunks (one sweep each) to bound
memory; the results are identical.  With ``experimental_use_pfor=False`` the
rows are computed by a loop of ordinary gradients (the tape must be persistent).

``batch_jacobian`` assumes ``target[i]`` depends only on ``source[i]`` and
sends one cotangent per *column* of the target (``prod(target.shape[1:])`` of
them, each ones over the batch), as TensorFlow does.

Ops whose VJP cannot take batched cotangents (custom gradients, registered
gradients) wrap it with :func:`map_vjp_over_batch`, which runs it row by row.
"""

import logging

import numpy as np

from .tape import UnconnectedGradients, check_sources, pack_like, parse_unconnected, recording_tapes
from .tensor import Tensor, Variable

_log = logging.getLogger("srcad")

__all__ = ["jacobian", "batch_jacobian", "map_vjp_over_batch"]

_PFOR_OFF = ("GradientTape must be created with persistent=True to compute the jacobian with eager execution "
             "enabled and with  experimental_use_pfor set to False.")
_PFOR_OFF_BATCH = ("GradientTape must be created with persistent=True to compute the batch_jacobian with eager "
                   "execution enabled and  with experimental_use_pfor set to False.")
_PARALLEL_BATCH = ("GradientTape must be created with persistent=True to compute the batch_jacobian with "
                   "parallel_iterations.")
_VECTORIZE_FAILED = ("Encountered an exception while vectorizing the jacobian computation. Vectorization can be "
                     "disabled by setting experimental_use_pfor to False.")


def _check_target(target, what):
    if isinstance(target, Tensor):
        return target
    if target is None:
        raise TypeError(f"Argument `target` of {what} should be a Tensor or a Variable, but received None.")
    raise TypeError(f"Argument `target` of {what} should be a Tensor or a Variable, but received {target!r} of type "
                    f"'{type(target).__name__}'.")


def _check_parallel_iterations(parallel_iterations):
    if parallel_iterations is None:
        return None
    if isinstance(parallel_iterations, bool) or not isinstance(parallel_iterations, (int, np.integer)) \
            or parallel_iterations < 1:
        raise ValueError(f"parallel_iterations must be a positive integer or None, got {parallel_iterations!r}.")
    return int(parallel_iterations)


def _chunks(n, parallel_iterations):
    step = max(n if not parallel_iterations else parallel_iterations, 1)
    return [(start, min(start + step, n)) for start in range(0, n, step)] or [(0, 0)]


def _sweep(tape, target, seeds, sources, parallel_iterations):
    """Backprop ``seeds`` (leading axis = batch) in chunks; one stacked gradient (or None) per source."""
    from .ops import concatenate

    n = seeds.shape[0]
    parts = []
    for start, stop in _chunks(n, parallel_iterations):
        chunk = seeds[start:stop] if (start, stop) != (0, n) else seeds
        try:
            parts.append(tape._backprop([target], [Tensor._wrap(chunk)], sources))
        except ValueError as err:
            raise ValueError(_VECTORIZE_FAILED) from err
    result = []
    for i in range(len(sources)):
        pieces = [_as_tensor(p[i]) for p in parts]
        if any(p is None for p in pieces):
            result.append(None)
        else:
            result.append(pieces[0] if len(pieces) == 1 else concatenate(*pieces, axis=0))
    return result


def _loop(tape, target, seeds, sources, axis):
    """pfor off: one ordinary backward sweep per cotangent, results stacked along ``axis``.
    No cotangents at all (an empty target) give an empty Jacobian, as the vectorised path does."""
    from .ops import stack

    rows = [tape._backprop([target], [Tensor._wrap(np.ascontiguousarray(seed))], sources) for seed in seeds]
    result = []
    for i, source in enumerate(sources):
        column = [_as_tensor(r[i]) for r in rows]
        if not column:
            shape = list(source.shape)
            shape.insert(axis, 0)
            result.append(Tensor._wrap(np.zeros(shape, dtype=source.dtype)))
        elif any(c is None for c in column):
            result.append(None)
        else:
            result.append(stack(*column, axis=axis))
    return result


def _as_tensor(g):
    if g is None or isinstance(g, Tensor):
        return g
    return Tensor._wrap(np.asarray(g))


def jacobian(tape, target, sources, unconnected_gradients=UnconnectedGradients.NONE, parallel_iterations=None,
             experimental_use_pfor=True):
    """The Jacobian of ``target`` with respect to each of ``sources``: shapes ``target.shape + source.shape``."""
    from .ops import reshape

    unconnected = parse_unconnected(unconnected_gradients)
    tape._check_usable()
    target = _check_target(target, "jacobian")
    flat_sources = check_sources(sources)
    parallel_iterations = _check_parallel_iterations(parallel_iterations)
    if not experimental_use_pfor and not tape._persistent:
        raise RuntimeError(_PFOR_OFF)
    tape._begin_gradient()
    n = int(np.prod(target.shape, dtype=np.int64))
    try:
        if experimental_use_pfor and _forward_is_cheaper(tape, flat_sources, n):
            _log.debug("jacobian: forward mode, %d unit tangents (a batch per source) for %d target elements",
                       sum(s._value.size for s in flat_sources), n)
            return pack_like(sources, _forward_jacobian(tape, target, flat_sources, unconnected))
        seeds = np.eye(n, dtype=target.dtype).reshape((n,) + target.shape)
        if experimental_use_pfor:
            rows = _sweep(tape, target, seeds, flat_sources, parallel_iterations)
        else:
            rows = _loop(tape, target, seeds, flat_sources, axis=0)
    finally:
        tape._end_gradient()
    result = []
    for row, source in zip(rows, flat_sources):
        shape = target.shape + source.shape
        if row is None:
            result.append(None if unconnected is UnconnectedGradients.NONE
                          else Tensor._wrap(np.zeros(shape, dtype=source.dtype)))
        else:
            result.append(reshape(row, shape))
    return pack_like(sources, result)


def _forward_is_cheaper(tape, sources, n):
    """Forward mode (one tangent sweep per source element) where the sources have fewer elements than the
    target, nothing records the result (it is not differentiated again), and every recorded op makes its
    tangents exactly: a compiled segment by its compiled tangent, a primitive from its VJP rules."""
    from .function import CompiledSegment
    from .ops.registry import Primitive

    m = sum(s._value.size for s in sources)
    return 0 < m < n and not recording_tapes() and \
        all(isinstance(node.op, Primitive) or isinstance(node.op, CompiledSegment) and node.op.makes_tangents
            for node in tape._nodes)


def _forward_jacobian(tape, target, sources, unconnected):
    """The Jacobian a source at a time: a batch of its elements' unit tangents (leading axis: the
    columns) carried forward through the recorded nodes at once (`accumulator.node_tangents`)."""
    from .accumulator import node_tangents

    result = []
    for s in sources:
        keys = tape._variable_keys.get(id(s), (id(s),)) if isinstance(s, Variable) else (id(s),)
        m = s._value.size
        units = Tensor._wrap(np.eye(m, dtype=s.dtype).reshape((m,) + s.shape))
        tangents = {key: units for key in keys}
        for node in tape._nodes:
            ins = [tangents.get(id(x)) for x in node.inputs]
            if any(t is not None for t in ins):
                for y, t in zip(node.outputs, node_tangents(node, ins, rows=m)):
                    if t is not None:
                        tangents[id(y)] = t
        columns = tangents.get(id(target))
        shape = target.shape + s.shape
        if columns is None or not m:
            result.append(None if unconnected is UnconnectedGradients.NONE
                          else Tensor._wrap(np.zeros(shape, dtype=s.dtype)))
            continue
        stacked = np.moveaxis(np.asarray(columns._value, dtype=target.dtype), 0, -1)
        result.append(Tensor._wrap(stacked.reshape(shape).astype(s.dtype)))
    return result


def batch_jacobian(tape, target, source, unconnected_gradients=UnconnectedGradients.NONE, parallel_iterations=None,
                   experimental_use_pfor=True):
    """Per-example Jacobians ``[b, y..., x...]``, assuming ``target[i]`` depends only on ``source[i]``."""
    from .ops import reshape, transpose

    parse_unconnected(unconnected_gradients)  # validated; unconnected sources give zeros either way (as TF)
    tape._check_usable()
    target = _check_target(target, "batch_jacobian")
    if not isinstance(source, Tensor):
        raise TypeError(f"Argument `source` of batch_jacobian should be a Tensor or a Variable, but received "
                        f"{source!r} of type '{type(source).__name__}'.")
    check_sources(source)
    for t in (target, source):
        if t.ndim < 2:
            raise ValueError(f"Shape {t.shape} must have rank at least 2")
    if target.shape[0] != source.shape[0]:
        raise ValueError(f"Need first dimension of target shape ({target.shape}) and source shape ({source.shape}) "
                         f"to match.")
    parallel_iterations = _check_parallel_iterations(parallel_iterations)
    if not tape._persistent:
        if not experimental_use_pfor:
            raise RuntimeError(_PFOR_OFF_BATCH)
        if parallel_iterations is not None:
            raise RuntimeError(_PARALLEL_BATCH)
    tape._begin_gradient()
    b, y_shape, x_shape = target.shape[0], target.shape[1:], source.shape[1:]
    m = int(np.prod(y_shape, dtype=np.int64))
    out_shape = (b,) + y_shape + x_shape
    try:
        if m == 0 or b == 0:
            grad = None
        else:
            # Cotangent k is ones at column k of every row: shape (m, b, m) -> (m, b, y...).
            seeds = np.broadcast_to(np.eye(m, dtype=target.dtype)[:, None, :], (m, b, m)).reshape((m,) + target.shape)
            if experimental_use_pfor:
                (grad,) = _sweep(tape, target, seeds, [source], parallel_iterations)
                if grad is not None:   # (m, b, x...) -> (b, m, x...)
                    grad = transpose(grad, (1, 0) + tuple(range(2, grad.ndim)))
            else:
                (grad,) = _loop(tape, target, seeds, [source], axis=1)
    finally:
        tape._end_gradient()
    if grad is None:
        return Tensor._wrap(np.zeros(out_shape, dtype=target.dtype))
    return reshape(grad, out_shape)


def map_vjp_over_batch(vjp):
    """Wrap ``vjp(node, out_grads, needed)`` so that batched cotangents are handled one row at a time.

    For ops whose gradient function only understands cotangents of the outputs'
    own shapes (custom gradients, registered gradients).  The rows are taken
    and stacked with srcad operations, so an outer tape still records them.
    """
    def batched_vjp(node, out_grads, needed):
        out_grads = [g if g is None or isinstance(g, Tensor) else Tensor._wrap(g) for g in out_grads]
        lead = batch_shape(out_grads, node.outputs)
        if not lead:
            return vjp(node, out_grads, needed)
        return _map_rows(vjp, node, out_grads, needed, lead)
    return batched_vjp


def batch_shape(out_grads, outputs):
    """The leading batch axes that the cotangents carry beyond their outputs' shapes (``()`` for none),
    read from the first cotangent given."""
    for g, out in zip(out_grads, outputs):
        if g is not None:
            shape = g.shape if type(g) is np.ndarray else np.shape(g._value if isinstance(g, Tensor) else g)
            return shape[:max(len(shape) - out.ndim, 0)]
    return ()


def _map_rows(vjp, node, out_grads, needed, lead):
    from .ops import reshape, stack

    count = int(np.prod(lead, dtype=np.int64))
    flat = [None if g is None else reshape(_as_tensor(g), (count,) + out.shape)
            for g, out in zip(out_grads, node.outputs)]
    rows = [vjp(node, [None if g is None else g[i] for g in flat], needed) for i in range(count)]
    result = []
    for j, x in enumerate(node.inputs):
        if not needed[j] or not isinstance(x, Tensor):
            result.append(None)
            continue
        column = [_as_tensor(r[j]) for r in rows]
        present = [c for c in column if c is not None]
        if not present and count:
            result.append(None)
            continue
        dtype = present[0].dtype if present else x.dtype
        column = [Tensor._wrap(np.zeros(x.shape, dtype)) if c is None else c for c in column]
        stacked = stack(*column, axis=0) if column else Tensor._wrap(np.zeros((0,) + x.shape, dtype))
        result.append(reshape(stacked, tuple(lead) + x.shape))
    return result
