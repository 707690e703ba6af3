"""ad.nn: activations (first and second order), Dense, BatchNormalization, clipping."""

import warnings

import numpy as np
import pytest

import srcad as ad
from srcad.testing import check_batch_vjp, check_grads, nested_derivatives
from srcad import nn


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _fd_variables(loss_fn, variables, eps=1e-6):
    """Central finite differences of ``loss_fn()`` (a float) with respect to each variable."""
    grads = []
    for v in variables:
        base = v.numpy().copy()
        g = np.zeros_like(base, dtype=np.float64)
        for idx in np.ndindex(base.shape):
            for sign in (1, -1):
                pert = base.copy()
                pert[idx] += sign * eps
                v.assign(pert)
                g[idx] += sign * float(loss_fn()) / (2 * eps)
            v.assign(base)
        grads.append(g)
    return grads


X_NZ = np.array([-3.0, -1.2, -0.3, 0.4, 1.1, 2.5])   # away from the kinks at 0


# -- activations: values ----------------------------------------------------------------------


def test_activation_values():
    x = np.array([-50.0, -2.0, -0.5, 0.0, 0.5, 2.0, 50.0])
    np.testing.assert_allclose(nn.relu(x).numpy(), np.maximum(x, 0))
    np.testing.assert_allclose(nn.elu(x).numpy(), np.where(x > 0, x, np.exp(x) - 1))
    np.testing.assert_allclose(nn.elu(x, alpha=0.5).numpy(), np.where(x > 0, x, 0.5 * (np.exp(x) - 1)))
    np.testing.assert_allclose(nn.sigmoid(x).numpy(), _sig(x), rtol=1e-15)
    np.testing.assert_allclose(nn.softplus(x).numpy(), np.log1p(np.exp(x)), rtol=1e-14)


def test_activations_are_stable_at_extremes():
    x = np.array([-1e4, -745.0, -40.0, 40.0, 745.0, 1e4])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warnings
        s = nn.sigmoid(x).numpy()
        sp = nn.softplus(x).numpy()
        e = nn.elu(x).numpy()
        with ad.GradientTape() as t:
            xt = ad.constant(x)
            t.watch(xt)
            y = nn.sigmoid(xt) + nn.softplus(xt) + nn.elu(xt)
        g = t.gradient(y, xt).numpy()
    assert np.all(np.isfinite(s)) and np.all(np.isfinite(sp)) and np.all(np.isfinite(e)) and np.all(np.isfinite(g))
    assert s[0] == 0.0 and s[-1] == 1.0
    np.testing.assert_allclose(s[2], np.exp(-40.0) / (1 + np.exp(-40.0)), rtol=1e-14)  # relative accuracy kept
    np.testing.assert_allclose(sp[-1], 1e4)
    np.testing.assert_allclose(sp[2], np.exp(-40.0), rtol=1e-12)
    np.testing.assert_allclose(e[:3], -1.0)


@pytest.mark.parametrize("fn", [nn.relu, nn.elu, nn.sigmoid, nn.softplus])
def test_activations_keep_float32(fn):
    x = ad.constant(np.array([-1.5, 0.25, 2.0], dtype=np.float32))
    with ad.GradientTape() as t:
        t.watch(x)
        y = fn(x)
    assert y.dtype == np.float32
    assert t.gradient(y, x).dtype == np.float32


def test_activations_accept_arrays_and_numbers():
    assert isinstance(nn.relu([1.0, -1.0]), ad.Tensor)
    assert float(nn.sigmoid(0.0)) == 0.5
    assert float(nn.softplus(0)) == pytest.approx(np.log(2.0))


def test_top_level_names():
    assert ad.sigmoid is nn.sigmoid and ad.relu is nn.relu
    assert ad.clip_by_norm is nn.clip_by_norm and ad.clip_by_value is nn.clip_by_value
    assert ad.nn.Dense is nn.Dense and ad.nn.BatchNormalization is nn.BatchNormalization


# -- activations: derivatives ---------------------------------------------------------------------


def test_sigmoid_derivatives_closed_form():
    x = np.linspace(-6, 6, 13)
    s = _sig(x)
    _, d1, d2, d3 = nested_derivatives(nn.sigmoid, x, order=3)
    np.testing.assert_allclose(d1.numpy(), s * (1 - s), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(d2.numpy(), s * (1 - s) * (1 - 2 * s), rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(d3.numpy(), s * (1 - s) * (1 - 6 * s + 6 * s * s), rtol=1e-9, atol=1e-15)


def test_softplus_derivatives_closed_form():
    x = np.linspace(-6, 6, 13)
    s = _sig(x)
    _, d1, d2 = nested_derivatives(nn.softplus, x, order=2)
    np.testing.assert_allclose(d1.numpy(), s, rtol=1e-12)
    np.testing.assert_allclose(d2.numpy(), s * (1 - s), rtol=1e-10)


def test_elu_derivatives_closed_form():
    x = X_NZ
    _, d1, d2 = nested_derivatives(nn.elu, x, order=2)
    np.testing.assert_allclose(d1.numpy(), np.where(x > 0, 1.0, np.exp(x)), rtol=1e-12)
    d2 = np.zeros_like(x) if d2 is None else d2.numpy()
    np.testing.assert_allclose(d2, np.where(x > 0, 0.0, np.exp(x)), rtol=1e-12)


def test_relu_derivatives_closed_form():
    x = np.array([-2.0, -0.5, 0.0, 0.5, 2.0])
    _, d1, d2 = nested_derivatives(nn.relu, x, order=2, unconnected_gradients="zero")
    np.testing.assert_array_equal(d1.numpy(), [0.0, 0.0, 0.0, 1.0, 1.0])  # 0 at the kink, as TensorFlow
    np.testing.assert_array_equal(d2.numpy(), np.zeros(5))


@pytest.mark.parametrize("fn", [nn.sigmoid, nn.softplus, nn.elu, nn.relu, lambda x: nn.elu(x, alpha=0.3)],
                         ids=["sigmoid", "softplus", "elu", "relu", "elu_alpha"])
def test_activation_vjps_against_finite_differences(fn):
    x = np.random.default_rng(0).uniform(0.2, 2.0, (3, 4)) * np.where(np.arange(12).reshape(3, 4) % 2, 1, -1)
    check_grads(fn, x, order=3 if fn is nn.sigmoid else 2)
    check_batch_vjp(fn, x)


# -- clipping ------------------------------------------------------------------------------------------


def test_clip_by_norm_values():
    t = ad.constant([3.0, 4.0])
    np.testing.assert_allclose(ad.clip_by_norm(t, 1.0).numpy(), [0.6, 0.8])
    np.testing.assert_allclose(ad.clip_by_norm(t, 5.0).numpy(), [3.0, 4.0])
    np.testing.assert_allclose(ad.clip_by_norm(t, 10.0).numpy(), [3.0, 4.0])
    assert float(ad.clip_by_norm(4.0, 0.5)) == 0.5
    assert float(ad.clip_by_norm(-4.0, 0.5)) == -0.5
    m = ad.constant([[3.0, 4.0], [0.3, 0.4]])
    np.testing.assert_allclose(ad.clip_by_norm(m, 1.0, axes=[1]).numpy(), [[0.6, 0.8], [0.3, 0.4]])
    np.testing.assert_allclose(ad.clip_by_norm(m, 1.0).numpy(), m.numpy() / np.linalg.norm(m.numpy()))


def test_clip_by_norm_zero_tensor_has_finite_gradient():
    t = ad.constant(np.zeros(3))
    with ad.GradientTape() as tape:
        tape.watch(t)
        y = ad.clip_by_norm(t, 1.0)
    assert np.all(y.numpy() == 0)
    np.testing.assert_array_equal(tape.gradient(y, t).numpy(), np.ones(3))


def test_clip_by_norm_gradient():
    rng = np.random.default_rng(1)
    check_grads(lambda t: ad.clip_by_norm(t, 0.7), rng.standard_normal((2, 3)))        # clipped
    check_grads(lambda t: ad.clip_by_norm(t, 50.0), rng.standard_normal((2, 3)))       # not clipped
    check_grads(lambda t: ad.clip_by_norm(t, 1.0, axes=1), rng.standard_normal((3, 4)))
    check_batch_vjp(lambda t: ad.clip_by_norm(t, 0.7), rng.standard_normal((2, 3)))


def test_clip_by_norm_rejects_bad_input():
    with pytest.raises(TypeError, match="floating"):
        ad.clip_by_norm(ad.constant([1, 2]), 1.0)
    with pytest.raises(ValueError, match="scalar"):
        ad.clip_by_norm(ad.constant([1.0, 2.0]), [1.0, 2.0])


def test_clip_by_value_values_and_gradients():
    t = ad.constant([-2.0, -1.0, 0.0, 1.0, 2.0])
    with ad.GradientTape() as tape:
        tape.watch(t)
        y = ad.clip_by_value(t, -1.0, 1.0)
    np.testing.assert_array_equal(y.numpy(), [-1.0, -1.0, 0.0, 1.0, 1.0])
    # TensorFlow: the gradient passes inside the bounds, boundaries included, and is 0 outside
    np.testing.assert_array_equal(tape.gradient(y, t).numpy(), [0.0, 1.0, 1.0, 1.0, 0.0])


def test_clip_by_value_tensor_bounds():
    t = ad.constant([[0.5, 3.0], [-4.0, 1.0]])
    lo = ad.Variable([-1.0, 0.0])
    hi = ad.Variable(2.0)
    with ad.GradientTape() as tape:
        tape.watch(t)
        y = ad.clip_by_value(t, lo, hi)
    np.testing.assert_array_equal(y.numpy(), [[0.5, 2.0], [-1.0, 1.0]])
    g_t, g_lo, g_hi = tape.gradient(y, [t, lo, hi])
    np.testing.assert_array_equal(g_t.numpy(), [[1.0, 0.0], [0.0, 1.0]])
    np.testing.assert_array_equal(g_lo.numpy(), [1.0, 0.0])
    assert float(g_hi) == 1.0


def test_clip_by_value_rejects_incompatible_bounds():
    with pytest.raises(ValueError, match="incompatible"):
        ad.clip_by_value(ad.constant([1.0, 2.0]), ad.constant([0.0, 0.0, 0.0]), 3.0)
    with pytest.raises(ValueError, match="incompatible"):   # would broadcast t to a bigger shape
        ad.clip_by_value(ad.constant([1.0, 2.0]), 0.0, ad.constant([[3.0, 3.0], [3.0, 3.0]]))


def test_clip_by_value_float32_kept():
    y = ad.clip_by_value(ad.constant(np.array([1.0, 5.0], np.float32)), 0.0, 2.0)
    assert y.dtype == np.float32


# -- Dense -----------------------------------------------------------------------------------------------


def test_dense_builds_lazily():
    layer = nn.Dense(4)
    assert not layer.built and layer.kernel is None and layer.bias is None
    assert layer.variables == [] and layer.trainable_variables == []
    y = layer(np.ones((2, 3)))
    assert layer.built and y.shape == (2, 4)
    assert layer.kernel.shape == (3, 4) and layer.bias.shape == (4,)
    assert layer.variables == [layer.kernel, layer.bias]
    assert layer.trainable_variables == [layer.kernel, layer.bias]
    assert layer.non_trainable_variables == []
    assert all(isinstance(v, ad.Variable) and v.trainable for v in layer.variables)
    np.testing.assert_array_equal(layer.bias.numpy(), np.zeros(4))
    kernel = layer.kernel
    layer(np.ones((5, 3)))
    assert layer.kernel is kernel  # built once


def test_dense_computes_affine_plus_activation():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 3))
    for activation, ref in [(None, lambda z: z), ("relu", lambda z: np.maximum(z, 0)), (nn.sigmoid, _sig),
                            ("elu", lambda z: np.where(z > 0, z, np.expm1(z))), ("tanh", np.tanh),
                            ("linear", lambda z: z)]:
        layer = nn.Dense(5, activation=activation, bias_initializer=lambda s, d, r: np.full(s, 0.1, d), seed=1)
        y = layer(x)
        np.testing.assert_allclose(y.numpy(), ref(x @ layer.kernel.numpy() + 0.1), rtol=1e-12)


def test_dense_without_bias_and_higher_rank_inputs():
    layer = nn.Dense(2, use_bias=False, seed=0)
    y = layer(np.ones((4, 7, 3)))
    assert y.shape == (4, 7, 2) and layer.bias is None and layer.variables == [layer.kernel]


def test_dense_glorot_uniform_is_seedable():
    a, b, c = nn.Dense(50, seed=3), nn.Dense(50, seed=3), nn.Dense(50, seed=4)
    for layer in (a, b, c):
        layer(np.ones((1, 30)))
    np.testing.assert_array_equal(a.kernel.numpy(), b.kernel.numpy())
    assert not np.array_equal(a.kernel.numpy(), c.kernel.numpy())
    limit = np.sqrt(6.0 / (30 + 50))
    k = a.kernel.numpy()
    assert np.all(np.abs(k) <= limit) and np.abs(k).max() > 0.9 * limit
    assert abs(k.mean()) < 0.05 and k.std() == pytest.approx(limit / np.sqrt(3), rel=0.1)
    rng = np.random.default_rng(7)
    d = nn.Dense(3, rng=rng)
    d(np.ones((1, 2)))
    assert d.kernel.shape == (2, 3)


def test_dense_dtypes():
    layer = nn.Dense(3, seed=0)
    y = layer(np.ones((2, 4), np.float32))
    assert layer.kernel.dtype == np.float32 and y.dtype == np.float32
    layer = nn.Dense(3, seed=0)
    layer(np.ones((2, 4), np.int64))
    assert layer.kernel.dtype == np.float64
    layer = nn.Dense(3, seed=0, dtype=np.float32)   # an explicit dtype wins over the input's
    layer(np.ones((2, 4)))
    assert layer.kernel.dtype == np.float32 and layer.bias.dtype == np.float32


def test_dense_bad_arguments():
    with pytest.raises(ValueError, match="positive number of units"):
        nn.Dense(0)
    with pytest.raises(ValueError, match="Unknown activation"):
        nn.Dense(3, activation="swishy")
    with pytest.raises(ValueError, match="Unknown initializer"):
        nn.Dense(3, kernel_initializer="he_magic")
    layer = nn.Dense(3)
    layer(np.ones((2, 4)))
    with pytest.raises(ValueError, match="last dimension 4"):
        layer(np.ones((2, 5)))


@pytest.mark.parametrize("activation", [None, "relu", "elu", "sigmoid", "softplus"])
def test_dense_gradients_against_finite_differences(activation):
    rng = np.random.default_rng(2)
    x = ad.constant(rng.standard_normal((5, 4)))
    layer = nn.Dense(3, activation=activation, seed=5, bias_initializer=lambda s, d, r: rng.standard_normal(s))
    layer(x)

    def loss():
        return np.sum(layer(x) ** 2 * np.arange(1.0, 4.0))

    with ad.GradientTape() as tape:
        value = loss()
    grads = tape.gradient(value, layer.trainable_variables)
    fd = _fd_variables(lambda: loss().numpy(), layer.trainable_variables)
    for g, f in zip(grads, fd):
        np.testing.assert_allclose(g.numpy(), f, rtol=1e-6, atol=1e-7)


def test_dense_input_gradient_second_order():
    rng = np.random.default_rng(3)
    layer = nn.Dense(4, activation="softplus", seed=0)
    layer(np.zeros((1, 3)))
    check_grads(lambda x: layer(x), rng.standard_normal((2, 3)), order=2)
    check_batch_vjp(lambda x: layer(x), rng.standard_normal((2, 3)))


def test_dense_variables_watched_automatically():
    layer = nn.Dense(2, seed=0)
    with ad.GradientTape() as tape:
        y = layer(np.ones((1, 3)))
    assert set(map(id, tape.watched_variables())) == {id(layer.kernel), id(layer.bias)}
    gk, gb = tape.gradient(y, [layer.kernel, layer.bias])
    np.testing.assert_array_equal(gk.numpy(), np.ones((3, 2)))
    np.testing.assert_array_equal(gb.numpy(), np.ones(2))


# -- BatchNormalization -----------------------------------------------------------------------------------


def test_batch_norm_builds_lazily_with_keras_variables():
    bn = nn.BatchNormalization()
    assert not bn.built and bn.variables == []
    bn(np.ones((4, 3)), training=True)
    assert bn.gamma.shape == bn.beta.shape == bn.moving_mean.shape == bn.moving_variance.shape == (3,)
    assert bn.trainable_variables == [bn.gamma, bn.beta]
    assert bn.non_trainable_variables == [bn.moving_mean, bn.moving_variance]
    assert bn.variables == [bn.gamma, bn.beta, bn.moving_mean, bn.moving_variance]
    assert not bn.moving_mean.trainable and not bn.moving_variance.trainable
    assert bn.momentum == 0.99 and bn.epsilon == 1e-3


def test_batch_norm_training_normalises_with_batch_statistics():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((16, 3)) * [1.0, 5.0, 0.1] + [2.0, -3.0, 0.5]
    bn = nn.BatchNormalization()
    y = bn(x, training=True).numpy()
    mean, var = x.mean(axis=0), x.var(axis=0)
    np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + 1e-3), rtol=1e-12)
    np.testing.assert_allclose(y.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(y.var(axis=0), var / (var + 1e-3), rtol=1e-12)
    # the moving statistics move by 1 - momentum towards the batch statistics
    np.testing.assert_allclose(bn.moving_mean.numpy(), 0.01 * mean, rtol=1e-12)
    np.testing.assert_allclose(bn.moving_variance.numpy(), 0.99 + 0.01 * var, rtol=1e-12)
    bn(x, training=True)
    np.testing.assert_allclose(bn.moving_mean.numpy(), (0.99 * 0.01 + 0.01) * mean, rtol=1e-12)


def test_batch_norm_inference_uses_moving_statistics():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 2))
    bn = nn.BatchNormalization(momentum=0.5, epsilon=1e-2)
    bn(x)  # build (inference: moving stats 0 / 1)
    np.testing.assert_allclose(bn(x).numpy(), x / np.sqrt(1 + 1e-2), rtol=1e-12)
    bn.gamma.assign([2.0, 3.0])
    bn.beta.assign([0.5, -0.5])
    bn(x, training=True)
    mm, mv = bn.moving_mean.numpy(), bn.moving_variance.numpy()
    np.testing.assert_allclose(mm, 0.5 * x.mean(axis=0))
    for training in (False, None):
        np.testing.assert_allclose(bn(x, training=training).numpy(),
                                   (x - mm) / np.sqrt(mv + 1e-2) * [2.0, 3.0] + [0.5, -0.5], rtol=1e-12)


def test_batch_norm_gradients_through_batch_statistics():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((6, 3))
    bn = nn.BatchNormalization()
    bn(x, training=True)
    bn.gamma.assign(rng.uniform(0.5, 2.0, 3))
    bn.beta.assign(rng.standard_normal(3))
    check_grads(lambda x: bn(x, training=True), x, order=2, rtol=1e-5, atol=1e-6)
    check_batch_vjp(lambda x: bn(x, training=True), x)
    # sum over the batch of a normalised feature is constant (N * beta): its input gradient is 0
    xt = ad.constant(x)
    with ad.GradientTape() as tape:
        tape.watch(xt)
        y = np.sum(bn(xt, training=True))
    np.testing.assert_allclose(tape.gradient(y, xt).numpy(), 0.0, atol=1e-12)


def test_batch_norm_variable_gradients_against_finite_differences():
    rng = np.random.default_rng(7)
    x = ad.constant(rng.standard_normal((5, 2)))
    bn = nn.BatchNormalization()
    w = rng.standard_normal((5, 2))

    def loss():
        return np.sum(bn(x, training=True) ** 3 * w)

    loss()
    with ad.GradientTape() as tape:
        value = loss()
    g_gamma, g_beta, g_mm = tape.gradient(value, [bn.gamma, bn.beta, bn.moving_mean])
    assert g_mm is None  # the moving statistics are not trainable and not used in training mode
    fd = _fd_variables(lambda: loss().numpy(), [bn.gamma, bn.beta])
    np.testing.assert_allclose(g_gamma.numpy(), fd[0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(g_beta.numpy(), fd[1], rtol=1e-6, atol=1e-7)


def test_batch_norm_other_axes_and_ranks():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((4, 3, 5))
    y = nn.BatchNormalization()(x, training=True).numpy()
    mean, var = x.mean(axis=(0, 1)), x.var(axis=(0, 1))
    np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + 1e-3), rtol=1e-12)
    bn = nn.BatchNormalization(axis=1)
    y = bn(x, training=True).numpy()
    assert bn.gamma.shape == (3,)
    mean, var = x.mean(axis=(0, 2), keepdims=True), x.var(axis=(0, 2), keepdims=True)
    np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + 1e-3), rtol=1e-12)
    check_grads(lambda x: bn(x, training=True), x, order=2)
    with pytest.raises(ValueError, match="rank 3"):
        bn(np.ones((4, 3)))


def test_batch_norm_float32():
    bn = nn.BatchNormalization()
    y = bn(np.arange(8, dtype=np.float32).reshape(4, 2), training=True)
    assert y.dtype == np.float32 and bn.gamma.dtype == np.float32
