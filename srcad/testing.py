"""Gradient checks against finite differences: srcad's one checker.

Two questions, asked the same way for the eager tape and for compiled code:

* ``check_grads(fn, *args, order=2)`` (autograd's check): for a random
  cotangent ``u`` and random directions ``v_i``, ``sum_i <vjp_i(u), v_i>``
  must equal the finite difference ``<u, (f(x + eps v) - f(x - eps v)) / 2 eps>``;
  at order 2 the same check runs on ``x -> vjp(x, u)``, differentiated with
  nested tapes, so the VJP rules' own VJPs are checked too.
  ``check_batch_vjp`` checks that one backward sweep with a batch of
  cotangents (what ``jacobian`` does) equals the stacked single sweeps.
* ``check_function(f, args, active)`` for an ``@ad.function``: its compiled
  result equals the plain Python function's, and its tape gradient of every
  active argument equals central finite differences of the plain function,
  element by element. Outputs that are tuples or arrays are reduced with
  fixed random cotangents. Tolerances: results rtol 1e-12 (float64) / 1e-5
  (float32); float64 gradients rtol 1e-5, atol 1e-7; float32 gradients rtol
  1e-3 against differences taken in float64 (never loosen them to hide a
  wrong gradient).

``finite_differences(phi, args, argnum)`` (second or fourth order) serves both,
and ``fd_is_accurate`` rejects inputs within reach of a kink before they make a
check fail for the wrong reason.
"""
import copy

import numpy as np

import srcad as ad

from .tensor import Tensor

EPS = 1e-6
RTOL, ATOL = 1e-5, 1e-6
FD_STEP = 1e-6
RTOL64, ATOL64 = 1e-5, 1e-7
RTOL32, ATOL32_REL = 1e-3, 1e-4
RESULT_RTOL64, RESULT_RTOL32 = 1e-12, 1e-5

__all__ = ["check_grads", "check_vjp", "check_batch_vjp", "check_function", "finite_differences",
           "fd_is_accurate", "fd_jacobian", "nested_derivatives", "record", "cotangents", "scalarize",
           "fresh", "value_of"]


# -- values -------------------------------------------------------------------------------------------

def value_of(v):
    """A NumPy value from a Tensor, NumPy or Python value."""
    return np.asarray(v.numpy() if isinstance(v, Tensor) else v)


def _outputs(out):
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _values(result):
    return [np.asarray(value_of(r), dtype=np.float64) for r in _outputs(result)]


def fresh(args):
    """Deep copies, so that a function writing into its arguments cannot change the next call's."""
    return tuple(copy.deepcopy(a) for a in args)


def _upcast(v):
    if isinstance(v, np.ndarray) and v.dtype == np.float32:
        return v.astype(np.float64)
    if isinstance(v, np.float32):
        return np.float64(v)
    return v


def cotangents(outs, seed=1234):
    """Fixed random weights, one per output, shaped and typed like it."""
    rng = np.random.default_rng(seed)
    ws = []
    for o in outs:
        if o is None:          # an output that is None (a compiled function may return one) has none
            ws.append(None)
            continue
        v = value_of(o)
        dt = v.dtype if np.issubdtype(v.dtype, np.floating) else np.float64
        ws.append(rng.uniform(0.5, 1.5, v.shape).astype(dt))
    return ws


def scalarize(outs, ws):
    """sum_k sum(w_k * out_k), in float64."""
    return sum(float(np.sum(np.asarray(w, np.float64) * value_of(o).astype(np.float64)))
               for o, w in zip(outs, ws) if o is not None and w is not None)


# -- finite differences ----------------------------------------------------------------------------------

_STENCILS = {2: ((1, 0.5), (-1, -0.5)), 4: ((2, -1 / 12), (1, 8 / 12), (-1, -8 / 12), (-2, 1 / 12))}


def finite_differences(phi, args, argnum, step=FD_STEP, order=2):
    """Central differences (``order`` 2 or 4) of ``phi(args)`` (a scalar or a vector of scalars)
    with respect to ``args[argnum]``, in float64: an array of the argument's shape, followed by
    phi's shape. The step is scaled by max(1, |x_i|)."""
    base = np.asarray(args[argnum], dtype=np.float64)
    grad = np.zeros(base.shape + np.shape(phi(tuple(args))))
    is_array = isinstance(args[argnum], np.ndarray)
    for idx in np.ndindex(base.shape):
        h = step * max(1.0, abs(float(base[idx])))
        total = 0.0
        for k, weight in _STENCILS[order]:
            pert = base.copy()
            pert[idx] += k * h
            a = list(args)
            a[argnum] = pert if is_array else float(pert[()])
            total = total + weight * np.asarray(phi(tuple(a)))
        grad[idx] = total / h
    return grad


def fd_is_accurate(phi, args, argnums, rtol=RTOL64, atol=ATOL64, margin=0.1, step=1e-3):
    """Do second-order differences agree with a fourth-order stencil (of step ``step``) well inside
    the tolerances (``margin`` of them)? False near a kink: a branch threshold, a tie, a trip-count
    change."""
    for i in argnums:
        a = finite_differences(phi, args, i)
        b = finite_differences(phi, args, i, step=step, order=4)
        if not np.all(np.abs(a - b) <= margin * (rtol * np.abs(b) + atol)):
            return False
    return True


def fd_jacobian(f, x, eps=1e-6):
    """Central differences of the NumPy function ``f`` at ``x``: shape ``f(x).shape + x.shape``."""
    x = np.asarray(x, dtype=float)
    y0 = np.asarray(f(x))
    jac = np.zeros(y0.shape + x.shape)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        jac[(Ellipsis,) + i] = (np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * eps)
    return jac


# -- VJPs of functions of Tensors ----------------------------------------------------------------------

def _vjp(fn, args, cotangents_):
    """Gradients (None -> zeros) of ``<cotangents, fn(*args)>``, as Tensors; recorded by outer tapes."""
    xs = [ad.constant(a) if not isinstance(a, Tensor) else a for a in args]
    with ad.GradientTape() as tape:
        tape.watch(xs)
        outs = _outputs(fn(*xs))
    grads = tape.gradient(outs, xs, output_gradients=list(cotangents_))
    return [ad.constant(np.zeros(np.shape(a))) if g is None else g for g, a in zip(grads, args)]


def check_vjp(fn, *args, eps=EPS, rtol=RTOL, atol=ATOL, seed=0):
    """First-order check of ``fn``'s VJPs (``fn`` takes and returns Tensors) against finite differences."""
    rng = np.random.default_rng(seed)
    args = [np.asarray(a, dtype=np.float64) for a in args]
    outs = _values(fn(*[ad.constant(a) for a in args]))
    us = [rng.standard_normal(o.shape) for o in outs]
    vs = [rng.standard_normal(a.shape) for a in args]
    grads = _vjp(fn, args, [ad.constant(u) for u in us])
    for g, a in zip(grads, args):
        assert g.shape == a.shape, f"gradient shape {g.shape} != input shape {a.shape}"
    vjp_v = sum(float(np.sum(g.numpy() * v)) for g, v in zip(grads, vs))
    plus = _values(fn(*[ad.constant(a + eps * v) for a, v in zip(args, vs)]))
    minus = _values(fn(*[ad.constant(a - eps * v) for a, v in zip(args, vs)]))
    fd = sum(float(np.sum(u * (p - m))) / (2 * eps) for u, p, m in zip(us, plus, minus))
    assert np.isclose(vjp_v, fd, rtol=rtol, atol=atol), f"VJP {vjp_v!r} != finite difference {fd!r}"


def check_grads(fn, *args, order=2, eps=EPS, rtol=RTOL, atol=ATOL, seed=0):
    """Check ``fn``'s VJPs up to ``order`` against finite differences (orders > 1 through nested tapes)."""
    check_vjp(fn, *args, eps=eps, rtol=rtol, atol=atol, seed=seed)
    if order > 1:
        rng = np.random.default_rng(seed + 1)
        outs = _values(fn(*[ad.constant(np.asarray(a, dtype=np.float64)) for a in args]))
        us = [ad.constant(rng.standard_normal(o.shape)) for o in outs]

        def vjp_fn(*xs):
            return tuple(_vjp(fn, xs, us))

        check_grads(vjp_fn, *args, order=order - 1, eps=eps, rtol=rtol, atol=atol, seed=seed + 2)


def check_batch_vjp(fn, *args, batch=3, order=2, seed=0):
    """One backward sweep with ``batch`` cotangents (leading axis) equals the ``batch`` single sweeps."""
    rng = np.random.default_rng(seed)
    xs = [ad.constant(np.asarray(a, dtype=np.float64)) for a in args]
    with ad.GradientTape(persistent=True) as tape:
        tape.watch(xs)
        outs = _outputs(fn(*xs))
    seeds = [rng.standard_normal((batch,) + o.shape) for o in outs]
    batched = tape._backprop(outs, [ad.constant(s) for s in seeds], xs)
    for i, (g, x) in enumerate(zip(batched, xs)):
        singles = [tape.gradient(outs, x, output_gradients=[ad.constant(s[k]) for s in seeds]) for k in range(batch)]
        if g is None:
            assert all(s is None for s in singles), f"batched VJP of input {i} is None, single VJPs are not"
            continue
        assert g.shape == (batch,) + x.shape, f"batched VJP shape {g.shape} != {(batch,) + x.shape}"
        expected = np.stack([np.zeros(x.shape) if s is None else s.numpy() for s in singles])
        np.testing.assert_allclose(g.numpy(), expected, rtol=1e-9, atol=1e-12,
                                   err_msg=f"batched VJP of input {i} != the stacked single VJPs")
    if order > 1:
        us = [ad.constant(rng.standard_normal(o.shape)) for o in outs]
        check_batch_vjp(lambda *zs: tuple(_vjp(fn, zs, us)), *args, batch=batch, order=order - 1, seed=seed + 1)


def nested_derivatives(fn, x, order=2, **gradient_kwargs):
    """``[y, dy/dx, d(dy/dx)/dx, ...]`` up to ``order``: ``y = fn(x)`` under ``order`` nested tapes that watch
    ``x``, each derivative taken by the next tape out while the outer ones record it.
    ``gradient_kwargs`` go to every ``tape.gradient`` call."""
    x = x if isinstance(x, Tensor) else ad.constant(x)

    def record_level(k):
        if k == 0:
            return [fn(x)]
        with ad.GradientTape() as tape:
            tape.watch(x)
            results = record_level(k - 1)
        return results + [tape.gradient(results[-1], x, **gradient_kwargs)]

    return record_level(order)


def record(f, value=1.0):
    """``y = f(x)`` recorded on a fresh tape, ``x = ad.Variable(value)``: ``(tape, x, y)``, so that a test can
    expect an error from ``tape.gradient(y, x)`` (the backward pass) rather than from the recording."""
    x = ad.Variable(value)
    with ad.GradientTape() as tape:
        y = f(x)
    return tape, x, y


# -- compiled functions --------------------------------------------------------------------------------

def _is_float32(v):
    return np.asarray(v).dtype == np.float32


def assert_results_equal(got, expected, what="result"):
    """Compiled outputs equal the plain Python outputs (structure, shapes, values)."""
    g_outs, e_outs = _outputs(got), _outputs(expected)
    assert isinstance(got, tuple) == isinstance(expected, tuple), (
        f"{what}: compiled returned {type(got).__name__}, Python returned {type(expected).__name__}")
    assert len(g_outs) == len(e_outs), f"{what}: {len(g_outs)} outputs vs {len(e_outs)}"
    for k, (g, e) in enumerate(zip(g_outs, e_outs)):
        if g is None or e is None:
            assert g is None and e is None, f"{what}[{k}]: compiled gave {g!r}, Python {e!r}"
            continue
        gv, ev = value_of(g), value_of(e)
        assert gv.shape == ev.shape, f"{what}[{k}]: shape {gv.shape}, expected {ev.shape}"
        rtol = RESULT_RTOL32 if (_is_float32(gv) or _is_float32(ev)) else RESULT_RTOL64
        scale = max(1.0, float(np.max(np.abs(ev.astype(np.float64)))) if ev.size else 1.0)
        np.testing.assert_allclose(gv.astype(np.float64), ev.astype(np.float64), rtol=rtol, atol=rtol * scale,
                                   err_msg=f"{what}[{k}]: compiled vs Python")


def tape_gradients(f, args, active, ws=None, use_variables=False):
    """Run ``f`` under a tape with ``args[i]`` (i in active) watched: ``(outputs, weights, gradients of
    sum_k sum(w_k out_k) per active argument)``. The tape is persistent and the gradient taken twice:
    a second run of the backward pass must find what the forward saved as it was."""
    targs = list(fresh(args))
    srcs = []
    for i in active:
        t = ad.Variable(targs[i]) if use_variables else ad.constant(targs[i])
        targs[i] = t
        srcs.append(t)
    with ad.GradientTape(persistent=True) as tape:
        if not use_variables:
            for s in srcs:
                tape.watch(s)
        out = f(*targs)
    outs = _outputs(out)
    for k, o in enumerate(outs):
        assert o is None or isinstance(o, Tensor), f"output {k} is {type(o).__name__}, not an ad.Tensor"
    if ws is None:
        ws = cotangents(outs)
    given = [(o, w) for o, w in zip(outs, ws) if o is not None]
    grads = tape.gradient([o for o, _ in given], srcs, output_gradients=[ad.constant(w) for _, w in given])
    again = tape.gradient([o for o, _ in given], srcs, output_gradients=[ad.constant(w) for _, w in given])
    for k, (g, h) in enumerate(zip(grads, again)):
        assert (g is None) == (h is None) and (g is None or np.array_equal(g.numpy(), h.numpy(), equal_nan=True)), \
            f"the gradient of argument {active[k]} changed when the backward pass ran again: {g} then {h}"
    return out, ws, grads


def check_function(f, args, active, fd_fn=None, name=None, use_variables=False):
    """The whole check of one ``@ad.function`` ``f`` at ``args``: the compiled result equals the plain
    function's, outside and under a tape, and each active argument's tape gradient equals central finite
    differences of the plain function (``fd_fn(base_args, args)`` instead, where the function stops
    gradients). Raises AssertionError naming the function, the argument, expected and actual values."""
    py = f.python_function
    name = name or py.__name__
    got = f(*fresh(args))
    expected = py(*fresh(args))
    assert_results_equal(got, expected, f"{name}: result")
    out, ws, grads = tape_gradients(f, args, active, use_variables=use_variables)
    assert_results_equal(out, expected, f"{name}: result under tape")
    base64 = tuple(_upcast(a) for a in fresh(args))

    def phi(a):
        a = fresh(a)
        return scalarize(_outputs(fd_fn(base64, a) if fd_fn is not None else py(*a)), ws)

    for i, g in zip(active, grads):
        arg = args[i]
        where = f"{name}: d/d(arg {i})"
        assert np.issubdtype(np.asarray(arg).dtype, np.floating), f"{where}: active argument is not floating point"
        fd = finite_differences(phi, base64, i)
        if g is None:
            assert np.all(np.abs(fd) <= ATOL64), f"{where}: gradient is None but finite differences give {fd!r}"
            continue
        assert isinstance(g, Tensor), f"{where}: gradient is {type(g).__name__}, not a Tensor"
        gv = np.asarray(g.numpy())
        assert gv.shape == np.shape(arg), f"{where}: gradient shape {gv.shape}, argument shape {np.shape(arg)}"
        if _is_float32(arg):
            assert gv.dtype == np.float32, f"{where}: float32 argument got a {gv.dtype} gradient"
            scale = max(1.0, float(np.max(np.abs(fd))) if fd.size else 1.0)
            np.testing.assert_allclose(gv.astype(np.float64), fd, rtol=RTOL32, atol=ATOL32_REL * scale,
                                       err_msg=f"{where} (float32): tape gradient vs FD")
        else:
            assert gv.dtype == np.float64, f"{where}: float64 argument got a {gv.dtype} gradient"
            np.testing.assert_allclose(gv, fd, rtol=RTOL64, atol=ATOL64, err_msg=f"{where}: tape gradient vs FD")
    return grads
