"""A corpus of plain numeric Python functions for ``@ad.function``.

In the spirit of Tangent's ``tests/functions.py``, but covering the whole
subset of DESIGN.md ("How the compiled layer must behave"): scalars and arrays
of rank 1-3, float64 / float32 / int arguments, arithmetic, comparisons,
boolean operators, conditional expressions, ``math`` and NumPy functions,
allocation, ``if/elif/else``, ``for`` over ``range`` (1, 2, 3 arguments and a
negative step), nested loops, ``while`` with data-dependent trip counts,
``break``, ``continue``, early ``return``, tuples, augmented assignment,
element and slice reads and writes (including writes in loops that overwrite
earlier values), helpers calling helpers (plain and decorated) and
``ad.stop_gradient``.

Every function here is plain Python that also compiles with ``numba.njit``
(``validate_corpus_numba()`` checks this).  Each entry of ``CASES`` is a
``Case(fn, make_args, active, ...)``: ``make_args()`` returns fresh inputs
chosen away from kinks (no ties in max/min, no abs at 0, no branch threshold
within FD reach), ``active`` lists the argument positions to differentiate.
Integer arguments are never active.
"""

import math
import types

import numpy as np

import srcad as ad
from srcad.testing import check_function, cotangents, fd_is_accurate, fresh, scalarize


class Case:
    """One corpus entry.

    fn          the plain Python function (undecorated)
    make_args   () -> tuple of fresh arguments
    active      argument positions whose gradient is checked
    fd_fn       optional (base_args, args) -> output: the function whose finite
                differences give the expected gradient (for ``stop_gradient``:
                the stopped value evaluated at ``base_args``); default: fn
    name        test id (fn.__name__ plus a suffix for repeated functions)
    """

    def __init__(self, fn, make_args, active=(0,), fd_fn=None, name=None):
        self.fn = fn
        self.make_args = make_args
        self.active = tuple(active)
        self.fd_fn = fd_fn
        self.name = name or fn.__name__

    def __repr__(self):
        return "Case(%s, active=%s)" % (self.name, self.active)


CASES = []
_decorated = {}


def decorated(case):
    """``ad.function(case.fn)``, once per function (compiled signatures are shared across tests)."""
    f = _decorated.get(case.fn)
    if f is None:
        f = _decorated[case.fn] = ad.function(case.fn)
    return f


def check_case(case, use_variables=False):
    """srcad.testing.check_function on one case: compiled result vs Python, tape gradient vs FD."""
    f = decorated(case)
    assert f.python_function is case.fn, f"{case.name}: python_function is not the undecorated function"
    return check_function(f, case.make_args(), case.active, fd_fn=case.fd_fn, name=case.name,
                          use_variables=use_variables)


def fd_is_accurate_for(case):
    """Central differences of the case are accurate at its inputs (no kink within reach)."""
    args = tuple(_upcast(a) for a in case.make_args())
    ws = cotangents(list(out) if isinstance(out := case.fn(*fresh(args)), tuple) else [out])

    def phi(a):
        a = fresh(a)
        o = case.fd_fn(args, a) if case.fd_fn is not None else case.fn(*a)
        return scalarize(list(o) if isinstance(o, tuple) else [o], ws)
    return fd_is_accurate(phi, args, case.active)


def _upcast(v):
    if isinstance(v, np.ndarray) and v.dtype == np.float32:
        return v.astype(np.float64)
    return np.float64(v) if isinstance(v, np.float32) else v


def case(make_args, active=(0,), fd_fn=None, suffix=""):
    """Register ``fn`` with an input generator; stackable for several inputs."""
    def deco(fn):
        CASES.append(Case(fn, make_args, active, fd_fn, fn.__name__ + suffix))
        return fn
    return deco


# -- input generators --------------------------------------------------------

def _vec(n, seed, lo=-1.0, hi=1.0, dtype=np.float64):
    return np.random.default_rng(seed).uniform(lo, hi, n).astype(dtype)


def _mat(shape, seed, lo=-1.0, hi=1.0, dtype=np.float64):
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(dtype)


def _away(n, seed, lo=0.2, hi=1.0, dtype=np.float64):
    """Values with |v| in [lo, hi] and random signs: away from 0."""
    r = np.random.default_rng(seed)
    return (r.uniform(lo, hi, n) * r.choice([-1.0, 1.0], n)).astype(dtype)


def A(*args):
    """make_args from constants: fresh copies of arrays on each call."""
    return lambda: tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)


# ===========================================================================
# 1. scalars: arithmetic
# ===========================================================================

@case(A(1.3))
@case(A(-0.7), suffix="_neg")
def s_poly(x):
    return 3.0 * x * x * x - 2.0 * x * x + x - 7.0


@case(A(1.3, 0.6), active=(0, 1))
def s_div(x, y):
    return x / y + y / (x * x + 1.0) - 1.0 / x


@case(A(1.2))
def s_pow_int(x):
    return x ** 3 + x ** -2 + x ** 0 + 2.0 ** x


@case(A(1.7, 0.8), active=(0, 1))
def s_pow_float(x, y):
    return x ** y + x ** 0.5 + y ** 1.5


@case(A(2.345))
@case(A(-1.62), suffix="_neg")
def s_floordiv_mod(x):
    # // is piecewise constant, % has slope 1 away from its jumps
    return (x // 0.5) * x + x % 0.7 * x + (x * 3.0) % 1.3


@case(A(0.9))
def s_unary(x):
    y = -x
    z = +y
    return -(z * z * x) - (-x)


@case(A(0.4, 1.1), active=(0, 1))
def s_mixed_int_literals(x, y):
    return 2 * x + y * 3 - 1 + (x + 1) / 2 + 5 // 2 * y


@case(A(2.0, 3))
def s_int_arg(x, n):
    # n is an int argument: never differentiated
    return x ** n + float(n) * x + n


@case(A(1.37, 4))
def s_float_int_casts(x, n):
    k = int(x * 3.0)          # piecewise constant: derivative 0
    return float(k) * x + float(n) * x * x + int(n / 2) * x


@case(A(0.9))
def s_augassign(x):
    s = x
    s += x
    s *= x
    s -= 0.25
    s /= x + 2.0
    s **= 2
    s += s * x
    return s


# ===========================================================================
# 2. scalars: math.*
# ===========================================================================

@case(A(0.7))
def s_math_trig(x):
    return math.sin(x) * math.cos(2.0 * x) + math.tan(0.5 * x)


@case(A(1.3))
def s_math_exp_log(x):
    return math.exp(0.5 * x) * math.log(x) + math.log1p(x) - math.expm1(-x)


@case(A(0.6))
def s_math_hyperbolic(x):
    return math.sinh(x) + math.cosh(0.5 * x) * math.tanh(x)


@case(A(0.35))
def s_math_inverse_trig(x):
    return math.asin(x) + math.acos(0.5 * x) * math.atan(3.0 * x)


@case(A(0.8, -1.3), active=(0, 1))
def s_math_atan2_hypot(x, y):
    return math.atan2(y, x) + math.hypot(x, y) * math.atan2(x, 2.0)


@case(A(1.6, 0.7), active=(0, 1))
def s_math_pow_sqrt(x, y):
    return math.pow(x, y) + math.sqrt(x * y) + math.pow(y, 3.0)


@case(A(1.4))
def s_math_log10_log2_erf(x):
    return math.log10(x) + math.log2(3.0 * x) + math.erf(x - 1.0)


@case(A(-0.8))
def s_math_fabs_pi_e(x):
    return math.fabs(x) * math.pi + math.e * x * x


# ===========================================================================
# 3. scalars: comparisons, booleans, branches
# ===========================================================================

@case(A(1.2, 0.5), active=(0, 1))
@case(A(0.3, 0.9), active=(0, 1), suffix="_else")
def s_compare_branch(x, y):
    if x > y:
        r = x * x - y
    else:
        r = y * y + x
    return r


@case(A(0.5, 1.5), active=(0, 1))
@case(A(3.5, 1.5), active=(0, 1), suffix="_or")
@case(A(1.2, 2.5), active=(0, 1), suffix="_else")
def s_bool_ops(x, y):
    if x > 0.0 and y < 2.0:
        r = x * y
    elif x > 3.0 or not (y > 2.0):
        r = x + y * y
    else:
        r = x - y
    t = x >= y
    if t:
        r = r * 2.0
    if x != y and x <= 10.0:
        r = r + x
    if x == 100.0:
        r = 0.0
    return r


@case(A(1.5))
@case(A(-0.5), suffix="_else")
def s_ifexp(x):
    y = x * x if x > 1.0 else -x * 3.0
    return y + (math.sin(x) if x < 0.0 else math.cos(x))


@case(A(-2.5), suffix="_a")
@case(A(-0.5), suffix="_b")
@case(A(0.5), suffix="_c")
@case(A(2.5), suffix="_d")
def s_elif_chain(x):
    if x < -1.0:
        r = x * x
    elif x < 0.0:
        r = math.sin(x)
    elif x < 1.0:
        r = math.exp(x)
    else:
        r = x ** 3
    return r


@case(A(0.8, 1.3, -0.4), active=(0, 1, 2))
def s_abs_min_max(x, y, z):
    return abs(z) + min(x, y) * max(y, z) + max(x, y, z) - min(x, z, y) + abs(x - y)


@case(A(3.0))
@case(A(0.5), suffix="_late")
def s_early_return(x):
    if x > 2.0:
        return x * x
    y = math.sin(x)
    if y > 0.9:
        return y
    return y * x + 1.0


@case(A(1.3, 0.6), active=(0, 1))
def s_tuple_return(x, y):
    return x * y, x + math.exp(y)


@case(A(1.3, 0.6), active=(0, 1))
def s_tuple_unpack(x, y):
    a, b = y, x
    a, b = a * b, a - b
    c, (d, e) = a + 1.0, (b * 2.0, a * b)
    return a * b + c * d - e


@case(A(np.float32(0.7), np.float32(1.3)), active=(0, 1))
def s_float32(x, y):
    return x * y + 2.0 * x / y - math.sin(x)


# ===========================================================================
# 4. loops over range
# ===========================================================================

@case(A(0.8, 6))
def loop_range1(x, n):
    s = x
    for i in range(n):
        s = 0.9 * s + math.sin(x * i)
    return s


@case(A(0.8))
def loop_range2(x):
    s = 0.0
    for i in range(2, 7):
        s = s + x ** i / i
    return s


@case(A(0.8))
def loop_range3_step(x):
    s = 1.0
    for i in range(1, 10, 3):
        s = s * x + i
    return s


@case(A(_vec(7, 1)))
def loop_negative_step(x):
    n = x.shape[0]
    s = 0.0
    for i in range(n - 1, -1, -1):
        s = s * 0.5 + x[i] * x[i]
    for i in range(n - 1, 0, -2):
        s = s + math.sin(s) * x[i - 1]
    return s


@case(A(_mat((4, 4), 2)))
def nested_loops(a):
    n = a.shape[0]
    m = a.shape[1]
    s = 0.0
    for i in range(n):
        for j in range(m):
            s = s + a[i, j] * a[j, i] * (i + 1) - 0.1 * s * a[i, j]
    return s


@case(A(_vec(6, 3)))
def nested_triangular(x):
    n = len(x)
    s = 0.0
    for i in range(n):
        for j in range(i):
            s += x[i] * x[j] / (1.0 + j)
        s = math.tanh(s)
    return s


@case(A(_vec(5, 4), 3))
def nested_three_deep(x, m):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(m):
            for k in range(j, m):
                s = s + x[i] * (j + 1) - 0.05 * s * x[(i + k) % x.shape[0]]
    return s


@case(A(1.1))
def while_data_dependent(x):
    # trip count depends on x (kept constant under small perturbations)
    s = x
    k = 0
    while s < 10.0:
        s = s * 1.3 + 0.1
        k += 1
    return s + k


@case(A(_away(8, 5, 0.3, 1.0), 0.7))
def while_bounded(x, lim):
    s = 0.0
    i = 0
    while i < x.shape[0] and s < lim:
        s = s + x[i] * x[i]
        i = i + 1
    return s * x[0]


@case(A(_vec(9, 6, 0.1, 0.9)))
def loop_break(x):
    s = 0.0
    for i in range(x.shape[0]):
        s = s + x[i]
        if s > 2.05:
            break
        s = s * 1.1
    return s * s


@case(A(_away(9, 7)))
def loop_continue(x):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] < 0.0:
            continue
        s = s * 0.5 + x[i] * x[i]
    return s


@case(A(1.7))
def while_break(x):
    s = x
    k = 0
    while True:
        s = math.sin(s) + x
        k += 1
        if k >= 5:
            break
    return s


@case(A(_vec(8, 8, 0.2, 0.6)))
@case(A(np.array([0.2, 0.3, 0.9, 0.1, 0.2])), suffix="_exit")
def loop_early_return(x):
    s = 0.0
    for i in range(x.shape[0]):
        s = s + x[i]
        if x[i] > 0.75:
            return s * x[i]
    return s * 2.0


@case(A(_away(10, 9)))
def branch_in_loop(x):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > 0.0:
            s = s + x[i] * s + 0.1
        elif x[i] > -0.5:
            s = s - x[i]
        else:
            s = s * x[i]
    return s


@case(A(_vec(6, 10)))
def energy(x):
    # the example of DESIGN.md
    y = np.zeros_like(x)
    acc = 0.0
    for i in range(x.shape[0]):
        acc = acc + x[i] * x[i]
        y[i] = acc
    r = 0.0
    for i in range(x.shape[0]):
        r = math.sin(r) + y[i]
    return r


@case(A(np.array([0.3, -0.2, 0.5, 0.1]), 0.7), active=(0, 1))
def horner(coef, x):
    r = 0.0
    for i in range(coef.shape[0] - 1, -1, -1):
        r = r * x + coef[i]
    return r


@case(A(_vec(5, 11), 1.5), active=(0, 1))
def newton_sqrt_while(v, c):
    # Newton iteration for sqrt(c + |v|^2): data-dependent trip count
    t = c
    for i in range(v.shape[0]):
        t += v[i] * v[i]
    r = t
    it = 0
    while abs(r * r - t) > 1e-12 * t and it < 50:
        r = 0.5 * (r + t / r)
        it += 1
    return r


# ===========================================================================
# 5. arrays: whole-array NumPy
# ===========================================================================

@case(A(_vec(12, 12)))
def arr_sum_sin(x):
    return np.sum(np.sin(x) * x)


@case(A(_vec(12, 13)))
def arr_mean_exp(x):
    return np.mean(np.exp(x)) + np.mean(x * x)


@case(A(_vec(10, 14), _vec(10, 15)), active=(0, 1))
def arr_dot(x, y):
    return np.dot(x, y) + np.dot(x * x, np.cos(y))


@case(A(_mat((4, 3), 16), _vec(3, 17)), active=(0, 1))
def arr_matvec(a, x):
    y = a @ x
    return np.sum(y * y)


@case(A(_mat((3, 4), 18), _mat((4, 2), 19)), active=(0, 1))
def arr_matmul(a, b):
    c = a @ b
    d = np.dot(a.T, c)
    return np.sum(c ** 2) + np.sum(np.sin(d))


@case(A(_vec(10, 20), 1.7), active=(0, 1))
def arr_broadcast_scalar(x, a):
    y = a * x + x / a - 2.0 * a
    return np.sum(y * y) + np.sum(1.0 - x)


@case(A(_mat((3, 4), 21), _vec(4, 22)), active=(0, 1))
def arr_broadcast_row(a, v):
    b = a * v + v
    return np.sum(b * a) + np.sum(np.exp(a - v))


@case(A(_mat((2, 3, 4), 23), _vec(4, 24)), active=(0, 1))
def arr_broadcast_rank3(t, v):
    u = t * v - v * v
    return np.sum(u * t) + np.mean(np.tanh(u))


@case(A(_vec(10, 25)))
def arr_elementwise(x):
    y = np.tanh(x) + np.cos(x) * np.log(x * x + 1.0) + np.sqrt(x * x + 1.0)
    z = np.exp(-x) * np.sinh(x) + np.arctan(x) + np.abs(x) * x
    return np.sum(y * z)


@case(A(_vec(10, 26, 0.1, 0.9)))
def arr_elementwise_more(x):
    y = np.arcsin(x) + np.arccos(0.5 * x) + np.log1p(x) + np.expm1(x) + np.cosh(x)
    z = np.log10(x) + np.log2(x) + np.log(x) + np.square(x) + np.tan(x)
    return np.sum(y * z)


@case(A(_vec(10, 27), _vec(10, 28)), active=(0, 1))
def arr_maximum_minimum(x, y):
    return np.sum(np.maximum(x, y) * np.minimum(x, 0.5)) + np.max(x) - np.min(y)


@case(A(_vec(10, 29, 0.2, 1.2)))
def arr_power(x):
    return np.sum(x ** 2 + np.power(x, 3) + x ** 0.5 + 2.0 ** x)


@case(A(_vec(10, 30, 0.5, 1.5), _vec(10, 31, 0.5, 1.5)), active=(0, 1))
def arr_divide_array(x, y):
    return np.sum(x / y - y / (x * x) + 1.0 / x)


@case(A(_mat((3, 4), 32)))
def arr_sum_axis(a):
    # sums along axes and of rows
    s = 0.0
    col = np.sum(a, axis=0)
    row = np.sum(a, axis=1)
    return np.sum(col * col) + np.dot(row, row) + s


@case(A(_vec(8, 33)))
def arr_returns_array(x):
    return np.sin(x) * 2.0 + x * x


@case(A(_mat((3, 3), 34)))
def arr_returns_matrix(a):
    return a @ a.T + a


@case(A(_vec(8, 35)))
def arr_tuple_return_arrays(x):
    return x * x, np.sum(x), np.cos(x)


@case(A(_vec(8, 36, dtype=np.float32)))
def arr_float32(x):
    return np.sum(np.sin(x) * x) + np.sum(np.exp(x))


@case(A(_mat((3, 4), 37, dtype=np.float32), _mat((4, 2), 38, dtype=np.float32)),
      active=(0, 1))
def arr_float32_matmul(a, b):
    c = a @ b
    return np.sum(c * c)


@case(A(_vec(12, 39)), active=(0,))
def arr_sum_of_int_scaled(x):
    # int array from a float array has no derivative
    k = np.zeros(x.shape[0], dtype=np.int64)
    for i in range(x.shape[0]):
        k[i] = i % 3
    return np.sum(x * k) + np.sum(x * x)


# ===========================================================================
# 6. arrays: allocation, elements, slices
# ===========================================================================

@case(A(_vec(8, 40)))
def arr_zeros_fill(x):
    n = x.shape[0]
    y = np.zeros(n)
    for i in range(n):
        y[i] = x[i] * (i + 1.0)
    return np.sum(y * x)


@case(A(_vec(8, 41)))
def arr_empty_like_fill(x):
    y = np.empty_like(x)
    z = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        y[i] = math.sin(x[i])
        z[i] = y[i] * x[i]
    return np.sum(z) + np.sum(y)


@case(A(_mat((3, 4), 42)))
def arr_ones_zeros_like_2d(a):
    b = np.ones_like(a)
    c = np.zeros_like(a)
    d = np.ones((a.shape[0], a.shape[1]))
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            b[i, j] = b[i, j] * a[i, j] + c[i, j]
            c[i, j] = b[i, j] * d[i, j] * a[i, j]
    return np.sum(b * c)


@case(A(_vec(8, 43)))
def arr_copy_modify(x):
    y = x.copy()
    y[0] = y[1] * y[2]
    y[3] = math.exp(y[0])
    return np.sum(y * y) + x[0]


@case(A(_mat((3, 5), 44)))
def arr_shape_len(a):
    m, n = a.shape
    s = 0.0
    for i in range(len(a)):
        s += a[i, n - 1] * m + a[i, 0] * n
    return s * a.shape[0]


@case(A(_vec(8, 45)))
def arr_overwrite_rmw(x):
    # read-modify-write of every element after a first pass wrote it
    y = np.zeros_like(x)
    for i in range(x.shape[0]):
        y[i] = x[i]
    for i in range(x.shape[0]):
        y[i] = y[i] * y[i] + math.sin(y[i])
    for i in range(x.shape[0]):
        y[i] = math.exp(0.5 * y[i])
    return np.sum(y)


@case(A(_vec(9, 46)))
def arr_recurrence_inplace(x):
    y = x.copy()
    for i in range(1, y.shape[0]):
        y[i] = 0.5 * y[i - 1] + math.sin(y[i])
    return np.sum(y * y)


@case(A(_vec(10, 47)))
def arr_overwrite_repeated(x):
    # each of 3 slots overwritten many times, each value needed by the adjoint
    y = np.ones(3)
    for i in range(x.shape[0]):
        j = i % 3
        y[j] = y[j] * x[i] + math.cos(y[j])
    return y[0] * y[1] * y[2]


@case(A(_vec(6, 48), 4))
def arr_overwrite_nested(x, reps):
    y = x.copy()
    for r in range(reps):
        for i in range(y.shape[0]):
            y[i] = math.tanh(y[i] + 0.3 * y[(i + 1) % y.shape[0]])
    return np.sum(y * x)


@case(A(_vec(10, 49)))
def arr_slice_read(x):
    return np.sum(x[1:] * x[:-1]) + np.sum(x[::2]) * x[-1] + np.sum(x[2:7:2] ** 2)


@case(A(_vec(8, 50)))
def arr_slice_write(x):
    y = np.zeros_like(x)
    y[1:4] = x[0:3] * 2.0
    y[4:] = np.sin(x[4:])
    y[0] = x[7]
    y[2:6] = y[2:6] * y[1:5]     # overwrite a slice from an overlapping slice
    return np.sum(y * y)


@case(A(_mat((4, 3), 51)))
def arr_slice_write_loop(a):
    b = np.zeros_like(a)
    s = 1.0
    for i in range(a.shape[0]):
        b[i, :] = a[i, :] * s
        s = np.sum(b[i, :]) + 1.0
    for i in range(1, a.shape[0]):
        b[i, :] = b[i, :] + b[i - 1, :] * 0.5       # overwrites earlier rows
    return np.sum(b * b)


@case(A(_mat((3, 4), 52)))
def arr_2d_loops(a):
    out = np.zeros((a.shape[1], a.shape[0]))
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            out[j, i] = a[i, j] * a[i, j] + out[j, i - 1] * 0.5
    return np.sum(out) + out[a.shape[1] - 1, a.shape[0] - 1]


@case(A(_mat((2, 3, 4), 53)))
def arr_3d_loops(t):
    s = 0.0
    u = np.zeros_like(t)
    for i in range(t.shape[0]):
        for j in range(t.shape[1]):
            for k in range(t.shape[2]):
                u[i, j, k] = t[i, j, k] * s + math.sin(t[i, j, k])
                s = s * 0.5 + u[i, j, k]
    return s + np.sum(u * u)


@case(A(_mat((2, 3, 4), 54)))
def arr_3d_whole(t):
    return np.sum(t * t) + np.sum(np.sin(t)) + np.mean(t[1] * t[0])


@case(A(_vec(6, 55), np.array([3, 0, 5, 3, 1], dtype=np.int64)))
def arr_int_index_array(x, idx):
    s = 0.0
    for k in range(idx.shape[0]):
        s = s + x[idx[k]] * x[idx[k]] * (k + 1)
    return s


@case(A(_vec(7, 56)))
def arr_negative_index(x):
    return x[-1] * x[-2] + x[-7] * 3.0


@case(A(_vec(9, 57)))
def arr_computed_index(x):
    n = x.shape[0]
    s = 0.0
    for i in range(n):
        s = s + x[(i * 4) % n] * x[n - 1 - i] + x[i // 2]
    return s


@case(A(_vec(10, 58)))
def arr_cumsum_loop(x):
    c = np.zeros_like(x)
    c[0] = x[0]
    for i in range(1, x.shape[0]):
        c[i] = c[i - 1] + x[i]
    p = np.ones_like(x)
    p[0] = x[0]
    for i in range(1, x.shape[0]):
        p[i] = p[i - 1] * (1.0 + 0.5 * x[i])
    return np.sum(c * c) + p[x.shape[0] - 1]


@case(A(_vec(6, 59), np.zeros(6)), active=(0,))
def arr_write_output_arg(x, out):
    # writes into an inactive output argument (allowed)
    for i in range(x.shape[0]):
        out[i] = x[i] * 2.0
    return np.sum(out * x)


@case(A(_vec(8, 60, dtype=np.float32)))
def arr_float32_loop_overwrite(x):
    y = x.copy()
    for i in range(1, y.shape[0]):
        y[i] = y[i - 1] * 0.5 + math.sin(y[i])
    return np.sum(y * y)


@case(A(_mat((2, 3, 2), 61, dtype=np.float32)))
def arr_float32_rank3(t):
    u = np.empty_like(t)
    for i in range(t.shape[0]):
        for j in range(t.shape[1]):
            for k in range(t.shape[2]):
                u[i, j, k] = t[i, j, k] * t[i, (j + 1) % t.shape[1], k]
    return np.sum(u) + np.sum(np.tanh(t))


@case(A(_vec(10, 62), np.float32(0.5)), active=(0,))
def arr_mixed_dtype_inactive(x, h):
    return np.sum(x * x) * float(h)


@case(A(_vec(8, 63)))
def arr_conditional_expr(x):
    y = x.copy()
    for i in range(x.shape[0]):
        y[i] = y[i] * 2.0 if x[i] > 0.0 else math.exp(y[i])
    return np.sum(y * y)


# ===========================================================================
# 7. helpers
# ===========================================================================

def _h_square(v):
    return v * v


def _h_sumsq(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += _h_square(x[i])       # a helper calling a helper
    return s


def _h_stats(x):
    s = 0.0
    q = 0.0
    for i in range(x.shape[0]):
        s += x[i]
        q += x[i] * x[i]
    return s, q


def _h_fill(x, scale):
    y = np.empty_like(x)
    for i in range(x.shape[0]):
        y[i] = math.sin(x[i]) * scale
    return y


def _h_outer(x, y):
    return _h_sumsq(x) * _h_square(np.sum(y))


def _dec_norm_impl(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return math.sqrt(s + 1.0)


dec_norm = ad.function(_dec_norm_impl)   # a decorated helper


@case(A(_vec(7, 70)))
def helper_call(x):
    return _h_sumsq(x) + _h_square(x[0])


@case(A(_vec(7, 71), _vec(5, 72)), active=(0, 1))
def helper_calls_helper(x, y):
    return _h_outer(x, y) + _h_outer(y, x)


@case(A(_vec(7, 73)))
def helper_tuple_return(x):
    s, q = _h_stats(x)
    return q / (s * s + 1.0)


@case(A(_vec(7, 74), 1.3), active=(0, 1))
def helper_returns_array(x, a):
    y = _h_fill(x, a)
    z = _h_fill(y, 2.0)
    return np.sum(y * z)


@case(A(_vec(7, 75)))
def helper_in_loop(x):
    s = 0.0
    for i in range(x.shape[0]):
        s = _h_square(s * 0.5) + _h_square(x[i]) * math.cos(s)
    return s


@case(A(_vec(7, 76)))
def helper_decorated(x):
    return dec_norm(x) * 2.0 + _h_sumsq(x)


# ===========================================================================
# 8. stop_gradient
# ===========================================================================

def _fd_stop_scalar(base, args):
    x = args[0]
    s = np.sum(base[0] * base[0])
    return s * np.sum(np.sin(x)) + np.sum(x)


@case(A(_vec(6, 80)), fd_fn=_fd_stop_scalar)
def stop_gradient_scalar(x):
    s = ad.stop_gradient(np.sum(x * x))
    return s * np.sum(np.sin(x)) + np.sum(x)


def _fd_stop_array(base, args):
    x, y = args
    bx = base[0]
    return np.sum(bx * bx * x) + np.sum(y * bx)


@case(A(_vec(6, 81), _vec(6, 82)), active=(0, 1), fd_fn=_fd_stop_array)
def stop_gradient_array(x, y):
    c = ad.stop_gradient(x * x)
    d = ad.stop_gradient(x)
    return np.sum(c * x) + np.sum(y * d)


def _fd_stop_loop(base, args):
    x = args[0]
    b = base[0]
    s = 0.0
    for i in range(x.shape[0]):
        s = s + x[i] * math.sin(b[i] * 2.0)
    return s


@case(A(_vec(6, 83)), fd_fn=_fd_stop_loop)
def stop_gradient_in_loop(x):
    s = 0.0
    for i in range(x.shape[0]):
        w = ad.stop_gradient(math.sin(x[i] * 2.0))
        s = s + x[i] * w
    return s


# ===========================================================================
# 9. small models
# ===========================================================================

def _lv_rhs(x, y, a, b, c, d):
    return a * x - b * x * y, d * x * y - c * y


def rk4_lotka_volterra(params, x0, y0, dt, n):
    a = params[0]
    b = params[1]
    c = params[2]
    d = params[3]
    x = x0
    y = y0
    for i in range(n):
        k1x, k1y = _lv_rhs(x, y, a, b, c, d)
        k2x, k2y = _lv_rhs(x + 0.5 * dt * k1x, y + 0.5 * dt * k1y, a, b, c, d)
        k3x, k3y = _lv_rhs(x + 0.5 * dt * k2x, y + 0.5 * dt * k2y, a, b, c, d)
        k4x, k4y = _lv_rhs(x + dt * k3x, y + dt * k3y, a, b, c, d)
        x = x + dt / 6.0 * (k1x + 2.0 * k2x + 2.0 * k3x + k4x)
        y = y + dt / 6.0 * (k1y + 2.0 * k2y + 2.0 * k3y + k4y)
    return x * x + y * y


case(A(np.array([1.5, 1.0, 3.0, 1.0]), 1.0, 1.2, 0.01, 50), active=(0, 1, 2))(
    rk4_lotka_volterra)


@case(A(_vec(6, 90), 1))
@case(A(_vec(6, 90), 4), suffix="_cls4")
def softmax_xent(z, label):
    m = z[0]
    for i in range(1, z.shape[0]):
        if z[i] > m:
            m = z[i]
    s = 0.0
    for i in range(z.shape[0]):
        s += math.exp(z[i] - m)
    return math.log(s) + m - z[label]


@case(A(_mat((5, 3), 91), _vec(3, 92), _vec(5, 93)), active=(0, 1))
def least_squares(a, w, y):
    r = a @ w - y
    return 0.5 * np.dot(r, r) + 0.01 * np.sum(w * w)


@case(A(_mat((4, 3), 94), _vec(4, 95), _vec(3, 96)), active=(0, 1, 2))
def mlp_layer_loops(w, b, x):
    h = np.empty(w.shape[0])
    for i in range(w.shape[0]):
        z = b[i]
        for j in range(w.shape[1]):
            z += w[i, j] * x[j]
        h[i] = math.tanh(z)
    return np.sum(h * h) + h[0]


@case(A(_vec(8, 97), 0.3), active=(0, 1))
def relu_loop(x, bias):
    s = 0.0
    for i in range(x.shape[0]):
        z = x[i] + bias
        s += max(z, 0.0) * z
    return s


@case(A(_vec(12, 98)))
def conv1d_valid(x):
    k0 = 0.25
    k1 = -0.5
    k2 = 0.75
    n = x.shape[0] - 2
    y = np.empty(n)
    for i in range(n):
        y[i] = k0 * x[i] + k1 * x[i + 1] + k2 * x[i + 2]
    return np.sum(np.tanh(y))


@case(A(_vec(6, 99), 1.0 / 8.0, 5), active=(0,))
def heat_explicit(u0, r, steps):
    # explicit heat equation: the state array overwritten every step
    u = u0.copy()
    v = np.empty_like(u)
    n = u.shape[0]
    for t in range(steps):
        for i in range(n):
            left = u[i - 1] if i > 0 else 0.0
            right = u[i + 1] if i < n - 1 else 0.0
            v[i] = u[i] + r * (left - 2.0 * u[i] + right)
        for i in range(n):
            u[i] = v[i]
    return np.sum(u * u)


# ---------------------------------------------------------------------------

def case_by_name(name):
    for c in CASES:
        if c.name == name:
            return c
    raise KeyError(name)


def _njit_module_globals():
    """This module's globals with every function replaced by a numba.njit
    twin that resolves helpers through the same table (for validation)."""
    import numba
    g = dict(globals())
    stub = types.ModuleType("ad_stub")
    stub.stop_gradient = numba.njit(lambda v: v)
    g["ad"] = stub
    pyfuncs = {k: v for k, v in g.items() if isinstance(v, types.FunctionType)
               and v.__module__ == __name__ and not k.startswith("_fd_")}
    for k, v in pyfuncs.items():
        g[k] = numba.njit(types.FunctionType(v.__code__, g, k, v.__defaults__))
    g["dec_norm"] = g["_dec_norm_impl"]
    return g


def validate_corpus_numba(names=None, verbose=False):
    """Check every corpus function compiles with numba.njit and agrees with
    plain Python.  Returns a list of (name, message) failures."""
    g = _njit_module_globals()
    fails = []
    for c in CASES:
        if names and c.name not in names:
            continue
        try:
            py = c.fn(*c.make_args())
            nb = g[c.fn.__name__](*c.make_args())
            _assert_close(py, nb)
            if verbose:
                print("ok", c.name)
        except Exception as e:  # report all
            fails.append((c.name, "%s: %s" % (type(e).__name__, str(e)[:300])))
    return fails


def _assert_close(a, b, rtol=1e-12):
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for u, v in zip(a, b):
            _assert_close(u, v, rtol)
        return
    if np.asarray(a).dtype == np.float32 or np.asarray(b).dtype == np.float32:
        rtol = max(rtol, 1e-5)
    np.testing.assert_allclose(np.asarray(b, dtype=np.float64),
                               np.asarray(a, dtype=np.float64), rtol=rtol, atol=rtol)


def sweep(cases, every=4, start=0):
    """The cases a whole-corpus sweep of a derived transform runs: every `every`-th one from `start` by
    default (each compiles code of its own, and CI has two cores; sweeps of different transforms start at
    different places, so that together they cover more), all of them with ``SRCAD_FULL_SWEEPS=1``."""
    return list(cases) if full_sweeps() else list(cases)[start % every::every]


def sampled(name, every):
    """Is the check named `name` in a sweep's sample (one in `every`, chosen by a hash of the name, the
    same in every run); all are with ``SRCAD_FULL_SWEEPS=1``."""
    import zlib
    return full_sweeps() or zlib.crc32(name.encode()) % every == 0


def full_sweeps():
    import os
    return bool(os.environ.get("SRCAD_FULL_SWEEPS"))
