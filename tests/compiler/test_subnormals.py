"""Adjoints run with subnormal numbers flushed to zero on x86 (`compiler/subnormals.py`); forwards, primals
and the caller's own arithmetic do not."""
import platform

import numba
import numpy as np
import pytest

import srcad as ad
from srcad.compiler.subnormals import _read_mxcsr, flushing_subnormals
from srcad.testing import check_function
from test_ir import second_order_check

X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
pytestmark = pytest.mark.skipif(not X86, reason="subnormals are flushed on x86 only (the SSE control register)")

FLUSH_BITS = 0x8040


@numba.njit
def mxcsr():
    return _read_mxcsr()


@numba.njit
def product(a, b):
    return a * b


def tail_mass(x, scale):
    """exp(-x) summed: at x = 720 a subnormal value, its cotangent as small."""
    total = 0.0
    for i in range(x.shape[0]):
        total += scale * np.exp(-x[i])
    return total


def test_the_context_flushes_inside_and_restores_the_register_after_a_raise():
    before = mxcsr()
    assert not before & FLUSH_BITS
    with flushing_subnormals:
        assert mxcsr() & FLUSH_BITS == FLUSH_BITS
        assert product(1e-300, 1e-10) == 0.0
        with flushing_subnormals:          # entered again: the outer setting comes back
            pass
        assert mxcsr() & FLUSH_BITS == FLUSH_BITS
    with pytest.raises(ValueError, match="inside"):
        with flushing_subnormals:
            raise ValueError("raised inside")
    assert mxcsr() & FLUSH_BITS == 0 and (mxcsr() & ~0x3F) == (before & ~0x3F)
    assert product(1e-300, 1e-10) == pytest.approx(1e-310, rel=1e-3)


def test_a_subnormal_gradient_is_zero_and_the_value_is_the_functions():
    f = ad.function(tail_mass)
    x = ad.constant(np.array([720.0, 1.0]))
    with ad.GradientTape() as tape:
        tape.watch(x)
        y = f(x, 1.0)
    g = tape.gradient(y, x).numpy()
    assert float(y.numpy()) == np.exp(-720.0) + np.exp(-1.0)        # the forward keeps its subnormal part
    assert g[0] == 0.0 and np.exp(-720.0) > 0.0                       # -exp(-720) is subnormal: flushed
    np.testing.assert_allclose(g[1], -np.exp(-1.0), rtol=1e-15)
    assert mxcsr() & FLUSH_BITS == 0                                  # the caller's thread as it was


def test_gradients_in_the_normal_range_are_unchanged():
    f = ad.function(tail_mass)
    x = np.array([0.5, 2.0, 700.0])             # exp(-700) = 9.9e-305: small, normal
    check_function(f, (x, 3.0), (0,))
    x_t = ad.constant(x)
    with ad.GradientTape() as tape:
        tape.watch(x_t)
        y = f(x_t, 3.0)
    np.testing.assert_array_equal(tape.gradient(y, x_t).numpy(), -3.0 * np.exp(-x))


def test_second_order_through_a_flushed_adjoint():
    """The gradient function compiled again (nested tapes) runs the adjoint's arithmetic in its forward and
    its own adjoint flushed: its Hessian-vector products against finite differences."""
    x = np.array([0.5, 2.0, 7.0])
    second_order_check(tail_mass, (x, 3.0), (True, True))
