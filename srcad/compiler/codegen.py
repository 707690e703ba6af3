"""Readable Python source out of the IR.

A Writer collects lines with their indentation, inserts a `# line N: <user
source>` comment whenever the user line changes, and remembers which user
line every generated line came from (to report Numba errors on user lines).
"""
import ast

from .normalize import Assign, For, If, Store, While


def src(node):
    return ast.unparse(node)


def tidy(expr):
    """Normalise parentheses of a generated expression string."""
    return ast.unparse(ast.parse(expr, mode="eval").body)


class Writer:
    def __init__(self):
        self.lines = []
        self.origins = []
        self.last = None

    def line(self, indent, text, origin=None):
        self.lines.append("    " * indent + text)
        self.origins.append(origin)

    def at(self, indent, origin):
        """Comment the user line an upcoming statement comes from."""
        if origin is not None and origin != self.last:
            self.line(indent, origin.comment(), origin)
            self.last = origin

    def reset(self):
        self.last = None

    def text(self):
        return "\n".join(self.lines) + "\n"


def range_args(start, stop, step):
    s0, s1, s2 = src(start), src(stop), src(step)
    if s2 == "1":
        return s1 if s0 == "0" else f"{s0}, {s1}"
    return f"{s0}, {s1}, {s2}"


def loop_header(s):
    if isinstance(s, For):
        return f"for {s.var} in range({range_args(s.start, s.stop, s.step)}):"
    return f"while {s.cond}:"


def assign_src(s):
    """`name = value`, or `name op= operand` where the user wrote an augmented assignment:
    on an array that is an in-place update of the array the name refers to."""
    v = s.value
    if s.aug and isinstance(v, ast.BinOp) and isinstance(v.left, ast.Name) and v.left.id == s.target:
        return src(ast.AugAssign(target=ast.Name(id=s.target, ctx=ast.Store()), op=v.op, value=v.right))
    return f"{s.target} = {src(v)}"


def subscript(array, index):
    return src(ast.Subscript(value=ast.Name(id=array, ctx=ast.Load()), slice=index, ctx=ast.Load()))


class Hooks:
    """What the forward adds around primal statements (the primal adds nothing)."""

    def before(self, stmt, indent, w):
        pass

    def loop_top(self, stmt, indent, w):
        pass

    def skip(self, stmt):
        return False


def emit_block(w, stmts, indent, hooks):
    start = len(w.lines)
    for s in stmts:
        emit_stmt(w, s, indent, hooks)
    if len(w.lines) == start or all(t.strip().startswith("#") for t in w.lines[start:]):
        w.line(indent, "pass")


def emit_stmt(w, s, indent, hooks):
    if hooks.skip(s):
        return
    w.at(indent, s.origin)
    hooks.before(s, indent, w)
    if isinstance(s, Assign):
        w.line(indent, assign_src(s), s.origin)
    elif isinstance(s, Store):
        w.line(indent, f"{subscript(s.array, s.index)} = {src(s.value)}", s.origin)
    elif isinstance(s, If):
        w.line(indent, f"if {s.cond}:", s.origin)
        emit_block(w, s.body, indent + 1, hooks)
        if s.orelse:
            w.line(indent, "else:", s.origin)
            w.reset()
            emit_block(w, s.orelse, indent + 1, hooks)
        w.reset()
    elif isinstance(s, (For, While)):
        w.line(indent, loop_header(s), s.origin)
        w.reset()
        hooks.loop_top(s, indent + 1, w)
        emit_block(w, s.body, indent + 1, hooks)
        w.reset()
    else:
        raise AssertionError(s)


HEADER = """import math
import numpy as np
import numba
from numba import types
from numba.typed import List
from srcad.compiler.runtime import grow, log_or_zero, power_slope, push, sum_into, trip_count
"""


def tuple_src(items):
    """A tuple display of `items` (a one-element tuple keeps its comma)."""
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def outputs_src(program):
    items = [src(a) for a in program.outputs]
    return tuple_src(items) if program.returns_tuple else items[0]


def primal_source(program, fname):
    """Source of the normalized primal: the user's computation, nothing saved."""
    w = Writer()
    w.line(0, f"def {fname}({', '.join(program.params)}):")
    emit_block(w, program.body, 1, Hooks())
    w.line(1, f"return {outputs_src(program)}")
    return w
