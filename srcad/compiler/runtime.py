"""Small Numba helpers the generated code calls: stacks, broadcast sums, derivative conventions.

They live in one importable module (not in every generated file) so that
Numba compiles and caches them once. They are only ever called from compiled
code, so they are compiled without the CPython and cfunc wrappers (`_helper`):
each would be one more LLVM module to build per signature on a cold compile.
"""
import hashlib

import llvmlite.binding as llvm
import numba
import numpy as np
from numba.core import types as nt
from numba.extending import get_cython_function_address, overload
from numba.np.unsafe.ndarray import to_fixed_tuple
from numba.np.ufunc.parallel import _iget_num_threads

from .vector_math import vector_exp, vector_tanh  # noqa: F401 (generated code imports them from here)

# What generated code imports from here, by these names (user names that collide are renamed).
EXPORTS = ("add_at", "check_index", "check_loop_index", "cotangent_times", "det_sign", "diag_like", "eigenvectors",
           "fail", "finite_or_zero", "frozen_array", "grow", "height_after_push", "height_before_pop", "keep_object",
           "kept_as_object", "kept_object", "last_written", "least_squares", "least_squares_rank",
           "least_squares_residuals", "least_squares_singular_values", "left_singular_vectors", "list_index",
           "list_room", "list_rows_back", "list_rows_pad", "list_rows_room", "log_abs_det", "log_or_zero",
           "matmul_into", "max_along", "median_slopes", "min_along", "popped_array", "popped_object", "power_slope",
           "prod_slopes", "prod_slopes_times", "push_array", "qr_q", "qr_r", "real_eigenvalues", "reciprocal_or_zero",
           "right_eigenvectors", "right_singular_vectors", "rule_block", "rule_cotangents", "rule_curvature",
           "rule_midpoint", "rule_slope", "rule_step", "rule_vjp", "shape_differs", "singular_values", "stop_gradient",
           "store_row", "sum_into", "thread_buffer", "thread_count", "tile", "tile_like", "trip_count", "undiff",
           "unsort", "untile", "vector_exp", "vector_tanh")

_helper = numba.njit(cache=True, no_cpython_wrapper=True, no_cfunc_wrapper=True)


def _overload(fn):
    """`numba.extending.overload` with the options of `_helper`."""
    return overload(fn, jit_options={"no_cpython_wrapper": True, "no_cfunc_wrapper": True})


# BLAS's dgemm (SciPy's), called by a symbol's name so that code calling it can be cached on disk.
llvm.add_symbol("srcad_dgemm", get_cython_function_address("scipy.linalg.cython_blas", "dgemm"))
_dgemm = nt.ExternalFunction("srcad_dgemm", nt.void(*[nt.voidptr] * 13))


@_helper
def matmul_into(out, a, b, beta):
    """out = a @ b + beta * out (beta 0 or 1), in out's memory: one GEMM, no temporary, where the adjoint
    writes or adds a matrix product into a float64 matrix whose rows are contiguous (`a`, `b` in either
    order, copied otherwise; another `out`, the product then added)."""
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return
    if k == 0 or out.strides[1] != 8 or out.strides[0] != 8 * n:      # (not rows of out's memory)
        product = np.ascontiguousarray(a) @ np.ascontiguousarray(b) if k > 0 else np.zeros_like(out)
        if beta == 0.0:
            out[:, :] = product
        else:
            out += product
        return
    # out (m x n, rows) read by BLAS as its transpose (n x m, columns): out.T = b.T @ a.T
    b, tb, ldb = _as_blas_operand(b, n, k)
    a, ta, lda = _as_blas_operand(a, k, m)
    chars = np.array([tb, ta], np.uint8)
    ints = np.array([n, m, k, ldb, lda, n], np.int32)
    scalars = np.array([1.0, beta])
    _dgemm(chars[0:].ctypes, chars[1:].ctypes, ints[0:].ctypes, ints[1:].ctypes, ints[2:].ctypes,
           scalars[0:].ctypes, b.ctypes, ints[3:].ctypes, a.ctypes, ints[4:].ctypes,
           scalars[1:].ctypes, out.ctypes, ints[5:].ctypes)


@_helper
def _as_blas_operand(x, cols, rows):
    """`x` (rows x cols in NumPy's terms, transposed for BLAS), BLAS's transpose flag and leading dimension."""
    s0, s1 = x.strides[0] // 8, x.strides[1] // 8
    if x.strides[1] == 8 and s0 >= max(cols, 1):
        return x, ord("N"), s0
    if x.strides[0] == 8 and s1 >= max(rows, 1):
        return x, ord("T"), s1
    return np.ascontiguousarray(x), ord("N"), max(cols, 1)


@_helper
def det_sign(a):
    """The sign of det(a) (np.linalg.slogdet's first part): piecewise constant."""
    return np.linalg.slogdet(a)[0]


@_helper
def log_abs_det(a):
    """log |det(a)| (np.linalg.slogdet's second part), a function of its own for its rule."""
    return np.linalg.slogdet(a)[1]


@_helper
def eigenvectors(a):
    """The eigenvectors of symmetric `a` (np.linalg.eigh's second part, of its lower triangle), a function of
    its own for its rule."""
    return np.linalg.eigh(a)[1]


@_helper
def left_singular_vectors(a):
    """U of np.linalg.svd(a) = (U, s, Vh)."""
    return np.linalg.svd(a)[0]


@_helper
def singular_values(a):
    """s of np.linalg.svd(a) = (U, s, Vh), a function of its own for its rule."""
    return np.linalg.svd(a)[1]


@_helper
def right_singular_vectors(a):
    """Vh of np.linalg.svd(a) = (U, s, Vh)."""
    return np.linalg.svd(a)[2]


@_helper
def real_eigenvalues(a):
    """w of np.linalg.eig(a) = (w, V) of a real matrix (real, as Numba gives them), a function of its own for its
    rule; np.linalg.eigvals(a) is written as this, so that its order is the eigenvectors'."""
    return np.linalg.eig(a)[0]


@_helper
def right_eigenvectors(a):
    """V of np.linalg.eig(a) = (w, V): unit columns, a function of its own for its rule."""
    return np.linalg.eig(a)[1]


@_helper
def qr_q(a):
    """Q of np.linalg.qr(a) = (Q, R) (reduced), a function of its own for its rule."""
    return np.linalg.qr(a)[0]


@_helper
def qr_r(a):
    """R of np.linalg.qr(a) = (Q, R) (reduced), a function of its own for its rule."""
    return np.linalg.qr(a)[1]


@_helper
def least_squares(a, b, rcond=-1.0):
    """x of np.linalg.lstsq(a, b) = (x, residuals, rank, s): the minimum-norm least-squares solution."""
    return np.linalg.lstsq(a, b, rcond)[0]


@_helper
def least_squares_residuals(a, b, rcond=-1.0):
    """The residuals of np.linalg.lstsq(a, b) (empty unless a has full column rank and more rows)."""
    return np.linalg.lstsq(a, b, rcond)[1]


@_helper
def least_squares_rank(a, b, rcond=-1.0):
    """The rank of `a` that np.linalg.lstsq(a, b) found."""
    return np.linalg.lstsq(a, b, rcond)[2]


@_helper
def least_squares_singular_values(a, b, rcond=-1.0):
    """The singular values of `a` that np.linalg.lstsq(a, b) found (as np.linalg.svd's, to rounding)."""
    return np.linalg.lstsq(a, b, rcond)[3]


@_helper
def grow(stack, need):
    """Return `stack` with room for at least `need` entries (amortised doubling)."""
    if need <= stack.shape[0]:
        return stack
    bigger = np.empty(max(need, 2 * stack.shape[0]), stack.dtype)
    # An explicit loop, not `bigger[:n] = stack`: slice assignment makes Numba
    # compile its shape-mismatch error formatting (~2 s, once per process).
    for i in range(stack.shape[0]):
        bigger[i] = stack[i]
    return bigger


# Arrays of at most this many elements are saved as copies in a stack's buffer; a bigger one is kept
# as an object beside it: copying it would cost more than the object does (a loop rebinding a vector of
# 2,000 elements: gradient 3.3x its primal kept so, 4.4x copied, `benchmarks/README.md`).
COPIED_AT_MOST = 512


def push_array(stack, top, value):
    """Save the small array `value` in `stack`, which has room for it (`height_after_push`), from height
    `top`: its elements, then its shape, then `top`, so that `popped_array` finds it again from where it
    ends. Arrays saved so end to end in one buffer make no object each. Nothing is returned and no list
    is passed: a stack rebound, or a list's reference count, at every push of a loop cost as much as the
    copy (the ADBench LSTM in vector form: forward 2.7 ms, 2.1 ms so, its primal 1.7 ms)."""


@overload(push_array, jit_options={"no_cpython_wrapper": True, "no_cfunc_wrapper": True})
def _push_array_overload(stack, top, value):
    if not isinstance(value, nt.Array):
        return None
    n = value.ndim
    copy = _loops_over(n, "value.shape", f"stack[k] = value[{_indices(n)}]") + ["    " * (n + 1) + "k += 1"]
    tail = [f"    stack[k + {a}] = value.shape[{a}]" for a in range(n)] + [f"    stack[k + {n}] = top"]
    return _compiled(["def impl(stack, top, value):", "    k = top"] + copy + tail)


@numba.njit(inline="always")           # (a line of arithmetic, in a loop: inlined where it is called)
def kept_as_object(value):
    """Whether a push saves `value` as an object in the list beside its stack (`keep_object`) rather
    than as a copy in the stack (`push_array`): copying a big array would cost more than the object."""
    return value.size > COPIED_AT_MOST


@_helper
def keep_object(stack, objects, top, value):
    """Save the array `value` as an object: appended to `objects`, its index there and `-1 - top`
    written in `stack` from height `top`."""
    stack[top] = len(objects)
    stack[top + 1] = -1 - top
    objects.append(value)


@numba.njit(inline="always")
def height_after_push(top, value):
    """The height of a stack after `value` was saved in it from height `top`."""
    return top + (2 if kept_as_object(value) else value.size + value.ndim + 1)


@numba.njit(inline="always")
def height_before_pop(stack, top):
    """The height of a stack before the save that ended at height `top`."""
    last = int(stack[top - 1])
    return last if last >= 0 else -1 - last


@numba.njit(inline="always")
def popped_object(stack, top):
    """Whether the save ending at height `top` of `stack` kept an object (`keep_object`)."""
    return stack[top - 1] < 0


@_helper
def kept_object(stack, objects, top):
    """The object that the `keep_object` ending at height `top` saved."""
    return objects[int(stack[top - 2])]


def popped_array(stack, top, ndim):
    """The array (of rank `ndim`, a literal) that the `push_array` ending at height `top` copied: a view
    of its copy in `stack`."""


@overload(popped_array, prefer_literal=True, jit_options={"no_cpython_wrapper": True, "no_cfunc_wrapper": True})
def _popped_array_overload(stack, top, ndim):
    if not isinstance(ndim, nt.IntegerLiteral):
        return None
    n = ndim.literal_value
    shape = "".join(f"int(stack[end + {a}]), " for a in range(n))
    view = "stack[int(stack[top - 1]):end]"
    return _compiled(["def impl(stack, top, ndim):", f"    end = top - 1 - {n}",
                      f"    return {view}" + (f".reshape(({shape}))" if n > 1 else "")])


def sum_into(dest, grad):
    """dest += grad, summing over the axes along which dest was broadcast."""
    dest += np.sum(grad) if np.ndim(dest) == 0 else _reduce_like(np.asarray(grad), np.shape(dest))


def _reduce_like(grad, shape):
    while grad.ndim > len(shape):
        grad = grad.sum(axis=0)
    for k, n in enumerate(shape):
        if n == 1 and grad.shape[k] != 1:
            grad = grad.sum(axis=k, keepdims=True)
    return grad


def _sum_into_source(rd, rg):
    off = rg - rd
    idx_d = ", ".join(f"(i{k + off} if b{k} else 0)" for k in range(rd)) + ("," if rd == 1 else "")
    lines = ["def impl(dest, grad):"]
    if rd == rg:
        lines += ["    if dest.shape == grad.shape:", "        dest += grad", "        return"]
    lines += [f"    b{k} = dest.shape[{k}] != 1" for k in range(rd)]
    return lines + _loops_over(rg, "grad.shape", f"dest[{idx_d}] += grad[{_indices(rg)}]")


def _loops_over(ndim, shape, statement):
    """Source lines of loops over every index (i0, i1, ...) of the shape `shape` (of rank `ndim`),
    around `statement`."""
    lines = [f"{'    ' * (a + 1)}for i{a} in range({shape}[{a}]):" for a in range(ndim)]
    return lines + ["    " * (ndim + 1) + statement]


def _indices(ndim):
    """`i0, i1, ...`: an index of rank `ndim` (a tuple even of one)."""
    return ", ".join(f"i{a}" for a in range(ndim)) + ("," if ndim == 1 else "")


def _compiled(lines, **names):
    """The function `impl` that the source `lines` define (an overload's implementation for one rank),
    reading `np` and `names`."""
    scope = {"np": np, **names}
    exec("\n".join(lines), scope)
    return scope["impl"]


@_overload(sum_into)
def _sum_into_overload(dest, grad):
    if not isinstance(dest, numba.types.Array):
        return None
    if not isinstance(grad, numba.types.Array):
        def scalar(dest, grad):
            dest += grad
        return scalar
    if grad.ndim < dest.ndim:
        return None
    return _compiled(_sum_into_source(dest.ndim, grad.ndim))


def add_at(dest, index, values):
    """dest[index] += values for a 1-d index array (of integers, or a boolean mask) along the first
    axis: a repeated index adds each of its values (NumPy's np.add.at), where `+=` would add one."""


@_overload(add_at)
def _add_at_overload(dest, index, values):
    if not (isinstance(dest, numba.types.Array) and isinstance(index, numba.types.Array) and index.ndim == 1):
        return None
    # values broadcast to the gathered region: one row per index (or one row for all), or all of it
    # for each index where it has fewer axes than the region
    per_row = isinstance(values, numba.types.Array) and values.ndim == dest.ndim
    head = ["def impl(dest, index, values):"] + (["    step = 1 if values.shape[0] != 1 else 0"] if per_row else [])
    each = "values[k * step]" if per_row else "values"
    if isinstance(index.dtype, numba.types.Boolean):
        body = ["    k = 0", "    for i in range(index.shape[0]):", "        if index[i]:",
                f"            dest[i] += {each}", "            k += 1"]
    else:
        body = ["    for k in range(index.shape[0]):", f"        dest[index[k]] += {each}"]
    return _compiled(head + body)


@_helper
def last_written(index, size):
    """1.0 at each position of a 1-d index array (into an axis of `size`) that is the last to name its
    index, else 0.0: a store through it keeps the last of the values written to a repeated index."""
    seen = np.zeros(size, np.bool_)
    out = np.zeros(index.shape[0])
    for k in range(index.shape[0] - 1, -1, -1):
        i = index[k] + size if index[k] < 0 else index[k]
        if not seen[i]:
            out[k] = 1.0
            seen[i] = True
    return out


@_helper
def prod_slopes(x):
    """d np.prod(x) / dx: at each entry the product of all the others (exact where entries are zero)."""
    flat = x.ravel()
    n = flat.shape[0]
    out = np.empty(n, flat.dtype)
    before = 1.0
    for i in range(n):             # products of the entries before each one...
        out[i] = before
        before *= flat[i]
    after = 1.0
    for i in range(n - 1, -1, -1):  # ...times those after it
        out[i] *= after
        after *= flat[i]
    return out.reshape(x.shape)


@_helper
def prod_slopes_times(x, v):
    """The derivative of `prod_slopes(x)` (symmetric: entry (i, j) the product of all entries but i and j, 0 on
    the diagonal) times `v`, of x's shape: the gradient of S = sum_j v_j prod_{k != j} x_k, from the scan
    Q_t = Q_{t-1} x_t + v_t P_{t-1}, P_t = P_{t-1} x_t run backwards. Exact where entries are zero."""
    flat, w = x.ravel(), v.ravel()
    n = flat.shape[0]
    P, Q = np.empty(n + 1), np.empty(n + 1)
    P[0], Q[0] = 1.0, 0.0
    for t in range(n):
        Q[t + 1] = Q[t] * flat[t] + w[t] * P[t]
        P[t + 1] = P[t] * flat[t]
    out = np.empty(n, flat.dtype)
    bQ, bP = 1.0, 0.0
    for t in range(n - 1, -1, -1):
        out[t] = bQ * Q[t] + bP * P[t]
        bQ, bP = bQ * flat[t], bQ * w[t] + bP * flat[t]
    return out.reshape(x.shape)


@_helper
def median_slopes(x, skip_nan):
    """d median(x) / dx: 1 at the middle of the sorted values, or 1/2 at each of the two middle ones (NaNs left
    out with `skip_nan`, as np.nanmedian leaves them; np.argsort puts them last)."""
    flat = x.ravel()
    out = np.zeros(flat.size, x.dtype)
    order = np.argsort(flat)
    n = flat.size
    if skip_nan:
        n = 0
        for v in flat:
            n += not np.isnan(v)
    if n % 2 == 1:
        out[order[n // 2]] = 1.0
    elif n > 0:
        out[order[n // 2 - 1]] += 0.5
        out[order[n // 2]] += 0.5
    return out.reshape(x.shape)


@_helper
def undiff(g):
    """The transpose of np.diff of a vector: out[j] = g[j - 1] - g[j], a term left out past either end."""
    n = g.shape[0]
    out = np.zeros(n + 1, g.dtype)
    for i in range(n):
        out[i] -= g[i]
        out[i + 1] += g[i]
    return out


# ---- module-level arrays, frozen into compiled code ----------------------------------------------------

_FROZEN = {}


def freeze(array):
    """The key of a read-only copy of `array` (a module-level array compiled code reads), named by its dtype,
    shape and content: generated code reads it back with `frozen_array(key)`, a constant of the compiled
    code as in Numba, and two contents never share a key (nor a compile: the key is in the printed code)."""
    data = np.ascontiguousarray(array)
    key = hashlib.sha256(f"{data.dtype.str}{data.shape}".encode() + data.tobytes()).hexdigest()[:32]
    if key not in _FROZEN:
        copy = data.copy()
        copy.flags.writeable = False
        _FROZEN[key] = copy
    return key


def frozen_array(key):
    return _FROZEN[key]


@overload(frozen_array, prefer_literal=True, jit_options={"no_cpython_wrapper": True, "no_cfunc_wrapper": True})
def _frozen_array_overload(key):
    if not isinstance(key, nt.StringLiteral):
        return None
    value = _FROZEN[key.literal_value]

    def impl(key):
        return value
    return impl


@_helper
def unsort(g, x):
    """The transpose of np.sort(x) (1-d): each entry of `g` back where its sorted entry came from."""
    out = np.empty_like(g)
    order = np.argsort(x)
    for k in range(order.shape[0]):
        out[order[k]] = g[k]
    return out


@_helper
def diag_like(v, a):
    """An array shaped like the 2-d `a`, zero but for `v` on its diagonal: the transpose of np.diag(a)."""
    out = np.zeros(a.shape, v.dtype)
    for i in range(v.shape[0]):
        out[i, i] = v[i]
    return out


def _tiling(params, out, over, out_ndim, x_ndim, statement):
    """The implementation of a tiling helper: `out` allocated, then loops over every index of the tiled
    array `over` (rank `out_ndim`) around `statement`, which reads `{i}`, that index, and `{x}`, the
    index of the array `x` it tiles (rank `x_ndim`: the trailing axes, modulo its shape)."""
    off = out_ndim - x_ndim
    x_index = ", ".join(f"i{a} % xs[{a - off}]" for a in range(off, out_ndim)) + ("," if x_ndim == 1 else "")
    loops = _loops_over(out_ndim, f"{over}.shape", statement.format(x=x_index, i=_indices(out_ndim)))
    return _compiled([f"def impl({params}):", "    xs = x.shape", f"    {out}"] + loops + ["    return out"])


def tile(x, reps):
    """np.tile for compiled code (Numba has none): `x` repeated `reps` times along each axis."""


@_overload(tile)
def _tile_overload(x, reps):
    if not isinstance(x, numba.types.Array):
        return None
    count = 1 if isinstance(reps, numba.types.Integer) else len(reps) if isinstance(reps, numba.types.BaseTuple) \
        else None
    if count is None:
        return None
    d, n = max(x.ndim, count), x.ndim
    rep = ["reps"] if isinstance(reps, numba.types.Integer) else [f"reps[{k}]" for k in range(count)]
    rep = ["1"] * (d - count) + rep
    dim = ["1"] * (d - n) + [f"xs[{k}]" for k in range(n)]
    shape = ", ".join(f"{a} * {b}" for a, b in zip(dim, rep)) + ("," if d == 1 else "")
    return _tiling("x, reps", f"out = np.empty(({shape}), x.dtype)", "out", d, n, "out[{i}] = x[{x}]")


def tile_like(x, like):
    """`x` tiled to the shape of `like` (its trailing axes): the transpose of `untile`."""


@_overload(tile_like)
def _tile_like_overload(x, like):
    if not (isinstance(x, numba.types.Array) and isinstance(like, numba.types.Array)) or like.ndim < x.ndim:
        return None
    return _tiling("x, like", "out = np.empty(like.shape, x.dtype)", "out", like.ndim, x.ndim, "out[{i}] = x[{x}]")


def untile(g, x):
    """The adjoint of `tile` with respect to `x`: `g` summed over the tiles, shaped like `x`."""


@_overload(untile)
def _untile_overload(g, x):
    if not (isinstance(g, numba.types.Array) and isinstance(x, numba.types.Array)) or g.ndim < x.ndim:
        return None
    return _tiling("g, x", "out = np.zeros(x.shape, g.dtype)", "g", g.ndim, x.ndim, "out[{x}] += g[{i}]")


@_helper
def thread_count():
    """How many threads a parallel loop starting now uses (`numba.get_thread_id()` is below it). Numba's
    `get_num_threads` reads a ctypes pointer, which keeps code calling it out of Numba's disk cache; this
    calls the threading layer by its linked symbol."""
    return _iget_num_threads()


@_helper
def thread_buffer(shape, dtype):
    """Storage only the iterations of a parallel loop use (the cuda target keeps it on the device)."""
    return np.empty(shape, dtype)


@numba.njit(cache=True)
def sum_is_nan(a):
    """Is the sum of array `a` nan? Called from Python (`compiled.holds_nan`), not from generated code."""
    return np.isnan(np.sum(a))


@_helper
def trip_count(start, stop, step):
    """len(range(start, stop, step)) without building the range."""
    if step > 0:
        return max(0, (stop - start + step - 1) // step)
    return max(0, (start - stop - step - 1) // (-step))


def log_or_zero(x):
    """log(x) where x > 0, else 0: the derivative of x ** y with respect to y is taken as
    0 where the base is not positive, in the compiled layer as in the eager one."""
    x = np.asarray(x)
    return np.where(x > 0, np.log(np.where(x > 0, x, 1.0)), 0.0)[()]


@_overload(log_or_zero)
def _log_or_zero_overload(x):
    if isinstance(x, numba.types.Array):
        def array(x):
            return np.where(x > 0, np.log(np.where(x > 0, x, 1.0)), 0.0)
        return array

    def scalar(x):
        return np.log(x) if x > 0 else 0.0
    return scalar


def power_slope(a, b):
    """d(a ** b)/da = b * a ** (b - 1), taken as 0 where b == 0 (so 0 ** 0 has slope 0, not nan):
    the eager table's convention."""
    b = np.asarray(b)
    return (b * np.asarray(a) ** np.where(b != 0, b - 1.0, 0.0))[()]


@_overload(power_slope)
def _power_slope_overload(a, b):
    if isinstance(b, numba.types.Array):
        def array_exponent(a, b):
            return b * a ** np.where(b != 0, b - 1.0, 0.0)
        return array_exponent

    def scalar_exponent(a, b):
        return b * a ** (b - 1.0 if b != 0 else 0.0)
    return scalar_exponent


def cotangent_times(g, p):
    """g * p, and 0 where either is exactly 0 even if the other is inf or nan: a value that does not change
    the result (exp(-inf) = 0 in a soft minimum) sends no 0 * inf back, and neither does a partial that is 0
    after one that is inf (`sqrt(max(v, 0))` where v < 0: the slope of sqrt at 0, times max's 0 in v)."""
    with np.errstate(invalid="ignore"):
        product = np.asarray(g) * np.asarray(p)
    return np.where((np.asarray(g) == 0) | (np.asarray(p) == 0), np.zeros_like(product), product)[()]


@_helper
def _times_unless_zero(g, p):
    if g == 0:
        return g * 0.0
    if p == 0:
        return p * 0.0
    return g * p


@_overload(cotangent_times)
def _cotangent_times_overload(g, p):
    if isinstance(p, numba.types.Array) and p.ndim == 0 and not isinstance(g, numba.types.Array):
        return lambda g, p: _times_unless_zero(g, p.item())          # a scalar, as g * p is
    if isinstance(g, numba.types.Array) and g.ndim == 0 and not isinstance(p, numba.types.Array):
        return lambda g, p: _times_unless_zero(g.item(), p)
    if isinstance(g, numba.types.Array) or isinstance(p, numba.types.Array):
        def array(g, p):
            product = g * p
            values = product.ravel()    # a new array's memory: no copy
            nan = False
            for i in range(values.size):
                nan |= values[i] != values[i]
            if nan:     # 0 * inf or 0 * nan (made 0), or a nan operand (kept)
                return np.where((g == 0) | (p == 0), np.zeros_like(product), product)
            return product       # one pass more, not five arrays more
        return array
    return lambda g, p: _times_unless_zero(g, p)


def finite_or_zero(p):
    """p where it is finite, else 0: the slope of `cotangent_times` in its cotangent, so that a second
    derivative sends no inf back through a cotangent that is exactly zero either."""
    p = np.asarray(p)
    return np.where(np.isfinite(p), p, 0.0)[()]


@_overload(finite_or_zero)
def _finite_or_zero_overload(p):
    if isinstance(p, numba.types.Array):
        def array(p):
            return np.where(np.isfinite(p), p, 0.0)
        return array

    def scalar(p):
        return p if p - p == 0.0 else 0.0
    return scalar


@_helper
def stop_gradient(x):
    """The value itself: `ad.stop_gradient` only matters to the derivative (its rule is zero)."""
    return x


def reciprocal_or_zero(x):
    """1 / x where x > 0, else 0: the derivative of `log_or_zero`."""
    x = np.asarray(x)
    return np.where(x > 0, 1.0 / np.where(x > 0, x, 1.0), 0.0)[()]


@_overload(reciprocal_or_zero)
def _reciprocal_or_zero_overload(x):
    if isinstance(x, numba.types.Array):
        def array(x):
            return np.where(x > 0, 1.0 / np.where(x > 0, x, 1.0), 0.0)
        return array

    def scalar(x):
        return 1.0 / x if x > 0 else 0.0
    return scalar


class Raised(Exception):
    """A `raise` or failed `assert` of user code in compiled code: (exception class path, its arguments,
    where); `errors.user_exception` makes the user's exception of it."""


@numba.njit(cache=True, no_cfunc_wrapper=True, inline="never")
def fail(exception, args, at):
    """Raise the user's exception (by its class's import path) from compiled code: Numba raises only
    classes it can name, so it travels as `Raised` and `Checked` raises the user's own."""
    raise Raised(exception, args, at)


@numba.njit(cache=True, no_cfunc_wrapper=True, inline="never")
def index_error(site, index, size):
    """Raise the IndexError of a failed check (site, index, size); `Checked` words the message."""
    raise IndexError(site, index, size)


# A call of a function with a custom rule, `y = f(x)`, runs as `y = stop_gradient(out) + T(m, t)`, where
# `out, T = jvp(m, t)` is the rule, `t = rule_step(x)` is zero with the derivative of x, and
# `m = rule_midpoint(x, t)` is x with half its derivative, without a derivative of its own: the value is
# `out`, and `T(x0 + t/2, t)` is the midpoint rule for the integral of J from x0 to x, exact in its first
# and second derivatives (the rule's J and its derivative J'). A third is refused (`rule_curvature`).

def rule_step(x):
    """Zero, of x's shape and type; its derivative with respect to x is one (`rule_slope`)."""


@_overload(rule_step)
def _rule_step_overload(x):
    if isinstance(x, numba.types.Array):
        return lambda x: np.zeros_like(x)
    zero = numba.np.numpy_support.as_dtype(x).type(0)
    return lambda x: zero


def rule_midpoint(x, t):
    """x + t / 2 for float values (t is zero: the value is x); integers and booleans as they are."""


@_overload(rule_midpoint)
def _rule_midpoint_overload(x, t):
    dtype = x.dtype if isinstance(x, numba.types.Array) else x
    if isinstance(dtype, numba.types.Float):
        half = numba.np.numpy_support.as_dtype(dtype).type(0.5)     # float32 stays float32
        return lambda x, t: x + half * t
    return lambda x, t: x


@_helper
def rule_slope(x):
    """The derivative of `rule_step`: one (its own derivative is `rule_curvature`)."""
    return 1.0


@_helper
def rule_curvature(x):
    """The second derivative of `rule_step`: zero (refused as differentiated again: see `ad/rules.py`)."""
    return 0.0


@_helper
def list_room(items, length):
    """`items`, or a copy twice as long, so that items[length] exists: the storage of a list grown by
    append (`acc = []`, `acc.append(v)`), as a Python list grows."""
    if length < items.shape[0]:
        return items
    grown = np.empty(2 * items.shape[0], items.dtype)
    grown[:length] = items[:length]
    return grown


@_helper
def list_rows_room(items, length, item):
    """`items`, or a bigger copy, so that row `length` exists and has `item`'s shape: the storage of a list of
    arrays grown by append, one row per item (as np.array stacks them: items of one shape)."""
    if length > 0 and items.shape[1:] != item.shape:
        raise ValueError("a list of arrays grown by append holds arrays of one shape (srcad keeps them as the "
                         "rows of one array): this item's shape differs from the first's")
    if length < items.shape[0] and items.shape[1:] == item.shape:
        return items
    grown = np.empty((max(16, 2 * items.shape[0]),) + item.shape, items.dtype)
    if length > 0:
        grown[:length] = items[:length]
    return grown


@_helper
def list_rows_back(g, items):
    """The cotangent of the storage `items` from that of the storage it grew into, `g` (the rows it had;
    none where it had no row yet, and rows of another shape)."""
    if g.shape[1:] != items.shape[1:]:
        return np.zeros_like(items)
    return np.ascontiguousarray(g[:items.shape[0]])


@_helper
def list_rows_pad(h, like):
    """`list_rows_back`'s transpose: an array of `like`'s shape, zero but for its first rows, `h` (where the
    rows have one shape)."""
    out = np.zeros_like(like)
    if h.shape[1:] == like.shape[1:]:
        out[:h.shape[0]] = h
    return out


@_helper
def list_index(i, length):
    """Item `i` of a list of `length` items (negative: from its end), checked as Python checks it."""
    if i < -length or i >= length:
        raise IndexError("list index out of range")
    return i + length if i < 0 else i


# A call of a function with a custom VJP, `y = f(x)`, runs `out, residuals = fwd(x)` and
# `y = stop_gradient(out) + rule_vjp(out, (x,), key, 0, 1)` (one per output): the adjoint of those is the code
# of `bwd(residuals, g)`, kept in `if rule_block(key):` (never run, typed with the rest) and ended by
# `rule_cotangents(key, cotangents)` (see ad/local.py).

@_helper
def rule_block(key):
    """False: the branch holding a custom VJP's code for the reverse sweep never runs in the forward."""
    return False


@_helper
def rule_cotangents(key, cotangents):
    """Marks the cotangents a custom VJP's code computes (it does nothing)."""
    return None


def rule_vjp(out, args, key, k, n):
    """Zero, of `out`'s shape and type (output `k` of `n`): its adjoint is the custom VJP of call `key`."""


@_overload(rule_vjp)
def _rule_vjp_overload(out, args, key, k, n):
    if isinstance(out, numba.types.Array):
        return lambda out, args, key, k, n: np.zeros_like(out)
    zero = numba.np.numpy_support.as_dtype(out).type(0)
    return lambda out, args, key, k, n: zero


def store_row(rows, row, value):
    """`rows[row] = value` for a C-contiguous `rows` (a batch's results, `rows.py`)."""


@_overload(store_row)
def _store_row_overload(rows, row, value):
    if not isinstance(value, numba.types.Array):
        def store_scalar(rows, row, value):
            rows[row] = value
        return store_scalar

    def store_array(rows, row, value):
        # an explicit loop, not `rows[row] = value`: NumPy's broadcasting assignment makes Numba
        # compile its shape-mismatch error formatting (~2 s, once per process)
        out = rows[row].reshape(-1)
        for i, v in enumerate(value.flat):
            out[i] = v
    return store_array


def max_along(a, axis):
    """np.max(a, axis=axis), which Numba lacks (`axis` a constant)."""


def min_along(a, axis):
    """np.min(a, axis=axis), which Numba lacks (`axis` a constant)."""


def _extremum_along(before, name):
    """The overload of `max_along` (`before(v, best)`: v > best) or `min_along`: NaN wins, as in NumPy."""
    def overload_along(a, axis):
        if not isinstance(a, nt.Array) or not isinstance(axis, nt.IntegerLiteral) \
                or not -a.ndim <= axis.literal_value < a.ndim:
            return None
        ax, nd = axis.literal_value % a.ndim, a.ndim
        empty = f"zero-size array to reduction operation {name} which has no identity"

        @numba.njit
        def along(a):
            c = np.ascontiguousarray(a)
            pre, post, n = 1, 1, c.shape[ax]
            for d in range(ax):
                pre *= c.shape[d]
            for d in range(ax + 1, nd):
                post *= c.shape[d]
            if n == 0:
                raise ValueError(empty)
            flat = c.reshape((pre, n, post))
            out = np.empty((pre, post), c.dtype)
            for i in range(pre):
                for k in range(post):
                    best = flat[i, 0, k]
                    for j in range(1, n):
                        v = flat[i, j, k]
                        if before(v, best) or (v != v and best == best):
                            best = v
                    out[i, k] = best
            return out

        if nd == 1:
            return lambda a, axis: along(a)[0, 0]

        rank = nd - 1

        def kept(a, axis):
            shape = np.empty(rank, np.int64)
            for d in range(nd):
                if d != ax:
                    shape[d - (d > ax)] = a.shape[d]
            return along(a).reshape(to_fixed_tuple(shape, rank))
        return kept
    return overload_along


_along_options = {"prefer_literal": True, "jit_options": {"no_cpython_wrapper": True, "no_cfunc_wrapper": True}}
overload(max_along, **_along_options)(_extremum_along(numba.njit(lambda v, best: v > best), "maximum"))
overload(min_along, **_along_options)(_extremum_along(numba.njit(lambda v, best: v < best), "minimum"))


def shape_differs(a, b):
    """Do `a` and `b` differ in shape (a scalar's shape is ())? A custom rule's tangent must have its value's."""


@_overload(shape_differs)
def _shape_differs_overload(a, b):
    arrays = isinstance(a, numba.types.Array), isinstance(b, numba.types.Array)
    if arrays == (True, True) and a.ndim == b.ndim:
        return lambda a, b: a.shape != b.shape
    return lambda a, b: arrays[0] or arrays[1]


def check_index(a, axis, i, site):
    """Raise IndexError(site, i, size) unless -size <= i < size along `axis` of array `a`."""


@_overload(check_index)
def _check_index_overload(a, axis, i, site):
    # compiled for every array type: it only reads the size, and one helper of integers (compiled
    # once, cached on disk) does the work
    if not isinstance(a, numba.types.Array):
        return lambda a, axis, i, site: None      # a tuple indexed by a constant: typing checked it
    if isinstance(i, numba.types.Array) and isinstance(i.dtype, numba.types.Boolean):
        return lambda a, axis, i, site: _check_mask(a.shape[axis], i.shape[0], site)
    if isinstance(i, numba.types.Array):
        return lambda a, axis, i, site: _check_each(a.shape[axis], i.ravel(), site)
    return lambda a, axis, i, site: _check_one(a.shape[axis], i, site)


@_helper
def _check_one(n, i, site):
    if i < -n or i >= n:
        index_error(site, i, n)


@_helper
def _check_each(n, indices, site):
    """An index that is an array of integers: each of them."""
    for k in range(indices.shape[0]):
        _check_one(n, indices[k], site)


@_helper
def _check_mask(n, length, site):
    """A boolean index: as long as the axis (NumPy's rule; Numba would read past it)."""
    if length != n:
        index_error(site, length, n)


def threads_between_barriers(n):
    """The threads of a kernel between two barriers, as the header of a loop the front end reads as a
    phase (`For.phase`, srcad/cuda/phases.py); in Python, `range(n)`."""
    return range(n)


def check_loop_index(a, axis, start, stop, step, scale, offset, site, runs):
    """Check, before a loop over range(start, stop, step) runs, the index `scale * i + offset` of
    its first and last `i`, when it runs at all (and `runs` > 0: the loops around it run)."""


@_overload(check_loop_index)
def _check_loop_index_overload(a, axis, start, stop, step, scale, offset, site, runs):
    if not isinstance(a, numba.types.Array):
        return lambda a, axis, start, stop, step, scale, offset, site, runs: None
    return lambda a, axis, start, stop, step, scale, offset, site, runs: \
        _check_span(a.shape[axis], start, stop, step, scale, offset, site, runs)


@_helper
def _check_span(n, start, stop, step, scale, offset, site, runs):
    """The indices are first, first + delta, ...: if any is out of range, one end is. One test on the
    path taken when all is well (it runs inside loops); the report is a call of its own."""
    trips = trip_count(start, stop, step)
    if trips > 0 and runs > 0:
        first = scale * start + offset
        last = first + (trips - 1) * (scale * step)
        if first < -n or first >= n or last < -n or last >= n:
            _out_of_range(site, n, first, scale * step, trips)


@numba.njit(cache=True, no_cfunc_wrapper=True, inline="never")
def _out_of_range(site, n, first, delta, trips):
    """Raise the IndexError of the first index out of range along the loop (the one Python fails on)."""
    last = first + (trips - 1) * delta
    if first < -n or first >= n:
        index_error(site, first, n)
    if last >= n:
        index_error(site, first + (n - first + delta - 1) // delta * delta, n)
    index_error(site, first + ((first + n) // -delta + 1) * delta, n)
