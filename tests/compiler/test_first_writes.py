"""An adjoint array's first accumulation writes it, and zeros nobody reads are not written
(`opt/first_writes.py`): checked on the code compiled (its source) and on the gradients, at first
order against finite differences and at second order through the IR kept, which keeps its
accumulations."""
import numba
import numpy as np

import srcad as ad
from srcad.compiler import transform
from srcad.compiler.ir.printer import function_text
from srcad.testing import check_function

from test_ir import second_order_check

rng = np.random.default_rng(31)
X = rng.uniform(-1.0, 1.0, (6, 3))
MEANS = rng.uniform(-1.0, 1.0, (4, 3))
W = rng.uniform(-1.0, 1.0, (3, 3))


def components(x, means, w):
    """A vectorised model's loop over components: per component an n-by-d temporary, a matrix product
    and a reduction over an axis, as the ADBench GMM is written the NumPy way."""
    total = 0.0
    for k in range(means.shape[0]):
        centred = x - means[k]
        projected = centred @ w
        total += np.sum(np.log(1.0 + np.sum(projected * projected, axis=1)))
    return total


def sometimes(x, w):
    """An adjoint array accumulated on some iterations only (a branch on the data) and read after the
    loop: its zeros are read where the branch was not taken, so they stay."""
    acc = np.zeros(x.shape[1])
    for i in range(x.shape[0]):
        row = x[i] @ w
        if x[i, 0] > 0.0:
            acc = acc + row * row
        else:
            acc = acc * 0.5
    return np.sum(acc * acc)


def partly(x, w):
    """An array added to whole after part of it was written: its adjoint is accumulated, not written."""
    y = x @ w
    y[0] = y[0] * 3.0
    z = np.sin(y) + y * y
    return np.sum(z * y)


def _adjoint_source(fn, args):
    t = transform(fn, tuple(numba.typeof(a) for a in args), (True,) * len(args))
    return t.source("adjoint"), function_text(t.ir.adjoint)


def test_first_accumulations_of_arrays_are_writes_and_unread_zeros_go():
    compiled, kept = _adjoint_source(components, (X, MEANS, W))
    assert "[:, :] = 0.0" not in compiled and "np.empty_like" in compiled
    assert "d_projected[:, :] = " in compiled and "d_projected += " not in compiled
    assert "d_projected += " in kept or "d_projected[:, :] += " in kept      # the IR kept is not rewritten


def test_the_gradient_of_a_loop_over_components_at_first_and_second_order():
    check_function(ad.function(components), (X, MEANS, W), (0, 1, 2))
    second_order_check(components, (X, MEANS, W), (True, True, True))


def test_zeros_read_on_a_path_that_adds_nothing_are_kept():
    x = X.copy()
    x[::2, 0] = -np.abs(x[::2, 0])          # the branch goes both ways
    x[1::2, 0] = np.abs(x[1::2, 0])
    check_function(ad.function(sometimes), (x, W), (0, 1))
    second_order_check(sometimes, (x, W), (True, True))


def test_an_array_written_in_part_is_still_added_into():
    check_function(ad.function(partly), (X, W), (0, 1))
    second_order_check(partly, (X, W), (True, True))
