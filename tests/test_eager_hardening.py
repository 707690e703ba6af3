"""Issue 9, the eager layer: bad or unusual input to the tape gives TensorFlow's result or a clear error.

Dicts of unsortable keys, complex output_gradients, gradients in the source's dtype, a tape exited from
another thread, constants that copy their value, and TensorFlow's tie rules for max/min and maximum/minimum.
"""

import threading
import warnings

import numpy as np
import pytest

import srcad as ad
from srcad.testing import check_grads, nested_derivatives
from srcad import tape as tape_module


def val(t):
    return None if t is None else np.asarray(t.numpy())


# -- dicts of keys that cannot be sorted (tf.nest flattens dicts in sorted key order) ----------------

def _recorded_product():
    v, w = ad.Variable(2.0), ad.Variable(3.0)
    with ad.GradientTape(persistent=True) as tape:
        y = v * w
    return tape, v, w, y


def test_sources_dict_with_mixed_keys_raises_and_keeps_the_tape():
    tape, v, w, y = _recorded_product()
    with pytest.raises(TypeError, match=r"nest only supports dicts with sortable keys: Argument `sources` holds a "
                                        r"dict with keys \['a', 1\] \(types int, str\).*Use keys of one type"):
        tape.gradient(y, {"a": v, 1: w})
    assert tape.gradient(y, {"a": v, "b": w}) is not None  # nothing was consumed by the error
    grads = tape.gradient(y, {"a": v, "b": w})
    assert list(grads) == ["a", "b"] and val(grads["a"]) == 3.0 and val(grads["b"]) == 2.0


def test_non_persistent_tape_survives_a_mixed_key_error():
    v, w = ad.Variable(2.0), ad.Variable(3.0)
    with ad.GradientTape() as tape:
        y = v * w
    with pytest.raises(TypeError, match="sortable keys"):
        tape.gradient(y, {"a": v, 1: w})
    assert val(tape.gradient(y, v)) == 3.0


@pytest.mark.parametrize("where", ["target", "output_gradients", "tensor", "sources"])
def test_mixed_keys_anywhere_in_a_nest_raise(where):
    tape, v, w, y = _recorded_product()
    with pytest.raises(TypeError, match=f"nest only supports dicts with sortable keys: Argument `{where}` holds"):
        if where == "target":
            tape.gradient({"a": y, 0: y}, v)
        elif where == "output_gradients":
            tape.gradient([y, y], v, output_gradients={"a": 1.0, 0: 1.0})
        elif where == "tensor":
            tape.watch({None: v, "b": w})
        else:
            tape.gradient(y, [v, {"x": (w,), 2: v}])


def test_sortable_keys_of_mixed_numeric_types_keep_the_callers_order():
    tape, v, w, y = _recorded_product()
    grads = tape.gradient(y, {2.5: v, 1: w})
    assert list(grads) == [2.5, 1] and val(grads[2.5]) == 3.0 and val(grads[1]) == 2.0


# -- complex output_gradients -----------------------------------------------------------------------

def test_complex_output_gradients_for_a_real_target_raise():
    x = ad.Variable([1.0, 2.0])
    with ad.GradientTape(persistent=True) as tape:
        y = x * x
    with pytest.raises(TypeError, match=r"output_gradients entry 0 has the complex dtype complex128, but its "
                                        r"target has the real dtype float64.*Pass a real value"):
        tape.gradient(y, x, output_gradients=np.array([1 + 1j, 2j]))
    with pytest.raises(TypeError, match="output_gradients entry 1 has the complex dtype complex64"):
        tape.gradient([y, y], x, output_gradients=[np.ones(2), np.ones(2, np.complex64)])
    np.testing.assert_allclose(val(tape.gradient(y, x, output_gradients=np.array([1.0, 2.0]))), [2.0, 8.0])


def test_complex_output_gradients_for_a_complex_target_are_accepted():
    x = ad.Variable([1.0, 2.0])
    with ad.GradientTape() as tape:
        y = x * (1 + 1j)
    g = tape.gradient(y, x, output_gradients=np.array([1.0 + 0j, 2.0 + 0j]))
    assert g.dtype == np.float64            # a real source's gradient is real: the real part, as tf.cast
    np.testing.assert_allclose(val(g), [1.0, 2.0])


# -- the gradient has the source's dtype ------------------------------------------------------------------

def test_float32_source_of_a_float64_target_gets_a_float32_gradient():
    x = ad.Variable(np.array([1.0, 2.0], np.float32))
    with ad.GradientTape() as tape:
        y = x * np.array([3.0, 4.0]) * x      # NumPy promotes to float64
    assert y.dtype == np.float64
    g = tape.gradient(y, x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(val(g), [6.0, 16.0])


def test_float64_output_gradients_of_a_float32_target_give_a_float32_gradient():
    x = ad.Variable(np.array([1.0, 2.0], np.float32))
    with ad.GradientTape() as tape:
        y = x * x
    g = tape.gradient(y, [x], output_gradients=np.array([0.5, 0.25]))[0]
    assert g.dtype == np.float32
    np.testing.assert_allclose(val(g), [1.0, 1.0])


def test_float32_target_of_a_float64_source_gets_a_float64_gradient():
    x = ad.Variable(np.array([1.0, 2.0]))
    with ad.GradientTape() as tape:
        y = (x * x).astype(np.float32)
    g = tape.gradient(y, x, output_gradients=np.array([1.0, 1.0], np.float32))
    assert g.dtype == np.float64
    np.testing.assert_allclose(val(g), [2.0, 4.0])


def test_source_dtype_at_second_order_and_in_jacobians():
    x = ad.constant(np.array([1.0, 2.0], np.float32))
    scale = np.array([1.0, 3.0])                      # float64
    y, dy, d2y = nested_derivatives(lambda t: np.sum(t * t * t * scale), x, order=2)
    assert dy.dtype == np.float32 and d2y.dtype == np.float32
    np.testing.assert_allclose(val(dy), 3 * np.array([1.0, 4.0]) * scale)
    np.testing.assert_allclose(val(d2y), 6 * np.array([1.0, 2.0]) * scale)
    with ad.GradientTape() as tape:
        tape.watch(x)
        z = x * scale
    jac = tape.jacobian(z, x)
    assert jac.dtype == np.float32
    np.testing.assert_allclose(val(jac), np.diag(scale))


def test_complex_intermediate_of_a_real_source_gives_the_real_part_without_warning():
    x = ad.Variable(np.array([1.0, 2.0], np.float32))
    with ad.GradientTape() as tape:
        y = x * (2 + 3j)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no ComplexWarning from discarding the imaginary part
        g = tape.gradient(y, x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(val(g), [2.0, 2.0])


# -- a tape exited from another thread ----------------------------------------------------------------

def _on_other_thread(fn):
    errors = []

    def run():
        try:
            fn()
        except Exception as err:  # noqa: BLE001  (checked by the caller)
            errors.append(err)

    th = threading.Thread(target=run, name="worker")
    th.start()
    th.join(60)
    assert not th.is_alive()
    return errors


@pytest.mark.parametrize("action, shown", [
    (lambda tape: tape.__exit__(None, None, None), r"exited \(__exit__\)"),
    (lambda tape: tape.reset(), r"reset\(\) called"),
    (lambda tape: tape.stop_recording().__enter__(), r"stop_recording\(\) called"),
])
def test_tape_entered_on_one_thread_cannot_be_exited_on_another(action, shown):
    x = ad.Variable(3.0)
    tape = ad.GradientTape()
    tape.__enter__()
    try:
        errors = _on_other_thread(lambda: action(tape))
        assert len(errors) == 1 and isinstance(errors[0], RuntimeError)
        with pytest.raises(RuntimeError, match=shown + r" on thread 'worker', but it was entered on another "
                                                       r"thread.*Enter and exit a tape .* on the same thread"):
            raise errors[0]
        assert tape_module.recording_tapes() == [tape]   # this thread's stack is intact
        y = x * x                                        # and the tape still records here
    finally:
        tape.__exit__(None, None, None)
    assert tape_module.recording_tapes() == []
    assert val(tape.gradient(y, x)) == 6.0


def test_non_persistent_gradient_inside_the_context_from_another_thread_raises():
    x = ad.Variable(3.0)
    with ad.GradientTape() as tape:
        y = x * x
        errors = _on_other_thread(lambda: tape.gradient(y, x))
        assert len(errors) == 1
        with pytest.raises(RuntimeError, match=r"gradient\(\) or jacobian\(\) called inside its context on thread "
                                               r"'worker', but it was entered on another thread"):
            raise errors[0]
        assert tape_module.recording_tapes() == [tape]
    assert val(tape.gradient(y, x)) == 6.0


def test_gradient_on_another_thread_after_exit_is_fine():
    x = ad.Variable(3.0)
    with ad.GradientTape() as tape:
        y = x * x
    out = []
    assert _on_other_thread(lambda: out.append(tape.gradient(y, x))) == []
    assert val(out[0]) == 6.0


# -- constants copy their value ---------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    ad.constant, ad.convert_to_tensor, ad.Tensor, ad.Variable,
    lambda a: ad.constant(a, dtype=np.float64), lambda a: ad.convert_to_tensor(a, dtype=np.float64),
])
@pytest.mark.parametrize("view", [lambda a: a, lambda a: a[::2], lambda a: a.reshape(2, 2)])
def test_tensors_made_from_an_array_do_not_follow_later_changes(make, view):
    base = np.array([1.0, 2.0, 3.0, 4.0])
    array = view(base)
    before = array.copy()
    t = make(array)
    base[:] = -7.0
    np.testing.assert_array_equal(val(t), before)
    assert not np.shares_memory(t.numpy(), base)


def test_convert_to_tensor_of_a_tensor_is_that_tensor():
    t = ad.constant([1.0, 2.0])
    assert ad.convert_to_tensor(t) is t
    assert ad.convert_to_tensor(t, dtype=np.float32).dtype == np.float32


def test_constant_recorded_on_a_tape_keeps_its_value():
    a = np.array([1.0, 2.0])
    c = ad.constant(a)
    x = ad.Variable([3.0, 4.0])
    with ad.GradientTape() as tape:
        y = np.sum(x * c)
    a[:] = 100.0                       # changing the array between recording and the backward pass
    np.testing.assert_array_equal(val(tape.gradient(y, x)), [1.0, 2.0])


# -- max/min with ties: TensorFlow's reduce_max rule splits the cotangent equally ------------------------

TIES = np.array([[2.0, 1.0, 2.0, 0.0],
                 [3.0, 3.0, 3.0, 3.0],
                 [-1.0, 5.0, 4.0, 5.0]])

REDUCTIONS = {
    "np.max": (np.max, 1), "np.amax": (np.amax, 1), "Tensor.max": (lambda x, **kw: x.max(**kw), 1),
    "np.min": (np.min, -1), "np.amin": (np.amin, -1), "Tensor.min": (lambda x, **kw: x.min(**kw), -1),
}
AXES = [dict(), dict(axis=0), dict(axis=1), dict(axis=-1), dict(axis=(0, 1)), dict(axis=None, keepdims=True),
        dict(axis=0, keepdims=True), dict(axis=1, keepdims=True)]


def _tie_weights(x, axis):
    """TensorFlow's indicator / count: 1/k at each of the k positions attaining the extremum, 0 elsewhere."""
    hits = (x == np.max(x, axis=axis, keepdims=True)).astype(float)
    return hits / np.sum(hits, axis=axis, keepdims=True)


@pytest.mark.parametrize("kw", AXES, ids=str)
@pytest.mark.parametrize("name", REDUCTIONS)
def test_max_min_ties_split_the_gradient_equally(name, kw):
    fn, sign = REDUCTIONS[name]
    axis = kw.get("axis")
    xv = sign * TIES                                   # min of -TIES has the ties of max of TIES
    weights = _tie_weights(sign * xv, axis)
    rng = np.random.default_rng(0)
    w = rng.standard_normal(xv.shape)
    x = ad.constant(xv)
    with ad.GradientTape() as outer:
        outer.watch(x)
        with ad.GradientTape() as inner:
            inner.watch(x)
            y = fn(x, **kw)
            z = np.sum(y * y)
        g = inner.gradient(z, x)
        s = np.sum(g * w)
    y_full = np.max(sign * xv, axis=axis, keepdims=True) * sign
    np.testing.assert_allclose(val(g), 2 * y_full * weights)
    np.testing.assert_allclose(val(outer.gradient(s, x)), 2 * np.sum(w * weights, axis=axis, keepdims=True) * weights)


def test_max_of_2_1_2_is_half_zero_half_and_the_jacobian_splits_per_row():
    x = ad.Variable([2.0, 1.0, 2.0])
    with ad.GradientTape() as tape:
        y = np.max(x)
    np.testing.assert_array_equal(val(tape.gradient(y, x)), [0.5, 0.0, 0.5])
    m = ad.constant(TIES)
    with ad.GradientTape() as tape:
        tape.watch(m)
        y = np.amax(m, axis=1)
    jac = val(tape.jacobian(y, m))
    expected = np.zeros((3,) + TIES.shape)
    for i in range(3):
        expected[i, i] = _tie_weights(TIES, 1)[i]
    np.testing.assert_allclose(jac, expected)


@pytest.mark.parametrize("kw", AXES, ids=str)
@pytest.mark.parametrize("name", REDUCTIONS)
def test_max_min_away_from_ties_match_finite_differences(name, kw):
    fn = REDUCTIONS[name][0]
    xv = np.random.default_rng(1).standard_normal((3, 4))
    check_grads(lambda x: fn(x, **kw) * fn(x, **kw), xv, order=2)


# -- maximum/minimum: a tie (or a NaN) sends the cotangent to one side, as TensorFlow's rule -----------

def _pair_grads(fn, xv, yv):
    x, y = ad.Variable(xv), ad.Variable(yv)
    with ad.GradientTape() as tape:
        out = fn(x, y)
    return val(out), [val(g) for g in tape.gradient(out, [x, y])]


@pytest.mark.parametrize("fn, xv, yv, value, gx, gy", [
    # ties: x gets it (TensorFlow selects x with x >= y for maximum, x <= y for minimum)
    (np.maximum, [1.0, 2.0, 3.0], [1.0, 0.0, 5.0], [1.0, 2.0, 5.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]),
    (np.minimum, [1.0, 2.0, 3.0], [1.0, 0.0, 5.0], [1.0, 0.0, 3.0], [1.0, 0.0, 1.0], [0.0, 1.0, 0.0]),
    # NaN: the comparison is False, so y gets it (TensorFlow's where(x >= y, g, 0) / where(x >= y, 0, g))
    (np.maximum, [np.nan, 1.0], [1.0, np.nan], [np.nan, np.nan], [0.0, 0.0], [1.0, 1.0]),
    (np.minimum, [np.nan, 1.0], [1.0, np.nan], [np.nan, np.nan], [0.0, 0.0], [1.0, 1.0]),
    # fmax/fmin return the non-NaN side, and it gets the cotangent
    (np.fmax, [np.nan, 1.0, 2.0, 1.0], [1.0, np.nan, 2.0, 3.0], [1.0, 1.0, 2.0, 3.0], [0, 1, 1, 0], [1, 0, 0, 1]),
    (np.fmin, [np.nan, 1.0, 2.0, 1.0], [1.0, np.nan, 2.0, 3.0], [1.0, 1.0, 2.0, 1.0], [0, 1, 1, 1], [1, 0, 0, 0]),
])
def test_maximum_minimum_ties_and_nans_follow_tensorflow(fn, xv, yv, value, gx, gy):
    out, (got_x, got_y) = _pair_grads(fn, np.array(xv), np.array(yv))
    np.testing.assert_array_equal(out, value)
    np.testing.assert_array_equal(got_x, gx)
    np.testing.assert_array_equal(got_y, gy)


def test_maximum_tie_with_a_broadcast_scalar_goes_to_the_array():
    out, (gx, gy) = _pair_grads(np.maximum, np.array([0.0, 1.0, -1.0]), np.array(0.0))   # relu-like
    np.testing.assert_array_equal(gx, [1.0, 1.0, 0.0])
    assert gy == 1.0


@pytest.mark.parametrize("fn", [np.maximum, np.minimum, np.fmax, np.fmin])
def test_maximum_minimum_match_finite_differences(fn):
    rng = np.random.default_rng(2)
    check_grads(lambda x, y: fn(x, y) * fn(x, y), rng.standard_normal((3, 4)), rng.standard_normal(4), order=2)


@pytest.mark.parametrize("fn", [np.maximum, np.minimum])
def test_maximum_minimum_tie_second_order_is_zero(fn):
    x = ad.constant(np.array([1.0, 2.0]))
    y, dy, d2y = nested_derivatives(lambda t: np.sum(fn(t, 1.0) * 3.0), x, order=2)
    np.testing.assert_array_equal(val(dy), [3.0, 3.0] if fn is np.maximum else [3.0, 0.0])
    assert d2y is None or not np.any(val(d2y))


# -- a fuzz of bad arguments to gradient: a result, or an error naming the argument, and nothing lost --------

BAD_VALUES = {
    "None": None, "str": "a", "bytes": b"x", "float": 1.5, "ndarray": np.ones(2), "numbers": [1.0, 2.0],
    "mixed_keys": {"a": 1.0, 1: 2.0}, "set": {1, 2}, "callable": len, "complex": np.array([1j, 1j]),
    "object": object(), "wrong_shape": np.ones(3), "empty": [], "int_tensor": ad.constant([1, 2]),
}
ARGUMENT_NAMES = {"target": "`target`", "sources": "`sources`", "output_gradients": "output_gradients",
                  "unconnected_gradients": "unconnected_gradients"}


@pytest.mark.parametrize("bad", BAD_VALUES, ids=str)
@pytest.mark.parametrize("argument", ARGUMENT_NAMES)
def test_bad_gradient_arguments_give_a_result_or_an_error_naming_the_argument(argument, bad):
    x = ad.Variable([1.0, 2.0])
    with ad.GradientTape() as tape:
        y = x * x
    kwargs = dict(target=y, sources=x)
    kwargs[argument] = BAD_VALUES[bad]
    try:
        result = tape.gradient(**kwargs)
    except (TypeError, ValueError) as err:
        assert ARGUMENT_NAMES[argument] in str(err), f"{type(err).__name__}: {err}"
        np.testing.assert_array_equal(val(tape.gradient(y, x)), [2.0, 4.0])   # the error consumed nothing
        return
    # accepted: the documented results (TensorFlow's) for these values
    if argument == "output_gradients":          # None (ones), a number or an array broadcast to the target: a VJP
        cotangent = 1.0 if BAD_VALUES[bad] is None else val(ad.constant(BAD_VALUES[bad]))
        expected = 2 * np.array([1.0, 2.0]) * np.broadcast_to(cotangent, (2,))
        np.testing.assert_allclose(val(result), expected)
    elif argument == "target":                  # no differentiable target: no gradient
        assert bad in ("empty", "int_tensor") and result is None
    else:                                       # no sources: an empty structure; an integer source: None
        assert (bad, result) in (("empty", []), ("int_tensor", None))


@pytest.mark.parametrize("use_pfor", [True, False])
def test_jacobian_of_an_empty_target_has_shape_target_plus_source(use_pfor):
    """An empty target (shape (0, 1)) gives an empty Jacobian of shape target.shape + source.shape,
    with and without pfor (without it used to return None)."""
    x = ad.Variable(np.ones(7))
    with ad.GradientTape(persistent=True) as tape:
        y = np.zeros((0, 1)) * x
    jac = tape.jacobian(y, x, experimental_use_pfor=use_pfor)
    assert jac.shape == (0, 7, 7) and jac.dtype == np.float64
    xb = ad.Variable(np.ones((3, 2)))
    with ad.GradientTape(persistent=True) as tape:
        yb = np.zeros((3, 0)) * np.sum(xb)
    assert tape.batch_jacobian(yb, xb, experimental_use_pfor=use_pfor).shape == (3, 0, 2)


@pytest.mark.parametrize("reps", [2, (2, 1), (3, 2, 2), (1,)])
def test_tile_records_and_is_differentiable_to_second_order(reps):
    x = np.random.default_rng(0).standard_normal((2, 3))
    np.testing.assert_array_equal(np.tile(ad.constant(x), reps).numpy(), np.tile(x, reps))
    check_grads(lambda t: np.tile(t, reps) ** 2, x, order=2)
