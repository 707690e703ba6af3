"""Kernels from the families that once gave silently wrong gradients (issue 8), as a
user would write them: shape-varying slices in loops, in-place operators through aliases
and helper parameters, overlapping copies within one array, branches on module constants.
Every function is plain Python that also runs under numba.njit."""
import math

import numpy as np

ORDER = 2          # a module-level setting the kernels branch on
DAMPED = False


# ---- array temporaries whose shape changes from one iteration to the next ----

def shrinking_slices(x):
    y = x.copy()
    for i in range(4):
        y[i:] = y[i:] + x[i:] * x[i]
    return np.sum(y * y)


def growing_slices(x):
    y = np.zeros_like(x)
    for i in range(x.shape[0]):
        y[:i + 1] += x[:i + 1] * x[:i + 1]
    return np.sum(y * x)


def syrk_lower(A, beta):
    """C := beta * C + A A^T on the lower triangle, row by row (polybench's syrk)."""
    n = A.shape[0]
    C = np.ones((n, n))
    for i in range(n):
        C[i, :i + 1] *= beta
        for k in range(A.shape[1]):
            C[i, :i + 1] += A[i, k] * A[:i + 1, k]
    return np.sum(C * C)


def gaussian_elimination(A, b):
    """Forward elimination without pivoting, then back substitution, on slices."""
    n = A.shape[0]
    M = A.copy()
    r = b.copy()
    for k in range(n - 1):
        for i in range(k + 1, n):
            f = M[i, k] / M[k, k]
            M[i, k:] = M[i, k:] - f * M[k, k:]
            r[i] = r[i] - f * r[k]
    x = np.zeros(n)
    for i in range(n - 1, -1, -1):
        x[i] = (r[i] - np.dot(M[i, i + 1:], x[i + 1:])) / M[i, i]
    return np.sum(x * x)


def covariance_rows(data):
    """Column-centred data, then the upper triangle of its covariance (polybench's covariance)."""
    n, m = data.shape
    d = data.copy()
    for j in range(m):
        d[:, j] -= np.mean(d[:, j])
    cov = np.zeros((m, m))
    for i in range(m):
        for j in range(i, m):
            cov[i, j] = np.sum(d[:, i] * d[:, j]) / (n - 1.0)
    return np.sum(cov * cov)


def nested_moving_windows(x):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(i, x.shape[0]):
            w = x[i:j + 1] * x[j]
            s = s + np.sum(np.sin(w))
    return s


# ---- in-place operators through aliases and helper parameters ----

def alias_scaled(x):
    y = x * 1.0
    z = y
    z *= 2.0
    return np.sum(y * x)


def _scale(B, alpha):
    B *= alpha


def _center(data, mean):
    data -= mean


def scale_argument(B, alpha):
    _scale(B, alpha)
    return np.sum(B)


def helper_scales_argument(x, alpha):
    y = x * 1.0
    _scale(y, alpha)
    _center(y, np.mean(x))
    return np.sum(y * x)


def alias_in_loop(x):
    acc = np.zeros_like(x)
    for k in range(3):
        view = acc
        view += x * (k + 1.0)
        view *= 0.5
    return np.sum(acc * acc)


# ---- copies within one array whose source and destination overlap ----

def delay_line(x):
    z = x * 1.0
    for k in range(3):
        z[1:] = z[:-1]
        z[0] = x[0] * 0.5
    return np.sum(z * x)


def copy_same_element(x, i, j):
    z = x * 2.0
    z[i] = z[j]
    return np.sum(z * z)


def shift_back(x):
    z = x * x
    z[:-1] = z[1:]
    return np.sum(z * x)


# ---- branches on module-level constants ----

def constant_branch_in_loop(x, h):
    s = 0.0
    for i in range(x.shape[0]):
        k1 = x[i] * s + h
        if ORDER > 1:
            k2 = k1 * h + math.sin(s)
            s = s + k2
        else:
            s = s + k1
        if DAMPED:
            s = s * damping
    return s


def constant_branch_array(x):
    y = np.zeros_like(x)
    for i in range(1, x.shape[0]):
        y[i] = y[i - 1] * 0.5 + (x[i] * x[i] if ORDER == 2 else x[i])
        if ORDER > 3:
            y[i] = undefined_helper(y[i])
    return np.sum(y)


# ---- a loop run again from its start in the reverse sweep, saving whole regions as it goes ----

def fresh_array_updated_in_slices(x, w):
    total = 0.0
    for i in range(w.shape[0]):
        buf = x * w[i]                                   # made afresh each iteration: checkpointed
        for j in range(3):
            buf[1:] = buf[:-1] * 0.5 + np.sin(buf[1:])   # regions saved and restored, iteration after iteration
        total += np.sum(buf * buf)
    return total


# ---- common Numba idioms that were refused or crashed ----

def rebind_array_to_scalar(x):
    x = np.sum(x)
    x = x * x
    return x


def tuple_packing(a, b):
    t = a, b, a * b
    p, q, r = t
    return p * q + r + t[2]


def tuple_argument(x, qf):
    fq, fp = qf
    return x * fq + fp * x * x


def _rhs(state, k):
    x, y = state
    return k * y, -k * x


def tuple_state_in_loop(x0, k):
    state = (x0, 0.5)
    for i in range(5):
        d = _rhs(state, k)
        state = (state[0] + 0.1 * d[0], state[1] + 0.1 * d[1])
    a, b = state
    return a * a + b


def dtype_and_defaults(x, scale=2.0):
    y = np.empty(x.shape[0], dtype=x.dtype)
    z = np.zeros_like(x, dtype=np.float64)
    for i in range(x.shape[0]):
        y[i] = x[i] * scale
        z[i] = y[i] * x[i]
    return np.sum(z)


def newaxis_outer(x):
    m = x[:, np.newaxis] * x[np.newaxis, :]
    return np.sum(m * m)


def inverse_hyperbolic(x):
    return np.sum(np.arccosh(x + 2.0)) + math.acosh(x[0] + 2.0) + np.sum(np.arcsinh(x)) \
        + np.sum(np.arctanh(x * 0.5)) + np.sum(np.logaddexp(x, 0.5 * x)) + np.sum(np.reciprocal(x + 1.0))


def copy_of_a_slice(x):
    y = x[1:].copy()
    y[0] = 3.0
    return np.sum(y * x[1:])


def _step(C, D, s):
    D[0] = D[0] + s * C[0]
    return D, s * 2.0


def helper_returns_its_argument(x):
    C = x * 1.0
    D = x * 2.0
    s = 0.5
    D, s = _step(C, D, s)
    return np.sum(D * D) + s


def read_only_view_of_written_array(p0, r):
    paths = np.zeros((p0.shape[0], 4))
    paths[:, 0] = p0
    for j in range(1, 4):
        prices = paths[:, j - 1]
        paths[:, j] = prices * r + 0.1 * prices * prices
    return np.sum(paths * paths)


def view_read_after_write(x):
    y = x * 1.0
    v = y[1:]
    y[2] = 5.0 * x[0]
    return np.sum(v * x[1:])


def writes_through_row_views(A, s):
    B = A.copy()
    for i in range(B.shape[0]):
        row = B[i, :]
        row *= s
        row[1:] += row[:-1] * A[i, 0]
    return np.sum(B * B)


def column_view_read_after_writes(A):
    B = A * 1.0
    col = B[:, 1]
    B[0, 1] = 2.0 * A[0, 0]
    B[:, 1] *= A[:, 2]
    return np.sum(col * A[:, 0]) + np.sum(B)


def view_in_two_branches(x, flag):
    y = x * 1.0
    if flag > 0:
        v = y[1:]
    else:
        v = y[:-1]
    y[2] = 5.0
    return np.sum(v * x[1:])


def power_of_base(x, y):
    return x ** y


def rotated_buffers(u0, c):
    """Leapfrog with three buffers rotated by rebinding: writes go to whichever array a name holds."""
    u_prev = u0.copy()
    u = u0 * c
    u_next = np.zeros_like(u0)
    for s in range(4):
        u_next[1:-1] = 2.0 * u[1:-1] - u_prev[1:-1] + c * (u[2:] - 2.0 * u[1:-1] + u[:-2])
        u_prev, u, u_next = u, u_next, u_prev
    return u * u + u_prev


def rotates_its_argument(u, c):
    v = np.zeros_like(u)
    for s in range(3):
        v[:] = u * c
        u, v = v, u
    return np.sum(u)


def tiled(x, M):
    """np.tile with an int, with a tuple, and with more repetitions than axes (a new leading axis)."""
    a = np.tile(x, 2)
    B = np.tile(M, (1, 2))
    C = np.tile(x, (3, 1))
    return np.sum(a * a) + np.sum(np.sin(B) * B) + np.sum(C * C[::-1])


def names_of_runtime_helpers(x, trip_count):
    """Variables named like the helpers generated code calls: renamed, not shadowing them."""
    grow = 0.0
    tile = np.tile(x, 2)
    sum_into = x * 0.5
    for i in range(trip_count):
        for j in range(i):
            grow = grow * 0.5 + sum_into[j] * tile[i]
    return grow + np.sum(tile * tile)


def gathers(x, A, idx):
    """Reads through an index array with repeated indices, a boolean mask, and rows of a matrix."""
    rows = A[idx]
    picked = x[idx]
    picked[0] = 2.0 * picked[0]           # a copy: x is not changed
    return np.sum(x[idx] * picked) + np.sum(x[x > 0.0] ** 3) + np.sum(rows * rows) + np.sum(A[idx, :] * x[idx][:, None])


def scatters(x, v, idx):
    """Writes through an index array with a repeated index (the last write is kept) and a mask."""
    y = np.zeros(x.shape[0])
    y[idx] = v * 2.0
    z = x * 1.0
    z[x > 0.0] = np.sin(x[x > 0.0])
    return np.sum(y * x) + np.sum(z * z)


def gather_columns(A, idx):
    return np.sum(A[:, idx] ** 2)


def products_and_moments(x, A):
    """np.prod (exact where an entry is zero), np.var / np.std, with a reshape and a cumulative sum."""
    return np.prod(x) + np.prod(A.reshape(-1)) * np.var(A) + np.std(np.cumsum(x))


def shape_of_a_partial_view(y, C):
    """The length of a view that spans part of an axis is its own, not its array's."""
    v = y[1:]
    n = v.shape[0]
    a, b = C[1:, :].shape
    V = C[1:, :]
    return np.sum(v * v) * n + np.sum(V * V) * a * b


def view_returned_after_its_index_moves(x):
    for k in range(3):
        v = x[k:]
    for k in range(1):
        pass
    return v * 1.0


def rotated_elementwise(x, c):
    """Leapfrog with three rotated buffers written element by element in an inner loop."""
    u_prev = x.copy()
    u = x * 1.0
    u_next = np.zeros_like(x)
    for s in range(4):
        for i in range(1, x.shape[0] - 1):
            u_next[i] = 2.0 * u[i] - u_prev[i] + c * (u[i + 1] - 2.0 * u[i] + u[i - 1])
        u_prev, u, u_next = u, u_next, u_prev
    return u


def holds_a_rotated_buffer(x):
    a = x * 1.0
    b = np.zeros_like(x)
    c = a
    for t in range(3):
        b[:] = np.sin(a) * 1.5
        a, b = b, a
    return a, c


def rotates_and_scales_an_argument(x, w):
    a = x * 1.0
    b = np.zeros_like(x)
    for t in range(3):
        b[:] = np.sin(a) * w
        a, b = b, a
    w *= 2.0
    return a


def tests_for_none(x, flag):
    y = None
    if flag > 0:
        y = x * 2.0
    s = np.sum(x * x)
    if y is None:
        s = s * 3.0
    if y is not None:
        s = s + np.sum(y)
    return s, y


def linspace_default_count(a, b):
    return np.sum(np.linspace(a, b) ** 2)


# ---- found on kernels written by others (issue 8, second round) ---------------------------------------

def fresh_array_filled_in_loop(zs, r):
    """A small array allocated in every iteration and filled element by element (a 2x2 inverse, a
    weight vector): each iteration's array is another one, which the reverse sweep must bring back."""
    nll = 0.0
    for k in range(zs.shape[0]):
        w = np.empty(2)
        w[0] = r + k
        w[1] = 2.0 * (r + k) * w[0]
        nll += zs[k, 0] * w[0] + zs[k, 1] * w[1]
    return nll


def resampled_by_a_filled_index_array(p0, steps):
    """Particle-filter resampling: an index array made in every iteration, filled, then gathered through."""
    n = p0.shape[0]
    p = p0.copy()
    for t in range(steps):
        idx = np.empty(n, dtype=np.int64)
        for k in range(n):
            idx[k] = (k * 7 + t) % n
        p = p[idx] * 0.9 + 0.1 * p
    return np.sum(p * p)


def sums_of_gathered_rows(X, idx, labels):
    """np.sum over the first axis of rows gathered by an index array and by a mask."""
    return np.sum(np.sum(X[idx], axis=0) ** 2) + np.sum(np.sin(np.sum(X[labels == 1], axis=0)))


def gathers_through_parts_of_index_arrays(x, perm, B):
    """An index array that is itself part of one: a row of a table, a minibatch, reversed, shifted."""
    loss = np.sum(x[perm[1]] * np.arange(1.0, x.shape[0] + 1.0)) + np.sum(x[perm[0][::-1]] * x)
    for i in range(0, x.shape[0], B):
        batch = perm[0][i:i + B]
        loss += np.sum(x[batch] * x[batch])
    return loss + np.sum(x[perm[1][1:]] * x[:-1])


def rebound_from_parts_of_itself(x, idx):
    """A name rebound in a loop to an expression of its own elements or part of itself."""
    p = x * 1.0
    q = x * 1.0
    r = x * 1.0
    for t in range(2):
        p = p[idx] * 0.5 + p
        q = np.sin(q[::-1]) * x
        r = np.sin(r[0]) * x + r
    s = x * 1.0
    for t in range(3):
        s = np.sin(s[1:])
    return np.sum(p * p) + np.sum(q) + np.sum(r * r) + np.sum(s)


def regions_of_two_ranks(u0, r):
    """A boundary row copied, then the whole array updated; a column then a block, in one loop."""
    u = u0.copy()
    for s in range(2):
        u[0, :] = u[1, :]
        u += r * u * u
    L = u0.copy()
    for j in range(2):
        L[j:, j] = L[j:, j] * L[j:, j]
        L[j + 1:, j + 1:] = L[j + 1:, j + 1:] * r
    return np.sum(u * u) + np.sum(L)


def attributes_of_expressions(X, idx):
    """.T and np.mean(..., axis=) of slices, gathers and products, not only of names."""
    s = np.sum(X[1:].T @ X[1:]) + np.sum((X @ X.T).T * X[0, 0])
    return s + np.sum(np.mean(X[1:], axis=0) ** 2) + np.sum(np.mean(X[idx], axis=0) ** 2) + X[idx].T.shape[0]


def masks_on_row_views_in_a_loop(X, W):
    """A leaky ReLU row by row through a view and a mask picking a different count in each row."""
    H = X @ W
    for i in range(H.shape[0]):
        h = H[i]
        neg = h < 0.0
        h[neg] = 0.01 * h[neg]
    s = 0.0
    for i in range(X.shape[0]):
        m = X[i] > 0.0
        s += np.sum(X[i][m] * X[i][m])
    return np.sum(np.tanh(H) ** 2) + s


def _iterate_until(b, tol):
    x = np.zeros_like(b)
    for k in range(10):
        x += 0.5 * b
        if np.sum(x) > tol:
            return x
    return x


def early_return_of_an_array_updated_in_place(b, tol):
    """`return x` from inside the loop that updates x in place, here and in a helper called twice: the
    value returned is bound where the function ends, after every write into it."""
    x = np.zeros_like(b)
    for k in range(10):
        x += 0.5 * b * b
        if np.sum(x) > tol:
            return np.sum(x * x) + np.sum(_iterate_until(b, tol) * _iterate_until(b * 2.0, tol))
    return np.sum(x)


def _grow_until_large(u):
    for k in range(3):
        if u[0] > 10.0:
            return u
        u *= 1.5
    return u


def _shift(u, c):
    u += c
    return u


def returned_array_written_by_the_next_helper(b):
    u = b * 1.0
    y = _grow_until_large(u)
    u2 = _shift(u, 1.0)
    return np.sum(y * u2)


# ---- what differentiating generated code again once got wrong (the regression cases also run at second
# order, tests/compiler/test_ir.py) ------------------------------------------------------------------------

def rebound_through_a_temporary(x):
    """The gradient pops `t` back to its placeholder (an empty array) after the last iteration."""
    y = x.copy()
    for s in range(2):
        t = np.sin(y)
        y = t * t
    acc = np.zeros_like(x)
    for i in range(x.shape[0]):
        dx = x[i] * 2.0
        acc[i] += dx * np.sum(dx * dx)
    return np.sum(y) + np.sum(acc * acc)


def product_with_a_moving_block(Q0, v):
    """The gradient of `Q[:, k:] @ v[k:]` reads np.transpose(Q[:, k:]), a view of what is then restored."""
    Q = Q0.copy()
    for k in range(2):
        Q[:, k:] -= np.outer(Q[:, k:] @ v[k:], v[k:])
    return Q


def columns_and_blocks_read(A):
    """The gradient saves a column and a block of one array (regions of two ranks)."""
    W = np.exp(A)
    W /= np.sum(W)
    s = 0.0
    for j in range(W.shape[1]):
        s += np.sum(W[:, j]) * np.sum(W[:, j:j + 1])
    return s


def _norm(x, scale=None):
    if scale is None:
        return np.sqrt(np.sum(x * x))
    return np.sqrt(np.sum(x * x)) * scale


def optional_arguments(x, w=None, bias=None):
    """Arguments that default to None, tested with `is None` here and in a helper (as Numba allows)."""
    if w is None:
        w = np.ones_like(x)
    s = np.sum(w * x * x)
    if bias is not None:
        s = s + bias * s
    return s + _norm(x) + _norm(x * w, 2.0)


# ---- found on a third batch of kernels --------------------------------------------------------------------

def copied_loop_scalar(x):
    """A loop-carried scalar copied at the top of the loop, used, then rebuilt from the copy."""
    prev = 0.0
    acc = 0.0
    for k in range(x.shape[0]):
        p = prev
        acc += p * p
        prev = p + x[k]
    s = (x.copy(), 0.0)
    for k in range(2):
        v, t = s
        v[k] = v[k] + t
        s = (v, t + v[k] * v[k])
    v, t = s
    return acc + np.sum(v) + t


def axes_given_by_position(A, B, T):
    """np.sum(A, 1), A.sum(0), np.mean(A, 1), A.mean(0), np.concatenate(..., 1), np.stack(..., 1),
    np.transpose(T, axes) and T.transpose(...): the axis or axes given by position, not by keyword."""
    s = np.sum(np.sum(A, 1) ** 2) + np.sum(A.sum(0) ** 3) + np.sum(np.mean(A, 1) * A.mean(0)[0])
    s += np.sum(np.concatenate((A, B), 1) ** 2 * np.arange(7.0)) + np.sum(np.stack((A[0, :3], B[0]), 1) ** 3)
    return s + np.sum(np.transpose(T, (1, 2, 0)) * np.arange(2.0)) + np.sum(T.transpose(2, 0, 1)[0] ** 2)


def builtins_and_bounds_on_arrays(x, A):
    """max / min of a whole array, np.clip with one bound, np.outer of a 2-d array, np.asarray of a tuple
    of elements, and a transpose copied in C order then flattened."""
    v = np.asarray((x[0] * x[1], x[2]))
    s = max(x) * min(x) + np.sum(np.clip(x, 0.0, None) ** 2) + np.sum(np.clip(x, None, 0.5) * x)
    return s + np.sum(np.outer(A, x) ** 2) + np.sum(v * v) + np.sum(A.T.copy().reshape(-1) * np.arange(6.0))


def two_dimensional_mask(A):
    B = A.copy()
    B[B < 0.0] = 0.0
    return np.sum(B)


def manhattan_norm(x):
    return np.linalg.norm(x, 1)


def eigenvalues_squared(x):
    w = np.linalg.eigh(np.outer(x, x) + np.eye(3))[0]
    return np.sum(w * w)


def triangle_of_qr(x):
    r = np.linalg.qr(np.outer(x, x) + np.eye(3))[1]
    return np.sum(r * r)


def left_singular_vectors_of(x):
    u = np.linalg.svd(np.outer(x, x) + np.eye(3))[0]
    return np.sum(u * u)


SMOOTHING = (-3.0 / 35, 12.0 / 35, 17.0 / 35, 12.0 / 35, -3.0 / 35)     # Savitzky-Golay, 5 points
RK4_WEIGHTS = (1.0 / 6, 1.0 / 3, 1.0 / 3, 1.0 / 6)


def tables_of_module_constants(y, h):
    """Module-level tuples of numbers: indexed by a loop index, by a constant, and unpacked."""
    out = np.zeros(y.shape[0] - 4)
    for i in range(out.shape[0]):
        s = 0.0
        for j in range(5):
            s += SMOOTHING[j] * y[i + j]
        out[i] = s * s
    b0, b1, b2, b3 = RK4_WEIGHTS
    return np.sum(out) * (b0 + b3) * h + RK4_WEIGHTS[1] * y[0] * h * h


# ---- issue 17: wrong results (argument swaps, workspaces, np.array of a scalar, expand_dims, 0 * inf) ----

def levinson(r, a, tmp):
    """LPC coefficients by the Levinson-Durbin recursion; the caller's coefficient buffers `a` and `tmp`
    are swapped at every order (`a, tmp = tmp, a`), as a speech-analysis routine writes it."""
    p = a.shape[0] - 1
    a[0] = 1.0
    for i in range(1, p + 1):
        a[i] = 0.0
    err = r[0]
    for i in range(1, p + 1):
        acc = r[i]
        for j in range(1, i):
            acc += a[j] * r[i - j]
        k = -acc / err
        tmp[0] = 1.0
        for j in range(1, i):
            tmp[j] = a[j] + k * a[i - j]
        tmp[i] = k
        for j in range(i + 1, p + 1):
            tmp[j] = 0.0
        a, tmp = tmp, a
        err *= 1.0 - k * k
    return err + a[p] * a[1]


def levinson_own_buffers(r, p):
    """The same recursion on buffers of its own, swapped each order."""
    a = np.zeros(p + 1)
    tmp = np.zeros(p + 1)
    a[0] = 1.0
    err = r[0]
    for i in range(1, p + 1):
        acc = r[i]
        for j in range(1, i):
            acc += a[j] * r[i - j]
        k = -acc / err
        tmp[0] = 1.0
        for j in range(1, i):
            tmp[j] = a[j] + k * a[i - j]
        tmp[i] = k
        for j in range(i + 1, p + 1):
            tmp[j] = 0.0
        a, tmp = tmp, a
        err *= 1.0 - k * k
    return err + a[p] * a[1] + tmp[1]


def three_buffers_rotated(x, n):
    """Three arrays rotated by one tuple assignment each step (a three-level time stepper)."""
    u = x.copy()
    v = x * 2.0
    w = np.zeros(x.shape[0])
    s = 0.0
    for k in range(n):
        for i in range(x.shape[0]):
            w[i] = u[i] * v[i] + 0.1 * w[i]
        u, v, w = v, w, u
        s += u[0] * w[1]
    return s + np.sum(u * v)


def scalars_swapped(x, y, n):
    """Scalar arguments swapped and rotated: `x, y = y, x * y`, three names at once."""
    z = 0.5
    for k in range(n):
        x, y = y, x * y
        z, x, y = y, z, x + 0.5
    return x * y + z


def _swap_in_helper(p, q):
    p, q = q, p
    return p - 2.0 * q


def swap_in_a_helper(x):
    """A helper swapping its own parameters (renamed when inlined)."""
    return _swap_in_helper(x[0], x[1]) * x[2]


def _fill_work(x, ca, k):
    for i in range(ca.shape[0]):
        ca[i] = x[i] * k + 0.5 * ca[i]
    return ca


def workspace_filled_by_a_helper(x, ca, n):
    """A work array the caller passes, filled by a helper that writes into it and returns it
    (`ca = fill(x, ca)` in a loop): after the call and after the gradient it holds what Python leaves."""
    s = 0.0
    for k in range(n):
        ca = _fill_work(x, ca, k + 1.0)
        s += np.sum(ca * ca)
    return s


def euler_to_quaternion(angles):
    """A crystallography library's Euler angles (Bunge) to a quaternion, elements set with np.array."""
    c1 = np.cos(0.5 * angles[0])
    s1 = np.sin(0.5 * angles[0])
    c2 = np.cos(0.5 * angles[1])
    s2 = np.sin(0.5 * angles[1])
    c3 = np.cos(0.5 * angles[2])
    s3 = np.sin(0.5 * angles[2])
    q = np.zeros(4)
    q[0] = np.array(c1 * c2 * c3 - s1 * c2 * s3)
    q[1] = np.array(c1 * s2 * c3 + s1 * s2 * s3, dtype=np.float64)
    q[2] = np.array(s1 * s2 * c3 - c1 * s2 * s3)
    q[3] = np.array(c1 * c2 * s3 + s1 * c2 * c3, dtype=np.float64)
    return q * np.array([1.0, 2.0, 3.0, 4.0])


def arrays_of_scalars(x):
    """np.array(e) of a scalar is a 0-d array, then used in arithmetic and returned into a scalar."""
    e = np.array(x[0] * x[1])
    f = np.array(x[2] * 2.0, dtype=np.float64)
    return e * f + np.sin(e) + x[0] * np.array(x[1] * x[1])


def expanded_dims(v, A):
    """np.expand_dims with the axis by keyword, by position and negative."""
    a = np.expand_dims(v, axis=0)
    b = np.expand_dims(v, 1)
    c = np.expand_dims(v, axis=-1)
    d = np.expand_dims(A, axis=1)
    return np.sum(a * b) + np.sum(c * c * c) + np.sum(d * d)


def _soft_minimum(a, b, c, gamma):
    a = a / -gamma
    b = b / -gamma
    c = c / -gamma
    m = max(a, b, c)
    return -gamma * (np.log(np.exp(a - m) + np.exp(b - m) + np.exp(c - m)) + m)


def soft_dtw(D, gamma):
    """Soft-DTW over a cost matrix, the accumulated matrix bordered with inf: exp(-inf / gamma) = 0
    terms send no 0 * inf back (d/dgamma is finite)."""
    n, m = D.shape
    R = np.full((n + 1, m + 1), np.inf)
    R[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            R[i, j] = D[i - 1, j - 1] + _soft_minimum(R[i - 1, j - 1], R[i - 1, j], R[i, j - 1], gamma)
    return R[n, m]


def soft_minimum_of_a_vector(v, gamma):
    """-gamma log(sum(exp(v / -gamma))) with no shift, on a vector holding inf, elementwise and in a loop."""
    s = 0.0
    for i in range(v.shape[0]):
        s += np.exp(v[i] / -gamma)
    t = np.sum(np.exp(v / -gamma))
    return -gamma * np.log(s) - 0.5 * gamma * np.log(t)


def first_pass_flag(A, x, n):
    """A flag tested and cleared in its own branch (`if first: ... first = False`), as a binary matrix
    power by squaring does it: the adjoint must test the flag's value on entry, not the cleared one."""
    result = np.eye(A.shape[0])
    square = A * 1.0
    first = True
    power = n
    while power != 0:
        if power % 2 == 1:
            if first:
                result = square * 1.0
                first = False
            else:
                result = result @ square
        square = square @ square
        power = power // 2
    total = 0.0
    started = False
    for i in range(x.shape[0]):
        if not started:
            total = x[i] * 2.0
            started = True
        else:
            total = total * x[i]
    return np.sum(result) + total


def full_truncation_variance(z, v0, kappa, theta, xi, dt):
    """Heston's full-truncation Euler step, `sqrt(max(v, 0))` of a variance that goes negative: where v < 0
    the slope of sqrt at 0 is inf and max's partial in v is 0, and their product must be 0, not nan; in
    one expression, over two statements, and on arrays with np.maximum and np.clip."""
    v = v0
    total = 0.0
    for k in range(z.shape[0]):
        vp = max(v, 0.0)
        v = v + kappa * (theta - vp) * dt + xi * math.sqrt(vp * dt) * z[k]
        total += math.sqrt(max(v, 0.0))
    paths = v0 + xi * z
    return total + np.sum(np.sqrt(np.maximum(paths, 0.0))) + np.sum(np.clip(paths, 0.0, None) ** 0.5)


def one_of_two_arrays(x):
    """A name bound in a loop to one of two arrays of different lengths: its adjoint is made again at
    each binding with that binding's shape (it was made once, with the last one's shape: a broadcast
    error, or a silently misshapen sum)."""
    head = x[:2] * 1.5
    s = 0.0
    for k in range(4):
        if k % 2 == 0:
            part = head
        else:
            part = x
        s += np.sum(part ** 2) * (k + 1)
    return s
