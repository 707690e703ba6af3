"""ADBench GMM at its five sizes: the gradient with respect to alphas, means and icf.

Three srcad formulations of the same objective, each timed against itself under `numba.njit`:

* "srcad loops": tests/compiler/adbench_models.gmm_objective, loops written for speed (the diagonal
  exponentiated once, the triangular product run column by column into a scratch vector);
* "srcad natural loops": `gmm_natural_loops` below, the objective as the ADBench paper writes it;
* "srcad vectorised": benchmarks/gmm_vectorised.py's NumPy form (a matrix product per component).

The peers run benchmarks/gmm_vectorised.py's `gmm_array`, the array form each of them is written in.
"""
import math

import numba
import numpy as np

from .. import gmm_vectorised as V
from ..harness import Row, Tool, add_tools, adbench_models, adbench_path, golden_gradient, peer

DATASETS = (("1k", 2, 5), ("1k", 10, 25), ("1k", 64, 25), ("10k", 2, 5), ("10k", 10, 25))


def gmm_natural_loops(alphas, means, icf, x, wishart_gamma, wishart_m):
    """ADBench's GMM objective as the paper reads: build each Q_k (lower triangular, exp(q_k) on the
    diagonal, l_k below it column by column), then per point and component the log-likelihood term with
    the Mahalanobis norm |Q_k (x_i - mu_k)|^2, a log-sum-exp over the components, and the Wishart prior."""
    n, d = x.shape
    K = alphas.shape[0]
    Q = np.zeros((K, d, d))
    for k in range(K):
        idx = d
        for col in range(d):
            Q[k, col, col] = math.exp(icf[k, col])
            for row in range(col + 1, d):
                Q[k, row, col] = icf[k, idx]
                idx += 1
    total = 0.0
    terms = np.zeros(K)
    for i in range(n):
        for k in range(K):
            sum_q = 0.0
            for j in range(d):
                sum_q += icf[k, j]
            mahalanobis = 0.0
            for row in range(d):
                s = 0.0
                for col in range(row + 1):
                    s += Q[k, row, col] * (x[i, col] - means[k, col])
                mahalanobis += s * s
            terms[k] = alphas[k] + sum_q - 0.5 * mahalanobis
        biggest = np.max(terms)
        total += biggest + math.log(np.sum(np.exp(terms - biggest)))
    biggest = np.max(alphas)
    lse_alphas = biggest + math.log(np.sum(np.exp(alphas - biggest)))
    nprime = d + wishart_m + 1
    log_gamma_d = 0.25 * d * (d - 1) * math.log(math.pi)
    for j in range(1, d + 1):
        log_gamma_d += math.lgamma(0.5 * nprime + 0.5 * (1 - j))
    c = nprime * d * (math.log(wishart_gamma) - 0.5 * math.log(2.0)) - log_gamma_d
    prior = 0.0
    for k in range(K):
        frobenius = 0.0
        sum_q = 0.0
        for row in range(d):
            sum_q += icf[k, row]
            for col in range(row + 1):
                frobenius += Q[k, row, col] * Q[k, row, col]
        prior += 0.5 * wishart_gamma * wishart_gamma * frobenius - wishart_m * sum_q - c
    return -0.5 * n * d * math.log(2.0 * math.pi) + total - n * lse_alphas + prior


def _srcad_gradient(f, a):
    """The gradient of srcad function `f` at the GMM arguments `a`, w.r.t. alphas, means, icf."""
    import srcad as ad

    params = [ad.constant(v) for v in a[:3]]
    with ad.GradientTape() as tape:
        tape.watch(params)
        y = f(*params, *a[3:])
    return tuple(tape.gradient(y, params))


def _srcad(formulation, a, njit=True):
    """A srcad formulation: its gradient, and its objective under numba.njit (srcad's compiled primal
    where Numba cannot compile it)."""
    import srcad as ad

    f = ad.function(formulation)
    objective = numba.njit(formulation) if njit else f
    return Tool(gradient=lambda: _srcad_gradient(f, a), objective=lambda: objective(*a))


def _jax(a):
    jax = peer("jax")
    if jax is None:
        return None
    step = V.jax_gradient(a[3].shape[1], a[0].shape[0])
    return Tool(gradient=lambda: tuple(step(a)))


def _torch(a):
    torch = peer("torch")
    if torch is None:
        return None
    ops, gather = V.peer_ops("torch", torch), torch.from_numpy(V.triangle_gather(a[3].shape[1]))
    params, x = [torch.from_numpy(v).requires_grad_(True) for v in a[:3]], torch.from_numpy(a[3])

    def step():
        return torch.autograd.grad(V.gmm_array(ops, gather, *params, x, *a[4:]), params)
    return Tool(gradient=step)


def _autograd(a):
    autograd = peer("autograd")
    if autograd is None:
        return None
    ops, gather = V.peer_ops("autograd", autograd), V.triangle_gather(a[3].shape[1])
    grad = autograd.grad(lambda alphas, means, icf: V.gmm_array(ops, gather, alphas, means, icf, *a[3:]),
                         argnum=(0, 1, 2))
    return Tool(gradient=lambda: grad(*a[:3]))


def _tensorflow(a):
    tf = peer("tensorflow")
    if tf is None:
        return None
    ops, gather = V.peer_ops("tensorflow", tf), tf.constant(V.triangle_gather(a[3].shape[1]))
    params, x = [tf.constant(v) for v in a[:3]], tf.constant(a[3])

    @tf.function
    def step(alphas, means, icf):
        with tf.GradientTape() as tape:
            tape.watch([alphas, means, icf])
            y = V.gmm_array(ops, gather, alphas, means, icf, x, *a[4:])
        return tape.gradient(y, [alphas, means, icf])
    return Tool(gradient=lambda: step(*params))


def _row(size, d, K, quick):
    """The row of one dataset, read when the row is built."""
    M = adbench_models()
    rel = f"gmm/{size}/gmm_d{d}_K{K}.txt"
    a = M.gmm_args(M.read_gmm(adbench_path(rel)))
    primal = numba.njit(M.gmm_objective)
    row = Row("GMM", f"{size} d{d} K{K}", lambda: primal(*a), {}, reference="srcad loops",
              golden=golden_gradient(rel, [v.shape for v in a[:3]]), quick=quick,
              note=f"{sum(v.size for v in a[:3])} parameters")
    add_tools(row.tools, row.notes, {
        "srcad loops": lambda: _srcad(M.gmm_objective, a),
        "srcad natural loops": lambda: _srcad(gmm_natural_loops, a),
        "srcad vectorised": lambda: _srcad(V.gmm_vectorised, a, njit=False),
        "JAX": lambda: _jax(a), "PyTorch": lambda: _torch(a), "autograd": lambda: _autograd(a),
        "TensorFlow function": lambda: _tensorflow(a)})
    return row


def rows(quick):
    for i, (size, d, K) in enumerate(DATASETS[:1] if quick else DATASETS):
        yield _row(size, d, K, quick=i == 0)
