"""A matrix product only summed over its rows is not made; its first factor is summed first
(`opt/summed_products.py`). Checked on the code compiled, and on the gradients: against finite
differences at first order and, through the IR kept, at second order. Compared also with the product
made and summed, which the compiled code keeps where the product is read elsewhere."""
import numba
import numpy as np

import srcad as ad
from srcad.compiler import transform
from srcad.compiler.ir.printer import function_text
from srcad.testing import check_function, tape_gradients

from test_ir import second_order_check

rng = np.random.default_rng(47)
X = rng.uniform(-1.0, 1.0, (9, 3))
MEANS = rng.uniform(-1.0, 1.0, (4, 3))
W = rng.uniform(-1.0, 1.0, (3, 5))


def centred_products(x, means, w):
    """Per component the points less its mean, times a matrix (the ADBench GMM the NumPy way)."""
    total = 0.0
    for k in range(means.shape[0]):
        projected = (x - means[k]) @ w
        total += np.sum(np.log(1.0 + np.sum(projected * projected, axis=1)))
    return total


def scaled_mean(x, means, w):
    """The mean scaled before it is taken from the points: the sum of the rows is added times a number."""
    total = 0.0
    for k in range(means.shape[0]):
        projected = (x - 0.5 * means[k]) @ w
        total += np.sum(np.tanh(projected))
    return total


def _sources(fn, args, active):
    t = transform(fn, tuple(numba.typeof(a) for a in args), active)
    return t.source("adjoint"), function_text(t.ir.adjoint)


def test_the_product_only_summed_is_not_made():
    compiled, kept = _sources(centred_products, (X, MEANS, W), (False, True, True))
    assert "row_sum" in compiled and "_summed = row_sum @ np.transpose(w)" in compiled
    assert compiled.count("matmul_into(") == 1         # d_w's GEMM
    assert "@ np.transpose(w)" in kept and "row_sum" not in kept     # the IR kept is not rewritten


def test_a_product_read_elsewhere_is_made():
    compiled, _ = _sources(centred_products, (X, MEANS, W), (True, True, True))     # d_x reads it too
    assert "row_sum" not in compiled and compiled.count("matmul_into(") == 2


def test_gradients_at_first_and_second_order():
    for fn in (centred_products, scaled_mean):
        check_function(ad.function(fn), (X, MEANS, W), (1, 2))
        second_order_check(fn, (X, MEANS, W), (False, True, True))


def test_the_gradient_agrees_with_the_product_made_and_summed():
    """The same sums in another order: equal to rounding (here within 1e-13 relative)."""
    for fn in (centred_products, scaled_mean):
        f = ad.function(fn)
        _, _, summed_first = tape_gradients(f, (X, MEANS, W), (1, 2))
        _, _, made = tape_gradients(f, (X, MEANS, W), (0, 1, 2))
        for a, b in zip(summed_first, made[1:]):
            np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-14)
