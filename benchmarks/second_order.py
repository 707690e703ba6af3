"""Second order and jacobians of compiled code (issue 18's targets), against JAX where installed.

    python benchmarks/second_order.py [--reps 7] [--n 10000]

Cases, each timed in one process, variants interleaved (every repetition runs
each once, in turn), medians reported as ratios:

* RK4 Lotka-Volterra loss of 4 parameters over N steps (benchmarks/rk4_lotka_volterra.py):
  the Numba primal; srcad's gradient (``ad.grad``), Hessian-vector product
  (``ad.hvp``, forward over reverse) and full 4x4 Hessian (``ad.hessian``); JAX's
  ``jit(grad)``, ``jit(hvp)`` (jvp of grad) and ``jit(hessian)`` of the
  ``lax.fori_loop`` version. Targets: hvp <= 5x srcad's gradient, Hessian <= 20x the primal.
* A spectral objective of a symmetric matrix (``np.linalg.eigh``: eigenvalues and eigenvectors) of
  an n x n matrix: srcad's gradient, its Hessian-vector product by ``ad.hvp`` and by nested tapes
  (the adjoint of the gradient function, where the eigen-decomposition is read in many statements),
  and JAX's ``jit(grad)`` and ``jit(hvp)``.
* ``jacobian`` of a compiled R^n -> R^m function (a loop of m outputs mixing n
  inputs) by a tape, in units of one sweep of the mode it picks (``ad.jvp`` where
  n < m, else ``ad.vjp`` applied once): target at most 1.5 x min(n, m) sweeps;
  both shapes, so both modes run.

Every variant's result is checked against the others before timing (Hessians to
1e-8 relative, symmetric to rounding). Pinned to one core: run it with
``taskset -c 0`` for the issue's figures (JAX's thread pool is set to one thread).
"""
import argparse
import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import srcad as ad  # noqa: E402
from rk4_lotka_volterra import PARAMS, dt_for, jax_loss, primal, rk4_lotka_volterra, X0, Y0  # noqa: E402
from timing import interleaved  # noqa: E402

rk4 = ad.function(rk4_lotka_volterra)


@ad.function
def mixing(x, m):
    """R^n -> R^m: out[k] = sum_i sin(x[i] * (k + 1)) * x[(i + k) % n]."""
    n = x.shape[0]
    out = np.zeros(m)
    for k in range(m):
        s = 0.0
        for i in range(n):
            s += np.sin(x[i] * (k + 1)) * x[(i + k) % n]
        out[k] = s
    return out


@ad.function
def spectral(A, W):
    """Squared eigenvalues and squared eigenvector entries (sign-free) of the symmetric A + A^T, weighted."""
    w, v = np.linalg.eigh(A + A.T)
    return np.sum(w * w * W[0]) + np.sum(v * v * W)


def jax_spectral(W):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)

    def loss(A):
        w, v = jnp.linalg.eigh(A + A.T)
        return jnp.sum(w * w * W[0]) + jnp.sum(v * v * W)
    grad = jax.jit(jax.grad(loss))
    hvp = jax.jit(lambda A, V: jax.jvp(jax.grad(loss), (A,), (V,))[1])
    return {"jax jit(grad)": lambda A: np.asarray(grad(jnp.asarray(A)).block_until_ready()),
            "jax jit(hvp)": lambda A, V: np.asarray(hvp(jnp.asarray(A), jnp.asarray(V)).block_until_ready())}


def spectral_case(n, reps):
    rng = np.random.default_rng(0)
    A, W, V = rng.normal(size=(n, n)), rng.normal(size=(n, n)), rng.normal(size=(n, n))

    def f(a):
        return spectral(a, W)

    def nested():
        x = ad.Variable(A)
        with ad.GradientTape() as outer:
            with ad.GradientTape() as inner:
                y = spectral(x, W)
            g = inner.gradient(y, x)
            gv = np.sum(g * V)
        return outer.gradient(gv, x).numpy()
    grad, hvp = ad.grad(f)(A), ad.hvp(f, A, V)
    np.testing.assert_allclose(nested(), hvp, rtol=1e-8, atol=1e-8 * np.abs(hvp).max())
    variants = {"srcad grad": lambda: ad.grad(f)(A), "srcad hvp": lambda: ad.hvp(f, A, V),
                "srcad nested tapes": nested}
    peers = jax_spectral(W)
    if peers is not None:
        np.testing.assert_allclose(peers["jax jit(grad)"](A), grad, rtol=1e-8, atol=1e-8 * np.abs(grad).max())
        np.testing.assert_allclose(peers["jax jit(hvp)"](A, V), hvp, rtol=1e-7, atol=1e-7 * np.abs(hvp).max())
        variants.update({"jax jit(grad)": lambda: peers["jax jit(grad)"](A),
                         "jax jit(hvp)": lambda: peers["jax jit(hvp)"](A, V)})
    t = interleaved(variants, reps, block=0.2)
    print(f"spectral objective (np.linalg.eigh), {n} x {n}: times and ratios (median of {reps})")
    for name, seconds in t.items():
        print(f"  {name:18s} {seconds * 1e3:10.3f} ms   {seconds / t['srcad grad']:6.2f}x srcad grad")


def jax_rk4(n):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    dt = dt_for(n)

    def loss(p):
        return jax_loss(p, n, dt)
    grad = jax.jit(jax.grad(loss))
    hessian = jax.jit(jax.hessian(loss))
    hvp = jax.jit(lambda p, v: jax.jvp(jax.grad(loss), (p,), (v,))[1])
    p = jnp.asarray(PARAMS)
    return {"jax jit(grad)": lambda: np.asarray(grad(p).block_until_ready()),
            "jax jit(hvp)": lambda v: np.asarray(hvp(p, jnp.asarray(v)).block_until_ready()),
            "jax jit(hessian)": lambda: np.asarray(hessian(p).block_until_ready())}


def rk4_case(n, reps):
    dt = dt_for(n)
    v = np.array([1.0, -0.5, 0.25, 2.0])

    def f(p):
        return rk4(p, X0, Y0, dt, n)
    H = ad.hessian(f)(PARAMS)
    np.testing.assert_allclose(H, H.T, rtol=1e-9, atol=1e-9 * np.abs(H).max())
    np.testing.assert_allclose(ad.hvp(f, PARAMS, v), H @ v, rtol=1e-8)
    variants = {"numba primal": lambda: primal(PARAMS, X0, Y0, dt, n),
                "srcad grad": lambda: ad.grad(f)(PARAMS),
                "srcad hvp": lambda: ad.hvp(f, PARAMS, v),
                "srcad hessian": lambda: ad.hessian(f)(PARAMS)}
    peers = jax_rk4(n)
    if peers is not None:
        np.testing.assert_allclose(peers["jax jit(hessian)"](), H, rtol=1e-8)
        np.testing.assert_allclose(peers["jax jit(grad)"](), ad.grad(f)(PARAMS), rtol=1e-10)
        np.testing.assert_allclose(peers["jax jit(hvp)"](v), H @ v, rtol=1e-8)
        variants.update({"jax jit(grad)": peers["jax jit(grad)"], "jax jit(hvp)": lambda: peers["jax jit(hvp)"](v),
                         "jax jit(hessian)": peers["jax jit(hessian)"]})
    else:
        print("(jax not installed: its columns are skipped)")
    t = interleaved(variants, reps, block=0.2)
    base, grad = t["numba primal"], t["srcad grad"]
    print(f"RK4 Lotka-Volterra, N = {n}: times and ratios (median of {reps})")
    for name, seconds in t.items():
        print(f"  {name:18s} {seconds * 1e3:10.3f} ms   {seconds / base:8.1f}x primal   {seconds / grad:6.2f}x srcad grad")


def jacobian_case(n, m, reps):
    x = np.linspace(0.1, 1.0, n)
    with ad.GradientTape() as tape:
        xt = ad.constant(x)
        tape.watch(xt)
        y = mixing(xt, m)
    J = tape.jacobian(y, xt).numpy()
    _, vjp_fn = ad.vjp(lambda z: mixing(z, m), x)
    rows = np.stack([vjp_fn(e)[0] for e in np.eye(m)])
    np.testing.assert_allclose(J, rows, rtol=1e-12, atol=1e-12)
    u = np.ones(m)

    def jacobian():
        with ad.GradientTape() as tape:
            xt = ad.constant(x)
            tape.watch(xt)
            y = mixing(xt, m)
        return tape.jacobian(y, xt)

    def sweep():                 # one sweep of the mode `jacobian` picks: forward where n < m
        if n < m:
            return ad.jvp(lambda z: mixing(z, m), (x,), (x,))
        return ad.vjp(lambda z: mixing(z, m), x)[1](u)
    t = interleaved({"jacobian": jacobian, "one sweep": sweep}, reps, block=0.2)
    sweeps = t["jacobian"] / t["one sweep"]
    print(f"jacobian of R^{n} -> R^{m}: {t['jacobian'] * 1e3:8.3f} ms = {sweeps:6.1f} sweeps = "
          f"{sweeps / min(n, m):4.2f} x min(n, m) (target <= 1.5)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--n", type=int, default=10000, help="RK4 steps")
    args = parser.parse_args()
    rk4_case(args.n, args.reps)
    spectral_case(60, args.reps)
    jacobian_case(4, 300, args.reps)
    jacobian_case(300, 4, args.reps)


if __name__ == "__main__":
    main()
