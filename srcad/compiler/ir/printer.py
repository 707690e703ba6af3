"""IR -> readable Python text.

Expressions go through Python's own `ast.unparse` (so parentheses are
exactly those precedence needs); statements are written one per line with a
`# from line N: <user source>` comment whenever the user line changes. The
`Writer` remembers the user line of every line it writes, so that an error
Numba reports in generated code can be restated on the user's line.

Stack statements print as `push(s, v)`, `v = pop(s)`, `reserve(s, n)`: that is
how IR dumps show them; a backend lowers them to its own storage before it
prints code to compile.
"""
import ast
import math

from numba.core import types as nt

from .nodes import (Accumulate, Assign, Attribute, BinOp, Call, Compare, Const, Effect, For, Global, If, Name, Pop,
                    Push, Reserve, Slice, Store, Subscript, Tuple, TypeRef, UnaryOp, While)

_BINOPS = {"+": ast.Add, "-": ast.Sub, "*": ast.Mult, "/": ast.Div, "//": ast.FloorDiv, "%": ast.Mod,
           "**": ast.Pow, "@": ast.MatMult, "&": ast.BitAnd, "|": ast.BitOr, "^": ast.BitXor}
_UNARY = {"-": ast.USub, "+": ast.UAdd, "not": ast.Not, "~": ast.Invert}
_COMPARE = {"<": ast.Lt, "<=": ast.LtE, ">": ast.Gt, ">=": ast.GtE, "==": ast.Eq, "!=": ast.NotEq, "is": ast.Is,
            "is not": ast.IsNot}
RUNTIME_PREFIX = "srcad."


def _load(name):
    return ast.Name(id=name, ctx=ast.Load())


def _dotted(path):
    node = None
    for part in path.split("."):
        node = _load(part) if node is None else ast.Attribute(value=node, attr=part, ctx=ast.Load())
    return node


def to_ast(e, type_name=str):
    """The Python expression of IR expression `e`; `type_name(numba type)` spells a TypeRef."""
    def conv(x):
        return to_ast(x, type_name)
    if isinstance(e, Const):
        v = e.value
        if isinstance(v, float) and not math.isfinite(v):
            return _dotted("np.nan" if math.isnan(v) else "np.inf") if not (math.isinf(v) and v < 0) \
                else ast.UnaryOp(op=ast.USub(), operand=_dotted("np.inf"))
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0:
            return ast.UnaryOp(op=ast.USub(), operand=ast.Constant(value=-v))
        return ast.Constant(value=v)
    if isinstance(e, Name):
        return _load(e.id)
    if isinstance(e, Global):
        return _dotted(e.path)
    if isinstance(e, TypeRef):
        return _load(type_name(e.type))
    if isinstance(e, Slice):
        return ast.Slice(lower=conv(e.lower) if e.lower is not None else None,
                         upper=conv(e.upper) if e.upper is not None else None,
                         step=conv(e.step) if e.step is not None else None)
    if isinstance(e, Subscript):
        items = [conv(i) for i in e.index]
        index = items[0] if len(items) == 1 else ast.Tuple(elts=items, ctx=ast.Load())
        return ast.Subscript(value=conv(e.base), slice=index, ctx=ast.Load())
    if isinstance(e, Attribute):
        return ast.Attribute(value=conv(e.base), attr=e.attr, ctx=ast.Load())
    if isinstance(e, BinOp):
        return ast.BinOp(left=conv(e.left), op=_BINOPS[e.op](), right=conv(e.right))
    if isinstance(e, UnaryOp):
        return ast.UnaryOp(op=_UNARY[e.op](), operand=conv(e.operand))
    if isinstance(e, Compare):
        return ast.Compare(left=conv(e.left), ops=[_COMPARE[e.op]()], comparators=[conv(e.right)])
    if isinstance(e, Call):
        keywords = [ast.keyword(arg=k, value=conv(v)) for k, v in e.keywords]
        if e.fn.startswith("."):        # a method: `.astype` of its first argument
            func = ast.Attribute(value=conv(e.args[0]), attr=e.fn[1:], ctx=ast.Load())
            return ast.Call(func=func, args=[conv(a) for a in e.args[1:]], keywords=keywords)
        name = e.fn[len(RUNTIME_PREFIX):] if e.fn.startswith(RUNTIME_PREFIX) else e.fn
        return ast.Call(func=_dotted(name), args=[conv(a) for a in e.args], keywords=keywords)
    if isinstance(e, Tuple):
        return ast.Tuple(elts=[conv(i) for i in e.items], ctx=ast.Load())
    raise TypeError(f"not an IR expression: {e!r}")


def expr_text(e, type_name=str):
    return ast.unparse(to_ast(e, type_name))


def tuple_text(items, type_name=str):
    """A tuple display (a one-element tuple keeps its comma)."""
    texts = [expr_text(i, type_name) for i in items]
    return "(" + ", ".join(texts) + ("," if len(texts) == 1 else "") + ")"


class Writer:
    """Lines of source with their indentation and the user line each one came from."""

    def __init__(self):
        self.lines = []
        self.origins = []
        self.last = None

    def line(self, indent, text, origin=None):
        self.lines.append("    " * indent + text)
        self.origins.append(origin)

    def comment(self, indent, origin):
        if origin is not None and origin != self.last:
            self.line(indent, origin.comment(), origin)
            self.last = origin

    def end_block(self):
        """After a block: the next statement states its line again, even the same one."""
        self.last = None

    def text(self):
        return "\n".join(self.lines) + "\n"


class Printer:
    """Prints statements and functions; `types` (name -> Numba type) lets it print scalar
    updates as `s += v` (for an array that would update it in place, so arrays keep `a = a + v`)."""

    def __init__(self, types=None, type_name=str):
        self.types = types or {}
        self.type_name = type_name

    def expr(self, e):
        return expr_text(e, self.type_name)

    def stmt_text(self, s):
        if isinstance(s, Assign):
            v = s.value
            scalar = s.target in self.types and not isinstance(self.types[s.target], nt.Array)
            if (scalar or s.inplace) and isinstance(v, BinOp) and v.left == Name(s.target) and v.op in _BINOPS:
                return f"{s.target} {v.op}= {self.expr(v.right)}"
            return f"{s.target} = {self.expr(v)}"
        if isinstance(s, Store):
            return f"{self.expr(Subscript(Name(s.array), s.index))} = {self.expr(s.value)}"
        if isinstance(s, Accumulate):
            if s.reduce:
                return f"sum_into({self.expr(s.target)}, {self.expr(s.value)})"
            if isinstance(s.value, UnaryOp) and s.value.op == "-":
                return f"{self.expr(s.target)} -= {self.expr(s.value.operand)}"
            return f"{self.expr(s.target)} += {self.expr(s.value)}"
        if isinstance(s, Effect):
            return self.expr(s.call)
        if isinstance(s, Push):
            return f"push({s.stack}, {self.expr(s.value)})"
        if isinstance(s, Pop):
            return f"{self.expr(s.target)} = pop({s.stack})"
        if isinstance(s, Reserve):
            return f"reserve({s.stack}, {self.expr(s.count)})"
        raise TypeError(f"not a simple statement: {s!r}")

    def block(self, w, stmts, indent):
        start = len(w.lines)
        for s in stmts:
            self.stmt(w, s, indent)
        if all(t.strip().startswith("#") for t in w.lines[start:]):
            w.line(indent, "pass")

    def stmt(self, w, s, indent):
        w.comment(indent, s.origin)
        if isinstance(s, If) and not s.body and s.orelse:      # only the else branch: `if not c:`
            self.compound(w, indent, f"if {self.expr(UnaryOp('not', s.cond))}:", s.orelse, s.origin)
        elif isinstance(s, If):
            w.line(indent, f"if {self.expr(s.cond)}:", s.origin)
            self.block(w, s.body, indent + 1)
            if s.orelse:
                w.line(indent, "else:", s.origin)
                w.last = s.origin
                self.block(w, s.orelse, indent + 1)
            w.end_block()
        elif isinstance(s, For):
            loop = Call("numba.prange" if s.parallel else "range", range_args(s))
            self.compound(w, indent, f"for {s.var} in {self.expr(loop)}:", s.body, s.origin)
        elif isinstance(s, While):
            self.compound(w, indent, f"while {s.cond}:", s.body, s.origin)
        else:
            w.line(indent, self.stmt_text(s), s.origin)

    def compound(self, w, indent, header, body, origin):
        """`header:` and its block."""
        w.line(indent, header, origin)
        self.block(w, body, indent + 1)
        w.end_block()

    def function(self, fn, w=None):
        """`def name(params): body; return outputs`, appended to Writer `w` (a new one by default)."""
        w = w or Writer()
        w.line(0, f"def {fn.name}({', '.join(fn.params)}):")
        self.block(w, fn.body, 1)
        outs = tuple_text(fn.outputs, self.type_name) if fn.returns_tuple else \
            self.expr(fn.outputs[0]) if fn.outputs else "None"
        w.line(1, f"return {outs}")
        return w


def range_args(s):
    """The arguments of a For's range, shortest form: range(n), range(a, n), range(a, n, k)."""
    if s.step == Const(1):
        return (s.stop,) if s.start == Const(0) else (s.start, s.stop)
    return (s.start, s.stop, s.step)


def function_text(fn):
    """A function's IR as text (for dumps after a pass, and `ad.show_source`)."""
    return Printer(fn.types).function(fn).text()
