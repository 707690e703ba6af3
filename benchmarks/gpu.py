"""GPU workloads: differentiated kernels (`@ad.kernel`) against hand-written numba.cuda kernels and JAX.

    python benchmarks/gpu.py [--reps 20] [--quick]

Needs a GPU (and the `cuda` extra); without one it says so and stops. Every workload first checks that
srcad's gradient agrees with the hand-written adjoint (and JAX where it runs) to 1e-8 relative (float64),
then times, interleaved, minimum of `--reps`:

* kernel time: the generated forward and adjoint kernels (CUDA events, `launch.kernel_times`) against
  the hand-written ones on device arrays;
* end to end: a launch under a tape and `tape.gradient` on host arrays (srcad moves the arrays to the
  device and back around each kernel), against JAX's `jit(grad)` (arrays on the device).

Workloads: an ensemble of Lotka-Volterra systems integrated by RK4 in each thread (65,536 x 1000 steps),
a gather `w * sin(x[idx[i]])` (1e7 from 1e6, loss sum(out^2)), softplus `a * log(1 + exp(x))` over
1e8 float32 (as a kernel, and as a scalar function under `@ad.function(target="cuda")` against JAX's fused
`value_and_grad`), a tiny launch (1e3 elements), and a device copy of 1e8 float32 for the bandwidth.
"""
import argparse
import math
import os
import sys
import time
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import srcad as ad  # noqa: E402
from srcad.cuda.device import block_sum  # noqa: E402
from srcad.cuda.launch import kernel_times, warm_up  # noqa: E402


def gpu_present():
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return False
    try:
        from numba import cuda
        return cuda.is_available()
    except Exception:          # no numba-cuda, no driver
        return False


# ---- the kernels, written once as a Numba user writes them -----------------------------------------------

from numba import cuda  # noqa: E402


def lv_rhs(a, b, p):
    return p[0] * a - p[1] * a * b, p[2] * a * b - p[3] * b


def ensemble(y0, p, n_steps, dt, out):
    i = cuda.grid(1)
    if i >= y0.shape[0]:
        return
    a = y0[i, 0]
    b = y0[i, 1]
    for step in range(n_steps):
        k1a, k1b = lv_rhs(a, b, p)
        k2a, k2b = lv_rhs(a + 0.5 * dt * k1a, b + 0.5 * dt * k1b, p)
        k3a, k3b = lv_rhs(a + 0.5 * dt * k2a, b + 0.5 * dt * k2b, p)
        k4a, k4b = lv_rhs(a + dt * k3a, b + dt * k3b, p)
        a = a + dt / 6.0 * (k1a + 2.0 * k2a + 2.0 * k3a + k4a)
        b = b + dt / 6.0 * (k1b + 2.0 * k2b + 2.0 * k3b + k4b)
    out[i, 0] = a
    out[i, 1] = b


def gather(x, w, idx, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = w[0] * math.sin(x[idx[i]])


def softplus_scalar(a, x):
    """The same softplus as a scalar function, for `@ad.function(target="cuda")` (elementwise)."""
    return a * math.log(1.0 + math.exp(x))


def softplus(a, x, out):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = a[0] * math.log(1.0 + math.exp(x[i]))


# ---- hand-written numba.cuda forward and adjoint kernels -----------------------------------------------

@cuda.jit(device=True, inline=True)
def _rhs(a, b, p0, p1, p2, p3):
    return p0 * a - p1 * a * b, p2 * a * b - p3 * b


@cuda.jit(device=True, inline=True)
def _rhs_back(ga, gb, a, b, p0, p1, p2, p3):
    """Cotangents (of a, b, p0..p3) of rhs at (a, b) for output cotangents (ga, gb)."""
    return (ga * (p0 - p1 * b) + gb * p2 * b, -ga * p1 * a + gb * (p2 * a - p3),
            ga * a, -ga * a * b, gb * a * b, -gb * b)


@cuda.jit(device=True, inline=True)
def _rk4_step(a, b, dt, p0, p1, p2, p3):
    k1a, k1b = _rhs(a, b, p0, p1, p2, p3)
    k2a, k2b = _rhs(a + 0.5 * dt * k1a, b + 0.5 * dt * k1b, p0, p1, p2, p3)
    k3a, k3b = _rhs(a + 0.5 * dt * k2a, b + 0.5 * dt * k2b, p0, p1, p2, p3)
    k4a, k4b = _rhs(a + dt * k3a, b + dt * k3b, p0, p1, p2, p3)
    return a + dt / 6.0 * (k1a + 2.0 * k2a + 2.0 * k3a + k4a), b + dt / 6.0 * (k1b + 2.0 * k2b + 2.0 * k3b + k4b)


@cuda.jit
def hand_rk4_forward(y0, p, n_steps, dt, out, states):
    """The primal, saving the state before each step (states[step, 0/1, i]: coalesced)."""
    i = cuda.grid(1)
    if i >= y0.shape[0]:
        return
    a, b = y0[i, 0], y0[i, 1]
    for s in range(n_steps):
        states[s, 0, i] = a
        states[s, 1, i] = b
        a, b = _rk4_step(a, b, dt, p[0], p[1], p[2], p[3])
    out[i, 0] = a
    out[i, 1] = b


@cuda.jit
def hand_rk4_primal(y0, p, n_steps, dt, out):
    i = cuda.grid(1)
    if i >= y0.shape[0]:
        return
    a, b = y0[i, 0], y0[i, 1]
    for s in range(n_steps):
        a, b = _rk4_step(a, b, dt, p[0], p[1], p[2], p[3])
    out[i, 0] = a
    out[i, 1] = b


@cuda.jit
def hand_rk4_adjoint(p, n_steps, dt, states, d_out, d_y0, d_p):
    i = cuda.grid(1)
    if i >= d_out.shape[0]:
        return
    p0, p1, p2, p3 = p[0], p[1], p[2], p[3]
    da, db = d_out[i, 0], d_out[i, 1]
    g0 = g1 = g2 = g3 = 0.0
    h = 0.5 * dt
    for s in range(n_steps - 1, -1, -1):
        a, b = states[s, 0, i], states[s, 1, i]
        k1a, k1b = _rhs(a, b, p0, p1, p2, p3)
        a2, b2 = a + h * k1a, b + h * k1b
        k2a, k2b = _rhs(a2, b2, p0, p1, p2, p3)
        a3, b3 = a + h * k2a, b + h * k2b
        k3a, k3b = _rhs(a3, b3, p0, p1, p2, p3)
        a4, b4 = a + dt * k3a, b + dt * k3b
        na, nb = da, db
        d4a, d4b = dt / 6.0 * da, dt / 6.0 * db
        d3a, d3b = dt / 3.0 * da, dt / 3.0 * db
        d2a, d2b = dt / 3.0 * da, dt / 3.0 * db
        d1a, d1b = dt / 6.0 * da, dt / 6.0 * db
        xa, xb, q0, q1, q2, q3 = _rhs_back(d4a, d4b, a4, b4, p0, p1, p2, p3)
        na, nb, d3a, d3b = na + xa, nb + xb, d3a + dt * xa, d3b + dt * xb
        g0, g1, g2, g3 = g0 + q0, g1 + q1, g2 + q2, g3 + q3
        xa, xb, q0, q1, q2, q3 = _rhs_back(d3a, d3b, a3, b3, p0, p1, p2, p3)
        na, nb, d2a, d2b = na + xa, nb + xb, d2a + h * xa, d2b + h * xb
        g0, g1, g2, g3 = g0 + q0, g1 + q1, g2 + q2, g3 + q3
        xa, xb, q0, q1, q2, q3 = _rhs_back(d2a, d2b, a2, b2, p0, p1, p2, p3)
        na, nb, d1a, d1b = na + xa, nb + xb, d1a + h * xa, d1b + h * xb
        g0, g1, g2, g3 = g0 + q0, g1 + q1, g2 + q2, g3 + q3
        xa, xb, q0, q1, q2, q3 = _rhs_back(d1a, d1b, a, b, p0, p1, p2, p3)
        da, db = na + xa, nb + xb
        g0, g1, g2, g3 = g0 + q0, g1 + q1, g2 + q2, g3 + q3
    d_y0[i, 0] = da
    d_y0[i, 1] = db
    cuda.atomic.add(d_p, 0, g0)
    cuda.atomic.add(d_p, 1, g1)
    cuda.atomic.add(d_p, 2, g2)
    cuda.atomic.add(d_p, 3, g3)


@cuda.jit
def hand_gather_forward(x, w, idx, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = w[0] * math.sin(x[idx[i]])


BLOCK = 256          # threads per block of the hand-written kernels


@cuda.jit(device=True, inline=True)
def _block_add(tile, value, into):
    """Add `value` summed over the block into `into[0]`: a tree in shared memory, one atomic per block."""
    total = block_sum(tile, value)
    if cuda.threadIdx.x == 0:
        cuda.atomic.add(into, 0, total)


@cuda.jit
def hand_gather_adjoint(x, w, idx, out, d_x, d_w):
    """loss = sum(out^2): d_out = 2 out."""
    tile = cuda.shared.array(BLOCK, numba.float64)
    i = cuda.grid(1)
    dw = 0.0
    if i < out.shape[0]:
        g = 2.0 * out[i]
        v = x[idx[i]]
        cuda.atomic.add(d_x, idx[i], g * w[0] * math.cos(v))
        dw = g * math.sin(v)
    _block_add(tile, dw, d_w)


@cuda.jit
def hand_softplus_forward(a, x, out):
    i = cuda.grid(1)
    if i < x.shape[0]:
        out[i] = a[0] * math.log(1.0 + math.exp(x[i]))


@cuda.jit
def hand_softplus_adjoint(a, x, d_out, d_x, d_a):
    tile = cuda.shared.array(BLOCK, numba.float32)
    i = cuda.grid(1)
    da = numba.float32(0.0)
    if i < x.shape[0]:
        e = math.exp(x[i])
        d_x[i] = d_out[i] * a[0] * e / (1.0 + e)
        da = d_out[i] * math.log(1.0 + e)
    _block_add(tile, da, d_a)


@cuda.jit
def device_copy(src, dst):
    i = cuda.grid(1)
    if i < src.shape[0]:
        dst[i] = src[i]


# ---- timing --------------------------------------------------------------------------------------------

def events_time(launch, reps):
    """Minimum seconds of `launch()` (kernels on the device) over `reps`, by CUDA events."""
    best = math.inf
    for _ in range(reps):
        warm_up()               # as the generated kernels are timed (`launch.kernel_times`)
        start, stop = cuda.event(), cuda.event()
        start.record()
        launch()
        stop.record()
        stop.synchronize()
        best = min(best, start.elapsed_time(stop) / 1e3)
    return best


def wall_time(step, reps):
    best = math.inf
    for _ in range(reps):
        t = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t)
    return best


def srcad_gradient(launch, args, active, loss):
    """(loss, gradients, {kernel: [seconds]}) of one recorded call of `launch` (`k[blocks, threads]`, or an
    elementwise function) and its gradient."""
    with kernel_times() as times:
        values = [ad.Variable(a) if i in active else a for i, a in enumerate(args)]
        with ad.GradientTape() as tape:
            out = launch(*values)
            value = loss(out)
        grads = tape.gradient(value, [values[i] for i in active])
    return float(value), [g.numpy() for g in grads], times


def kernel_seconds(times):
    """(forward, adjoint) seconds of the generated kernels of one launch and gradient."""
    forward = sum(min(v) for k, v in times.items() if "_forward_" in k)
    adjoint = sum(min(v) for k, v in times.items() if "_adjoint_" in k)
    return forward, adjoint


def agree(name, a, b, tol=1e-8):
    err = np.max(np.abs(np.asarray(a) - np.asarray(b)) / (np.abs(np.asarray(b)) + 1e-300))
    ok = err <= tol
    print(f"  check {name}: max relative difference {err:.2e} {'ok' if ok else 'DISAGREES: row stopped'}")
    return ok


def fmt(s):
    return f"{s * 1e3:.3f} ms"


# ---- workloads -------------------------------------------------------------------------------------------

UNROLL = 1            # JAX: the fori_loop unroll (4 made XLA compile for minutes on CPU here)
SIZES = {"rk4": {False: (65536, 1000, 0.01), True: (8192, 200, 0.01)},
         "gather": {False: (10 ** 7, 10 ** 6), True: (10 ** 6, 10 ** 5)},
         "softplus": {False: 10 ** 8, True: 10 ** 7}}
SMOKE = {"rk4": {False: (256, 5, 0.01), True: (256, 5, 0.01)}, "gather": {False: (600, 50), True: (600, 50)},
         "softplus": {False: 1000, True: 1000}}

def ensemble_rk4(reps, quick):
    n, steps, dt = SIZES["rk4"][quick]
    print(f"\nensemble RK4: {n} Lotka-Volterra systems x {steps} steps, float64")
    rng = np.random.default_rng(0)
    y0 = 1.0 + rng.random((n, 2))
    p = np.array([1.0, 0.5, 0.3, 0.8])
    threads = 128
    blocks = (n + threads - 1) // threads
    k = ad.kernel(ensemble, outputs=["out"])
    loss, (g_y0, g_p), _ = srcad_gradient(k[blocks, threads], (y0, p, steps, dt, np.zeros((n, 2))), (0, 1),
                                          lambda out: np.sum(out))
    d_y0, d_p, d_out = cuda.to_device(np.zeros((n, 2))), cuda.to_device(np.zeros(4)), cuda.to_device(np.ones((n, 2)))
    dy0, dp, dout = cuda.to_device(y0), cuda.to_device(p), cuda.device_array((n, 2))
    states = cuda.device_array((steps, 2, n))
    hand_rk4_forward[blocks, threads](dy0, dp, steps, dt, dout, states)
    hand_rk4_adjoint[blocks, threads](dp, steps, dt, states, d_out, d_y0, d_p)
    ok = agree("srcad vs hand-written d_y0", g_y0, d_y0.copy_to_host()) & \
        agree("srcad vs hand-written d_p", g_p, d_p.copy_to_host())
    if not ok:
        return
    primal = events_time(lambda: hand_rk4_primal[blocks, threads](dy0, dp, steps, dt, dout), reps)
    hand_fwd = events_time(lambda: hand_rk4_forward[blocks, threads](dy0, dp, steps, dt, dout, states), reps)
    hand_adj = events_time(lambda: hand_rk4_adjoint[blocks, threads](dp, steps, dt, states, d_out, d_y0, d_p), reps)
    gen = [kernel_seconds(srcad_gradient(k[blocks, threads], (y0, p, steps, dt, np.zeros((n, 2))), (0, 1),
                                         lambda out: np.sum(out))[2]) for _ in range(reps)]
    fwd, adj = min(g[0] for g in gen), min(g[1] for g in gen)
    end_to_end = wall_time(lambda: srcad_gradient(k[blocks, threads], (y0, p, steps, dt, np.zeros((n, 2))),
                                                  (0, 1), lambda out: np.sum(out)), max(3, reps // 4))
    print(f"  hand-written: primal {fmt(primal)}, forward {fmt(hand_fwd)}, adjoint {fmt(hand_adj)}, "
          f"forward + adjoint {fmt(hand_fwd + hand_adj)}")
    print(f"  srcad kernels: forward {fmt(fwd)}, adjoint {fmt(adj)}, forward + adjoint {fmt(fwd + adj)} "
          f"({(fwd + adj) / (hand_fwd + hand_adj):.2f}x hand-written, {(fwd + adj) / primal:.1f}x its primal)")
    print(f"  srcad end to end (host arrays, tape, gradient): {fmt(end_to_end)}")
    jax_rk4(y0, p, steps, dt, g_y0, g_p, reps, fwd + adj)


def jax_rk4(y0, p, steps, dt, g_y0, g_p, reps, srcad_seconds):
    try:
        import jax
        import jax.numpy as jnp
        jax.config.update("jax_enable_x64", True)
    except Exception as exc:       # not installed
        print(f"  JAX: skipped ({exc})")
        return

    def one(y, q):
        def step(_, s):
            a, b = s

            def rhs(a, b):
                return q[0] * a - q[1] * a * b, q[2] * a * b - q[3] * b
            k1 = rhs(a, b)
            k2 = rhs(a + 0.5 * dt * k1[0], b + 0.5 * dt * k1[1])
            k3 = rhs(a + 0.5 * dt * k2[0], b + 0.5 * dt * k2[1])
            k4 = rhs(a + dt * k3[0], b + dt * k3[1])
            return (a + dt / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0]),
                    b + dt / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1]))
        a, b = jax.lax.fori_loop(0, steps, step, (y[0], y[1]), unroll=UNROLL)
        return a + b

    grad = jax.jit(jax.vmap(jax.grad(one, argnums=(0, 1)), in_axes=(0, None)))
    jy, jp = jnp.asarray(y0), jnp.asarray(p)
    gy, gp = grad(jy, jp)
    if not (agree("JAX vs srcad d_y0", np.asarray(gy), g_y0) & agree("JAX vs srcad d_p", np.asarray(gp).sum(0), g_p)):
        return
    t = wall_time(lambda: jax.block_until_ready(grad(jy, jp)), reps)
    print(f"  JAX jit(vmap(grad)): {fmt(t)} (srcad kernels {t / srcad_seconds:.1f}x faster)")


def gather_workload(reps, quick):
    n_out, n_x = SIZES["gather"][quick]
    print(f"\ngather w * sin(x[idx[i]]): {n_out:.0e} from {n_x:.0e}, float64, loss sum(out^2)")
    rng = np.random.default_rng(1)
    x, w, idx = rng.uniform(-2, 2, n_x), np.array([1.3]), rng.integers(0, n_x, n_out)
    threads = BLOCK
    blocks = (n_out + threads - 1) // threads
    k = ad.kernel(gather, outputs=["out"])
    args = (x, w, idx, np.zeros(n_out))
    loss, (g_x, g_w), _ = srcad_gradient(k[blocks, threads], args, (0, 1), lambda out: np.sum(out * out))
    dx, dw, didx, dout = (cuda.to_device(a) for a in (x, w, idx, np.zeros(n_out)))
    d_x, d_w = cuda.to_device(np.zeros(n_x)), cuda.to_device(np.zeros(1))
    hand_gather_forward[blocks, threads](dx, dw, didx, dout)
    hand_gather_adjoint[blocks, threads](dx, dw, didx, dout, d_x, d_w)
    if not (agree("srcad vs hand-written d_x", g_x, d_x.copy_to_host(), 1e-7)
            & agree("srcad vs hand-written d_w", g_w, d_w.copy_to_host(), 1e-7)):
        return
    hand_fwd = events_time(lambda: hand_gather_forward[blocks, threads](dx, dw, didx, dout), reps)
    hand_adj = events_time(lambda: hand_gather_adjoint[blocks, threads](dx, dw, didx, dout, d_x, d_w), reps)
    hand = hand_fwd + hand_adj
    gen = [kernel_seconds(srcad_gradient(k[blocks, threads], args, (0, 1), lambda out: np.sum(out * out))[2])
           for _ in range(max(3, reps // 4))]
    fwd, adj = min(g[0] for g in gen), min(g[1] for g in gen)
    print(f"  hand-written forward {fmt(hand_fwd)} + adjoint {fmt(hand_adj)} = {fmt(hand)}; srcad kernels forward "
          f"{fmt(fwd)} + adjoint {fmt(adj)} = {fmt(fwd + adj)} ({(fwd + adj) / hand:.2f}x)")
    try:
        import jax
        import jax.numpy as jnp
        jax.config.update("jax_enable_x64", True)
        f = jax.jit(jax.grad(lambda x, w: jnp.sum((w[0] * jnp.sin(x[idx_j])) ** 2), argnums=(0, 1)))
        idx_j = jnp.asarray(idx)
        jx, jw = jnp.asarray(x), jnp.asarray(w)
        t = wall_time(lambda: jax.block_until_ready(f(jx, jw)), reps)
        print(f"  JAX jit(grad): {fmt(t)} (srcad kernels {t / (fwd + adj):.2f}x faster)")
    except Exception as exc:
        print(f"  JAX: skipped ({type(exc).__name__}: {exc})")


def softplus_workload(reps, quick):
    n = SIZES["softplus"][quick]
    print(f"\nsoftplus a * log(1 + exp(x)): {n:.0e} float32, loss sum(out)")
    rng = np.random.default_rng(2)
    x, a = rng.uniform(-3, 3, n).astype(np.float32), np.array([1.5], np.float32)
    threads = BLOCK
    blocks = (n + threads - 1) // threads
    k = ad.kernel(softplus, outputs=["out"])
    try:
        args = (a, x, np.zeros(n, np.float32))
        gen = [kernel_seconds(srcad_gradient(k[blocks, threads], args, (0, 1), lambda out: np.sum(out))[2])
               for _ in range(max(3, reps // 4))]
    except Exception as exc:
        print(f"  srcad: FAILED ({type(exc).__name__}: {str(exc)[:300]})")
        return
    fwd, adj = min(g[0] for g in gen), min(g[1] for g in gen)
    dx, da, dout = cuda.to_device(x), cuda.to_device(a), cuda.device_array(n, np.float32)
    ones, d_x, d_a = cuda.to_device(np.ones(n, np.float32)), cuda.device_array(n, np.float32), \
        cuda.to_device(np.zeros(1, np.float32))
    hf = events_time(lambda: hand_softplus_forward[blocks, threads](da, dx, dout), reps)
    ha = events_time(lambda: hand_softplus_adjoint[blocks, threads](da, dx, ones, d_x, d_a), reps)
    src, dst = cuda.to_device(x), cuda.device_array(n, np.float32)
    copy = events_time(lambda: device_copy[blocks, threads](src, dst), reps)
    bandwidth = 2 * 4 * n / copy
    print(f"  device copy: {fmt(copy)} ({bandwidth / 1e12:.2f} TB/s read + written)")
    print(f"  hand-written forward {fmt(hf)}, adjoint {fmt(ha)}; srcad kernels forward {fmt(fwd)} ({fwd / hf:.2f}x), "
          f"adjoint {fmt(adj)} ({adj / ha:.2f}x)")
    elementwise = ad.function(softplus_scalar, target="cuda")
    loss, (g_a, g_x), _ = srcad_gradient(elementwise, (a, x), (0, 1), lambda out: np.sum(out))
    hand_x = d_x.copy_to_host()
    if not agree("elementwise vs hand-written d_x (float32)", g_x, hand_x, 1e-5):
        return
    gen = [kernel_seconds(srcad_gradient(elementwise, (a, x), (0, 1), lambda out: np.sum(out))[2])
           for _ in range(max(3, reps // 4))]
    efwd, eadj = min(g[0] for g in gen), min(g[1] for g in gen)
    print(f"  @ad.function(target='cuda') kernels: forward {fmt(efwd)} ({efwd / hf:.2f}x hand), adjoint {fmt(eadj)} "
          f"({eadj / ha:.2f}x hand), value and gradient {fmt(efwd + eadj)}; adjoint moves {3 * 4 * n / eadj / 1e12:.2f} "
          f"TB/s ({3 * 4 * n / eadj / bandwidth:.0%} of the copy's)")
    try:
        import jax
        import jax.numpy as jnp
        f = jax.jit(jax.value_and_grad(lambda a, x: jnp.sum(a[0] * jnp.log1p(jnp.exp(x))), argnums=(0, 1)))
        ja, jx = jnp.asarray(a), jnp.asarray(x)
        t = wall_time(lambda: jax.block_until_ready(f(ja, jx)), reps)
        print(f"  JAX jit(value_and_grad), fused: {fmt(t)} (srcad elementwise value and gradient "
              f"{t / (efwd + eadj):.2f}x faster)")
    except Exception as exc:
        print(f"  JAX: skipped ({type(exc).__name__}: {exc})")


def tiny_launch(reps, quick):
    n = 1000
    print("\ntiny launch: softplus over 1e3 float64 elements")
    rng = np.random.default_rng(3)
    x, a = rng.uniform(-1, 1, n), np.array([1.0])
    k = ad.kernel(softplus, outputs=["out"])
    out = np.zeros(n)
    k[4, 256](a, x, out)
    srcad_t = wall_time(lambda: k[4, 256](a, x, out), reps * 5)
    dx, da, dout = cuda.to_device(x), cuda.to_device(a), cuda.device_array(n)
    hand_t = wall_time(lambda: (hand_softplus_forward[4, 256](da, dx, dout), cuda.synchronize()), reps * 5)
    host_t = wall_time(lambda: hand_softplus_forward[4, 256](a, x, out), reps * 5)
    print(f"  srcad launch on host arrays {srcad_t * 1e6:.0f} us; numba.cuda on device arrays {hand_t * 1e6:.0f} us, "
          f"on host arrays {host_t * 1e6:.0f} us")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, under the CUDA simulator too: checks "
                        "that the script runs, times nothing worth reading")
    args = parser.parse_args(argv)
    if args.smoke:
        SIZES.update(SMOKE)
    elif not gpu_present():
        print("benchmarks/gpu.py: skipped: no CUDA GPU here (and the CUDA simulator is no place to time kernels)")
        return 0
    print(f"GPU: {getattr(cuda.get_current_device(), 'name', 'the CUDA simulator')}")
    for workload in (ensemble_rk4, gather_workload, softplus_workload, tiny_launch):
        t = time.perf_counter()
        try:
            workload(args.reps, args.quick)
        except Exception as exc:
            print(f"  {workload.__name__}: FAILED ({type(exc).__name__}: {str(exc)[:400]})")
        print(f"  ({time.perf_counter() - t:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
