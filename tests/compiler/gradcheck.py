"""Gradient checking for ``@ad.function``: compiled result vs Python, tape
gradient vs central finite differences of the *undecorated* function.

Tolerances (never loosen them to hide a wrong gradient):

* results of the compiled primal vs the plain Python function: rtol 1e-12
  (float64), 1e-5 (float32);
* float64 gradients: central differences with step 1e-6 (scaled by
  max(1, |x_i|)), ``assert_allclose(rtol=1e-5, atol=1e-7)``;
* float32 gradients: the differences are taken in float64 on inputs upcast to
  float64, ``rtol=1e-3``, ``atol=1e-4 * max(1, max|fd|)``; float32 gradients
  must come back as float32.

Outputs that are tuples and/or arrays are reduced with fixed random
cotangents ``w_k`` (passed to ``tape.gradient`` as ``output_gradients``): the
checked gradient is that of ``sum_k sum(w_k * out_k)``.
"""

import copy

import numpy as np

import srcad as ad

FD_STEP = 1e-6
RTOL64, ATOL64 = 1e-5, 1e-7
RTOL32, ATOL32_REL = 1e-3, 1e-4
RESULT_RTOL64, RESULT_RTOL32 = 1e-12, 1e-5

_decorated = {}


def decorated(case):
    """``ad.function(case.fn)``, once per function."""
    f = _decorated.get(case.fn)
    if f is None:
        f = _decorated[case.fn] = ad.function(case.fn)
    return f


# -- helpers -----------------------------------------------------------------

def _value(v):
    """A NumPy value from a Tensor / NumPy / Python value."""
    return np.asarray(v.numpy() if isinstance(v, ad.Tensor) else v)


def _outputs(out):
    return list(out) if isinstance(out, tuple) else [out]


def _is_float32(v):
    return np.asarray(v).dtype == np.float32


def _is_float(v):
    return np.issubdtype(np.asarray(v).dtype, np.floating)


def _upcast(v):
    """float32 -> float64 (arrays and scalars); anything else unchanged."""
    if isinstance(v, np.ndarray) and v.dtype == np.float32:
        return v.astype(np.float64)
    if isinstance(v, np.float32):
        return np.float64(v)
    return v


def fresh(args):
    return tuple(copy.deepcopy(a) for a in args)


def cotangents(outs, seed=1234):
    """Fixed random weights, one per output, shaped and typed like it."""
    rng = np.random.default_rng(seed)
    ws = []
    for o in outs:
        v = _value(o)
        dt = v.dtype if np.issubdtype(v.dtype, np.floating) else np.float64
        ws.append(rng.uniform(0.5, 1.5, v.shape).astype(dt))
    return ws


def scalarize(outs, ws):
    """sum_k sum(w_k * out_k) in float64."""
    total = 0.0
    for o, w in zip(outs, ws):
        total += float(np.sum(np.asarray(w, np.float64) * _value(o).astype(np.float64)))
    return total


def central_fd(phi, args, argnum, step=FD_STEP):
    """Central differences of ``phi(args)`` (a scalar, or a vector of scalars)
    w.r.t. ``args[argnum]`` (array or scalar), in float64; returns an array of
    the argument's shape (followed by phi's shape)."""
    base = np.asarray(args[argnum], dtype=np.float64)
    grad = np.zeros(base.shape + np.shape(phi(tuple(args))))
    is_array = isinstance(args[argnum], np.ndarray)
    for idx in np.ndindex(base.shape):
        h = step * max(1.0, abs(float(base[idx])))
        vals = []
        for sgn in (1.0, -1.0):
            pert = base.copy()
            pert[idx] += sgn * h
            a = list(args)
            a[argnum] = pert if is_array else float(pert[()])
            vals.append(phi(tuple(a)))
        grad[idx] = (vals[0] - vals[1]) / (2.0 * h)
    return grad


def richardson_fd(phi, args, argnum, step=1e-3):
    """A fourth-order stencil with a larger step (for validating FD itself)."""
    base = np.asarray(args[argnum], dtype=np.float64)
    grad = np.zeros(base.shape + np.shape(phi(tuple(args))))
    is_array = isinstance(args[argnum], np.ndarray)
    for idx in np.ndindex(base.shape):
        h = step * max(1.0, abs(float(base[idx])))
        vals = {}
        for k in (-2, -1, 1, 2):
            pert = base.copy()
            pert[idx] += k * h
            a = list(args)
            a[argnum] = pert if is_array else float(pert[()])
            vals[k] = phi(tuple(a))
        grad[idx] = (-vals[2] + 8 * vals[1] - 8 * vals[-1] + vals[-2]) / (12.0 * h)
    return grad


def assert_results_equal(got, expected, what="result"):
    g_outs, e_outs = _outputs(got), _outputs(expected)
    assert isinstance(got, tuple) == isinstance(expected, tuple), (
        "%s: compiled returned %s, Python returned %s" % (what, type(got).__name__,
                                                           type(expected).__name__))
    assert len(g_outs) == len(e_outs), "%s: %d outputs vs %d" % (what, len(g_outs), len(e_outs))
    for k, (g, e) in enumerate(zip(g_outs, e_outs)):
        gv, ev = _value(g), _value(e)
        assert gv.shape == ev.shape, "%s[%d]: shape %s, expected %s" % (what, k, gv.shape, ev.shape)
        rtol = RESULT_RTOL32 if (_is_float32(gv) or _is_float32(ev)) else RESULT_RTOL64
        scale = max(1.0, float(np.max(np.abs(ev.astype(np.float64)))) if ev.size else 1.0)
        np.testing.assert_allclose(gv.astype(np.float64), ev.astype(np.float64),
                                   rtol=rtol, atol=rtol * scale,
                                   err_msg="%s[%d]: compiled vs Python" % (what, k))


def tape_gradients(f, args, active, ws=None, use_variables=False):
    """Run ``f`` under a tape with ``args[i]`` (i in active) watched; return
    (outputs, [gradient of sum_k sum(w_k out_k) per active arg])."""
    targs = list(fresh(args))
    srcs = []
    for i in active:
        t = ad.Variable(targs[i]) if use_variables else ad.constant(targs[i])
        targs[i] = t
        srcs.append(t)
    with ad.GradientTape() as tape:
        if not use_variables:
            for s in srcs:
                tape.watch(s)
        out = f(*targs)
    outs = _outputs(out)
    for k, o in enumerate(outs):
        assert isinstance(o, ad.Tensor), "output %d is %s, not an ad.Tensor" % (k, type(o).__name__)
    if ws is None:
        ws = cotangents(outs)
    grads = tape.gradient(outs, srcs, output_gradients=[ad.constant(w) for w in ws])
    return out, ws, grads


def check_function_gradient(case, use_variables=False, f=None):
    """The whole check of one corpus case; raises AssertionError with the case
    name, argument, expected and actual values on any mismatch."""
    f = f if f is not None else decorated(case)
    name = case.name
    py = f.python_function
    assert py is case.fn or getattr(py, "__wrapped__", None) is case.fn, (
        "%s: python_function is not the undecorated function" % name)
    args = case.make_args()

    # 1. compiled primal outside a tape == plain Python
    got = f(*fresh(args))
    expected = py(*fresh(args))
    assert_results_equal(got, expected, "%s: result" % name)

    # 2. tape gradients
    out, ws, grads = tape_gradients(f, args, case.active, use_variables=use_variables)
    assert_results_equal(out, expected, "%s: result under tape" % name)

    # 3. finite differences of the undecorated function (float64)
    fd_fn = case.fd_fn
    base64 = tuple(_upcast(a) for a in fresh(args))

    def phi(a):
        a = fresh(a)
        o = fd_fn(base64, a) if fd_fn is not None else py(*a)
        return scalarize(_outputs(o), ws)

    for i, g in zip(case.active, grads):
        arg = args[i]
        where = "%s: d/d(arg %d)" % (name, i)
        assert _is_float(arg), "%s: active argument is not floating point" % where
        fd = central_fd(phi, base64, i)
        if g is None:
            assert np.all(np.abs(fd) <= ATOL64), (
                "%s: gradient is None but finite differences give %r" % (where, fd))
            continue
        assert isinstance(g, ad.Tensor), "%s: gradient is %s, not a Tensor" % (where, type(g).__name__)
        gv = np.asarray(g.numpy())
        assert gv.shape == np.shape(arg), "%s: gradient shape %s, argument shape %s" % (
            where, gv.shape, np.shape(arg))
        if _is_float32(arg):
            assert gv.dtype == np.float32, "%s: float32 argument got a %s gradient" % (where, gv.dtype)
            scale = max(1.0, float(np.max(np.abs(fd))) if fd.size else 1.0)
            np.testing.assert_allclose(gv.astype(np.float64), fd, rtol=RTOL32,
                                       atol=ATOL32_REL * scale,
                                       err_msg="%s (float32): tape gradient vs FD" % where)
        else:
            assert gv.dtype == np.float64, "%s: float64 argument got a %s gradient" % (where, gv.dtype)
            np.testing.assert_allclose(gv, fd, rtol=RTOL64, atol=ATOL64,
                                       err_msg="%s: tape gradient vs FD" % where)
    return grads


def validate_fd(case):
    """Check that central FD (step 1e-6) of the plain function is itself
    accurate enough for the tolerances above: compare with a 4th-order stencil.
    Returns the max mismatch relative to the tolerance (< 0.1 is comfortable).
    Needs no compiler."""
    args = case.make_args()
    base64 = tuple(_upcast(a) for a in fresh(args))
    out = case.fn(*fresh(args))
    ws = cotangents(_outputs(out))

    def phi(a):
        a = fresh(a)
        o = case.fd_fn(base64, a) if case.fd_fn is not None else case.fn(*a)
        return scalarize(_outputs(o), ws)

    worst = 0.0
    for i in case.active:
        a = central_fd(phi, base64, i)
        b = richardson_fd(phi, base64, i)
        tol = RTOL64 * np.abs(b) + ATOL64
        worst = max(worst, float(np.max(np.abs(a - b) / tol)))
    return worst
