"""ADBench GMM: gradient / objective time, both compiled.

    python benchmarks/gmm.py [--reps 5] [--only d2_K5,d10_K25,d64_K25]

Objective: ``tests/compiler/adbench_models.gmm_objective`` (loop-style).
  objective  numba.njit of that plain function, and srcad's compiled primal
             (the decorated function called outside a tape)
  gradient   @ad.function forward under a GradientTape + tape.gradient
             w.r.t. alphas, means, icf
  checks     srcad's objective and gradient with index checks / without them
             (@ad.function(boundscheck=False)): what the checks cost
Ratio = gradient / njit objective (target <= 5; ADBench's published ratios:
hand-written C++ 1.9-7.2, Tapenade 3.7-15.5).  Datasets: 1k and 10k points,
d2 K5 and d10 K25, and d64 K25 at 1k (read from ../shared/anchors/adbench,
not copied into the project).  Where a golden gradient exists the gradient is
checked first (rho < 1e-8).  Repetitions are interleaved, medians reported.
"""

import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "compiler"))

import numba  # noqa: E402

import adbench_models as M  # noqa: E402

DATASETS = [("1k", "d2_K5"), ("1k", "d10_K25"), ("1k", "d64_K25"),
            ("10k", "d2_K5"), ("10k", "d10_K25")]


def path_of(size, name):
    rel = "gmm/%s/gmm_%s.txt" % (size, name)
    p = os.path.join(M.DATA_DIR, rel)
    if not os.path.exists(p):
        p = os.path.join(M.ANCHOR_DIR, rel)
    return rel, p


def command_line(reps):
    """The options `--reps` (default `reps`) and `--only d2_K5,...` (datasets by name; all by default)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=reps)
    ap.add_argument("--only", default="")
    return ap.parse_args()


def datasets(only):
    """(size, name, relative path, path) of each dataset named in `only` (a comma list; empty: all) that is on
    disk; a line for each one missing."""
    chosen = set(filter(None, only.split(",")))
    for size, name in DATASETS:
        if chosen and name not in chosen:
            continue
        rel, p = path_of(size, name)
        if not os.path.exists(p):
            print("%5s %8s missing %s" % (size, name, p))
            continue
        yield size, name, rel, p


def main():
    args = command_line(5)

    import srcad as ad
    njit_obj = numba.njit(M.gmm_objective)
    f = ad.function(M.gmm_objective)
    unchecked = ad.function(M.gmm_objective, boundscheck=False)

    def grad(a, fn=f):
        alphas, means, icf = (ad.constant(v) for v in a[:3])
        with ad.GradientTape() as tape:
            tape.watch([alphas, means, icf])
            err = fn(alphas, means, icf, *a[3:])
        return err, tape.gradient(err, [alphas, means, icf])

    print("ADBench GMM, median of %d interleaved reps (seconds)" % args.reps)
    print("%5s %8s %7s %11s %11s %11s %8s %8s %8s %8s" % ("n", "d_K", "params", "njit obj", "srcad obj",
                                                          "srcad grad", "grad/obj", "obj chk", "grad chk", "check"))
    for size, name, rel, p in datasets(args.only):
        data = M.read_gmm(p)
        a = M.gmm_args(data)
        nparams = a[0].size + a[1].size + a[2].size
        # warm up (compile) and check
        obj = njit_obj(*a)
        f(*a)
        unchecked(*a)
        grad(a, unchecked)
        err, g = grad(a)
        check = "-"
        gname = M.golden_gradient_name(rel)
        if os.path.exists(os.path.join(M.DATA_DIR, "golden", gname)):
            J = np.concatenate([np.asarray(x.numpy()).ravel() for x in g])
            r = float(np.max(M.rho(J, M.read_golden_gradient(gname))))
            check = "ok" if r < 1e-8 else "rho=%.1e" % r
        else:
            check = "obj ok" if float(M.rho(float(err.numpy()), obj)) < 1e-8 else "obj BAD"
        t = {"njit": [], "srcad_obj": [], "grad": [], "obj_unchecked": [], "grad_unchecked": []}
        for _ in range(args.reps):
            s = time.perf_counter(); njit_obj(*a); t["njit"].append(time.perf_counter() - s)
            s = time.perf_counter(); f(*a); t["srcad_obj"].append(time.perf_counter() - s)
            s = time.perf_counter(); unchecked(*a); t["obj_unchecked"].append(time.perf_counter() - s)
            s = time.perf_counter(); grad(a); t["grad"].append(time.perf_counter() - s)
            s = time.perf_counter(); grad(a, unchecked); t["grad_unchecked"].append(time.perf_counter() - s)
        med = {k: float(np.median(v)) for k, v in t.items()}
        print("%5s %8s %7d %11.3e %11.3e %11.3e %8.2f %8.3f %8.3f %8s" % (
            size, name, nparams, med["njit"], med["srcad_obj"], med["grad"],
            med["grad"] / med["njit"], med["srcad_obj"] / med["obj_unchecked"],
            med["grad"] / med["grad_unchecked"], check))


if __name__ == "__main__":
    main()
