"""ADBench GMM written the NumPy way: srcad against JAX on the same formulation (issue 21).

    taskset -c 0 python benchmarks/gmm_vectorised.py [--reps 7] [--only d2_K5,d10_K25]

The objective as JAX users write it: per component one matrix product over all
points (`(x - mu_k) @ L_k^T`), sums over axes, a log-sum-exp by rows
(`np.max(main, axis=1)`). Variants, interleaved, medians reported:

  numba obj    numba.njit of the loop objective (tests/compiler/adbench_models.py), the unit
  srcad grad   @ad.function of `gmm_vectorised`, tape.gradient w.r.t. alphas, means, icf
  jax grad     jax.jit(jax.grad) of the same formulation in jax.numpy (`gmm_array`: one
               matrix product for all components, jax.nn.logsumexp), skipped without JAX

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


def triangle_gather(d):
    """Where each entry of L_k transposed (d x d, row-major) is in the row [exp(q_k) | l_k | 0]: the gather
    that builds every L_k at once from icf in array frameworks (no scatter, whose gradient some lack)."""
    index = np.full((d, d), d * (d + 1) // 2, dtype=np.int64)      # the trailing zero
    pos = d
    for col in range(d):
        index[col, col] = col
        for row in range(col + 1, d):
            index[col, row] = pos
            pos += 1
    return index.ravel()


def gmm_array(ops, gather, alphas, means, icf, x, wishart_gamma, wishart_m):
    """The same objective in any array framework, `ops` its functions (`peer_ops`): every L_k by one
    gather, then the products of all points with all components as one matrix product,
    x @ [L_1^T ... L_K^T], less each mean's product. (One einsum over the points and components instead,
    `(x - mu)` n x K x d by L^T, was 1.1-1.8x slower in JAX and 1.2-4.3x in PyTorch at 1k d2-d64 and 10k
    d10, one core.)"""
    n, d = x.shape
    K = alphas.shape[0]
    q = icf[:, :d]
    sum_q = ops.sum(q, 1)
    padded = ops.concat([ops.exp(q), icf[:, d:], ops.zeros_like(q[:, :1])], 1)
    Lt = ops.reshape(ops.gather(padded, gather), (K, d, d))        # Lt[k, c, r] = L_k[r, c]
    qx = (ops.reshape(x @ ops.reshape(ops.transpose(Lt, (1, 0, 2)), (d, K * d)), (n, K, d))
          - ops.einsum("kc,kcr->kr", means, Lt))
    main = alphas + sum_q - 0.5 * ops.sum(qx * qx, 2)
    prior = ops.sum(0.5 * wishart_gamma * wishart_gamma * (ops.sum(ops.exp(2.0 * q), 1) + ops.sum(icf[:, d:] ** 2, 1))
                    - wishart_m * sum_q, 0)
    return (-n * d * 0.5 * math.log(2 * math.pi) + ops.sum(ops.logsumexp(main, 1), 0)
            - n * ops.logsumexp(alphas, 0) + prior - K * log_gamma_constant(d, wishart_gamma, wishart_m))


def peer_ops(name, module):
    """The functions `gmm_array` calls, in the peer `name` ("jax", "torch", "autograd", "tensorflow")."""
    from types import SimpleNamespace as ns

    if name == "jax":
        jnp = module.numpy
        return ns(sum=lambda a, axis: jnp.sum(a, axis=axis), exp=jnp.exp, zeros_like=jnp.zeros_like,
                  concat=lambda parts, axis: jnp.concatenate(parts, axis=axis), gather=lambda a, i: a[:, i],
                  reshape=jnp.reshape, transpose=jnp.transpose, einsum=jnp.einsum,
                  logsumexp=lambda a, axis: module.nn.logsumexp(a, axis=axis))
    if name == "torch":
        return ns(sum=lambda a, axis: module.sum(a, dim=axis), exp=module.exp, zeros_like=module.zeros_like,
                  concat=lambda parts, axis: module.cat(parts, dim=axis), gather=lambda a, i: a[:, i],
                  reshape=module.reshape, transpose=lambda a, axes: a.permute(axes), einsum=module.einsum,
                  logsumexp=lambda a, axis: module.logsumexp(a, dim=axis))
    if name == "autograd":
        import autograd.numpy as anp
        from autograd.scipy.special import logsumexp

        return ns(sum=lambda a, axis: anp.sum(a, axis=axis), exp=anp.exp, zeros_like=anp.zeros_like,
                  concat=lambda parts, axis: anp.concatenate(parts, axis=axis), gather=lambda a, i: a[:, i],
                  reshape=anp.reshape, transpose=anp.transpose, einsum=anp.einsum,
                  logsumexp=lambda a, axis: logsumexp(a, axis=axis))
    if name == "tensorflow":
        tf = module
        return ns(sum=lambda a, axis: tf.reduce_sum(a, axis=axis), exp=tf.exp, zeros_like=tf.zeros_like,
                  concat=lambda parts, axis: tf.concat(parts, axis=axis),
                  gather=lambda a, i: tf.gather(a, i, axis=1), reshape=tf.reshape,
                  transpose=lambda a, axes: tf.transpose(a, perm=axes), einsum=tf.einsum,
                  logsumexp=lambda a, axis: tf.reduce_logsumexp(a, axis=axis))
    raise ValueError(name)


def jax_gradient(d, K):
    """jit(grad) of the same formulation in jax.numpy, or None without JAX."""
    try:
        import jax
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    ops, gather = peer_ops("jax", jax), triangle_gather(d)

    def objective(alphas, means, icf, x, wishart_gamma, wishart_m):
        return gmm_array(ops, gather, alphas, means, icf, x, wishart_gamma, wishart_m)
    grad = jax.jit(jax.grad(objective, argnums=(0, 1, 2)), static_argnums=(4, 5))

    def run(a):
        return [np.asarray(g) for g in jax.block_until_ready(grad(*a))]
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
