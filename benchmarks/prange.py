"""The gradient of a `numba.prange` loop on one thread and on two: how much the parallel forward
and adjoint gain.

    python benchmarks/prange.py [--rows 40000] [--reps 15]

Two row-wise kernels, each the gradient (forward under a tape, then `tape.gradient`) of the sum of
its outputs with respect to every float argument:

* logsumexp: per-row log-sum-exp of a rows x 64 matrix (a running maximum, then a sum of exponentials);
* mlp: a per-row MLP with one hidden layer of 16 tanh units over a rows x 8 input; the weights are
  shared by every row, so their cotangents go through per-thread partial sums.

The same compiled functions run with `numba.set_num_threads(1)` and `(2)`, interleaved; each figure is
the minimum over `--reps` repetitions (the machine is shared: the minimum is the least disturbed run).
Prints the times and the ratio one thread / two threads (target, issue 17: at least 1.5x on 2 cores).
"""
import argparse
import math
import time

import numba
import numpy as np
from numba import prange

import srcad as ad


@ad.function
def logsumexp_rows(x):
    n, d = x.shape
    out = np.empty(n)
    for i in prange(n):
        m = x[i, 0]
        for j in range(1, d):
            m = max(m, x[i, j])
        s = 0.0
        for j in range(d):
            s += math.exp(x[i, j] - m)
        out[i] = m + math.log(s)
    return out


@ad.function
def mlp_rows(x, w1, b1, w2):
    n, d = x.shape
    h = w1.shape[0]
    out = np.zeros(n)
    for i in prange(n):
        hidden = np.zeros(h)
        for k in range(h):
            a = b1[k]
            for j in range(d):
                a += w1[k, j] * x[i, j]
            hidden[k] = math.tanh(a)
        y = 0.0
        for k in range(h):
            y += w2[k] * hidden[k]
        out[i] = y
    return out


def gradient(f, args):
    watched = [ad.constant(a) for a in args]
    with ad.GradientTape() as tape:
        for w in watched:
            tape.watch(w)
        y = f(*watched)
    return tape.gradient(y, watched)


def timed(f, args, threads):
    """Seconds one gradient takes on `threads` threads."""
    numba.set_num_threads(threads)
    t0 = time.perf_counter()
    gradient(f, args)
    return time.perf_counter() - t0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=40000)
    parser.add_argument("--reps", type=int, default=15)
    opts = parser.parse_args()
    if numba.config.NUMBA_NUM_THREADS < 2:
        raise SystemExit("Numba has fewer than 2 threads here (NUMBA_NUM_THREADS)")
    rng = np.random.default_rng(0)
    cases = {"logsumexp": (logsumexp_rows, (rng.normal(size=(opts.rows, 64)),)),
             "mlp": (mlp_rows, (rng.normal(size=(opts.rows, 8)), rng.normal(size=(16, 8)), rng.normal(size=16),
                                rng.normal(size=16)))}
    print(f"{'kernel':<10} {'1 thread':>10} {'2 threads':>10} {'ratio':>6}")
    for name, (f, args) in cases.items():
        for threads in (1, 2):             # compile and warm up both
            timed(f, args, threads)
        times = {1: [], 2: []}
        for _ in range(opts.reps):
            for threads in (1, 2):
                times[threads].append(timed(f, args, threads))
        one, two = min(times[1]), min(times[2])
        print(f"{name:<10} {one * 1e3:8.2f}ms {two * 1e3:8.2f}ms {one / two:5.2f}x")


if __name__ == "__main__":
    main()
