"""A compiled function called once for a whole batch: the batch axis in generated code.

A Jacobian sends a batch of cotangents through the same compiled adjoint (or
of tangents through the same compiled tangent), one per row of the result.
Called from Python row by row, each row pays a Python call and the rows run
one after another. `rows_function` makes, as IR, the function that takes the
batch with a leading axis and makes those calls inside compiled code,
writing each row's results into buffers with the same leading axis:

    def f_adjoint_rows(x, y, saved0, d_out0_rows, grad0_rows, grad1_rows):
        for row in range(grad0_rows.shape[0]):
            result = f_adjoint(x, y, saved0, d_out0_rows[row])
            store_row(grad0_rows, row, result[0])
            store_row(grad1_rows, row, result[1])

Its parallel twin runs the rows with `numba.prange` and marks each row done:
an exception raised in a parallel loop is lost there, so a batch with a row
not done runs again in the serial function, which raises it. `Rows` compiles
both lazily (the backend prints and loads them, the callee given by name) and
runs a batch in parallel where that pays: several threads, and rows measured
long enough (`PAYS_SECONDS` for the batch) to pay for waking them; and where
it is safe: a threading layer that takes parallel code from several threads.
A batch of rows computes what calls row by row compute, to rounding (compiled
together, the callee may be inlined and its loops vectorised differently).

The callee must leave its arguments as it got them (an adjoint that restores
buffers in place runs row by row instead: `Transformed.adjoint_rows`).
"""
import functools
import importlib
import time

import numba
import numpy as np

from .backends import cache
from .compiled import COMPILE_LOCK, Checked
from .ir import Assign, Attribute, Call, Const, Effect, For, Function, Name, Store, Subscript

PAYS_SECONDS = 2e-4       # a batch measured to take at least this long runs its rows in parallel


def rows_function(name, callee, fixed, batched, results, parallel):
    """The IR of `name`: `callee(*fixed, *(row of each batched))` once per row, result item `index`
    stored into row `row` of `buffer` for each `(index, buffer)` of `results`. `batched` names the
    batched parameters (None: the callee gets None there); `parallel` adds a `done` parameter,
    a flag per row."""
    row, result = "row", "result"
    args = [Name(p) for p in fixed] + [Const(None) if b is None else Subscript(Name(b), (Name(row),)) for b in batched]
    body = [Assign(result, Call(callee, tuple(args)))]
    body += [Effect(Call("srcad.store_row", (Name(buffer), Name(row), Subscript(Name(result), (Const(index),)))))
             for index, buffer in results]
    params = list(fixed) + [b for b in batched if b is not None] + [buffer for _, buffer in results]
    if parallel:
        body.append(Store("done", (Name(row),), Const(True)))
        params.append("done")
    stop = Subscript(Attribute(Name(results[0][1]), "shape"), (Const(0),))
    loop = For(row, Const(0), stop, Const(1), body, parallel=parallel)
    return Function(name, params, [loop], [])


@functools.cache
def layer_allows_threads():
    """May parallel code start from several threads at once? Not on workqueue, Numba's fallback threading
    layer: it aborts the process. Batches run in parallel only where Numba will take tbb or omp."""
    layer = numba.config.THREADING_LAYER
    if layer in ("tbb", "omp", "safe", "threadsafe"):
        return True
    if layer == "workqueue":
        return False
    for pool in ("tbbpool", "omppool"):
        try:
            importlib.import_module(f"numba.np.ufunc.{pool}")
            return True
        except ImportError:
            continue
    return False


class Rows:
    """`callee` (a `Checked` compiled function) called for a batch: `rows(fixed, batched, buffers)`
    fills `buffers` (leading axis: the rows) from `fixed` (values passed to every row) and `batched`
    (leading axis: the rows; None where the callee gets None). The generated function's parameters
    are named `fixed`, `batched` (None: not given) and, for result item `index`, `buffer`
    (`results`: `(index, buffer)` pairs)."""

    def __init__(self, callee, backend, fixed, batched, results):
        self._callee, self._backend = callee, backend
        self._fixed, self._batched, self._results = list(fixed), list(batched), list(results)
        self._functions = {}
        self._seconds_per_row = None       # measured on serial batches after the first (which compiles)
        self._serial_runs = 0

    def __call__(self, fixed, batched, buffers):
        n = buffers[0].shape[0]
        given = [b for b in batched if b is not None]
        if n > 1 and self._pays(n):
            done = np.zeros(n, bool)
            self._function(True)(*fixed, *given, *buffers, done)
            if done.all():
                return buffers
        serial = self._function(False)
        start = time.perf_counter()
        serial(*fixed, *given, *buffers)
        if self._serial_runs:
            self._seconds_per_row = (time.perf_counter() - start) / max(n, 1)
        self._serial_runs += 1
        return buffers

    def _pays(self, n):
        """Does a batch of `n` rows pay for the threads of a parallel loop (as measured so far)?"""
        return numba.get_num_threads() > 1 and self._seconds_per_row is not None \
            and self._seconds_per_row * n >= PAYS_SECONDS and layer_allows_threads()

    def _function(self, parallel):
        """The serial or parallel function of the batch, printed, written and loaded on first use."""
        made = self._functions.get(parallel)
        if made is None:
            with COMPILE_LOCK:
                made = self._functions.get(parallel)
                if made is None:
                    made = self._functions[parallel] = self._load(parallel)
        return made

    def _load(self, parallel):
        path, name = self._callee.path, self._callee.dispatcher.__name__
        fn = rows_function(f"{name}_rows" + ("_parallel" if parallel else ""), name, self._fixed, self._batched,
                           self._results, parallel)
        source, origins = self._backend.module_source([fn], fn.name)
        module = path.with_name(f"{path.stem}_{fn.name}_{cache.content_hash(source)[:12]}.py")
        cache.write_module(module, source)
        dispatcher = self._backend.load(module, source, fn.name, {name: self._callee.dispatcher})
        return Checked(dispatcher, module, origins, self._callee.user_name, self._backend, self._callee.sites)
