"""Time to the first gradient of the ADBench GMM objective in a fresh process.

    python benchmarks/compile_time.py [--runs 2]

Cold: a fresh subprocess with ``SRCAD_CACHE_DIR`` pointing to an empty
temporary directory (and ``NUMBA_CACHE_DIR`` to one of its subfolders, so no
earlier Numba cache helps).  Warm: a second fresh subprocess with the same
directories.  Reported per process: the import of srcad (and NumPy), and the
first ``@ad.function`` gradient (transform + compile + run, or cache load +
run) of gmm_objective on gmm_1k_d2_K5.  Targets (issue 3): cold < 5 s,
cached < 0.5 s (first gradient).
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
t0 = time.perf_counter()
sys.path.insert(0, %(root)r)
sys.path.insert(0, os.path.join(%(root)r, "tests", "compiler"))
import numpy as np
import srcad as ad
import adbench_models as M
t_import = time.perf_counter() - t0
data = M.read_gmm(os.path.join(M.DATA_DIR, "gmm/1k/gmm_d2_K5.txt"))
a = M.gmm_args(data)
t1 = time.perf_counter()
f = ad.function(M.gmm_objective)
alphas, means, icf = (ad.constant(v) for v in a[:3])
with ad.GradientTape() as tape:
    tape.watch([alphas, means, icf])
    err = f(alphas, means, icf, *a[3:])
g = tape.gradient(err, [alphas, means, icf])
t_first = time.perf_counter() - t1
t2 = time.perf_counter()
with ad.GradientTape() as tape:
    tape.watch([alphas, means, icf])
    err = f(alphas, means, icf, *a[3:])
g = tape.gradient(err, [alphas, means, icf])
t_second = time.perf_counter() - t2
J = np.concatenate([np.asarray(x.numpy()).ravel() for x in g])
ok = bool(np.max(M.rho(J, M.read_golden_gradient("gmm_1k_d2_K5_J.txt"))) < 1e-8)
print("RESULT " + json.dumps(dict(imp=t_import, first=t_first, second=t_second, ok=ok,
                                  total=time.perf_counter() - t0)))
"""


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
    print("first gradient of GMM (1k, d2 K5) in a fresh process (seconds)")
    print("%4s %6s %9s %13s %14s %12s %6s" % ("run", "cache", "import", "first grad", "second grad",
                                              "process tot", "ok"))
    for r in range(args.runs):
        d = tempfile.mkdtemp(prefix="srcad_cache_bench_")
        try:
            env = dict(os.environ, SRCAD_CACHE_DIR=d, NUMBA_CACHE_DIR=os.path.join(d, "numba"))
            for label in ("cold", "warm"):
                res = run_child(env)
                print("%4d %6s %9.3f %13.3f %14.4f %12.3f %6s" % (
                    r, label, res["imp"], res["first"], res["second"], res["total"], res["ok"]))
        finally:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
