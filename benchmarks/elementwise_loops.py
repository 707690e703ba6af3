"""Array statements as loops over their elements (`srcad/compiler/opt/elementwise.py`) against the same
gradients compiled as NumPy operations, each making an array (issue 21).

    taskset -c 0 python benchmarks/elementwise_loops.py [--reps 7] [--block 0.2]

The CPU target, and a target that differs only by its policy (`elementwise_loops=False`), compile the
same functions; their gradients are checked bit for bit equal, then timed interleaved (median of
`--reps` blocks). Rows: ADBench LSTM in vector form (`benchmarks/workloads/lstm.py`'s `lstm_matmul`:
vectors of 14 inside a loop over characters), and the ADBench GMM written as the paper reads (small
arrays inside a loop over points) and the NumPy way (n x d arrays inside a loop over components).
"""
import argparse
import dataclasses
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

import numpy as np  # noqa: E402

import srcad as ad  # noqa: E402
from benchmarks.harness import adbench_models, adbench_path  # noqa: E402
from benchmarks.timing import interleaved  # noqa: E402
from benchmarks.workloads.gmm import gmm_natural_loops  # noqa: E402
from benchmarks.workloads.lstm import lstm_matmul  # noqa: E402
from benchmarks.gmm_vectorised import gmm_vectorised  # noqa: E402
from srcad.compiler.ad.saving import CPU  # noqa: E402
from srcad.compiler.backends import base, numba_cpu  # noqa: E402


class NumpyOperations(numba_cpu.NumbaCPU):
    name = "cpu-numpy-operations"
    policy = dataclasses.replace(CPU, name=name, elementwise_loops=False)


base.register(NumpyOperations())


def rows():
    """(name, function, arguments, how many leading arguments are differentiated)."""
    M = adbench_models()
    for l, c in ((2, 1024), (4, 1024)):
        a = M.lstm_args(M.read_lstm(adbench_path(f"lstm/lstm_l{l}_c{c}.txt")))
        yield f"LSTM vector form l{l} c{c}", lstm_matmul, a, 2
    for size, d, K in (("1k", 2, 5), ("10k", 2, 5), ("1k", 10, 25)):
        a = M.gmm_args(M.read_gmm(adbench_path(f"gmm/{size}/gmm_d{d}_K{K}.txt")))
        yield f"GMM natural loops {size} d{d} K{K}", gmm_natural_loops, a, 3
        yield f"GMM vectorised {size} d{d} K{K}", gmm_vectorised, a, 3


def gradient_step(f, args, active):
    def step():
        params = [ad.constant(v) for v in args[:active]]
        with ad.GradientTape() as tape:
            tape.watch(params)
            y = f(*params, *args[active:])
        return [g.numpy() for g in tape.gradient(y, params)]
    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--block", type=float, default=0.2)
    opts = parser.parse_args()
    print("| row | NumPy operations | loops | speed-up |\n| --- | --- | --- | --- |")
    for name, fn, args, active in rows():
        steps = {t: gradient_step(ad.function(fn, target=t), args, active) for t in ("cpu", NumpyOperations.name)}
        for g, h in zip(steps["cpu"](), steps[NumpyOperations.name]()):
            if not np.array_equal(g, h):
                raise SystemExit(f"{name}: the gradients differ (max {np.max(np.abs(g - h)):.3g})")
        t = interleaved(steps, opts.reps, opts.block)
        before, after = t[NumpyOperations.name], t["cpu"]
        print(f"| {name} | {before * 1e3:.3g} ms | {after * 1e3:.3g} ms | {before / after:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
