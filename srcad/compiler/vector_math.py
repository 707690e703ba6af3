"""exp and tanh of float64 that LLVM vectorises: what compiled CPU code calls for `np.exp`, `math.exp`,
`np.tanh` and `math.tanh` of a float64 (`backends/numba_cpu.py`, `with_vector_math`).

Numba calls the C library's exp and tanh once per element: a loop calling them runs one element at
a time (tanh: 12.5 ns an element here), where XLA evaluates its own polynomial on whole vectors. The
functions below are arithmetic, selects and bit casts only, so that the loop vectoriser can widen a
loop calling them (tanh 1.9 ns, exp 1.5 ns against 4.3 ns, AVX-512 Xeon, `docs/design.md`).

* `vector_exp`: exp(x) = 2^k exp(r), k the nearest integer to x / ln 2, r = x - k ln 2 in two parts
  (Cody and Waite: k ln2_hi is exact), exp(r) - 1 by its Taylor polynomial to r^13 (|r| <= ln 2 / 2:
  the remainder is under 1e-17 of the result), 2^k from its bits in two factors so that a result
  near overflow, or below the normal range, rounds once. Within 1 ulp of the C
  library on a million arguments in each of [-1, 1], [-20, 20] and [-740, 709]; inf, nan, overflow
  and underflow as it.
* `vector_tanh`: tanh(x) = sign(x) m / (m + 2), m = expm1(2 |x|) computed as above without forming
  exp(r) (no cancellation near 0); 1 beyond |x| = 19.1, as the C library's. Within 3 ulp.
"""
import math

import numba
from numba.core import types as nt
from numba.extending import intrinsic

_LOG2E = 1.4426950408889634
_LN2_HI = 0.6931471803691238        # the upper 32 bits of ln 2: k * _LN2_HI is exact for |k| < 2^20
_LN2_LO = 1.9082149292705877e-10    # ln 2 - _LN2_HI
_ROUNDER = 6755399441055744.0       # 1.5 * 2^52: x + it - it rounds x to an integer, whose bits it leaves low
_TANH_ONE = 19.1                    # tanh is 1.0 to the last bit beyond (1 - 2 exp(-38.2) rounds to 1)
_TAYLOR = tuple(1.0 / math.factorial(n) for n in range(13, 1, -1))     # 1/13!, ..., 1/2!

# x / 0 gives inf without a branch to raise; called from compiled code only (as `runtime._helper`)
_kernel = numba.njit(cache=True, error_model="numpy", no_cpython_wrapper=True, no_cfunc_wrapper=True)


@intrinsic
def _bits(typingctx, x):
    """The bits of the float64 `x` as an int64."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(nt.int64))
    return nt.int64(nt.float64), codegen


@intrinsic
def _from_bits(typingctx, b):
    """The float64 whose bits are the int64 `b`."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(nt.float64))
    return nt.float64(nt.int64), codegen


@_kernel
def _expm1_reduced(r):
    """exp(r) - 1 for |r| <= ln 2 / 2."""
    p = 0.0
    for c in _TAYLOR:
        p = p * r + c
    return r + r * r * p


@_kernel
def _reduced(x):
    """(exp(r) - 1, a, b) with x = k ln 2 + r and a b = 2^k, x clamped to where exp over- or underflows:
    2^k in two factors, each a normal number, so that multiplying by one, then the other, rounds once."""
    x = min(max(x, -746.0), 710.0)
    shifted = x * _LOG2E + _ROUNDER
    kf = shifted - _ROUNDER
    k = _bits(shifted) - _bits(_ROUNDER)
    r = (x - kf * _LN2_HI) - kf * _LN2_LO
    half = k >> 1
    return _expm1_reduced(r), _from_bits((half + 1023) << 52), _from_bits((k - half + 1023) << 52)


@_kernel
def vector_exp(x):
    """exp(x) of a float64, vectorisable (module docstring)."""
    m, a, b = _reduced(x)
    y = (a + a * m) * b
    return x if x != x else y


@_kernel
def vector_tanh(x):
    """tanh(x) of a float64, vectorisable (module docstring)."""
    size = min(abs(x), _TANH_ONE)
    m, a, b = _reduced(2.0 * size)
    scale = a * b
    m = scale * m + (scale - 1.0)
    y = math.copysign(1.0 if size == _TANH_ONE else m / (m + 2.0), x)
    return x if x != x else y
