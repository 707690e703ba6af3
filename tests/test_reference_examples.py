"""Every example of the reference documents, with the documents' numbers and shapes.

``shared/reference/``: the advanced autodiff guide, the ``tf.GradientTape`` API
reference, the vector-Jacobian-product Q&A and the GradientTape tutorial (zh).
Where a document's numbers come from float32 random data, the test checks the
shapes it prints and a closed form (or a finite difference) of the values.
"""

import importlib.util
import os

import numpy as np
import pytest

import srcad as ad

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _normal(rng, *shape):
    return ad.constant(rng.standard_normal(shape))


# =====================================================================================
# Advanced automatic differentiation (guide)
# =====================================================================================


def test_guide_stop_recording():
    x = ad.Variable(2.0)
    y = ad.Variable(3.0)
    with ad.GradientTape() as t:
        x_sq = x * x
        with t.stop_recording():
            y_sq = y * y
        z = x_sq + y_sq
    grad = t.gradient(z, {"x": x, "y": y})
    assert float(grad["x"]) == 4.0
    assert grad["y"] is None
    assert str(grad["x"]).startswith("ad.Tensor(4.0, shape=()")


def test_guide_reset():
    x = ad.Variable(2.0)
    y = ad.Variable(3.0)
    reset = True
    with ad.GradientTape() as t:
        y_sq = y * y
        if reset:
            t.reset()
        z = x * x + y_sq
    grad = t.gradient(z, {"x": x, "y": y})
    assert float(grad["x"]) == 4.0
    assert grad["y"] is None


def test_guide_stop_gradient():
    x = ad.Variable(2.0)
    y = ad.Variable(3.0)
    with ad.GradientTape() as t:
        y_sq = y ** 2
        z = x ** 2 + ad.stop_gradient(y_sq)
    grad = t.gradient(z, {"x": x, "y": y})
    assert float(grad["x"]) == 4.0
    assert grad["y"] is None


@ad.custom_gradient
def clip_gradients(y):
    def backward(dy):
        return ad.clip_by_norm(dy, 0.5)
    return y, backward


def test_guide_custom_gradient_clip_by_norm():
    v = ad.Variable(2.0)
    with ad.GradientTape() as t:
        output = clip_gradients(v * v)
    assert float(output) == 4.0
    assert float(t.gradient(output, v)) == 2.0  # calls "backward", which clips 4 to 2
    # a cotangent below the clip norm passes unchanged: d(0.1 * v*v)/dv = 0.2 * v
    with ad.GradientTape() as t:
        output = 0.1 * clip_gradients(v * v)
    assert float(t.gradient(output, v)) == pytest.approx(0.4)


def test_guide_multiple_tapes():
    x0 = ad.constant(0.0)
    x1 = ad.constant(0.0)
    with ad.GradientTape() as tape0, ad.GradientTape() as tape1:
        tape0.watch(x0)
        tape1.watch(x1)
        y0 = np.sin(x0)
        y1 = ad.nn.sigmoid(x1)
        y = y0 + y1
        ys = np.sum(y)
    assert tape0.gradient(ys, x0).numpy() == 1.0    # cos(x) => 1.0
    assert tape1.gradient(ys, x1).numpy() == 0.25   # sigmoid(x1)*(1-sigmoid(x1)) => 0.25


def test_guide_higher_order():
    x = ad.Variable(1.0)
    with ad.GradientTape() as t2:
        with ad.GradientTape() as t1:
            y = x * x * x
        dy_dx = t1.gradient(y, x)
    d2y_dx2 = t2.gradient(dy_dx, x)
    assert dy_dx.numpy() == 3.0
    assert d2y_dx2.numpy() == 6.0


def test_guide_input_gradient_regularization():
    rng = np.random.default_rng(0)
    x = _normal(rng, 7, 5)
    layer = ad.nn.Dense(10, activation=ad.nn.relu, seed=1)
    with ad.GradientTape() as t2:
        with ad.GradientTape(watch_accessed_variables=False) as t1:
            t1.watch(x)
            y = layer(x)
            out = np.sum(layer(x) ** 2)
        g1 = t1.gradient(out, x)
        g1_mag = np.linalg.norm(g1)
    dg1_mag = t2.gradient(g1_mag, layer.trainable_variables)
    assert y.shape == (7, 10)
    assert [var.shape for var in dg1_mag] == [(5, 10), (10,)]

    # closed form: out = sum(relu(xW + b)^2), so g1 = 2 relu(xW + b) @ W.T
    xv = x.numpy()

    def g1_mag_of(w, b):
        z = xv @ w + b
        return np.linalg.norm(2 * np.maximum(z, 0) @ w.T)

    w, b = layer.kernel.numpy(), layer.bias.numpy()
    assert float(g1_mag) == pytest.approx(g1_mag_of(w, b), rel=1e-12)
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
    x = ad.constant(np.linspace(-10.0, 10.0, 200 + 1))
    delta = ad.Variable(0.0)
    with ad.GradientTape() as tape:
        y = ad.nn.sigmoid(x + delta)
    dy_dx = tape.jacobian(y, delta)
    assert y.shape == (201,)
    assert dy_dx.shape == (201,)
    s = _sig(x.numpy())
    np.testing.assert_allclose(dy_dx.numpy(), s * (1 - s), rtol=1e-12, atol=1e-15)


def test_guide_jacobian_tensor_source():
    rng = np.random.default_rng(1)
    x = _normal(rng, 7, 5)
    layer = ad.nn.Dense(10, activation=ad.nn.relu, seed=2)
    with ad.GradientTape(persistent=True) as tape:
        y = layer(x)
    assert y.shape == (7, 10)
    assert layer.kernel.shape == (5, 10)
    j = tape.jacobian(y, layer.kernel)
    assert j.shape == (7, 10, 5, 10)
    g = tape.gradient(y, layer.kernel)
    assert g.shape == (5, 10)
    j_sum = np.sum(j, axis=[0, 1])
    delta = np.max(abs(g - j_sum)).numpy()
    assert delta < 1e-3
    # closed form: dy[i, o] / dW[k, p] = x[i, k] * relu'(z[i, o]) * [o == p]
    z = x.numpy() @ layer.kernel.numpy() + layer.bias.numpy()
    expected = np.einsum("ik,io,op->iokp", x.numpy(), (z > 0).astype(float), np.eye(10))
    np.testing.assert_allclose(j.numpy(), expected, rtol=1e-12, atol=1e-15)


def _hessian_setup(seed=2):
    rng = np.random.default_rng(seed)
    x0 = _normal(rng, 7, 5)
    layer1 = ad.nn.Dense(8, activation=ad.nn.relu, seed=3)
    layer2 = ad.nn.Dense(6, activation=ad.nn.relu, seed=4)
    return x0, layer1, layer2


def test_guide_hessian():
    x0, layer1, layer2 = _hessian_setup()
    x = x0
    with ad.GradientTape() as t2:
        with ad.GradientTape() as t1:
            x = layer1(x)
            x = layer2(x)
            loss = np.mean(x ** 2)
        g = t1.gradient(loss, layer1.kernel)
    h = t2.jacobian(g, layer1.kernel)
    assert layer1.kernel.shape == (5, 8)
    assert h.shape == (5, 8, 5, 8)

    n_params = np.prod(layer1.kernel.shape)
    g_vec = np.reshape(g, [n_params, 1])
    h_mat = np.reshape(h, [n_params, n_params])
    assert g_vec.shape == (40, 1) and h_mat.shape == (40, 40)
    # the Hessian matrix should be symmetric
    np.testing.assert_allclose(h_mat.numpy(), h_mat.numpy().T, rtol=1e-10, atol=1e-12)

    # against central differences of the gradient (relu is piecewise linear: exact away from the kinks)
    def grad_at(w):
        layer1.kernel.assign(w)
        with ad.GradientTape() as t:
            loss = np.mean(layer2(layer1(x0)) ** 2)
        return t.gradient(loss, layer1.kernel).numpy()

    w0 = layer1.kernel.numpy().copy()
    eps = 1e-6
    for idx in [(0, 0), (2, 5), (4, 7)]:
        e = np.zeros_like(w0)
        e[idx] = eps
        fd = (grad_at(w0 + e) - grad_at(w0 - e)) / (2 * eps)
        np.testing.assert_allclose(h.numpy()[:, :, idx[0], idx[1]], fd, rtol=1e-5, atol=1e-8)
    layer1.kernel.assign(w0)

    # the Newton step
    eps = 1e-3
    eye_eps = np.eye(h_mat.shape[0]) * eps
    update = np.linalg.solve(h_mat + eye_eps, g_vec)
    np.testing.assert_allclose((h_mat.numpy() + eye_eps) @ update.numpy(), g_vec.numpy(), rtol=1e-8, atol=1e-10)
    _ = layer1.kernel.assign_sub(np.reshape(update, layer1.kernel.shape))
    np.testing.assert_allclose(layer1.kernel.numpy(), w0 - update.numpy().reshape(5, 8))


def _elu_model(seed):
    rng = np.random.default_rng(seed)
    x = _normal(rng, 7, 5)
    layer1 = ad.nn.Dense(8, activation=ad.nn.elu, seed=5)
    layer2 = ad.nn.Dense(6, activation=ad.nn.elu, seed=6)
    return x, layer1, layer2


def test_guide_batch_jacobian():
    x, layer1, layer2 = _elu_model(3)
    with ad.GradientTape(persistent=True, watch_accessed_variables=False) as tape:
        tape.watch(x)
        y = layer1(x)
        y = layer2(y)
    assert y.shape == (7, 6)
    j = tape.jacobian(y, x)
    assert j.shape == (7, 6, 7, 5)
    # every (batch, batch) slice is diagonal
    jn = j.numpy()
    off_diagonal = jn * (1 - np.eye(7))[:, None, :, None]
    assert np.all(off_diagonal == 0)
    assert np.all(np.abs(np.einsum("bxby->bxy", jn)) > 0)
    j_sum = np.sum(j, axis=2)
    assert j_sum.shape == (7, 6, 5)
    j_select = np.einsum("bxby->bxy", j)
    assert j_select.shape == (7, 6, 5)
    jb = tape.batch_jacobian(y, x)
    assert jb.shape == (7, 6, 5)
    error = np.max(abs(jb - j_sum))
    assert error < 1e-3
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
    rng = np.random.default_rng(4)
    x = _normal(rng, 7, 5)
    layer1 = ad.nn.Dense(8, activation=ad.nn.elu, seed=7)
    bn = ad.nn.BatchNormalization()
    layer2 = ad.nn.Dense(6, activation=ad.nn.elu, seed=8)
    with ad.GradientTape(persistent=True, watch_accessed_variables=False) as tape:
        tape.watch(x)
        y = layer1(x)
        y = bn(y, training=True)
        y = layer2(y)
    j = tape.jacobian(y, x)
    assert j.shape == (7, 6, 7, 5)
    # batch statistics couple the examples: these slices are not diagonal
    off_diagonal = j.numpy() * (1 - np.eye(7))[:, None, :, None]
    assert np.max(np.abs(off_diagonal)) > 1e-3
    jb = tape.batch_jacobian(y, x)
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
    x = ad.constant(3.0)
    with ad.GradientTape() as g:
        g.watch(x)
        y = x * x
    assert float(g.gradient(y, x)) == 6.0


def test_reference_nested():
    x = ad.constant(3.0)
    with ad.GradientTape() as g:
        g.watch(x)
        with ad.GradientTape() as gg:
            gg.watch(x)
            y = x * x
        dy_dx = gg.gradient(y, x)
    d2y_dx2 = g.gradient(dy_dx, x)
    assert float(dy_dx) == 6.0
    assert float(d2y_dx2) == 2.0


def test_reference_persistent():
    x = ad.constant(3.0)
    with ad.GradientTape(persistent=True) as g:
        g.watch(x)
        y = x * x
        z = y * y
    dz_dx = g.gradient(z, x)
    dy_dx = g.gradient(y, x)
    del g
    assert float(dz_dx) == 108.0
    assert float(dy_dx) == 6.0


def test_reference_watch_accessed_variables_false():
    variable_a = ad.Variable(3.0)
    variable_b = ad.Variable(2.0)
    with ad.GradientTape(persistent=True, watch_accessed_variables=False) as tape:
        tape.watch(variable_a)
        y = variable_a ** 2
        z = variable_b ** 3
    assert float(tape.gradient(y, variable_a)) == 6.0
    assert tape.gradient(z, variable_b) is None


def test_reference_layer_variables_before_build():
    rng = np.random.default_rng(5)
    inputs = _normal(rng, 4, 3)
    a = ad.nn.Dense(32)
    b = ad.nn.Dense(32)
    with ad.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch(a.variables)  # [] : a is not built yet
        result = b(a(inputs))
        grads = tape.gradient(result, a.variables)
    assert len(a.variables) == 2
    assert grads == [None, None]
    assert tape.watched_variables() == ()


def test_reference_batch_jacobian():
    with ad.GradientTape() as g:
        x = ad.constant([[1., 2.], [3., 4.]])
        g.watch(x)
        y = x * x
    batch_jacobian = g.batch_jacobian(y, x)
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
    with ad.GradientTape() as g:
        x = ad.constant([1.0, 2.0])
        g.watch(x)
        y = x * x
    jacobian = g.jacobian(y, x)
    np.testing.assert_array_equal(jacobian.numpy(), [[2., 0.], [0., 4.]])


def test_reference_reset_equivalence():
    w = ad.Variable(1.5)

    def loss_fn():
        return w * w

    def other_loss_fn():
        return w * w * w

    with ad.GradientTape() as t:
        loss = loss_fn()
    with ad.GradientTape() as t:
        loss += other_loss_fn()
    g1 = t.gradient(loss, w)

    with ad.GradientTape() as t:
        loss = loss_fn()
        t.reset()
        loss += other_loss_fn()
    g2 = t.gradient(loss, w)
    assert float(g1) == float(g2) == 3 * 1.5 ** 2


def test_reference_reset_in_control_flow():
    w = ad.Variable(2.0)
    k = 1.0
    with ad.GradientTape() as t:
        loss = w * w
        if loss > k:
            t.reset()
        loss = loss + 5.0 * w
    assert float(t.gradient(loss, w)) == 5.0


def test_reference_stop_recording_gradient_inside():
    model_w = ad.Variable([1.0, -2.0])
    with ad.GradientTape(persistent=True) as t:
        loss = np.sum(model_w ** 2)
        with t.stop_recording():
            grads = t.gradient(loss, [model_w])
        n_nodes = len(t._nodes)
    np.testing.assert_array_equal(grads[0].numpy(), [2.0, -4.0])
    with ad.GradientTape(persistent=True) as t2:
        loss = np.sum(model_w ** 2)
        n_forward = len(t2._nodes)
    assert n_nodes == n_forward  # the gradient computation was not traced


def test_reference_documented_errors():
    x = ad.constant(3.0)
    with ad.GradientTape() as g:
        g.watch(x)
        y = x * x
    g.gradient(y, x)
    with pytest.raises(RuntimeError, match="non-persistent"):
        g.gradient(y, x)
    with pytest.raises(ValueError, match="str"):
        with ad.GradientTape() as g:
            g.watch("x")
    # stop_recording outside the context (as TensorFlow: ValueError after an exit, RuntimeError if never entered)
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
    with pytest.raises(ValueError):
        g.gradient(y, x, unconnected_gradients="sometimes")
    with ad.GradientTape(persistent=True) as g:
        x2 = ad.constant([[1.0, 2.0]])
        g.watch(x2)
        y = x2 * x2
    with pytest.raises(ValueError):
        g.batch_jacobian(y, ad.constant([1.0, 2.0]))


# =====================================================================================
# Vector-Jacobian products (questions and answers)
# =====================================================================================


def test_vjp_output_gradients():
    with ad.GradientTape() as g:
        x = ad.constant([1.0, 2.0])
        g.watch(x)
        y = x * x
    vec = ad.constant([2.0, 3.0])
    grad = g.gradient(y, x, output_gradients=vec)
    np.testing.assert_array_equal(grad.numpy(), [4.0, 12.0])


def test_vjp_default_is_vector_of_ones():
    with ad.GradientTape() as g:
        x = ad.constant([1.0, 2.0])
        g.watch(x)
        y = x * x
    grad = g.gradient(y, x)
    np.testing.assert_array_equal(grad.numpy(), [2.0, 4.0])


def test_vjp_black_box_loss_trains_the_inverse_model():
    rng = np.random.default_rng(6)

    def F(v):   # a black box: plain NumPy, no gradient
        return np.tanh(np.asarray(v)) * 0.5 + 0.1 * np.asarray(v)

    examples = rng.uniform(-1.0, 1.0, size=(64, 3))
    M = ad.nn.Dense(3, seed=11)
    losses = []
    for _ in range(100):
        y = ad.constant(F(examples))
        with ad.GradientTape() as tape:
            pred = M(y)
            loss = np.mean((examples - pred) ** 2)
        grads = tape.gradient(loss, M.trainable_variables)
        assert all(g is not None for g in grads)
        for var, grad in zip(M.trainable_variables, grads):
            var.assign_sub(0.5 * grad)
        losses.append(float(loss))
    assert losses[-1] < 0.05 * losses[0]


def test_vjp_grad_ys_linear_regression():
    X = ad.constant([[2.0], [3.0]])
    Y = ad.constant([[3.0], [2.0]])
    W = ad.Variable(0.7, name="weight")
    b = ad.Variable(-0.2, name="bias")
    with ad.GradientTape(persistent=True) as tape:
        pred = X * W + b
        cost = 0.5 * np.sum((pred - Y) ** 2)
    gw, gb = tape.gradient(cost, [W, b])
    r = X.numpy() * 0.7 - 0.2 - Y.numpy()
    assert float(gw) == pytest.approx(np.sum(r * X.numpy()))
    assert float(gb) == pytest.approx(np.sum(r))
    # grad_ys: gradients(y, x, grad_ys) = chain rule with a given dz/dy
    approx = tape.gradient(cost, pred)
    np.testing.assert_allclose(approx.numpy(), r)
    gw2, gb2 = tape.gradient(pred, [W, b], output_gradients=approx)
    assert float(gw2) == pytest.approx(float(gw)) and float(gb2) == pytest.approx(float(gb))
    # and it is a weighting of each target element, not a multiplier of the summed gradient
    weights = ad.constant([[1.0], [10.0]])
    gw3 = tape.gradient(pred, W, output_gradients=weights)
    assert float(gw3) == pytest.approx(1.0 * 2.0 + 10.0 * 3.0)


def test_vjp_gradient_in_two_parts():
    x = ad.constant(np.ones((1, 10)))
    w = ad.Variable(np.full((10, 5), 0.5))
    out_target = ad.constant(np.zeros(5))
    with ad.GradientTape(persistent=True) as tape:
        tape.watch(x)
        out = x @ w
        loss = np.mean(np.square(out - out_target))
        outs = np.split(out, 5, axis=1)
    grad = tape.gradient(loss, x)
    part_grad_1 = tape.gradient(loss, out)
    part_grad_2 = np.concatenate([tape.gradient(o, x) for o in outs], axis=0)
    assert part_grad_1.shape == (1, 5) and part_grad_2.shape == (5, 10)
    grad_by_parts = part_grad_1 @ part_grad_2
    np.testing.assert_allclose(grad.numpy(), np.full((1, 10), 5.0))
    np.testing.assert_allclose(grad_by_parts.numpy(), grad.numpy())
    # the same with the Jacobian (no sum over the target's dimensions)
    j = tape.jacobian(out, x)
    assert j.shape == (1, 5, 1, 10)
    np.testing.assert_allclose((part_grad_1 @ np.reshape(j, [5, 10])).numpy(), grad.numpy())


def test_vjp_reduce_last_dimension():
    rng = np.random.default_rng(7)
    batch, N, M, Q = 4, 6, 20, 8
    features = _normal(rng, batch, N, M)
    W = ad.Variable(rng.standard_normal((N * M, Q)) * 0.1)
    with ad.GradientTape() as tape:
        x_vec = np.reshape(features, (-1, N * M))
        y = x_vec @ W
    assert y.shape == (batch, Q)
    g = tape.gradient(y, W)
    np.testing.assert_allclose(g.numpy(), np.repeat(x_vec.numpy().sum(axis=0)[:, None], Q, axis=1))
    W2 = ad.Variable(rng.standard_normal((M, Q)))
    assert (features @ W2).shape == (batch, N, Q)


def test_vjp_gradient_of_loss_at_variable():
    x = ad.Variable(3.0)
    with ad.GradientTape() as tape:
        y = x ** 2
    assert float(tape.gradient(y, x)) == 6.0


# =====================================================================================
# GradientTape tutorial (zh)
# =====================================================================================


def test_tutorial_gradient():
    x = ad.Variable(3.0)
    with ad.GradientTape() as tape:
        y = x ** 2
    assert tape.gradient(y, x).numpy() == 6.0


def test_tutorial_what_the_tape_watches():
    x0 = ad.Variable(3.0, name="x0")
    x1 = ad.Variable(3.0, name="x1", trainable=False)
    x2 = ad.Variable(2.0, name="x2") + 1.0
    x3 = ad.constant(3.0)
    assert not isinstance(x2, ad.Variable)
    with ad.GradientTape() as tape:
        y = (x0 ** 2) + (x1 ** 2) + (x2 ** 2) + (x3 ** 2)
    grad = tape.gradient(y, [x0, x1, x2, x3])
    assert float(grad[0]) == 6.0 and grad[1:] == [None, None, None]

    with ad.GradientTape() as tape:
        tape.watch([x1, x2, x3])
        y = (x0 ** 2) + (x1 ** 2) + (x2 ** 2) + (x3 ** 2)
    grad = tape.gradient(y, [x0, x1, x2, x3])
    assert [float(g) for g in grad] == [6.0, 6.0, 6.0, 6.0]


def test_tutorial_disable_tracking():
    variable_a = ad.Variable(3.0, name="x1")
    variable_b = ad.Variable(2.0, name="x2")
    with ad.GradientTape(persistent=True, watch_accessed_variables=False) as tape:
        tape.watch(variable_a)
        y = variable_a ** 2
        z = variable_b ** 3
    assert float(tape.gradient(y, variable_a)) == 6.0
    assert tape.gradient(z, variable_b) is None


def test_tutorial_persistent_and_nested():
    x = ad.Variable(3.0)
    with ad.GradientTape(persistent=True) as persistent_tape:
        persistent_tape.watch(x)
        y = x * x
        z = y * y
    assert persistent_tape.gradient(z, x).numpy() == 108.0
    assert persistent_tape.gradient(y, x).numpy() == 6.0

    with ad.GradientTape() as tape:
        tape.watch(x)
        with ad.GradientTape() as tape2:
            tape2.watch(x)
            y = x * x
        dy_dx = tape2.gradient(y, x)
    d2y_d2x = tape.gradient(dy_dx, x)
    assert dy_dx.numpy() == 6.0 and d2y_d2x.numpy() == 2.0


# =====================================================================================
# The demo itself
# =====================================================================================


def test_demo_runs_and_saves_the_guides_figures(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    spec = importlib.util.spec_from_file_location("srcad_demo", os.path.join(ROOT, "examples", "demo.py"))
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
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
