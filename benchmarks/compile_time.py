"""Time to the first gradient of the ADBench GMM objective in a fresh process.

    python benchmarks/compile_time.py [--runs 2]

Each run makes a new, empty cache directory and starts two fresh processes:

* cold: ``SRCAD_CACHE_DIR`` empty (and ``NUMBA_CACHE_DIR`` a subfolder of it,
  so no earlier Numba cache helps): generate, type and compile everything;
* warm: a second process with the same directories: load from the disk cache.

The first gradient (``f(...)`` under a tape, then ``tape.gradient``) of
gmm_objective on gmm_1k_d2_K5 is split into its phases:

* numba:     importing the compiler and Numba (lazy: on the first compiled call)
* transform: parse, normalize, type the primal, generate forward and adjoint
             (cold), or find them in the disk cache (warm)
* forward:   first call of the compiled forward (compile or cache load, + run;
             cold, this includes initialising Numba's CPU target, ~0.3 s)
* adjoint:   first call of the compiled adjoint (compile or cache load, + run)
* first grad: the sum, i.e. the time to the first gradient after ``import srcad``

and also reported: ``import`` (numpy + srcad), ``2nd grad`` (the same gradient
again: run time only), and ``primal`` (the first plain call outside a tape,
which compiles or loads the plain primal lazily). Targets (issue 3): first grad
cold < 5 s, warm < 0.5 s.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))

CHILD = r"""
import json, os, sys, time
clock = time.perf_counter
t0 = clock()
sys.path.insert(0, %(root)r)
sys.path.insert(0, os.path.join(%(root)r, "tests", "compiler"))
import numpy as np
import srcad as ad
t_import = clock() - t0
import adbench_models as M
from srcad.function import _argument_value
data = M.read_gmm(os.path.join(M.DATA_DIR, "gmm/1k/gmm_d2_K5.txt"))
a = M.gmm_args(data)
f = ad.function(M.gmm_objective)
alphas, means, icf = (ad.constant(v) for v in a[:3])
args = (alphas, means, icf, *a[3:])
T = [clock()]
import srcad.compiler.driver                           # numba and the compiler
T.append(clock())
f._transform(tuple(_argument_value(v) for v in args), (True,) * 3 + (False,) * 3)
T.append(clock())
with ad.GradientTape() as tape:                        # same call path as a user's
    tape.watch([alphas, means, icf])
    err = f(*args)
T.append(clock())
g = tape.gradient(err, [alphas, means, icf])
T.append(clock())
with ad.GradientTape() as tape:
    tape.watch([alphas, means, icf])
    err2 = f(*args)
g2 = tape.gradient(err2, [alphas, means, icf])
T.append(clock())
plain = f(*args)
T.append(clock())
J = np.concatenate([np.asarray(x.numpy()).ravel() for x in g])
ok = bool(np.max(M.rho(J, M.read_golden_gradient("gmm_1k_d2_K5_J.txt"))) < 1e-8)
ok = ok and abs(float(plain) - float(err)) <= 1e-12 * max(1.0, abs(float(err)))
d = [T[i + 1] - T[i] for i in range(len(T) - 1)]
print("RESULT " + json.dumps(dict(imp=t_import, numba=d[0], transform=d[1], forward=d[2], adjoint=d[3],
                                  first=T[4] - T[0], second=d[4], primal=d[5], ok=ok)))
"""

COLUMNS = [("imp", "import"), ("numba", "numba"), ("transform", "transform"), ("forward", "forward"),
           ("adjoint", "adjoint"), ("first", "FIRST GRAD"), ("second", "2nd grad"), ("primal", "primal")]


def run_child(env):
    out = subprocess.run([sys.executable, "-c", CHILD % {"root": ROOT}], env=env,
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError("child failed:\n" + out.stderr[-3000:])
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2, help="cold/warm pairs, each with a new cache dir")
    args = ap.parse_args()
    print("first gradient of GMM (1k, d2 K5) in a fresh process, seconds (targets: cold < 5, warm < 0.5)")
    print("%-9s" % "run" + "".join("%11s" % title for _, title in COLUMNS) + "%5s" % "ok")
    results = {"cold": [], "warm": []}
    for r in range(args.runs):
        d = tempfile.mkdtemp(prefix="srcad_cache_bench_")
        try:
            env = dict(os.environ, SRCAD_CACHE_DIR=d, NUMBA_CACHE_DIR=os.path.join(d, "numba"))
            for label in ("cold", "warm"):
                res = run_child(env)
                results[label].append(res)
                print("%-9s" % f"{r} {label}" + "".join("%11.3f" % res[k] for k, _ in COLUMNS)
                      + "%5s" % ("yes" if res["ok"] else "NO"))
        finally:
            shutil.rmtree(d, ignore_errors=True)
    for label, rows in results.items():
        firsts = sorted(row["first"] for row in rows)
        print(f"{label}: first gradient best {firsts[0]:.3f} s, median {firsts[len(firsts) // 2]:.3f} s "
              f"over {len(firsts)} run(s)")


if __name__ == "__main__":
    main()
