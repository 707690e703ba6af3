"""jacobian / batch_jacobian (GRADIENTTAPE_SPEC.md 16, 17): shapes, values, errors, unconnected rules."""

import numpy as np
import pytest

import srcad as ad
from srcad.testing import fd_jacobian
from srcad import jacobians


def val(t):
    return None if t is None else np.asarray(t.numpy())


def f_vec(x):
    return np.sin(x) * np.sum(x * x) + np.exp(x[..., :1])


ONE_SET = "A non-persistent GradientTape can only be used to compute one set of gradients \\(or jacobians\\)"


# -- jacobian: values and shapes

@pytest.mark.parametrize("pfor", [True, False])
@pytest.mark.parametrize("parallel", [None, 1, 2, 100])
def test_jacobian_matches_finite_differences(pfor, parallel):
    xv = np.array([0.3, -1.1, 0.8])
    x = ad.constant(xv)
    with ad.GradientTape(persistent=True) as t:
        t.watch(x)
        y = f_vec(x)
    j = t.jacobian(y, x, parallel_iterations=parallel, experimental_use_pfor=pfor)
    assert j.shape == (3, 3)
    np.testing.assert_allclose(val(j), fd_jacobian(f_vec, xv), rtol=1e-6, atol=1e-8)


def test_jacobian_shapes_of_nests_and_ranks():
    rng = np.random.default_rng(1)
    a = ad.constant(rng.normal(size=(2, 3)))
    s = ad.Variable(0.5)
    w = ad.Variable(rng.normal(size=(3, 4)))
    with ad.GradientTape(persistent=True) as t:
        t.watch(a)
        y = np.tanh(a @ w) * s          # (2, 4)
        total = np.sum(y)               # scalar
    ja = t.jacobian(y, {"a": a, "pair": (s, [w])})
    assert ja["a"].shape == (2, 4, 2, 3)
    assert ja["pair"][0].shape == (2, 4)            # scalar source: target's shape
    assert ja["pair"][1][0].shape == (2, 4, 3, 4)
    assert t.jacobian(total, w).shape == (3, 4)     # scalar target: source's shape
    np.testing.assert_allclose(val(t.jacobian(total, w)), val(t.gradient(total, w)))
    wv, av, sv = w.numpy(), a.numpy(), 0.5
    np.testing.assert_allclose(val(ja["a"]), fd_jacobian(lambda v: np.tanh(v @ wv) * sv, av), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(val(ja["pair"][1][0]), fd_jacobian(lambda v: np.tanh(av @ v) * sv, wv),
                               rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(val(ja["pair"][0]), np.tanh(av @ wv), rtol=1e-12)


def test_parallel_iterations_gives_identical_results():
    rng = np.random.default_rng(2)
    x = ad.constant(rng.normal(size=(5, 2)))
    with ad.GradientTape(persistent=True) as t:
        t.watch(x)
        y = np.sin(x) * x[0, 0]
    full = val(t.jacobian(y, x))
    for p in (1, 3, 7, 10, 64):
        np.testing.assert_array_equal(val(t.jacobian(y, x, parallel_iterations=p)), full)


def test_jacobian_of_variable_target_and_scalar_scalar():
    v = ad.Variable([1.0, 2.0, 3.0])
    x = ad.Variable(2.0)
    with ad.GradientTape(persistent=True) as t:
        y = x ** 3
    np.testing.assert_array_equal(val(t.jacobian(v, v)), np.eye(3))
    assert val(t.jacobian(y, x)) == pytest.approx(12.0)


def test_jacobian_unconnected():
    x, u = ad.Variable([1.0, 2.0]), ad.Variable(np.ones((3,), np.float32))
    with ad.GradientTape(persistent=True) as t:
        y = x * x
    assert t.jacobian(y, u) is None
    for mode in ("zero", ad.UnconnectedGradients.ZERO):
        z = t.jacobian(y, u, unconnected_gradients=mode)
        assert z.shape == (2, 3) and z.dtype == np.float32 and not val(z).any()
    assert t.jacobian(y, u, experimental_use_pfor=False) is None
    with pytest.raises(ValueError, match="Unknown value for unconnected_gradients: 'nonsense'"):
        t.jacobian(y, u, unconnected_gradients="nonsense")


def test_jacobian_empty_target():
    x = ad.Variable([1.0, 2.0])
    with ad.GradientTape(persistent=True) as t:
        y = x[:0] * 2.0
    j = t.jacobian(y, x)
    assert j.shape == (0, 2)


def test_hessian_by_nested_tapes():
    xv = np.array([0.4, -0.7, 1.3])
    x = ad.constant(xv)

    def f(v):
        return np.sum(np.sin(v) * v[::-1]) + np.prod(v)

    with ad.GradientTape() as t2:
        t2.watch(x)
        with ad.GradientTape() as t1:
            t1.watch(x)
            y = f(x)
        g = t1.gradient(y, x)
    h = t2.jacobian(g, x)
    assert h.shape == (3, 3)
    hess_fd = fd_jacobian(lambda v: fd_jacobian(f, v, 1e-4), xv, 1e-4)
    np.testing.assert_allclose(val(h), hess_fd, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(val(h), val(h).T, rtol=1e-12)


def test_jacobian_of_jacobian_second_order():
    xv = np.array([0.5, 1.5])
    x = ad.constant(xv)
    with ad.GradientTape() as t2:
        t2.watch(x)
        with ad.GradientTape() as t1:
            t1.watch(x)
            y = np.exp(x) * x[0]
        j = t1.jacobian(y, x)
    jj = t2.jacobian(j, x)
    assert jj.shape == (2, 2, 2)
    fd = fd_jacobian(lambda v: fd_jacobian(lambda u: np.exp(u) * u[0], v, 1e-4), xv, 1e-4)
    np.testing.assert_allclose(val(jj), fd, rtol=1e-4, atol=1e-6)


def test_jacobian_is_one_sweep(monkeypatch):
    x = ad.constant(np.arange(6.0))
    with ad.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
    calls = []
    original = t._backprop
    monkeypatch.setattr(t, "_backprop", lambda *a: calls.append(a[1][0].shape) or original(*a))
    t.jacobian(y, x)
    assert calls == [(6, 6)]
    calls.clear()
    t.jacobian(y, x, parallel_iterations=4)
    assert calls == [(4, 6), (2, 6)]


# -- jacobian: tape usage and errors

def test_non_persistent_jacobian_works_once_even_inside_context():
    x = ad.Variable([1.0, 2.0])
    with ad.GradientTape() as t:
        y = x * x
        j = t.jacobian(y, x)
        assert ad.tape.recording_tapes() == []
    np.testing.assert_array_equal(val(j), np.diag([2.0, 4.0]))
    with pytest.raises(RuntimeError, match=ONE_SET):
        t.jacobian(y, x)
    with pytest.raises(RuntimeError, match=ONE_SET):
        t.gradient(y, x)


def test_jacobian_pfor_off_needs_persistent_tape():
    x = ad.Variable([1.0, 2.0])
    with ad.GradientTape() as t:
        y = x * x
    with pytest.raises(RuntimeError, match="GradientTape must be created with persistent=True to compute the "
                                           "jacobian with eager execution enabled and with  experimental_use_pfor "
                                           "set to False."):
        t.jacobian(y, x, experimental_use_pfor=False)


def test_jacobian_vectorization_failure_message():
    op = ad.Operation("JacTestBadGrad", lambda x: x * 2.0)

    @ad.RegisterGradient("JacTestBadGrad")
    def _grad(op, dy):
        raise ValueError("cannot")

    x = ad.Variable([1.0, 2.0])
    with ad.GradientTape(persistent=True) as t:
        y = op(x)
    with pytest.raises(ValueError, match="Encountered an exception while vectorizing the jacobian computation. "
                                         "Vectorization can be disabled by setting experimental_use_pfor to False."):
        t.jacobian(y, x)
    with pytest.raises(ValueError, match="cannot"):
        t.jacobian(y, x, experimental_use_pfor=False)


def test_jacobian_bad_arguments():
    x = ad.Variable([1.0, 2.0])
    with ad.GradientTape(persistent=True) as t:
        y = x * x
    with pytest.raises(TypeError, match="received None"):
        t.jacobian(None, x)
    with pytest.raises(TypeError, match="received \\[1.0\\] of type 'list'"):
        t.jacobian([1.0], x)
    with pytest.raises(TypeError, match="'abc' of type 'str'"):
        t.jacobian(y, "abc")
    with pytest.raises(ValueError, match="parallel_iterations must be a positive integer"):
        t.jacobian(y, x, parallel_iterations=0)


# -- batch_jacobian

def per_row(x):
    return np.tanh(x) * np.sum(x * x, axis=-1, keepdims=True)


@pytest.mark.parametrize("pfor, parallel", [(True, None), (True, 2), (False, None), (False, 3)])
def test_batch_jacobian_matches_per_example_jacobians(pfor, parallel):
    rng = np.random.default_rng(3)
    xv = rng.normal(size=(4, 3))
    x = ad.constant(xv)
    with ad.GradientTape(persistent=True) as t:
        t.watch(x)
        y = per_row(x)
    bj = t.batch_jacobian(y, x, parallel_iterations=parallel, experimental_use_pfor=pfor)
    assert bj.shape == (4, 3, 3)
    expected = np.stack([fd_jacobian(per_row, xv[i]) for i in range(4)])
    np.testing.assert_allclose(val(bj), expected, rtol=1e-6, atol=1e-8)


def test_batch_jacobian_higher_rank_shapes():
    rng = np.random.default_rng(4)
    xv = rng.normal(size=(2, 3, 2))
    wv = rng.normal(size=(6, 5))
    x = ad.constant(xv)

    def f(v):
        flat = np.reshape(v, (v.shape[0], 6))
        return np.reshape(np.sin(flat @ wv), (v.shape[0], 5, 1))

    with ad.GradientTape() as t:
        t.watch(x)
        y = f(x)
    bj = t.batch_jacobian(y, x)
    assert bj.shape == (2, 5, 1, 3, 2)
    expected = np.stack([fd_jacobian(lambda r: f(r[None])[0], xv[i]) for i in range(2)])
    np.testing.assert_allclose(val(bj), expected, rtol=1e-6, atol=1e-8)


def test_batch_jacobian_is_one_sweep_over_row_size(monkeypatch):
    x = ad.constant(np.ones((50, 3)))
    with ad.GradientTape(persistent=True) as t:
        t.watch(x)
        y = np.concatenate([x, x * x], axis=1)   # (50, 6)
    calls = []
    original = t._backprop
    monkeypatch.setattr(t, "_backprop", lambda *a: calls.append(a[1][0].shape) or original(*a))
    assert t.batch_jacobian(y, x).shape == (50, 6, 3)
    assert calls == [(6, 50, 6)]


def test_batch_jacobian_unconnected_is_zeros_even_with_none():
    x = ad.Variable(np.ones((2, 3)))
    u = ad.Variable(np.ones((2, 4), np.float32))
    with ad.GradientTape(persistent=True) as t:
        y = x * 2.0
    for mode in ("none", "zero"):
        z = t.batch_jacobian(y, u, unconnected_gradients=mode)
        assert z.shape == (2, 3, 4) and z.dtype == y.dtype and not val(z).any()


def test_batch_jacobian_degenerate_shape():
    x = ad.Variable(np.ones((1, 0)))
    with ad.GradientTape() as t:
        y = x * 2.0
    bj = t.batch_jacobian(y, x)
    assert bj.shape == (1, 0, 0)


def test_batch_jacobian_cross_row_terms_are_summed_as_tf():
    x = ad.constant([[1.0], [2.0]])
    with ad.GradientTape() as t:
        t.watch(x)
        y = x * np.sum(x)          # y_i = x_i * (x_0 + x_1)
    bj = val(t.batch_jacobian(y, x))
    # column-wise differentiation: d(sum_i y_i)/dx_i = (x0 + x1) + sum_j x_j = 6 for each row
    np.testing.assert_allclose(bj[:, 0, 0], [6.0, 6.0])


def test_batch_jacobian_errors():
    x = ad.Variable(np.ones((4, 3)))
    with ad.GradientTape(persistent=True) as t:
        y = x * 2.0
        v = np.sum(x, axis=1)
    with pytest.raises(ValueError, match=r"Shape \(4,\) must have rank at least 2"):
        t.batch_jacobian(v, x)
    with pytest.raises(ValueError, match=r"Shape \(4,\) must have rank at least 2"):
        t.batch_jacobian(y, v)
    with pytest.raises(ValueError, match=r"Need first dimension of target shape \(\(4, 3\)\) and source shape "
                                         r"\(\(2, 3\)\) to match."):
        t.batch_jacobian(y, ad.Variable(np.ones((2, 3))))
    with ad.GradientTape() as t:
        y = x * 2.0
    with pytest.raises(RuntimeError, match="to compute the batch_jacobian with eager execution enabled and  with "
                                           "experimental_use_pfor set to False."):
        t.batch_jacobian(y, x, experimental_use_pfor=False)
    with pytest.raises(RuntimeError, match="GradientTape must be created with persistent=True to compute the "
                                           "batch_jacobian with parallel_iterations."):
        t.batch_jacobian(y, x, parallel_iterations=2)
    t.batch_jacobian(y, x)
    with pytest.raises(RuntimeError, match=ONE_SET):
        t.batch_jacobian(y, x)


def test_batch_jacobian_second_order():
    xv = np.array([[0.3, 0.9], [-0.5, 0.2]])
    x = ad.constant(xv)
    with ad.GradientTape() as t2:
        t2.watch(x)
        with ad.GradientTape() as t1:
            t1.watch(x)
            y = np.sin(x) * x[:, ::-1]
        bj = t1.batch_jacobian(y, x)            # (2, 2, 2)
        s = np.sum(bj * np.array([1.0, -2.0, 0.5, 3.0]).reshape(1, 2, 2))
    g = val(t2.gradient(s, x))

    def s_np(v):
        rows = np.stack([fd_jacobian(lambda r: np.sin(r) * r[::-1], v[i], 1e-5) for i in range(2)])
        return np.sum(rows * np.array([1.0, -2.0, 0.5, 3.0]).reshape(1, 2, 2))

    np.testing.assert_allclose(g, fd_jacobian(s_np, xv, 1e-4), rtol=1e-4, atol=1e-6)


# -- ops that cannot take batched cotangents

def test_custom_gradient_node_inside_jacobian():
    @ad.custom_gradient
    def cube(x):
        def grad(dy):
            return dy * 3.0 * x * x
        return x * x * x, grad

    @ad.custom_gradient
    def const_grad(x):
        return x * 1.0, lambda dy: np.ones(2)   # ignores dy: must be mapped row by row

    xv = np.array([1.0, 2.0])
    x = ad.constant(xv)
    with ad.GradientTape(persistent=True) as t:
        t.watch(x)
        y = cube(x) + const_grad(x)
    np.testing.assert_allclose(val(t.jacobian(y, x)), np.diag(3 * xv ** 2) + np.ones((2, 2)))
    np.testing.assert_allclose(val(t.jacobian(y, x, experimental_use_pfor=False)),
                               np.diag(3 * xv ** 2) + np.ones((2, 2)))
    xb = ad.constant(np.array([[1.0, 2.0], [3.0, 4.0]]))
    with ad.GradientTape() as t:
        t.watch(xb)
        yb = cube(xb)
    np.testing.assert_allclose(val(t.batch_jacobian(yb, xb)),
                               np.stack([np.diag(3 * r ** 2) for r in xb.numpy()]))


def test_map_vjp_over_batch_helper_direct():
    seen = []

    class Op:
        def vjp(self, node, out_grads, needed):
            seen.append(out_grads[0].shape)
            return [out_grads[0] * 2.0]

    from srcad.tape import Node
    x = ad.constant([1.0, 2.0, 3.0])
    node = Node(Op(), (x,), (ad.constant([0.0, 0.0, 0.0]),), {})
    wrapped = jacobians.map_vjp_over_batch(Op().vjp)
    (g,) = wrapped(node, [ad.constant(np.ones((2, 4, 3)))], [True])
    assert g.shape == (2, 4, 3) and set(seen) == {(3,)} and len(seen) == 8
    np.testing.assert_array_equal(val(g), 2 * np.ones((2, 4, 3)))
