"""Every example of the reference documents, with the documents' numbers and shapes.

``shared/reference/``: the advanced autodiff guide, the ``tf.GradientTape`` API
reference, the vector-Jacobian-product Q&A and the GradientTape tutorial (zh).
The examples are written once, in ``examples/reference_examples.py``; each test
runs one and checks what it returns.  Where a document's numbers come from
float32 random data, the test checks the shapes it prints and a closed form (or
a finite difference) of the values.
"""

import importlib.util
import os

import numpy as np
import pytest

import srcad as ad

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load_example(name):
    """``examples/<name>.py`` as a module (examples/ is not a package)."""
    path = os.path.join(ROOT, "examples", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"srcad_examples_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ex = _load_example("reference_examples")


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


# =====================================================================================
# Advanced automatic differentiation (guide)
# =====================================================================================


def test_guide_stop_recording():
    grad = ex.guide_stop_recording()
    assert float(grad["x"]) == 4.0
    assert grad["y"] is None
    assert str(grad["x"]).startswith("ad.Tensor(4.0, shape=()")


def test_guide_reset():
    grad = ex.guide_reset()
    assert float(grad["x"]) == 4.0
    assert grad["y"] is None


def test_guide_stop_gradient():
    grad = ex.guide_stop_gradient()
    assert float(grad["x"]) == 4.0
    assert grad["y"] is None


def test_guide_custom_gradient_clip_by_norm():
    output, grad = ex.guide_custom_gradients()
    assert float(output) == 4.0
    assert float(grad) == 2.0  # calls "backward", which clips 4 to 2
    # a cotangent below the clip norm passes unchanged: d(0.1 * v*v)/dv = 0.2 * v
    v = ad.Variable(2.0)
    with ad.GradientTape() as t:
        output = 0.1 * ex.clip_gradients(v * v)
    assert float(t.gradient(output, v)) == pytest.approx(0.4)


def test_guide_multiple_tapes():
    dys_dx0, dys_dx1 = ex.guide_multiple_tapes()
    assert dys_dx0.numpy() == 1.0    # cos(x) => 1.0
    assert dys_dx1.numpy() == 0.25   # sigmoid(x1)*(1-sigmoid(x1)) => 0.25


def test_guide_higher_order():
    dy_dx, d2y_dx2 = ex.guide_higher_order()
    assert dy_dx.numpy() == 3.0
    assert d2y_dx2.numpy() == 6.0


def test_guide_input_gradient_regularization():
    r = ex.guide_input_gradient_regularization(np.random.default_rng(0))
    layer, dg1_mag = r["layer"], r["dg1_mag"]
    assert r["y"].shape == (7, 10)
    assert [var.shape for var in dg1_mag] == [(5, 10), (10,)]

    # closed form: out = sum(relu(xW + b)^2), so g1 = 2 relu(xW + b) @ W.T
    xv = r["x"].numpy()

    def g1_mag_of(w, b):
        z = xv @ w + b
        return np.linalg.norm(2 * np.maximum(z, 0) @ w.T)

    w, b = layer.kernel.numpy(), layer.bias.numpy()
    assert float(r["g1_mag"]) == pytest.approx(g1_mag_of(w, b), rel=1e-12)
    eps = 1e-6
    for idx in [(0, 0), (2, 3), (4, 9), (1, 5)]:
        e = np.zeros_like(w)
        e[idx] = eps
        fd = (g1_mag_of(w + e, b) - g1_mag_of(w - e, b)) / (2 * eps)
        assert dg1_mag[0].numpy()[idx] == pytest.approx(fd, rel=1e-5, abs=1e-7)
    for k in [0, 4, 9]:
        e = np.zeros_like(b)
        e[k] = eps
        fd = (g1_mag_of(w, b + e) - g1_mag_of(w, b - e)) / (2 * eps)
        assert dg1_mag[1].numpy()[k] == pytest.approx(fd, rel=1e-5, abs=1e-7)


def test_guide_jacobian_scalar_source():
    x, y, dy_dx = ex.guide_jacobian_scalar_source()
    assert y.shape == (201,)
    assert dy_dx.shape == (201,)
    s = _sig(x.numpy())
    np.testing.assert_allclose(dy_dx.numpy(), s * (1 - s), rtol=1e-12, atol=1e-15)


def test_guide_jacobian_tensor_source():
    r = ex.guide_jacobian_tensor_source(np.random.default_rng(1))
    x, layer, j = r["x"], r["layer"], r["j"]
    assert r["y"].shape == (7, 10)
    assert layer.kernel.shape == (5, 10)
    assert j.shape == (7, 10, 5, 10)
    assert r["g"].shape == (5, 10)
    assert r["delta"] < 1e-3
    # closed form: dy[i, o] / dW[k, p] = x[i, k] * relu'(z[i, o]) * [o == p]
    z = x.numpy() @ layer.kernel.numpy() + layer.bias.numpy()
    expected = np.einsum("ik,io,op->iokp", x.numpy(), (z > 0).astype(float), np.eye(10))
    np.testing.assert_allclose(j.numpy(), expected, rtol=1e-12, atol=1e-15)


def test_guide_hessian():
    r = ex.guide_hessian(np.random.default_rng(2))
    x0, layer1, layer2, h, g_vec, h_mat = r["x"], r["layer1"], r["layer2"], r["h"], r["g_vec"], r["h_mat"]
    assert layer1.kernel.shape == (5, 8)
    assert h.shape == (5, 8, 5, 8)
    assert g_vec.shape == (40, 1) and h_mat.shape == (40, 40)
    # the Hessian matrix should be symmetric
    np.testing.assert_allclose(h_mat.numpy(), h_mat.numpy().T, rtol=1e-10, atol=1e-12)

    # the Newton step (the example applies it)
    w0, update = r["kernel_before"], r["update"]
    np.testing.assert_allclose((h_mat.numpy() + r["eye_eps"]) @ update.numpy(), g_vec.numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(layer1.kernel.numpy(), w0 - update.numpy().reshape(5, 8))

    # against central differences of the gradient at the kernel before the step
    # (relu is piecewise linear: exact away from the kinks)
    def grad_at(w):
        layer1.kernel.assign(w)
        with ad.GradientTape() as t:
            loss = np.mean(layer2(layer1(x0)) ** 2)
        return t.gradient(loss, layer1.kernel).numpy()

    eps = 1e-6
    for idx in [(0, 0), (2, 5), (4, 7)]:
        e = np.zeros_like(w0)
        e[idx] = eps
        fd = (grad_at(w0 + e) - grad_at(w0 - e)) / (2 * eps)
        np.testing.assert_allclose(h.numpy()[:, :, idx[0], idx[1]], fd, rtol=1e-5, atol=1e-8)


def test_guide_batch_jacobian():
    r = ex.guide_batch_jacobian(np.random.default_rng(3))
    x, layer1, layer2, j, j_sum, j_select, jb = (r[k] for k in ("x", "layer1", "layer2", "j", "j_sum", "j_select",
                                                                  "jb"))
    assert r["y"].shape == (7, 6)
    assert j.shape == (7, 6, 7, 5)
    # every (batch, batch) slice is diagonal
    jn = j.numpy()
    off_diagonal = jn * (1 - np.eye(7))[:, None, :, None]
    assert np.all(off_diagonal == 0)
    assert np.all(np.abs(np.einsum("bxby->bxy", jn)) > 0)
    assert j_sum.shape == (7, 6, 5)
    assert j_select.shape == (7, 6, 5)
    assert jb.shape == (7, 6, 5)
    assert r["error"] < 1e-3
    np.testing.assert_allclose(jb.numpy(), j_select.numpy(), rtol=1e-12, atol=1e-15)

    # closed form of one example's Jacobian: diag(elu'(z2)) W2^T diag(elu'(z1)) W1^T
    def d_elu(z):
        return np.where(z > 0, 1.0, np.exp(z))

    w1, b1, w2, b2 = (v.numpy() for v in (layer1.kernel, layer1.bias, layer2.kernel, layer2.bias))
    z1 = x.numpy() @ w1 + b1
    z2 = np.where(z1 > 0, z1, np.expm1(z1)) @ w2 + b2
    expected = np.einsum("bo,ho,bh,ih->boi", d_elu(z2), w2, d_elu(z1), w1)
    np.testing.assert_allclose(jb.numpy(), expected, rtol=1e-10, atol=1e-14)


def test_guide_batch_jacobian_through_batch_norm():
    r = ex.guide_batch_jacobian_batch_norm(np.random.default_rng(4))
    x, layer1, bn, layer2, j, jb = (r[k] for k in ("x", "layer1", "bn", "layer2", "j", "jb"))
    assert j.shape == (7, 6, 7, 5)
    # batch statistics couple the examples: these slices are not diagonal
    off_diagonal = j.numpy() * (1 - np.eye(7))[:, None, :, None]
    assert np.max(np.abs(off_diagonal)) > 1e-3
    assert jb.shape == (7, 6, 5)
    # what batch_jacobian computes (as TensorFlow): d sum_b' y[b', i] / d x[b, :]
    np.testing.assert_allclose(jb.numpy(), np.einsum("pibx->bix", j.numpy()), rtol=1e-9, atol=1e-12)

    # the full Jacobian against finite differences of the whole batch
    xv = x.numpy()

    def forward(xv):
        return layer2(bn(layer1(xv), training=True)).numpy()

    eps = 1e-6
    for b, k in [(0, 0), (3, 2), (6, 4)]:
        e = np.zeros_like(xv)
        e[b, k] = eps
        fd = (forward(xv + e) - forward(xv - e)) / (2 * eps)
        np.testing.assert_allclose(j.numpy()[:, :, b, k], fd, rtol=1e-5, atol=1e-8)


# =====================================================================================
# tf.GradientTape API reference
# =====================================================================================


def test_reference_square():
    assert float(ex.api_square()) == 6.0


def test_reference_nested():
    dy_dx, d2y_dx2 = ex.api_nested_tapes()
    assert float(dy_dx) == 6.0
    assert float(d2y_dx2) == 2.0


def test_reference_persistent():
    dz_dx, dy_dx = ex.api_persistent_tape()
    assert float(dz_dx) == 108.0
    assert float(dy_dx) == 6.0


def test_reference_watch_accessed_variables_false():
    grad_a, grad_b = ex.api_watch_accessed_variables_false()
    assert float(grad_a) == 6.0
    assert grad_b is None


def test_reference_layer_variables_before_build():
    r = ex.api_layer_variables_before_build(np.random.default_rng(5))
    assert len(r["variables"]) == 2
    assert r["grads"] == [None, None]
    assert r["watched"] == ()


def test_reference_batch_jacobian():
    batch_jacobian = ex.api_batch_jacobian()
    np.testing.assert_array_equal(batch_jacobian.numpy(), [[[2, 0], [0, 4]], [[6, 0], [0, 8]]])
    # "essentially" tf.stack([jacobian(y[i], x[i]) for i ...])
    x = ad.constant([[1., 2.], [3., 4.]])
    with ad.GradientTape(persistent=True) as g:
        g.watch(x)
        y = x * x
        rows = [y[i] for i in range(2)]
    np.testing.assert_array_equal(np.stack([g.jacobian(rows[i], x)[:, i] for i in range(2)]).numpy(),
                                  batch_jacobian.numpy())


def test_reference_jacobian():
    np.testing.assert_array_equal(ex.api_jacobian().numpy(), [[2., 0.], [0., 4.]])


def test_reference_reset_equivalence():
    g1, g2, _ = ex.api_reset()
    assert float(g1) == float(g2) == 3 * 1.5 ** 2


def test_reference_reset_in_control_flow():
    # loss_fn() = w**2 = 2.25 > k: the tape is reset and only other_loss_fn() = w**3 is differentiated
    assert float(ex.api_reset(k=1.0)[2]) == 3 * 1.5 ** 2
    # not above k: no reset, both terms are differentiated
    assert float(ex.api_reset(k=10.0)[2]) == 2 * 1.5 + 3 * 1.5 ** 2


def test_reference_stop_recording_gradient_inside():
    t, model_w, grads = ex.api_stop_recording()
    n_nodes = len(t._nodes)
    np.testing.assert_array_equal(grads[0].numpy(), [2.0, -4.0])
    with ad.GradientTape(persistent=True) as t2:
        loss = np.sum(model_w ** 2)
        n_forward = len(t2._nodes)
    assert n_nodes == n_forward  # the gradient computation was not traced


def test_reference_documented_errors():
    second_gradient, watch_str = ex.api_errors()
    assert isinstance(second_gradient, RuntimeError) and "non-persistent" in str(second_gradient)
    assert isinstance(watch_str, ValueError) and "str" in str(watch_str)
    # stop_recording outside the context (as TensorFlow: ValueError after an exit, RuntimeError if never entered)
    x = ad.constant(3.0)
    with ad.GradientTape() as g:
        g.watch(x)
        y = x * x
    with pytest.raises(ValueError, match="not recording"):
        with g.stop_recording():
            pass
    with pytest.raises(RuntimeError, match="not recording"):
        with ad.GradientTape().stop_recording():
            pass
    with ad.GradientTape() as g:
        g.watch(x)
        y = x * x
    with pytest.raises(ValueError, match="Unknown value for unconnected_gradients: 'sometimes'"):
        g.gradient(y, x, unconnected_gradients="sometimes")
    with ad.GradientTape(persistent=True) as g:
        x2 = ad.constant([[1.0, 2.0]])
        g.watch(x2)
        y = x2 * x2
    with pytest.raises(ValueError, match=r"Shape \(2,\) must have rank at least 2"):
        g.batch_jacobian(y, ad.constant([1.0, 2.0]))


# =====================================================================================
# Vector-Jacobian products (questions and answers)
# =====================================================================================


def test_vjp_output_gradients():
    np.testing.assert_array_equal(ex.vjp_output_gradients()[0].numpy(), [4.0, 12.0])


def test_vjp_default_is_vector_of_ones():
    np.testing.assert_array_equal(ex.vjp_output_gradients()[1].numpy(), [2.0, 4.0])


def test_vjp_black_box_loss_trains_the_inverse_model():
    losses, grads = ex.vjp_black_box_loss(np.random.default_rng(6), steps=100)
    assert all(g is not None for g in grads)
    assert losses[-1] < 0.05 * losses[0]


def test_vjp_grad_ys_linear_regression():
    r = ex.vjp_grad_ys()
    X, Y, tape, pred, W = r["X"], r["Y"], r["tape"], r["pred"], r["W"]
    gw, gb = r["grads"]
    res = X.numpy() * 0.7 - 0.2 - Y.numpy()
    assert float(gw) == pytest.approx(np.sum(res * X.numpy()))
    assert float(gb) == pytest.approx(np.sum(res))
    # grad_ys: gradients(y, x, grad_ys) = chain rule with a given dz/dy
    np.testing.assert_allclose(r["approx"].numpy(), res)
    gw2, gb2 = r["via_grad_ys"]
    assert float(gw2) == pytest.approx(float(gw)) and float(gb2) == pytest.approx(float(gb))
    # and it is a weighting of each target element, not a multiplier of the summed gradient
    weights = ad.constant([[1.0], [10.0]])
    gw3 = tape.gradient(pred, W, output_gradients=weights)
    assert float(gw3) == pytest.approx(1.0 * 2.0 + 10.0 * 3.0)


def test_vjp_gradient_in_two_parts():
    r = ex.vjp_gradient_in_two_parts()
    grad, part_grad_1, j = r["grad"], r["part_grad_1"], r["j"]
    assert part_grad_1.shape == (1, 5) and r["part_grad_2"].shape == (5, 10)
    np.testing.assert_allclose(grad.numpy(), np.full((1, 10), 5.0))
    np.testing.assert_allclose(r["grad_by_parts"].numpy(), grad.numpy())
    # the same with the Jacobian (no sum over the target's dimensions)
    assert j.shape == (1, 5, 1, 10)
    np.testing.assert_allclose((part_grad_1 @ np.reshape(j, [5, 10])).numpy(), grad.numpy())


def test_vjp_reduce_last_dimension():
    r = ex.vjp_reduce_last_dimension(np.random.default_rng(7))
    batch, N, Q = 4, 6, 8
    assert r["y"].shape == (batch, Q)
    np.testing.assert_allclose(r["grad"].numpy(), np.repeat(r["x_vec"].numpy().sum(axis=0)[:, None], Q, axis=1))
    assert r["keep_n"].shape == (batch, N, Q)


def test_vjp_gradient_of_loss_at_variable():
    assert float(ex.vjp_gradient_of_loss_at_variable()) == 6.0


# =====================================================================================
# GradientTape tutorial (zh)
# =====================================================================================


def test_tutorial_gradient():
    assert ex.tutorial_computing_gradients().numpy() == 6.0


def test_tutorial_what_the_tape_watches():
    x2, unwatched, watched = ex.tutorial_what_the_tape_watches()
    assert not isinstance(x2, ad.Variable)
    assert float(unwatched[0]) == 6.0 and unwatched[1:] == [None, None, None]
    assert [float(g) for g in watched] == [6.0, 6.0, 6.0, 6.0]


def test_tutorial_disable_tracking():
    gradient_1, gradient_2 = ex.tutorial_disable_tracking()
    assert float(gradient_1) == 6.0
    assert gradient_2 is None


def test_tutorial_persistent_and_nested():
    dz_dx, dy_dx = ex.tutorial_multiple_gradients()
    assert dz_dx.numpy() == 108.0
    assert dy_dx.numpy() == 6.0
    dy_dx, d2y_d2x = ex.tutorial_nested_gradients()
    assert dy_dx.numpy() == 6.0 and d2y_d2x.numpy() == 2.0


# =====================================================================================
# The demo itself
# =====================================================================================


def test_demo_runs_and_saves_the_guides_figures(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    demo = _load_example("demo")
    demo.OUT = str(tmp_path)
    demo.main()
    printed = capsys.readouterr().out
    for expected in ["dz/dx: ad.Tensor(4.0, shape=()", "dz/dy: None", "\n1.0\n0.25\n", "dy_dx: 3.0\nd2y_dx2: 6.0",
                     "[(5, 10), (10,)]", "(201,)\n(201,)", "(7, 10, 5, 10)", "h.shape: (5, 8, 5, 8)",
                     "(7, 6, 7, 5)", "(7, 6, 5)", "j.shape: (7, 6, 7, 5)", "jb.shape: (7, 6, 5)",
                     "[ 4., 12.]", "[2., 4.]", "108.0", "Second Derivative: 2.0"]:
        assert expected in printed, expected
    figures = sorted(os.listdir(tmp_path))
    assert figures == ["batch_slice.png", "hessian.png", "jacobian_sigmoid.png", "patches_batchnorm.png",
                       "patches_diagonal.png"]
    assert all(os.path.getsize(os.path.join(tmp_path, f)) > 5000 for f in figures)
