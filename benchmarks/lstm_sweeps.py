"""ADBench LSTM in loops: srcad's compiled primal, its taped forward (the call under a tape, which saves
what the adjoint reads) and the whole gradient, timed apart, so that what saving costs shows.

    taskset -c 1 python benchmarks/lstm_sweeps.py [--size l2_c1024] [--reps 7]

Minimum and median over `--reps` blocks of about 0.3 s each, in milliseconds. Run it in two trees (a
`git worktree` of each commit, each with its own SRCAD_CACHE_DIR) to compare them.
"""
import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

import srcad as ad  # noqa: E402
from benchmarks.harness import adbench_models, adbench_path  # noqa: E402


def seconds(fn, reps):
    """(min, median) of the mean time of one call over `reps` blocks of about 0.3 s."""
    fn()
    blocks = []
    for _ in range(reps):
        start, calls = time.perf_counter(), 0
        while time.perf_counter() - start < 0.3:
            fn()
            calls += 1
        blocks.append((time.perf_counter() - start) / calls)
    return min(blocks), float(np.median(blocks))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="l2_c1024")
    parser.add_argument("--reps", type=int, default=7)
    opts = parser.parse_args()
    M = adbench_models()
    args = M.lstm_args(M.read_lstm(adbench_path(f"lstm/lstm_{opts.size}.txt")))
    f = ad.function(M.lstm_objective)
    main_params, extra = ad.Variable(args[0]), ad.Variable(args[1])

    def taped():
        with ad.GradientTape() as tape:
            loss = f(main_params, extra, args[2], args[3])
        return tape, loss

    def gradient():
        tape, loss = taped()
        return tape.gradient(loss, [main_params, extra])

    for name, fn in (("primal", lambda: f(*args)), ("taped forward", taped), ("gradient", gradient)):
        best, median = seconds(fn, opts.reps)
        print(f"LSTM loops {opts.size} {name:14s} min {best * 1e3:.3f} ms  median {median * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
