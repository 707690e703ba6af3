"""The functional API's cost over the compiled code it calls (issue 19's targets).

* ``overhead``: ``ad.value_and_grad(f)(x)`` of a compiled function of a
  10-element input, against calling its compiled forward and adjoint directly
  (what the functional API calls); the difference is the API's per-call cost.
* ``hessian``: ``ad.hessian(f)(x)`` of a compiled function of n = 4 and
  n = 100 inputs, against one ``ad.hvp(f, x, v)``: the Hessian in units of
  Hessian-vector products (target: at most 1.5 n).

Interleaved: every repetition times one block of each variant in turn; the
table shows medians. Before timing, each variant's result is checked against
the other (the direct gradient against ``value_and_grad``'s, the Hessian's
columns against ``hvp`` of the unit vectors).

Run:  python benchmarks/functional.py [--reps 15] [--block 0.05]
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import srcad as ad  # noqa: E402
from timing import interleaved  # noqa: E402


@ad.function
def chain_energy(x):
    """A loop over neighbours: sum of (x[i+1] - x[i]^2)^2 + cos(x[i])."""
    total = 0.0
    for i in range(x.shape[0] - 1):
        d = x[i + 1] - x[i] * x[i]
        total += d * d + np.cos(x[i])
    return total


def overhead_case(reps, block):
    x = np.linspace(-1.0, 1.0, 10)
    vg = ad.value_and_grad(chain_energy)
    value, grad = vg(x)
    active = (True,)
    transformed = chain_energy._transform((x,), active)

    def direct():
        out, saved = transformed.forward(x)
        return out, transformed.adjoint(x, saved, 1.0)
    out, (g,) = direct()
    np.testing.assert_allclose(g, grad, rtol=1e-12)
    assert out == value
    t = interleaved({"value_and_grad": lambda: vg(x), "forward+adjoint": direct}, reps, block)
    print(f"overhead, n = 10: value_and_grad {t['value_and_grad'] * 1e6:8.2f} us, compiled forward+adjoint "
          f"{t['forward+adjoint'] * 1e6:8.2f} us, per-call overhead "
          f"{(t['value_and_grad'] - t['forward+adjoint']) * 1e6:6.2f} us (target <= 10 us)")


def hessian_case(n, reps, block):
    x = np.linspace(-1.0, 1.0, n)
    v = np.ones(n)
    H = ad.hessian(chain_energy)(x)
    columns = np.stack([ad.hvp(chain_energy, x, e) for e in np.eye(n)], axis=1)
    np.testing.assert_allclose(H, columns, rtol=1e-10, atol=1e-12)
    t = interleaved({"hessian": lambda: ad.hessian(chain_energy)(x), "hvp": lambda: ad.hvp(chain_energy, x, v)},
                    reps, block)
    ratio = t["hessian"] / t["hvp"]
    print(f"hessian, n = {n:3d}: {t['hessian'] * 1e3:9.3f} ms, one hvp {t['hvp'] * 1e3:7.3f} ms, hessian = "
          f"{ratio:6.1f} hvp = {ratio / n:4.2f} n hvp (target <= 1.5 n)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--block", type=float, default=0.05, help="seconds per timed block")
    args = parser.parse_args()
    overhead_case(args.reps, args.block)
    for n in (4, 100):
        hessian_case(n, args.reps, args.block)


if __name__ == "__main__":
    main()
