"""Kernels nobody on the team wrote (tests/compiler/_foreign_kernels.py) through ``@ad.function``.

For every case (half of them by default, all with ``SRCAD_FULL_SWEEPS=1``): the compiled result equals
plain Python and the tape gradient of every active argument equals central finite differences
(``srcad.testing.check_function``).  Two checks keep
the corpus honest: every kernel compiles with ``numba.njit`` unchanged and agrees with Python
(opt-in, ``SRCAD_CORPUS_NUMBA=1``), and the finite differences are accurate at the chosen inputs
(no branch threshold, tie, pivot change or trip-count change within reach), so a failing
gradient check is the compiler's fault.
"""
import os

import numpy as np
import pytest

import srcad as ad
from srcad.testing import check_function, cotangents, fd_is_accurate, fresh, scalarize

import _foreign_kernels as K
import corpus

F32 = np.float32
rng = np.random.default_rng(20240611)


# ---- inputs -----------------------------------------------------------------------------------------

def u(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, shape)


def spd(n, shift=None):
    m = u(n, n)
    return m @ m.T + (n if shift is None else shift) * np.eye(n)


def diag_dominant(n, d=4.0):
    return u(n, n) + d * np.eye(n)


def normalized(*shape):
    v = rng.uniform(0.2, 1.0, shape)
    return v / np.sum(v, axis=-1, keepdims=True)


def away_from_integers(n, lo, hi):
    """Values in [lo, hi) whose fractional part lies in [0.15, 0.85]."""
    whole = rng.integers(int(lo), int(hi), n)
    return whole + rng.uniform(0.15, 0.85, n)


# ---- cases ------------------------------------------------------------------------------------------

class Case:
    """``fd_ref_step``: the step of the fourth-order reference that ``fd_is_accurate`` compares the
    differences with (default 1e-3, absolute for |x| < 1).  Cases with a time step dt ~ 0.01 among
    their active arguments, or a step-size controller, use 1e-4: a reference step of 1e-3 moves dt by
    10% and its own truncation error is then larger than the tolerance, without any kink."""

    def __init__(self, fn, args, active=None, suffix="", fd_ref_step=1e-3):
        self.fn = fn
        self.fd_ref_step = fd_ref_step
        self.args = tuple(args)
        if active is None:       # every floating-point argument
            active = [i for i, a in enumerate(self.args)
                      if np.issubdtype(np.asarray(a).dtype, np.floating)]
        self.active = tuple(active)
        self.name = fn.__name__ + ("-" + suffix if suffix else "")

    def make_args(self):
        return fresh(self.args)

    def __repr__(self):
        return f"Case({self.name}, active={self.active})"


CASES = []


def case(fn, *args, active=None, suffix="", fd_ref_step=1e-3):
    CASES.append(Case(fn, args, active, suffix, fd_ref_step))


# polybench-like
case(K.gemm, 1.5, 1.2, u(4, 5), u(4, 3), u(3, 5))
case(K.gemm_rows, 1.5, 1.2, u(4, 5), u(4, 3), u(3, 5))
case(K.two_mm, 1.5, 1.2, u(3, 4), u(4, 5), u(5, 3), u(3, 3))
case(K.syrk, 1.5, 1.2, u(4, 4), u(4, 3))
case(K.syr2k, 1.5, 1.2, u(4, 4), u(4, 3), u(4, 3))
case(K.trmm, 1.5, u(4, 4), u(4, 3))
case(K.symm, 1.5, 1.2, u(4, 3), u(4, 4), u(4, 3))
case(K.atax, u(4, 5), u(5))
case(K.bicg, u(4, 5), u(5), u(4))
case(K.mvt, u(4, 4), u(4), u(4), u(4), u(4))
case(K.gesummv, 1.5, 1.2, u(4, 4), u(4, 4), u(4))
case(K.gemver, 1.5, 1.2, u(4, 4), u(4), u(4), u(4), u(4), u(4), u(4))
case(K.doitgen, u(2, 3, 4), u(4, 4))
case(K.covariance, u(6, 4))
case(K.correlation, u(6, 4), suffix="spread")
_flat = u(6, 4)
_flat[:, 2] = 0.5 + 0.01 * u(6)          # std far below EPS_STD: the guard sets it to 1
case(K.correlation, _flat, suffix="flat_column")
case(K.cholesky, spd(4))
case(K.lu, diag_dominant(4))
case(K.ludcmp, diag_dominant(5), u(5))
case(K.trisolv, diag_dominant(5, 3.0), u(5))
case(K.durbin, rng.uniform(0.05, 0.3, 6) * np.array([1, -1, 1, 1, -1, 1]))
case(K.gramschmidt, u(5, 3))
case(K.jacobi_1d, u(10), 3, suffix="f64")
case(K.jacobi_1d, u(10).astype(F32), 3, suffix="f32")
case(K.jacobi_2d, u(5, 5), 2)
case(K.seidel_2d, u(5, 5), 2)
case(K.heat_3d, u(4, 4, 4), 2)
case(K.fdtd_2d, u(4, 5), u(4, 5), u(4, 5), u(3))
case(K.adi, u(5, 5), 0.01, 2, fd_ref_step=1e-4)

# textbook methods
case(K.thomas, u(6), rng.uniform(3.0, 4.0, 6), u(6), u(6))
case(K.cubic_spline, np.cumsum(rng.uniform(0.5, 1.0, 6)), u(6))
case(K.simpson, np.array([1.2, 0.7, 1.5]), 0.1, 2.0, suffix="default_n")
case(K.simpson, np.array([0.8, 1.1, 2.5]), -0.5, 1.5, 8, suffix="n8")
case(K.trapezoid, u(8), np.cumsum(rng.uniform(0.2, 0.6, 8)))
case(K.cumtrapz, u(8).astype(F32), F32(0.1))
case(K.rk4_lorenz, np.array([1.0, 1.2, 0.9]), 10.0, 28.0, 8.0 / 3.0, 0.01, 20, fd_ref_step=1e-4)
case(K.adaptive_heun, 1.0, 0.0, 2.0, 0.3, 2.0, suffix="default_tol", fd_ref_step=1e-4)
case(K.adaptive_heun, 0.5, 0.4, 1.5, 0.1, 1.7, 1e-3, active=(0, 1, 2, 3, 4), suffix="tol1e-3")
case(K.kepler_newton, np.array([0.3, 1.0, 2.0, 2.8]), 0.3, suffix="e0.3")
case(K.kepler_newton, np.array([0.3, 1.0, 2.0, 2.8]), 0.9, suffix="e0.9_start_at_pi")
case(K.horner, u(5), u(6))
case(K.clenshaw, u(6), rng.uniform(-0.9, 0.9, 5))
case(K.gauss_seidel, diag_dominant(5), u(5))
_q, _ = np.linalg.qr(u(4, 4))
case(K.power_iteration, _q @ np.diag([5.0, 2.0, 1.0, 0.5]) @ _q.T, 30)
case(K.householder_qr, u(5, 3))
case(K.givens_qr, u(5, 3))
_rp = np.random.default_rng(0)                 # three row swaps, pivots chosen by clear margins
case(K.lu_solve_pivot, _rp.uniform(-1, 1, (5, 5)), _rp.uniform(-1, 1, 5))
case(K.damped_jacobi, diag_dominant(5), u(5), 0.8, 6)
case(K.conjugate_gradient, spd(5), u(5))
case(K.expm_taylor, 0.5 * u(3, 3), suffix="scaled")
case(K.expm_taylor, 0.05 * u(3, 3), suffix="unscaled")
case(K.taylor_exp, rng.uniform(-2.0, 3.0, 5))
case(K.welford, u(7))

# Numba-benchmark-like
case(K.nbody, u(5, 3), rng.uniform(0.5, 1.5, 5))
_S, _Kp, _T = rng.uniform(80, 120, 4), rng.uniform(90, 110, 4), rng.uniform(0.5, 2.0, 4)
case(K.black_scholes, _S, _Kp, _T, 0.03, 0.25)
case(K.black_scholes_vec, _S, _Kp, _T, 0.03, 0.25)
case(K.mc_asian, 100.0, 0.05, 0.2, 1.0, 100.0, rng.standard_normal((8, 6)))
case(K.mc_european_vec, 100.0, 0.05, 0.2, 1.0, 95.0, rng.standard_normal((16, 5)))
_u0 = np.zeros((6, 6))
_u0[0, :], _u0[-1, :], _u0[:, 0], _u0[:, -1] = u(6), u(6), u(6), u(6)
case(K.laplace_jacobi, _u0)
case(K.soft_kmeans, u(8, 2), u(3, 2), 2.0, 3)
case(K.pairwise_dist, u(5, 3))
case(K.pairwise_loops, u(4, 3), u(5, 3), suffix="f64")
case(K.pairwise_loops, u(4, 3).astype(F32), u(5, 3).astype(F32), suffix="f32")
case(K.rolling_mean, u(10), 3)
case(K.ewma, u(8), 0.3)
case(K.logreg_loss, u(3), 0.1, u(8, 3), np.where(u(8) > 0, 1.0, -1.0), 0.1, active=(0, 1, 2, 4))
case(K.logreg_train, u(3), u(8, 3), np.where(u(8) > 0, 1.0, 0.0), 0.5, 5, active=(0, 1, 3))
case(K.softmax_xent, 2.0 * u(5, 4), rng.integers(0, 4, 5))
case(K.conv1d, u(10), u(3))
case(K.conv2d, u(5, 6), u(3, 3), suffix="f64")
case(K.conv2d, u(5, 6).astype(F32), u(3, 3).astype(F32), suffix="f32")
case(K.biquad, u(12), 0.2, 0.3, 0.1, -0.5, 0.2)
case(K.dft_power, u(8))
case(K.goertzel, np.sin(2 * np.pi * 3.0 * np.arange(16) / 16.0) + 0.1 * u(16), 3.2, 16.0)

# physics
case(K.spring_chain, 1.1 * np.arange(5) + 0.05 * u(5), 0.1 * u(5), 2.0, 1.0, 0.05, 10)
case(K.wave_1d, np.sin(np.pi * np.linspace(0, 1, 10)) ** 2, 1.0, 0.05, 0.1, 6)
_pos = np.array([[0.0, 0.0], [0.45, 0.1], [0.2, 0.8], [1.3, 0.3], [0.9, 1.0], [1.6, 1.4]])
case(K.sph_density, _pos, rng.uniform(0.5, 1.5, 6), 0.6)
case(K.pendulum_rk4, 0.8, 0.1, 1.2, 0.05, 20)
_grid = np.array([[x, y] for x in range(3) for y in range(2)], dtype=float) * 1.2
case(K.lj_energy, _grid + 0.05 * u(6, 2), 1.0, 1.0)
case(K.sir, 0.3, 0.1, 30, suffix="defaults")
case(K.sir, 0.3, 0.1, 30, 0.95, 0.05, 0.13, active=(0, 1, 3, 4), suffix="explicit")   # int(days/dt) jumps in dt

# ML
case(K.mlp_loops, u(6, 3), u(3, 4), u(4), u(4), 0.1, u(6))
case(K.lstm_seq, u(4, 3), 0.5 * u(2), 0.5 * u(2), u(8, 3), u(8, 2), u(8))
case(K.attention, u(4, 3), u(5, 3), u(5, 2))
case(K.batch_norm, u(6, 3), u(3), u(3), suffix="f64")
case(K.batch_norm, u(6, 3).astype(F32), u(3).astype(F32), u(3).astype(F32), suffix="f32")
case(K.layer_norm, u(4, 5), u(5), u(5))
case(K.sinkhorn, rng.uniform(0, 1, (4, 5)), normalized(4), normalized(5), 0.5, 10)
case(K.adam_quadratic, u(3), spd(3), 0.05, 6)

# dynamic programming, sorting, filtering, statistics
_W = rng.uniform(1.0, 3.0, (5, 5))
np.fill_diagonal(_W, rng.uniform(5.0, 6.0, 5))
case(K.floyd_warshall, _W)
case(K.dtw, u(6), u(5))
case(K.bubble_sort_weighted, u(6), u(6), suffix="shuffled")
case(K.bubble_sort_weighted, np.sort(u(6)), u(6), suffix="sorted_breaks_at_once")
case(K.insertion_sort, u(7))
case(K.binomial_put, 100.0, 105.0, 0.03, 0.2, 1.0, 8)
case(K.hmm_forward, np.log(normalized(3)), np.log(normalized(3, 3)), np.log(normalized(3, 4)),
     rng.integers(0, 4, 6))
case(K.kalman_1d, u(8), 0.1, 0.5, suffix="defaults")
case(K.kalman_1d, u(8), 0.1, 0.5, 0.3, 2.0, suffix="explicit")
case(K.tv_energy, u(5, 5), u(5, 5), 0.3)
case(K.bilinear, u(5, 5), away_from_integers(6, 0, 4), away_from_integers(6, 0, 4))
case(K.expanding_zscore, u(8))
case(K.gp_nll, np.sort(rng.uniform(0, 5, 6)), u(6), 1.0, 1.0, 0.1)
case(K.polyfit_normal, u(8), u(8), 2)
case(K.value_iteration, u(4, 2), normalized(4, 2, 4), 0.5)
_price = K._bs_call_vega(100.0, 105.0, 1.0, 0.02, 0.25)[0]
case(K.implied_vol, _price, 100.0, 105.0, 1.0, 0.02)
case(K.saxpy_f32, F32(1.5), u(6).astype(F32), u(6).astype(F32))

# second batch: particles
case(K.sph_cell_list, rng.uniform(0.05, 1.95, (12, 2)), rng.uniform(0.5, 1.5, 12), 0.45, 2.0)
case(K.particle_filter, rng.standard_normal(20), np.array([0.3, -0.2, 0.5, 0.1]),
     0.3 * rng.standard_normal((4, 20)), rng.uniform(0.05, 0.95, 4), 0.7, fd_ref_step=1e-4)

# second batch: filtering and dynamic programming
case(K.kalman_cv, np.cumsum(0.1 * u(6, 2), axis=0), 0.1, 0.5, 0.1, fd_ref_step=1e-4)
case(K.viterbi, np.log(normalized(3)), np.log(normalized(3, 3)), np.log(normalized(3, 4)),
     rng.integers(0, 4, 6))
case(K.soft_dtw, u(6), u(5), 0.5)
case(K.smith_waterman, u(6), u(5), 0.3, 0.5)
case(K.american_put, 97.3, 100.0, 0.05, 0.25, 1.0, 8)

# second batch: linear algebra
case(K.cholesky_row_solve, spd(4), u(4))
case(K.givens_helper_qr, u(5, 3))
case(K.householder_apply, u(4), u(4, 3))
case(K.cg_early_return, spd(5), u(5))
_tt = np.linspace(0, 3, 10)
case(K.levenberg_marquardt, np.array([1.5, 0.8, 0.2]), _tt, 2.0 * np.exp(-1.2 * _tt) + 0.1 + 0.02 * u(10),
     0.1, 4)
case(K.haar, u(8))

# second batch: PDE smoothers and ODE integrators
case(K.sor_redblack, u(6, 6), 0.2, 1.3, 3)
case(K.two_grid, u(17), suffix="defaults")
case(K.two_grid, u(17), 1, 1, suffix="explicit")
case(K.rkf45, 1.0, 1.5, 2.0, 2.0, fd_ref_step=1e-4)
case(K.pendula_tuple, 0.5 * u(4), 0.2 * u(4), 1.3, 0.1, 6)

# second batch: optimisation
case(K.armijo_gd, u(4), spd(4), u(4), 3)
case(K.sgd_logreg, u(3), 0.1, u(6, 3), np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.0]),
     np.stack([rng.permutation(6), rng.permutation(6)]).astype(np.int64), 0.5, 0.01)
case(K.newton_cbrt, rng.uniform(0.2, 5.0, 5))

# second batch: ML and statistics
case(K.causal_attention, u(4, 3), u(4, 3), u(4, 2))
case(K.layer_norm_rows, u(4, 5).astype(F32), u(5).astype(F32), u(5).astype(F32))
case(K.im2col_conv, u(5, 5), u(3, 3))
case(K.warp_bilinear, u(5, 6), away_from_integers(6, 0, 3), away_from_integers(6, 0, 4))
case(K.em_gmm1d, np.concatenate([rng.normal(-1, 0.5, 6), rng.normal(1, 0.6, 6)]), np.array([-0.8, 0.9]),
     np.array([0.5, 0.7]), np.array([0.4, 0.6]))
case(K.smoothed_xent, 2.0 * u(6, 4), np.array([0, -1, 3, 2, -1, 1], dtype=np.int64))
case(K.weighted_moments, u(6), suffix="default_none")
case(K.weighted_moments, u(6), None, suffix="explicit_none")
case(K.weighted_moments, u(6), rng.uniform(0.5, 1.5, 6), suffix="weighted")

IDS = [c.name for c in CASES]

_decorated = {}


def decorated(fn):
    """One ad.function per kernel, shared by its cases."""
    if fn not in _decorated:
        _decorated[fn] = ad.function(fn)
    return _decorated[fn]


_twins = {}


def njit_twin(fn):
    if not _twins:
        _twins.update(K.njit_twins())
    return _twins[fn.__name__]


def _upcast(v):
    if isinstance(v, np.ndarray) and v.dtype == np.float32:
        return v.astype(np.float64)
    return np.float64(v) if isinstance(v, np.float32) else v


def _outs(o):
    return list(o) if isinstance(o, tuple) else [o]


# ---- tests ------------------------------------------------------------------------------------------

def test_corpus_covers_every_kernel():
    kernels = K.kernels()
    assert len(kernels) >= 60
    assert len(IDS) == len(set(IDS))
    covered = {c.fn.__name__ for c in CASES}
    assert covered == set(kernels), f"kernels without a case: {sorted(set(kernels) - covered)}"
    for c in CASES:
        assert c.active, f"{c.name}: nothing differentiated"
        for i in c.active:
            assert np.issubdtype(np.asarray(c.args[i]).dtype, np.floating), f"{c.name}: arg {i} is not float"


@pytest.mark.skipif(not os.environ.get("SRCAD_CORPUS_NUMBA"),
                    reason="set SRCAD_CORPUS_NUMBA=1: njit-compiles every kernel (~50 s); the gradient test "
                           "compiles each primal through srcad and compares it with Python anyway")
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_numba_njit_agrees_with_python(case):
    """The kernel is valid Numba code: numba.njit compiles it unchanged and gets Python's result."""
    expected = case.fn(*case.make_args())
    got = njit_twin(case.fn)(*case.make_args())
    assert isinstance(got, tuple) == isinstance(expected, tuple)
    for g, e in zip(_outs(got), _outs(expected)):
        g, e = np.asarray(g, np.float64), np.asarray(e, np.float64)
        assert g.shape == e.shape
        f32 = any(np.asarray(a).dtype == np.float32 for a in case.args)
        rtol = 1e-4 if f32 else 1e-9
        scale = max(1.0, float(np.max(np.abs(e)))) if e.size else 1.0
        np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol * scale)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_finite_differences_are_accurate(case):
    """No kink within reach of the finite differences at the chosen inputs."""
    args = tuple(_upcast(a) for a in case.make_args())
    ws = cotangents(_outs(case.fn(*fresh(args))))

    def phi(a):
        return scalarize(_outs(case.fn(*fresh(a))), ws)
    assert fd_is_accurate(phi, args, case.active, step=case.fd_ref_step)


@pytest.mark.parametrize("case", corpus.sweep(CASES, every=2), ids=corpus.sweep(IDS, every=2))
def test_gradient_matches_finite_differences(case):
    """Half the kernels by default (each compiles its primal, forward and adjoint; the suite must stay short
    on two cores), all with SRCAD_FULL_SWEEPS=1; the save-size sweep compiles others of them."""
    check_function(decorated(case.fn), case.make_args(), case.active, name=case.name)
