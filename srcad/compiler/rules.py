"""The one table of derivative rules.

Elementwise functions and operators are one line each: the partial
derivative with respect to each argument, as a source template in the
argument names a, b, c (`None`: not differentiable in that argument).
`M` stands for `math` for float64 scalars and `np` otherwise. The reverse
sweep emits `d_a += d_y * <partial>`, summing over broadcast axes.

Whole-array functions (reductions, products, transposes) have small rules
that return (argument index, adjoint expression, how to accumulate) triples;
"exact" means the expression already has the argument's shape, "expand"
that it broadcasts up to it, "reduce" that it must be summed over the axes
along which the argument was broadcast.
"""

_UNARY = {
    "sin": "M.cos(a)",
    "cos": "-M.sin(a)",
    "tan": "1.0 + M.tan(a) ** 2",
    "exp": "M.exp(a)",
    "expm1": "M.exp(a)",
    "exp2": "0.6931471805599453 * M.exp2(a)",
    "log": "1.0 / a",
    "log1p": "1.0 / (1.0 + a)",
    "log2": "1.4426950408889634 / a",
    "log10": "0.4342944819032518 / a",
    "sqrt": "0.5 / M.sqrt(a)",
    "cbrt": "1.0 / (3.0 * np.cbrt(a) ** 2)",
    "tanh": "1.0 - M.tanh(a) ** 2",
    "sinh": "M.cosh(a)",
    "cosh": "M.sinh(a)",
    "arcsin": "1.0 / M.sqrt(1.0 - a * a)",
    "asin": "1.0 / M.sqrt(1.0 - a * a)",
    "arccos": "-1.0 / M.sqrt(1.0 - a * a)",
    "acos": "-1.0 / M.sqrt(1.0 - a * a)",
    "arctan": "1.0 / (1.0 + a * a)",
    "atan": "1.0 / (1.0 + a * a)",
    "arcsinh": "1.0 / M.sqrt(a * a + 1.0)",
    "asinh": "1.0 / M.sqrt(a * a + 1.0)",
    "arccosh": "1.0 / M.sqrt(a * a - 1.0)",
    "acosh": "1.0 / M.sqrt(a * a - 1.0)",
    "arctanh": "1.0 / (1.0 - a * a)",
    "atanh": "1.0 / (1.0 - a * a)",
    "erf": "1.1283791670955126 * M.exp(-a * a)",
    "erfc": "-1.1283791670955126 * M.exp(-a * a)",
    "abs": "np.sign(a)",
    "fabs": "np.sign(a)",
    "absolute": "np.sign(a)",
    "square": "2.0 * a",
    "reciprocal": "-1.0 / (a * a)",
    "deg2rad": "0.017453292519943295",
    "radians": "0.017453292519943295",
    "rad2deg": "57.29577951308232",
    "degrees": "57.29577951308232",
    "negative": "-1.0",
    "positive": "1.0",
    "copy": "1.0",
    "float": "1.0",
    "float64": "1.0",
    "float32": "1.0",
    "asarray": "1.0",
    "ascontiguousarray": "1.0",
}

_BINARY = {
    "pow": ("power_slope(a, b)", "log_or_zero(a) * a ** b"),
    "power": ("power_slope(a, b)", "log_or_zero(a) * a ** b"),
    "atan2": ("b / (a * a + b * b)", "-a / (a * a + b * b)"),
    "arctan2": ("b / (a * a + b * b)", "-a / (a * a + b * b)"),
    "hypot": ("a / M.hypot(a, b)", "b / M.hypot(a, b)"),
    "logaddexp": ("1.0 / (1.0 + np.exp(b - a))", "1.0 / (1.0 + np.exp(a - b))"),
    "logaddexp2": ("1.0 / (1.0 + np.exp2(b - a))", "1.0 / (1.0 + np.exp2(a - b))"),
    "maximum": ("(a >= b)", "(a < b)"),
    "fmax": ("(a >= b)", "(a < b)"),
    "minimum": ("(a <= b)", "(a > b)"),
    "fmin": ("(a <= b)", "(a > b)"),
    "add": ("1.0", "1.0"),
    "subtract": ("1.0", "-1.0"),
    "multiply": ("b", "a"),
    "divide": ("1.0 / b", "-a / (b * b)"),
    "true_divide": ("1.0 / b", "-a / (b * b)"),
    "copysign": ("np.sign(a) * np.sign(b)", None),
    "clip": ("((a >= b) & (a <= c))", "(a < b)", "(a > c)"),
}

# Python operators, keyed by the ast class name.
OPERATORS = {
    "Add": ("1", "1"),
    "Sub": ("1", "-1"),
    "Mult": ("b", "a"),
    "Div": ("1.0 / b", "-a / (b * b)"),
    "Pow": ("power_slope(a, b)", "log_or_zero(a) * a ** b"),
    "Mod": ("1", "-np.floor(a / b)"),
    "USub": ("-1",),
    "UAdd": ("1",),
}

# Elementwise calls: canonical name -> partial per argument.
ELEMENTWISE = {}
for _name, _partial in _UNARY.items():
    ELEMENTWISE[f"np.{_name}"] = (_partial,)
    ELEMENTWISE[f"math.{_name}"] = (_partial,)
for _name, _partials in _BINARY.items():
    ELEMENTWISE[f"np.{_name}"] = _partials
    ELEMENTWISE[f"math.{_name}"] = _partials
ELEMENTWISE.update({"abs": (_UNARY["abs"],), "float": ("1.0",), "min": _BINARY["minimum"],
                    "max": _BINARY["maximum"]})
ELEMENTWISE["np.where"] = (None, "np.where(a, 1.0, 0.0)", "np.where(a, 0.0, 1.0)")

# Calls whose result never carries a derivative.
NONDIFF = {
    "np.zeros", "np.ones", "np.empty", "np.zeros_like", "np.ones_like", "np.empty_like", "np.full",
    "np.arange", "np.linspace", "np.eye", "np.identity", "len", "int", "round", "bool",
    "math.floor", "math.ceil", "math.trunc", "np.floor", "np.ceil", "np.trunc", "np.round",
    "np.rint", "np.sign", "np.argmax", "np.argmin", "np.isnan", "np.isinf", "np.isfinite",
    "math.isnan", "math.isinf", "math.isfinite", "np.floor_divide", "np.logical_and",
    "np.logical_or", "np.logical_not", "np.greater", "np.less", "np.equal", "np.shape",
    "np.ndim", "np.size", "np.argsort", "np.full_like", "np.heaviside", "math.factorial",
    "np.int64", "np.int32", "np.bool_",
}


def _matmul(ranks, axis=None):
    ra, rb = ranks[0], ranks[1]
    if (ra, rb) == (2, 2):
        return [(0, "g @ np.transpose(b)", "exact"), (1, "np.transpose(a) @ g", "exact")]
    if (ra, rb) == (2, 1):
        return [(0, "np.outer(g, b)", "exact"), (1, "np.transpose(a) @ g", "exact")]
    if (ra, rb) == (1, 2):
        return [(0, "b @ g", "exact"), (1, "np.outer(a, g)", "exact")]
    if (ra, rb) == (1, 1):
        return [(0, "g * b", "exact"), (1, "g * a", "exact")]
    if ra == 0 or rb == 0:
        return [(0, "g * b", "reduce"), (1, "g * a", "reduce")]
    return None


def _sum(ranks, axis=None):
    if axis is None:
        return [(0, "g", "expand")]
    return [(0, f"np.expand_dims(g, {axis})", "expand")]


def _mean(ranks, axis=None):
    if axis is None:
        return [(0, "g / a.size", "expand")]
    return [(0, f"np.expand_dims(g, {axis}) / a.shape[{axis}]", "expand")]


def _extremum(fn):
    """np.max / np.min: the adjoint is split equally among tied extrema (TensorFlow's rule, and the
    eager table's)."""
    def rule(ranks, axis=None):
        if axis is not None:
            return None
        return [(0, f"g * (a == np.{fn}(a)) / np.sum(a == np.{fn}(a))", "exact")]
    return rule


def _norm(ranks, axis=None):
    if axis is not None:
        return None
    return [(0, "g * a / np.linalg.norm(a)", "exact")]


def _outer(ranks, axis=None):
    return [(0, "g @ b", "exact"), (1, "np.transpose(g) @ a", "exact")]


def _transpose(ranks, axis=None):
    return [(0, "np.transpose(g)", "exact")]


# Whole-array calls: canonical name -> rule(ranks of args, axis) -> triples.
ARRAY_RULES = {
    "np.sum": _sum,
    "np.mean": _mean,
    "np.dot": _matmul,
    "MatMult": _matmul,
    "np.matmul": _matmul,
    "np.max": _extremum("max"),
    "np.amax": _extremum("max"),
    "np.min": _extremum("min"),
    "np.amin": _extremum("min"),
    "np.linalg.norm": _norm,
    "np.outer": _outer,
    "np.transpose": _transpose,
}
