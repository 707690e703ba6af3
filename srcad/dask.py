"""Data-parallel and ensemble gradients of srcad functions on Dask.

A loss summed over the rows of a data set is a sum of per-chunk losses, and
so is its gradient: each worker runs the compiled function (under a
``GradientTape``) on the chunks it holds and the partial values and gradients
are summed in a tree on the cluster, the chunks of one worker first, so that
only a worker's total crosses to another (and with a few workers, only to the
client, which adds them).  Only the parameters travel to the
workers (scattered once per call) and only gradients come back; the data stay
where Dask keeps them, so persist them once (``data = client.persist(data)``)
before calling these repeatedly.

A call sends the scheduler one graph, however many chunks.  Each chunk's
task is asked to run on the worker that holds the chunk now (a loose
restriction: another worker takes it if that one is gone, and Dask's work
stealing still balances), and the previous call's futures (its parameters and
result) are held until the next call is submitted and released with it:
Distributed sends a client's messages to the scheduler at most every 10 ms,
and a release sent when a call returns would hold the next call back.

The function travels by its source (see :mod:`srcad.serialize`): each worker
rebuilds and compiles it once, from its own disk cache where it has one, and
reuses it for every later task.  Without a client, or under one of Dask's
local schedulers, the same calls run locally.

Needs the ``dask`` extra (``pip install "srcad[dask]"``); ``import srcad``
never imports this module.
"""

import asyncio
import contextlib
import threading
import traceback
import uuid

import numpy as np

try:
    import dask
    import dask.array as da
    from dask.core import flatten
    from dask.delayed import Delayed
    from dask.highlevelgraph import HighLevelGraph, MaterializedLayer
    from dask.task_spec import DataNode, Task, TaskRef
except ImportError as e:  # pragma: no cover - the extra is missing
    raise ImportError("srcad.dask needs Dask: pip install \"srcad[dask]\" "
                      "(or pip install \"dask[distributed]\")") from e

from .serialize import registry_stats
from .tape import GradientTape, UnconnectedGradients
from .tensor import constant

__all__ = ["value_and_grad", "map_gradients", "worker_stats"]

_FAN_IN = 8                     # partial results summed per reduction task
_LOCAL_SCHEDULERS = ("sync", "synchronous", "single-threaded", "threads", "threading", "processes", "multiprocessing")
_COUNTS = {"chunks": 0, "rows": 0}
_COMPILE_LOCK = threading.RLock()
_HELD = {}                      # client id -> the previous call's futures, released with the next call


def value_and_grad(f, params, data, *, client=None, argnums=0):
    """Value and gradient of ``sum over chunks of f(params, *chunks)``, computed where the data are.

    ``data`` is a ``dask.array`` chunked along axis 0 (or a tuple of them with
    the same number of rows; they are aligned to the first one's chunks, other
    axes kept whole).  ``f`` is called as ``f(params, *chunks)`` when
    ``params`` is one array and ``f(*params, *chunks)`` when it is a tuple;
    it must return a scalar, and the loss is the sum of those scalars.
    Returns ``(value, gradient)``: a float and NumPy gradients of the
    parameters ``argnums`` selects (JAX's convention: an int gives one array,
    a tuple gives a tuple).  With ``jac=True`` it is what
    ``scipy.optimize.minimize`` expects.
    """
    spread = isinstance(params, tuple)
    values = tuple(_as_parameter(p, f, i) for i, p in enumerate(params if spread else (params,)))
    picks, single = _argnums(argnums, len(values), f)
    arrays = _aligned(data, f)
    blocks = list(zip(*(list(flatten(a.__dask_keys__())) for a in arrays)))
    starts = [int(s) for s in np.concatenate([[0], np.cumsum(arrays[0].chunks[0])[:-1]])]

    def tasks(shipped, token, where):         # a task per chunk, asked to run where the chunk lies
        layer, leaves, pins = {}, [], {}
        for i, chunk in enumerate(blocks):
            key = (f"srcad-chunk-{token}", i)
            layer[key] = Task(key, _chunk_value_and_grad, shipped, picks, spread, starts[i],
                              *(TaskRef(b) for b in chunk))
            leaves.append((key, where.get(i)))
            if i in where:
                pins[key] = [where[i]]
        totals = _tree_sum(layer, leaves, token)
        return MaterializedLayer(layer, annotations={"workers": pins.get, "allow_other_workers": True}), totals

    value, grads = _sum(*_run(_client(client), (f, _origin(f), values), tasks, arrays, blocks))
    return value, (grads[0] if single else grads)


def map_gradients(f, param_sets, *static, client=None):
    """The gradient of the scalar ``f(row, *static)`` for every row of the 2-D ``param_sets``.

    An ensemble: rows go out in batches (a few per worker) and each task
    differentiates ``sum over its rows of f(row, *static)`` in one compiled
    call (a plain Python ``f`` runs row by row under a tape); the result is
    one NumPy array shaped like ``param_sets``.  ``static`` (data shared by
    all rows) is scattered once.
    """
    rows = np.asarray(param_sets)
    if rows.ndim != 2:
        raise ValueError(f"map_gradients({_name(f)}): param_sets must be 2-D (one parameter set per row), "
                         f"got shape {rows.shape}")
    if rows.dtype.kind != "f":
        rows = rows.astype(np.float64)
    if not len(rows):
        return np.zeros_like(rows)
    client = _client(client)
    workers = len(client.scheduler_info()["workers"]) if client is not None else 1
    bounds = np.linspace(0, len(rows), min(len(rows), 4 * max(workers, 1)) + 1).astype(int)

    def tasks(shipped, token, where):
        layer = {}
        for a, b in zip(bounds[:-1], bounds[1:]):
            key = (f"srcad-rows-{token}", int(a))
            layer[key] = Task(key, _gradient_rows, shipped, DataNode(None, rows[a:b]), int(a))
        return layer, list(layer)

    parts = _run(client, (f, _origin(f), static), tasks, keep=False)
    return np.concatenate(parts).reshape(rows.shape)


def worker_stats():
    """What this process has done for srcad.dask: ``chunks`` and ``rows`` evaluated, and its function
    registry (``rebuilt``, ``reused``, ``compiled`` signatures per function, the row-batched forms of
    ``map_gradients`` included); ``client.run(worker_stats)`` asks every worker."""
    stats = {**_COUNTS, **registry_stats()}
    for _, batched in _BATCHED.values():
        name = batched.python_function.__qualname__
        stats["compiled"][name] = stats["compiled"].get(name, 0) + len(batched._transforms)
    return stats


# --- on the workers -------------------------------------------------------------------------------

def _chunk_value_and_grad(shipped, picks, spread, start, *chunks):
    f, origin, values = shipped
    chunks = tuple(_owned(c) for c in chunks)
    _COUNTS["chunks"] += 1
    try:
        params = [constant(v) for v in values]
        with _first_compile(f), GradientTape() as tape:
            tape.watch([params[i] for i in picks])
            loss = f(*params, *chunks) if spread else f(params[0], *chunks)
        _check_scalar(loss, f)
        grads = tape.gradient(loss, [params[i] for i in picks], unconnected_gradients=UnconnectedGradients.ZERO)
    except Exception as e:
        raise _located(e, f, origin, f"rows {start}:{start + len(chunks[0])} of the data") from e
    return float(np.asarray(_raw(loss))), tuple(np.asarray(_raw(g), dtype=np.float64) for g in grads)


def _gradient_rows(shipped, rows, start):
    f, origin, static = shipped
    static = tuple(_owned(v) if isinstance(v, np.ndarray) else v for v in static)   # (one type, however it came)
    batched = _batched(f, len(static))
    if batched is not None:            # all rows in one compiled call: d(sum of f(row)) / d rows, row by row
        _COUNTS["rows"] += len(rows)
        try:
            x = constant(np.array(rows, order="C"))
            with _first_compile(batched), GradientTape() as tape:
                tape.watch(x)
                y = batched(x, *static)
            return np.asarray(_raw(tape.gradient(y, x, unconnected_gradients=UnconnectedGradients.ZERO)))
        except Exception as e:
            raise _located(e, f, origin, f"param_sets rows {start}:{start + len(rows)}") from e
    out = np.empty_like(rows)
    for i in range(len(rows)):
        _COUNTS["rows"] += 1
        try:
            x = constant(rows[i].copy())
            with _first_compile(f), GradientTape() as tape:
                tape.watch(x)
                y = f(x, *static)
            _check_scalar(y, f)
            out[i] = np.asarray(_raw(tape.gradient(y, x, unconnected_gradients=UnconnectedGradients.ZERO)))
        except Exception as e:
            raise _located(e, f, origin, f"param_sets row {start + i}") from e
    return out


_BATCHED = {}   # (id of an @ad.function, number of static arguments) -> (function, its batched form)


def _batched(f, n_static):
    """``f`` over the rows of a matrix, summed, as one more ``@ad.function`` (None for plain Python
    functions): its gradient with respect to the matrix is every row's gradient, in one compiled call.
    Made once per worker process; the registry of :mod:`srcad.serialize` keeps ``f`` one object."""
    pyfunc = getattr(f, "python_function", None)
    if pyfunc is None:
        return None
    known = _BATCHED.get((id(f), n_static))
    if known is not None and known[0] is f:
        return known[1]
    from .function import Function
    from .source import Source

    statics = "".join(f", s{i}" for i in range(n_static))
    name = f"{pyfunc.__name__}_rows"
    text = (f"def {name}(rows{statics}):\n    total = 0.0\n    for r in range(rows.shape[0]):\n"
            f"        total += f(rows[r]{statics})\n    return total\n")
    filename = f"<srcad.dask: {pyfunc.__qualname__} summed over rows>"
    namespace = {"f": pyfunc, "__name__": __name__}
    exec(compile(text, filename, "exec"), namespace)
    rows_function = namespace[name]
    rows_function.__srcad_source__ = Source(text, filename, 1)
    batched = Function(rows_function)
    _BATCHED[(id(f), n_static)] = (f, batched)
    return batched


def _first_compile(f):
    """Threads of one worker (or the local threaded scheduler) take turns for a function's first
    compile: one compiles (or loads from the disk cache), the others then reuse it."""
    return _COMPILE_LOCK if getattr(f, "_transforms", None) == {} else contextlib.nullcontext()


def _sum(*parts):
    value = sum(p[0] for p in parts)
    grads = tuple(sum(g) for g in zip(*(p[1] for p in parts)))
    return value, grads


# --- helpers --------------------------------------------------------------------------------------

def _run(client, shipped, tasks, data=(), blocks=(), *, keep=True):
    """The values of the keys of ``tasks(shipped_ref, token, where)``, which returns its layer of tasks and
    the keys wanted.  ``shipped`` (the function and its parameters) is scattered once to every worker, or
    is a literal in the tasks under a local scheduler; ``where`` maps the index of a chunk (its keys in
    ``blocks``, of the dask arrays ``data``) to the worker holding it now.  ``keep``: hold the results on
    the cluster until the next call (small ones); else they go once gathered."""
    token = uuid.uuid4().hex
    if client is None:
        layer, keys = tasks(DataNode(None, shipped), token, {})
        graph = HighLevelGraph.from_collections(f"srcad-{token}", layer, dependencies=data)
        return list(dask.compute(*(Delayed(k, graph, layer=f"srcad-{token}") for k in keys)))
    futures = client.sync(_scatter_and_submit, client, shipped, tasks, token, data, blocks, keep)
    return client.gather(futures)


async def _scatter_and_submit(client, shipped, tasks, token, data, blocks, keep):
    """Scatter and ask where the chunks lie (at once), then submit the graph in the same turn of the client's
    event loop as the release of the previous call's futures, so that both leave in one batch of messages
    (see the module docstring)."""
    block_keys = [key for chunk in blocks for key in chunk]
    [ref], held = await asyncio.gather(
        client.scatter([shipped], broadcast=True, hash=False, asynchronous=True),
        client.scheduler.who_has(keys=block_keys) if block_keys else asyncio.sleep(0, result={}))
    layer, keys = tasks(TaskRef(ref.key), token, _holders(blocks, held))
    graph = HighLevelGraph.from_collections(f"srcad-{token}", layer, dependencies=data)
    for future in _HELD.pop(client.id, ()):
        future.release()
    futures = client.get(graph, keys, sync=False)
    for closed in [c for c, futures_of_c in _HELD.items() if futures_of_c[0].client.status == "closed"]:
        del _HELD[closed]
    _HELD[client.id] = (ref, *futures) if keep else (ref,)
    return futures


def _holders(blocks, held):
    """{chunk index: a worker holding the first of its blocks held anywhere}, from the scheduler's who_has."""
    where = {}
    for i, chunk in enumerate(blocks):
        holder = next((held[k][0] for k in chunk if held.get(k)), None)
        if holder is not None:
            where[i] = holder
    return where


def _tree_sum(layer, parts, token):
    """Adds summing tasks to ``layer`` and returns the keys of at most ``_FAN_IN`` totals, which the client
    adds.  ``parts``: (key, worker) of the partials.  Each task adds up to ``_FAN_IN`` partials of one
    worker, until every worker has one; then the workers' totals are added on the cluster while there are
    more than ``_FAN_IN`` of them, so that only those cross between workers (a sum there would cost a
    task more, and a transfer, for what the client adds in microseconds)."""
    level = 0
    while len(parts) > _FAN_IN or len({worker for _, worker in parts}) < len(parts):
        by_worker = {}
        for key, worker in parts:
            by_worker.setdefault(worker, []).append(key)
        if all(len(keys) == 1 for keys in by_worker.values()):
            by_worker = {None: [key for key, _ in parts]}
        parts = []
        for worker, keys in by_worker.items():
            for j in range(0, len(keys), _FAN_IN):
                group = keys[j:j + _FAN_IN]
                key = group[0]
                if len(group) > 1:
                    key = (f"srcad-sum-{token}", level, len(parts))
                    layer[key] = Task(key, _sum, *(TaskRef(k) for k in group))
                parts.append((key, worker))
        level += 1
    return [key for key, _ in parts]


def _client(client):
    """The distributed client to use: the one given, else the default one, unless Dask's configured
    scheduler is a local one (then None: run locally)."""
    if client is not None:
        return client
    if dask.config.get("scheduler", None) in _LOCAL_SCHEDULERS:
        return None
    try:
        from distributed import default_client
        return default_client()
    except (ImportError, ValueError):
        return None


def _as_parameter(p, f, i):
    a = np.asarray(_raw(p))
    if a.dtype.kind in "biu":
        a = a.astype(np.float64)
    if a.dtype.kind != "f":
        raise TypeError(f"value_and_grad({_name(f)}): parameter {i} must be a float array, got dtype {a.dtype}")
    return a


def _argnums(argnums, n, f):
    single = isinstance(argnums, int)
    picks = (argnums,) if single else tuple(argnums)
    for k in picks:
        if not isinstance(k, int) or not -n <= k < n:
            raise ValueError(f"value_and_grad({_name(f)}): argnums={argnums!r} does not select among the "
                             f"{n} parameter(s); pass ints in range({n})")
    return tuple(k % n for k in picks), single


def _aligned(data, f):
    arrays = data if isinstance(data, tuple) else (data,)
    if not arrays:
        raise ValueError(f"value_and_grad({_name(f)}): data is an empty tuple; pass a dask array or a tuple of them")
    first = next((a for a in arrays if isinstance(a, da.Array)), None)
    rows = np.shape(arrays[0])[0] if np.ndim(arrays[0]) else None
    out = []
    for a in arrays:
        if not isinstance(a, da.Array):
            a = da.from_array(np.asarray(a), chunks=-1)
        if a.ndim == 0 or a.shape[0] != rows or not rows:
            raise ValueError(f"value_and_grad({_name(f)}): every data array must have the same number of rows "
                             f"(axis 0), at least one; got shapes {[np.shape(x) for x in arrays]}")
        chunks = (first.chunks[0] if first is not None else (rows,),) + tuple((s,) for s in a.shape[1:])
        out.append(a if a.chunks == chunks else a.rechunk(chunks))
    return tuple(out)


def _owned(c):
    """A writeable, aligned, C-contiguous array: what arrives from another worker can be read-only or
    unaligned, and each of those is a different Numba type (another compile)."""
    c = np.asarray(c)
    flags = c.flags
    return c if flags.writeable and flags.aligned and flags.c_contiguous else np.array(c, order="C")


def _raw(x):
    return x.numpy() if hasattr(x, "numpy") else x


def _check_scalar(y, f):
    if np.ndim(_raw(y)) != 0:
        raise ValueError(f"{_name(f)} must return a scalar (the loss of its chunk or row); it returned shape "
                         f"{np.shape(_raw(y))}")


def _name(f):
    return getattr(f, "__qualname__", None) or repr(f)


def _origin(f):
    """``(file, line of the def)`` of ``f``, taken in this process: cloudpickle ships a function by value
    without its file name."""
    pyfunc = getattr(f, "python_function", f)
    src = getattr(pyfunc, "__srcad_source__", None)
    if src is not None:
        return src.filename, src.first_line
    code = getattr(pyfunc, "__code__", None)
    return (code.co_filename, code.co_firstlineno) if code is not None else ("?", "?")


def _located(e, f, origin, where):
    """``e`` restated with the user's function and line (the failing line where Python saw it, else the
    function's ``def`` line: compiled code does not report lines at run time)."""
    code = getattr(getattr(f, "python_function", f), "__code__", None)
    filename, line = origin
    for frame, lineno in traceback.walk_tb(e.__traceback__):
        if code is not None and frame.f_code is code:
            line = lineno
    message = f"{_name(f)} ({filename}, line {line}) failed on {where}: {type(e).__name__}: {e}"
    try:
        return type(e)(message)
    except Exception:
        return RuntimeError(message)
