"""Tensor, Variable, constant and convert_to_tensor: values, dtypes, operators, indexing, Variables, bad input."""

import operator

import numpy as np
import pytest

import srcad as ad
from srcad.testing import check_grads


# -- construction and dtypes -----------------------------------------------------------------

@pytest.mark.parametrize("value,dtype", [
    (3.0, np.float64), ([1.0, 2.0], np.float64), (np.float32(2.0), np.float32), (np.ones(2, np.float32), np.float32),
    (3, np.int64), ([1, 2], np.int64), (True, np.bool_), (np.arange(3, dtype=np.int32), np.int32), (1 + 2j, np.complex128),
])
def test_dtype_follows_numpy(value, dtype):
    assert ad.constant(value).dtype == dtype
    assert ad.convert_to_tensor(value).dtype == dtype
    assert ad.Variable(value).dtype == dtype


def test_explicit_dtype():
    assert ad.constant(2.0, dtype=np.float32).dtype == np.float32
    assert ad.constant([1, 2], dtype="float32").dtype == np.float32
    assert ad.Variable(1, dtype=np.float64).dtype == np.float64
    assert ad.convert_to_tensor(ad.constant([1, 2]), dtype=np.float64).dtype == np.float64


def test_convert_to_tensor_returns_tensors_unchanged():
    t = ad.constant([1.0])
    assert ad.convert_to_tensor(t) is t
    assert ad.convert_to_tensor(t, dtype=np.float64) is t
    assert isinstance(ad.convert_to_tensor(np.ones(3)), ad.Tensor)


def test_attributes_and_numpy():
    x = ad.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert x.shape == (2, 3) and x.ndim == 2 and x.dtype == np.float64 and x.size == 6 and len(x) == 2
    assert isinstance(x.numpy(), np.ndarray)
    np.testing.assert_array_equal(x.numpy(), [[1, 2, 3], [4, 5, 6]])
    s = ad.constant(2.5)
    assert s.shape == () and s.ndim == 0
    assert isinstance(s.numpy(), np.float64) and s.numpy() == 2.5
    assert float(s) == 2.5 and int(ad.constant(3)) == 3 and bool(ad.constant(1.0))
    assert [3, 4, 5][ad.constant(1)] == 4     # __index__


def test_array_protocol():
    x = ad.constant([1.0, 2.0])
    a = np.asarray(x)
    assert isinstance(a, np.ndarray) and a.dtype == np.float64
    assert np.array(x, dtype=np.float32).dtype == np.float32
    np.testing.assert_array_equal(np.array(x), [1.0, 2.0])


def test_repr_and_str():
    x = ad.constant([1.0, 2.0])
    assert repr(x) == "<ad.Tensor: shape=(2,), dtype=float64, numpy=[1., 2.]>"
    assert str(x) == "ad.Tensor([1., 2.], shape=(2,), dtype=float64)"
    assert repr(ad.constant(3)) == "<ad.Tensor: shape=(), dtype=int64, numpy=3>"
    assert repr(ad.Variable(1.5, name="w")) == "<ad.Variable 'w' shape=() dtype=float64, numpy=1.5>"
    assert "..." in repr(ad.constant(np.zeros(1000)))   # long tensors are summarised


def test_rank0_len_and_iteration():
    with pytest.raises(TypeError, match="rank-0"):
        len(ad.constant(1.0))
    with pytest.raises(TypeError, match="rank-0"):
        iter(ad.constant(1.0))
    rows = list(ad.constant([[1.0, 2.0], [3.0, 4.0]]))
    assert len(rows) == 2 and isinstance(rows[0], ad.Tensor)
    np.testing.assert_array_equal(rows[1].numpy(), [3.0, 4.0])


def test_tensors_are_immutable_and_hashable():
    x = ad.constant([1.0, 2.0])
    with pytest.raises(TypeError, match="immutable"):
        x[0] = 3.0
    with pytest.raises(TypeError, match="immutable"):
        np.add(x, 1.0, out=np.zeros(2))
    assert {x: 1}[x] == 1


# -- operators ---------------------------------------------------------------------------------

BINARY_OPS = [operator.add, operator.sub, operator.mul, operator.truediv, operator.pow, operator.floordiv,
              operator.mod, operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne]


@pytest.mark.parametrize("op", BINARY_OPS, ids=lambda op: op.__name__)
def test_binary_operators_match_numpy(op):
    a, b = np.array([[1.5, 2.0], [3.0, 0.5]]), np.array([2.0, 1.5])
    for x, y in [(ad.constant(a), ad.constant(b)), (ad.constant(a), b), (a, ad.constant(b)), (ad.constant(a), 2.0),
                 (2.0, ad.constant(a))]:
        r = op(x, y)
        assert isinstance(r, ad.Tensor)
        np.testing.assert_allclose(r.numpy(), op(np.asarray(x), np.asarray(y)))
        assert r.dtype == op(np.asarray(x), np.asarray(y)).dtype


def test_matmul_unary_and_abs():
    a = np.array([[1.0, -2.0], [3.0, 4.0]])
    x = ad.constant(a)
    np.testing.assert_allclose((x @ x).numpy(), a @ a)
    np.testing.assert_allclose((a @ x).numpy(), a @ a)
    np.testing.assert_allclose((x @ a).numpy(), a @ a)
    np.testing.assert_allclose((-x).numpy(), -a)
    np.testing.assert_allclose(abs(x).numpy(), np.abs(a))
    assert (+x) is x
    np.testing.assert_allclose(x.T.numpy(), a.T)


def test_operators_are_differentiable():
    x, y = ad.Variable([1.0, 2.0]), ad.Variable([[0.5, 1.0], [2.0, -1.0]])
    with ad.GradientTape() as tape:
        z = ((-x) * 2 + 1.0 / x - x ** 3 + abs(x) - 3 % x) @ y @ x
    gx, gy = tape.gradient(z, [x, y])
    v = np.array([1.0, 2.0])
    w = (-v) * 2 + 1 / v - v ** 3 + v - 3 % v
    expected_gx = (-2 - 1 / v ** 2 - 3 * v ** 2 + 1 + np.floor(3 / v)) * (y.numpy() @ v) + w @ y.numpy()
    np.testing.assert_allclose(gx.numpy(), expected_gx)
    np.testing.assert_allclose(gy.numpy(), np.outer(w, v))
    rng = np.random.default_rng(0)
    check_grads(lambda a, b: (a * b - a / b) @ b.T - (-a) ** 2 @ abs(b).T,
                rng.random((2, 3)), rng.random((2, 3)) + 1.0)


def test_comparisons_give_bool_tensors_without_gradient():
    x = ad.Variable([1.0, 3.0])
    with ad.GradientTape() as tape:
        c = x > 2.0
    assert c.dtype == np.bool_ and c.numpy().tolist() == [False, True]
    assert tape.gradient(c, x) is None


# -- indexing --------------------------------------------------------------------------------------

@pytest.mark.parametrize("index", [
    1, -1, slice(1, None), (slice(None), 0), (Ellipsis, 1), (None, 1), ([0, 2, 2],), (np.array([True, False, True]),),
    (slice(None, None, -1), [1, 0]), (1, slice(0, 3, 2)), ((0, 2), (1, 3)),
], ids=str)
def test_indexing_matches_numpy_and_is_differentiable(index):
    a = np.arange(12.0).reshape(3, 4)
    x = ad.Variable(a)
    with ad.GradientTape() as tape:
        y = x[index]
    np.testing.assert_array_equal(y.numpy(), a[index])
    expected = np.zeros_like(a)
    np.add.at(expected, index, 1.0)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), expected)


def test_indexing_with_tensors():
    a = np.arange(6.0)
    x = ad.Variable(a)
    with ad.GradientTape() as tape:
        y = x[ad.constant([1, 1, 4])] + x[x > 3.5].sum()
    np.testing.assert_array_equal(y.numpy(), [1 + 9, 1 + 9, 4 + 9])
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), [0, 2, 0, 0, 4, 3])


# -- methods -----------------------------------------------------------------------------------

def test_methods():
    a = np.arange(6.0).reshape(2, 3)
    x = ad.constant(a)
    np.testing.assert_array_equal(x.reshape(3, 2).numpy(), a.reshape(3, 2))
    np.testing.assert_array_equal(x.reshape((6,)).numpy(), a.reshape(6))
    np.testing.assert_array_equal(x.transpose().numpy(), a.T)
    np.testing.assert_array_equal(x.transpose(1, 0).numpy(), a.T)
    assert x.sum().numpy() == 15.0 and x.mean(axis=0).shape == (3,)
    assert x.max(axis=1, keepdims=True).shape == (2, 1) and x.min().numpy() == 0.0
    assert x.astype(np.float32).dtype == np.float32 and x.astype(int).dtype == np.int64


# -- Variables -------------------------------------------------------------------------------------

def test_variable_basics():
    v = ad.Variable([1.0, 2.0], name="w")
    assert v.trainable and v.name == "w" and isinstance(v, ad.Tensor)
    assert not ad.Variable(1.0, trainable=False).trainable
    assert ad.Variable(1.0).name == "Variable"


def test_variable_owns_its_buffer():
    a = np.array([1.0, 2.0])
    v = ad.Variable(a)
    a[0] = 100.0
    assert v.numpy()[0] == 1.0


def test_assign_family():
    v = ad.Variable([1.0, 2.0])
    assert v.assign([3.0, 4.0]) is v
    np.testing.assert_array_equal(v.numpy(), [3.0, 4.0])
    v.assign_add(ad.constant([1.0, 1.0]))
    np.testing.assert_array_equal(v.numpy(), [4.0, 5.0])
    v.assign_sub(0.5)
    np.testing.assert_array_equal(v.numpy(), [3.5, 4.5])
    v.assign(ad.constant([0.0, 0.0]))
    assert v.dtype == np.float64
    i = ad.Variable(1)
    i.assign_add(2)
    assert i.numpy() == 3 and i.dtype == np.int64


@pytest.mark.parametrize("method", ["assign", "assign_add", "assign_sub"])
def test_assign_wrong_shape(method):
    v = ad.Variable([1.0, 2.0], name="w")
    with pytest.raises(ValueError, match=r"shape \(3,\).*'w'.*shape \(2,\)"):
        getattr(v, method)([1.0, 2.0, 3.0])


def test_assign_is_not_differentiable_and_keeps_recorded_gradients():
    v = ad.Variable(3.0)
    with ad.GradientTape() as tape:
        y = v * v
        v.assign(5.0)
        z = y + v            # reads the new value
        v.assign_add(1.0)    # not on the tape
    np.testing.assert_allclose(tape.gradient(z, v).numpy(), 2 * 3.0 + 1.0)
    assert v.numpy() == 6.0


def test_non_trainable_variable_not_watched():
    v = ad.Variable(2.0, trainable=False)
    with ad.GradientTape() as tape:
        y = v * v
    assert tape.gradient(y, v) is None


# -- bad input ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", ["abc", b"abc", None, ["a", "b"], {"a": 1}, [1.0, None], object()],
                         ids=["str", "bytes", "None", "list-of-str", "dict", "list-with-None", "object"])
@pytest.mark.parametrize("make", [ad.constant, ad.convert_to_tensor, ad.Variable, ad.Tensor],
                         ids=["constant", "convert_to_tensor", "Variable", "Tensor"])
def test_bad_input_raises_type_error(make, bad):
    with pytest.raises(TypeError, match="Cannot convert .* to a Tensor"):
        make(bad)


@pytest.mark.parametrize("bad", ["abc", None])
def test_assign_bad_value(bad):
    v = ad.Variable([1.0, 2.0])
    with pytest.raises(TypeError, match="Cannot convert"):
        v.assign(bad)
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])
