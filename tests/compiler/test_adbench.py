"""ADBench GMM and LSTM through ``@ad.function``: objective and full gradient
against the golden values in tests/data/adbench/golden (ADBench's
rho = |a-b| / max(1, |a|+|b|) < 1e-8)."""

import os

import numpy as np
import pytest

import adbench_models as M
import srcad as ad

RHO = 1e-8
GOLDEN = M.read_golden_objectives()

_compiled = {}


def compiled(fn):
    if fn not in _compiled:
        _compiled[fn] = ad.function(fn)
    return _compiled[fn]


def _assert_rho(got, expected, what):
    got = np.asarray(got, dtype=np.float64).ravel()
    expected = np.asarray(expected, dtype=np.float64).ravel()
    assert got.shape == expected.shape, "%s: %d values, golden has %d" % (what, got.size, expected.size)
    r = M.rho(got, expected)
    worst = int(np.argmax(r))
    assert r[worst] < RHO, "%s: rho %.3g at flat index %d: got %r, golden %r (%d of %d entries over)" % (
        what, r[worst], worst, got[worst], expected[worst], int(np.sum(r >= RHO)), r.size)


# -- the models themselves (no compiler needed) -------------------------------

@pytest.mark.parametrize("path", M.GMM_FILES[:1])
def test_gmm_python_objective(path):
    data = M.read_gmm(os.path.join(M.DATA_DIR, path))
    _assert_rho(M.gmm_objective(*M.gmm_args(data)), GOLDEN[path], path)
    _assert_rho(M.gmm_objective_numpy(*M.gmm_args(data)), GOLDEN[path], path + " (numpy)")


@pytest.mark.parametrize("path", M.GMM_FILES)
def test_gmm_numpy_objective(path):
    data = M.read_gmm(os.path.join(M.DATA_DIR, path))
    _assert_rho(M.gmm_objective_numpy(*M.gmm_args(data)), GOLDEN[path], path)


# -- compiled ------------------------------------------------------------------

@pytest.mark.parametrize("path", M.GMM_FILES)
def test_gmm_objective_and_gradient(path):
    data = M.read_gmm(os.path.join(M.DATA_DIR, path))
    f = compiled(M.gmm_objective)
    args = M.gmm_args(data)
    _assert_rho(f(*args).numpy(), GOLDEN[path], path + " objective (compiled, no tape)")

    alphas, means, icf = (ad.constant(a) for a in args[:3])
    with ad.GradientTape() as tape:
        tape.watch([alphas, means, icf])
        err = f(alphas, means, icf, *args[3:])
    _assert_rho(err.numpy(), GOLDEN[path], path + " objective (under tape)")
    grads = tape.gradient(err, [alphas, means, icf])
    for g, a, nm in zip(grads, args[:3], ("alphas", "means", "icf")):
        assert g is not None, "%s: gradient w.r.t. %s is None" % (path, nm)
        assert g.shape == a.shape, "%s: d/d%s has shape %s, expected %s" % (path, nm, g.shape, a.shape)
    J = np.concatenate([np.asarray(g.numpy()).ravel() for g in grads])
    golden = M.read_golden_gradient(M.golden_gradient_name(path))
    k, d = args[1].shape
    for nm, lo, hi in (("alphas", 0, k), ("means", k, k + k * d), ("icf", k + k * d, golden.size)):
        _assert_rho(J[lo:hi], golden[lo:hi], "%s gradient %s" % (path, nm))


@pytest.mark.parametrize("path", M.LSTM_FILES)
def test_lstm_objective_and_gradient(path):
    data = M.read_lstm(os.path.join(M.DATA_DIR, path))
    args = M.lstm_args(data)
    _assert_rho(M.lstm_objective(*args), GOLDEN[path], path + " objective (python)")
    f = compiled(M.lstm_objective)
    _assert_rho(f(*args).numpy(), GOLDEN[path], path + " objective (compiled, no tape)")
    state_before = args[2].copy()

    main, extra = ad.constant(args[0]), ad.constant(args[1])
    with ad.GradientTape() as tape:
        tape.watch([main, extra])
        loss = f(main, extra, args[2], args[3])
    _assert_rho(loss.numpy(), GOLDEN[path], path + " objective (under tape)")
    g_main, g_extra = tape.gradient(loss, [main, extra])
    assert g_main.shape == args[0].shape and g_extra.shape == args[1].shape
    golden = M.read_golden_gradient(M.golden_gradient_name(path))
    nm = args[0].size
    _assert_rho(np.asarray(g_main.numpy()).ravel(), golden[:nm], path + " gradient main_params")
    _assert_rho(np.asarray(g_extra.numpy()).ravel(), golden[nm:], path + " gradient extra_params")
    np.testing.assert_array_equal(args[2], state_before)   # the state input is not modified


def test_gmm_hessian_by_jacobians_of_the_gradient(monkeypatch):
    """ADBench GMM d2 K5 (30 parameters): the full Hessian, as jacobians of the compiled gradient over
    nested tapes, is symmetric to rounding and agrees with finite differences of the gradient. Its batches
    of rows run serially: the parallel twin of a batch compiles again for minutes here, and test_rows
    checks parallel batches against serial ones."""
    from srcad.compiler import rows
    monkeypatch.setattr(rows, "PAYS_SECONDS", float("inf"))
    path = "gmm/1k/gmm_d2_K5.txt"
    args = M.gmm_args(M.read_gmm(os.path.join(M.DATA_DIR, path)))
    f = compiled(M.gmm_objective)
    params = [np.asarray(a, dtype=np.float64) for a in args[:3]]
    sizes = [p.size for p in params]

    def gradient(flat):
        pieces = np.split(flat, np.cumsum(sizes)[:-1])
        vs = [ad.Variable(x.reshape(p.shape)) for x, p in zip(pieces, params)]
        with ad.GradientTape() as tape:
            err = f(*vs, *args[3:])
        return np.concatenate([np.asarray(g.numpy()).ravel() for g in tape.gradient(err, vs)])

    vs = [ad.Variable(p) for p in params]
    with ad.GradientTape(persistent=True) as outer:
        with ad.GradientTape() as inner:
            err = f(*vs, *args[3:])
        grads = inner.gradient(err, vs)
    H = np.block([[np.asarray(outer.jacobian(g, v).numpy()).reshape(gs, vsize)
                   for v, vsize in zip(vs, sizes)] for g, gs in zip(grads, sizes)])
    assert H.shape == (30, 30)
    scale = np.abs(H).max()
    np.testing.assert_allclose(H, H.T, rtol=1e-10, atol=1e-10 * scale)
    theta = np.concatenate([p.ravel() for p in params])
    h = 1e-5
    fd = np.stack([(gradient(theta + h * e) - gradient(theta - h * e)) / (2 * h) for e in np.eye(theta.size)], 1)
    np.testing.assert_allclose(H, fd, rtol=1e-5, atol=1e-6 * scale)
