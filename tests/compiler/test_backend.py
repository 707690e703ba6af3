"""The target as a parameter of the compiler (issue 16): backends found by name, the target and its saving
policy in the cache key, the IR kept before target lowering, generated IR differentiated again through
the same cache as a first compile."""
import subprocess
import sys

import numba
import numpy as np
import pytest

import srcad as ad
from srcad.compiler import TransformError, driver, pipeline, transform
from srcad.compiler.ad.saving import Policy
from srcad.compiler.ad.vjp import vjp_function
from srcad.compiler.backends import base
from srcad.compiler.backends.numba_cpu import NumbaCPU
from srcad.compiler.ir import Pop, Push
from srcad.compiler.ir.printer import function_text
from srcad.compiler.ir.visit import walk
from srcad.testing import finite_differences


class FixedCPU(NumbaCPU):
    """The CPU backend under another name and a policy without growable stacks."""
    name = "cpu-fixed"
    policy = Policy("cpu-fixed", growable=False)


class RenamedCPU(NumbaCPU):
    """The CPU backend, same policy, another name."""
    name = "cpu-renamed"


base.register(FixedCPU())
base.register(RenamedCPU())


def product(x, c):
    p = 1.0
    for i in range(x.shape[0]):
        p = p * (x[i] + c)
    return p


def product_gradient(x, c):
    terms = x + c
    return np.array([np.prod(np.delete(terms, i)) for i in range(len(x))])


def saves_in_while(x):
    s = x
    while s < 10.0:
        s = s * x
    return s


X = np.array([0.7, 1.3, 0.4, 1.1])
TYPES = (numba.typeof(X), numba.float64)


def structure(t):
    """Each function of an IR, as text (comparable across transforms)."""
    return [function_text(fn) for fn in (t.ir.primal, t.ir.forward, t.ir.adjoint)]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SRCAD_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_unknown_target_is_refused_naming_the_targets():
    with pytest.raises(ValueError, match=r"@ad.function: target='gpu' is not available; the targets are 'cpu'"):
        ad.function(product, target="gpu")
    with pytest.raises(ValueError, match=r"^target='gpu' is not available; the targets are 'cpu', 'cpu-fixed', "
                                         r"'cpu-renamed', .*'cuda'"):        # (and those other tests registered)
        transform(product, TYPES, (True, False), target="gpu")


def test_registry_refuses_what_is_not_a_backend():
    with pytest.raises(TypeError, match=r"register expects a Backend instance, got 'cpu'"):
        base.register("cpu")


def test_decorating_checks_the_target_without_loading_the_compiler():
    code = ("import sys, srcad as ad\n"
            "f = ad.function(lambda x: x, target='cpu')\n"
            "print('numba' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.parametrize("target", ["cpu", "cpu-fixed"])
def test_a_registered_target_compiles_a_gradient(cache_dir, target):
    f = ad.function(product, target=target)
    v = ad.Variable(X)
    with ad.GradientTape() as tape:
        y = f(v, 0.5)
    np.testing.assert_allclose(float(y.numpy()), product(X, 0.5))
    np.testing.assert_allclose(tape.gradient(y, v).numpy(), product_gradient(X, 0.5), rtol=1e-12)
    assert f._last.backend.name == target


def test_target_and_policy_are_in_the_cache_key(cache_dir):
    keys = {b.key() for b in (base.get("cpu"), base.get("cpu-fixed"), base.get("cpu-renamed"))}
    assert len(keys) == 3
    made = [transform(product, TYPES, (True, False), target=t) for t in ("cpu", "cpu-fixed", "cpu-renamed")]
    assert not any(t.from_cache for t in made)          # no target found another's entry
    assert len(list(cache_dir.glob("product_*.json"))) == 3
    again = transform(product, TYPES, (True, False), target="cpu-fixed")
    assert again.from_cache and again.backend.name == "cpu-fixed"
    _, saved = again.forward(X, 0.5)
    np.testing.assert_allclose(again.adjoint(X, 0.5, saved, 1.0)[0], product_gradient(X, 0.5), rtol=1e-12)


def test_the_backend_policy_reaches_the_reverse_pass():
    transform(saves_in_while, (numba.float64,), (True,), target="cpu")     # growable: saved on a growing stack
    with pytest.raises(TransformError, match=r"saves_in_while: .*while loop"):
        transform(saves_in_while, (numba.float64,), (True,), target="cpu-fixed")


def test_the_ir_before_target_lowering_is_kept_and_made_again_after_a_cache_load(cache_dir):
    fresh = transform(product, TYPES, (True, False))
    assert any(isinstance(s, (Push, Pop)) for s in walk(fresh.ir.forward.body + fresh.ir.adjoint.body))
    lowered = pipeline.run(product, TYPES, (True, False))
    assert not any(isinstance(s, (Push, Pop)) for s in walk(lowered.forward.body + lowered.adjoint.body))
    loaded = transform(product, TYPES, (True, False))
    assert loaded.from_cache and callable(loaded._ir)
    assert structure(loaded) == structure(fresh)


def test_differentiating_generated_ir_is_cached_and_keyed_like_a_first_compile(cache_dir, monkeypatch):
    program = pipeline.run(product, TYPES, (True, False), until="accumulate")
    grad_fn = vjp_function(program.forward, program.adjoint)
    types, active = TYPES + (numba.float64,), (True, False, True)
    reversed_ = []
    reverse = pipeline.reverse

    def counted(*args):
        reversed_.append(args[0].name)
        return reverse(*args)
    monkeypatch.setattr(pipeline, "reverse", counted)
    first = driver.transform_function(grad_fn, types, active)
    second = driver.transform_function(grad_fn, types, active)
    other = driver.transform_function(grad_fn, types, active, target="cpu-fixed")
    assert (first.from_cache, second.from_cache, other.from_cache) == (False, True, False)
    assert len(reversed_) == 2                  # the second call loaded the first one's entry
    assert structure(second) == structure(first)
    g = 0.8
    w = np.linspace(0.5, 1.5, X.size)

    def weighted_gradient(args):
        (gx,) = second.primal(args[0].copy(), 0.5, g)
        return float(np.sum(w * gx))

    np.testing.assert_allclose(second.primal(X.copy(), 0.5, g)[0], g * product_gradient(X, 0.5), rtol=1e-12)
    for t in (first, second, other):
        _, saved = t.forward(X.copy(), 0.5, g)
        d_x, d_g = t.adjoint(X.copy(), 0.5, g, saved, (w,))
        np.testing.assert_allclose(d_x, finite_differences(weighted_gradient, (X,), 0), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(d_g, np.sum(w * product_gradient(X, 0.5)), rtol=1e-12)
