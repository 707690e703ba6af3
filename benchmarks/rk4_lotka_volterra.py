"""RK4 Lotka-Volterra: gradient / primal time ratios, and peak memory.

    python benchmarks/rk4_lotka_volterra.py [--reps 7] [--sizes 10000,100000,1000000]

Lotka-Volterra with 4 parameters (a, b, c, d):  x' = a x - b x y,
y' = d x y - c y; N steps of classic RK4 with step dt; loss = x_N^2 + y_N^2.

Timed (interleaved repetitions, median reported):
  primal     numba.njit of the plain function
  srcad      the same plain function under @ad.function: forward under a
             GradientTape + tape.gradient w.r.t. the parameters
  unchecked  srcad's gradient without index checks (@ad.function(boundscheck=False)):
             what the checks cost
  hand       a hand-written Numba adjoint (saves the N states, recomputes
             the RK4 stages in the reverse sweep): the reference
  jax/torch  optional peers, skipped when not installed

First checks that srcad's gradient equals the hand-written adjoint's.
Peak memory of the srcad gradient at the largest N is measured in a fresh
subprocess (ru_maxrss delta), compared with the bytes of the states that must
be saved (2 float64 per step).  Targets (issue 3): ratio <= 3.0, memory <= 2x.
"""

import argparse
import math
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numba  # noqa: E402

PARAMS = np.array([1.5, 1.0, 3.0, 1.0])
X0, Y0 = 1.0, 1.0


def rk4_lotka_volterra(params, x0, y0, dt, n):
    a = params[0]
    b = params[1]
    c = params[2]
    d = params[3]
    x = x0
    y = y0
    for i in range(n):
        k1x = a * x - b * x * y
        k1y = d * x * y - c * y
        x2 = x + 0.5 * dt * k1x
        y2 = y + 0.5 * dt * k1y
        k2x = a * x2 - b * x2 * y2
        k2y = d * x2 * y2 - c * y2
        x3 = x + 0.5 * dt * k2x
        y3 = y + 0.5 * dt * k2y
        k3x = a * x3 - b * x3 * y3
        k3y = d * x3 * y3 - c * y3
        x4 = x + dt * k3x
        y4 = y + dt * k3y
        k4x = a * x4 - b * x4 * y4
        k4y = d * x4 * y4 - c * y4
        x = x + dt / 6.0 * (k1x + 2.0 * k2x + 2.0 * k3x + k4x)
        y = y + dt / 6.0 * (k1y + 2.0 * k2y + 2.0 * k3y + k4y)
    return x * x + y * y


primal = numba.njit(rk4_lotka_volterra)


@numba.njit
def _stage_adjoint(px, py, kx, ky, a, b, c, d, g):
    """J(p)^T (kx, ky) and accumulation of the parameter adjoints into g."""
    g[0] += kx * px
    g[1] -= kx * px * py
    g[2] -= ky * py
    g[3] += ky * px * py
    return kx * (a - b * py) + ky * d * py, -kx * b * px + ky * (d * px - c)


@numba.njit
def hand_gradient(params, x0, y0, dt, n):
    """Hand-written adjoint: forward saving the state at each step start."""
    a, b, c, d = params[0], params[1], params[2], params[3]
    xs = np.empty(n)
    ys = np.empty(n)
    x = x0
    y = y0
    for i in range(n):
        xs[i] = x
        ys[i] = y
        k1x = a * x - b * x * y
        k1y = d * x * y - c * y
        x2 = x + 0.5 * dt * k1x
        y2 = y + 0.5 * dt * k1y
        k2x = a * x2 - b * x2 * y2
        k2y = d * x2 * y2 - c * y2
        x3 = x + 0.5 * dt * k2x
        y3 = y + 0.5 * dt * k2y
        k3x = a * x3 - b * x3 * y3
        k3y = d * x3 * y3 - c * y3
        x4 = x + dt * k3x
        y4 = y + dt * k3y
        k4x = a * x4 - b * x4 * y4
        k4y = d * x4 * y4 - c * y4
        x = x + dt / 6.0 * (k1x + 2.0 * k2x + 2.0 * k3x + k4x)
        y = y + dt / 6.0 * (k1y + 2.0 * k2y + 2.0 * k3y + k4y)
    loss = x * x + y * y
    g = np.zeros(4)
    bx = 2.0 * x
    by = 2.0 * y
    for i in range(n - 1, -1, -1):
        x = xs[i]
        y = ys[i]
        # recompute the stages
        k1x = a * x - b * x * y
        k1y = d * x * y - c * y
        x2 = x + 0.5 * dt * k1x
        y2 = y + 0.5 * dt * k1y
        k2x = a * x2 - b * x2 * y2
        k2y = d * x2 * y2 - c * y2
        x3 = x + 0.5 * dt * k2x
        y3 = y + 0.5 * dt * k2y
        k3x = a * x3 - b * x3 * y3
        k3y = d * x3 * y3 - c * y3
        x4 = x + dt * k3x
        y4 = y + dt * k3y
        # reverse
        b1x = dt / 6.0 * bx
        b1y = dt / 6.0 * by
        b2x = dt / 3.0 * bx
        b2y = dt / 3.0 * by
        b3x = dt / 3.0 * bx
        b3y = dt / 3.0 * by
        b4x = dt / 6.0 * bx
        b4y = dt / 6.0 * by
        p4x, p4y = _stage_adjoint(x4, y4, b4x, b4y, a, b, c, d, g)
        bx += p4x
        by += p4y
        b3x += dt * p4x
        b3y += dt * p4y
        p3x, p3y = _stage_adjoint(x3, y3, b3x, b3y, a, b, c, d, g)
        bx += p3x
        by += p3y
        b2x += 0.5 * dt * p3x
        b2y += 0.5 * dt * p3y
        p2x, p2y = _stage_adjoint(x2, y2, b2x, b2y, a, b, c, d, g)
        bx += p2x
        by += p2y
        b1x += 0.5 * dt * p2x
        b1y += 0.5 * dt * p2y
        p1x, p1y = _stage_adjoint(x, y, b1x, b1y, a, b, c, d, g)
        bx += p1x
        by += p1y
    return loss, g


def dt_for(n):
    # integrate to T = 10 whatever the number of steps
    return 10.0 / n


def srcad_gradient(f, params, n):
    import srcad as ad
    p = ad.constant(params)
    with ad.GradientTape() as tape:
        tape.watch(p)
        loss = f(p, X0, Y0, dt_for(n), n)
    return loss, tape.gradient(loss, p)


def jax_loss(p, n, dt, unroll=1):
    """The same loss in JAX, its loop a `lax.fori_loop` (what JAX compiles well; `unroll` steps per iteration
    of the loop XLA compiles); needs jax_enable_x64."""
    import jax
    import jax.numpy as jnp

    def step(i, s):
        x, y = s
        f = lambda x, y: (p[0] * x - p[1] * x * y, p[3] * x * y - p[2] * y)  # noqa: E731
        k1 = f(x, y)
        k2 = f(x + 0.5 * dt * k1[0], y + 0.5 * dt * k1[1])
        k3 = f(x + 0.5 * dt * k2[0], y + 0.5 * dt * k2[1])
        k4 = f(x + dt * k3[0], y + dt * k3[1])
        return (x + dt / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0]),
                y + dt / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1]))
    x, y = jax.lax.fori_loop(0, n, step, (jnp.float64(X0), jnp.float64(Y0)), unroll=unroll)
    return x * x + y * y


def torch_gradient(params, n):
    """The gradient by PyTorch's eager autograd: a graph of scalar tensors, some 40 nodes per step."""
    import torch

    p = torch.tensor(params, requires_grad=True, dtype=torch.float64)
    a, b, c, d = p[0], p[1], p[2], p[3]
    x = torch.tensor(X0, dtype=torch.float64)
    y = torch.tensor(Y0, dtype=torch.float64)
    dt = dt_for(n)
    for _ in range(n):
        f = lambda x, y: (a * x - b * x * y, d * x * y - c * y)  # noqa: E731
        k1 = f(x, y)
        k2 = f(x + 0.5 * dt * k1[0], y + 0.5 * dt * k1[1])
        k3 = f(x + 0.5 * dt * k2[0], y + 0.5 * dt * k2[1])
        k4 = f(x + dt * k3[0], y + dt * k3[1])
        x, y = (x + dt / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0]),
                y + dt / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1]))
    return torch.autograd.grad(x * x + y * y, p)[0].numpy()


def _peers():
    peers = {}
    try:
        import jax
        import jax.numpy as jnp
        jax.config.update("jax_enable_x64", True)

        g = jax.jit(jax.grad(jax_loss), static_argnums=(1,))
        peers["jax jit(grad) fori_loop"] = lambda n: np.asarray(
            g(jnp.asarray(PARAMS), n, dt_for(n)).block_until_ready())
    except Exception:
        pass
    try:
        import torch  # noqa: F401

        peers["torch eager"] = lambda n: None if n > 20000 else torch_gradient(PARAMS, n)  # graph too large
    except Exception:
        pass
    return peers


def _timeit(fn):
    t = time.perf_counter()
    r = fn()
    return time.perf_counter() - t, r


def _status_kb(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return None


def memory_child(n):
    """Run in a fresh process: print the peak-RSS increase (bytes) during one
    srcad gradient at N=n, and tracemalloc's peak (NumPy/Python allocations).

    Linux: the peak RSS (VmHWM) is reset through /proc/self/clear_refs after
    compiling on a small N, so the compile's own peak does not hide the
    gradient's; elsewhere ru_maxrss is used (then a compile peak can mask it).
    """
    import gc
    import resource
    import tracemalloc
    import srcad as ad
    f = ad.function(rk4_lotka_volterra)
    unchecked = ad.function(rk4_lotka_volterra, boundscheck=False)
    srcad_gradient(f, PARAMS, 100)               # compile on a small N
    gc.collect()
    method = "VmHWM reset"
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        rss0 = _status_kb("VmRSS")
    except OSError:
        method = "ru_maxrss"
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    tracemalloc.start()
    loss, g = srcad_gradient(f, PARAMS, n)
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    if method == "VmHWM reset":
        rss1 = _status_kb("VmHWM")
    else:
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print("MEM", rss1 - rss0, traced_peak, method.replace(" ", "_"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--memory-child", type=int, default=0)
    ap.add_argument("--no-memory", action="store_true")
    args = ap.parse_args()
    if args.memory_child:
        memory_child(args.memory_child)
        return
    sizes = [int(float(s)) for s in args.sizes.split(",")]

    import srcad as ad
    f = ad.function(rk4_lotka_volterra)
    unchecked = ad.function(rk4_lotka_volterra, boundscheck=False)

    # correctness first: srcad vs the hand-written adjoint
    for n in (100, 1000):
        l_ref, g_ref = hand_gradient(PARAMS, X0, Y0, dt_for(n), n)
        loss, g = srcad_gradient(f, PARAMS, n)
        g = np.asarray(g.numpy())
        assert abs(float(loss.numpy()) - l_ref) <= 1e-12 * abs(l_ref), (loss, l_ref)
        assert np.allclose(g, g_ref, rtol=1e-10, atol=0), ("srcad gradient != hand adjoint", n, g, g_ref)
        # and the hand adjoint vs central differences (of the njit primal)
        h = 1e-6
        fd = np.array([(primal(PARAMS + h * e, X0, Y0, dt_for(n), n)
                        - primal(PARAMS - h * e, X0, Y0, dt_for(n), n)) / (2 * h) for e in np.eye(4)])
        assert np.allclose(g_ref, fd, rtol=1e-5, atol=1e-7), ("hand adjoint != FD", g_ref, fd)
    print("check: srcad gradient == hand-written adjoint (rtol 1e-10) at N=100, 1000; hand == FD")

    peers = _peers()
    print("\nRK4 Lotka-Volterra, median of %d interleaved reps (seconds; ratio = gradient / njit primal)"
          % args.reps)
    hdr = "%9s %11s %11s %7s %11s %7s %11s %7s" % ("N", "primal", "srcad grad", "ratio", "unchecked", "checks",
                                                  "hand adj", "ratio")
    for name in peers:
        hdr += " %26s" % (name + " (ratio)")
    print(hdr)
    for n in sizes:
        dt = dt_for(n)
        primal(PARAMS, X0, Y0, dt, n)
        hand_gradient(PARAMS, X0, Y0, dt, n)
        srcad_gradient(f, PARAMS, n)
        srcad_gradient(unchecked, PARAMS, n)
        times = {"primal": [], "srcad": [], "unchecked": [], "hand": []}
        times.update({p: [] for p in peers})
        for _ in range(args.reps):
            times["primal"].append(_timeit(lambda: primal(PARAMS, X0, Y0, dt, n))[0])
            times["srcad"].append(_timeit(lambda: srcad_gradient(f, PARAMS, n))[0])
            times["unchecked"].append(_timeit(lambda: srcad_gradient(unchecked, PARAMS, n))[0])
            times["hand"].append(_timeit(lambda: hand_gradient(PARAMS, X0, Y0, dt, n))[0])
        for p, fn in peers.items():
            if fn(n) is None:       # warm-up; None: skipped at this size
                times[p] = None
                continue
            for _ in range(max(1, args.reps // 3)):
                times[p].append(_timeit(lambda: fn(n))[0])
        med = {k: (float(np.median(v)) if v else None) for k, v in times.items()}
        row = "%9d %11.3e %11.3e %7.2f %11.3e %7.3f %11.3e %7.2f" % (
            n, med["primal"], med["srcad"], med["srcad"] / med["primal"], med["unchecked"],
            med["srcad"] / med["unchecked"], med["hand"], med["hand"] / med["primal"])
        for p in peers:
            row += " %26s" % ("skipped" if med[p] is None else "%.3e (%.0f)" % (med[p], med[p] / med["primal"]))
        print(row)
    if not peers:
        print("(peers jax / torch not installed: skipped)")

    if not args.no_memory:
        n = max(sizes)
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--memory-child", str(n)],
                             capture_output=True, text=True, check=True).stdout
        line = [ln for ln in out.splitlines() if ln.startswith("MEM")][0].split()
        rss, traced, method = int(line[1]), int(line[2]), line[3]
        need = 2 * 8 * n
        print("\npeak memory of the srcad gradient at N=%d (fresh process): peak RSS increase %.1f MB "
              "(%s), tracemalloc peak %.1f MB; states that must be saved (x, y per step): %.1f MB; "
              "ratio peak-RSS / states %.2f, tracemalloc / states %.2f"
              % (n, rss / 1e6, method, traced / 1e6, need / 1e6, rss / need, traced / need))


if __name__ == "__main__":
    main()
