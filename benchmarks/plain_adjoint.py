"""The adjoint without zero-cotangent guards against the guarded one (`srcad/compiler/opt/plain_adjoint.py`),
in one process, interleaved, on the ADBench GMM and LSTM data: the compiled forward and then each adjoint,
as `Transformed.adjoint` runs them, and both results compared first.

    taskset -c 1 python benchmarks/plain_adjoint.py [--reps 7]

Per row: the objective (srcad's compiled primal), forward + guarded adjoint, forward + plain adjoint
(min and median over `--reps` interleaved blocks of about 0.1 s), and the two gradients' largest
difference relative to the largest entry.
"""
import argparse
import os
import sys

import numba
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from benchmarks.harness import adbench_models, adbench_path  # noqa: E402
from benchmarks.timing import interleaved_samples  # noqa: E402
from benchmarks.workloads.gmm import DATASETS, gmm_natural_loops  # noqa: E402
from srcad.compiler import transform  # noqa: E402

LSTM_SIZES = ("l2_c1024", "l4_c1024")


def cases():
    """(label, objective, arguments, active flags) of each row."""
    M = adbench_models()
    for size, d, K in DATASETS:
        a = M.gmm_args(M.read_gmm(adbench_path(f"gmm/{size}/gmm_d{d}_K{K}.txt")))
        for name, f in (("loops", M.gmm_objective), ("natural loops", gmm_natural_loops)):
            yield f"GMM {size} d{d} K{K}, {name}", f, a, (True, True, True, False, False, False)
    for size in LSTM_SIZES:
        a = M.lstm_args(M.read_lstm(adbench_path(f"lstm/lstm_{size}.txt")))
        yield f"LSTM {size}, loops", M.lstm_objective, a, (True, True, False, False)


def row(label, f, args, active, reps):
    t = transform(f, [numba.typeof(v) for v in args], active)

    def gradient(adjoint):
        def step():
            _, saved = t.forward(*args)
            return adjoint(*args, *saved.values if hasattr(saved, "values") else saved, 1.0)
        return step
    variants = {"objective": lambda: t.primal(*args), "guarded": gradient(t._adjoint),
                "plain": gradient(t._plain_adjoint)}
    variants["objective"]()                          # compiled on first call: not timed
    guarded, plain = variants["guarded"](), variants["plain"]()
    diff = max(float(np.max(np.abs(p - g)) / max(np.max(np.abs(g)), 1e-300)) for p, g in zip(plain, guarded))
    times = interleaved_samples(variants, reps, 0.1)
    cell = {k: f"{min(v) * 1e3:.3g} / {np.median(v) * 1e3:.3g} ms" for k, v in times.items()}
    ratio = np.median(times["plain"]) / np.median(times["guarded"])
    print(f"| {label} | {cell['objective']} | {cell['guarded']} | {cell['plain']} | {ratio:.2f} | {diff:.1e} |",
          flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    opts = parser.parse_args()
    print("| row | objective, min / median | forward + guarded adjoint | forward + plain adjoint | plain / guarded "
          "(medians) | max difference |")
    print("| --- | --- | --- | --- | --- | --- |")
    for case in cases():
        row(*case, opts.reps)


if __name__ == "__main__":
    main()
