"""Source, AST and name resolution for the functions the compiler follows.

The fence lives here too: every construct outside the supported subset is
refused with a TransformError naming the function, file, line and construct,
plus a hint, before any code is generated.
"""
import ast
import builtins
import inspect
import math
import textwrap
from dataclasses import dataclass, field

import numba
import numpy as np

from ...source import StaleSourceError, capture_source
from ..errors import TransformError, refuse
from ..runtime import threads_between_barriers
from ..ir import Origin


@dataclass
class FuncInfo:
    """A parsed user function and what its free names refer to."""
    pyfunc: object
    name: str
    filename: str
    first_line: int
    lines: list
    tree: ast.FunctionDef
    namespace: dict = field(default_factory=dict)
    helper: bool = False              # followed from a call, not the decorated function

    def origin(self, node):
        """The IR origin of an AST node of this function: its file line and text."""
        i = getattr(node, "lineno", 1) - 1
        text = self.lines[i].strip() if 0 <= i < len(self.lines) else ""
        return Origin(self.name, self.filename, self.first_line + i, text, self.helper)

    def error(self, node, construct, hint):
        return refuse(self.origin(node), construct, hint)


def unwrap(obj):
    """The plain Python function behind an ad.function or Numba dispatcher."""
    for _ in range(10):
        if hasattr(obj, "python_function"):
            obj = obj.python_function
        elif hasattr(obj, "py_func"):
            obj = obj.py_func
        else:
            break
    return obj


def load(pyfunc, helper=False):
    """Parse `pyfunc` and gather its globals and closure cells."""
    pyfunc = unwrap(pyfunc)
    if not inspect.isfunction(pyfunc):
        raise TransformError(f"{pyfunc!r} is not a Python function; srcad compiles plain `def` functions")
    try:
        src = capture_source(pyfunc)
    except StaleSourceError as exc:
        raise TransformError(str(exc)) from None
    if src is None:
        raise TransformError(
            f"{pyfunc.__name__}: cannot read its source. Hint: define it in a file, "
            "not in an interactive prompt or with exec")
    filename, first = src.filename, src.first_line
    source = textwrap.dedent(src.text)
    module = ast.parse(source)
    tree = module.body[0]
    if not isinstance(tree, ast.FunctionDef):
        raise TransformError(f"{pyfunc.__name__}: expected a `def` function")
    rewrite = getattr(pyfunc, "__srcad_rewrite__", None)
    if rewrite is not None:            # a kernel's body read as one thread's (srcad/cuda/kernels.py)
        tree = rewrite(tree)
    namespace = dict(pyfunc.__globals__)
    if pyfunc.__closure__:
        for name, cell in zip(pyfunc.__code__.co_freevars, pyfunc.__closure__):
            try:
                namespace[name] = cell.cell_contents
            except ValueError:
                pass
    tree.body = _lambdas_as_defs(tree.body, _LambdaNames(all_names(tree), first))
    info = FuncInfo(pyfunc, pyfunc.__name__, filename, first, source.splitlines(), tree, namespace, helper)
    fence(info)
    return info


class _LambdaNames:
    """Fresh names for lambdas that are not bound to a name: `lambda_at_line_12` (the file's line)."""

    def __init__(self, taken, first_line):
        self.taken, self.first_line = set(taken), first_line

    def __call__(self, node):
        line = self.first_line + node.lineno - 1
        name, k = f"lambda_at_line_{line}", 1
        while name in self.taken:
            k += 1
            name = f"lambda_at_line_{line}_{k}"
        self.taken.add(name)
        return name


def _lambdas_as_defs(stmts, names):
    """`f = lambda v: e` as `def f(v): return e`, and a lambda anywhere else (`apply(lambda v: 2 * v, x)`)
    as such a def just before its statement, named for its line: the nested functions lowering inlines
    where they are called, reading the enclosing names as they are at the call, as a lambda does."""
    out = []
    for s in stmts:
        for part in ("body", "orelse", "finalbody"):
            inner = getattr(s, part, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                setattr(s, part, _lambdas_as_defs(inner, names))
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name) \
                and isinstance(s.value, ast.Lambda):
            out.append(_lambda_def(s.targets[0].id, s.value, names))
            continue
        hoisted = _HoistLambdas(names)
        for part, value in ast.iter_fields(s):
            if part not in ("body", "orelse", "finalbody", "handlers"):
                setattr(s, part, hoisted.visit(value) if isinstance(value, ast.AST) else
                        [hoisted.visit(v) if isinstance(v, ast.AST) else v for v in value]
                        if isinstance(value, list) else value)
        out.extend(hoisted.defs)
        out.append(s)
    return out


class _HoistLambdas(ast.NodeTransformer):
    """Replaces each lambda of one statement's own expressions by the name of a def it collects."""

    def __init__(self, names):
        self.names, self.defs = names, []

    def visit_Lambda(self, node):
        name = self.names(node)
        self.defs.append(_lambda_def(name, node, self.names))
        return ast.copy_location(ast.Name(id=name, ctx=ast.Load()), node)


def _lambda_def(name, node, names):
    """`def name(<the lambda's parameters>): return <its body>` (lambdas inside it made defs in its body)."""
    body = _lambdas_as_defs([ast.copy_location(ast.Return(value=node.body), node)], names)
    return ast.copy_location(ast.FunctionDef(name=name, args=node.args, body=body, decorator_list=[], returns=None,
                                             type_comment=None, type_params=[]), node)


_REFUSED = {
    ast.Try: ("try/except", "move error handling outside the compiled function"),
    ast.With: ("`with` statement (a context manager)", "enter the context outside the compiled function and "
               "call the compiled function inside it"),
    ast.GeneratorExp: ("generator expression", "write an explicit `for` loop over range(...)"),
    ast.SetComp: ("set comprehension", "write an explicit loop filling a NumPy array"),
    ast.DictComp: ("dict comprehension", "write an explicit loop filling a NumPy array"),
    ast.Dict: ("dict", "use NumPy arrays or separate variables"),
    ast.Set: ("set", "use NumPy arrays or separate variables"),
    ast.ClassDef: ("class definition", "define classes outside the compiled function"),
    ast.Global: ("`global` statement", "pass the value as an argument and return the new value"),
    ast.Nonlocal: ("`nonlocal` statement", "pass the value as an argument and return the new value"),
    ast.Yield: ("yield", "return an array of results instead of a generator"),
    ast.YieldFrom: ("yield from", "return an array of results instead of a generator"),
    ast.Await: ("await", "compiled functions are synchronous"),
    ast.AsyncFunctionDef: ("async function", "compiled functions are synchronous"),
    ast.JoinedStr: ("string formatting", "compiled functions work on numbers only"),
    ast.Delete: ("`del` statement", "just stop using the variable"),
    ast.Import: ("import inside the function", "import at module level"),
    ast.ImportFrom: ("import inside the function", "import at module level"),
    ast.Starred: ("star-unpacking", "unpack explicitly: a, b = t[0], t[1]"),
    ast.NamedExpr: ("assignment expression (:=)", "assign on its own line"),
    ast.Match: ("match statement", "use if/elif/else"),
}


def fence(info):
    """Refuse unsupported constructs up front, naming line and construct."""
    fn = info.tree
    if fn.args.vararg or fn.args.kwarg or fn.args.posonlyargs or (fn.args.kwonlyargs and not info.helper):
        raise info.error(fn, "*args, **kwargs, positional-only parameters, or keyword-only parameters of "
                         "the compiled function", "give the compiled function plain parameters (default values "
                         "are fine; helpers it calls may have keyword-only ones)")
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
        fn.body = body or [ast.Pass()]
    for stmt in body:
        for node in _fenced_nodes(stmt):
            kind = _REFUSED.get(type(node))
            if kind:
                raise info.error(node, kind[0], kind[1])


def _fenced_nodes(stmt):
    """The nodes of `stmt` the fence looks at: all of them but the exception and message of a
    `raise` / `assert`, which lowering checks (a formatted message is refused there, with its own hint),
    and the `*` of a call's argument or a tuple's item (lowering spreads a tuple there)."""
    todo = [stmt]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.Raise):
            continue
        spread = node.args if isinstance(node, ast.Call) else \
            node.elts if isinstance(node, ast.Tuple) and isinstance(node.ctx, ast.Load) else ()
        todo.extend(n.value if isinstance(n, ast.Starred) and n in spread else n for n in ast.iter_child_nodes(node)
                    if not (isinstance(node, ast.Assert) and n is node.msg))


def loop_kind(info, func):
    """What a `for` header calls: "range" (the builtin), "prange" (`numba.prange`, by any name or
    through the numba module), "phase" (`runtime.threads_between_barriers`), else None."""
    if isinstance(func, ast.Name):
        meaning = resolve(info, func.id)
        if meaning == ("builtin", "range"):
            return "range"
        if info.namespace.get(func.id) is threads_between_barriers:
            return "phase"
        return "prange" if meaning[0] == "unknown" and meaning[1] is numba.prange else None
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        module = info.namespace.get(func.value.id)
        return "prange" if inspect.ismodule(module) and getattr(module, func.attr, None) is numba.prange else None
    return None


_MODULES = {"np": np, "math": math}
_CANON = {}
# NumPy 2's array-API spellings (np.acosh for np.arccosh, ...) name the same functions:
# the classic names are canonical, so that rules and messages use what users write.
_ALIASES = {"acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "pow", "concat", "permute_dims",
            "bitwise_invert", "bitwise_left_shift", "bitwise_right_shift"}
for _mod_name, _mod in _MODULES.items():
    # vars(), not dir() + getattr(): NumPy's module __getattr__ would import its
    # lazy submodules (numpy.f2py, numpy.ma, ...: ~0.1 s), none of them callable.
    for _attr, _val in sorted(vars(_mod).items(), key=lambda kv: (_mod is np and kv[0] in _ALIASES, kv[0])):
        if callable(_val):
            _CANON.setdefault(id(_val), f"{_mod_name}.{_attr}")


def canonical_callable(value):
    """'np.sin' / 'math.exp' for a NumPy or math function object, else None."""
    return _CANON.get(id(value))


def is_stop_gradient(value):
    return callable(value) and getattr(value, "__name__", "") == "stop_gradient" and \
        str(getattr(value, "__module__", "")).startswith("srcad")


def resolve(info, name):
    """What a free name means: ('module', 'np'|'math'), ('function', pyfunc),
    ('callable', 'np.sin'), ('stop_gradient',), ('const', value), ('tuple', numbers), ('builtin', name),
    ('array', value) or ('unknown', value)."""
    if name in info.namespace:
        value = info.namespace[name]
    elif hasattr(builtins, name):
        return ("builtin", name)
    else:
        return ("missing", None)
    if value is np:
        return ("module", "np")
    if value is math:
        return ("module", "math")
    if inspect.ismodule(value):
        return ("module", value.__name__)
    if is_stop_gradient(value):
        return ("stop_gradient",)
    canon = canonical_callable(value)
    if canon:
        return ("callable", canon)
    if isinstance(value, (bool, int, float, np.integer, np.floating, np.bool_)):
        return ("const", value)
    if isinstance(value, tuple) and value and all(isinstance(v, (bool, int, float, np.integer, np.floating))
                                                  for v in value):
        return ("tuple", value)         # a table of numbers (coefficients): constants too
    if isinstance(value, np.ndarray):
        return ("array", value)
    plain = unwrap(value)
    if inspect.isfunction(plain):
        return ("function", plain)
    spelled = getattr(value, "__name__", None)
    if isinstance(spelled, str) and getattr(builtins, spelled, None) is value:     # `xrange = range` too
        return ("builtin", spelled)
    return ("unknown", value)


def all_names(tree):
    """Every identifier used in a function (to keep generated names fresh)."""
    names = {a.arg for a in tree.args.args + tree.args.kwonlyargs}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
    return names
