"""Values Numba compiles that srcad once refused (issue 17): module constants and module-level arrays,
string options, records and named tuples, complex intermediates, and the NumPy functions of Numba's list.
Each kernel: the result equal to Python's, tape gradients against finite differences
(`srcad.testing.check_function`), second order through the IR where it applies (`test_ir`)."""
import functools
import math
import types
from collections import namedtuple

import numba
import numpy as np
import pytest

import _numba_values_constants as constants
import corpus
import srcad as ad
from srcad.compiler import TransformError, transform
from srcad.compiler.front.lower import RESERVED
from srcad.compiler.runtime import EXPORTS
from srcad.testing import check_function, finite_differences
from test_ir import second_order_check
from test_refusals import line_of

rng = np.random.default_rng(17)
F64 = numba.float64
ARR = numba.float64[::1]
ARR2 = numba.float64[:, ::1]

config = types.SimpleNamespace(THRESHOLD=0.5, ORDER=2, LABEL=["a"])


class Physics:
    GAS_CONSTANT = 8.314
    SCALES = (1.0, 2.0, 3.0)


Point = namedtuple("Point", "x y")
ORIGIN = Point(0.5, -1.5)
WEIGHTS = np.array([[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]])
INT_TABLE = np.array([3, 1, 2])
OBJECTS = np.array([1.0, "a"], dtype=object)


njit = functools.cache(numba.njit)      # Numba's own compile of a function, once for all its calls (and shapes)


def check(fn, args, active, second=True):
    """First order always; second order for a sample of the functions (all with SRCAD_FULL_SWEEPS=1)."""
    check_function(ad.function(fn), args, active)
    if second and corpus.sampled(fn.__name__, 2):
        second_order_check(fn, args, tuple(i in active for i in range(len(args))))


# ---- 1. constants from modules ---------------------------------------------------------------------

def newton_sqrt(a):
    """Newton's iteration stopped at a tolerance from a constants module."""
    x = a
    for _ in range(constants.MAX_ITER * 4):
        step = 0.5 * (x - a / x)
        if abs(step) < constants.FTOL * x:
            break
        x = x - step
    return x * constants.G


def thresholded(x):
    """Settings from a namespace and a class: a threshold, an order decided when compiling."""
    s = 0.0
    for i in range(x.shape[0]):
        v = x[i] - config.THRESHOLD
        if config.ORDER > 1:
            v = v * v
        s += v * Physics.GAS_CONSTANT + ORIGIN.x * Physics.SCALES[1]
    return s


def safe_log(x):
    """np.finfo / np.iinfo constants, np.inf, np.nan, math.pi, as numerical code guards logs."""
    tiny = np.finfo(np.float64).tiny
    eps = np.finfo(np.float64).eps
    big = np.finfo(np.float64).max
    s = 0.0
    for i in range(x.shape[0]):
        v = np.log(max(x[i], tiny)) + eps * x[i]
        if v < big and v > -np.inf and np.iinfo(np.int64).max > 0:
            s += v * math.pi
    return s + (0.0 if np.isnan(s) else np.nan * 0.0 * s)


def test_module_constants_are_read_when_compiling():
    check(newton_sqrt, (2.5,), (0,))
    check(thresholded, (rng.normal(size=5),), (0,))
    check_function(ad.function(safe_log), (rng.uniform(0.5, 2.0, 6),), (0,))


def uses_a_list_setting(x):
    return x * config.LABEL[0]


def test_a_setting_that_is_not_a_number_is_refused_naming_it():
    line = line_of(uses_a_list_setting, "config.LABEL")
    with pytest.raises(TransformError, match=rf"uses_a_list_setting .*line {line}\).*`config.LABEL` \(a list used as "
                                             r"a value\).*Hint: module-level numbers"):
        transform(uses_a_list_setting, (F64,), (True,))


# ---- 2. module-level arrays ------------------------------------------------------------------------

def horner(x):
    """A polynomial with coefficients from a module array, indexed by a loop index."""
    y = np.zeros_like(x)
    n = constants.COEF.shape[0]
    for k in range(n):
        y = y * x + constants.COEF[n - 1 - k]
    return np.sum(y * y)


def layer(v):
    """A fixed linear layer: a 2-d module array in a product, an integer table as indices."""
    h = np.tanh(WEIGHTS @ v)
    return np.sum(h * WEIGHTS[1, :2]) + v[INT_TABLE[0] - 1] * WEIGHTS.sum() + len(INT_TABLE)


def test_module_arrays_are_read_only_constants():
    check(horner, (rng.normal(size=4),), (0,))
    check(layer, (rng.normal(size=3),), (0,))


def test_an_array_content_is_part_of_the_compile():
    """Two contents never share a compile: the array is frozen into the code when first compiled, so a
    change needs f.recompile() (as Numba needs a new compile), which then sees the new content."""
    f = ad.function(horner)
    x = np.array([0.3, -0.2, 0.7, 1.1])
    first = float(f(x).numpy())
    saved = constants.COEF
    try:
        constants.COEF = saved * 2.0
        assert float(f(x).numpy()) == first
        f.recompile()
        assert float(f(x).numpy()) == pytest.approx(horner(x))
        assert float(f(x).numpy()) == pytest.approx(4.0 * first)
        check_function(f, (x,), (0,))
    finally:
        constants.COEF = saved


SHIFT = np.array([1.0, 2.0])


def shifted(x):
    return np.sum((x - SHIFT) ** 2)


def test_a_module_array_changed_in_place_keeps_its_first_content_for_every_compile():
    """As for module numbers: a later compile (another signature) uses the values of the first, so that the
    plain call and the gradient always agree; f.recompile() takes the new content."""
    f = ad.function(shifted)
    x = np.array([0.5, 0.5])
    assert float(f(x).numpy()) == 0.25 + 2.25
    SHIFT[0] = 5.0
    try:
        assert float(f(x.astype(np.float32)).numpy()) == 0.25 + 2.25
        f.recompile()
        assert float(f(x).numpy()) == 4.5 ** 2 + 2.25
    finally:
        SHIFT[0] = 1.0


def writes_a_module_array(x):
    WEIGHTS[0, 0] = x
    return x


def reads_an_object_array(x):
    return x * OBJECTS[0]


def test_module_arrays_stay_read_only_and_numeric():
    line = line_of(writes_a_module_array, "WEIGHTS[0, 0] = x")
    with pytest.raises(TransformError, match=rf"writes_a_module_array .*line {line}\).*writing into something "
                                             r"other than a local array"):
        transform(writes_a_module_array, (F64,), (True,))
    line = line_of(reads_an_object_array, "OBJECTS[0]")
    with pytest.raises(TransformError, match=rf"reads_an_object_array .*line {line}\).*module-level array `OBJECTS` "
                                             r"of dtype object"):
        transform(reads_an_object_array, (F64,), (True,))


# ---- 3. strings as options -------------------------------------------------------------------------

def _penalty(x, norm):
    if norm == "2":
        return np.sqrt(np.sum(x * x))
    elif norm != "1":
        return np.max(np.abs(x))
    return np.sum(np.abs(x))


def regularised(x, lam, norm="2", method="linear"):
    """Options passed as strings choose a branch when compiling, as Numba's literal strings do."""
    if method == "linear":
        r = x * lam
    else:
        r = np.exp(x) * lam
    return np.sum(r) + _penalty(x, norm) + (1.0 if constants.NAME == method else 0.0)


@pytest.mark.parametrize("norm,method", [("2", "linear"), ("1", "linear"), ("inf", "exp")])
def test_string_options_are_constants_of_the_compile(norm, method):
    x = rng.normal(size=4)
    check_function(ad.function(regularised), (x, 0.3, norm, method), (0, 1))
    second_order_check(regularised, (x, 0.3, norm, method), (True, True, False, False))


def test_each_string_value_compiles_its_own_code():
    f = ad.function(regularised)
    x = np.array([1.0, -2.0, 3.0])
    assert float(f(x, 0.0, norm="1").numpy()) == 6.0 + 1.0
    assert float(f(x, 0.0).numpy()) == pytest.approx(math.sqrt(14.0) + 1.0)
    assert float(f(x, 0.0, "inf", "exp").numpy()) == 3.0
    sources = {f.source("primal", x, 0.0, norm) for norm in ("1", "2", "inf")}
    assert len(sources) == 3


# ---- 4. records, named tuples, tuples indexed by a variable ---------------------------------------

PARAMS = np.dtype([("x1", np.float64), ("x2", np.float64), ("n", np.int64)])


def runoff(rain, params):
    """A rainfall-runoff store with named parameters read from a record."""
    store = 0.5 * params["x1"]
    out = np.empty_like(rain)
    for t in range(rain.shape[0]):
        store = store + rain[t]
        q = store * store / (store + params["x1"]) * params["x2"]
        store = store - q
        out[t] = q
    return np.sum(out) * params["n"]


def runoff_of_table(rain, table):
    """Fields of the rows of a structured array."""
    s = 0.0
    for k in range(table.shape[0]):
        s += np.sum(rain * table[k]["x1"]) + table["x2"][k] * rain[k]
    return s * table[1]["n"]


def test_record_fields_are_read_by_name():
    table = np.array([(2.0, 0.3, 2), (1.0, 0.5, 1)], dtype=PARAMS)
    rain = rng.uniform(0.0, 2.0, 6)
    check_function(ad.function(runoff), (rain, table[0]), (0,))
    check_function(ad.function(runoff_of_table), (rain, table), (0,))


def spaced_field(x, params):
    return x * params["x 1"]


def ellipsis_as_value(x):
    e = ...
    return x


def test_fields_that_are_not_names_and_ellipsis_as_a_value_are_refused():
    record = numba.typeof(np.zeros(1, dtype=[("x 1", np.float64)])[0])
    line = line_of(spaced_field, 'params["x 1"]')
    with pytest.raises(TransformError, match=rf"spaced_field .*line {line}\).*the record field 'x 1'.*Hint: name "
                                             r"record fields as Python identifiers"):
        transform(spaced_field, (F64, record), (True, False))
    line = line_of(ellipsis_as_value, "e = ...")
    with pytest.raises(TransformError, match=rf"ellipsis_as_value .*line {line}\).*`...` outside an index"):
        transform(ellipsis_as_value, (F64,), (True,))


def distance(p, q, scale):
    """Named tuples as small records: fields read by name."""
    return math.hypot(p.x - q.x, p.y - q.y) * scale


def picked(x, k, weights):
    """A homogeneous tuple indexed by a variable: a local one (differentiated) and an argument."""
    t = (x * x, np.sin(x), 2.0 * x)
    s = 0.0
    for i in range(3):
        s += t[(i + k) % 3] * weights[i]
    return s + t[k]


def test_named_tuples_and_tuples_indexed_by_a_variable():
    check_function(ad.function(distance), (Point(1.0, 2.0), Point(-0.5, 0.25), 1.5), (2,))
    check(picked, (0.7, 1, (0.5, 1.5, -1.0)), (0,))


# ---- 5. complex intermediates ----------------------------------------------------------------------

def parts_of_floats(x):
    """`.real` / `.imag` of floats (and of a float array): the value and zero."""
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i].real * 2.0 + x[i].imag
    return s + np.sum(x.real * x.real) + np.sum(x.imag)


def complex_constant_part(x, n):
    """A complex value that no gradient flows through (computed from integers only)."""
    z = np.exp(1j * 2.0 * math.pi / n)
    w = np.conj(z) * (1.0 + 0.5j)
    return x * abs(z) + x * w.real + z.imag * w.imag


def phase(w):
    return abs(np.exp(1j * w) + 0.5)


def test_real_and_imag_of_floats():
    check(parts_of_floats, (rng.normal(size=4),), (0,))
    check_function(ad.function(complex_constant_part), (0.7, 5), (0,))


def test_a_gradient_through_a_complex_value_is_refused_naming_complex_numbers():
    line = line_of(phase, "np.exp(1j * w)")
    with pytest.raises(TransformError, match=rf"phase .*line {line}\).*makes a complex value from `w`.*not through "
                                             r"complex numbers.*Hint"):
        transform(phase, (F64,), (True,))
    assert ad.function(phase)(0.3).numpy() == pytest.approx(abs(np.exp(0.3j) + 0.5))


# ---- 6. NumPy functions ----------------------------------------------------------------------------

def nan_statistics(x):
    """Time-series statistics skipping missing values."""
    y = x.copy()
    y[1] = np.nan
    return (np.nanmean(y) + np.nansum(y * y) + np.nanmax(y) - np.nanmin(y) + np.nanstd(y) + np.nanvar(y)
            + np.nanmedian(y) + np.median(x))


def flipped(A, v):
    """Reversals, casts, copies: a convolution written with np.flip, an image mirrored."""
    k = np.flip(v)
    B = np.fliplr(A) * 2.0 + np.flipud(A)
    s = np.float64(np.sum(B.flatten() * np.mod(B.flatten(), 1.7))) + np.sum(k * v[::-1])
    return s + np.float32(v[0]) * 0.0 + np.sum((A * 2.0).astype(np.float64)) + np.fmod(v[1], 0.3)


def ellipsis_index(U, w):
    """`U[..., k]`: the last axis at k, whatever the rank, read and written."""
    V = U.copy()
    V[..., 0] = V[..., 1] * w
    return np.sum(V[..., 0] * U[..., 2]) + np.sum(V[0, ...])


def statistics(x):
    return (np.nanmean(x) + np.nansum(x * x) + np.nanmax(x) - np.nanmin(x) + np.nanstd(x) + np.nanvar(x)
            + np.nanmedian(x) * np.median(x))


@pytest.mark.parametrize("n", [5, 6])
def test_nan_reductions_and_median(n):
    """With a NaN (first order: its products are NaN, which second derivatives would carry) and without."""
    x = rng.permutation(np.linspace(-1.0, 2.0, n)) + rng.normal(scale=0.01, size=n)
    check(nan_statistics, (x,), (0,), second=False)
    check(statistics, (x,), (0,))


def written_as_others(A, v, idx):
    """NumPy functions srcad writes as others: ptp, ediff1d, take (an index array and one index), nancumsum
    (with a missing value), vstack of vectors and of matrices."""
    w = v.copy()
    w[2] = np.nan
    rows = np.vstack((v, v * 2.0, v[::-1]))
    blocks = np.vstack((A[:2], A[1:]))
    return (np.ptp(A) * np.ptp(v) + np.sum(np.ediff1d(A) ** 2) + np.sum(np.take(A, idx) * 1.5)
            + np.take(v, 1) + np.sum(np.nancumsum(w) * v) + np.sum(rows * rows[::-1]) + np.sum(blocks[1:] * blocks[:-1]))


def nan_product(v):
    w = v.copy()
    w[1] = np.nan
    return np.nanprod(w) * v[0]


def products(x):
    """np.prod, with a zero entry too: its second derivative is exact there (srcad.prod_slopes_times)."""
    y = x.copy()
    y[2] = 0.0
    return np.prod(x) * x[0] + np.prod(y) + np.prod(x[:3] ** 2)


def running_products(x, A):
    """np.cumprod (of a matrix: of its flattened entries) and np.nancumprod, a zero entry among them: the
    loop they are written as is exact there, at every order."""
    y = x.copy()
    y[1] = 0.0
    z = x.copy()
    z[3] = np.nan
    return np.sum(np.cumprod(x) * x) + np.sum(np.cumprod(y)) + np.sum(np.cumprod(A) ** 2) + np.sum(np.nancumprod(z))


def joined(v, w, A, B):
    """np.hstack of vectors, of matrices; np.column_stack of vectors and a matrix; np.dstack of
    vectors, matrices and a 3-d block."""
    h = np.hstack((v, w * 2.0, v[::-1]))
    hm = np.hstack((A, B * B))
    c = np.column_stack((v[:3], A, w[:3] * 2.0))
    d2 = np.dstack((A, B, A * B))
    d1 = np.dstack((v, w))
    d3 = np.dstack((d2, d2 * 2.0))
    weights = np.arange(h.size) * 0.1 + 1.0
    return (np.sum(h * weights * h) + np.sum(hm * hm[::-1]) + np.sum(c * c)
            + np.sum(d2 * d2[::-1]) + np.sum(d1 * d1) + np.sum(d3 * d3 * 0.5))


def convolved_and_vander(x, w, c):
    """np.convolve (full) and np.correlate (valid), a signal longer and shorter than its filter and as long;
    np.vander of its default size, of N columns, increasing."""
    smooth = np.convolve(x, w) + np.convolve(w, x) + np.sum(np.correlate(x, w) * np.correlate(w, x)) \
        + np.correlate(x, x * x)[0]
    fit = np.vander(x) @ np.vander(w, 5)[:x.size, :x.size].T
    return np.sum(smooth * smooth) + np.sum(fit * c) + np.sum(np.vander(w, N=3, increasing=True) ** 2)


def krons(x, y, A, B):
    """np.kron of vectors and of matrices (bilinear: a rule of its own)."""
    return np.sum(np.kron(x, y) ** 2 * np.arange(12.0)) + np.sum(np.kron(A, B) * np.kron(B, A)) + np.sum(np.kron(A, A))


_JOINS_X, _JOINS_A, _JOINS_V = rng.uniform(0.5, 1.5, 5), rng.normal(size=(3, 2)), rng.normal(size=4)
_JOINS = {
    "running_products": (running_products, (_JOINS_X, _JOINS_A), (0, 1)),
    "joined": (joined, (_JOINS_V, rng.normal(size=4), _JOINS_A, rng.normal(size=(3, 2))), (0, 1, 2, 3)),
    "convolved_and_vander": (convolved_and_vander, (_JOINS_X, rng.uniform(0.5, 1.5, 7), rng.normal(size=(5, 5))),
                             (0, 1)),
    "krons": (krons, (_JOINS_X[:3], _JOINS_V, _JOINS_A.T, rng.normal(size=(3, 2))), (0, 1, 2, 3)),
}


@pytest.mark.parametrize("name", list(_JOINS))
def test_running_products_joins_convolution_and_vandermonde(name):
    fn, args, active = _JOINS[name]
    check_function(ad.function(fn), args, active)
    second_order_check(fn, args, tuple(i in active for i in range(len(args))))
    np.testing.assert_allclose(ad.function(fn)(*args).numpy(), njit(fn)(*args), rtol=1e-12)


def interpolated(x, xp, fp):
    """np.interp at points inside, left of and right of the samples, as an array and one point at a time."""
    total = np.sum(np.interp(x, xp, fp) ** 2 * x)
    for i in range(x.size):
        total += np.interp(x[i] * 0.5, xp, fp * fp) * x[i]
    return total


def quantiles(a, q, qs):
    """np.percentile / np.quantile of a matrix at a number and at an array of them; their nan* forms over a
    vector holding a NaN."""
    v = a[0] * 1.0
    v[1] = np.nan
    return (np.percentile(a, q) + np.quantile(a, q / 100.0) * 2.0 + np.sum(np.percentile(a, qs) ** 2)
            + np.nanpercentile(v, q) * np.sum(np.nanquantile(v, qs / 100.0)))


def covariances(m, y, x):
    """np.cov of the rows of a matrix, of a vector with another, by columns, biased, with ddof; np.corrcoef."""
    c = np.cov(m) + np.cov(m, ddof=0) * 0.5
    pair = np.cov(x, y) + np.cov(np.transpose(m), rowvar=False, bias=True)[:2, :2]
    return (np.sum(c * c) + np.sum(pair * np.arange(4.0).reshape(2, 2)) + np.cov(x) * 0.1
            + np.sum(np.corrcoef(m) ** 3) + np.corrcoef(x, y)[0, 1])


def covariance_pair(m, x, y):
    return np.sum(np.cov(m) ** 2) + np.sum(np.cov(x, y, bias=True)) + np.corrcoef(x, y)[0, 1]


_XP = np.sort(rng.uniform(0.0, 1.0, 6))
_WRITTEN_IN_PYTHON = {
    "interp": (interpolated, (np.array([-0.3, 0.05, 0.31, 0.62, 0.9, 1.4]), _XP, rng.normal(size=6)), (0, 1, 2),
               interpolated),
    "quantiles": (quantiles, (rng.normal(size=(3, 5)), 37.0, np.array([12.0, 61.0, 88.0])), (0, 1, 2), quantiles),
    "cov": (covariances, (rng.normal(size=(3, 6)), rng.normal(size=6), rng.normal(size=6)), (0, 1, 2),
            covariance_pair),
}


@pytest.mark.parametrize("name", list(_WRITTEN_IN_PYTHON))
def test_interpolation_quantiles_and_covariances(name):
    """Written in Python as Numba computes them (`front/numpy_in_python.py`): differentiated in every argument
    (the sample points and the quantiles too), at second order (np.cov and np.corrcoef in fewer forms there:
    the second derivative of all of them at once is the slowest compile of the suite), the primal equal to
    Numba's."""
    fn, args, active, again = _WRITTEN_IN_PYTHON[name]
    check_function(ad.function(fn), args, active)
    second_order_check(again, args, tuple(i in active for i in range(len(args))))
    np.testing.assert_allclose(ad.function(fn)(*args).numpy(), njit(fn)(*args), rtol=1e-12)


def percentile_of(a, q):
    return np.percentile(a, q)


def interpolated_on(x, xp, fp):
    return np.interp(x, xp, fp)


def test_quantile_and_interpolation_errors_are_numbas():
    a = np.arange(5.0)
    with pytest.raises(ValueError, match=r"Percentiles must be in the range \[0, 100\]"):
        ad.function(percentile_of)(a, 101.0)
    with pytest.raises(ValueError, match=r"Percentiles must be in the range \[0, 100\]"):
        ad.function(percentile_of)(a, np.array([5.0, np.nan]))
    with pytest.raises(ValueError, match=r"array of sample points is empty"):
        ad.function(interpolated_on)(0.5, np.zeros(0), np.zeros(0))
    with pytest.raises(ValueError, match=r"fp and xp are not of the same size"):
        ad.function(interpolated_on)(0.5, np.arange(3.0), np.zeros(2))
    assert np.isnan(ad.function(percentile_of)(np.array([1.0, np.nan, 2.0]), 50.0).numpy())
    assert ad.function(percentile_of)(np.array([3.0]), 50.0).numpy() == 3.0
    single = np.linspace(0.0, 1.0, 5).astype(np.float32), np.array([0.0, 0.5, 1.0], np.float32), \
        np.array([1.0, 3.0, 2.0], np.float32)
    assert ad.function(interpolated_on)(*single).dtype == njit(interpolated_on)(*single).dtype == np.float64


def extrema_along_axes(A, v, T):
    """np.max / np.min along an axis (Numba has them over the whole array only): by keyword and by
    position, the last axis by -1, a vector's one axis (a number), a 3-d array's middle axis; a log-sum-exp
    by rows."""
    mx = np.max(A, axis=1)
    lse = np.sum(np.log(np.sum(np.exp(A - mx[:, None]), axis=1)) + mx)
    mn = np.min(A, 0)
    return (lse + np.sum(mn * mn) + np.max(v, axis=0) * np.min(v, axis=-1) + np.sum(np.amax(T, axis=1) ** 2)
            + np.sum(np.amin(T, axis=2) * np.max(T, axis=0)[:, 0]))


def test_extrema_along_an_axis():
    A, v, T = rng.normal(size=(4, 3)), rng.normal(size=5), rng.normal(size=(2, 3, 2))
    args = (A, v, T)
    check_function(ad.function(extrema_along_axes), args, (0, 1, 2))
    second_order_check(extrema_along_axes, args, (True, True, True))
    np.testing.assert_allclose(ad.function(extrema_along_axes)(*args).numpy(), extrema_along_axes(*args), rtol=1e-12)
    tied = A.copy()
    tied[1, 2] = tied[1, 0] = tied[1].max() + 1.0           # two maxima of row 1 share its adjoint
    g = ad.grad(lambda a: ad.function(extrema_along_axes)(a, v, T))(tied)
    assert g[1, 0] == g[1, 2]
    nans = A.copy()
    nans[0, 1] = np.nan                                      # NaN wins, as in NumPy
    assert np.isnan(ad.function(extrema_along_axes)(nans, v, T).numpy())
    with pytest.raises(ValueError, match="zero-size array to reduction operation maximum"):
        ad.function(extrema_along_axes)(np.zeros((2, 0)), v, T)


def test_functions_written_as_others():
    A = rng.normal(size=(3, 4))
    v = rng.uniform(0.5, 1.5, 4)
    args = (A, v, np.array([0, 5, 11, 5]))
    check(written_as_others, args, (0, 1))
    check(nan_product, (v,), (0,), second=False)
    second_order_check(nan_product, (v,), (True,))
    second_order_check(products, (v,), (True,))
    for fn, a in ((written_as_others, args), (nan_product, (v,))):
        np.testing.assert_allclose(ad.function(fn)(*a).numpy(), njit(fn)(*a), rtol=1e-12)


def flips(A, v):
    return np.sum(np.flip(v) * v) + np.sum(np.fliplr(A) * np.flipud(A)) + np.sum(np.mod(v, 0.7) * v)


def test_flips_casts_copies_and_ellipsis():
    A = rng.normal(size=(3, 4))
    v = rng.uniform(0.5, 1.5, 4)
    check(flipped, (A, v), (0, 1), second=False)
    check(flips, (A, v), (0, 1))
    check(ellipsis_index, (rng.normal(size=(2, 3, 4)), 0.7), (0, 1))


def test_runtime_helpers_are_exported_and_reserved():
    for name in ("frozen_array", "median_slopes"):
        assert name in EXPORTS and name in RESERVED


def eigenvectors(S):
    """Named like the runtime helper its code calls (`srcad.eigenvectors`, for np.linalg.eigh)."""
    return np.sum(np.abs(np.linalg.eigh(S)[1]))


def test_a_function_named_like_a_runtime_helper_it_calls():
    S = rng.normal(size=(3, 3))
    S = S + S.T
    check_function(ad.function(eigenvectors), (S,), (0,))


def linear_algebra(A, b):
    """A solve, a log-determinant, an inverse, as a Gaussian likelihood needs them."""
    x = np.linalg.solve(A, b)
    X = np.linalg.solve(A, np.outer(b, b))
    Ai = np.linalg.inv(A)
    return np.sum(x * x) + np.log(np.abs(np.linalg.det(A))) + np.sum(Ai[0] * b) + np.vdot(b, x) + np.trace(X)


def gaussian_process(K, y):
    """A Gaussian process's negative log-likelihood through the Cholesky factor of its kernel matrix (only
    the lower triangle of `K` is read, as NumPy and Numba read it)."""
    L = np.linalg.cholesky(K)
    alpha = np.linalg.solve(L, y)
    return 0.5 * np.sum(alpha * alpha) + np.sum(np.log(np.diag(L))) + np.sum(L * np.arange(9.0).reshape(3, 3))


def log_determinants_and_powers(A):
    """np.linalg.slogdet unpacked and indexed (a log-likelihood's normaliser), np.linalg.matrix_power of
    positive, negative, small and zero powers (Numba's products by squaring)."""
    sign, logdet = np.linalg.slogdet(A)
    return (sign * logdet + np.linalg.slogdet(A @ A.T)[1] + np.sum(np.linalg.matrix_power(A, 5))
            + np.sum(np.linalg.matrix_power(A, -2) ** 2) + np.trace(np.linalg.matrix_power(A, 3))
            + np.sum(np.linalg.matrix_power(A, 0)) + np.sum(np.linalg.matrix_power(A, 1) * A))


def spectra(S):
    """np.linalg.eigh (values and vectors, a vector's sign fixed) and np.linalg.eigvalsh of a symmetric matrix
    (its lower triangle, as NumPy and Numba read it)."""
    w, v = np.linalg.eigh(S)
    first = v[:, 0] * np.sign(v[0, 0])
    return np.sum(w * np.arange(4.0)) + np.sum(first * np.arange(4.0)) + np.sum(np.linalg.eigvalsh(S) ** 3)


def singular_values(A):
    """The singular values of np.linalg.svd (U and Vh unused) and np.linalg.cond (their ratio)."""
    u, s, vh = np.linalg.svd(A)
    return np.sum(s * np.arange(1.0, s.size + 1.0)) + np.sum(np.linalg.svd(A @ A.T)[1] ** 2) + np.linalg.cond(A)


def singular_vectors(A):
    return np.sum(np.linalg.svd(A)[0])


def gaussian_energy(A, b):
    return np.sum(np.linalg.solve(A, b) * b) + np.linalg.det(A) + np.sum(np.linalg.inv(A))


def differences_and_triangles(v, M):
    d = np.diff(v)
    T = np.tril(M) * 2.0 + np.triu(M, 1)
    return np.sum(d * d * v[1:]) + np.sum(T * T) + np.sum(np.atleast_2d(v[1:]) * np.atleast_1d(v[:-1]))


def elementwise_extras(x, n):
    return np.sum(np.sinc(x) * x + np.ldexp(x, n) + np.nextafter(x, 10.0) * x + np.asfortranarray(x) ** 2)


def test_solves_determinants_and_cholesky():
    A = rng.normal(size=(3, 3)) + 3.0 * np.eye(3)
    check(linear_algebra, (A, rng.normal(size=3)), (0, 1), second=False)
    check(gaussian_energy, (A, rng.normal(size=3)), (0, 1))
    B = rng.normal(size=(3, 3))
    check(gaussian_process, (B @ B.T + 3.0 * np.eye(3), rng.normal(size=3)), (0, 1))


def log_determinant_and_powers(A):
    return np.linalg.slogdet(A)[1] + np.sum(np.linalg.matrix_power(A, 3)) + np.sum(np.linalg.matrix_power(A, -1))


def test_log_determinants_and_matrix_powers():
    """At second order on fewer powers: that of every power at once is among the slowest compiles of the suite."""
    C = 0.15 * rng.normal(size=(3, 3)) + np.eye(3)     # far from singular: A ** -2 at a near-singular A defeats FD
    check_function(ad.function(log_determinants_and_powers), (C,), (0,))
    second_order_check(log_determinant_and_powers, (C,), (True,))
    np.testing.assert_allclose(ad.function(log_determinants_and_powers)(C).numpy(),
                               njit(log_determinants_and_powers)(C), rtol=1e-12)


def test_eigen_decomposition_of_a_symmetric_matrix():
    S = rng.normal(size=(4, 4))
    S = S + S.T
    check_function(ad.function(spectra), (S,), (0,))
    second_order_check(spectra, (S,), (True,))
    np.testing.assert_allclose(ad.function(spectra)(S).numpy(), njit(spectra)(S), rtol=1e-12)


def test_a_factorisation_the_second_order_adjoint_reads_in_several_statements_is_computed_once_each_way():
    """The gradient function of `spectra` reads eigh(S) in six statements; its adjoint (second order: the
    values are the test above's) factorised S in each of the statements differentiating them, between
    matrix products written into the adjoint's own arrays (`matmul_into`). Now once in the forward (its
    primal part names it `v`), and at most once in each adjoint (plain and guarded), which is handed what
    the forward made."""
    from srcad.compiler.derived import gradient_of

    S = np.eye(4)
    transformed = transform(spectra, (ARR2,), (True,))
    grad_fn = gradient_of(transformed, (ARR2, F64), (True, False))
    for kind, most in (("forward", 1), ("adjoint", 1), ("plain adjoint", 1)):
        code = [line for line in grad_fn.source(kind).splitlines() if not line.strip().startswith("#")]
        assert sum("eigenvectors(S)" in line for line in code) <= most, grad_fn.source(kind)
        assert sum("np.linalg.eigvalsh(S)" in line for line in code) <= 2 * most, grad_fn.source(kind)
    assert grad_fn.primal(S, 1.0)[0].shape == S.shape


def spectral_parts(S, W, b):
    """eigh's values and vectors, and a solve, each read by the adjoint's rules."""
    w, v = np.linalg.eigh(S)
    return np.sum(w * w) + np.sum(v * v * W) + np.sum(np.linalg.solve(S + 10.0 * np.eye(4), b) ** 2)


def test_the_adjoint_and_the_tangent_read_the_factorisations_the_forward_made():
    """The adjoint is handed w and v: its rules read them instead of factorising S again (it did twice);
    the tangent (forward mode, `ad.hvp`'s) factorises once, where it did in each statement."""
    from srcad.compiler.derived import tangent_of

    S = rng.normal(size=(4, 4))
    args = (S + S.T, rng.normal(size=(4, 4)), rng.normal(size=4))
    transformed = transform(spectral_parts, (ARR2, ARR2, ARR), (True, True, True))
    adjoint = [line for line in transformed.source("adjoint").splitlines() if not line.strip().startswith("#")]
    assert not any("eigenvectors(S)" in line or "eigvalsh(S)" in line for line in adjoint), transformed.source("adjoint")
    assert sum("np.linalg.solve(" in line for line in adjoint) == 1, transformed.source("adjoint")  # A^T's only
    tangent = [line for line in tangent_of(transformed).source.splitlines() if not line.strip().startswith("#")]
    assert sum("eigenvectors(S)" in line for line in tangent) == 1, tangent_of(transformed).source
    check_function(ad.function(spectral_parts), args, (0, 1, 2))
    f = ad.function(spectral_parts)
    V, h = rng.normal(size=(4, 4)), 1e-5

    def grad(s):
        return ad.grad(lambda x: f(x, *args[1:]))(s)
    fd = (grad(args[0] + h * V) - grad(args[0] - h * V)) / (2 * h)
    np.testing.assert_allclose(ad.hvp(lambda s: f(s, *args[1:]), args[0], V), fd, rtol=1e-5, atol=1e-6)


def test_singular_values_and_the_refusal_of_singular_vectors():
    for shape in ((3, 5), (5, 3), (4, 4)):
        M = rng.normal(size=shape)
        check_function(ad.function(singular_values), (M,), (0,))
        np.testing.assert_allclose(ad.function(singular_values)(M).numpy(), njit(singular_values)(M), rtol=1e-12)
    M = ad.Variable(rng.normal(size=(3, 3)))
    with pytest.raises(TransformError, match=r"no derivative rule for `srcad.left_singular_vectors` \(the derivatives "
                                             r"of singular vectors are not built; singular values are differentiated"):
        ad.grad(ad.function(singular_vectors))(M)
    with pytest.raises(TransformError, match=r"no derivative rule for `srcad.left_singular_vectors`"):
        with ad.GradientTape() as outer:                 # second order: the rule of s reads U and Vh
            with ad.GradientTape() as inner:
                value = ad.function(singular_values)(M)
            g = inner.gradient(value, M)
            total = np.sum(g * g)
        outer.gradient(total, M)


def test_differences_triangles_and_elementwise_extras():
    check(differences_and_triangles, (rng.normal(size=5), rng.normal(size=(3, 3))), (0, 1))
    check(elementwise_extras, (np.array([0.0, 0.3, -1.2, 2.5]), 2), (0,))


def orthogonal_factors(A, WQ, WR):
    """np.linalg.qr (reduced, as Numba's): Q and R, of a tall, a square or a wide matrix."""
    q, r = np.linalg.qr(A)
    return np.sum(q * WQ) + np.sum(np.sin(r) * WR)


def test_a_factorisation_in_a_rule_is_computed_once_per_adjoint():
    """QR's adjoint reads Q and R's square block many times, in its two statements for Q's and R's
    cotangents: it reads the q and r the forward made (`opt/shared.py`), and factorises A no more."""
    args = (rng.normal(size=(5, 3)), rng.normal(size=(5, 3)), rng.normal(size=(3, 3)))
    adjoint = ad.show_source(ad.function(orthogonal_factors), "adjoint", *args)
    assert adjoint.startswith("def orthogonal_factors_adjoint(A, WQ, WR, q, r,"), adjoint
    assert adjoint.count("qr_r(A)") == 0 and adjoint.count("qr_q(A)") == 0, adjoint


def least_squares_fit(A, b):
    """np.linalg.lstsq's solution and singular values (its rank a constant), and np.linalg.pinv."""
    x, residuals, rank, s = np.linalg.lstsq(A, b)
    return np.sum(x * x) + np.sum(s) * rank + np.sum(np.linalg.pinv(A) ** 2)


def pseudo_solution(A, b):
    """The solution of np.linalg.lstsq, and np.linalg.pinv, at second order too (the singular values' rule
    reads the singular vectors, which have none)."""
    return np.sum(np.linalg.lstsq(A, b)[0] ** 2) + np.sum(np.linalg.pinv(A) ** 2)


def fit_residuals(A, b):
    return np.sum(np.linalg.lstsq(A, b)[1])


def test_orthogonal_factors_least_squares_and_pseudo_inverses():
    for m, n in ((5, 3), (4, 4), (3, 5)):
        args = (rng.normal(size=(m, n)), rng.normal(size=(m, min(m, n))), rng.normal(size=(min(m, n), n)))
        check(orthogonal_factors, args, (0,), second=False)      # (second order once, below: same types)
        np.testing.assert_allclose(ad.function(orthogonal_factors)(*args).numpy(), njit(orthogonal_factors)(*args),
                                   rtol=1e-12)
    second_order_check(orthogonal_factors, args, (True, False, False))
    for A, b in ((rng.normal(size=(5, 3)), rng.normal(size=5)), (rng.normal(size=(5, 3)), rng.normal(size=(5, 2))),
                 (rng.normal(size=(3, 4)), rng.normal(size=3))):
        check(least_squares_fit, (A, b), (0, 1), second=False)
        np.testing.assert_allclose(ad.function(least_squares_fit)(A, b).numpy(), njit(least_squares_fit)(A, b),
                                   rtol=1e-12)
    second_order_check(pseudo_solution, (A, b), (True, True))
    line = line_of(fit_residuals, "np.linalg.lstsq")
    with pytest.raises(TransformError, match=rf"fit_residuals .*line {line}\).*`srcad.least_squares_residuals` \(the "
                                             r"residuals of np.linalg.lstsq are not differentiated; compute them from"):
        transform(fit_residuals, (ARR2, ARR), (True, False))


def general_eigen(A, W):
    """np.linalg.eig of a real matrix with real eigenvalues (as Numba requires), each eigenvector's sign fixed,
    and np.linalg.eigvals."""
    w, v = np.linalg.eig(A)
    v = v * np.sign(v[0])
    return np.sum(w * np.arange(4.0)) + np.sum(v * W) + np.sum(np.linalg.eigvals(A) ** 2)


def test_eigen_decomposition_of_a_general_matrix():
    A = np.diag([1.0, 3.0, 5.0, 7.0]) + 0.4 * rng.normal(size=(4, 4))
    W = rng.normal(size=(4, 4))
    check(general_eigen, (A, W), (0,))
    second_order_check(general_eigen, (A, W), (True, False))
    np.testing.assert_allclose(ad.function(general_eigen)(A, W).numpy(), njit(general_eigen)(A, W), rtol=1e-12)


def orbit_vectors(r, v, H):
    """np.cross as orbital mechanics uses it (angular momentum, eccentricity vector, node vector from a list
    literal), and of rows by one vector (broadcast)."""
    h = np.cross(r, v)
    e = np.cross(v, h) - r / np.sqrt(np.sum(r * r))
    n = np.cross([0.0, 0.0, 1.0], h)
    return h[2] + np.sum(e * e) + np.sum(n ** 2) + np.sum(np.sin(np.cross(H, r)))


def test_cross_products():
    args = (np.array([1.0, 2.0, 0.5]), np.array([-0.3, 0.4, 0.9]), rng.normal(size=(4, 3)))
    check(orbit_vectors, args, (0, 1, 2), second=False)
    second_order_check(orbit_vectors, args, (True, True, True))
    np.testing.assert_allclose(ad.function(orbit_vectors)(*args).numpy(), njit(orbit_vectors)(*args), rtol=1e-12)


def factorisations_in_any_dtype(A, B):
    """Every matrix function with a rule, on float32 arrays: the rules' identities and halves keep the dtype
    (Numba's `@` takes arrays of one dtype)."""
    w, V = np.linalg.eigh(A)
    b = np.ones(B.shape[0], dtype=B.dtype)
    return (np.sum(np.linalg.cholesky(A) ** 2) + np.sum(w * w) + np.sum(V * V * w) + np.sum(np.linalg.pinv(B) ** 2)
            + np.sum(np.linalg.lstsq(B, b)[0]) + np.sum(np.linalg.eigvals(A) ** 2) + np.sum(np.linalg.qr(B)[1] ** 2))


def test_float32_factorisations_are_differentiated_in_float32():
    """Against finite differences of the plain function in float64 (not srcad's float64 gradient, a second
    compile of every rule, each checked in float64 by the tests above)."""
    A = np.array([[2.0, 0.3, 0.1], [0.3, 1.5, -0.2], [0.1, -0.2, 1.1]])
    B = np.array([[2.0, 0.3], [0.1, 1.5], [0.4, -0.3]])
    f = ad.function(factorisations_in_any_dtype)
    expected = [finite_differences(lambda a: factorisations_in_any_dtype(*a), (A, B), i) for i in (0, 1)]
    got = ad.grad(f, (0, 1))(A.astype(np.float32), B.astype(np.float32))
    for e, g in zip(expected, got):
        assert np.asarray(g).dtype == np.float32
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-3, atol=1e-4)


def distinct(x):
    return np.sum(np.unique(x))


def noisy(mu):
    return np.random.normal(mu, 1.0)


def test_a_gradient_through_a_function_without_a_rule_names_why():
    line = line_of(distinct, "np.unique")
    with pytest.raises(TransformError, match=rf"distinct .*line {line}\).*no derivative rule for "
                                             r"`np.unique` \(its result is not a smooth function"):
        transform(distinct, (ARR,), (True,))
    line = line_of(noisy, "np.random.normal")
    with pytest.raises(TransformError, match=rf"noisy .*line {line}\).*`np.random.normal` \(a random draw; draw "
                                             r"standard noise"):
        transform(noisy, (F64,), (True,))


# Numba's supported NumPy functions (its "Supported NumPy features": reductions, other functions,
# constructors, linear algebra, ufuncs, array methods that srcad maps to functions, numpy.random)
NUMBA_NUMPY = """
    all any argmax argmin conj conjugate cumprod cumsum max mean min nonzero prod std take var argsort copy dot
    ravel reshape sort sum transpose kron outer trace vdot cross linalg.cholesky linalg.cond linalg.det linalg.eig
    linalg.eigh linalg.eigvals linalg.eigvalsh linalg.inv linalg.lstsq linalg.matrix_power linalg.matrix_rank
    linalg.norm linalg.pinv linalg.qr linalg.slogdet linalg.solve linalg.svd diff median nancumprod nancumsum
    nanmax nanmean nanmedian nanmin nanpercentile nanprod nanstd nansum nanvar percentile arange array asarray
    asfortranarray atleast_1d atleast_2d atleast_3d bincount column_stack concatenate convolve corrcoef correlate
    cov diag digitize dstack dtype ediff1d empty empty_like expand_dims eye fill_diagonal flip fliplr flipud full
    full_like histogram hstack identity interp linspace ones ones_like partition ptp roots round searchsorted sinc
    stack tri tril triu unique vander vstack where zeros zeros_like bool_ complex64 complex128 float32 float64
    int8 int16 int32 int64 intc intp uint8 uint16 uint32 uint64 uintc uintp iinfo finfo
    add subtract multiply divide logaddexp logaddexp2 true_divide floor_divide negative power remainder mod fmod
    abs absolute fabs rint sign exp exp2 log log2 log10 expm1 log1p sqrt square reciprocal sin cos tan arcsin
    arccos arctan arctan2 hypot sinh cosh tanh arcsinh arccosh arctanh deg2rad rad2deg degrees radians
    bitwise_and bitwise_or bitwise_xor bitwise_not invert left_shift right_shift greater greater_equal less
    less_equal not_equal equal logical_and logical_or logical_xor logical_not maximum minimum fmax fmin isfinite
    isinf isnan signbit copysign nextafter ldexp floor ceil trunc spacing
    random.rand random.randn random.random random.randint random.choice random.permutation random.shuffle
    random.beta random.binomial random.exponential random.gamma random.normal random.poisson random.uniform
""".split()


def _canonical(name):
    from srcad.compiler.front.parse import canonical_callable
    obj = np
    for part in name.split("."):
        obj = getattr(obj, part)
    return canonical_callable(obj) or "np." + name


def test_every_function_of_numbas_list_has_a_rule_or_a_reason():
    """Each is differentiated (a rule, or written as functions that have one), never carries a derivative
    (NONDIFF), or is refused with a reason when a gradient flows through it (NOT_DIFFERENTIATED): one decision
    each."""
    from srcad.compiler.ad.rules import ARRAY_RULES, ELEMENTWISE, JOINS, NONDIFF, NOT_DIFFERENTIATED
    from srcad.compiler.front.lower import WRITTEN_AS, WRITTEN_IN_PYTHON
    for name in NUMBA_NUMPY:
        fn = _canonical(name)
        decisions = [fn in ELEMENTWISE or fn in ARRAY_RULES or fn in JOINS or fn in WRITTEN_AS or fn in WRITTEN_IN_PYTHON,
                     fn in NONDIFF,
                     fn in NOT_DIFFERENTIATED]
        assert sum(decisions) == 1, (name, fn, decisions)


@pytest.mark.parametrize("fn,args", [
    (horner, (np.array([0.3, -0.2, 0.7, 1.1]),)),
    (_penalty, (np.array([1.0, -2.0, 0.5]), "inf")),
    (runoff, (np.array([0.5, 1.5, 0.0, 2.0]), np.array([(2.0, 0.3, 2)], dtype=PARAMS)[0])),
    (nan_statistics, (np.array([0.3, 1.2, -0.4, 2.2, 0.9]),)),
], ids=["module_array", "string_options", "record", "nan_functions"])
def test_the_primal_equals_numbas(fn, args):
    np.testing.assert_allclose(ad.function(fn)(*args).numpy(), njit(fn)(*args), rtol=1e-12)
