"""GRADIENTTAPE_SPEC.md sections 1-19: one test (or a few) per bullet."""

import logging

import numpy as np
import pytest

import srcad as ad
from srcad.testing import check_grads, fd_jacobian, nested_derivatives
from srcad import tape as tape_module


def val(t):
    return None if t is None else np.asarray(t.numpy())


# -- 1. constructor ---------------------------------------------------------------------

def test_constructor_stores_arguments_and_has_no_tape():
    t = ad.GradientTape(persistent=True, watch_accessed_variables=False)
    assert t._persistent and not t._watch_accessed_variables
    assert t.watched_variables() == ()
    assert ad.tape.recording_tapes() == []


def test_constructor_defaults():
    t = ad.GradientTape()
    assert t._persistent is False and t._watch_accessed_variables is True


# -- 2. enter / exit -------------------------------------------------------------------------

def test_enter_returns_self_and_exit_pops():
    t = ad.GradientTape()
    with t as entered:
        assert entered is t
        assert ad.tape.recording_tapes() == [t]
    assert ad.tape.recording_tapes() == []


def test_exit_never_swallows_exceptions():
    t = ad.GradientTape()
    with pytest.raises(KeyError, match="boom"):
        with t:
            raise KeyError("boom")
    assert ad.tape.recording_tapes() == []


def test_reenter_continues_recording_on_same_tape():
    x = ad.Variable(2.0)
    t = ad.GradientTape()
    with t:
        y = x * x
    with t:
        z = y * x
    assert val(t.gradient(z, x)) == pytest.approx(12.0)  # d(x^3)/dx


def test_enter_active_tape_raises():
    t = ad.GradientTape()
    with t:
        with pytest.raises(ValueError, match="Tape is still recording, This can happen if you try to re-enter an "
                                             "already-active tape."):
            t.__enter__()


# -- 3. nesting ----------------------------------------------------------------------------------

def test_watching_is_local_to_each_tape():
    x = ad.constant(3.0)
    with ad.GradientTape() as outer:
        with ad.GradientTape() as inner:
            inner.watch(x)
            y = x * x
    assert val(inner.gradient(y, x)) == pytest.approx(6.0)
    assert outer.gradient(y, x) is None


def test_nested_tapes_give_second_and_third_derivatives():
    v = 0.7
    _, d1, d2, d3 = nested_derivatives(lambda x: np.sin(x) * x ** 2, v, order=3)
    assert val(d1) == pytest.approx(np.cos(v) * v ** 2 + 2 * v * np.sin(v))
    assert val(d2) == pytest.approx(-np.sin(v) * v ** 2 + 4 * v * np.cos(v) + 2 * np.sin(v))
    assert val(d3) == pytest.approx(-np.cos(v) * v ** 2 - 6 * v * np.sin(v) + 6 * np.cos(v))


def test_op_on_integer_watched_tensor_not_recorded():
    x = ad.constant(3)
    with ad.GradientTape() as t:
        t.watch(x)
        y = x * 2
    assert t._nodes == []
    assert t.gradient(y, x) is None


# -- 4. watch ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad, shown, type_name", [
    (np.array(1.0), "1.0", "ndarray"), (1.0, "1.0", "float"), (None, "None", "NoneType")])
def test_watch_rejects_non_tensors(bad, shown, type_name):
    t = ad.GradientTape()
    with t:
        with pytest.raises(ValueError, match=f"Passed in object {shown} of type '{type_name}', not ad.Tensor or "
                                             f"ad.Variable"):
            t.watch(bad)


def test_watch_accepts_nests():
    a, b, c = ad.constant(1.0), ad.constant(2.0), ad.Variable(3.0, trainable=False)
    with ad.GradientTape() as t:
        t.watch({"a": a, "rest": [b, (c,)]})
        y = a * b * c
    ga, gb, gc = t.gradient(y, [a, b, c])
    assert (val(ga), val(gb), val(gc)) == (6.0, 3.0, 2.0)


def test_watch_integer_tensor_warns_and_gradient_of_itself_is_integer_ones(caplog):
    x = ad.constant([1, 2, 3])
    with caplog.at_level(logging.WARNING, logger="srcad"):
        with ad.GradientTape() as t:
            t.watch(x)
            y = x * 3
    assert "The dtype of the watched tensor must be floating" in caplog.text and "int64" in caplog.text
    assert t._nodes == []
    with ad.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * 3
    assert t.gradient(y, x) is None
    g = t.gradient(x, x)
    assert g.dtype.kind == "i" and np.array_equal(val(g), [1, 1, 1])


# -- 5. automatic watching ----------------------------------------------------------------------------

def test_reading_trainable_variable_watches_it():
    v = ad.Variable(2.0)
    with ad.GradientTape() as t:
        y = v * v
    assert t.watched_variables() == (v,)
    assert val(t.gradient(y, v)) == 4.0


def test_creating_a_variable_does_not_watch_it():
    with ad.GradientTape() as t:
        v = ad.Variable(1.0)
    assert t.watched_variables() == ()


def test_non_trainable_variable_needs_explicit_watch():
    v = ad.Variable(2.0, trainable=False)
    with ad.GradientTape(persistent=True) as t:
        y = v * v
    assert t.watched_variables() == ()
    assert t.gradient(y, v) is None
    with ad.GradientTape() as t:
        t.watch(v)
        y = v * v
    assert t.watched_variables() == (v,)
    assert val(t.gradient(y, v)) == 4.0


def test_watch_accessed_variables_false_tracks_only_explicit():
    a, b = ad.Variable(2.0), ad.Variable(3.0)
    with ad.GradientTape(watch_accessed_variables=False) as t:
        t.watch(a)
        y = a * b
    assert t.watched_variables() == (a,)
    ga, gb = t.gradient(y, [a, b])
    assert val(ga) == 3.0 and gb is None


def test_variable_read_outside_tape_not_watched_later():
    v = ad.Variable(2.0)
    y0 = v * 1.0
    with ad.GradientTape() as t:
        y = y0 * 2.0
    assert t.watched_variables() == () and t.gradient(y, v) is None


# -- 6. watched_variables ------------------------------------------------------------------------------

def test_watched_variables_in_construction_order():
    a, b, c = ad.Variable(1.0), ad.Variable(2.0), ad.Variable(3.0)
    with ad.GradientTape() as t:
        y = c * b * a
    assert t.watched_variables() == (a, b, c)


def test_watched_variables_cleared_by_reset_and_kept_after_gradient():
    a, b = ad.Variable(1.0), ad.Variable(2.0)
    with ad.GradientTape() as t:
        y = a * 2.0
        t.reset()
        assert t.watched_variables() == ()
        y = b * 2.0
    assert t.watched_variables() == (b,)
    t.gradient(y, b)
    assert t.watched_variables() == (b,)


def test_watched_variables_per_tape_object():
    a, b = ad.Variable(1.0), ad.Variable(2.0)
    with ad.GradientTape() as outer:
        y = a * 2.0
        with ad.GradientTape(watch_accessed_variables=False) as inner:
            inner.watch(b)
    assert outer.watched_variables() == (a,)
    assert inner.watched_variables() == (b,)


# -- 7. gradient(): usability, inside the context, target None ---------------------------------------------

ONE_SET = "A non-persistent GradientTape can only be used to compute one set of gradients \\(or jacobians\\)"


def test_never_entered_tape_raises():
    with pytest.raises(RuntimeError, match=ONE_SET):
        ad.GradientTape().gradient(ad.constant(1.0), ad.constant(1.0))


def test_second_gradient_on_non_persistent_tape_raises():
    x = ad.Variable(1.0)
    with ad.GradientTape() as t:
        y = x * x
    t.gradient(y, x)
    with pytest.raises(RuntimeError, match=ONE_SET):
        t.gradient(y, x)


def test_non_persistent_gradient_inside_context_stops_recording():
    x = ad.Variable(3.0)
    with ad.GradientTape() as t:
        y = x * x
        g = t.gradient(y, x)
        assert ad.tape.recording_tapes() == []
        z = y * x   # not recorded
    assert val(g) == 6.0
    assert not t._recording
    with pytest.raises(RuntimeError, match=ONE_SET):
        t.gradient(z, x)


def test_persistent_gradient_inside_context_logs_once_and_records(caplog, monkeypatch):
    monkeypatch.setattr(tape_module, "_warned_persistent_inside", False)
    x = ad.Variable(3.0)
    with caplog.at_level(logging.WARNING, logger="srcad"):
        with ad.GradientTape(persistent=True) as t:
            y = x ** 3
            g = t.gradient(y, x)   # 3x^2, recorded on t
            g2 = t.gradient(g, x)  # 6x
    assert caplog.text.count("Calling GradientTape.gradient on a persistent tape inside its context") == 1
    assert "Only call GradientTape.gradient inside the context if you actually want to trace the gradient" \
        in caplog.text
    assert val(g) == pytest.approx(27.0) and val(g2) == pytest.approx(18.0)


def test_target_none_raises_type_error():
    with ad.GradientTape() as t:
        pass
    with pytest.raises(TypeError, match="Argument `target` should be a list or nested structure of Tensors, "
                                        "Variables or CompositeTensors to be differentiated, but received None."):
        t.gradient(None, ad.constant(1.0))


# -- 8. targets --------------------------------------------------------------------------------------------

def test_targets_are_summed():
    x = ad.Variable(2.0)
    with ad.GradientTape() as t:
        a, b = x * x, x * 3.0
    assert val(t.gradient({"a": a, "b": [b]}, x)) == pytest.approx(7.0)


def test_non_scalar_target_gets_ones():
    xv = np.array([0.3, -1.2, 2.0])
    x = ad.constant(xv)
    with ad.GradientTape() as t:
        t.watch(x)
        y = np.sin(x) * x
    np.testing.assert_allclose(val(t.gradient(y, x)), np.cos(xv) * xv + np.sin(xv))


def test_variable_target_gives_ones_and_none_otherwise():
    v, w = ad.Variable([1.0, 2.0]), ad.Variable(3.0)
    with ad.GradientTape(persistent=True) as t:
        pass
    np.testing.assert_array_equal(val(t.gradient(v, v)), [1.0, 1.0])   # never read
    assert t.gradient(v, w) is None
    with ad.GradientTape() as t:
        y = w * 2.0
    gv, gw = t.gradient([v, y], [v, w])
    np.testing.assert_array_equal(val(gv), [1.0, 1.0])
    assert val(gw) == 2.0


# -- 9. sources

def test_sources_structure_preserved():
    a, b, c = ad.Variable(1.0), ad.Variable(2.0), ad.Variable(3.0)
    with ad.GradientTape() as t:
        y = a * b * c
    g = t.gradient(y, {"z": a, "b": (b, [c])})
    assert list(g) == ["z", "b"]
    assert isinstance(g["b"], tuple) and isinstance(g["b"][1], list)
    assert (val(g["z"]), val(g["b"][0]), val(g["b"][1][0])) == (6.0, 3.0, 2.0)


def test_repeated_source_gets_full_gradient_each_time():
    x = ad.Variable(1.0)
    with ad.GradientTape() as t:
        y = x * x
    g = t.gradient(y, [x, x])
    assert [val(v) for v in g] == [2.0, 2.0]


def test_intermediate_tensor_as_source():
    x = ad.Variable(2.0)
    with ad.GradientTape() as t:
        h = x * x
        y = np.sin(h)
    assert val(t.gradient(y, h)) == pytest.approx(np.cos(4.0))


def test_source_that_is_a_target():
    x = ad.Variable(3.0)
    with ad.GradientTape(persistent=True) as t:
        y = x * x
    assert val(t.gradient(x, x)) == 1.0
    assert val(t.gradient([x, y], x)) == pytest.approx(1.0 + 2 * 3.0)
    assert val(t.gradient([x, y], x, output_gradients=[2.0, 1.0])) == pytest.approx(2.0 + 6.0)
    assert val(t.gradient(y, y)) == 1.0


def test_unwatched_tensor_source_gives_none():
    c = ad.constant(2.0)
    with ad.GradientTape() as t:
        y = c * c
    assert t.gradient(y, c) is None


# -- 10. output_gradients

def test_output_gradients_weight_the_vjp():
    xv = np.array([1.0, 2.0])
    x = ad.constant(xv)
    with ad.GradientTape() as t:
        t.watch(x)
        y = x ** 3
    np.testing.assert_allclose(val(t.gradient(y, x, output_gradients=np.array([2.0, -1.0]))),
                               3 * xv ** 2 * [2.0, -1.0])


@pytest.mark.parametrize("og", [2.0, np.array([2.0]), [2.0], ad.constant(2.0)])
def test_broadcastable_output_gradients_are_accepted(og):
    x = ad.Variable([1.0, 2.0])
    with ad.GradientTape() as t:
        y = x * x
    np.testing.assert_allclose(val(t.gradient(y, x, output_gradients=og)), [4.0, 8.0])


def test_output_gradients_per_target_in_a_nest():
    x = ad.Variable(2.0)
    with ad.GradientTape() as t:
        a, b = x * x, x * 5.0
    assert val(t.gradient([a, b], x, output_gradients=[1.0, 10.0])) == pytest.approx(4.0 + 50.0)


def test_incompatible_output_gradients_raise_value_error():
    x = ad.Variable([1.0, 2.0])
    with ad.GradientTape() as t:
        y = x * x
    with pytest.raises(ValueError, match=r"shape \(3,\), incompatible with its target's shape \(2,\)"):
        t.gradient(y, x, output_gradients=np.ones(3))


# -- 11. unconnected gradients

@pytest.mark.parametrize("mode", ["zero", ad.UnconnectedGradients.ZERO])
def test_unconnected_zero(mode):
    x, v = ad.Variable(2.0), ad.Variable(np.ones((2, 3), np.float32))
    c = ad.constant([1.0, 2.0])
    with ad.GradientTape() as t:
        t.watch(c)
        y = x * x
    gv, gc = t.gradient(y, [v, c], unconnected_gradients=mode)
    assert gv.shape == (2, 3) and gv.dtype == np.float32 and not val(gv).any()
    assert gc.shape == (2,) and not val(gc).any()


@pytest.mark.parametrize("mode", ["none", ad.UnconnectedGradients.NONE])
def test_unconnected_none(mode):
    x, v = ad.Variable(2.0), ad.Variable(1.0)
    with ad.GradientTape() as t:
        y = x * x
    assert t.gradient(y, v, unconnected_gradients=mode) is None


def test_unconnected_enum():
    assert issubclass(ad.UnconnectedGradients, __import__("enum").Enum)
    assert ad.UnconnectedGradients("zero") is ad.UnconnectedGradients.ZERO
    assert ad.UnconnectedGradients.NONE.value == "none"


def test_unconnected_bad_value():
    x = ad.Variable(2.0)
    with ad.GradientTape() as t:
        y = x * x
    with pytest.raises(ValueError, match="Unknown value for unconnected_gradients: 'nonsense'"):
        t.gradient(y, x, unconnected_gradients="nonsense")


# -- 12. aggregation

def test_contributions_are_summed():
    xv = np.array([0.5, 1.5, -2.0])
    x = ad.constant(xv)
    with ad.GradientTape() as t:
        t.watch(x)
        y = np.sum(x * x + np.exp(x) * x[1] + x[0])
    f = lambda v: np.sum(v * v + np.exp(v) * v[1] + v[0])   # noqa: E731
    np.testing.assert_allclose(val(t.gradient(y, x)), fd_jacobian(f, xv), rtol=1e-6)
    check_grads(f, xv, order=2)   # the contributions to the gradient's own gradient are summed too


# -- 13. persistence

def test_persistent_tape_many_gradients_and_del():
    import gc
    import weakref
    x = ad.Variable(3.0)
    with ad.GradientTape(persistent=True) as t:
        y, z = x * x, x * x * x
    assert val(t.gradient(y, x)) == 6.0
    assert val(t.gradient(z, x)) == 27.0
    assert val(t.gradient(y, x)) == 6.0
    ref = weakref.ref(t)
    del t
    gc.collect()
    assert ref() is None


def test_non_persistent_tape_frees_records():
    x = ad.Variable(3.0)
    with ad.GradientTape() as t:
        y = x * x
    t.gradient(y, x)
    assert t._nodes == [] and t._tracked == {}


# -- 14. stop_gradient

def test_stop_gradient_output_is_constant_and_downstream_not_recorded():
    x = ad.Variable(2.0)
    with ad.GradientTape() as t:
        s = ad.stop_gradient(x * x)
        n_before = len(t._nodes)
        z = np.sin(s) * 3.0
        assert len(t._nodes) == n_before
        y = s * x
    assert val(t.gradient(y, x)) == 4.0
    assert val(s) == 4.0


def test_stop_gradient_backward_never_runs():
    calls = []

    @ad.custom_gradient
    def f(x):
        def grad(dy):
            calls.append(1)
            return dy
        return x * 1.0, grad

    x = ad.Variable(1.0)
    with ad.GradientTape() as t:
        y = ad.stop_gradient(f(x)) + x
    assert val(t.gradient(y, x)) == 1.0 and calls == []


# -- 15. assignments

def test_assign_is_not_differentiable():
    x = ad.Variable(1.0)
    with ad.GradientTape() as t:
        y = x * x            # x = 1
        x.assign(2.0)
        z = x * x            # x = 2
        x.assign_add(1.0)
    assert val(t.gradient([y, z], x)) == pytest.approx(2.0 + 4.0)
    with ad.GradientTape() as t:
        x.assign(x * 5.0)
        y = x * 1.0
    assert val(t.gradient(y, x)) == 1.0


# -- 18. reset

def test_reset_discards_and_keeps_recording():
    x = ad.Variable(3.0)
    with ad.GradientTape() as t:
        y = x * x
        t.reset()
        z = x * 5.0
    assert val(t.gradient(z, x)) == 5.0


def test_reset_discards_nodes():
    x = ad.Variable(3.0)
    with ad.GradientTape(persistent=True) as t:
        y = x * x
        t.reset()
    assert t.gradient(y, x) is None


def test_reset_outside_context_raises():
    t = ad.GradientTape()
    with pytest.raises(ValueError, match="Tape is not recording."):
        t.reset()
    with t:
        pass
    with pytest.raises(ValueError, match="Tape is not recording."):
        t.reset()


# -- 19. stop_recording

def test_stop_recording_results_are_constants_for_this_tape_only():
    x = ad.Variable(2.0)
    with ad.GradientTape() as outer:
        with ad.GradientTape() as inner:
            y = x * x
            with inner.stop_recording():
                assert inner not in ad.tape.recording_tapes() and outer in ad.tape.recording_tapes()
                z = x * x * x
            w = x * 4.0
    assert val(inner.gradient([y, z, w], x)) == pytest.approx(4.0 + 4.0)
    assert val(outer.gradient(z, x)) == pytest.approx(12.0)


def test_stop_recording_repushes_on_exception():
    t = ad.GradientTape()
    with t:
        with pytest.raises(KeyError, match="x"):
            with t.stop_recording():
                raise KeyError("x")
        assert ad.tape.recording_tapes() == [t]


def test_stop_recording_errors():
    with pytest.raises(RuntimeError, match="Trying to stop recording a tape which is not recording."):
        with ad.GradientTape().stop_recording():
            pass
    x = ad.Variable(1.0)
    t = ad.GradientTape()
    with t:
        y = x * x
    with pytest.raises(ValueError, match="Tape is not recording."):
        with t.stop_recording():
            pass
    t.gradient(y, x)   # consumed
    with pytest.raises(RuntimeError, match="Trying to stop recording a tape which is not recording."):
        with t.stop_recording():
            pass


# -- higher order checked against finite differences

def test_hessian_vector_product_against_finite_differences():
    rng = np.random.default_rng(0)
    xv, vv = rng.normal(size=4), rng.normal(size=4)

    def f(x):
        return np.sum(np.tanh(x) * x ** 2) + np.prod(np.cos(x))

    def grad_np(x):
        xt = ad.constant(x)
        with ad.GradientTape() as t:
            t.watch(xt)
            y = f(xt)
        return val(t.gradient(y, xt))

    x = ad.constant(xv)
    with ad.GradientTape() as t2:
        t2.watch(x)
        with ad.GradientTape() as t1:
            t1.watch(x)
            y = f(x)
        g = t1.gradient(y, x)
        gv = np.sum(g * vv)
    hv = val(t2.gradient(gv, x))
    np.testing.assert_allclose(val(g), fd_jacobian(f, xv), rtol=1e-6, atol=1e-8)
    fd_hv = (grad_np(xv + 1e-6 * vv) - grad_np(xv - 1e-6 * vv)) / 2e-6
    np.testing.assert_allclose(hv, fd_hv, rtol=1e-5, atol=1e-7)


def test_reentering_a_consumed_tape_starts_a_fresh_one():
    x = ad.Variable(2.0)
    t = ad.GradientTape()
    with t:
        y = x * x
    assert val(t.gradient(y, x)) == 4.0
    with t:
        assert t.watched_variables() == () and t._nodes == []
        z = x * 5.0
    assert val(t.gradient([y, z], x)) == 5.0   # y was recorded on the old tape only
