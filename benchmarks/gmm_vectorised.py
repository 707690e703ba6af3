"""ADBench GMM written the NumPy way: srcad against JAX on the same formulation (issue 21).

    taskset -c 0 python benchmarks/gmm_vectorised.py [--reps 7] [--only d2_K5,d10_K25]

The objective as JAX users write it: per component one matrix product over all
points (`(x - mu_k) @ L_k^T`), sums over axes, a log-sum-exp by rows
(`np.max(main, axis=1)`). Variants, interleaved, medians reported:

  numba obj    numba.njit of the loop objective (tests/compiler/adbench_models.py), the unit
  srcad grad   @ad.function of `gmm_vectorised`, tape.gradient w.r.t. alphas, means, icf
  jax grad     jax.jit(jax.grad) of the same formulation in jax.numpy (einsum over the
               components, jax.nn.logsumexp), skipped when JAX is not installed

Both gradients are checked against each other first (and the objective against
the loop objective). Pinned to one core (`taskset -c 0`), JAX's thread pool at one.
"""
import math
import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import numba  # noqa: E402
import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "compiler"))
sys.path.insert(0, HERE)

import adbench_models as M  # noqa: E402
import srcad as ad  # noqa: E402
from gmm import command_line, datasets  # noqa: E402
from timing import interleaved  # noqa: E402


def log_gamma_constant(d, wishart_gamma, wishart_m):
    nprime = d + wishart_m + 1
    lgd = 0.25 * d * (d - 1) * math.log(math.pi)
    for j in range(1, d + 1):
        lgd += math.lgamma(0.5 * nprime + 0.5 * (1 - j))
    return nprime * d * (math.log(wishart_gamma) - 0.5 * math.log(2.0)) - lgd


def gmm_vectorised(alphas, means, icf, x, wishart_gamma, wishart_m):
    """The GMM objective with a matrix product per component and reductions over axes."""
    n, d = x.shape
    K = alphas.shape[0]
    main = np.zeros((n, K))
    prior = 0.0
    for k in range(K):
        q = icf[k, :d]
        Lt = np.zeros((d, d))                     # L_k transposed: its lower triangle column by column
        idx = d
        for col in range(d):
            Lt[col, col] = np.exp(q[col])
            for row in range(col + 1, d):
                Lt[col, row] = icf[k, idx]
                idx += 1
        qx = (x - means[k]) @ Lt
        main[:, k] = alphas[k] + np.sum(q) - 0.5 * np.sum(qx * qx, axis=1)
        prior += 0.5 * wishart_gamma * wishart_gamma * (np.sum(np.exp(2.0 * q)) + np.sum(icf[k, d:] ** 2)) \
            - wishart_m * np.sum(q)
    mx = np.max(main, axis=1)
    slse = np.sum(np.log(np.sum(np.exp(main - mx[:, None]), axis=1)) + mx)
    am = np.max(alphas)
    lse_alphas = np.log(np.sum(np.exp(alphas - am))) + am
    constant = log_gamma_constant(d, wishart_gamma, wishart_m)
    return -n * d * 0.5 * math.log(2 * math.pi) + slse - n * lse_alphas + prior - K * constant


def jax_gradient(d, K):
    """jit(grad) of the same formulation in jax.numpy, or None without JAX."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    cols, rows = zip(*[(c, r) for c in range(d) for r in range(c + 1, d)]) if d > 1 else ((), ())
    cols, rows = np.array(cols, int), np.array(rows, int)

    def objective(alphas, means, icf, x, wishart_gamma, wishart_m):
        n = x.shape[0]
        q = icf[:, :d]
        Lt = jnp.zeros((K, d, d)).at[:, cols, rows].set(icf[:, d:])
        Lt = Lt + jax.vmap(jnp.diag)(jnp.exp(q))
        qx = jnp.einsum("nkd,kde->nke", x[:, None, :] - means[None, :, :], Lt)
        main = alphas + jnp.sum(q, axis=1) - 0.5 * jnp.sum(qx * qx, axis=2)
        slse = jnp.sum(jax.nn.logsumexp(main, axis=1))
        prior = jnp.sum(0.5 * wishart_gamma ** 2 * (jnp.sum(jnp.exp(2.0 * q), axis=1) + jnp.sum(icf[:, d:] ** 2, axis=1))
                        - wishart_m * jnp.sum(q, axis=1))
        return (-n * d * 0.5 * math.log(2 * math.pi) + slse - n * jax.nn.logsumexp(alphas) + prior
                - K * log_gamma_constant(d, wishart_gamma, wishart_m))
    grad = jax.jit(jax.grad(objective, argnums=(0, 1, 2)), static_argnums=(4, 5))

    def run(a):
        return [np.asarray(g.block_until_ready()) for g in grad(*a)]
    return run


def main():
    args = command_line(7)
    objective = numba.njit(M.gmm_objective)
    f = ad.function(gmm_vectorised)

    def srcad_gradient(a):
        params = [ad.constant(v) for v in a[:3]]
        with ad.GradientTape() as tape:
            tape.watch(params)
            y = f(*params, *a[3:])
        return [g.numpy() for g in tape.gradient(y, params)]

    print(f"ADBench GMM the NumPy way, median of {args.reps} interleaved reps; ratios to the numba loop objective")
    print(f"{'n':>4} {'d_K':>8} {'numba obj':>11} {'srcad grad':>11} {'jax grad':>11} {'srcad/obj':>9} "
          f"{'jax/obj':>8} {'srcad/jax':>9}")
    for size, name, _, path in datasets(args.only):
        a = M.gmm_args(M.read_gmm(path))
        d, K = a[3].shape[1], a[0].shape[0]
        reference = objective(*a)
        assert abs(float(f(*a).numpy()) - reference) <= 1e-9 * abs(reference), "objective differs"
        ours = srcad_gradient(a)
        variants = {"numba obj": lambda: objective(*a), "srcad grad": lambda: srcad_gradient(a)}
        jax_grad = jax_gradient(d, K)
        if jax_grad is not None:
            for g, h in zip(ours, jax_grad(a)):
                np.testing.assert_allclose(g, h, rtol=1e-8, atol=1e-8 * np.abs(h).max())
            variants["jax grad"] = lambda: jax_grad(a)
        t = interleaved(variants, args.reps, block=0.2)
        base, jax_t = t["numba obj"], t.get("jax grad", float("nan"))
        print(f"{size:>4} {name:>8} {base * 1e3:9.3f}ms {t['srcad grad'] * 1e3:9.3f}ms {jax_t * 1e3:9.3f}ms "
              f"{t['srcad grad'] / base:9.2f} {jax_t / base:8.2f} {t['srcad grad'] / jax_t:9.2f}")


if __name__ == "__main__":
    main()
