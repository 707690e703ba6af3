"""Lowering of user functions to a small three-address form (the IR).

Every IR statement does one thing on atoms (names, constants, array elements
or slices with atom indices), so each derivative rule reads only atoms.
Control flow is reduced to if / for-over-range / while with one exit per
loop and per function: break, continue and early return become flags that
guard the statements after them. Called helper functions are inlined with
their locals renamed. Each statement remembers the user line it came from.
"""
import ast
import copy
import inspect
from dataclasses import dataclass, field

import numpy as np

from .frontend import TransformError, all_names, canonical_callable, is_stop_gradient, load, resolve, unwrap
from .rules import ELEMENTWISE


@dataclass
class Origin:
    """The user line an IR statement comes from (helpers name their function)."""
    func: str
    file: str
    line: int
    text: str
    func_is_helper: bool = False

    def comment(self):
        where = f"{self.func} line {self.line}" if self.func_is_helper else f"line {self.line}"
        return f"# {where}: {self.text}"


@dataclass
class Assign:
    target: str
    value: ast.expr
    origin: Origin
    nodiff: bool = False      # stop_gradient: identity with zero derivative
    aug: bool = False         # came from `name op= value`


@dataclass
class Store:
    array: str
    index: ast.expr
    value: ast.expr
    origin: Origin


@dataclass
class If:
    cond: str
    body: list
    orelse: list
    origin: Origin


@dataclass
class For:
    var: str
    start: ast.expr
    stop: ast.expr
    step: ast.expr
    body: list
    origin: Origin


@dataclass
class While:
    cond: str
    body: list
    counter: str
    origin: Origin


def blocks(s):
    """The statement lists nested directly in statement `s`."""
    if isinstance(s, If):
        return [s.body, s.orelse]
    if isinstance(s, (For, While)):
        return [s.body]
    return []


def walk(stmts):
    """Every IR statement, depth first."""
    for s in stmts:
        yield s
        for block in blocks(s):
            yield from walk(block)


def defined_names(s):
    """The names statement `s` itself binds: an assignment's target, a loop's index or trip counter."""
    if isinstance(s, Assign):
        return {s.target}
    if isinstance(s, For):
        return {s.var}
    if isinstance(s, While):
        return {s.counter}
    return set()


@dataclass
class Program:
    name: str
    params: list
    body: list
    outputs: list
    returns_tuple: bool
    infos: list
    param_copies: dict = field(default_factory=dict)   # param -> local it is copied into
    names: "Names" = None                                # fresh-name source the later passes share
    moved: set = field(default_factory=set)             # helper results bound by move, not alias


class Names:
    """Fresh identifiers that clash with nothing the user wrote."""

    def __init__(self, used):
        self.used = set(used)

    def fresh(self, base):
        name, k = base, 2
        while name in self.used:
            name = f"{base}{k}"
            k += 1
        self.used.add(name)
        return name


class Context:
    def __init__(self, top):
        self.names = Names(all_names(top.tree) | {"np", "math", "numba", "List", "types", "saved", "d_out",
                                                  "push", "grow", "sum_into", "trip_count"})
        self.moved = set()
        self.stack = [top.pyfunc]
        self.infos = [top]
        self.loaded = {}
        self.sites = {}
        self.tuples = {}          # local name bound to a tuple -> the names of its elements

    def load(self, pyfunc):
        if pyfunc not in self.loaded:
            info = load(pyfunc)
            self.loaded[pyfunc] = info
            self.infos.append(info)
            self.names.used |= all_names(info.tree)
        return self.loaded[pyfunc]


def name(n, store=False):
    return ast.Name(id=n, ctx=ast.Store() if store else ast.Load())


def const(v):
    return ast.Constant(value=v)


def is_atom(e):
    if isinstance(e, (ast.Name, ast.Constant)):
        return True
    if isinstance(e, ast.Attribute):
        return isinstance(e.value, ast.Name) and e.value.id in ("np", "math")
    if isinstance(e, ast.Subscript):
        return isinstance(e.value, ast.Name) or is_shape(e)
    return False


_TREE_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.Mod)


def is_tree(e):
    """An elementwise arithmetic expression over atoms, kept whole (as the user wrote it)."""
    if isinstance(e, ast.BinOp):
        return isinstance(e.op, _TREE_OPS) and all(is_atom(c) or is_tree(c) for c in (e.left, e.right))
    if isinstance(e, ast.UnaryOp):
        return isinstance(e.op, (ast.USub, ast.UAdd)) and (is_atom(e.operand) or is_tree(e.operand))
    if isinstance(e, ast.Call):
        return getattr(e, "srcad_fn", None) in ELEMENTWISE and not e.keywords and \
            all(is_atom(a) or is_tree(a) for a in e.args)
    return False


def leaves(e):
    """The atoms an expression tree reads, left to right."""
    if is_atom(e):
        return [e]
    if isinstance(e, ast.BinOp):
        return leaves(e.left) + leaves(e.right)
    if isinstance(e, ast.UnaryOp):
        return leaves(e.operand)
    if isinstance(e, ast.Call):
        return [x for a in e.args for x in leaves(a)]
    return []


def is_shape(e):
    """`x.shape[k]`: kept whole, it reads like the user's code and never changes."""
    return isinstance(e, ast.Subscript) and isinstance(e.value, ast.Attribute) and e.value.attr == "shape" \
        and isinstance(e.value.value, ast.Name)


def assigned_names(stmts):
    out = set()
    for s in stmts:
        for node in ast.walk(s):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                out.add(node.id)
    return out


def _any_flag(flags):
    """`f` or `f1 or f2 ...`: true once any of the jump flags is set."""
    return name(flags[0]) if len(flags) == 1 else ast.BoolOp(op=ast.Or(), values=[name(f) for f in flags])


def _contains(stmts, kinds, into_loops):
    for s in stmts:
        if isinstance(s, kinds):
            return True
        for field_name in ("body", "orelse"):
            sub = getattr(s, field_name, None)
            if not sub:
                continue
            if isinstance(s, (ast.For, ast.While)) and not into_loops:
                continue
            if _contains(sub, kinds, into_loops):
                return True
    return False


_METHODS = {"copy": "np.copy", "sum": "np.sum", "mean": "np.mean", "dot": "np.dot",
            "max": "np.max", "min": "np.min", "prod": "np.prod", "transpose": "np.transpose"}
_BUILTINS = {"abs", "min", "max", "float", "int", "len", "round", "bool"}


class Lowerer:
    """Lowers one function body (the top function or an inlined helper)."""

    def __init__(self, ctx, info, rename, subst, helper):
        self.ctx, self.info = ctx, info
        self.rename, self.subst = rename, subst
        self.helper = helper
        self.out = []
        self.loops = []           # (break flag, continue flag) of enclosing loops
        self.ret_flag = None
        self.ret_vars = None
        self.returns_tuple = False
        self.origin = None

    # ---- helpers -------------------------------------------------------
    def err(self, node, construct, hint):
        return self.info.error(node, construct, hint)

    def fresh(self, base):
        return self.ctx.names.fresh(base)

    def emit(self, stmt):
        self.out.append(stmt)

    def set_origin(self, node):
        self.origin = Origin(self.info.name, self.info.filename, self.info.file_line(node),
                             self.info.line_text(node), self.helper)

    def local(self, n):
        return self.rename.get(n, n)

    def is_local(self, n):
        return n in self.rename or n in self.subst

    def assign(self, target, value, **kw):
        self.emit(Assign(target, value, self.origin, **kw))

    def temp(self, value, base="t"):
        t = self.fresh(base)
        self.assign(t, value)
        return name(t)

    def atom(self, node):
        e = self.expr(node)
        if isinstance(e, ast.Tuple):
            raise self.err(node, "tuple used as a value", "unpack it: a, b = ...")
        return e if is_atom(e) else self.temp(e)

    def arg_value(self, node):
        """A helper's argument: an atom, or a tuple of atoms (passed whole)."""
        e = self.expr(node)
        if isinstance(e, ast.Tuple):
            return ast.Tuple(elts=[x if is_atom(x) else self.temp(x) for x in e.elts], ctx=ast.Load())
        return e if is_atom(e) else self.temp(e)

    def sub_block(self, stmts):
        saved, self.out = self.out, []
        self.block(stmts)
        body, self.out = self.out, saved
        return body

    # ---- functions ------------------------------------------------------
    def function(self):
        fn = self.info.tree
        body = fn.body
        early = any(isinstance(n, ast.Return) for s in body[:-1] for n in ast.walk(s)) or \
            (body and not isinstance(body[-1], ast.Return)
             and any(isinstance(n, ast.Return) for n in ast.walk(body[-1])))
        if early:
            self.set_origin(fn)
            self.ret_flag = self.fresh(f"{self.prefix_name()}returned")
            self.assign(self.ret_flag, const(False))
            self.block(body)
        else:
            last = body[-1] if body and isinstance(body[-1], ast.Return) else None
            self.block(body[:-1] if last else body)
            if last is not None:
                self.set_origin(last)
                return self.out, self.return_atoms(last), self.returns_tuple
            return self.out, [], False
        return self.out, [name(v) for v in (self.ret_vars or [])], self.returns_tuple

    def prefix_name(self):
        return f"{self.info.name}_" if self.helper else ""

    def return_atoms(self, node):
        if node.value is None:
            return []
        e = self.expr(node.value)
        if isinstance(e, ast.Tuple):
            self.returns_tuple = True
            return [x if is_atom(x) else self.temp(x) for x in e.elts]
        return [e if is_atom(e) else self.temp(e)]

    # ---- statements -----------------------------------------------------
    def block(self, stmts):
        for k, s in enumerate(stmts):
            self.set_origin(s)
            self.stmt(s)
            flags = self.jump_flags(s)
            rest = stmts[k + 1:]
            if flags and rest:
                self.set_origin(rest[0])
                go = self.guard(flags)
                body = self.sub_block(rest)
                self.emit(If(go, body, [], self.origin))
                return

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
        return self.temp(ast.UnaryOp(op=ast.Not(), operand=_any_flag(flags)), "go").id

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
        if isinstance(e, ast.Call):
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
        if isinstance(value, ast.Tuple):
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
        elems = self.ctx.tuples.setdefault(local, [self.fresh(f"{local}_{k}") for k in range(len(value.elts))])
        if len(elems) != len(value.elts):
            raise self.err(node, f"`{local}` bound to tuples of different lengths",
                           "keep one length per name")
        for e, v in zip(elems, value.elts):
            if isinstance(v, ast.Tuple):
                raise self.err(node, "a tuple nested in a tuple", "unpack the inner tuple first")
            self.assign(e, v if is_atom(v) else self.temp(v))

    def store(self, target, value, node, aug=False):
        if isinstance(target, ast.Name):
            if target.id in self.subst:
                raise self.err(node, "rebinding a parameter", "internal: parameter substitution")
            self.assign(self.local(target.id), value, aug=aug)
        elif isinstance(target, ast.Subscript):
            if not (isinstance(target.value, ast.Name) and self.is_local(target.value.id)):
                raise self.err(node, "writing into something other than a local array",
                               "write into an array variable: a[i] = v")
            arr = self.expr(target.value)
            if not isinstance(arr, ast.Name):
                raise self.err(node, "writing into a constant", "write into an array variable")
            index = self.index(target.slice)
            if not is_atom(value):
                value = self.temp(value)
            self.emit(Store(arr.id, index, value, self.origin))
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
        read = {n.id for _, a in pairs for n in ast.walk(a) if isinstance(n, ast.Name)}
        if len(pairs) > 1 and targets & read:
            pairs = [(t, a if isinstance(a, ast.Constant) else self.temp(a)) for t, a in pairs]
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
                pairs.append((t, ast.Subscript(value=ast.Attribute(value=arr, attr="shape", ctx=ast.Load()),
                                               slice=const(k), ctx=ast.Load())))
            return
        value = self.expr(value_node)
        if isinstance(value, ast.Name) and all(isinstance(t, (ast.Name, ast.Subscript)) for t in target.elts):
            # a tuple argument (a Numba tuple): its elements by position
            for k, t in enumerate(target.elts):
                pairs.append((t, self.temp(ast.Subscript(value=value, slice=const(k), ctx=ast.Load()))))
            return
        if not isinstance(value, ast.Tuple) or len(value.elts) != len(target.elts) \
                or not all(isinstance(t, (ast.Name, ast.Subscript)) for t in target.elts):
            raise self.err(s, "unpacking this value", "unpack a tuple literal, a helper's tuple "
                           "return or x.shape, with matching lengths")
        for t, a in zip(target.elts, value.elts):
            pairs.append((t, a if is_atom(a) else self.temp(a)))

    def stmt_AugAssign(self, s):
        t = s.target
        if isinstance(t, ast.Name):
            cur = self.expr(ast.Name(id=t.id, ctx=ast.Load()))
            self.store(t, ast.BinOp(left=cur, op=s.op, right=self.atom(s.value)), s, aug=True)
        elif isinstance(t, ast.Subscript):
            if not isinstance(t.value, ast.Name):
                raise self.err(s, "this augmented assignment", "use a[i] = a[i] + v")
            arr = self.expr(t.value)
            index = self.index(t.slice)
            cur = ast.Subscript(value=arr, slice=index, ctx=ast.Load())
            new = self.temp(ast.BinOp(left=cur, op=s.op, right=self.atom(s.value)))
            self.emit(Store(arr.id, index, new, self.origin))
        else:
            raise self.err(s, "this augmented assignment target", "assign to a name or an array element")

    def constant_test(self, node):
        """The truth value of a test made of constants only (None when it depends on data)."""
        saved = self.out
        self.out = []
        try:
            e = self.expr(node)
        except TransformError:
            e = None
        finally:
            emitted, self.out = self.out, saved
        if isinstance(e, ast.Constant) and not emitted:
            return bool(e.value)
        return None

    def condition(self, node):
        """The name an `If` tests: IR conditions are plain names."""
        cond = self.atom(node)
        return cond.id if isinstance(cond, ast.Name) else self.temp(cond, "cond").id

    def stmt_If(self, s):
        known = self.constant_test(s.test)
        if known is not None:
            # A branch on constants (module-level settings) is decided here, before anything is
            # differentiated: the dead branch never reaches Numba or the adjoint.
            self.block(s.body if known else s.orelse)
            return
        cond = self.condition(s.test)
        origin = self.origin
        body = self.sub_block(s.body)
        orelse = self.sub_block(s.orelse)
        self.emit(If(cond, body, orelse, origin))

    def stable(self, atom, body):
        """Copy a loop bound into a temporary when the loop body can change it."""
        changed = {self.local(n) for n in assigned_names(body)}
        if isinstance(atom, ast.Name) and atom.id in changed:
            return self.temp(atom, "bound")
        if is_shape(atom) and atom.value.value.id not in changed:
            return atom
        if isinstance(atom, ast.Subscript):
            return self.temp(atom, "bound")
        return atom

    def stmt_For(self, s):
        args = [self.atom(a) for a in s.iter.args]
        if len(args) == 1:
            args = [const(0), args[0], const(1)]
        elif len(args) == 2:
            args.append(const(1))
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
            body = self.sub_block_with_reset(s.body, cont, origin)
            self.loops.pop()
            self.emit(For(var, start, stop, step, body, origin))
            return
        if not (isinstance(step, ast.Constant) and step.value != 0):
            raise self.err(s, "`break` or `return` inside a for loop with a non-constant step",
                           "use a while loop")
        if brk:
            self.assign(brk, const(False))
        k = self.temp(start, "k")
        cmp = ast.Lt() if step.value > 0 else ast.Gt()
        more = self.temp(ast.Compare(left=k, ops=[cmp], comparators=[stop]), "more")
        self.loops.append((brk, cont))
        saved, self.out = self.out, []
        self.assign(var, k)
        if cont:
            self.assign(cont, const(False))
        self.block(s.body)
        self.origin = origin
        self.assign(k.id, ast.BinOp(left=k, op=ast.Add(), right=step))
        self.assign(more.id, ast.Compare(left=k, ops=[cmp], comparators=[stop]))
        self.stop_on_flags([f for f in (brk, self.ret_flag) if f], more.id)
        body, self.out = self.out, saved
        self.loops.pop()
        self.emit(While(more.id, body, self.fresh("n_iter"), origin))

    def sub_block_with_reset(self, stmts, cont, origin):
        saved, self.out = self.out, []
        if cont:
            self.origin = origin
            self.assign(cont, const(False))
        self.block(stmts)
        body, self.out = self.out, saved
        return body

    def stop_on_flags(self, flags, more):
        stop = self.temp(_any_flag(flags), "stop")
        self.emit(If(stop.id, [Assign(more, const(False), self.origin)], [], self.origin))

    def stmt_While(self, s):
        origin = self.origin
        more = self.fresh("more")
        self.assign(more, self.expr(s.test))
        has_break = _contains(s.body, ast.Break, False)
        has_cont = _contains(s.body, ast.Continue, False)
        brk = self.fresh("broke") if has_break else None
        cont = self.fresh("skip") if has_cont else None
        if brk:
            self.assign(brk, const(False))
        self.loops.append((brk, cont))
        saved, self.out = self.out, []
        if cont:
            self.assign(cont, const(False))
        self.block(s.body)
        self.origin = origin
        flags = [f for f in (brk, self.ret_flag if _contains(s.body, ast.Return, True) else None) if f]
        if flags:
            go = self.guard(flags)
            self.assign(more, const(False))
            test = self.sub_expr_block(s.test, more)
            self.emit(If(go, test, [], origin))
        else:
            self.assign(more, self.expr(s.test))
        body, self.out = self.out, saved
        self.loops.pop()
        self.emit(While(more, body, self.fresh("n_iter"), origin))

    def sub_expr_block(self, node, target):
        saved, self.out = self.out, []
        self.assign(target, self.expr(node))
        body, self.out = self.out, saved
        return body

    def stmt_Break(self, s):
        self.assign(self.loops[-1][0], const(True))

    def stmt_Continue(self, s):
        self.assign(self.loops[-1][1], const(True))

    def stmt_Return(self, s):
        atoms = self.return_atoms(s)
        if self.ret_vars is None:
            base = f"{self.info.name}_result" if self.helper else "result"
            self.ret_vars = [self.fresh(base) for _ in atoms]
        elif len(atoms) != len(self.ret_vars):
            raise self.err(s, "returns of different lengths", "return the same number of values everywhere")
        for v, a in zip(self.ret_vars, atoms):
            self.assign(v, a)
        self.assign(self.ret_flag, const(True))

    # ---- expressions ----------------------------------------------------
    def expr(self, node):
        method = getattr(self, "expr_" + type(node).__name__, None)
        if method is None:
            raise self.err(node, f"`{type(node).__name__}` expression", "see docs/subset.md for the supported subset")
        return method(node)

    def expr_Constant(self, node):
        if not isinstance(node.value, (bool, int, float)) and node.value is not None:
            raise self.err(node, "this constant", "use numbers only")
        return const(node.value)

    def expr_Name(self, node):
        n = node.id
        if n in self.subst:
            return copy.deepcopy(self.subst[n])
        if n in self.rename:
            elems = self.ctx.tuples.get(self.rename[n])
            if elems is not None:
                return ast.Tuple(elts=[name(e) for e in elems], ctx=ast.Load())
            return name(self.rename[n])
        kind = resolve(self.info, n)
        if kind[0] == "const":
            return const(_plain_number(kind[1]))
        if kind[0] == "array":
            raise self.err(node, f"global array `{n}`", "pass the array as an argument")
        if kind[0] == "missing":
            raise self.err(node, f"undefined name `{n}`", "define it before use")
        raise self.err(node, f"global `{n}` used as a value", "pass it as an argument")

    def operand(self, node):
        """An atom or an arithmetic subtree; anything else goes to a temporary."""
        e = self.expr(node)
        if isinstance(e, ast.Tuple):
            raise self.err(node, "tuple used as a value", "unpack it: a, b = ...")
        return e if is_atom(e) or is_tree(e) else self.temp(e)

    def expr_BinOp(self, node):
        if isinstance(node.op, _TREE_OPS):
            return _folded(ast.BinOp(left=self.operand(node.left), op=node.op, right=self.operand(node.right)))
        return _folded(ast.BinOp(left=self.atom(node.left), op=node.op, right=self.atom(node.right)))

    def expr_UnaryOp(self, node):
        if isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
                and isinstance(node.operand.value, (int, float)) and not isinstance(node.operand.value, bool):
            return const(-node.operand.value)
        if isinstance(node.op, (ast.USub, ast.UAdd)):
            return _folded(ast.UnaryOp(op=node.op, operand=self.operand(node.operand)))
        return _folded(ast.UnaryOp(op=node.op, operand=self.atom(node.operand)))

    def expr_Compare(self, node):
        if len(node.ops) == 1:
            return _folded(ast.Compare(left=self.atom(node.left), ops=node.ops,
                                       comparators=[self.atom(node.comparators[0])]))
        parts = []
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            parts.append(ast.Compare(left=left, ops=[op], comparators=[right]))
            left = right
        return self.expr(ast.BoolOp(op=ast.And(), values=parts))

    def expr_BoolOp(self, node):
        t = self.temp(self.expr(node.values[0]), "test")
        for v in node.values[1:]:
            cond = t if isinstance(node.op, ast.And) else self.temp(ast.UnaryOp(op=ast.Not(), operand=t), "test")
            origin = self.origin
            self.emit(If(cond.id, self.sub_expr_block(v, t.id), [], origin))
        return t

    def expr_IfExp(self, node):
        known = self.constant_test(node.test)
        if known is not None:
            return self.expr(node.body if known else node.orelse)
        cond = self.condition(node.test)
        t = self.fresh("choice")
        origin = self.origin
        body = self.sub_expr_block(node.body, t)
        orelse = self.sub_expr_block(node.orelse, t)
        self.emit(If(cond, body, orelse, origin))
        return name(t)

    def expr_Tuple(self, node):
        return ast.Tuple(elts=[self.atom(e) for e in node.elts], ctx=ast.Load())

    def index(self, node):
        if isinstance(node, ast.Tuple):
            return ast.Tuple(elts=[self.index(e) for e in node.elts], ctx=ast.Load())
        if isinstance(node, ast.Slice):
            return ast.Slice(lower=self.atom(node.lower) if node.lower else None,
                             upper=self.atom(node.upper) if node.upper else None,
                             step=self.atom(node.step) if node.step else None)
        a = self.atom(node)
        if isinstance(a, ast.Subscript):
            a = self.temp(a, "idx")
        return a

    def expr_Subscript(self, node):
        v = node.value
        if isinstance(v, ast.Attribute) and v.attr == "shape":
            arr = self.atom(v.value)
            return ast.Subscript(value=ast.Attribute(value=arr, attr="shape", ctx=ast.Load()),
                                 slice=self.index(node.slice), ctx=ast.Load())
        if isinstance(v, ast.Name):
            whole = self.expr(v)
            if isinstance(whole, ast.Tuple):
                k = node.slice.value if isinstance(node.slice, ast.Constant) else None
                if not isinstance(k, int) or not -len(whole.elts) <= k < len(whole.elts):
                    raise self.err(node, "indexing a tuple with something other than a constant in range",
                                   "index tuples with constants, or unpack them: a, b = t")
                return whole.elts[k]
        base = self.atom(v)
        if not isinstance(base, ast.Name):
            base = self.temp(base)
        return ast.Subscript(value=base, slice=self.index(node.slice), ctx=ast.Load())

    def module_path(self, node):
        """'np.linalg' / 'math' for an attribute chain rooted at a module, else None."""
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
        path = ".".join([root] + list(reversed(parts))) if root else None
        return path, obj

    def expr_Attribute(self, node):
        path, obj = self.module_path(node)
        if path is not None and obj is None and node.attr == "newaxis":
            return const(None)
        if path is not None and isinstance(obj, (int, float)):
            return ast.Attribute(value=name(path.split(".")[0]), attr=node.attr, ctx=ast.Load()) \
                if path.count(".") == 1 else const(obj)
        if isinstance(node.value, ast.Name) and self.is_local(node.value.id):
            base = self.atom(node.value)
            if node.attr in ("shape", "ndim", "size", "dtype"):
                return ast.Attribute(value=base, attr=node.attr, ctx=ast.Load())
            if node.attr == "T":
                return self.call("np.transpose", [base], [])
        raise self.err(node, f"attribute `.{node.attr}`", "only .shape, .ndim, .size, .dtype and .T of arrays "
                       "and constants of math/numpy are supported; attributes of user objects are not")

    def call(self, fn, args, keywords):
        func = ast.Name(id=fn, ctx=ast.Load()) if "." not in fn else ast.parse(fn, mode="eval").body
        c = ast.Call(func=func, args=args, keywords=keywords)
        c.srcad_fn = fn
        return c

    def expr_Call(self, node):
        f = node.func
        kws = [ast.keyword(arg=k.arg, value=self.kw_value(k.value)) for k in node.keywords]
        if any(k.arg is None for k in node.keywords):
            raise self.err(node, "**kwargs in a call", "pass arguments explicitly")
        if isinstance(f, ast.Name) and not self.is_local(f.id):
            kind = resolve(self.info, f.id)
            if kind[0] == "function":
                return self.inline(kind[1], node)
            if kind[0] == "stop_gradient":
                return self.stop_gradient(node)
            if kind[0] == "callable":
                return self.call(kind[1], self.call_args(kind[1], node.args, kws), kws)
            if kind[0] == "builtin" and f.id in _BUILTINS:
                return self.call(f.id, self.call_args(f.id, node.args, kws), kws)
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
                    canon = canon or path
                    return self.call(canon, self.call_args(canon, node.args, kws), kws)
            if f.attr in _METHODS and (not isinstance(f.value, ast.Name) or self.is_local(f.value.id)):
                base = self.atom(f.value)
                return self.call(_METHODS[f.attr], [base] + [self.arg(a) for a in node.args], kws)
            if isinstance(f.value, ast.Name) and self.is_local(f.value.id) and f.attr == "astype":
                base = self.atom(f.value)
                return ast.Call(func=ast.Attribute(value=base, attr="astype", ctx=ast.Load()),
                                args=[self.kw_value(a) for a in node.args], keywords=[])
        raise self.err(node, "this call", "call math/NumPy functions, plain Python functions, or the array "
                       "methods " + ", ".join(sorted(_METHODS)))

    def call_args(self, fn, args, kws):
        if fn in ELEMENTWISE and not kws and not any(isinstance(a, ast.Tuple) for a in args):
            return [self.operand(a) for a in args]
        return [self.arg(a) for a in args]

    def kw_value(self, v):
        path, obj = self.module_path(v) if isinstance(v, ast.Attribute) else (None, None)
        if path is not None:
            return ast.parse(path, mode="eval").body
        return self.arg(v)

    def arg(self, a):
        if isinstance(a, ast.Tuple):
            return self.expr_Tuple(a)
        if isinstance(a, ast.Attribute):
            path, obj = self.module_path(a)
            if path is not None and not isinstance(obj, (int, float)) and obj is not None:
                return ast.parse(path, mode="eval").body
            if a.attr == "dtype":
                return self.expr_Attribute(a)
        return self.atom(a)

    def stop_gradient(self, node):
        if len(node.args) != 1:
            raise self.err(node, "stop_gradient with several arguments", "pass one value")
        t = self.fresh("stopped")
        self.assign(t, self.atom(node.args[0]), nodiff=True)
        return name(t)

    def inline(self, pyfunc, node):
        if pyfunc in self.ctx.stack:
            raise self.err(node, f"recursion (`{pyfunc.__name__}` calls itself)",
                           "rewrite the recursion as a loop")
        if node.keywords:
            raise self.err(node, "keyword arguments to a helper function", "pass arguments by position")
        info = self.ctx.load(pyfunc)
        params = [a.arg for a in info.tree.args.args]
        if len(params) != len(node.args):
            raise self.err(node, f"call to `{info.name}` with {len(node.args)} arguments "
                           f"(it takes {len(params)})", "pass every parameter")
        args = [self.arg_value(a) for a in node.args]
        k = self.ctx.sites.get(info.name, 0) + 1
        self.ctx.sites[info.name] = k
        prefix = info.name if k == 1 else f"{info.name}{k}"
        assigned = assigned_names(info.tree.body)
        locals_ = assigned | set(params)
        rename, subst = {}, {}
        for p, a in zip(params, args):
            if p not in assigned and isinstance(a, (ast.Name, ast.Constant, ast.Tuple)):
                subst[p] = a
        for n in sorted(locals_):
            if n not in subst:
                rename[n] = self.fresh(f"{prefix}_{n}")
        for p, a in zip(params, args):
            if p not in subst:
                if isinstance(a, ast.Tuple):
                    self.bind_tuple(rename[p], a, node)
                else:
                    self.assign(rename[p], a)
        self.ctx.stack.append(pyfunc)
        sub = Lowerer(self.ctx, info, rename, subst, True)
        body, outs, is_tuple = sub.function()
        self.ctx.stack.pop()
        self.out.extend(body)
        # A helper's returned local is dead after the call: binding it is a move, not an alias.
        self.ctx.moved.update(o.id for o in outs if isinstance(o, ast.Name) and o.id in rename.values())
        if is_tuple:
            return ast.Tuple(elts=outs, ctx=ast.Load())
        if not outs:
            return const(0)
        return outs[0]


def _folded(e):
    """`e` as a constant when all its operands are constants (`ORDER > 1` with ORDER a global)."""
    kids = [e.left, e.right] if isinstance(e, ast.BinOp) else [e.operand] if isinstance(e, ast.UnaryOp) \
        else [e.left] + e.comparators
    if not all(isinstance(k, ast.Constant) for k in kids):
        return e
    try:
        tree = ast.fix_missing_locations(ast.Expression(body=copy.deepcopy(e)))
        value = eval(compile(tree, "<constant>", "eval"), {"__builtins__": {}})
    except (ArithmeticError, TypeError, ValueError):
        return e
    return const(value) if isinstance(value, (bool, int, float)) else e


def _plain_number(v):
    """A global constant as a Python literal (NumPy scalars included)."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    return float(v)


def lower(top_info):
    """Lower the top function and everything it calls into a Program."""
    ctx = Context(top_info)
    params = [a.arg for a in top_info.tree.args.args]
    assigned = assigned_names(top_info.tree.body)
    rename = {n: n for n in assigned | set(params)}
    copies = {}
    for p in params:
        if p in assigned:
            rename[p] = ctx.names.fresh(f"{p}_local")
            copies[p] = rename[p]
    low = Lowerer(ctx, top_info, rename, {}, False)
    low.set_origin(top_info.tree)
    for p, local in copies.items():
        low.assign(local, name(p))
    body, outs, is_tuple = low.function()
    if not outs:
        raise top_info.error(top_info.tree, "a function that returns nothing",
                             "return the value(s) to differentiate")
    return Program(top_info.name, params, body, outs, is_tuple, ctx.infos, copies, ctx.names, ctx.moved)
