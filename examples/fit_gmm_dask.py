"""Fit ADBench's Gaussian mixture to 10^6 points (10^7 with --big) with L-BFGS on a Dask cluster.

    pip install -e ".[dask,bench]"          # dask[distributed], scipy, tqdm, matplotlib
    python examples/fit_gmm_dask.py [--big] [--workers 2] [--out gmm_dask_fit.png]

The points are generated on the workers and stay there (persisted).  Each
L-BFGS evaluation calls ``srcad.dask.value_and_grad``: the compiled loss
(ADBench's GMM log-likelihood written loop-style, summed over the points of a
chunk) runs with its gradient on every chunk where it lies, the partial sums
are added on the cluster, and only the parameters and the gradient travel.
The Wishart prior of ADBench's objective depends on the parameters only and is
added here, in this process.  Writes a PNG of the log-likelihood per iteration
and of the fitted components over a sample of the points.
"""

import argparse
import math
import time

import dask
import dask.array as da
import numpy as np
from distributed import Client, LocalCluster, wait
from scipy.optimize import minimize
from tqdm import tqdm

import srcad as ad
from srcad.dask import value_and_grad


@ad.function
def gmm_neg_loglik(alphas, means, icf, x):
    """Minus the log-likelihood of the points ``x`` (n, d) under ADBench's GMM parametrisation:
    weights softmax(alphas), means (K, d), icf (K, d(d+1)/2) the log-diagonal then the strictly
    lower part (column by column) of each inverse Cholesky factor Q_k."""
    n = x.shape[0]
    d = x.shape[1]
    K = alphas.shape[0]
    qdiag = np.empty((K, d))
    sum_qs = np.empty(K)
    for k in range(K):
        s = 0.0
        for j in range(d):
            s += icf[k, j]
            qdiag[k, j] = math.exp(icf[k, j])
        sum_qs[k] = s
    xc = np.empty(d)
    qx = np.empty(d)
    main_term = np.empty(K)
    slse = 0.0
    for i in range(n):
        for k in range(K):
            for j in range(d):
                xc[j] = x[i, j] - means[k, j]
            for j in range(d):
                qx[j] = qdiag[k, j] * xc[j]
            idx = d
            for col in range(d):
                for row in range(col + 1, d):
                    qx[row] += icf[k, idx] * xc[col]
                    idx += 1
            sq = 0.0
            for j in range(d):
                sq += qx[j] * qx[j]
            main_term[k] = alphas[k] + sum_qs[k] - 0.5 * sq
        mx = main_term[0]
        for k in range(1, K):
            if main_term[k] > mx:
                mx = main_term[k]
        se = 0.0
        for k in range(K):
            se += math.exp(main_term[k] - mx)
        slse += math.log(se) + mx
    amax = alphas[0]
    for k in range(1, K):
        if alphas[k] > amax:
            amax = alphas[k]
    asum = 0.0
    for k in range(K):
        asum += math.exp(alphas[k] - amax)
    lse_alphas = math.log(asum) + amax
    return -(slse - n * lse_alphas - n * d * 0.5 * math.log(2.0 * math.pi))


@ad.function
def wishart_penalty(icf, d, wishart_gamma, wishart_m):
    """ADBench's Wishart prior on the Q_k (without its constant): keeps components from collapsing."""
    total = 0.0
    for k in range(icf.shape[0]):
        frob = 0.0
        sum_q = 0.0
        for j in range(d):
            frob += math.exp(2.0 * icf[k, j])
            sum_q += icf[k, j]
        for j in range(d, icf.shape[1]):
            frob += icf[k, j] * icf[k, j]
        total += 0.5 * wishart_gamma * wishart_gamma * frob - wishart_m * sum_q
    return total


def sample_chunk(seed, n, means, factors, weights):
    """``n`` points of the true mixture, drawn on a worker."""
    rng = np.random.default_rng(seed)
    comp = rng.choice(len(weights), size=n, p=weights)
    z = rng.standard_normal((n, means.shape[1]))
    return means[comp] + np.einsum("nij,nj->ni", factors[comp], z)


def true_mixture(k, d, seed=0):
    rng = np.random.default_rng(seed)
    angles = 2 * np.pi * np.arange(k) / k
    means = 4.0 * np.stack([np.cos(angles), np.sin(angles)], 1) if d == 2 else 4.0 * rng.normal(size=(k, d))
    factors = np.array([np.linalg.cholesky(a @ a.T + 0.2 * np.eye(d)) for a in 0.6 * rng.normal(size=(k, d, d))])
    weights = rng.dirichlet(np.full(k, 5.0))
    return means, factors, weights


def covariances(icf, d):
    """Covariances inv(Q_k^T Q_k) from ADBench's icf rows."""
    out = []
    for row in icf:
        q = np.diag(np.exp(row[:d]))
        idx = d
        for col in range(d):
            for r in range(col + 1, d):
                q[r, col] = row[idx]
                idx += 1
        out.append(np.linalg.inv(q.T @ q))
    return np.array(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--big", action="store_true", help="10^7 points instead of 10^6")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--chunk", type=int, default=250_000, help="points per chunk")
    ap.add_argument("--maxiter", type=int, default=60)
    ap.add_argument("--out", default="gmm_dask_fit.png")
    args = ap.parse_args()
    n, d, k = (10**7 if args.big else 10**6), 2, args.k
    means_true, factors_true, weights_true = true_mixture(k, d)

    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True) as cluster, \
            Client(cluster) as client:
        print(f"{n:.0e} points, K={k}, d={d}, on {args.workers} workers; dashboard {client.dashboard_link}")
        sizes = [min(args.chunk, n - s) for s in range(0, n, args.chunk)]
        x = da.concatenate([da.from_delayed(dask.delayed(sample_chunk)(seed, m, means_true, factors_true,
                                                                        weights_true), (m, d), float)
                            for seed, m in enumerate(sizes)])
        x = client.persist(x)
        wait(x)

        rng = np.random.default_rng(1)
        sample = x[:20_000].compute()
        shapes = [(k,), (k, d), (k, d * (d + 1) // 2)]
        sizes_p = [int(np.prod(s)) for s in shapes]

        def unpack(theta):
            parts = np.split(theta, np.cumsum(sizes_p)[:-1])
            return tuple(p.reshape(s) for p, s in zip(parts, shapes))

        theta0 = np.concatenate([np.zeros(k), sample[rng.choice(len(sample), k, replace=False)].ravel(),
                                 np.zeros(k * d * (d + 1) // 2)])
        loglik = []

        def objective(theta):
            alphas, means, icf = unpack(theta)
            value, (ga, gm, gi) = value_and_grad(gmm_neg_loglik, (alphas, means, icf), x, client=client,
                                                 argnums=(0, 1, 2))
            q = ad.constant(icf)
            with ad.GradientTape() as tape:
                tape.watch(q)
                penalty = wishart_penalty(q, d, 1.0, 0)
            gi = gi + tape.gradient(penalty, q).numpy()
            loglik.append(-value / n)
            return (value + float(penalty.numpy())) / n, np.concatenate([ga.ravel(), gm.ravel(), gi.ravel()]) / n

        history = []
        bar = tqdm(total=args.maxiter, desc="L-BFGS", unit="it")

        def step(theta):
            history.append(loglik[-1])          # L-BFGS evaluated theta last: its log-likelihood
            bar.set_postfix(loglik_per_point=f"{loglik[-1]:.5f}")
            bar.update(1)

        start = time.perf_counter()
        result = minimize(objective, theta0, jac=True, method="L-BFGS-B", callback=step,
                          options={"maxiter": args.maxiter})
        bar.close()
        elapsed = time.perf_counter() - start
        print(f"{result.message} after {result.nit} iterations, {result.nfev} evaluations, {elapsed:.1f} s "
              f"({elapsed / result.nfev * 1e3:.0f} ms per distributed value and gradient); "
              f"log-likelihood per point {history[-1] if history else loglik[-1]:.5f}")

    alphas, means, icf = unpack(result.x)
    weights = np.exp(alphas - alphas.max())
    weights /= weights.sum()
    plot(args.out, history or loglik, sample[:5000], means, covariances(icf, d), weights, means_true)
    print(f"wrote {args.out}")


def plot(path, history, points, means, covs, weights, means_true):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    left.plot(np.arange(1, len(history) + 1), history, marker=".")
    left.set_xlabel("L-BFGS iteration")
    left.set_ylabel("log-likelihood per point")
    left.set_title("fit on the cluster")
    right.scatter(points[:, 0], points[:, 1], s=1, alpha=0.3, color="0.5")
    t = np.linspace(0, 2 * np.pi, 100)
    circle = np.stack([np.cos(t), np.sin(t)])
    for mean, cov, w in zip(means, covs, weights):
        vals, vecs = np.linalg.eigh(cov)
        ring = mean[:, None] + 2 * vecs @ (np.sqrt(np.maximum(vals, 0))[:, None] * circle)
        right.plot(ring[0], ring[1], lw=1 + 6 * w)
    right.scatter(means_true[:, 0], means_true[:, 1], marker="x", color="k", label="true means")
    right.set_aspect("equal")
    right.legend(loc="upper right")
    right.set_title("fitted components (2 sigma; line width = weight)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
