"""The compiled layer's one table of derivative rules, as IR expression trees.

An elementwise function is one line: the partial derivative with respect to
each argument, a formula in the arguments (`None`: not differentiable in that
argument). Partials serve both directions: the tangent of `y = f(a, b)` is
`pa * da + pb * db`, its transpose adds `pa * g` into the adjoint of `a`.
`M.cos` is `math.cos` where the arguments are float64 scalars and `np.cos`
otherwise (see `instantiate`).

    elementwise("np.sinh math.sinh", lambda a: M.cosh(a))

A function on whole arrays (a reduction, a product, a transpose) is linear
in each argument with the others fixed: its entry gives the tangent and the
transpose (the vector-Jacobian product) of each argument, given the static
ranks of the arguments and the `axis` keyword:

    ArrayRule(tangent=lambda args, dargs, ranks, axis: ..., transposes=[lambda args, g, ranks, axis: ...])

Each transpose returns `(expression, mode)`: "exact" when the expression
has the argument's shape, "expand" when it broadcasts up to it, "reduce" when
it must be summed over the axes along which the argument was broadcast.

The conventions at edge points are the eager table's (`srcad/ops/rules.py`,
TensorFlow's): d(x ** y)/dy is 0 where x <= 0 and d(x ** y)/dx is 0 where
y == 0; `abs` has slope 0 at 0; a tie of `maximum` goes to the first
argument; `np.max` splits the adjoint equally among tied extrema.
`tests/compiler/test_rules_agree.py` checks that both tables agree.
"""
from dataclasses import dataclass

from ..ir import Attribute, BinOp, Call, Compare, Const, Slice, Subscript, Tuple, UnaryOp, lift
from ..ir.visit import rebuild


class _Module:
    """`M.cos(x)` builds the call `M.cos` (module chosen by `instantiate`); `np.cbrt(x)` a NumPy call."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, fn):
        return lambda *args: Call(f"{self._name}.{fn}", tuple(lift(a) for a in args))


M = _Module("M")
np_ = _Module("np")
srcad = _Module("srcad")


def ge(a, b):
    return Compare(">=", a, lift(b))


def gt(a, b):
    return Compare(">", a, lift(b))


def le(a, b):
    return Compare("<=", a, lift(b))


def lt(a, b):
    return Compare("<", a, lift(b))


def ne(a, b):
    return Compare("!=", a, lift(b))


def where(c, a, b):
    return Call("np.where", (c, lift(a), lift(b)))


# ---- elementwise functions: the partial derivative per argument ---------------------------------

ELEMENTWISE = {}


def elementwise(names, *partials):
    """Register the partials of the functions `names` (space-separated canonical names)."""
    for name in names.split():
        ELEMENTWISE[name] = partials


elementwise("np.sin math.sin", lambda a: M.cos(a))
elementwise("np.cos math.cos", lambda a: -M.sin(a))
elementwise("np.tan math.tan", lambda a: 1.0 + M.tan(a) ** 2)
elementwise("np.exp math.exp", lambda a: M.exp(a))
elementwise("np.expm1 math.expm1", lambda a: M.exp(a))
elementwise("np.exp2", lambda a: 0.6931471805599453 * np_.exp2(a))
elementwise("np.log math.log", lambda a: 1.0 / a)
elementwise("np.log1p math.log1p", lambda a: 1.0 / (1.0 + a))
elementwise("np.log2 math.log2", lambda a: 1.4426950408889634 / a)
elementwise("np.log10 math.log10", lambda a: 0.4342944819032518 / a)
elementwise("np.sqrt math.sqrt", lambda a: 0.5 / M.sqrt(a))
elementwise("np.cbrt", lambda a: 1.0 / (3.0 * np_.cbrt(a) ** 2))
elementwise("np.tanh math.tanh", lambda a: 1.0 - M.tanh(a) ** 2)
elementwise("np.sinh math.sinh", lambda a: M.cosh(a))
elementwise("np.cosh math.cosh", lambda a: M.sinh(a))
elementwise("np.arcsin math.asin", lambda a: 1.0 / M.sqrt(1.0 - a * a))
elementwise("np.arccos math.acos", lambda a: -1.0 / M.sqrt(1.0 - a * a))
elementwise("np.arctan math.atan", lambda a: 1.0 / (1.0 + a * a))
elementwise("np.arcsinh math.asinh", lambda a: 1.0 / M.sqrt(a * a + 1.0))
elementwise("np.arccosh math.acosh", lambda a: 1.0 / M.sqrt(a * a - 1.0))
elementwise("np.arctanh math.atanh", lambda a: 1.0 / (1.0 - a * a))
elementwise("math.erf", lambda a: 1.1283791670955126 * M.exp(-a * a))
elementwise("math.erfc", lambda a: -1.1283791670955126 * M.exp(-a * a))
elementwise("abs np.abs np.absolute np.fabs math.fabs", lambda a: np_.sign(a))
elementwise("np.square", lambda a: 2.0 * a)
elementwise("np.reciprocal", lambda a: -1.0 / (a * a))
elementwise("np.deg2rad np.radians math.radians", lambda a: Const(0.017453292519943295))
elementwise("np.rad2deg np.degrees math.degrees", lambda a: Const(57.29577951308232))
elementwise("np.negative", lambda a: Const(-1.0))
elementwise("np.positive np.copy .copy np.array np.asarray np.ascontiguousarray float np.float64 np.float32 .astype",
            lambda a, *dtype: Const(1.0))
# of real values (a gradient never flows through a complex one: analysis.activity refuses it)
elementwise("np.real np.conj np.conjugate np.double np.single", lambda a: Const(1.0))
elementwise("np.power math.pow", lambda a, b: srcad.power_slope(a, b), lambda a, b: srcad.log_or_zero(a) * a ** b)
elementwise("np.arctan2 math.atan2", lambda a, b: b / (a * a + b * b), lambda a, b: -a / (a * a + b * b))
elementwise("np.hypot math.hypot", lambda a, b: a / M.hypot(a, b), lambda a, b: b / M.hypot(a, b))
elementwise("np.logaddexp", lambda a, b: 1.0 / (1.0 + np_.exp(b - a)), lambda a, b: 1.0 / (1.0 + np_.exp(a - b)))
elementwise("np.logaddexp2", lambda a, b: 1.0 / (1.0 + np_.exp2(b - a)), lambda a, b: 1.0 / (1.0 + np_.exp2(a - b)))
elementwise("np.maximum np.fmax max", lambda a, b: ge(a, b), lambda a, b: lt(a, b))
elementwise("np.minimum np.fmin min", lambda a, b: le(a, b), lambda a, b: gt(a, b))
elementwise("np.mod np.remainder", lambda a, b: Const(1.0), lambda a, b: -np_.floor(a / b))
elementwise("np.fmod math.fmod", lambda a, b: Const(1.0), lambda a, b: -np_.trunc(a / b))
elementwise("np.nextafter", lambda a, b: Const(1.0), None)
elementwise("np.ldexp", lambda a, b: np_.ldexp(1.0, b), None)
elementwise("np.asfortranarray", lambda a: Const(1.0))
elementwise("np.sinc", lambda a: where(ne(a, 0.0), (np_.cos(3.141592653589793 * a) - np_.sinc(a))
                                       / where(ne(a, 0.0), a, 1.0), 0.0))
elementwise("np.add", lambda a, b: Const(1.0), lambda a, b: Const(1.0))
elementwise("np.subtract", lambda a, b: Const(1.0), lambda a, b: Const(-1.0))
elementwise("np.multiply", lambda a, b: b, lambda a, b: a)
elementwise("np.divide np.true_divide", lambda a, b: 1.0 / b, lambda a, b: -a / (b * b))
elementwise("np.copysign math.copysign", lambda a, b: np_.sign(a) * np_.sign(b), None)
elementwise("np.clip", lambda a, lo, hi: ge(a, lo) * le(a, hi), lambda a, lo, hi: lt(a, lo),
            lambda a, lo, hi: gt(a, hi))
elementwise("np.where", None, lambda c, a, b: where(c, 1.0, 0.0), lambda c, a, b: where(c, 0.0, 1.0))
# what generated code calls: the slopes of x ** y, so that gradients can be differentiated again
elementwise("srcad.power_slope", lambda a, b: b * srcad.power_slope(a, b - 1.0),
            lambda a, b: a ** (b - 1.0) * (1.0 + b * srcad.log_or_zero(a)))
elementwise("srcad.log_or_zero", lambda a: srcad.reciprocal_or_zero(a))
elementwise("srcad.reciprocal_or_zero", lambda a: -srcad.reciprocal_or_zero(a) ** 2)
elementwise("srcad.cotangent_times", lambda g, p: srcad.finite_or_zero(p), lambda g, p: srcad.finite_or_zero(g))
# the calls a custom rule (`f.defjvp`) runs through (runtime.rule_step)
elementwise("srcad.rule_step", lambda a: srcad.rule_slope(a))
elementwise("srcad.rule_slope", lambda a: srcad.rule_curvature(a))
elementwise("srcad.rule_midpoint", lambda a, t: Const(0.0), lambda a, t: Const(0.5))
elementwise("srcad.finite_or_zero", lambda a: Compare("==", a - a, Const(0.0)))


# ---- the same partials from the function's result, where that is cheaper ------------------------
# `y = exp(x)`: d_x += d_y * y reads the value the forward computed instead of calling exp again.
# Used where the target keeps results (`saving.Policy.keeps_results`) and the result is at hand: the
# statement binds it to a name its arguments do not read (`LocalAdjoints.result_read`).

FROM_RESULT = {}


def of_result(names, partial):
    """Register the partial of the one-argument functions `names` in terms of their result."""
    for name in names.split():
        FROM_RESULT[name] = partial


of_result("np.exp math.exp", lambda y: y)
of_result("np.expm1 math.expm1", lambda y: 1.0 + y)
of_result("np.exp2", lambda y: 0.6931471805599453 * y)
of_result("np.tanh math.tanh", lambda y: 1.0 - y * y)
of_result("np.tan math.tan", lambda y: 1.0 + y * y)
of_result("np.sqrt math.sqrt", lambda y: 0.5 / y)
of_result("np.cbrt", lambda y: 1.0 / (3.0 * (y * y)))
of_result("np.reciprocal", lambda y: -(y * y))


def result_partial(e):
    """(argument, partial from the result) where `e`'s partial with respect to its one argument is cheaper
    from its result y: a call of `FROM_RESULT`, or the logistic sigmoid 1 / (1 + exp(-x)), whose partial
    is y (1 - y) (1 / (1 + exp(u)) of another u: -y (1 - y)); no exponential then, the forward's is not
    kept nor computed again. Else None."""
    if isinstance(e, Call) and e.fn in FROM_RESULT and len(e.args) == 1 and not e.keywords:
        return e.args[0], FROM_RESULT[e.fn]
    u = _logistic_exponent(e)
    if u is None:
        return None
    if isinstance(u, UnaryOp) and u.op == "-":
        return u.operand, lambda y: y * (1.0 - y)
    return u, lambda y: -(y * (1.0 - y))


def has_result_partial(e):
    """Is `e` a value whose partial `result_partial` gives from its result?"""
    return result_partial(e) is not None


def _logistic_exponent(e):
    """u where `e` is 1 / (1 + exp(u)) (the sum either way round; 1 or 1.0), else None."""
    ones = (Const(1.0), Const(1))
    if not (isinstance(e, BinOp) and e.op == "/" and e.left in ones and isinstance(e.right, BinOp) and e.right.op == "+"):
        return None
    for one, power in ((e.right.left, e.right.right), (e.right.right, e.right.left)):
        if one in ones and isinstance(power, Call) and power.fn in ("np.exp", "math.exp") and len(power.args) == 1 \
                and not power.keywords:
            return power.args[0]
    return None


# Python operators, by their IR spelling.
OPERATORS = {
    "+": (lambda a, b: Const(1.0), lambda a, b: Const(1.0)),
    "-": (lambda a, b: Const(1.0), lambda a, b: Const(-1.0)),
    "*": (lambda a, b: b, lambda a, b: a),
    "/": (lambda a, b: 1.0 / b, lambda a, b: -a / (b * b)),
    "**": ELEMENTWISE["np.power"],
    "%": (lambda a, b: Const(1.0), lambda a, b: -np_.floor(a / b)),
    "u-": (lambda a: Const(-1.0),),
    "u+": (lambda a: Const(1.0),),
}


def power_partial(exponent):
    """d(a ** c)/da for a constant exponent c: a plain polynomial, as the user would write it."""
    c = exponent
    if c == 0:
        return lambda a, b: Const(0.0)
    if c == 1:
        return lambda a, b: Const(1.0)
    if c == 2:
        return lambda a, b: 2.0 * a
    return lambda a, b: float(c) * a ** float(c - 1)


# Calls whose result never carries a derivative (integer-valued, piecewise constant, or allocations).
NONDIFF = frozenset("""
    np.zeros np.ones np.empty np.zeros_like np.ones_like np.empty_like np.arange np.eye np.identity len int round bool math.floor math.ceil math.trunc np.floor np.ceil
    np.trunc np.round np.rint np.sign np.argmax np.argmin np.isnan np.isinf np.isfinite math.isnan
    math.isinf math.isfinite np.floor_divide np.logical_and np.logical_or np.logical_not np.greater
    np.less np.equal np.shape np.ndim np.size np.argsort np.heaviside math.factorial np.int64 np.int32
    np.bool_ range srcad.list_index srcad.rule_block srcad.rule_cotangents srcad.shape_differs srcad.trip_count srcad.last_written srcad.frozen_array srcad.median_slopes np.imag srcad.det_sign
    np.int8 np.int16 np.uint8 np.uint16 np.uint32 np.uint64 np.intc np.uintc np.intp np.uintp np.finfo np.iinfo
    np.dtype np.bitwise_and np.bitwise_or np.bitwise_xor np.bitwise_not np.invert np.left_shift np.right_shift
    np.greater_equal np.less_equal np.not_equal np.logical_xor np.signbit np.spacing np.any np.all np.nonzero
    np.count_nonzero np.searchsorted np.digitize np.tri np.linalg.matrix_rank np.flatnonzero np.argwhere
    np.bool np.byte np.ubyte np.short np.ushort np.uint
""".split())

# Functions of Numba's NumPy support that srcad compiles but does not differentiate, and why: a gradient
# that flows through one is refused naming it and the reason (every other function of that list has a rule,
# is in NONDIFF or is written as functions that have one, `front/lower.py` WRITTEN_AS;
# tests/compiler/test_numba_values.py checks the list, docs/subset.md lists them).
NOT_DIFFERENTIATED = {name: reason for names, reason in (
    ("srcad.rule_vjp", "forward mode (a tangent, ad.jvp, ad.hvp, a forward-mode jacobian) through a function "
     "with a custom VJP (defvjp) is not supported: give it a forward rule with defjvp"),
    ("srcad.rule_curvature", "a derivative of third order through a function with a custom rule (defjvp) is not "
     "supported: its first and second derivatives are exact, not its third"),
    ("np.partition np.unique np.histogram np.bincount np.roots np.fill_diagonal",
     "its result is not a smooth function of its argument, or no rule yet; write it as a loop"),
    ("srcad.left_singular_vectors srcad.right_singular_vectors",
     "the derivatives of singular vectors are not built; singular values are differentiated (np.linalg.svd(a)[1]), "
     "and the eigenvectors of a symmetric matrix (np.linalg.eigh)"),
    ("srcad.least_squares_residuals",
     "the residuals of np.linalg.lstsq are not differentiated; compute them from its solution x "
     "(np.sum((a @ x - b) ** 2, axis=0)), which is"),
    ("np.complex64 np.complex128 np.csingle np.cdouble np.angle", "complex numbers are not differentiated"),
    ("np.frexp np.modf", "returns a tuple of parts"),
    (" ".join("np.random." + f for f in """rand randn random random_sample ranf sample randint choice permutation
        shuffle beta binomial chisquare exponential f gamma geometric gumbel hypergeometric laplace logistic lognormal
        logseries multinomial negative_binomial normal pareto poisson power rayleigh standard_cauchy
        standard_exponential standard_gamma standard_normal standard_t triangular uniform vonmises wald weibull
        zipf""".split()), "a random draw; draw standard noise (np.random.standard_normal()) and write "
                           "mu + sigma * z, which is differentiated in mu and sigma"),
) for name in names.split()}


def no_rule(s, fn):
    """The TransformError for statement `s`, which calls `fn`, a function without a derivative rule (with
    the reason where NOT_DIFFERENTIATED gives one)."""
    from ..errors import TransformError, where
    why = f" ({NOT_DIFFERENTIATED[fn]})" if fn in NOT_DIFFERENTIATED else ""
    return TransformError(f"{where(s.origin)}: no derivative rule for `{fn}`{why} in `{s.origin.text}`. Hint: wrap "
                          f"it with ad.stop_gradient(...) if it should not be differentiated, or write it with "
                          f"supported math/NumPy functions (adding a rule: docs/rules.md)")


# ---- whole-array functions: tangent and transposes ----------------------------------------------

@dataclass(frozen=True)
class ArrayRule:
    tangent: object          # (args, dargs, ranks, axis) -> tangent expression (None where a darg is absent)
    transposes: tuple        # per argument: (args, g, ranks, axis) -> (adjoint expression, mode), or None
    keywords: object = None  # (keywords other than axis, ranks) -> does the rule hold with them? (None: none may be given)


def _matmul_transpose(k):
    def rule(args, g, ranks, axis):
        a, b = args
        ra, rb = ranks
        if ra == 0 or rb == 0:
            return (g * (b if k == 0 else a), "reduce")
        forms = {(2, 2): (g @ np_.transpose(b), np_.transpose(a) @ g),
                 (2, 1): (np_.outer(g, b), np_.transpose(a) @ g),
                 (1, 2): (b @ g, np_.outer(a, g)),
                 (1, 1): (g * b, g * a)}
        if (ra, rb) not in forms:
            return None
        return (forms[(ra, rb)][k], "exact")
    return rule


def _sum_of(parts):
    """The sum of the tangent terms that are not None (a term is None where its argument has no tangent)."""
    present = [p for p in parts if p is not None]
    total = present[0]
    for p in present[1:]:
        total = total + p
    return total


def _matmul_tangent(args, dargs, ranks, axis):
    a, b = args
    da, db = dargs
    return _sum_of((da @ b if da is not None else None, a @ db if db is not None else None))


def _axis_keywords(axis):
    return () if axis is None else (("axis", Const(axis)),)


def _sum_tangent(args, dargs, ranks, axis):
    return Call("np.sum", (dargs[0],), _axis_keywords(axis))


def _sum_transpose(args, g, ranks, axis):
    return (g if axis is None else np_.expand_dims(g, axis), "expand")


def _mean_tangent(args, dargs, ranks, axis):
    return Call("np.mean", (dargs[0],), _axis_keywords(axis))


def _mean_transpose(args, g, ranks, axis):
    a = args[0]
    if axis is None:
        return (g / Call("np.size", (a,)), "expand")
    return (np_.expand_dims(g, axis) / Subscript(Call("np.shape", (a,)), (Const(axis),)), "expand")


def _extremum(fn):
    """np.max / np.min over the whole array: the adjoint split equally among tied extrema."""
    def mask(a):
        return np_.equal(a, Call(fn, (a,)))

    def tangent(args, dargs, ranks, axis):
        if axis is not None:
            return None
        return np_.sum(dargs[0] * mask(args[0])) / np_.sum(mask(args[0]))

    def transpose(args, g, ranks, axis):
        if axis is not None:
            return None
        return (g * mask(args[0]) / np_.sum(mask(args[0])), "exact")
    return ArrayRule(tangent, (transpose,))


def _extremum_along(fn):
    """srcad.max_along / min_along (np.max / np.min along an axis): the adjoint of each result split equally
    among its tied extrema. Along the one axis of a vector, the result is a number, as np.max's."""
    def spread(x, axis, rank):
        return x if rank == 1 else np_.expand_dims(x, axis)

    def mask(a, axis, rank):
        return np_.equal(a, spread(Call(fn, (a,), _axis_keywords(axis)), axis, rank))

    def along(x, axis, rank):
        return Call("np.sum", (x,), () if rank == 1 else _axis_keywords(axis))

    def tangent(args, dargs, ranks, axis):
        m = mask(args[0], axis, ranks[0])
        return along(dargs[0] * m, axis, ranks[0]) / along(m, axis, ranks[0])

    def transpose(args, g, ranks, axis):
        m = mask(args[0], axis, ranks[0])
        return (spread(g / along(m, axis, ranks[0]), axis, ranks[0]) * m, "exact")
    return ArrayRule(tangent, (transpose,))


def _permuted(x, args, inverse):
    """np.transpose of `x` with the axes `args[1]` of `np.transpose(a, axes)` (all reversed where none are
    given); `inverse`: the permutation undoing them. None where the axes are not constants."""
    if len(args) == 1:
        return np_.transpose(x)
    axes = args[1]
    if not (isinstance(axes, Tuple) and all(isinstance(a, Const) and type(a.value) is int for a in axes.items)):
        return None
    order = [a.value % len(axes.items) for a in axes.items]
    if inverse:
        order = sorted(range(len(order)), key=order.__getitem__)
    return Call("np.transpose", (x, Tuple(tuple(Const(k) for k in order))))


def _exact(expr):
    return None if expr is None else (expr, "exact")


def _euclidean(keywords, ranks):
    """The 2-norm of a vector or the Frobenius norm of a matrix: `ord` not given, or 2 for a vector."""
    order = keywords.get("ord", Const(None))
    return set(keywords) <= {"ord"} and (order == Const(None) or (order == Const(2) and ranks[0] == 1))


def _norm_tangent(args, dargs, ranks, axis):
    return None if axis is not None else np_.sum(args[0] * dargs[0]) / Call("np.linalg.norm", (args[0],))


def _norm_transpose(args, g, ranks, axis):
    return None if axis is not None else (g * args[0] / Call("np.linalg.norm", (args[0],)), "exact")


def _outer_tangent(args, dargs, ranks, axis):
    a, b = args
    da, db = dargs
    return _sum_of((np_.outer(da, b) if da is not None else None, np_.outer(a, db) if db is not None else None))


def _kron_tangent(args, dargs, ranks, axis):
    """np.kron is bilinear: kron(da, b) + kron(a, db) (arguments of one rank, 1 or 2)."""
    if ranks[0] != ranks[1] or ranks[0] not in (1, 2):
        return None
    (a, b), (da, db) = args, dargs
    return _sum_of((Call("np.kron", (da, b)) if da is not None else None,
                    Call("np.kron", (a, db)) if db is not None else None))


def _kron_transpose(g, args, ranks, k):
    """`np.kron(a, b)[i * p + r, j * q + c] = a[i, j] * b[r, c]`: the adjoint of argument k is each block of
    `g` (blocks of `b`'s shape, one per entry of `a`) weighted by the other argument and summed, or each
    entry's blocks (one per entry of `b`) weighted likewise: a matrix product of `g` regrouped."""
    if ranks[0] != ranks[1] or ranks[0] not in (1, 2):
        return None
    mine, other = args[k], args[1 - k]

    def extent(x, d):
        return Subscript(Attribute(x, "shape"), (Const(d),))
    if ranks[0] == 1:                   # g[i * p + r]: rows of a, columns of b
        blocks = Call("np.reshape", (np_.ascontiguousarray(g), Tuple((extent(args[0], 0), extent(args[1], 0)))))
        return (blocks @ other if k == 0 else other @ blocks), "exact"
    m, n, p, q = extent(args[0], 0), extent(args[0], 1), extent(args[1], 0), extent(args[1], 1)
    grouped = Call("np.reshape", (np_.ascontiguousarray(g), Tuple((m, p, n, q))))
    order = (0, 2, 1, 3) if k == 0 else (1, 3, 0, 2)          # mine's axes first, the other's last
    regrouped = np_.ascontiguousarray(Call("np.transpose", (grouped, Tuple(tuple(Const(o) for o in order)))))
    rows, cols = (BinOp("*", m, n), BinOp("*", p, q)) if k == 0 else (BinOp("*", p, q), BinOp("*", m, n))
    flat = Call("np.reshape", (regrouped, Tuple((rows, cols)))) @ np_.ravel(other)
    return _shaped_like(flat, mine), "exact"


def _outer_transpose(g, args, ranks, k):
    """np.outer flattens its arguments: the adjoint of argument k is (g or g.T) times the other one,
    flattened, shaped back like argument k."""
    other = args[1 - k]
    if ranks == [1, 1]:
        return g @ other, "exact"
    return _shaped_like(g @ (other if ranks[1 - k] == 1 else np_.ravel(other)), args[k]), "exact"


def _fill_rule(fn):
    """np.full(shape, v) / np.full_like(a, v): linear in the fill value `v`, not in the first argument."""
    return ArrayRule(lambda args, dargs, ranks, axis: Call(fn, (args[0], dargs[1])),
                     (None, lambda args, g, ranks, axis: (g, "reduce")))


def _linspace_weights(args):
    """np.linspace(a, b, n) is a * (1 - w) + b * w with w = np.linspace(0.0, 1.0, n)."""
    return Call("np.linspace", (Const(0.0), Const(1.0), args[2]))


def _linspace_tangent(args, dargs, ranks, axis):
    w = _linspace_weights(args)
    return _sum_of((dargs[0] * (1.0 - w) if dargs[0] is not None else None,
                    dargs[1] * w if dargs[1] is not None else None))


def _whole(rule):
    """A transpose defined only over the whole array (no `axis=`)."""
    return lambda args, g, ranks, axis: None if axis is not None else rule(args, g, ranks)


def _shaped_like(g, x):
    """`g` with the shape of `x` (the transpose of a reshape)."""
    return Call("np.reshape", (np_.ascontiguousarray(g), Call("np.shape", (x,))))


def _expanded_axis(args, axis):
    """The axis of `np.expand_dims(a, axis)`, given by position or by keyword."""
    return args[1] if len(args) > 1 else Const(axis)


def _centered(args):
    x = args[0]
    return x - np_.mean(x)


def _kept(x):
    """1.0 where `x` is a number, 0.0 where it is NaN: what the nan* reductions leave out."""
    return where(np_.isnan(x), 0.0, 1.0)


def _nan_centered(x):
    """x - np.nanmean(x), 0.0 where x is NaN."""
    return where(np_.isnan(x), 0.0, x - np_.nanmean(x))


def _over_whole(tangent, transpose):
    """A reduction over the whole array (Numba's nan* reductions and median take no axis): its tangent
    `tangent(x, dx)` and transpose `transpose(x, g)`, which has the shape of `x`."""
    return ArrayRule(lambda args, dargs, ranks, axis: None if axis is not None else tangent(args[0], dargs[0]),
                     (_whole(lambda args, g, ranks: (transpose(args[0], g), "exact")),))


def _nan_extremum(fn):
    """np.nanmax / np.nanmin: the adjoint split equally among tied extrema (NaNs get none)."""
    def mask(x):
        return np_.equal(x, Call(fn, (x,)))
    return _over_whole(lambda x, dx: np_.sum(dx * mask(x)) / np_.sum(mask(x)),
                       lambda x, g: g * mask(x) / np_.sum(mask(x)))


def _median(skip_nan):
    """The median is the middle sorted value, or the mean of the two middle ones (`srcad.median_slopes`)."""
    return _over_whole(lambda x, dx: np_.sum(dx * srcad.median_slopes(x, Const(skip_nan))),
                       lambda x, g: g * srcad.median_slopes(x, Const(skip_nan)))


def _inverse(a):
    return Call("np.linalg.inv", (a,))


def _det(args):
    return Call("np.linalg.det", tuple(args))


def _cofactor_ratio(args):
    """d det(A) / dA = det(A) inv(A).T: this is inv(A).T."""
    return np_.transpose(_inverse(args[0]))


def _transposed(a):
    """`a`.T as a C-contiguous array (what Numba's linear algebra takes)."""
    return np_.ascontiguousarray(np_.transpose(a))


def _extent(a, axis):
    return Subscript(Call("np.shape", (a,)), (Const(axis),))


def _eye_like(a, axis):
    """The identity of `a`'s extent along `axis`, in `a`'s dtype (Numba's `@` takes arrays of one dtype)."""
    return Call("np.eye", (_extent(a, axis),), (("dtype", Attribute(a, "dtype")),))


def _solve_tangent(args, dargs, ranks, axis):
    """d solve(A, b) = solve(A, db - dA @ x), x = solve(A, b)."""
    a, b = args
    da, db = dargs
    x = Call("np.linalg.solve", tuple(args))
    rhs = _sum_of((db, -(da @ x) if da is not None else None))
    return Call("np.linalg.solve", (a, rhs))


def _solve_transpose(k):
    """The adjoint of b is solve(A.T, g); that of A is -(adjoint of b) x^T."""
    def rule(args, g, ranks, axis):
        gb = Call("np.linalg.solve", (_transposed(args[0]), g))
        if k == 1:
            return gb, "exact"
        x = Call("np.linalg.solve", tuple(args))
        return -(np_.outer(gb, x) if ranks[1] == 1 else gb @ np_.transpose(x)), "exact"
    return rule


def _cholesky(a):
    return Call("np.linalg.cholesky", (a,))


def _lower_half(x):
    """Φ(X): the lower triangle of X with its diagonal halved (a self-adjoint linear map)."""
    return np_.tril(x) - np_.diag(np_.diag(x)) / Const(2)       # (an integer keeps float32 arrays float32)


def _cholesky_tangent(args, dargs, ranks, axis):
    """dL = L Φ(L⁻¹ dA L⁻ᵀ), dA the symmetric matrix of the lower triangle of the tangent (what
    np.linalg.cholesky reads)."""
    low = _cholesky(args[0])
    back = _inverse(low)
    return low @ _lower_half(back @ _symmetric_of_lower(dargs[0]) @ np_.transpose(back))


def _cholesky_transpose(args, g, ranks, axis):
    """S = L⁻ᵀ Φ(Lᵀ g) L⁻¹ is the cotangent of the symmetric matrix."""
    low = _cholesky(args[0])
    back = _inverse(low)
    return _of_lower_triangle(np_.transpose(back) @ _lower_half(np_.transpose(low) @ g) @ back), "exact"


def _of_lower_triangle(s):
    """The cotangent of a matrix whose lower triangle alone is read as a symmetric one, from `s`, that of the
    symmetric matrix: S + Sᵀ below the diagonal, S on it, 0 above."""
    return np_.tril(s + np_.transpose(s)) - np_.diag(np_.diag(s))


def _symmetric_of_lower(da):
    """The symmetric matrix the lower triangle of `da` stands for (what eigh and cholesky read)."""
    return np_.tril(da) + np_.transpose(np_.tril(da, -1))


def _eigenvectors(a):
    return Call("srcad.eigenvectors", (a,))


def _eigen_gaps(a, values="np.linalg.eigvalsh"):
    """F[i, j] = 1 / (w[j] - w[i]) off the diagonal, 0 on it (w the eigenvalues of `a`, by `values`)."""
    w = Call(values, (a,))
    one = _eye_like(a, 0)
    return Const(1) / (np_.expand_dims(w, 0) - np_.expand_dims(w, 1) + one) - one


def _eigenvalues_tangent(args, dargs, ranks, axis):
    """dw = diag(Vᵀ dA V)."""
    v = _eigenvectors(args[0])
    return np_.diag(np_.transpose(v) @ _symmetric_of_lower(dargs[0]) @ v)


def _eigenvalues_transpose(args, g, ranks, axis):
    v = _eigenvectors(args[0])
    return _of_lower_triangle(v @ np_.diag(g) @ np_.transpose(v)), "exact"


def _eigenvectors_tangent(args, dargs, ranks, axis):
    """dV = V (F ∘ (Vᵀ dA V))."""
    v = _eigenvectors(args[0])
    return v @ (_eigen_gaps(args[0]) * (np_.transpose(v) @ _symmetric_of_lower(dargs[0]) @ v))


def _eigenvectors_transpose(args, g, ranks, axis):
    v = _eigenvectors(args[0])
    return _of_lower_triangle(v @ (_eigen_gaps(args[0]) * (np_.transpose(v) @ g)) @ np_.transpose(v)), "exact"


def _right_eigenvectors(a):
    return Call("srcad.right_eigenvectors", (a,))


def _unit_columns(v, x):
    """X - V diag(diag(VᵀX)): what keeps V's columns of unit length (it is its own transpose)."""
    return x - v * np_.expand_dims(Call("np.sum", (v * x,), (("axis", Const(0)),)), 0)


def _general_eigenvalues_tangent(args, dargs, ranks, axis):
    """dw = diag(V⁻¹ dA V) (real eigenvalues, as Numba's np.linalg.eig of a real matrix gives them)."""
    v = _right_eigenvectors(args[0])
    return np_.diag(_inverse(v) @ dargs[0] @ v)


def _general_eigenvalues_transpose(args, g, ranks, axis):
    v = _right_eigenvectors(args[0])
    return (np_.transpose(_inverse(v)) * np_.expand_dims(g, 0)) @ np_.transpose(v), "exact"


def _general_eigenvectors_tangent(args, dargs, ranks, axis):
    """dV = V (F ∘ (V⁻¹ dA V)), each column then kept of unit length."""
    v = _right_eigenvectors(args[0])
    gaps = _eigen_gaps(args[0], "srcad.real_eigenvalues")
    return _unit_columns(v, v @ (gaps * (_inverse(v) @ dargs[0] @ v)))


def _general_eigenvectors_transpose(args, g, ranks, axis):
    v = _right_eigenvectors(args[0])
    gaps = _eigen_gaps(args[0], "srcad.real_eigenvalues")
    return np_.transpose(_inverse(v)) @ (gaps * (np_.transpose(v) @ _unit_columns(v, g))) @ np_.transpose(v), "exact"


def _singular_parts(a, g):
    """The columns of U and rows of Vh that go with the singular values (as many as `g` has)."""
    k = _extent(g, 0)
    u = Subscript(Call("srcad.left_singular_vectors", (a,)), (Slice(), Slice(None, k)))
    vh = Subscript(Call("srcad.right_singular_vectors", (a,)), (Slice(None, k), Slice()))
    return u, vh


def _singular_values_tangent(args, dargs, ranks, axis):
    """ds_i = u_iᵀ dA v_i."""
    u, vh = _singular_parts(args[0], Call("srcad.singular_values", (args[0],)))
    return np_.diag(np_.transpose(u) @ dargs[0] @ np_.transpose(vh))


def _singular_values_transpose(args, g, ranks, axis):
    """Ā = U diag(g) Vh over the singular values' columns and rows."""
    u, vh = _singular_parts(args[0], g)
    return (u * np_.expand_dims(g, 0)) @ vh, "exact"


def _pinv_tangent_of(a, p, da):
    """dA⁺ = -A⁺ dA A⁺ + A⁺A⁺ᵀ dAᵀ (I - AA⁺) + (I - A⁺A) dAᵀ A⁺ᵀA⁺, where the rank is constant."""
    pt, dat = np_.transpose(p), np_.transpose(da)
    return (-(p @ da @ p) + p @ pt @ dat @ (_eye_like(a, 0) - a @ p)
            + (_eye_like(a, 1) - p @ a) @ dat @ pt @ p)


def _pinv_transpose_of(a, p, g):
    """Ā = -A⁺ᵀ G A⁺ᵀ + (I - AA⁺) Gᵀ A⁺A⁺ᵀ + A⁺ᵀA⁺ Gᵀ (I - A⁺A), the transpose of `_pinv_tangent_of`."""
    pt, gt = np_.transpose(p), np_.transpose(g)
    return (-(pt @ g @ pt) + (_eye_like(a, 0) - a @ p) @ gt @ p @ pt
            + pt @ p @ gt @ (_eye_like(a, 1) - p @ a))


def _pinv(args):
    return Call("np.linalg.pinv", tuple(args))


def _least_squares_tangent(args, dargs, ranks, axis):
    """x = A⁺b: dx = dA⁺ b + A⁺ db."""
    a, b = args[:2]
    da, db = dargs[:2]
    if da is None and db is None:
        return None
    p = _pinv((a,))
    return _sum_of((_pinv_tangent_of(a, p, da) @ b if da is not None else None,
                    p @ db if db is not None else None))


def _least_squares_transposes():
    def of_a(args, g, ranks, axis):
        a, b = args[:2]
        return _pinv_transpose_of(a, _pinv((a,)), np_.outer(g, b) if ranks[1] == 1 else g @ np_.transpose(b)), "exact"

    def of_b(args, g, ranks, axis):
        return np_.transpose(_pinv((args[0],))) @ g, "exact"
    return of_a, of_b


def _qr_blocks(a):
    """Q, R and the square R₁ = R[:, :k] (k = min(m, n)) of A's reduced QR, and A's columns past k."""
    q, r = Call("srcad.qr_q", (a,)), Call("srcad.qr_r", (a,))
    k = _extent(r, 0)
    return q, r, Subscript(r, (Slice(), Slice(None, k))), Subscript(a, (Slice(), Slice(k, None))), k


def _upper_of(x):
    """triu(X) + tril(X, -1)ᵀ: with X = Qᵀ dA₁ R₁⁻¹, the upper triangular dR₁ R₁⁻¹."""
    return np_.triu(x) + np_.transpose(np_.tril(x, -1))


def _qr_tangents(a, da):
    """dQ and dR of A = Q [R₁ R₂] (A₁ = QR₁, R₂ = QᵀA₂): with X = Qᵀ dA₁ R₁⁻¹ and U = triu(X) + tril(X,-1)ᵀ,
    dR₁ = U R₁, dQ = dA₁ R₁⁻¹ - Q U, dR₂ = dQᵀ A₂ + Qᵀ dA₂."""
    q, r, r1, a2, k = _qr_blocks(a)
    back = _inverse(r1)
    da1, da2 = Subscript(da, (Slice(), Slice(None, k))), Subscript(da, (Slice(), Slice(k, None)))
    up = _upper_of(np_.transpose(q) @ da1 @ back)
    dq = da1 @ back - q @ up
    return dq, Call("np.hstack", (Tuple((up @ r1, np_.transpose(dq) @ a2 + np_.transpose(q) @ da2)),))


def _qr_adjoint(a, gq, gr):
    """Ā from the cotangents of Q and R (None: zero): with Ḡ = gQ + A₂ gR₂ᵀ and M = R₁ gR₁ᵀ - ḠᵀQ,
    Ā₁ = (Ḡ + Q sym(M)) R₁⁻ᵀ, Ā₂ = Q gR₂, sym(M) the symmetric matrix of M's lower triangle."""
    q, r, r1, a2, k = _qr_blocks(a)
    gbar = gq if gr is None else a2 @ np_.transpose(Subscript(gr, (Slice(), Slice(k, None))))
    m = -(np_.transpose(gbar) @ q)
    if gr is not None:
        m = r1 @ np_.transpose(Subscript(gr, (Slice(), Slice(None, k)))) + m
    a1 = (gbar + q @ _symmetric_of_lower(m)) @ np_.transpose(_inverse(r1))
    a2bar = np_.zeros_like(a2) if gr is None else q @ Subscript(gr, (Slice(), Slice(k, None)))
    return Call("np.hstack", (Tuple((a1, a2bar)),)), "exact"


_QR_Q = ArrayRule(lambda args, dargs, ranks, axis: _qr_tangents(args[0], dargs[0])[0],
                  (lambda args, g, ranks, axis: _qr_adjoint(args[0], g, None),))
_QR_R = ArrayRule(lambda args, dargs, ranks, axis: _qr_tangents(args[0], dargs[0])[1],
                  (lambda args, g, ranks, axis: _qr_adjoint(args[0], None, g),))


def _diff_rule(fn, back):
    """np.diff of a vector and its transpose `srcad.undiff`: linear maps, each the other's transpose."""
    return ArrayRule(lambda args, dargs, ranks, axis: Call(fn, (dargs[0],)) if len(args) == 1 and ranks[0] == 1
                     else None,
                     (lambda args, g, ranks, axis: (Call(back, (g,)), "exact") if len(args) == 1 and ranks[0] == 1
                      else None,))


def _flip(fn):
    """np.flip (of every axis), np.fliplr, np.flipud: a permutation, its own transpose."""
    return ArrayRule(lambda args, dargs, ranks, axis: Call(fn, (dargs[0],)) if len(args) == 1 else None,
                     (lambda args, g, ranks, axis: (Call(fn, (g,)), "exact") if len(args) == 1 else None,))


_MATMUL = ArrayRule(_matmul_tangent, (_matmul_transpose(0), _matmul_transpose(1)))

def _list_room_tangent(args, dargs, ranks, axis):
    return None if dargs[0] is None else srcad.list_room(dargs[0], args[1])


def _list_room_transpose(args, g, ranks, axis):
    """Back to the storage before it grew: the first items of the grown one."""
    return Subscript(g, (Slice(None, Subscript(Attribute(args[0], "shape"), (Const(0),))),)), "exact"


ARRAY_RULES = {
    "np.sum": ArrayRule(_sum_tangent, (_sum_transpose,)),
    "srcad.list_room": ArrayRule(_list_room_tangent, (_list_room_transpose, None)),
    "srcad.list_rows_room": ArrayRule(
        lambda args, dargs, ranks, axis: None if dargs[0] is None else srcad.list_rows_room(dargs[0], *args[1:]),
        (lambda args, g, ranks, axis: (srcad.list_rows_back(g, args[0]), "exact"), None, None)),
    "srcad.list_rows_back": ArrayRule(
        lambda args, dargs, ranks, axis: None if dargs[0] is None else srcad.list_rows_back(dargs[0], args[1]),
        (lambda args, h, ranks, axis: (srcad.list_rows_pad(h, args[0]), "exact"), None)),
    "srcad.list_rows_pad": ArrayRule(
        lambda args, dargs, ranks, axis: None if dargs[0] is None else srcad.list_rows_pad(dargs[0], args[1]),
        (lambda args, k, ranks, axis: (srcad.list_rows_back(k, args[0]), "exact"), None)),
    "np.mean": ArrayRule(_mean_tangent, (_mean_transpose,)),
    "np.dot": _MATMUL,
    "np.matmul": _MATMUL,
    "@": _MATMUL,
    "np.max": _extremum("np.max"),
    "np.amax": _extremum("np.max"),
    "np.min": _extremum("np.min"),
    "np.amin": _extremum("np.min"),
    "srcad.max_along": _extremum_along("srcad.max_along"),
    "srcad.min_along": _extremum_along("srcad.min_along"),
    "np.linalg.norm": ArrayRule(_norm_tangent, (_norm_transpose,), _euclidean),
    "np.kron": ArrayRule(_kron_tangent, (lambda args, g, ranks, axis: _kron_transpose(g, args, ranks, 0),
                                         lambda args, g, ranks, axis: _kron_transpose(g, args, ranks, 1))),
    "np.outer": ArrayRule(_outer_tangent, (lambda args, g, ranks, axis: _outer_transpose(g, args, ranks, 0),
                                           lambda args, g, ranks, axis: _outer_transpose(np_.transpose(g), args,
                                                                                         ranks, 1))),
    "np.full": _fill_rule("np.full"),
    "np.full_like": _fill_rule("np.full_like"),
    "np.linspace": ArrayRule(_linspace_tangent,
                             (lambda args, g, ranks, axis: (np_.sum(g * (1.0 - _linspace_weights(args))), "exact"),
                              lambda args, g, ranks, axis: (np_.sum(g * _linspace_weights(args)), "exact"))),
    "np.transpose": ArrayRule(lambda args, dargs, ranks, axis: _permuted(dargs[0], args, False),
                              (lambda args, g, ranks, axis: _exact(_permuted(g, args, True)),)),
    "np.reshape": ArrayRule(lambda args, dargs, ranks, axis: Call("np.reshape", (dargs[0], args[1])),
                            (lambda args, g, ranks, axis: (_shaped_like(g, args[0]), "exact"),)),
    "np.ravel": ArrayRule(lambda args, dargs, ranks, axis: np_.ravel(dargs[0]),
                          (lambda args, g, ranks, axis: (_shaped_like(g, args[0]), "exact"),)),
    "np.cumsum": ArrayRule(lambda args, dargs, ranks, axis: None if axis is not None else np_.cumsum(dargs[0]),
                           (_whole(lambda args, g, ranks: (_shaped_like(Subscript(np_.cumsum(
                               Subscript(g, (Slice(step=Const(-1)),))), (Slice(step=Const(-1)),)), args[0]),
                               "exact")),)),
    "np.prod": ArrayRule(lambda args, dargs, ranks, axis: None if axis is not None else
                         np_.sum(dargs[0] * srcad.prod_slopes(args[0])),
                         (_whole(lambda args, g, ranks: (g * srcad.prod_slopes(args[0]), "exact")),)),
    "srcad.prod_slopes": ArrayRule(lambda args, dargs, ranks, axis: srcad.prod_slopes_times(args[0], dargs[0]),
                                   (lambda args, g, ranks, axis: (srcad.prod_slopes_times(args[0], g), "exact"),)),
    "np.var": ArrayRule(lambda args, dargs, ranks, axis: None if axis is not None else
                        2.0 * np_.mean(_centered(args) * dargs[0]),
                        (_whole(lambda args, g, ranks: (g * 2.0 * _centered(args) / np_.size(args[0]), "exact")),)),
    "np.std": ArrayRule(lambda args, dargs, ranks, axis: None if axis is not None else
                        np_.mean(_centered(args) * dargs[0]) / np_.std(args[0]),
                        (_whole(lambda args, g, ranks: (g * _centered(args) / (np_.size(args[0]) * np_.std(args[0])),
                                                        "exact")),)),
    "np.nansum": _over_whole(lambda x, dx: np_.sum(dx * _kept(x)), lambda x, g: g * _kept(x)),
    "np.nanmean": _over_whole(lambda x, dx: np_.sum(dx * _kept(x)) / np_.sum(_kept(x)),
                              lambda x, g: g * _kept(x) / np_.sum(_kept(x))),
    "np.nanmax": _nan_extremum("np.nanmax"),
    "np.nanmin": _nan_extremum("np.nanmin"),
    "np.nanvar": _over_whole(lambda x, dx: 2.0 * np_.sum(_nan_centered(x) * dx) / np_.sum(_kept(x)),
                             lambda x, g: g * 2.0 * _nan_centered(x) / np_.sum(_kept(x))),
    "np.nanstd": _over_whole(lambda x, dx: np_.sum(_nan_centered(x) * dx) / (np_.sum(_kept(x)) * np_.nanstd(x)),
                             lambda x, g: g * _nan_centered(x) / (np_.sum(_kept(x)) * np_.nanstd(x))),
    "np.median": _median(False),
    "np.nanmedian": _median(True),
    "np.linalg.det": ArrayRule(lambda args, dargs, ranks, axis: _det(args) * np_.sum(_cofactor_ratio(args) * dargs[0]),
                               (lambda args, g, ranks, axis: (g * _det(args) * _cofactor_ratio(args), "exact"),)),
    "np.linalg.inv": ArrayRule(lambda args, dargs, ranks, axis: -(_inverse(args[0]) @ dargs[0] @ _inverse(args[0])),
                               (lambda args, g, ranks, axis: (-(np_.transpose(_inverse(args[0])) @ g @
                                                                np_.transpose(_inverse(args[0]))), "exact"),)),
    "np.linalg.solve": ArrayRule(_solve_tangent, (_solve_transpose(0), _solve_transpose(1))),
    "np.linalg.cholesky": ArrayRule(_cholesky_tangent, (_cholesky_transpose,)),
    "np.linalg.eigvalsh": ArrayRule(_eigenvalues_tangent, (_eigenvalues_transpose,)),
    "srcad.eigenvectors": ArrayRule(_eigenvectors_tangent, (_eigenvectors_transpose,)),
    "srcad.singular_values": ArrayRule(_singular_values_tangent, (_singular_values_transpose,)),
    "np.linalg.pinv": ArrayRule(lambda args, dargs, ranks, axis: None if dargs[0] is None else
                                _pinv_tangent_of(args[0], _pinv(args), dargs[0]),
                                (lambda args, g, ranks, axis: (_pinv_transpose_of(args[0], _pinv(args), g), "exact"),)),
    "np.cross": ArrayRule(lambda args, dargs, ranks, axis: _sum_of(
        (np_.cross(dargs[0], args[1]) if dargs[0] is not None else None,
         np_.cross(args[0], dargs[1]) if dargs[1] is not None else None)),
        (lambda args, g, ranks, axis: (np_.cross(args[1], g), "reduce"),       # <g, a × b> = <a, b × g>
         lambda args, g, ranks, axis: (np_.cross(g, args[0]), "reduce"))),     # = <b, g × a>
    "srcad.real_eigenvalues": ArrayRule(_general_eigenvalues_tangent, (_general_eigenvalues_transpose,)),
    "srcad.right_eigenvectors": ArrayRule(_general_eigenvectors_tangent, (_general_eigenvectors_transpose,)),
    "srcad.least_squares": ArrayRule(_least_squares_tangent, _least_squares_transposes()),
    "srcad.qr_q": _QR_Q,
    "srcad.qr_r": _QR_R,
    "srcad.least_squares_singular_values": ArrayRule(_singular_values_tangent, (_singular_values_transpose,)),
    "srcad.log_abs_det": ArrayRule(lambda args, dargs, ranks, axis: np_.sum(_cofactor_ratio(args) * dargs[0]),
                                   (lambda args, g, ranks, axis: (g * _cofactor_ratio(args), "exact"),)),
    "np.vdot": ArrayRule(lambda args, dargs, ranks, axis: _sum_of(
        (np_.vdot(dargs[0], args[1]) if dargs[0] is not None else None,
         np_.vdot(args[0], dargs[1]) if dargs[1] is not None else None)),
        (lambda args, g, ranks, axis: (g * args[1], "exact") if ranks[0] == ranks[1] else None,
         lambda args, g, ranks, axis: (g * args[0], "exact") if ranks[0] == ranks[1] else None)),
    "np.diff": _diff_rule("np.diff", "srcad.undiff"),
    "srcad.undiff": _diff_rule("srcad.undiff", "np.diff"),
    "np.atleast_1d": ArrayRule(lambda args, dargs, ranks, axis: np_.atleast_1d(dargs[0]),
                               (lambda args, g, ranks, axis: (_shaped_like(g, args[0]), "exact"),)),
    "np.atleast_2d": ArrayRule(lambda args, dargs, ranks, axis: np_.atleast_2d(dargs[0]),
                               (lambda args, g, ranks, axis: (_shaped_like(g, args[0]), "exact"),)),
    "np.atleast_3d": ArrayRule(lambda args, dargs, ranks, axis: np_.atleast_3d(dargs[0]),
                               (lambda args, g, ranks, axis: (_shaped_like(g, args[0]), "exact"),)),
    "np.tril": ArrayRule(lambda args, dargs, ranks, axis: Call("np.tril", (dargs[0],) + tuple(args[1:])),
                         (lambda args, g, ranks, axis: (Call("np.tril", (g,) + tuple(args[1:])), "exact"),)),
    "np.triu": ArrayRule(lambda args, dargs, ranks, axis: Call("np.triu", (dargs[0],) + tuple(args[1:])),
                         (lambda args, g, ranks, axis: (Call("np.triu", (g,) + tuple(args[1:])), "exact"),)),
    "np.flip": _flip("np.flip"),
    "np.fliplr": _flip("np.fliplr"),
    "np.flipud": _flip("np.flipud"),
    "np.trace": ArrayRule(lambda args, dargs, ranks, axis: None if len(args) > 1 else np_.trace(dargs[0]),
                          (lambda args, g, ranks, axis: None if len(args) > 1 else (g * np_.eye(
                              _extent(args[0], 0), _extent(args[0], 1)), "exact"),)),
    "np.diag": ArrayRule(lambda args, dargs, ranks, axis: None if len(args) > 1 else np_.diag(dargs[0]),
                         (lambda args, g, ranks, axis: None if len(args) > 1 else
                          (np_.diag(g) if ranks[0] == 1 else srcad.diag_like(g, args[0]), "exact"),)),
    "np.sort": ArrayRule(lambda args, dargs, ranks, axis: None if axis is not None or ranks[0] != 1 else
                         Subscript(dargs[0], (Call("np.argsort", (args[0],)),)),
                         (lambda args, g, ranks, axis: None if axis is not None or ranks[0] != 1 else
                          (srcad.unsort(g, args[0]), "exact"),)),
    "srcad.unsort": ArrayRule(lambda args, dargs, ranks, axis: srcad.unsort(dargs[0], args[1]),
                              (lambda args, g, ranks, axis: (Subscript(g, (Call("np.argsort", (args[1],)),)),
                                                             "exact"),)),
    "srcad.diag_like": ArrayRule(lambda args, dargs, ranks, axis: srcad.diag_like(dargs[0], args[1]),
                                 (lambda args, g, ranks, axis: (np_.diag(g), "exact"),)),
    # np.tile, which srcad's runtime supplies (Numba has none), and its adjoint and transpose
    "srcad.tile": ArrayRule(lambda args, dargs, ranks, axis: srcad.tile(dargs[0], args[1]),
                            (lambda args, g, ranks, axis: (srcad.untile(g, args[0]), "exact"),)),
    "srcad.untile": ArrayRule(lambda args, dargs, ranks, axis: srcad.untile(dargs[0], args[1]),
                              (lambda args, g, ranks, axis: (srcad.tile_like(g, args[0]), "exact"),)),
    "srcad.tile_like": ArrayRule(lambda args, dargs, ranks, axis: srcad.tile_like(dargs[0], args[1]),
                                 (lambda args, g, ranks, axis: (srcad.untile(g, args[0]), "exact"),)),
    # what the rules above generate, so that their adjoints can be differentiated again
    "np.expand_dims": ArrayRule(lambda args, dargs, ranks, axis: np_.expand_dims(dargs[0], _expanded_axis(args, axis)),
                                (lambda args, g, ranks, axis: (Call("np.sum", (g,), (
                                    ("axis", _expanded_axis(args, axis)),)), "exact"),)),
}


# ---- functions of a tuple of arrays: the transpose for each array --------------------------------

@dataclass(frozen=True)
class JoinRule:
    """np.concatenate((a, b, ...)) and the like: linear in each array of the tuple."""
    tangent: object          # (items, ditems, ranks, axis) -> tangent expression (None where a ditem is absent)
    transpose: object        # (items, k, g, ranks, axis) -> (adjoint expression of items[k], mode)


def _join_tangent(fn):
    def tangent(items, ditems, ranks, axis):
        parts = tuple(d if d is not None else np_.zeros_like(x) for x, d in zip(items, ditems))
        return Call(fn, (Tuple(parts),), _axis_keywords(axis))
    return tangent


def _joined(items, k, g, ranks, axis, width, lead):
    """The part of `g` that items[k] filled, joined along `axis` after the items before it: `width(item,
    rank)` is an item's extent along that axis (None: it adds an axis of its own there, taken by an
    index), `lead(rank)` the index of `g` before that axis."""
    start = None
    for item, r in zip(items[:k], ranks[:k]):
        w = width(item, r)
        w = Const(1) if w is None else w
        start = w if start is None else start + w
    size = width(items[k], ranks[k])
    part = (start or Const(0)) if size is None else Slice(start, size if start is None else start + size)
    return Subscript(g, lead(ranks[k]) + (part,)), "exact"


def _concatenate_transpose(items, k, g, ranks, axis):
    """np.concatenate: a slice along the axis."""
    a = (axis or 0) % ranks[0]
    return _joined(items, k, g, ranks, axis, lambda x, r: Subscript(Attribute(x, "shape"), (Const(a),)),
                   lambda r: (Slice(),) * a)


def _hstack_transpose(items, k, g, ranks, axis):
    """np.hstack: along the first axis of 1-d arrays, the second of others."""
    a = 0 if ranks[0] == 1 else 1
    return _joined(items, k, g, ranks, axis, lambda x, r: Subscript(Attribute(x, "shape"), (Const(a),)),
                   lambda r: (Slice(),) * a)


def _column_stack_transpose(items, k, g, ranks, axis):
    """np.column_stack: 1-d arrays are columns, 2-d ones blocks of columns."""
    return _joined(items, k, g, ranks, axis,
                   lambda x, r: Subscript(Attribute(x, "shape"), (Const(1),)) if r == 2 else None,
                   lambda r: (Slice(),))


def _dstack_transpose(items, k, g, ranks, axis):
    """np.dstack: along the third axis, each array made 3-d first ((n,) -> (1, n, 1), (m, n) -> (m, n, 1))."""
    return _joined(items, k, g, ranks, axis,
                   lambda x, r: Subscript(Attribute(x, "shape"), (Const(2),)) if r == 3 else None,
                   lambda r: (Const(0), Slice()) if r == 1 else (Slice(), Slice()))


def _stack_transpose(items, k, g, ranks, axis):
    """The k-th entry of `g` along the new axis."""
    a = (axis or 0) % (ranks[0] + 1)
    return Subscript(g, (Slice(),) * a + (Const(k),)), "exact"


def _asarray_tangent(items, ditems, ranks, axis):
    return Call("np.asarray", (Tuple(tuple(d if d is not None else np_.zeros_like(x) if r else Const(0.0)
                                          for x, d, r in zip(items, ditems, ranks))),))


JOINS = {"np.concatenate": JoinRule(_join_tangent("np.concatenate"), _concatenate_transpose),
         "np.stack": JoinRule(_join_tangent("np.stack"), _stack_transpose),
         "np.hstack": JoinRule(_join_tangent("np.hstack"), _hstack_transpose),
         "np.column_stack": JoinRule(_join_tangent("np.column_stack"), _column_stack_transpose),
         "np.dstack": JoinRule(_join_tangent("np.dstack"), _dstack_transpose),
         "np.asarray": JoinRule(_asarray_tangent, _stack_transpose),      # of a tuple: stacked on a new first axis
         "np.array": JoinRule(_asarray_tangent, _stack_transpose)}


# ---- lookups ------------------------------------------------------------------------------------

def is_elementwise(fn):
    return fn in ELEMENTWISE


def has_rule(fn):
    return fn in ELEMENTWISE or fn in ARRAY_RULES or fn in JOINS or fn in NONDIFF


def instantiate(expr, module):
    """A rule's expression with `M.` calls bound to `module` ("math" or "np")."""
    def bind(e):
        if isinstance(e, Call) and e.fn.startswith("M."):
            return Call(f"{module}.{e.fn[2:]}", e.args, e.keywords)
        return e
    return rebuild(expr, bind)


def partials_of(node):
    """(operands, partial rules) of a tree node: a BinOp, a UnaryOp or an elementwise call."""
    if isinstance(node, BinOp):
        if node.op == "**" and isinstance(node.right, Const) and isinstance(node.right.value, (int, float)):
            return [node.left, node.right], (power_partial(node.right.value), None)
        return [node.left, node.right], OPERATORS[node.op]
    if isinstance(node, UnaryOp):
        return [node.operand], OPERATORS["u" + node.op]
    return list(node.args), ELEMENTWISE[node.fn]


__all__ = ["ELEMENTWISE", "FROM_RESULT", "has_result_partial", "result_partial", "OPERATORS", "NONDIFF", "ARRAY_RULES", "ArrayRule", "JOINS", "JoinRule", "elementwise", "is_elementwise",
           "has_rule", "instantiate", "partials_of", "power_partial"]
