"""Lowering of user functions (Python AST) to the IR.

Every statement does one thing on atoms, or computes one elementwise tree
over atoms (see `ir.forms`), so each derivative rule reads only atoms.
Control flow is reduced to `If`, `For` over a range and `While` with one
exit per loop and per function: `break`, `continue` and an early `return`
become flags that guard the statements after them. Called helper functions
are inlined with their locals renamed. Conditions made of constants (module
settings such as `if ORDER > 1:`) are decided here, so the dead branch never
reaches Numba or the adjoint. Each statement remembers the user line it came from.
"""
import ast
from dataclasses import replace
import inspect
import operator

import numpy as np

from ..ad.rules import is_elementwise
from ..errors import TransformError, where
from ..runtime import EXPORTS
from ..ir import (Assign, Attribute, BinOp, Call, Compare, Const, For, Function, Global, If, Name, Names, Slice,
                  Store, Subscript, Tuple, UnaryOp, While)
from ..ir.forms import is_atom, is_shape_entry, is_tree
from ..ir.visit import names_in
from .parse import all_names, canonical_callable, is_stop_gradient, load, resolve, unwrap

_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
           ast.Pow: "**", ast.MatMult: "@", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^"}
_UNARY = {ast.USub: "-", ast.UAdd: "+", ast.Not: "not", ast.Invert: "~"}
_COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=", ast.Is: "is",
            ast.IsNot: "is not"}
_TREE_OPS = {"+", "-", "*", "/", "**", "%"}
_FOLD = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "//": operator.floordiv,
         "%": operator.mod, "**": operator.pow, "<": operator.lt, "<=": operator.le, ">": operator.gt,
         ">=": operator.ge, "==": operator.eq, "!=": operator.ne, "&": operator.and_, "|": operator.or_}
_METHODS = {"copy": ".copy", "sum": "np.sum", "mean": "np.mean", "dot": "np.dot", "max": "np.max",
            "min": "np.min", "prod": "np.prod", "transpose": "np.transpose", "ravel": "np.ravel",
            "reshape": "np.reshape", "cumsum": "np.cumsum", "var": "np.var", "std": "np.std", "trace": "np.trace"}
_BUILTINS = {"abs", "min", "max", "float", "int", "len", "round", "bool"}
# NumPy functions Numba lacks, which srcad's runtime supplies to compiled code
_SUPPLIED = {"np.tile": "srcad.tile"}
# parameters passed by keyword that derivative rules read by position, and their defaults
_POSITIONAL = {"np.full": ("shape", "fill_value"), "np.full_like": ("a", "fill_value"),
               "np.linspace": ("start", "stop", "num")}
_DEFAULTS = {"np.linspace": {2: Const(50)}}
# the keyword a second positional argument stands for (`np.sum(A, 1)` is `np.sum(A, axis=1)`), as rules read it
_SECOND_KEYWORD = dict.fromkeys(("np.sum", "np.mean", "np.prod", "np.max", "np.min", "np.amax", "np.amin", "np.cumsum",
                                 "np.var", "np.std", "np.concatenate", "np.stack", "np.sort", "np.argmax",
                                 "np.argmin", "np.median"), "axis") | {"np.linalg.norm": "ord"}
# names generated code uses for modules, types and runtime helpers: a user name among them is renamed
RESERVED = {"np", "math", "numba", "List", "types", "range", "len", "abs", "min", "max", "float", "int"} | \
    set(EXPORTS)


def lower(top, nones=frozenset()):
    """The IR Function of parsed function `top` (a FuncInfo), with everything it calls inlined. The
    parameters in `nones` are passed None: tests of them (`if w is None:`) are decided here, as for
    module constants, so the branch that would use them as values is dropped."""
    ctx = _Context(top)
    params = [a.arg for a in top.tree.args.args]
    assigned = _assigned_names(top.tree.body)
    outer = {n: ctx.names.fresh(f"{n}_", spelled=n) for n in sorted((assigned | set(params)) & RESERVED)}
    rename = {n: outer.get(n, n) for n in assigned | set(params)}
    copies = {}
    for p in params:
        if p in assigned:          # a parameter the body rebinds: the body works on a local copy
            rename[p] = copies[p] = ctx.names.fresh(f"{p}_local", spelled=p)
    low = _Lowerer(ctx, top, rename, {}, helper=False, nones={p for p in nones if p not in copies})
    low.at(top.tree)
    for p, local in copies.items():
        low.assign(local, Const(None) if p in nones else Name(outer.get(p, p)))
    body, outs, is_tuple = low.function()
    if not outs:
        raise top.error(top.tree, "a function that returns nothing", "return the value(s) to differentiate")
    fn = Function(top.name, [outer.get(p, p) for p in params], body, outs, is_tuple, names=ctx.names,
                  sources=ctx.infos)
    fn.facts["lower"] = {"moved": ctx.moved, "results": ctx.results}
    return fn


class _Context:
    """What the lowering of one top function shares across the helpers it inlines."""

    def __init__(self, top):
        self.names = Names(all_names(top.tree) | RESERVED)
        self.moved = set()           # names bound by a helper's result: a move, not an alias
        self.results = {}            # name bound where a function returns early -> its call (Origin.call)
        self.calls = 0               # helper calls inlined so far
        self.stack = [top.pyfunc]    # helpers being inlined (recursion is refused)
        self.infos = [top]
        self.loaded = {}
        self.sites = {}              # helper name -> number of call sites inlined so far
        self.tuples = {}             # local bound to a tuple -> the names of its elements

    def load(self, pyfunc):
        if pyfunc not in self.loaded:
            info = load(pyfunc, helper=True)
            self.loaded[pyfunc] = info
            self.infos.append(info)
            self.names.used |= all_names(info.tree)
        return self.loaded[pyfunc]


def _assigned_names(stmts):
    return {node.id for s in stmts for node in ast.walk(s)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}


def _contains(stmts, kinds, into_loops):
    for s in stmts:
        if isinstance(s, kinds):
            return True
        for field_name in ("body", "orelse"):
            sub = getattr(s, field_name, None)
            if not sub or (isinstance(s, (ast.For, ast.While)) and not into_loops):
                continue
            if _contains(sub, kinds, into_loops):
                return True
    return False


def _any_flag(flags):
    """`f` or `f1 | f2 ...`: true once any of the jump flags is set."""
    e = Name(flags[0])
    for f in flags[1:]:
        e = BinOp("|", e, Name(f))
    return e


def _is_none(node):
    return isinstance(node, ast.Constant) and node.value is None


def _plain_number(v):
    """A global constant or a default value as a Python literal (NumPy scalars included; None stays)."""
    if v is None:
        return None
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    return float(v)


def folded(e):
    """`e` as a constant when it is an operator on constants only (`ORDER > 1` with ORDER a global)."""
    if isinstance(e, (BinOp, Compare)) and isinstance(e.left, Const) and isinstance(e.right, Const):
        args = (e.left.value, e.right.value)
        op = _FOLD.get(e.op)
    elif isinstance(e, UnaryOp) and isinstance(e.operand, Const):
        args = (e.operand.value,)
        op = {"-": operator.neg, "+": operator.pos, "not": operator.not_}.get(e.op)
    else:
        return e
    if isinstance(e, Compare) and e.op in ("is", "is not") and None in args:     # `None is None`, `1.0 is None`
        return Const((args[0] is None) == (args[1] is None) if e.op == "is" else (args[0] is None) != (args[1] is None))
    if op is None or any(a is None for a in args):
        return e
    try:
        value = op(*args)
    except (ArithmeticError, TypeError, ValueError):
        return e
    return Const(value) if isinstance(value, (bool, int, float)) else e


class _Lowerer:
    """Lowers one function body (the top function or an inlined helper)."""

    def __init__(self, ctx, info, rename, subst, helper, call_path=(), nones=frozenset()):
        self.ctx, self.info = ctx, info
        self.rename, self.subst = rename, subst
        self.nones = nones           # parameters passed None: only `is None` tests may read them
        self.helper = helper
        self.call_path = call_path   # this inlined call of a helper (Origin.call)
        self.known = {}              # id of a test's AST node -> its value when made of constants, or None
        self.out = []
        self.loops = []              # (break flag, continue flag) of the enclosing loops
        self.ret_flag = None
        self.ret_vars = None
        self.returns_tuple = False
        self.origin = None

    # ---- helpers ---------------------------------------------------------------------------------
    def err(self, node, construct, hint):
        return self.info.error(node, construct, hint)

    def fresh(self, base):
        return self.ctx.names.fresh(base)

    def emit(self, stmt):
        self.out.append(stmt)

    def at(self, node):
        self.origin = replace(self.info.origin(node), call=self.call_path)

    def local(self, n):
        return self.rename.get(n, n)

    def is_local(self, n):
        return n in self.rename or n in self.subst

    def assign(self, target, value):
        self.emit(Assign(target, value, self.origin))

    def temp(self, value, base="t"):
        t = self.fresh(base)
        self.assign(t, value)
        return Name(t)

    def atom(self, node):
        e = self.expr(node)
        if isinstance(e, Tuple):
            raise self.err(node, "tuple used as a value", "unpack it: a, b = ...")
        return e if is_atom(e) else self.temp(e)

    def as_atom(self, e):
        return e if is_atom(e) else self.temp(e)

    def named(self, atom):
        """An atom as a name (an element or view of an array goes to a temporary)."""
        return atom if isinstance(atom, Name) else self.temp(atom)

    def sub_block(self, stmts):
        saved, self.out = self.out, []
        self.block(stmts)
        body, self.out = self.out, saved
        return body

    # ---- functions -------------------------------------------------------------------------------
    def function(self):
        """(statements, output atoms, returns a tuple)."""
        fn = self.info.tree
        body = fn.body
        early = any(isinstance(n, ast.Return) for s in body[:-1] for n in ast.walk(s)) or \
            (body and not isinstance(body[-1], ast.Return)
             and any(isinstance(n, ast.Return) for n in ast.walk(body[-1])))
        if early:
            self.at(fn)
            self.ret_flag = self.fresh(f"{self.info.name}_returned" if self.helper else "returned")
            self.assign(self.ret_flag, Const(False))
            self.block(body)
            return self.out, [Name(v) for v in (self.ret_vars or [])], self.returns_tuple
        last = body[-1] if body and isinstance(body[-1], ast.Return) else None
        self.block(body[:-1] if last else body)
        if last is None:
            return self.out, [], False
        self.at(last)
        return self.out, self.return_atoms(last), self.returns_tuple

    def return_atoms(self, node):
        if node.value is None:
            return []
        e = self.expr(node.value)
        if isinstance(e, Tuple):
            self.returns_tuple = True
            return [self.as_atom(x) for x in e.items]
        return [self.as_atom(e)]

    # ---- statements ------------------------------------------------------------------------------
    def block(self, stmts):
        for k, s in enumerate(stmts):
            self.at(s)
            self.stmt(s)
            if self.always_returns(s):
                return               # the rest never runs (and may not even type: `if w is None: return`)
            flags = self.jump_flags(s)
            rest = stmts[k + 1:]
            if flags and rest:
                self.at(rest[0])
                go = self.guard(flags)
                body = self.sub_block(rest)
                self.emit(If(go, body, [], self.origin))
                return

    def always_returns(self, s):
        """Does statement `s` return on every path, its constant tests decided as `stmt_If` decides them?"""
        if isinstance(s, ast.Return):
            return True
        if not isinstance(s, ast.If):
            return False
        known = self.constant_test(s.test)
        branches = [s.body, s.orelse] if known is None else [s.body if known else s.orelse]
        return all(any(self.always_returns(t) for t in b) for b in branches)

    def jump_flags(self, s):
        flags = []
        if self.loops:
            brk, cont = self.loops[-1]
            if brk and _contains([s], ast.Break, False):
                flags.append(brk)
            if cont and _contains([s], ast.Continue, False):
                flags.append(cont)
        if self.ret_flag and _contains([s], ast.Return, True):
            flags.append(self.ret_flag)
        return flags

    def guard(self, flags):
        return self.temp(UnaryOp("not", _any_flag(flags)), "go")

    def stmt(self, s):
        method = getattr(self, "stmt_" + type(s).__name__, None)
        if method is None:
            raise self.err(s, f"`{type(s).__name__}` statement", "see docs/subset.md for the supported subset")
        method(s)

    def stmt_Pass(self, s):
        pass

    def stmt_Expr(self, s):
        if not isinstance(s.value, ast.Call):
            raise self.err(s, "expression statement", "assign the value to a name or remove it")
        e = self.expr(s.value)
        if isinstance(e, Call):
            self.temp(e)

    def stmt_Assign(self, s):
        if len(s.targets) != 1:
            value = self.atom(s.value)
            for t in s.targets:
                self.store(t, value, s)
            return
        target = s.targets[0]
        if isinstance(target, ast.Tuple):
            self.unpack(target, s.value, s)
            return
        value = self.expr(s.value)
        if isinstance(value, Tuple):
            if not isinstance(target, ast.Name):
                raise self.err(s, "storing a tuple into an array element", "store its elements one by one")
            self.bind_tuple(self.local(target.id), value, s)
            return
        if isinstance(target, ast.Name) and self.local(target.id) in self.ctx.tuples:
            raise self.err(s, f"`{target.id}` bound to a tuple and to a single value",
                           "use a different name for each")
        self.store(target, value, s)

    def bind_tuple(self, local, value, node):
        """`t = a, b` (or a helper's tuple result): one name per element, the same names at
        every binding of `t`, so tuples carried through loops and branches stay plain values."""
        elems = self.ctx.tuples.setdefault(local, [self.fresh(f"{local}_{k}") for k in range(len(value.items))])
        if len(elems) != len(value.items):
            raise self.err(node, f"`{local}` bound to tuples of different lengths", "keep one length per name")
        for e, v in zip(elems, value.items):
            if isinstance(v, Tuple):
                raise self.err(node, "a tuple nested in a tuple", "unpack the inner tuple first")
            self.assign(e, self.as_atom(v) if not is_tree(v, is_elementwise) else v)

    def store(self, target, value, node):
        if isinstance(target, ast.Name):
            if target.id in self.subst:
                raise self.err(node, "rebinding a parameter", "internal: parameter substitution")
            self.assign(self.local(target.id), value)
        elif isinstance(target, ast.Subscript):
            if not (isinstance(target.value, ast.Name) and self.is_local(target.value.id)):
                raise self.err(node, "writing into something other than a local array",
                               "write into an array variable: a[i] = v")
            arr = self.expr(target.value)
            if not isinstance(arr, Name):
                raise self.err(node, "writing into a constant", "write into an array variable")
            index = self.index(target.slice)
            self.emit(Store(arr.id, index, self.as_atom(value), self.origin))
        elif isinstance(target, ast.Attribute):
            raise self.err(node, "attribute assignment", "compiled functions work on arrays and scalars, "
                           "not on attributes of objects")
        else:
            raise self.err(node, "this assignment target", "assign to a name or an array element")

    def unpack(self, target, value_node, s):
        """`a, (b, c) = ...`: evaluate every value first, then assign left to right."""
        pairs = []
        self.collect_pairs(target, value_node, s, pairs)
        targets = {t.id if isinstance(t, ast.Name) else getattr(t.value, "id", None) for t, _ in pairs}
        read = {n for _, a in pairs for n in names_in(a)}
        if len(pairs) > 1 and targets & read:
            pairs = [(t, a if isinstance(a, Const) else self.temp(a)) for t, a in pairs]
        for t, a in pairs:
            self.store(t, a, s)

    def collect_pairs(self, target, value_node, s, pairs):
        if isinstance(target, (ast.Name, ast.Subscript)):
            pairs.append((target, self.atom(value_node)))
            return
        if not isinstance(target, ast.Tuple):
            raise self.err(s, "this unpacking target", "unpack into names")
        if isinstance(value_node, ast.Tuple) and len(value_node.elts) == len(target.elts):
            for t, v in zip(target.elts, value_node.elts):
                self.collect_pairs(t, v, s, pairs)
            return
        if isinstance(value_node, ast.Attribute) and value_node.attr == "shape":
            arr = self.atom(value_node.value)
            for k, t in enumerate(target.elts):
                pairs.append((t, Subscript(Attribute(arr, "shape"), (Const(k),))))
            return
        value = self.expr(value_node)
        if isinstance(value, Name) and all(isinstance(t, (ast.Name, ast.Subscript)) for t in target.elts):
            # a tuple argument (a Numba tuple): its elements by position
            for k, t in enumerate(target.elts):
                pairs.append((t, self.temp(Subscript(value, (Const(k),)))))
            return
        if not isinstance(value, Tuple) or len(value.items) != len(target.elts) \
                or not all(isinstance(t, (ast.Name, ast.Subscript)) for t in target.elts):
            raise self.err(s, "unpacking this value", "unpack a tuple literal, a helper's tuple "
                           "return or x.shape, with matching lengths")
        for t, a in zip(target.elts, value.items):
            pairs.append((t, self.as_atom(a)))

    def stmt_AugAssign(self, s):
        t = s.target
        op = _BINOPS.get(type(s.op))
        if op is None:
            raise self.err(s, "this augmented assignment operator", "write it out: a = a op b")
        if isinstance(t, ast.Name):
            cur = self.expr(ast.Name(id=t.id, ctx=ast.Load()))
            if not isinstance(cur, Name):
                raise self.err(s, "an augmented assignment to this name", "assign to a local variable")
            value = self.operand(s.value) if op in _TREE_OPS else self.atom(s.value)
            self.emit(Assign(cur.id, BinOp(op, cur, value), self.origin, inplace=True))
        elif isinstance(t, ast.Subscript):
            if not isinstance(t.value, ast.Name):
                raise self.err(s, "this augmented assignment", "use a[i] = a[i] + v")
            arr = self.expr(t.value)
            index = self.index(t.slice)
            cur = Subscript(arr, index)
            new = self.temp(BinOp(op, cur, self.atom(s.value)))
            self.emit(Store(arr.id, index, new, self.origin))
        else:
            raise self.err(s, "this augmented assignment target", "assign to a name or an array element")

    def constant_test(self, node):
        """The truth value of a test made of constants only (None when it depends on data); asked once
        per test."""
        if id(node) not in self.known:
            self.known[id(node)] = self._constant_test(node)
        return self.known[id(node)]

    def _constant_test(self, node):
        saved = self.out
        self.out = []
        try:
            e = self.expr(node)
        except TransformError:
            e = None
        finally:
            emitted, self.out = self.out, saved
        if isinstance(e, Const) and not emitted:
            return bool(e.value)
        return None

    def condition(self, node):
        """The name an `If` tests: IR conditions are plain names."""
        cond = self.atom(node)
        return cond if isinstance(cond, Name) else self.temp(cond, "cond")

    def stmt_If(self, s):
        known = self.constant_test(s.test)
        if known is not None:
            self.block(s.body if known else s.orelse)
            return
        cond = self.condition(s.test)
        origin = self.origin
        body = self.sub_block(s.body)
        orelse = self.sub_block(s.orelse)
        self.emit(If(cond, body, orelse, origin))

    def stable(self, atom, body):
        """Copy a loop bound into a temporary when the loop body can change it."""
        changed = {self.local(n) for n in _assigned_names(body)}
        if isinstance(atom, Name) and atom.id in changed:
            return self.temp(atom, "bound")
        if is_shape_entry(atom) and atom.base.base.id not in changed:
            return atom
        if isinstance(atom, Subscript):
            return self.temp(atom, "bound")
        return atom

    def stmt_For(self, s):
        args = [self.atom(a) for a in s.iter.args]
        if len(args) == 1:
            args = [Const(0), args[0], Const(1)]
        elif len(args) == 2:
            args.append(Const(1))
        start, stop, step = (self.stable(a, s.body) for a in args)
        var = self.local(s.target.id)
        has_break = _contains(s.body, ast.Break, False)
        has_cont = _contains(s.body, ast.Continue, False)
        has_ret = self.ret_flag is not None and _contains(s.body, ast.Return, True)
        origin = self.origin
        brk = self.fresh("broke") if has_break else None
        cont = self.fresh("skip") if has_cont else None
        if not (has_break or has_ret):
            self.loops.append((None, cont))
            body = self.loop_body(s.body, cont, origin)
            self.loops.pop()
            self.emit(For(var, start, stop, step, body, origin))
            return
        if not (isinstance(step, Const) and step.value != 0):
            raise self.err(s, "`break` or `return` inside a for loop with a non-constant step",
                           "use a while loop")
        if brk:
            self.assign(brk, Const(False))
        k = self.temp(start, "k")
        cmp = "<" if step.value > 0 else ">"
        more = self.temp(Compare(cmp, k, stop), "more")
        self.loops.append((brk, cont))
        saved, self.out = self.out, []
        self.assign(var, k)
        if cont:
            self.assign(cont, Const(False))
        self.block(s.body)
        self.origin = origin
        self.assign(k.id, BinOp("+", k, step))
        self.assign(more.id, Compare(cmp, k, stop))
        self.stop_on_flags([f for f in (brk, self.ret_flag) if f], more.id)
        body, self.out = self.out, saved
        self.loops.pop()
        self.emit(While(more.id, body, origin))

    def loop_body(self, stmts, cont, origin):
        saved, self.out = self.out, []
        if cont:
            self.origin = origin
            self.assign(cont, Const(False))
        self.block(stmts)
        body, self.out = self.out, saved
        return body

    def stop_on_flags(self, flags, more):
        stop = self.temp(_any_flag(flags), "stop")
        self.emit(If(stop, [Assign(more, Const(False), self.origin)], [], self.origin))

    def stmt_While(self, s):
        origin = self.origin
        more = self.fresh("more")
        self.assign(more, self.test_value(s.test))
        has_break = _contains(s.body, ast.Break, False)
        has_cont = _contains(s.body, ast.Continue, False)
        brk = self.fresh("broke") if has_break else None
        cont = self.fresh("skip") if has_cont else None
        if brk:
            self.assign(brk, Const(False))
        self.loops.append((brk, cont))
        saved, self.out = self.out, []
        if cont:
            self.assign(cont, Const(False))
        self.block(s.body)
        self.origin = origin
        flags = [f for f in (brk, self.ret_flag if _contains(s.body, ast.Return, True) else None) if f]
        if flags:
            go = self.guard(flags)
            self.assign(more, Const(False))
            test = self.expr_into(s.test, more)
            self.emit(If(go, test, [], origin))
        else:
            self.assign(more, self.test_value(s.test))
        body, self.out = self.out, saved
        self.loops.pop()
        self.emit(While(more, body, origin))

    def test_value(self, node):
        e = self.expr(node)
        return e if is_atom(e) or not isinstance(e, Tuple) else self.temp(e)

    def expr_into(self, node, target):
        saved, self.out = self.out, []
        self.assign(target, self.expr(node))
        body, self.out = self.out, saved
        return body

    def stmt_Break(self, s):
        self.assign(self.loops[-1][0], Const(True))

    def stmt_Continue(self, s):
        self.assign(self.loops[-1][1], Const(True))

    def stmt_Return(self, s):
        atoms = self.return_atoms(s)
        if self.ret_vars is None:
            base = f"{self.info.name}_result" if self.helper else "result"
            self.ret_vars = [self.fresh(base) for _ in atoms]
            self.ctx.results.update((v, self.call_path) for v in self.ret_vars)
        elif len(atoms) != len(self.ret_vars):
            raise self.err(s, "returns of different lengths", "return the same number of values everywhere")
        for v, a in zip(self.ret_vars, atoms):
            self.assign(v, a)
        self.assign(self.ret_flag, Const(True))

    # ---- expressions -----------------------------------------------------------------------------
    def expr(self, node):
        method = getattr(self, "expr_" + type(node).__name__, None)
        if method is None:
            raise self.err(node, f"`{type(node).__name__}` expression", "see docs/subset.md for the supported subset")
        return method(node)

    def expr_Constant(self, node):
        if not isinstance(node.value, (bool, int, float)) and node.value is not None:
            raise self.err(node, "this constant", "use numbers only")
        return Const(node.value)

    def expr_Name(self, node):
        n = node.id
        if n in self.nones:
            raise TypeError(f"{where(self.origin)}: argument `{n}` is None here, and `{self.origin.text}` uses it "
                            f"as a value. Hint: pass a value for `{n}`, or test `if {n} is None:` first")
        if n in self.subst:
            return self.subst[n]
        if n in self.rename:
            elems = self.ctx.tuples.get(self.rename[n])
            if elems is not None:
                return Tuple(tuple(Name(e) for e in elems))
            return Name(self.rename[n])
        kind = resolve(self.info, n)
        if kind[0] == "const":
            return Const(_plain_number(kind[1]))
        if kind[0] == "tuple":
            return Tuple(tuple(Const(_plain_number(v)) for v in kind[1]))
        if kind[0] == "array":
            raise self.err(node, f"global array `{n}`", "pass the array as an argument")
        if kind[0] == "missing":
            raise self.err(node, f"undefined name `{n}`", "define it before use")
        raise self.err(node, f"global `{n}` used as a value", "pass it as an argument")

    def operand(self, node):
        """An atom or an elementwise tree; anything else goes to a temporary."""
        e = self.expr(node)
        if isinstance(e, Tuple):
            raise self.err(node, "tuple used as a value", "unpack it: a, b = ...")
        return e if is_atom(e) or is_tree(e, is_elementwise) else self.temp(e)

    def expr_BinOp(self, node):
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.err(node, "this operator", "see docs/subset.md for the supported operators")
        if op in _TREE_OPS:
            return folded(BinOp(op, self.operand(node.left), self.operand(node.right)))
        return folded(BinOp(op, self.atom(node.left), self.atom(node.right)))

    def expr_UnaryOp(self, node):
        op = _UNARY[type(node.op)]
        if op == "-" and isinstance(node.operand, ast.Constant) \
                and isinstance(node.operand.value, (int, float)) and not isinstance(node.operand.value, bool):
            return Const(-node.operand.value)
        if op in ("-", "+"):
            return folded(UnaryOp(op, self.operand(node.operand)))
        return folded(UnaryOp(op, self.atom(node.operand)))

    def expr_Compare(self, node):
        if any(type(op) not in _COMPARE for op in node.ops):
            raise self.err(node, "an `in` / `not in` test", "compare values with == or a loop")
        if len(node.ops) == 1:
            known = self.none_test(node)
            if known is not None:
                return known
            return folded(Compare(_COMPARE[type(node.ops[0])], self.atom(node.left), self.atom(node.comparators[0])))
        parts = []
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            parts.append(ast.Compare(left=left, ops=[op], comparators=[right]))
            left = right
        return self.expr(ast.BoolOp(op=ast.And(), values=parts))

    def none_test(self, node):
        """`w is None` / `w is not None` of a parameter passed None, decided here; else None."""
        op, sides = node.ops[0], (node.left, node.comparators[0])
        if isinstance(op, (ast.Is, ast.IsNot)) and \
                any(isinstance(a, ast.Name) and a.id in self.nones for a in sides) and \
                all(isinstance(a, ast.Name) and a.id in self.nones or isinstance(a, ast.Constant) and a.value is None
                    for a in sides):
            return Const(isinstance(op, ast.Is))
        return None

    def expr_BoolOp(self, node):
        first = self.expr(node.values[0])
        if isinstance(first, Const):       # a constant first operand decides it here
            if bool(first.value) == isinstance(node.op, ast.And):
                rest = node.values[1:]
                return self.expr(rest[0] if len(rest) == 1 else ast.BoolOp(op=node.op, values=rest))
            return first
        t = self.temp(first, "test")
        for v in node.values[1:]:
            cond = t if isinstance(node.op, ast.And) else self.temp(UnaryOp("not", t), "test")
            origin = self.origin
            self.emit(If(cond, self.expr_into(v, t.id), [], origin))
        return t

    def expr_IfExp(self, node):
        known = self.constant_test(node.test)
        if known is not None:
            return self.expr(node.body if known else node.orelse)
        cond = self.condition(node.test)
        t = self.fresh("choice")
        origin = self.origin
        body = self.expr_into(node.body, t)
        orelse = self.expr_into(node.orelse, t)
        self.emit(If(cond, body, orelse, origin))
        return Name(t)

    def expr_Tuple(self, node):
        return Tuple(tuple(self.atom(e) for e in node.elts))

    def index(self, node):
        """The index of a subscript as a tuple of atoms and slices."""
        items = node.elts if isinstance(node, ast.Tuple) else [node]
        out = []
        for item in items:
            if isinstance(item, ast.Slice):
                out.append(Slice(*(self.atom(p) if p is not None else None
                                   for p in (item.lower, item.upper, item.step))))
                continue
            a = self.atom(item)
            if isinstance(a, Subscript) and not is_shape_entry(a):
                a = self.temp(a, "idx")
            out.append(a)
        return tuple(out)

    def expr_Subscript(self, node):
        v = node.value
        if isinstance(v, ast.Attribute) and v.attr == "shape":
            return Subscript(Attribute(self.atom(v.value), "shape"), self.index(node.slice))
        if isinstance(v, ast.Name):
            whole = self.expr(v)
            if isinstance(whole, Tuple):
                k = node.slice.value if isinstance(node.slice, ast.Constant) else None
                if k is None and all(isinstance(x, Const) for x in whole.items):     # a table of numbers
                    return Subscript(Const(tuple(x.value for x in whole.items)), self.index(node.slice))
                if not isinstance(k, int) or not -len(whole.items) <= k < len(whole.items):
                    raise self.err(node, "indexing a tuple with something other than a constant in range",
                                   "index tuples with constants, or unpack them: a, b = t")
                return whole.items[k]
        base = self.atom(v)
        if not isinstance(base, Name):
            base = self.temp(base)
        return Subscript(base, self.index(node.slice))

    def module_path(self, node):
        """('np.linalg', the object) for an attribute chain rooted at NumPy or math, else (None, None)."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or self.is_local(node.id):
            return None, None
        kind = resolve(self.info, node.id)
        if kind[0] != "module":
            return None, None
        obj = self.info.namespace[node.id]
        for p in reversed(parts):
            obj = getattr(obj, p, None)
        root = kind[1] if kind[1] in ("np", "math") else None
        return (".".join([root] + list(reversed(parts))) if root else None), obj

    def expr_Attribute(self, node):
        path, obj = self.module_path(node)
        if path is not None and obj is None and node.attr == "newaxis":
            return Const(None)
        if path is not None and isinstance(obj, (int, float)):
            return Global(path)
        if node.attr in ("shape", "ndim", "size", "dtype", "T") and path is None and \
                (not isinstance(node.value, ast.Name) or self.is_local(node.value.id)):
            base = self.named(self.atom(node.value))        # of a name, or of any array expression
            return Call("np.transpose", (base,)) if node.attr == "T" else Attribute(base, node.attr)
        raise self.err(node, f"attribute `.{node.attr}`", "only .shape, .ndim, .size, .dtype and .T of arrays "
                       "and constants of math/numpy are supported; attributes of user objects are not")

    def expr_Call(self, node):
        f = node.func
        if any(k.arg is None for k in node.keywords):
            raise self.err(node, "**kwargs in a call", "pass arguments explicitly")
        kws = tuple((k.arg, self.kw_value(k.value)) for k in node.keywords)
        if isinstance(f, ast.Name) and not self.is_local(f.id):
            kind = resolve(self.info, f.id)
            if kind[0] == "function":
                return self.inline(kind[1], node)
            if kind[0] == "stop_gradient":
                return self.stop_gradient(node)
            if kind[0] == "callable":
                return self.call(kind[1], node.args, kws)
            if kind[0] == "builtin" and f.id in _BUILTINS:
                return self.call(f.id, node.args, kws)
            if kind[0] == "builtin" and f.id == "range":
                raise self.err(node, "range() outside a for loop", "use range only as `for i in range(...)`")
            raise self.err(node, f"call to `{f.id}`", "call math/NumPy functions, builtins abs/min/max/"
                           "float/int/len, or plain Python functions")
        if isinstance(f, ast.Attribute):
            path, obj = self.module_path(f)
            if obj is not None:
                if is_stop_gradient(obj):
                    return self.stop_gradient(node)
                plain, canon = unwrap(obj), canonical_callable(obj)
                if inspect.isfunction(plain) and not canon:
                    return self.inline(plain, node)
                if path is not None:
                    return self.call(canon or path, node.args, kws)
            if f.attr in _METHODS and (not isinstance(f.value, ast.Name) or self.is_local(f.value.id)):
                args = list(node.args)
                if f.attr in ("reshape", "transpose") and len(args) > 1:   # x.reshape(2, 3): np.reshape(x, (2, 3))
                    args = [ast.Tuple(elts=args, ctx=ast.Load())]
                return self.call(_METHODS[f.attr], [f.value] + args, kws)
            if isinstance(f.value, ast.Name) and self.is_local(f.value.id) and f.attr == "astype":
                return Call(".astype", (self.atom(f.value),) + tuple(self.kw_value(a) for a in node.args))
        raise self.err(node, "this call", "call math/NumPy functions, plain Python functions, or the array "
                       "methods " + ", ".join(sorted(_METHODS)))

    def call(self, fn, args, kws):
        """A call of a known function; n-ary min/max become nested binary ones (Python's tie rule: the
        first of equal values wins, as the rule for `max(a, b)` assumes)."""
        fn = _SUPPLIED.get(fn, fn)
        if fn in ("min", "max") and len(args) == 1 and not kws:      # of an array: its extremum
            fn = "np." + fn
        if fn == "np.clip" and len(args) == 3 and _is_none(args[2]) != _is_none(args[1]):   # one bound
            fn, args = ("np.maximum", args[:2]) if _is_none(args[2]) else ("np.minimum", [args[0], args[2]])
        if fn in _SECOND_KEYWORD and len(args) == 2 and _SECOND_KEYWORD[fn] not in dict(kws):
            kws = kws + ((_SECOND_KEYWORD[fn], self.kw_value(args[1])),)
            args = args[:1]
        if fn in ("min", "max") and len(args) > 2 and not kws:
            e = self.call(fn, args[:2], kws)
            for a in args[2:]:
                e = Call(fn, (self.as_atom(e) if not is_tree(e, is_elementwise) else e, self.operand(a)))
            return e
        if is_elementwise(fn) and not kws and not any(isinstance(a, ast.Tuple) for a in args):
            return Call(fn, tuple(self.operand(a) for a in args))
        args = [self.arg(a) for a in args]
        axis = dict(kws).get("axis")
        if fn == "np.mean" and len(args) == 1 and axis is not None:      # Numba has no mean along an axis
            base = self.named(args[0])
            return BinOp("/", self.temp(Call("np.sum", (base,), kws)), Subscript(Attribute(base, "shape"), (axis,)))
        named = dict(kws)
        for p in _POSITIONAL.get(fn, ())[len(args):]:
            if p not in named and len(args) not in _DEFAULTS.get(fn, {}):
                break
            args.append(named.pop(p) if p in named else _DEFAULTS[fn][len(args)])
        return Call(fn, tuple(args), tuple(named.items()))

    def kw_value(self, v):
        path, obj = self.module_path(v) if isinstance(v, ast.Attribute) else (None, None)
        if path is not None:
            return Global(path)
        return self.arg(v)

    def arg(self, a):
        if isinstance(a, ast.Tuple):
            return self.expr_Tuple(a)
        if isinstance(a, ast.Attribute):
            path, obj = self.module_path(a)
            if path is not None and not isinstance(obj, (int, float)) and obj is not None:
                return Global(path)
            if a.attr == "dtype":
                return self.expr_Attribute(a)
        return self.atom(a)

    def stop_gradient(self, node):
        if len(node.args) != 1:
            raise self.err(node, "stop_gradient with several arguments", "pass one value")
        return self.temp(Call("srcad.stop_gradient", (self.atom(node.args[0]),)), "stopped")

    def inline(self, pyfunc, node):
        if pyfunc in self.ctx.stack:
            raise self.err(node, f"recursion (`{pyfunc.__name__}` calls itself)", "rewrite the recursion as a loop")
        if node.keywords:
            raise self.err(node, "keyword arguments to a helper function", "pass arguments by position")
        info = self.ctx.load(pyfunc)
        params = [a.arg for a in info.tree.args.args]
        defaults = list(info.pyfunc.__defaults__ or ())
        if not len(params) - len(defaults) <= len(node.args) <= len(params):
            raise self.err(node, f"call to `{info.name}` with {len(node.args)} arguments "
                           f"(it takes {len(params)})", "pass every parameter")
        args = [self.arg_value(a) for a in node.args]
        args += [Const(_plain_number(d)) for d in defaults[len(defaults) - (len(params) - len(args)):]] \
            if len(args) < len(params) else []
        k = self.ctx.sites.get(info.name, 0) + 1
        self.ctx.sites[info.name] = k
        prefix = info.name if k == 1 else f"{info.name}{k}"
        assigned = _assigned_names(info.tree.body)
        rename, subst = {}, {}
        nones = {p for p, a in zip(params, args) if p not in assigned and a == Const(None)}
        for p, a in zip(params, args):
            if p not in assigned and p not in nones and isinstance(a, (Name, Const, Tuple)):
                subst[p] = a
        for n in sorted(assigned | set(params)):
            if n not in subst:
                rename[n] = self.ctx.names.fresh(f"{prefix}_{n}", spelled=n)
        for p, a in zip(params, args):
            if p not in subst and p not in nones:
                if isinstance(a, Tuple):
                    self.bind_tuple(rename[p], a, node)
                else:
                    self.assign(rename[p], a)
        self.ctx.stack.append(pyfunc)
        self.ctx.calls += 1
        sub = _Lowerer(self.ctx, info, rename, subst, True, self.call_path + (self.ctx.calls,), nones)
        body, outs, is_tuple = sub.function()
        self.ctx.stack.pop()
        self.out.extend(body)
        # a helper's returned local is dead after the call: binding it is a move, not an alias
        self.ctx.moved.update(o.id for o in outs if isinstance(o, Name) and o.id in rename.values())
        if is_tuple:
            return Tuple(tuple(outs))
        return outs[0] if outs else Const(0)

    def arg_value(self, node):
        """A helper's argument: an atom, or a tuple of atoms (passed whole); None passed on as None."""
        if isinstance(node, ast.Name) and node.id in self.nones:
            return Const(None)
        e = self.expr(node)
        if isinstance(e, Tuple):
            return Tuple(tuple(self.as_atom(x) for x in e.items))
        return self.as_atom(e)

