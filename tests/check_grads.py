"""Autograd-style gradient checks: VJPs against central finite differences.

``check_grads(fn, *args, order=2)`` checks, for random cotangent ``u`` and
random directions ``v_i``, that ``sum_i <vjp_i(u), v_i>`` equals the finite
difference ``<u, (f(x + eps v) - f(x - eps v)) / 2 eps>``.  At order 2 it then
checks the function ``x -> <w, vjp(x, u)>`` the same way, differentiating it
with nested tapes (the backward pass recorded on an outer tape), so the VJP
rules' own VJPs are checked too.  ``check_batch_vjp`` checks that one backward
sweep with a batch of cotangents (what ``jacobian`` does) equals the stacked
single VJPs, at first and second order.

Also shared by the tests: ``nested_derivatives`` (derivatives up to some order
by nested tapes), ``record`` (one function recorded on a tape, for tests of the
backward pass) and ``fd_jacobian`` (central differences of a NumPy function).

``fn`` takes Tensors (one per entry of ``args``, float64 NumPy arrays) and
returns a Tensor or a tuple of Tensors.
"""

import numpy as np

import srcad as ad
from srcad.tensor import Tensor

EPS = 1e-6
RTOL = 1e-5
ATOL = 1e-6


def _outputs(result):
    return list(result) if isinstance(result, (list, tuple)) else [result]


def _values(result):
    return [np.asarray(r.numpy() if isinstance(r, Tensor) else r, dtype=np.float64) for r in _outputs(result)]


def _vjp(fn, args, cotangents):
    """Gradients (None -> zeros) of ``<cotangents, fn(*args)>``, as Tensors; recorded by outer tapes."""
    xs = [ad.constant(a) if not isinstance(a, Tensor) else a for a in args]
    with ad.GradientTape() as tape:
        tape.watch(xs)
        outs = _outputs(fn(*xs))
    grads = tape.gradient(outs, xs, output_gradients=list(cotangents))
    return [ad.constant(np.zeros(np.shape(a))) if g is None else g for g, a in zip(grads, args)]


def _random_like(rng, shape):
    return rng.standard_normal(shape)


def check_vjp(fn, *args, eps=EPS, rtol=RTOL, atol=ATOL, seed=0):
    """First-order check of ``fn``'s VJPs against central finite differences."""
    rng = np.random.default_rng(seed)
    args = [np.asarray(a, dtype=np.float64) for a in args]
    outs = _values(fn(*[ad.constant(a) for a in args]))
    us = [_random_like(rng, o.shape) for o in outs]
    vs = [_random_like(rng, a.shape) for a in args]
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
        us = [ad.constant(_random_like(rng, o.shape)) for o in outs]

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
    seeds = [_random_like(rng, (batch,) + o.shape) for o in outs]
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
        us = [ad.constant(_random_like(rng, o.shape)) for o in outs]
        check_batch_vjp(lambda *zs: tuple(_vjp(fn, zs, us)), *args, batch=batch, order=order - 1, seed=seed + 1)


# -- helpers shared by the tests ------------------------------------------------------------------------------

def nested_derivatives(fn, x, order=2, **gradient_kwargs):
    """``[y, dy/dx, d(dy/dx)/dx, ...]`` up to ``order``: ``y = fn(x)`` under ``order`` nested tapes that watch
    ``x`` (converted to a Tensor if it is not one), each derivative taken by the next tape out while the outer
    ones record it.  ``gradient_kwargs`` go to every ``tape.gradient`` call."""
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
    """``y = f(x)`` recorded on a fresh tape, ``x = ad.Variable(value)``: returns ``(tape, x, y)``, so that a test
    can expect an error from ``tape.gradient(y, x)`` (the backward pass), not from the recording."""
    x = ad.Variable(value)
    with ad.GradientTape() as tape:
        y = f(x)
    return tape, x, y


def fd_jacobian(f, x, eps=1e-6):
    """Central finite differences of the NumPy function ``f`` at ``x``: shape ``f(x).shape + x.shape``."""
    x = np.asarray(x, dtype=float)
    y0 = np.asarray(f(x))
    jac = np.zeros(y0.shape + x.shape)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        jac[(Ellipsis,) + i] = (np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * eps)
    return jac
