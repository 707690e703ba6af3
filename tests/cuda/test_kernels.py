"""Differentiated numba.cuda kernels (`@ad.kernel`): each kernel's gradient on the cuda target (Numba's
CUDA simulator in CI, a GPU with SRCAD_GPU=1) equals the same kernel's on the cpu target, which equals
finite differences; the kernels' PTX for sm_90 has atomic adds exactly where threads share an element."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("numba.cuda")

import srcad as ad  # noqa: E402
from srcad.testing import finite_differences  # noqa: E402

import _cuda_kernels as K  # noqa: E402
from _gpu import real_gpu  # noqa: E402

HERE = Path(__file__).parent


def _kernels(name):
    fn, outputs, blocks, threads, make, active = K.CASES[name]
    return (ad.kernel(fn, outputs=outputs), ad.kernel(fn, outputs=outputs, target="cpu"), blocks, threads, make,
            active)


def _loss_and_grads(k, blocks, threads, args, active):
    """sum_k sum(w_k * out_k) of a launch (fixed weights) and its gradients in the `active` arguments."""
    args = [ad.Variable(a) if i in active else (a.copy() if isinstance(a, np.ndarray) else a)
            for i, a in enumerate(args)]
    with ad.GradientTape() as tape:
        outs = k[blocks, threads](*args)
        outs = outs if isinstance(outs, tuple) else (outs,)
        loss = sum(np.sum(np.cos(np.arange(o.size).reshape(o.shape)) * o) for o in outs)
    grads = tape.gradient(loss, [args[i] for i in active])
    return float(loss), [g.numpy() for g in grads], [o.numpy() for o in outs]


@pytest.mark.parametrize("name", sorted(K.CASES))
def test_kernel_gradient_matches_cpu_and_finite_differences(name):
    gpu, cpu, blocks, threads, make, active = _kernels(name)
    args = make(np.random.default_rng(7))
    loss_gpu, grads_gpu, outs_gpu = _loss_and_grads(gpu, blocks, threads, args, active)
    loss_cpu, grads_cpu, outs_cpu = _loss_and_grads(cpu, blocks, threads, args, active)
    single = any(getattr(a, "dtype", None) == np.float32 for a in args)
    rtol = 1e-5 if single else 1e-10           # float32: the order of the threads' sums differs
    assert loss_gpu == pytest.approx(loss_cpu, rel=rtol)
    for a, b in zip(outs_gpu, outs_cpu):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-14)
    for a, b in zip(grads_gpu, grads_cpu):
        assert a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-6 if single else 1e-12)

    def phi(values):
        return _loss_and_grads_plain(cpu, blocks, threads, values)
    for g, i in zip(grads_cpu, active):
        fd = finite_differences(phi, [a.astype(np.float64) if single and isinstance(a, np.ndarray) else a
                                      for a in args], i)
        np.testing.assert_allclose(g, fd, rtol=1e-3 if single else 1e-6, atol=1e-3 if single else 1e-8)


def _loss_and_grads_plain(k, blocks, threads, args):
    outs = k[blocks, threads](*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    outs = outs if isinstance(outs, tuple) else (outs,)
    return sum(float(np.sum(np.cos(np.arange(o.size).reshape(o.shape)) * o.numpy())) for o in outs)


@pytest.mark.parametrize("name", ["affine", "gather", "ensemble_rk4", "two_outputs"])
def test_a_grid_of_one_block_runs_every_iteration_and_sums_across_them(name, monkeypatch):
    """Generated kernels loop over their iterations by the grid's size: on a grid of one block each
    thread runs several iterations, adds their shares of the shared parameters, and the gradient is
    the same as on a grid with one thread per iteration."""
    from srcad.cuda import launch
    gpu, _, blocks, threads, make, active = _kernels(name)
    args = make(np.random.default_rng(11))
    expected = _loss_and_grads(gpu, blocks, threads, args, active)
    monkeypatch.setattr(launch, "_resident_blocks", lambda: 1)
    monkeypatch.setattr(launch, "THREADS_PER_BLOCK", 8)          # (8 threads: each runs several iterations)
    found = _loss_and_grads(ad.kernel(K.CASES[name][0], outputs=K.CASES[name][1]), blocks, threads, args, active)
    assert found[0] == pytest.approx(expected[0], rel=1e-12)
    for a, b in zip(found[1] + found[2], expected[1] + expected[2]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_a_thread_keeps_only_the_state_of_its_loop_for_the_adjoint():
    """The ensemble RK4's adjoint kernel saves the two state variables per step (the stages are computed
    again from them, as a hand-written adjoint does), not the eight intermediate values taping would."""
    gpu, _, blocks, threads, make, active = _kernels("ensemble_rk4")
    _loss_and_grads(gpu, blocks, threads, make(np.random.default_rng(2)), active)
    launch = next(iter(gpu._compiled.values()))
    source = launch.source("adjoint")
    saved = sorted({line.split("[")[0].strip() for line in source.splitlines() if "_stack_it[" in line
                    and "] = " in line})
    assert saved == ["ensemble_rk4_a_stack_it", "ensemble_rk4_b_stack_it"], saved


def test_primal_launch_writes_the_buffers_like_numba():
    gpu, _, blocks, threads, make, _ = _kernels("keeps_unwritten")
    x, out = make(np.random.default_rng(1))
    start = out.copy()
    result = gpu[blocks, threads](x, out).numpy()
    even = np.arange(x.size) % 2 == 0
    np.testing.assert_allclose(result[even], np.exp(x[even]))
    np.testing.assert_array_equal(result[~even], start[~even])         # never written: the starting value
    np.testing.assert_array_equal(out, result)                           # an array buffer is written in place


@pytest.mark.parametrize("target", ["cuda", "cpu"])
def test_a_tensor_as_output_buffer_is_a_value_with_a_gradient(target):
    """A Tensor passed as a buffer is not changed; its starting value gets the gradient of the elements the
    kernel does not write (here the odd ones), the others none."""
    k = ad.kernel(K.keeps_unwritten, outputs=["out"], target=target)
    x, start = np.linspace(-1.0, 1.0, 20), np.linspace(2.0, 3.0, 20)
    X, O = ad.Variable(x), ad.Variable(start)
    weights = np.arange(20.0)
    with ad.GradientTape() as tape:
        loss = np.sum(k[1, 32](X, O) * weights)
    gx, gstart = tape.gradient(loss, [X, O])
    even = np.arange(20) % 2 == 0
    np.testing.assert_array_equal(O.numpy(), start)
    np.testing.assert_allclose(gstart.numpy(), np.where(even, 0.0, weights))
    np.testing.assert_allclose(gx.numpy(), np.where(even, weights * np.exp(x), 0.0), rtol=1e-12)


def test_scatter_with_colliding_indices_sums_every_thread():
    gpu, _, blocks, threads, make, _ = _kernels("scatter")
    x, idx, out = make(np.random.default_rng(3))
    expected = np.zeros_like(out)
    np.add.at(expected, idx, x * x)
    np.testing.assert_allclose(gpu[blocks, threads](x, idx, out).numpy(), expected)


def test_index_out_of_range_in_a_kernel_names_the_line():
    gpu, _, _, _, make, _ = _kernels("gather")
    x, w, idx, out = make(np.random.default_rng(5))
    idx[3] = 500
    with pytest.raises(IndexError, match=r"gather .*line \d+\): index 500 is out of range for axis 0 of `x` "
                                         r"\(size 20\)"):
        gpu[3, 32](x, w, idx, out)


def test_launch_errors_name_the_kernel():
    gpu, _, _, _, make, _ = _kernels("softplus")
    with pytest.raises(TypeError, match=r"softplus is a kernel: launch it as softplus\[blocks, threads\]"):
        gpu(*make(np.random.default_rng(0)))
    with pytest.raises(TypeError, match=r"softplus\[\(2, 2\), 32\]: blocks and threads must have as many dimensions"):
        gpu[(2, 2), 32]
    with pytest.raises(TypeError, match=r"outputs must name parameters of the kernel \(a, x, out\); got \['y'\]"):
        ad.kernel(K.softplus, outputs=["y"])


def test_unsupported_cuda_constructs_are_refused_by_line():
    with pytest.raises(ad.TransformError, match=r"an atomic operation whose result is used"):
        _refused("uses_atomic_result")
    with pytest.raises(ad.TransformError, match=r"reads_a_neighbours_write_forward: values saved outside the threads "
                                                r"of a kernel .* the threads of a kernel must be independent"):
        _refused("reads_a_neighbours_write", x=np.ones(64))


def _refused(name, x=None):
    import _refused_kernels as R
    k = ad.kernel(getattr(R, name), outputs=["out"])
    x = ad.Variable(np.ones(64)) if x is None else x
    with ad.GradientTape():
        k[1, 64](x, ad.Variable(np.zeros(64)))


def test_generated_kernels_compile_to_ptx_with_atomics_only_where_threads_share():
    """Without the simulator (a subprocess): every forward and adjoint kernel compiles for sm_90, and
    holds a floating-point atomic add exactly where several threads add into one element. (At a user's
    optimization level: unoptimized PTX spells its atomics otherwise.)"""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "NUMBA_OPT")}
    done = subprocess.run([sys.executable, str(HERE / "_ptx_of_kernels.py")], env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    shared = {"softplus": (False, True), "softplus_float32": (False, True), "affine": (False, True),
              "gather": (False, True), "scatter": (True, False),
              "stencil_1d": (False, True), "stencil_2d": (False, True), "ensemble_rk4": (False, True),
              "device_helper": (False, True), "row_norms": (False, False), "two_outputs": (False, True),
              "keeps_unwritten": (False, False), "grid_stride": (False, False),
              "grid_stride_scaled": (False, True), "elementwise_own": (False, False),
              "elementwise_spread": (False, True),
              "block_sums": (False, True), "halo_stencil": (False, True)}     # (kernels with barriers, phases)
    assert set(found) == set(shared)
    for name, (forward, adjoint) in shared.items():
        assert found[name] == [forward, adjoint], name


def test_second_order_through_a_kernel_on_the_cpu_target():
    """out = w0 x + w1 x^2, loss = sum(out^2): the Hessian is 2 [[sum x^2, sum x^3], [sum x^3, sum x^4]]."""
    x, v = np.linspace(-1.0, 1.0, 40), np.array([1.0, 2.0])
    hessian = 2 * np.array([[np.sum(x ** 2), np.sum(x ** 3)], [np.sum(x ** 3), np.sum(x ** 4)]])
    k = ad.kernel(K.affine, outputs=["out"], target="cpu")
    hv, = _hessian_vector_product(k, 2, 32, (np.array([0.5, -0.3]), x, np.zeros(x.size)), (0,), [v],
                                  loss=lambda outs: np.sum(outs[0] ** 2))
    np.testing.assert_allclose(hv, hessian @ v, rtol=1e-12)


def _weighted_squares(outs):
    return sum(np.sum(np.cos(np.arange(o.size).reshape(o.shape)) * o ** 2) for o in outs)


def _hessian_vector_product(k, blocks, threads, args, active, v, loss=_weighted_squares):
    """d/dw <grad loss(w), v> for `loss` of a launch's outputs (a tuple), by nested tapes."""
    values = [ad.Variable(a) if i in active else (a.copy() if isinstance(a, np.ndarray) else a)
              for i, a in enumerate(args)]
    with ad.GradientTape() as outer:
        with ad.GradientTape() as inner:
            outs = k[blocks, threads](*values)
            value = loss(outs if isinstance(outs, tuple) else (outs,))
        grads = inner.gradient(value, [values[i] for i in active])
        projected = sum(np.sum(g * u) for g, u in zip(grads, v))
    return [h.numpy() for h in outer.gradient(projected, [values[i] for i in active])]


@pytest.mark.parametrize("name", ["affine", "softplus", "gather", "stencil_2d", "two_outputs"])
def test_second_order_through_a_kernel_on_the_cuda_target(name):
    """A Hessian-vector product through nested tapes: the generated gradient kernels differentiated again
    on the cuda target equal the cpu target's, which equal central differences of the gradient."""
    gpu, cpu, blocks, threads, make, active = _kernels(name)
    args = make(np.random.default_rng(7))
    v = [np.random.default_rng(1).standard_normal(np.shape(args[i])) for i in active]
    on_gpu = _hessian_vector_product(gpu, blocks, threads, args, active, v)
    on_cpu = _hessian_vector_product(cpu, blocks, threads, args, active, v)
    for a, b in zip(on_gpu, on_cpu):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    eps = 1e-6

    def gradient_at(t):
        moved = [a + t * v[active.index(i)] if i in active else (a.copy() if isinstance(a, np.ndarray) else a)
                 for i, a in enumerate(args)]
        values = [ad.Variable(a) if i in active else a for i, a in enumerate(moved)]
        with ad.GradientTape() as tape:
            outs = cpu[blocks, threads](*values)
            loss = _weighted_squares(outs if isinstance(outs, tuple) else (outs,))
        return [g.numpy() for g in tape.gradient(loss, [values[i] for i in active])]
    central = [(p - m) / (2 * eps) for p, m in zip(gradient_at(eps), gradient_at(-eps))]
    for a, b in zip(on_cpu, central):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_second_order_through_a_loop_inside_threads_on_the_cuda_target_is_refused_by_name():
    """The RK4 ensemble's gradient kernel keeps each thread's steps in per-thread stacks; differentiating
    those again on the cuda target is not supported yet (the cpu target does it)."""
    gpu, _, blocks, threads, make, active = _kernels("ensemble_rk4")
    args = make(np.random.default_rng(2))
    v = [np.ones(np.shape(args[i])) for i in active]
    with pytest.raises(ad.TransformError, match=r"ensemble_rk4_vjp_forward: values saved outside the threads of a "
                                                r"kernel \(line \d+: `i = cuda.grid\(1\)`\) cannot run on the cuda "
                                                r"target"):
        _hessian_vector_product(gpu, blocks, threads, args, active, v)


@real_gpu
def test_generated_kernels_are_loaded_from_the_disk_cache_in_a_new_process(tmp_path):
    """The first process compiles the forward and adjoint kernels and caches them; a second loads them all."""
    env = {**os.environ, "SRCAD_CACHE_DIR": str(tmp_path / "srcad"), "NUMBA_CACHE_DIR": str(tmp_path / "numba")}

    def run():
        done = subprocess.run([sys.executable, str(HERE / "_cache_hits.py")], env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])
    first, second = run(), run()
    assert first["misses"] >= 2 and first["hits"] == 0
    assert second == {"hits": first["misses"], "misses": 0}


def test_the_arrays_a_call_is_given_move_to_the_device_once_for_its_forward_and_adjoint(monkeypatch):
    """The gather's forward kernel reads x, w and idx and writes out; its adjoint kernel reads them again
    (out for its shape): each is moved to the device once for the call, and the gradient is unchanged."""
    from srcad.cuda import launch
    gpu, _, blocks, threads, make, active = _kernels("gather")
    x, w, idx, out = make(np.random.default_rng(4))
    moved = []
    real = launch.cuda.to_device
    monkeypatch.setattr(launch.cuda, "to_device", lambda a, *rest, **kw: moved.append(a) or real(a, *rest, **kw))
    X, W = ad.Variable(x), ad.Variable(w)
    with ad.GradientTape() as tape:
        loss = np.sum(gpu[blocks, threads](X, W, idx, out) ** 2)
    gx, gw = tape.gradient(loss, [X, W])
    assert sum(m is idx for m in moved) == 1 and sum(m is out for m in moved) == 1
    assert sum(m.shape == x.shape and np.array_equal(m, x) for m in moved) == 1      # (X's own array)
    expected = np.zeros_like(x)
    np.add.at(expected, idx, 2 * (w[0] * np.sin(x[idx])) * w[0] * np.cos(x[idx]))
    np.testing.assert_allclose(gx.numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(gw.numpy(), [np.sum(2 * w[0] * np.sin(x[idx]) ** 2)], rtol=1e-12)


def test_the_adjoint_kernel_does_not_zero_a_cotangent_it_reads_once():
    gpu, _, blocks, threads, make, active = _kernels("softplus")
    _loss_and_grads(gpu, blocks, threads, make(np.random.default_rng(3)), active)
    source = next(iter(gpu._compiled.values())).source("adjoint")
    assert "d_out[softplus_i]" in source and "d_out[softplus_i] = 0.0" not in source
