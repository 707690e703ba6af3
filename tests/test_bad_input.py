"""Bad input gets a standard exception saying what was passed and what was expected."""

import logging
import warnings

import numpy as np
import pytest

import srcad as ad
from srcad.testing import record


@pytest.fixture
def tape_xy():
    x = ad.Variable([1.0, 2.0])
    with ad.GradientTape(persistent=True) as t:
        y = x * x
    return t, x, y


# -- watch ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad, shown", [("abc", "abc of type 'str'"), (None, "None of type 'NoneType'"),
                                        (3, "3 of type 'int'"), ([ad.constant(1.0), 2.0], "2.0 of type 'float'"),
                                        (np.ones(2), "\\[1. 1.\\] of type 'ndarray'")])
def test_watch_non_tensor(bad, shown):
    with ad.GradientTape() as t:
        with pytest.raises(ValueError, match=f"Passed in object {shown}, not ad.Tensor or ad.Variable"):
            t.watch(bad)


# -- targets

@pytest.mark.parametrize("bad, shown", [("abc", "'abc' of type 'str'"), (np.ones(2), "of type 'ndarray'"),
                                        (1.5, "1.5 of type 'float'")])
def test_non_tensor_target(tape_xy, bad, shown):
    t, x, _ = tape_xy
    with pytest.raises(TypeError, match=f"Argument `target` should be a Tensor, a Variable or a nested structure "
                                        f"of them, but it holds .*{shown}"):
        t.gradient(bad, x)


@pytest.mark.parametrize("target_kind", ["none", "list_with_none", "dict_with_none"])
def test_none_target(tape_xy, target_kind):
    t, x, y = tape_xy
    target = {"none": None, "list_with_none": [y, None], "dict_with_none": {"a": y, "b": None}}[target_kind]
    with pytest.raises(TypeError, match="to be differentiated, but received None"):
        t.gradient(target, x)


def test_none_target_jacobians(tape_xy):
    t, x, y = tape_xy
    with pytest.raises(TypeError, match="received None"):
        t.jacobian(None, x)
    with pytest.raises(TypeError, match="received None"):
        t.batch_jacobian(None, x)


# -- sources

@pytest.mark.parametrize("bad, shown", [("abc", "'abc' of type 'str'"), (None, "None of type 'NoneType'"),
                                        (1.0, "1.0 of type 'float'"), (np.ones(2), "of type 'ndarray'")])
def test_non_tensor_source(tape_xy, bad, shown):
    t, x, y = tape_xy
    with pytest.raises(TypeError, match=f"Argument `sources` should be a Tensor, a Variable or a nested structure "
                                        f"of them, but it holds .*{shown}"):
        t.gradient(y, [x, bad])
    with pytest.raises(TypeError, match="Argument `sources`"):
        t.jacobian(y, {"x": x, "bad": bad})


def test_integer_sources_give_none_with_a_warning(caplog):
    xi = ad.constant([1, 2])
    vi = ad.Variable([3, 4])
    with caplog.at_level(logging.WARNING, logger="srcad"):
        with ad.GradientTape(persistent=True) as t:
            t.watch(xi)
            y = xi * vi * 2
            z = ad.constant(1.5) * xi
        assert t.gradient(y, xi) is None and t.gradient(y, vi) is None and t.gradient(z, xi) is None
    assert "The dtype of the source tensor must be floating" in caplog.text and "int64" in caplog.text
    zero = t.gradient(y, vi, unconnected_gradients="zero")
    assert zero.dtype.kind == "i" and not zero.numpy().any()


# -- output_gradients

@pytest.mark.parametrize("og, shape", [(np.ones(3), "\\(3,\\)"), (np.ones((2, 2)), "\\(2, 2\\)"),
                                       ([1.0, 2.0, 3.0], "\\(3,\\)")])
def test_incompatible_output_gradients(tape_xy, og, shape):
    t, x, y = tape_xy
    with pytest.raises(ValueError, match=f"output_gradients entry for its target has shape {shape}, incompatible with "
                                         f"its target's shape \\(2,\\)"):
        t.gradient(y, x, output_gradients=og)


def test_output_gradients_wrong_count_and_type(tape_xy):
    t, x, y = tape_xy
    with pytest.raises(ValueError, match="output_gradients must hold one entry per target: got 1 for 2 targets"):
        t.gradient([y, y], x, output_gradients=[ad.constant([1.0, 1.0])])
    with pytest.raises(TypeError, match="output_gradients entry for its target is 'abc' of type 'str': expected a number"):
        t.gradient(y, x, output_gradients="abc")


def test_output_gradients_list_for_single_target(tape_xy):
    t, x, y = tape_xy
    np.testing.assert_array_equal(t.gradient(y, x, output_gradients=[1.0, 3.0]).numpy(), [2.0, 12.0])


def test_unconnected_gradients_bad_values(tape_xy):
    t, x, y = tape_xy
    for bad in ("nonsense", 3, None, "ZERO"):
        with pytest.raises(ValueError, match=f"Unknown value for unconnected_gradients: {bad!r}"):
            t.gradient(y, x, unconnected_gradients=bad)


# -- tensors and operations

@pytest.mark.parametrize("bad", ["abc", None, b"bytes"])
def test_tensor_from_non_numbers(bad):
    with pytest.raises(TypeError, match=f"Cannot convert {bad!r}.*expected a number, a NumPy array"):
        ad.constant(bad)
    with pytest.raises(TypeError, match="Cannot convert"):
        ad.Variable(bad)


def test_string_operand_is_a_type_error():
    x = ad.Variable(1.0)
    with ad.GradientTape():
        with pytest.raises(TypeError, match="ufunc 'add'"):
            x + "a"


def test_custom_gradient_bad_grad_values():
    @ad.custom_gradient
    def f(x):
        return x * 2.0, lambda dy: "not a gradient"

    t, x, y = record(f)
    with pytest.raises(TypeError, match="the gradient that 'f' returned for input 0 is 'not a gradient' of type "
                                        "'str'"):
        t.gradient(y, x)


def test_custom_gradient_bad_outputs():
    @ad.custom_gradient
    def f(x):
        return "text", lambda dy: dy

    with pytest.raises(TypeError, match="returned 'text' of type 'str' as an output"):
        f(ad.constant(1.0))


def test_jacobian_parallel_iterations_bad(tape_xy):
    t, x, y = tape_xy
    for bad in (0, -1, 1.5, "2"):
        with pytest.raises(ValueError, match=f"parallel_iterations must be a positive integer or None, got {bad!r}"):
            t.jacobian(y, x, parallel_iterations=bad)


# -- NumPy conversions that drop a gradient ------------------------------------------------------------------

@pytest.mark.parametrize("convert", [lambda y, x: np.array([y, y]), lambda y, x: np.sum([y, x]),
                                     lambda y, x: np.asarray(y), lambda y, x: np.array([x])],
                         ids=["array of a list", "sum of a list", "asarray", "array of a variable"])
def test_conversion_of_a_tracked_tensor_warns_at_the_callers_line(convert):
    x = ad.Variable(2.0)
    with ad.GradientTape() as t:
        y = x * x
        with pytest.warns(ad.GradientLostWarning, match="converted to a NumPy array .* get no gradient through it") \
                as caught:
            z = y + convert(y, x).sum()
    assert {w.filename for w in caught} == {__file__}
    # the warning is the only sign: the gradient through the converted values is missing (2x, not 2x + 2x or 2x + 1)
    assert float(t.gradient(z, x)) == 4.0


def test_conversions_that_lose_nothing_do_not_warn():
    x = ad.Variable(2.0)
    c = ad.constant([1.0, 2.0])
    y = x * x
    with ad.GradientTape() as t:
        z = x * x
        with warnings.catch_warnings():
            warnings.simplefilter("error", ad.GradientLostWarning)
            np.array([c, c])           # not tracked
            np.asarray(y)              # computed before the tape
            z.numpy()                  # an explicit drop
            np.stack([z, z])           # records
            with t.stop_recording():
                np.asarray(z)          # nothing records
    np.asarray(z)                      # outside the tape
    assert float(t.gradient(z, x)) == 4.0
