"""Every eager VJP rule against finite differences, at first and second order, with batches of cotangents."""

import re

import numpy as np
import pytest

import srcad as ad
from srcad.testing import check_batch_vjp, check_grads, nested_derivatives

DOMAINS = {
    "sym": lambda rng, s: rng.uniform(-2.0, 2.0, s),
    "pos": lambda rng, s: rng.uniform(0.5, 2.0, s),
    "unit": lambda rng, s: rng.uniform(-0.8, 0.8, s),
    "big": lambda rng, s: rng.uniform(1.5, 3.0, s),
    "nz": lambda rng, s: rng.uniform(0.5, 2.0, s) * rng.choice([-1.0, 1.0], s),   # away from the kink at 0
    "wellcond": lambda rng, s: rng.uniform(-1.0, 1.0, s) + 3.0 * np.eye(s[-1]),
}


def args(*specs, seed=0):
    """Random inputs: each spec is a shape, or (shape, domain)."""
    rng = np.random.default_rng(seed)
    out = []
    for spec in specs:
        shape, domain = spec if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], str) else (spec, "sym")
        out.append(np.asarray(DOMAINS[domain](rng, shape), dtype=np.float64))
    return out


M = (3, 4)
UNARY = {  # ufunc -> domain
    np.exp: "sym", np.exp2: "sym", np.expm1: "sym", np.log: "pos", np.log2: "pos", np.log10: "pos",
    np.log1p: "pos", np.sqrt: "pos", np.cbrt: "pos", np.square: "sym", np.abs: "nz", np.fabs: "nz",
    np.reciprocal: "pos", np.negative: "sym", np.positive: "sym", np.sin: "sym", np.cos: "sym", np.tan: "unit",
    np.arcsin: "unit", np.arccos: "unit", np.arctan: "sym", np.sinh: "sym", np.cosh: "sym", np.tanh: "sym",
    np.arcsinh: "sym", np.arccosh: "big", np.arctanh: "unit", np.deg2rad: "sym", np.rad2deg: "sym",
}
BINARY = {  # ufunc -> (domain of x, domain of y)
    np.add: ("sym", "sym"), np.subtract: ("sym", "sym"), np.multiply: ("sym", "sym"), np.divide: ("sym", "nz"),
    np.power: ("pos", "sym"), np.maximum: ("sym", "sym"), np.minimum: ("sym", "sym"), np.fmax: ("sym", "sym"),
    np.arctan2: ("nz", "nz"), np.hypot: ("nz", "nz"), np.logaddexp: ("sym", "sym"), np.mod: ("big", "pos"),
}
BROADCASTS = [(M, M), ((3, 1), (1, 4)), ((2, 3), (3,)), ((), (2, 3)), ((2, 1, 3), (4, 1))]

CASES = [pytest.param(f, [(M, d)], id=f.__name__) for f, d in UNARY.items()]
CASES += [pytest.param(f, [(M, dx), (M, dy)], id=f.__name__) for f, (dx, dy) in BINARY.items()]
CASES += [pytest.param(f, [(sx, dx), (sy, dy)], id=f"{f.__name__}{sx}{sy}")
          for f, (dx, dy) in [(np.multiply, ("sym", "sym")), (np.add, ("sym", "sym")), (np.divide, ("sym", "nz")),
                              (np.power, ("pos", "sym")), (np.maximum, ("sym", "sym"))]
          for sx, sy in BROADCASTS[1:]]


def case(id, fn, *specs):
    return pytest.param(fn, list(specs), id=id)


CASES += [
    # Python operators, Python scalars on either side
    case("ops", lambda x, y: (x + 2.0) * y - x / (y * y + 1.0) + 3.0 - (-x) ** 2, M, M),
    case("rpow", lambda x: 2.0 ** x + np.e ** (x * 0.5), M),
    case("pow-int", lambda x: x ** 3 + x ** 2.5 * 0.1 + x ** 0, (M, "pos")),
    case("pow-neg-base", lambda x: x ** 3, (M, "nz")),
    case("pow-0-base", lambda y: 0.0 ** y + np.zeros(M) ** (y + 3.0), (M, "pos")),
    case("rsub-rdiv-abs", lambda x: 1.0 / x - (3 - x) + abs(x), (M, "nz")),
    case("matmul-op", lambda x, y: x @ y, (3, 4), (4, 2)),
    case("rmatmul", lambda y: np.ones((2, 3)) @ y, (3, 4)),
    # where, clip
    case("where", lambda x, y: np.where(x > 0, x * y, y), M, M),
    case("where-bcast", lambda x, y: np.where(np.arange(4) > 1, x, y), (3, 1), (4,)),
    case("clip", lambda x: np.clip(x, -1.0, 1.0), M),
    case("clip-minmax-kw", lambda x: np.clip(x, min=-1.0) + np.clip(x, max=0.5), M),
    case("clip-tensor-bounds", lambda x, lo, hi: np.clip(x, lo, hi), (M, "sym"), ((4,), "unit"), ((3, 1), "big")),
    # reductions
    case("sum", lambda x: np.sum(x), M),
    case("sum-axis", lambda x: np.sum(x, axis=1) + np.sum(x, axis=(0, 2), keepdims=True).sum(), (2, 3, 4)),
    case("sum-method", lambda x: x.sum(axis=-1, keepdims=True) * x, M),
    case("mean", lambda x: np.mean(x, axis=0) + np.mean(x), M),
    case("max", lambda x: np.max(x, axis=1) * np.max(x), M),
    case("min", lambda x: np.min(x, axis=(0, 1), keepdims=True) + x.min(axis=0, keepdims=False), M),
    case("prod", lambda x: np.prod(x, axis=1), (M, "pos")),
    case("prod-all", lambda x: np.prod(x), ((2, 3), "nz")),
    case("cumsum", lambda x: np.cumsum(x, axis=1) * np.cumsum(x, axis=-2), M),
    case("cumsum-flat", lambda x: np.cumsum(x), M),
    # linear algebra
    case("dot-vv", lambda x, y: np.dot(x, y), (4,), (4,)),
    case("dot-mv", lambda x, y: np.dot(x, y), (3, 4), (4,)),
    case("dot-vm", lambda x, y: np.dot(x, y), (3,), (3, 4)),
    case("dot-mm", lambda x, y: np.dot(x, y), (3, 4), (4, 2)),
    case("dot-scalar", lambda x, y: np.dot(x, y), (), (3,)),
    case("matmul-batched", lambda x, y: np.matmul(x, y), (2, 3, 4), (4, 2)),
    case("matmul-bcast", lambda x, y: x @ y, (2, 1, 3, 4), (3, 4, 2)),
    case("matmul-vec-batch", lambda x, y: x @ y, (4,), (2, 4, 3)),
    case("einsum-mm", lambda x, y: np.einsum("ij,jk->ik", x, y), (3, 4), (4, 2)),
    case("einsum-implicit", lambda x, y: np.einsum("ij,jk", x, y), (3, 4), (4, 2)),
    case("einsum-sum", lambda x: np.einsum("ij->", x), M),
    case("einsum-rowdot", lambda x, y: np.einsum("ij,ij->i", x, y), M, M),
    case("einsum-outer", lambda x, y: np.einsum("i,j->ji", x, y), (3,), (4,)),
    case("einsum-3", lambda x, y, z: np.einsum("ijk,ik,j->k", x, y, z), (2, 3, 4), (2, 4), (3,)),
    case("einsum-drop", lambda x, y: np.einsum("ij,k->ik", x, y), (2, 3), (4,)),
    case("einsum-trace", lambda x: np.einsum("ii", x) + np.einsum("ii->i", x).sum(), (3, 3)),
    case("einsum-repeated", lambda x, y: np.einsum("iji,jk->ik", x, y), (3, 2, 3), (2, 4)),
    case("outer", lambda x, y: np.outer(x, y), (3,), (4,)),
    case("trace", lambda x: np.trace(x), (4, 4)),
    case("trace-offset", lambda x: np.trace(x, offset=1) + np.trace(x, offset=-1, axis1=1, axis2=2).sum(), (2, 3, 4)),
    case("diagonal", lambda x: np.diagonal(x, 1, 0, 2), (3, 2, 4)),
    case("norm", lambda x: np.linalg.norm(x), M),
    case("norm-axis", lambda x: np.linalg.norm(x, axis=1, keepdims=True) * x, M),
    case("norm-ord2-vec", lambda x: np.linalg.norm(x, ord=2, axis=-1), M),
    case("norm-fro", lambda x: np.linalg.norm(x, "fro"), M),
    case("inv", lambda a: np.linalg.inv(a), ((3, 3), "wellcond")),
    case("inv-batched", lambda a: np.linalg.inv(a), ((2, 3, 3), "wellcond")),
    case("det", lambda a: np.linalg.det(a), ((3, 3), "wellcond")),
    case("det-batched", lambda a: np.linalg.det(a), ((2, 3, 3), "wellcond")),
    case("cholesky", lambda a: np.linalg.cholesky(a), ((3, 3), "wellcond")),       # (of its lower triangle: PD)
    case("cholesky-batched", lambda a: np.linalg.cholesky(a), ((2, 3, 3), "wellcond")),
    case("cross", lambda a, b: np.cross(a, b), (3,), (3,)),
    case("cross-broadcast", lambda a, b: np.cross(a, b), (4, 3), (3,)),
    case("solve-vec", lambda a, b: np.linalg.solve(a, b), ((3, 3), "wellcond"), (3,)),
    case("solve-mat", lambda a, b: np.linalg.solve(a, b), ((3, 3), "wellcond"), (3, 2)),
    # shapes
    case("reshape", lambda x: np.reshape(x, (4, 3)) + x.reshape(2, 6).reshape((4, 3)), M),
    case("ravel", lambda x: np.ravel(x), M),
    case("transpose", lambda x: np.transpose(x, (2, 0, 1)) + x.T.transpose(0, 2, 1) + 0 * x.transpose((2, 0, 1)),
         (2, 3, 4)),
    case("swapaxes-moveaxis", lambda x: np.swapaxes(x, 0, -1) + np.moveaxis(x, 0, -1).transpose(1, 0, 2), (2, 3, 4)),
    case("squeeze", lambda x: np.squeeze(x) + np.squeeze(x, axis=(0, 2)), (1, 3, 1)),
    case("expand_dims", lambda x: np.expand_dims(x, 1) * np.expand_dims(x, (0, -1)), (3,)),
    case("broadcast_to", lambda x: np.broadcast_to(x, (2, 3, 4)), (3, 1)),
    case("flip", lambda x: np.flip(x) * np.flip(x, axis=1), M),
    case("concatenate", lambda x, y: np.concatenate([x, y, x], axis=1), (3, 2), (3, 4)),
    case("concatenate-neg-none", lambda x, y: np.concatenate([x, y], axis=-2) + np.concatenate([x, y], None)[3],
         (2, 3), (1, 3)),
    case("stack", lambda x, y: np.stack([x, y, x], axis=1), M, M),
    case("split", lambda x: np.split(x, 2, axis=1)[0] * np.split(x, [1, 3], axis=-1)[1], M),
    case("pad", lambda x: np.pad(x, ((1, 2), (0, 1))) + 0 * np.pad(x, 1).sum(), M),
    case("take", lambda x: np.take(x, [0, 2, 2]) + np.take(x, [3, 1], axis=1).sum(), M),
    case("copy", lambda x: np.copy(x) * x, M),
    # indexing
    case("getitem-int", lambda x: x[1] * x[-1, 2], M),
    case("getitem-slice", lambda x: x[1:, ::2] + x[:2, -2:], M),
    case("getitem-fancy", lambda x: x[[0, 2, 0]] + x[:, [1, 1, 3, 0]].sum(), M),
    case("getitem-fancy-2d", lambda x: x[np.array([0, 2, 2]), np.array([1, 3, 1])], M),
    case("getitem-bool", lambda x: x[x > 0.0] ** 2, M),
    case("getitem-bool-rows", lambda x: x[np.array([True, False, True])], M),
    case("getitem-ellipsis-newaxis", lambda x: x[..., None, 1] * x[None, 0], M),
    case("getitem-tensor-index", lambda x: x[ad.constant([2, 0])] + x[ad.constant(1)], M),
    case("iterate", lambda x: sum(row * i for i, row in enumerate(x)), M),
    # a composite
    case("softmax-xent", lambda x, y: -np.sum(y * (x - np.log(np.sum(np.exp(x), axis=1, keepdims=True)))), M, M),
]


@pytest.mark.parametrize("fn,specs", CASES)
def test_vjp_first_and_second_order(fn, specs):
    check_grads(fn, *args(*specs), order=2)


@pytest.mark.parametrize("fn,specs", CASES)
def test_batched_vjp_equals_stacked_vjps(fn, specs):
    check_batch_vjp(fn, *args(*specs), batch=3, order=2)


def test_third_order():
    check_grads(lambda x, y: np.sin(x) @ np.exp(y).T * (x @ y.T), *args((2, 3), (4, 3)), order=3)


# -- dtypes ------------------------------------------------------------------------------------

F32 = [np.exp, np.log, np.sqrt, np.sin, np.tanh, np.exp2, np.log2, np.log10, np.arctan, np.square, np.cbrt]


@pytest.mark.parametrize("f", F32, ids=lambda f: f.__name__)
def test_float32_gradients_stay_float32(f):
    def expr(x, p):
        return f(x) * 2.0 + x ** 2 + 2.0 ** x * x ** p / (x + 1)

    x64 = args((M, "pos"))[0]
    _, g, h = nested_derivatives(lambda x: expr(x, np.float32(1.5)), ad.Variable(x64.astype(np.float32)))
    y, g64, h64 = nested_derivatives(lambda x: expr(x, 1.5), ad.Variable(x64))
    assert y.dtype == np.float64 and g.dtype == np.float32 and h.dtype == np.float32
    np.testing.assert_allclose(g.numpy(), g64.numpy(), rtol=1e-4)
    np.testing.assert_allclose(h.numpy(), h64.numpy(), rtol=1e-3)


def test_float32_broadcast_linalg_and_reductions():
    a, b = [ad.Variable(v.astype(np.float32)) for v in args(((3, 3), "wellcond"), (3, 1))]
    with ad.GradientTape() as tape:
        y = np.sum(np.linalg.solve(a, b) * np.mean(a, axis=0)) + np.linalg.det(a) + np.max(a) + np.linalg.norm(b)
    ga, gb = tape.gradient(y, [a, b])
    assert y.dtype == np.float32 and ga.dtype == np.float32 and gb.dtype == np.float32


def test_astype():
    x = ad.Variable([1.5, 2.5])
    with ad.GradientTape(persistent=True) as tape:
        y32 = x.astype(np.float32) * 3.0
        yint = x.astype(np.int64) * x
    assert y32.dtype == np.float32
    g = tape.gradient(y32, x)
    assert g.dtype == np.float64 and np.allclose(g.numpy(), 3.0)
    np.testing.assert_allclose(tape.gradient(yint, x).numpy(), [1.0, 2.0])  # only through the float factor
    check_grads(lambda x: x.astype(np.float64) ** 2, *args(M))


def test_integer_inputs_have_no_gradient():
    xi, w = ad.constant([1, 2, 3]), ad.Variable([0.5, 1.5, 2.0])
    with ad.GradientTape(persistent=True) as tape:
        tape.watch(xi)
        y = np.sum(xi * w + np.sin(w) * xi)
        yi = xi * 2
    gi, gw = tape.gradient(y, [xi, w])
    assert gi is None
    np.testing.assert_allclose(gw.numpy(), [1.0, 2.0, 3.0] + np.cos([0.5, 1.5, 2.0]) * [1, 2, 3])
    assert tape.gradient(yi, xi) is None
    assert tape.gradient(yi, w) is None


NONDIFF = {
    "floor": np.floor, "ceil": np.ceil, "rint": np.rint, "trunc": np.trunc, "sign": np.sign,
    "round": lambda x: np.round(x, 1), "argmax": lambda x: np.argmax(x, axis=1), "argmin": np.argmin,
    "less": lambda x: x < 0.3, "greater_equal": lambda x: x >= 0.3, "equal": lambda x: x == x,
    "not_equal": lambda x: np.not_equal(x, 1.0), "floordiv": lambda x: x // 0.7, "isfinite": np.isfinite,
    "logical_and": lambda x: np.logical_and(x > 0, x < 1), "argsort": np.argsort,
}


@pytest.mark.parametrize("f", NONDIFF.values(), ids=NONDIFF.keys())
def test_nondifferentiable_results_carry_no_gradient(f):
    x = ad.Variable(args(M)[0])
    with ad.GradientTape(persistent=True) as tape:
        y = f(x)
        z = np.sum(x * np.asarray(y, dtype=float).sum())
    assert tape.gradient(y, x) is None
    np.testing.assert_allclose(tape.gradient(z, x).numpy(), np.full(M, np.asarray(y, dtype=float).sum()))


def test_mixed_nondifferentiable_factor():
    x = ad.Variable(args((M, "pos"))[0])
    with ad.GradientTape() as tape:
        y = np.sum(np.floor(x * 3) * x)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), np.floor(x.numpy() * 3))


# -- functions without a rule --------------------------------------------------------------------

UNREGISTERED = [
    ("numpy.sort", lambda x: np.sort(x, axis=1)),
    ("numpy.cumprod", lambda x: np.cumprod(x)),
    ("numpy.logaddexp2", lambda x: np.logaddexp2(x, x)),
    ("numpy.add.reduce", lambda x: np.add.reduce(x)),
    ("numpy.sin(..., dtype=)", lambda x: np.sin(x, dtype=np.float64)),   # options a rule cannot honour
    ("numpy.sum", lambda x: np.sum(x, where=x > 0)),
    ("numpy.max", lambda x: np.max(x, axis=0, initial=5.0)),
]


@pytest.mark.parametrize("name,f", UNREGISTERED, ids=[n for n, _ in UNREGISTERED])
def test_unregistered_function_raises_when_a_gradient_is_needed(name, f):
    x = ad.Variable(args(M)[0])
    with ad.GradientTape():
        with pytest.raises(NotImplementedError, match=re.escape(name)):
            f(x)
    assert not isinstance(f(x.numpy()), ad.Tensor)
    f(x)  # outside a tape: runs
    c = ad.constant(x.numpy())
    with ad.GradientTape():
        f(c)  # not watched: no gradient needed, runs


# -- the checkers catch wrong rules ----------------------------------------------------------------

def test_check_grads_catches_wrong_first_order_rule(monkeypatch):
    monkeypatch.setattr(ad.ops.sin, "vjps", (lambda g, ans, x: g * np.cos(x) * 1.001,))
    with pytest.raises(AssertionError, match="finite difference"):
        check_grads(np.sin, *args(M), order=1)


def test_check_grads_catches_rule_that_is_not_differentiable_again(monkeypatch):
    # right values, but computed on plain NumPy values: invisible to an outer tape
    monkeypatch.setattr(ad.ops.sin, "vjps", (lambda g, ans, x: g * ad.constant(np.cos(np.asarray(x))),))
    check_grads(np.sin, *args(M), order=1)
    with pytest.raises(AssertionError, match="finite difference"), \
            pytest.warns(ad.GradientLostWarning, match="converted to a NumPy array"):
        check_grads(np.sin, *args(M), order=2)


def test_check_batch_vjp_catches_rule_without_batch_support(monkeypatch):
    wrong = lambda g, ans, x, axis=None, keepdims=False: ad.ops.broadcast_to(  # noqa: E731
        ad.ops.sum(g), np.shape(np.asarray(x)))
    monkeypatch.setattr(ad.ops.sum, "vjps", (wrong,))
    check_grads(lambda x: np.sum(x), *args(M), order=1)
    with pytest.raises(AssertionError, match="batched VJP"):
        check_batch_vjp(lambda x: np.sum(x), *args(M), order=1)


@pytest.mark.parametrize("f,match", [
    (lambda x: np.linalg.norm(x, ord=1), "ord=1"),
    (lambda x: np.linalg.norm(x, ord=2), "ord=2"),
    (lambda x: np.pad(x, 1, mode="edge"), "mode='edge'"),
    (lambda x: np.einsum("...j->...", x), r"'\.\.\.'"),
    (lambda x: np.dot(np.ones((2, 3, 4)), x), "rank > 2"),
    (lambda x: np.reshape(x, (2, 8), order="F"), "order='F'"),
], ids=["norm-ord1", "norm-spectral", "pad-edge", "einsum-ellipsis", "dot-rank3", "reshape-F"])
def test_unsupported_variants_raise_not_implemented(f, match):
    x = ad.Variable(args((4, 4))[0])
    with pytest.raises(NotImplementedError, match=match):
        with ad.GradientTape() as tape:
            tape.gradient(f(x), x)
