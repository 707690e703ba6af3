"""ADBench GMM and LSTM objectives, written loop-style for ``@ad.function``.

Own code, written from the formulas in ``../shared/anchors/adbench/README.md``
(no ADBench code is copied).  Each objective is plain Numba-style Python:
explicit loops over points / components / time steps, scalar math, NumPy
arrays, so that it runs unchanged in Python, under ``numba.njit`` and under
``@ad.function``.

Readers return NumPy arrays; the data and the golden values live in
``tests/data/adbench`` (see its README).
"""

import math
import os

import numpy as np

DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "data", "adbench")
ANCHOR_DIR = os.path.normpath(os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared",
    "anchors", "adbench"))


# ---------------------------------------------------------------------------
# readers
# ---------------------------------------------------------------------------

def _numbers(path):
    with open(path) as fh:
        return fh.read().split()


def read_gmm(path):
    """Return dict(alphas (K,), means (K, d), icf (K, d(d+1)/2), x (n, d),
    wishart_gamma float, wishart_m int)."""
    tok = _numbers(path)
    d, k, n = int(tok[0]), int(tok[1]), int(tok[2])
    pos = 3
    vals = np.array(tok[pos:], dtype=np.float64)
    icf_sz = d * (d + 1) // 2
    p = 0
    alphas = vals[p:p + k].copy(); p += k
    means = vals[p:p + k * d].reshape(k, d).copy(); p += k * d
    icf = vals[p:p + k * icf_sz].reshape(k, icf_sz).copy(); p += k * icf_sz
    x = vals[p:p + n * d].reshape(n, d).copy(); p += n * d
    gamma = float(vals[p]); m = int(round(vals[p + 1])); p += 2
    assert p == vals.size, (p, vals.size)
    return dict(alphas=alphas, means=means, icf=icf, x=x,
                wishart_gamma=gamma, wishart_m=m)


def read_lstm(path):
    """Return dict(main_params (2l, 4b), extra_params (3, b), state (2l, b),
    sequence (c, b))."""
    tok = _numbers(path)
    l, c, b = int(tok[0]), int(tok[1]), int(tok[2])
    vals = np.array(tok[3:], dtype=np.float64)
    p = 0
    main = vals[p:p + 2 * l * 4 * b].reshape(2 * l, 4 * b).copy(); p += 2 * l * 4 * b
    extra = vals[p:p + 3 * b].reshape(3, b).copy(); p += 3 * b
    state = vals[p:p + 2 * l * b].reshape(2 * l, b).copy(); p += 2 * l * b
    seq = vals[p:p + c * b].reshape(c, b).copy(); p += c * b
    assert p == vals.size, (p, vals.size)
    return dict(main_params=main, extra_params=extra, state=state, sequence=seq)


def read_golden_objectives(path=None):
    """{'gmm/1k/gmm_d2_K5.txt': value, 'lstm/lstm_l2_c1024.txt': value, ...}"""
    path = path or os.path.join(DATA_DIR, "golden", "objectives.txt")
    out = {}
    with open(path) as fh:
        for line in fh:
            parts = line.split()
            if len(parts) == 2 and not line.startswith("#"):
                out[parts[0]] = float(parts[1])
    return out


def read_golden_gradient(name):
    return np.loadtxt(os.path.join(DATA_DIR, "golden", name), dtype=np.float64)


def rho(a, b):
    """ADBench's comparison: |a - b| / max(1, |a| + |b|), elementwise."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return np.abs(a - b) / np.maximum(1.0, np.abs(a) + np.abs(b))


# ---------------------------------------------------------------------------
# GMM
# ---------------------------------------------------------------------------

def gmm_objective(alphas, means, icf, x, wishart_gamma, wishart_m):
    """ADBench GMM objective (the form of ADBench's C++ reference).

    alphas (K,), means (K, d), icf (K, d(d+1)/2): the first d entries of a row
    are log-diagonal entries q of Q_k, the rest the strictly-lower part of Q_k,
    column by column.  x (n, d).  wishart_gamma float, wishart_m int.
    """
    n = x.shape[0]
    d = x.shape[1]
    K = alphas.shape[0]

    # log-diagonal -> diagonal, sums of q
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
            # qx = Q_k xc, Q_k lower triangular, built column-wise from icf
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
        # logsumexp over components, written out
        mx = main_term[0]
        for k in range(1, K):
            if main_term[k] > mx:
                mx = main_term[k]
        se = 0.0
        for k in range(K):
            se += math.exp(main_term[k] - mx)
        slse += math.log(se) + mx

    # logsumexp of the alphas
    amax = alphas[0]
    for k in range(1, K):
        if alphas[k] > amax:
            amax = alphas[k]
    asum = 0.0
    for k in range(K):
        asum += math.exp(alphas[k] - amax)
    lse_alphas = math.log(asum) + amax

    const = -n * d * 0.5 * math.log(2.0 * math.pi)
    err = const + slse - n * lse_alphas

    # Wishart prior
    nprime = d + wishart_m + 1
    lgd = 0.25 * d * (d - 1) * math.log(math.pi)
    for j in range(1, d + 1):
        lgd += math.lgamma(0.5 * nprime + 0.5 * (1 - j))
    C = nprime * d * (math.log(wishart_gamma) - 0.5 * math.log(2.0)) - lgd
    prior = 0.0
    icf_sz = icf.shape[1]
    for k in range(K):
        frob = 0.0
        for j in range(d):
            frob += qdiag[k, j] * qdiag[k, j]
        for j in range(d, icf_sz):
            frob += icf[k, j] * icf[k, j]
        prior += 0.5 * wishart_gamma * wishart_gamma * frob - wishart_m * sum_qs[k]
    return err + prior - K * C


def gmm_objective_numpy(alphas, means, icf, x, wishart_gamma, wishart_m):
    """Vectorised NumPy version of the same formula (independent check)."""
    n, d = x.shape
    K = alphas.shape[0]
    q = icf[:, :d]
    L = icf[:, d:]
    Q = np.zeros((K, d, d))
    for k in range(K):
        Q[k][np.diag_indices(d)] = np.exp(q[k])
        idx = 0
        for col in range(d):
            for row in range(col + 1, d):
                Q[k, row, col] = L[k, idx]
                idx += 1
    xc = x[:, None, :] - means[None, :, :]                  # n K d
    qx = np.einsum("kij,nkj->nki", Q, xc)
    main = alphas[None, :] + q.sum(1)[None, :] - 0.5 * (qx ** 2).sum(2)
    mx = main.max(1, keepdims=True)
    slse = np.sum(np.log(np.exp(main - mx).sum(1)) + mx[:, 0])
    am = alphas.max()
    lse_a = np.log(np.exp(alphas - am).sum()) + am
    nprime = d + wishart_m + 1
    lgd = 0.25 * d * (d - 1) * math.log(math.pi) + sum(
        math.lgamma(0.5 * nprime + 0.5 * (1 - j)) for j in range(1, d + 1))
    C = nprime * d * (math.log(wishart_gamma) - 0.5 * math.log(2.0)) - lgd
    prior = np.sum(0.5 * wishart_gamma ** 2 * ((np.exp(q) ** 2).sum(1) + (L ** 2).sum(1))
                   - wishart_m * q.sum(1))
    return (-n * d * 0.5 * math.log(2 * math.pi) + slse - n * lse_a
            + prior - K * C)


# ---------------------------------------------------------------------------
# LSTM
# ---------------------------------------------------------------------------

def _sigmoid(z):
    return 1.0 / (1.0 + math.exp(-z))


def lstm_objective(main_params, extra_params, state, sequence):
    """ADBench's diagonal LSTM loss.

    main_params (2l, 4b): per layer a weight row then a bias row, each
    [forget | ingate | outgate | change] x b.  extra_params (3, b): input
    weight, output weight, output bias.  state (2l, b): per layer hidden then
    cell (copied, not modified).  sequence (c, b): 0/1 bit-encoded characters.
    """
    nlayers = main_params.shape[0] // 2
    c = sequence.shape[0]
    b = sequence.shape[1]
    s = state.copy()
    xin = np.empty(b)
    ypred = np.empty(b)
    total = 0.0
    count = 0
    for t in range(c - 1):
        for i in range(b):
            xin[i] = sequence[t, i] * extra_params[0, i]
        for layer in range(nlayers):
            w = 2 * layer
            hrow = 2 * layer
            crow = 2 * layer + 1
            for i in range(b):
                forget = _sigmoid(xin[i] * main_params[w, i] + main_params[w + 1, i])
                ingate = _sigmoid(s[hrow, i] * main_params[w, b + i]
                                  + main_params[w + 1, b + i])
                outgate = _sigmoid(xin[i] * main_params[w, 2 * b + i]
                                   + main_params[w + 1, 2 * b + i])
                change = math.tanh(s[hrow, i] * main_params[w, 3 * b + i]
                                   + main_params[w + 1, 3 * b + i])
                s[crow, i] = s[crow, i] * forget + ingate * change
                s[hrow, i] = outgate * math.tanh(s[crow, i])
            for i in range(b):
                xin[i] = s[hrow, i]
        for i in range(b):
            ypred[i] = xin[i] * extra_params[1, i] + extra_params[2, i]
        se = 0.0
        for i in range(b):
            se += math.exp(ypred[i])
        lse = math.log(se + 2.0)
        for i in range(b):
            total += sequence[t + 1, i] * (ypred[i] - lse)
        count += b
    return -total / count


def gmm_args(data):
    return (data["alphas"], data["means"], data["icf"], data["x"],
            data["wishart_gamma"], data["wishart_m"])


def lstm_args(data):
    return (data["main_params"], data["extra_params"], data["state"], data["sequence"])


GMM_FILES = ["gmm/1k/gmm_d2_K5.txt", "gmm/1k/gmm_d10_K25.txt",
             "gmm/10k/gmm_d2_K5.txt", "gmm/10k/gmm_d10_K25.txt"]
LSTM_FILES = ["lstm/lstm_l2_c1024.txt"]


def golden_gradient_name(relpath):
    """'gmm/1k/gmm_d2_K5.txt' -> 'gmm_1k_d2_K5_J.txt'; lstm likewise."""
    parts = relpath.split("/")
    base = parts[-1][:-4]
    if parts[0] == "gmm":
        return "gmm_%s_%s_J.txt" % (parts[1], base[len("gmm_"):])
    return base + "_J.txt"
