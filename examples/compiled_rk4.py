"""@ad.function: the gradient of a loop-heavy integrator, compiled.

An RK4 integration of the Lotka-Volterra equations, written as plain Python
loops.  srcad parses it, generates a forward (the primal that saves what the
reverse sweep needs) and an adjoint, compiles both with Numba, and records one
call as one node on the tape.  The gradient is checked against central finite
differences and timed against the compiled primal.

Run:  python examples/compiled_rk4.py
"""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import srcad as ad  # noqa: E402


def lv(a, b, c, d, x, y):
    """The Lotka-Volterra vector field (a helper: srcad follows and inlines it)."""
    return a * x - b * x * y, d * x * y - c * y


@ad.function
def final_energy(params, x, y, dt, n):
    """x^2 + y^2 after n RK4 steps of size dt."""
    a, b, c, d = params[0], params[1], params[2], params[3]
    for _ in range(n):
        k1x, k1y = lv(a, b, c, d, x, y)
        k2x, k2y = lv(a, b, c, d, x + 0.5 * dt * k1x, y + 0.5 * dt * k1y)
        k3x, k3y = lv(a, b, c, d, x + 0.5 * dt * k2x, y + 0.5 * dt * k2y)
        k4x, k4y = lv(a, b, c, d, x + dt * k3x, y + dt * k3y)
        x = x + dt / 6.0 * (k1x + 2.0 * k2x + 2.0 * k3x + k4x)
        y = y + dt / 6.0 * (k1y + 2.0 * k2y + 2.0 * k3y + k4y)
    return x * x + y * y


def gradient(params, n):
    with ad.GradientTape() as tape:
        loss = final_energy(params, 1.0, 1.0, 0.001, n)
    return loss, tape.gradient(loss, params)


def best_of(fn, repeats=5):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    params = ad.Variable(np.array([1.5, 1.0, 3.0, 1.0]))
    n = 10_000
    start = time.perf_counter()
    loss, grad = gradient(params, n)
    print(f"first gradient (includes compiling, or loading it from the disk cache): {time.perf_counter() - start:.2f} s")
    print("loss:", float(loss), " d loss / d params:", grad.numpy())

    plain = final_energy.python_function
    p, h = params.numpy(), 1e-6
    fd = [(plain(p + h * e, 1.0, 1.0, 0.001, n) - plain(p - h * e, 1.0, 1.0, 0.001, n)) / (2 * h) for e in np.eye(4)]
    print("central finite differences:   ", np.array(fd))
    print("max relative difference:", np.max(np.abs(grad.numpy() - fd) / np.abs(fd)))

    primal = best_of(lambda: final_energy(p, 1.0, 1.0, 0.001, n))
    tape_gradient = best_of(lambda: gradient(params, n))
    print(f"compiled primal {primal * 1e6:.0f} us, tape gradient {tape_gradient * 1e6:.0f} us: "
          f"ratio {tape_gradient / primal:.2f}")
    adjoint = final_energy.source("adjoint").splitlines()
    loop = next(i for i, line in enumerate(adjoint) if line.lstrip().startswith("for "))
    print("\nthe reverse sweep of the generated adjoint (all of it: ad.show_source(final_energy, 'adjoint')):")
    print("\n".join(adjoint[loop:loop + 24]))


if __name__ == "__main__":
    main()
