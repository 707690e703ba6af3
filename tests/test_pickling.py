"""Pickling of ``@ad.function`` (by reference, by value, in a process without the source file),
Tensor and Variable: what Dask and multiprocessing do with them."""

import importlib.util
import json
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import srcad as ad
from srcad import serialize

cloudpickle = pytest.importorskip("cloudpickle")


def _square(v):
    return v * v


@ad.function
def square_sum(x, scale):
    s = 0.0
    for i in range(x.shape[0]):
        s += scale * _square(x[i])
    return s


def _value_and_grad(f, *args):
    x = ad.constant(args[0])
    with ad.GradientTape() as tape:
        tape.watch(x)
        y = f(x, *args[1:])
    return float(y.numpy()), tape.gradient(y, x).numpy()


X = np.array([1.0, -2.0, 3.0])


def test_module_level_function_pickles_by_reference():
    square_sum(X, 2.0)                      # compiled: nothing of that may travel
    for dumps in (pickle.dumps, cloudpickle.dumps):
        blob = dumps(square_sum)
        assert pickle.loads(blob) is square_sum
        assert b"square_sum" in blob and b"scale * _square" not in blob
        assert b"srcad_generated" not in blob


def test_local_function_pickles_by_value_and_rebuilds_once():
    k = 3.0

    @ad.function
    def scaled(x):
        s = 0.0
        for i in range(x.shape[0]):
            s += k * _square(x[i])
        return s

    expected = _value_and_grad(scaled, X)
    blob = cloudpickle.dumps(scaled)
    assert b"srcad_generated" not in blob and b"Dispatcher" not in blob
    before = serialize.registry_stats()
    first = pickle.loads(blob)
    again = pickle.loads(cloudpickle.dumps(scaled))
    assert first is not scaled and again is first        # one Function per shipped source and closure
    after = serialize.registry_stats()
    assert after["rebuilt"] == before["rebuilt"] + 1 and after["reused"] == before["reused"] + 1
    value, grad = _value_and_grad(first, X)
    assert value == pytest.approx(expected[0], rel=1e-15)
    np.testing.assert_allclose(grad, expected[1], rtol=1e-15)
    np.testing.assert_allclose(grad, 2 * k * X, rtol=1e-15)


def test_closures_with_other_values_are_other_functions():
    def make(k):
        @ad.function
        def scaled(x):
            s = 0.0
            for i in range(x.shape[0]):
                s += k * x[i]
            return s
        return scaled

    two, three = (pickle.loads(cloudpickle.dumps(make(k))) for k in (2.0, 3.0))
    assert two is not three
    assert float(two(X).numpy()) == pytest.approx(2.0 * X.sum())
    assert float(three(X).numpy()) == pytest.approx(3.0 * X.sum())


def test_plain_pickle_of_a_local_function_goes_by_value():
    @ad.function
    def cube(x):
        return x * x * x

    rebuilt = pickle.loads(pickle.dumps(cube))
    assert rebuilt is not cube
    assert _value_and_grad(rebuilt, 2.0) == pytest.approx((8.0, 12.0))


def test_module_registered_by_value_ships_the_source():
    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)
    try:
        blob = cloudpickle.dumps(square_sum)
    finally:
        cloudpickle.unregister_pickle_by_value(module)
    assert b"scale * _square" in blob                   # the Source travels
    rebuilt = pickle.loads(blob)
    assert rebuilt is not square_sum
    value, grad = _value_and_grad(rebuilt, X, 0.5)
    assert value == pytest.approx(0.5 * np.sum(X * X))
    np.testing.assert_allclose(grad, X, rtol=1e-15)


def _write_module(path, name):
    path.write_text(textwrap.dedent("""
        import math
        import srcad as ad

        def _soft(v):
            return math.log(1.0 + math.exp(v))

        @ad.function
        def softsum(x):
            s = 0.0
            for i in range(x.shape[0]):
                s += _soft(x[i])
            return s
        """))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_fresh_process_without_the_defining_file(tmp_path):
    module = _write_module(tmp_path / "shipped_softsum.py", "shipped_softsum")
    try:
        expected = _value_and_grad(module.softsum, X)    # compiled here first
        cloudpickle.register_pickle_by_value(module)
        try:
            blob = cloudpickle.dumps(module.softsum)
        finally:
            cloudpickle.unregister_pickle_by_value(module)
    finally:
        del sys.modules["shipped_softsum"]
    os.remove(tmp_path / "shipped_softsum.py")
    (tmp_path / "blob.pkl").write_bytes(blob)
    script = textwrap.dedent("""
        import json, pickle, sys
        import numpy as np
        import srcad as ad
        f = pickle.load(open("blob.pkl", "rb"))
        x = ad.constant(np.array([1.0, -2.0, 3.0]))
        with ad.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
        print(json.dumps([float(y.numpy()), tape.gradient(y, x).numpy().tolist(),
                          f.python_function.__srcad_source__.filename]))
        """)
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    value, grad, filename = json.loads(done.stdout.strip().splitlines()[-1])
    assert not os.path.exists(filename)
    assert value == pytest.approx(expected[0], rel=1e-14)
    np.testing.assert_allclose(grad, expected[1], rtol=1e-14)
    np.testing.assert_allclose(grad, 1.0 / (1.0 + np.exp(-X)), rtol=1e-14)


def test_by_reference_to_a_module_that_is_gone(tmp_path):
    module = _write_module(tmp_path / "vanishing_mod.py", "vanishing_mod")
    blob = pickle.dumps(module.softsum)
    del sys.modules["vanishing_mod"]
    with pytest.raises(pickle.UnpicklingError, match=r"vanishing_mod\.softsum was pickled by reference.*"
                                                     r"register_pickle_by_value"):
        pickle.loads(blob)


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps], ids=["pickle", "cloudpickle"])
def test_tensor_and_variable_round_trip(dumps):
    t = ad.constant(np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32))
    back = pickle.loads(dumps(t))
    assert type(back) is ad.Tensor and back.dtype == np.float32
    np.testing.assert_array_equal(back.numpy(), t.numpy())

    v = ad.Variable(np.array([1.0, 2.0]), name="w", trainable=True)
    w = pickle.loads(dumps(v))
    assert type(w) is ad.Variable and w.name == "w" and w.trainable
    np.testing.assert_array_equal(w.numpy(), v.numpy())
    with ad.GradientTape() as tape:                      # still watched as a trainable variable
        y = square_sum(w, 1.0)
    np.testing.assert_allclose(tape.gradient(y, w).numpy(), 2.0 * v.numpy())
    w.assign([5.0, 6.0])
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])   # a copy, not shared
