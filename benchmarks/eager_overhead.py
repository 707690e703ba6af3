"""Eager-mode overhead: srcad's GradientTape against TensorFlow, PyTorch and autograd.

Two cases, each timed per step in one process with the frameworks interleaved
(every repetition runs each framework once, in turn), reported as the median
over repetitions and as a ratio to PyTorch:

* ``scalar``: the seed's smallest example on a scalar variable,
  ``with tape: y = x * x * x`` then ``tape.gradient(y, x)``: pure per-op overhead.
* ``dense``: a Dense layer forward and gradient at batch 256, float32:
  ``sum(relu(x @ W + b))`` with x (256, 512), W (512, 512), b (512,), gradient
  with respect to W and b.

Also JAX (``jit(grad)``) and TensorFlow's ``tf.function`` of the same step.
Peers (tensorflow, torch, autograd, jax) are optional: one that fails to import is
skipped.  Run:  python benchmarks/eager_overhead.py [--reps 15] [--quick] [--threads 1]

Every framework gets the same number of BLAS / intra-op threads (``--threads``,
1 by default): several thread pools that spin on the same few cores (OpenBLAS
for NumPy, OpenMP for PyTorch, Eigen for TensorFlow) slow each other down by
10x and more, which would measure the machine, not the frameworks.
"""

import argparse
import os
import statistics
import sys
import time


def _threads_from_argv(argv):
    for i, arg in enumerate(argv):
        if arg == "--threads" and i + 1 < len(argv):
            return int(argv[i + 1])
        if arg.startswith("--threads="):
            return int(arg.split("=", 1)[1])
    return 1


THREADS = _threads_from_argv(sys.argv[1:])
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "TF_NUM_INTRAOP_THREADS"):
    os.environ[_var] = str(THREADS)  # before NumPy / torch / TensorFlow start their pools
os.environ["TF_NUM_INTEROP_THREADS"] = "1"
if THREADS == 1:
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import srcad as ad  # noqa: E402
from srcad import nn  # noqa: E402

BATCH, IN, OUT = 256, 512, 512


# -- the scalar case: y = x * x * x ---------------------------------------------------------------


def scalar_srcad():
    x = ad.Variable(3.0)

    def step():
        with ad.GradientTape() as tape:
            y = x * x * x
        return tape.gradient(y, x)

    return step, lambda: float(step().numpy())


def _torch():
    import torch

    torch.set_num_threads(THREADS)
    return torch


def _tensorflow():
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(THREADS)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:  # already initialised
        pass
    return tf


def scalar_torch():
    torch = _torch()

    x = torch.tensor(3.0, dtype=torch.float64, requires_grad=True)

    def step():
        y = x * x * x
        return torch.autograd.grad(y, x)[0]

    return step, lambda: float(step())


def scalar_autograd():
    import autograd

    grad = autograd.grad(lambda x: x * x * x)

    def step():
        return grad(3.0)

    return step, lambda: float(step())


def scalar_tensorflow():
    tf = _tensorflow()

    x = tf.Variable(3.0, dtype=tf.float64)

    def step():
        with tf.GradientTape() as tape:
            y = x * x * x
        return tape.gradient(y, x)

    return step, lambda: float(step().numpy())


def scalar_jax():
    import jax

    jax.config.update("jax_enable_x64", True)
    grad = jax.jit(jax.grad(lambda x: x * x * x))
    x = jax.numpy.float64(3.0)

    def step():
        return grad(x).block_until_ready()

    return step, lambda: float(step())


def scalar_tf_function():
    tf = _tensorflow()

    x = tf.Variable(3.0, dtype=tf.float64)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            y = x * x * x
        return tape.gradient(y, x)

    return step, lambda: float(step().numpy())


# -- the dense case: sum(relu(x @ W + b)), gradient w.r.t. W and b -----------------------------------


def dense_data(dtype=np.float32):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, IN)).astype(dtype)
    w = (rng.standard_normal((IN, OUT)) / np.sqrt(IN)).astype(dtype)
    b = (rng.standard_normal(OUT) * 0.1).astype(dtype)
    return x, w, b


def _dense_check(grad_w, grad_b):
    return np.concatenate([np.ravel(grad_w), np.ravel(grad_b)])


def dense_srcad(dtype=np.float32):
    x, w, b = dense_data(dtype)
    layer = nn.Dense(OUT, activation=nn.relu)
    xt = ad.constant(x)
    layer(xt)  # build, then put the shared weights in
    layer.kernel.assign(w)
    layer.bias.assign(b)

    def step():
        with ad.GradientTape() as tape:
            loss = np.sum(layer(xt))
        return tape.gradient(loss, [layer.kernel, layer.bias])

    def check():
        gw, gb = step()
        return _dense_check(gw.numpy(), gb.numpy())

    return step, check


def dense_torch(dtype=np.float32):
    torch = _torch()

    x, w, b = (torch.from_numpy(a) for a in dense_data(dtype))
    w.requires_grad_(True)
    b.requires_grad_(True)

    def step():
        loss = torch.relu(x @ w + b).sum()
        return torch.autograd.grad(loss, [w, b])

    def check():
        gw, gb = step()
        return _dense_check(gw.numpy(), gb.numpy())

    return step, check


def dense_autograd(dtype=np.float32):
    import autograd
    import autograd.numpy as anp

    x, w, b = dense_data(dtype)
    grad = autograd.grad(lambda w, b: anp.sum(anp.maximum(x @ w + b, 0.0)), argnum=(0, 1))

    def step():
        return grad(w, b)

    def check():
        gw, gb = step()
        return _dense_check(gw, gb)

    return step, check


def dense_tensorflow(dtype=np.float32, compiled=False):
    """TensorFlow's step, eager or (`compiled`) inside `tf.function`."""
    tf = _tensorflow()

    x, w, b = dense_data(dtype)
    x = tf.constant(x)
    w, b = tf.Variable(w), tf.Variable(b)

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.nn.relu(x @ w + b))
        return tape.gradient(loss, [w, b])
    step = tf.function(step) if compiled else step

    def check():
        gw, gb = step()
        return _dense_check(gw.numpy(), gb.numpy())

    return step, check


def dense_jax(dtype=np.float32):
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    x, w, b = (jnp.asarray(a) for a in dense_data(dtype))
    grad = jax.jit(jax.grad(lambda w, b: jnp.sum(jax.nn.relu(x @ w + b)), argnums=(0, 1)))

    def step():
        return jax.block_until_ready(grad(w, b))

    def check():
        gw, gb = step()
        return _dense_check(np.asarray(gw), np.asarray(gb))

    return step, check


def dense_tf_function(dtype=np.float32):
    return dense_tensorflow(dtype, compiled=True)


CASES = {
    "scalar": ("y = x*x*x, tape.gradient(y, x)  (scalar float64 variable)",
               {"srcad": scalar_srcad, "tensorflow": scalar_tensorflow, "tf.function": scalar_tf_function,
                "torch": scalar_torch, "autograd": scalar_autograd, "jax": scalar_jax}),
    "dense": (f"Dense forward+gradient: sum(relu(x @ W + b)), x {BATCH}x{IN}, W {IN}x{OUT}, float32",
              {"srcad": dense_srcad, "tensorflow": dense_tensorflow, "tf.function": dense_tf_function,
               "torch": dense_torch, "autograd": dense_autograd, "jax": dense_jax}),
}


# -- timing -----------------------------------------------------------------------------------------------


def _calibrate(step, target_s):
    """Steps per timed block so that one block takes about ``target_s``."""
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        dt = time.perf_counter() - t0
        if dt >= target_s / 4 or n >= 1 << 20:
            return max(1, int(n * target_s / max(dt, 1e-9)))
        n *= 4


def run_case(name, reps, block_s):
    title, makers = CASES[name]
    steps, checks, skipped = {}, {}, {}
    for fw, make in makers.items():
        try:
            step, check = make()
            checks[fw] = check()
            steps[fw] = step
        except Exception as exc:  # a peer that is missing or broken is skipped, srcad is not
            if fw == "srcad":
                raise
            skipped[fw] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:80] if str(exc) else ''}"
    ref = checks["srcad"]
    for fw, value in checks.items():  # every tool must compute the same gradient before any timing
        if not np.allclose(value, ref, rtol=1e-3, atol=1e-3):
            raise SystemExit(f"{fw} disagrees with srcad on {name}: largest difference "
                             f"{np.max(np.abs(np.subtract(value, ref)))}")
    counts = {fw: _calibrate(step, block_s) for fw, step in steps.items()}
    times = {fw: [] for fw in steps}
    for _ in range(reps):  # interleaved: each repetition runs every framework once
        for fw, step in steps.items():
            n = counts[fw]
            t0 = time.perf_counter()
            for _ in range(n):
                step()
            times[fw].append((time.perf_counter() - t0) / n)
    return title, {fw: statistics.median(ts) for fw, ts in times.items()}, skipped


def _fmt_time(s):
    return f"{s * 1e6:10.1f} us" if s < 1e-3 else f"{s * 1e3:10.3f} ms"


def print_table(title, medians, skipped):
    print(f"\n{title}")
    ref = medians.get("torch")
    print(f"  {'framework':<12}{'per step':>14}{'vs torch':>11}")
    for fw, t in sorted(medians.items(), key=lambda kv: kv[1]):
        ratio = f"{t / ref:9.2f}x" if ref else "        -"
        print(f"  {fw:<12}{_fmt_time(t):>14}{ratio:>11}")
    for fw, why in skipped.items():
        print(f"  {fw:<12}{'skipped':>14}   ({why})")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15, help="interleaved repetitions (median is reported)")
    parser.add_argument("--block", type=float, default=0.05, help="seconds per timed block")
    parser.add_argument("--case", choices=sorted(CASES), action="append", help="run only this case")
    parser.add_argument("--quick", action="store_true", help="5 repetitions of 20 ms blocks")
    parser.add_argument("--threads", type=int, default=1, help="BLAS / intra-op threads for every framework")
    args = parser.parse_args(argv)
    if args.quick:
        args.reps, args.block = 5, 0.02
    versions = [f"numpy {np.__version__}", f"srcad {ad.__version__}"]
    from importlib import metadata

    for mod, dist in (("torch", "torch"), ("tensorflow", "tensorflow-cpu"), ("autograd", "autograd")):
        try:
            m = __import__(mod)
        except Exception:
            continue
        version = getattr(m, "__version__", None)
        if version is None:
            try:
                version = metadata.version(dist)
            except metadata.PackageNotFoundError:
                version = "?"
        versions.append(f"{mod} {version}")
    print("eager overhead benchmark:", ", ".join(versions))
    print(f"median of {args.reps} interleaved repetitions, ~{args.block * 1e3:.0f} ms blocks, "
          f"{THREADS} thread(s) per framework")
    results = {}
    for name in args.case or list(CASES):
        title, medians, skipped = run_case(name, args.reps, args.block)
        print_table(title, medians, skipped)
        results[name] = medians
    return results


if __name__ == "__main__":
    main()
