"""NumPy functions without a derivative rule of their own, written in Python as Numba computes them.

A call of one (`np.interp(x, xp, fp)`) is inlined like a user's helper
(`lower.WRITTEN_IN_PYTHON`), so it is differentiated through, in every
argument and at any order, by the rules of what it is made of. Each is written
for a scalar and an array alike where NumPy takes both (the same statements
type either way: `np.searchsorted`, `np.minimum` and indexing by the result
give a number for a number and an array for an array).
"""
import numpy as np


def interp(x, xp, fp):
    """np.interp: piecewise linear through (xp, fp), fp[0] left of xp[0] and fp[-1] right of xp[-1].
    The point is first clamped into [xp[0], xp[-1]] (so the slope in x is 0 outside); on the last
    point the segment is the point itself (slope 0: exactly fp[-1])."""
    n = xp.shape[0]
    if n == 0:
        raise ValueError("array of sample points is empty")
    if fp.shape[0] != n:
        raise ValueError("fp and xp are not of the same size.")
    xp = xp.astype(np.float64)            # (Numba's result is float64 whatever the inputs' dtypes)
    fp = fp.astype(np.float64)
    clamped = np.minimum(np.maximum(x, xp[0]), xp[n - 1])
    left = np.searchsorted(xp, clamped, side="right") - 1
    right = np.minimum(left + 1, n - 1)
    width = xp[right] - xp[left]
    slope = (fp[right] - fp[left]) / (width + (width == 0.0))
    return slope * (clamped - xp[left]) + fp[left]


def quantile(a, q):
    """np.quantile (Numba's "linear" method): see `_percentile_of_sorted`."""
    _check(q, 1.0, "Quantiles must be in the range [0, 1]")
    return _percentile_of_sorted(np.sort(np.ravel(a)), a.size, q * 100.0, False)


def nanquantile(a, q):
    """np.nanquantile: np.quantile of the values that are not NaN (NaN where there are none)."""
    _check(q, 1.0, "Quantiles must be in the range [0, 1]")
    return _percentile_of_sorted(np.sort(np.ravel(a)), a.size - np.sum(np.isnan(a)), q * 100.0, True)


def percentile(a, q):
    _check(q, 100.0, "Percentiles must be in the range [0, 100]")
    return _percentile_of_sorted(np.sort(np.ravel(a)), a.size, q, False)


def nanpercentile(a, q):
    _check(q, 100.0, "Percentiles must be in the range [0, 100]")
    return _percentile_of_sorted(np.sort(np.ravel(a)), a.size - np.sum(np.isnan(a)), q, True)


def _check(q, most, message):
    """q (a number or an array) in [0, most], none NaN, or the ValueError Numba raises."""
    qs = np.asarray(q)
    if not np.all((qs >= 0.0) & (qs <= most)):
        raise ValueError(message)


def _percentile_of_sorted(s, n, p, skip_nan):
    """The percentiles `p` (a number or an array of them) of the first `n` values of sorted `s` (the NaNs,
    sorted last, are past them where `skip_nan`), as Numba computes them: at rank 1 + (n - 1) p / 100,
    lower * (1 - m) + upper * m between the two sorted values around it; NaN where `s` holds a NaN
    (and NaNs are not skipped) or no value is left."""
    top = max(n - 1, 0)
    rank = 1.0 + top * (p / 100.0)
    ranks = np.arange(1, top + 2) * 1.0
    lower = np.minimum(np.searchsorted(ranks, rank, side="right") - 1, top)
    upper = np.minimum(lower + 1, top)
    m = rank - (lower + 1)
    found = s[lower] * (1.0 - m) + s[upper] * m
    if n == 0 or not skip_nan and np.isnan(s[s.size - 1]):
        found = found * np.nan
    return found


def cov(m, y=None, rowvar=True, bias=False, ddof=None):
    """np.cov: the covariance of the variables (rows of `m` and `y`, or columns where not `rowvar`);
    0-d for one variable given as a vector, as in Numba."""
    if y is None:
        return np.reshape(_covariance(_rows(m, rowvar), bias, ddof), _shape_alone(m, rowvar))
    return _covariance(np.concatenate((_rows(m, rowvar), _rows(y, rowvar)), axis=0), bias, ddof)


def corrcoef(x, y=None, rowvar=True):
    """np.corrcoef: the covariance scaled by the standard deviations, clipped to [-1, 1] as NumPy does."""
    if y is None:
        return np.reshape(_correlation(_covariance(_rows(x, rowvar), False, None)), _shape_alone(x, rowvar))
    return _correlation(_covariance(np.concatenate((_rows(x, rowvar), _rows(y, rowvar)), axis=0), False, None))


def _rows(m, rowvar):
    """The observations of `m` as a matrix, a row per variable."""
    x = np.atleast_2d(m)
    if not rowvar and x.shape[0] != 1:
        x = np.transpose(x)
    return x


def _covariance(x, bias, ddof):
    n = x.shape[1]
    if ddof is None:
        dof = n if bias else n - 1
    else:
        dof = n - ddof
    centred = x - np.expand_dims(np.sum(x, axis=1) / n, 1)
    return centred @ np.transpose(centred) / dof


def _correlation(c):
    spread = np.sqrt(np.diag(c))
    r = c / np.expand_dims(spread, 1) / np.expand_dims(spread, 0)
    return np.minimum(np.maximum(r, -1.0), 1.0)


def _shape_alone(m, rowvar):
    """(k, k) for the k variables of `m`; () for one given as a vector (the rank Numba's result has)."""
    if rowvar:
        return np.shape(m)[:-1] + np.shape(m)[:-1]
    return np.shape(m)[1:] + np.shape(m)[1:]


def matrix_power(a, n):
    """np.linalg.matrix_power: the products in Numba's order (by squaring), of the inverse where n < 0."""
    if a.shape[0] != a.shape[1]:
        raise ValueError("input must be a square array")
    base = np.ascontiguousarray(a * 1.0)
    if n < 0:
        base = np.ascontiguousarray(np.linalg.inv(a))
    power = abs(n)
    result = np.eye(a.shape[0]) * 1.0
    if power == 1:
        result = base * 1.0
    elif power == 2:
        result = base @ base
    elif power == 3:
        result = base @ base @ base
    elif power > 3:
        first = True
        square = base
        while power != 0:
            if power % 2 == 1:
                if first:
                    result = square * 1.0
                    first = False
                else:
                    result = result @ square
            square = square @ square
            power = power // 2
    return result


def condition_number(x):
    """np.linalg.cond (Numba's: in the 2-norm): the largest singular value over the smallest."""
    s = np.linalg.svd(x)[1]
    return s[0] / s[s.shape[0] - 1]
