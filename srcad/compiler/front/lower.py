"""Lowering of user functions (Python AST) to the IR.

Every statement does one thing on atoms, or computes one elementwise tree
over atoms (see `ir.forms`), so each derivative rule reads only atoms.
Control flow is reduced to `If`, `For` over a range and `While` with one
exit per loop and per function: `break`, `continue` and an early `return`
become flags that guard the statements after them. Called helper functions
are inlined with their locals renamed. Conditions made of constants (module
settings such as `if ORDER > 1:`, a local that holds a known number where it
is tested, as `power = abs(n)` of a helper called with n = 5) are decided
here, so the dead branch never reaches Numba or the adjoint. Each statement remembers the user line it came from.
"""
import ast
import builtins
import copy
from dataclasses import dataclass, replace
import inspect
import operator

import numpy as np

from ..ad.rules import is_elementwise
from ..errors import RuleError, TransformError, where
from ..runtime import EXPORTS, freeze
from ..ir import (Accumulate, Assign, Attribute, BinOp, Call, Compare, Const, Effect, For, Function, Global, If, Name, Names, Slice,
                  Store, Subscript, Tuple, UnaryOp, While)
from ..ir.facts import Lowered
from ..ir.forms import is_atom, is_shape_entry, is_tree
from ..ir.visit import names_in
from . import einsum, numpy_in_python
from .parse import FuncInfo, all_names, canonical_callable, is_stop_gradient, load, loop_kind, resolve, unwrap
from .rules_of_functions import rule_of

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
            "reshape": "np.reshape", "cumsum": "np.cumsum", "var": "np.var", "std": "np.std", "trace": "np.trace",
            "conj": "np.conj", "conjugate": "np.conj", "argmax": "np.argmax", "argmin": "np.argmin"}
_NOT_STATIC = object()
_NUMBERS = (bool, int, float, np.integer, np.floating, np.bool_)
# NumPy calls evaluated when compiling, on constant arguments: `np.finfo(np.float64).tiny`
_STATIC_CALLS = {"np.finfo", "np.iinfo"}
_BUILTINS = {"abs", "min", "max", "float", "int", "len", "round", "bool", "sum"}
# builtins of constant numbers evaluated when compiling, typed as Numba types them (min(1, 2.0) is 1.0)
_FOLDED_CALLS = {"abs": abs, "min": lambda *v: _unified(min(*v), v), "max": lambda *v: _unified(max(*v), v)}
_UNROLLED = 64         # the longest list comprehension written out as a list literal
# NumPy functions Numba lacks, which srcad's runtime supplies to compiled code
_SUPPLIED = {"np.tile": "srcad.tile"}
# NumPy functions without a derivative rule of their own, written as functions that have one (the method
# of `_Lowerer` that writes the call; it gives None for a form it does not take, which stays as it is)
WRITTEN_AS = {"np.ptp": "peak_to_peak", "np.ediff1d": "differences_of_flat", "np.take": "taken",
              "np.nancumsum": "nancumsum", "np.nanprod": "nanprod", "np.vstack": "stacked_rows",
              "np.cumprod": "running_product", "np.nancumprod": "nan_running_product", "np.convolve": "convolution",
              "np.correlate": "correlation", "np.vander": "vandermonde", "np.linalg.slogdet": "sign_and_log_det",
              "np.linalg.eigh": "eigenvalues_and_vectors", "np.linalg.svd": "singular_value_decomposition",
              "np.linalg.qr": "q_and_r", "np.linalg.lstsq": "least_squares", "np.linalg.eig": "general_eigen",
              "np.linalg.eigvals": "general_eigenvalues", "np.einsum": "contraction"}
# NumPy functions written in Python (`numpy_in_python`), inlined where called like a user's helper
WRITTEN_IN_PYTHON = {f"np.{name}": getattr(numpy_in_python, name) for name in (
    "interp", "percentile", "nanpercentile", "quantile", "nanquantile", "cov", "corrcoef")} | \
    {"np.linalg.matrix_power": numpy_in_python.matrix_power, "np.linalg.cond": numpy_in_python.condition_number}
# parameters passed by keyword that derivative rules read by position, and their defaults
_POSITIONAL = {"np.full": ("shape", "fill_value"), "np.full_like": ("a", "fill_value"),
               "np.linspace": ("start", "stop", "num")}
_DEFAULTS = {"np.linspace": {2: Const(50)}}
# the keyword a second positional argument stands for (`np.sum(A, 1)` is `np.sum(A, axis=1)`), as rules read it
_SECOND_KEYWORD = dict.fromkeys(("np.sum", "np.mean", "np.prod", "np.max", "np.min", "np.amax", "np.amin", "np.cumsum",
                                 "np.var", "np.std", "np.concatenate", "np.stack", "np.sort", "np.argmax",
                                 "np.argmin", "np.median"), "axis") | {"np.linalg.norm": "ord"}
# reductions along an axis that Numba lacks, by the runtime helper that makes them
_ALONG_AN_AXIS = {"np.max": "srcad.max_along", "np.amax": "srcad.max_along", "np.min": "srcad.min_along",
                  "np.amin": "srcad.min_along"}
# names generated code uses for modules, types and runtime helpers: a user name among them is renamed
RESERVED = {"np", "math", "numba", "List", "types", "range", "len", "abs", "min", "max", "float", "int"} | \
    set(EXPORTS)


def lower(top, nones=frozenset(), options=None, differentiated=False, integers=frozenset(), integer_arrays=frozenset(),
          list_rows=None):
    """The IR Function of parsed function `top` (a FuncInfo), with everything it calls inlined. The
    parameters in `nones` are passed None: tests of them (`if w is None:`) are decided here, as for
    module constants, so the branch that would use them as values is dropped. `options` maps the
    parameters passed strings (`method="linear"`) or functions to them: constants of this compile, as
    in Numba. `differentiated`: the code will be differentiated, so functions with a custom rule
    (`f.defjvp`) are called through it, `top` too. `integers`, `integer_arrays`: the parameters passed
    integers, and arrays of them (they tell a list of integers from one of floats). `list_rows`: the lists
    grown by append whose items are arrays (found when typing: `pipeline.ListOfArrays`) -> their items'
    (rank, dtype); such a list is kept as the rows of one array."""
    ctx = _Context(top, differentiated)
    ctx.list_rows = dict(list_rows or {})
    options = options or {}
    params = [a.arg for a in top.tree.args.args]
    assigned = _assigned_names(top.tree.body)
    outer = {n: ctx.names.fresh(f"{n}_", spelled=n) for n in sorted((assigned | set(params)) & RESERVED)}
    rename = {n: outer.get(n, n) for n in assigned | set(params)}
    copies = {}
    for p in params:
        if p in assigned:          # a parameter the body rebinds: the body works on a local copy
            rename[p] = copies[p] = ctx.names.fresh(f"{p}_local", spelled=p)
    low = _Lowerer(ctx, top, rename, {p: _Callee(pyfunc=unwrap(v)) if inspect.isfunction(unwrap(v)) else Const(v)
                                      for p, v in options.items() if p not in copies}, helper=False,
                   nones={p for p in nones if p not in copies})
    ctx.ints |= {n for p in integers for n in (outer.get(p, p), rename.get(p, p))}
    ctx.int_arrays |= {n for p in integer_arrays for n in (outer.get(p, p), rename.get(p, p))}
    low.at(top.tree)
    rule = rule_of(top.pyfunc) if differentiated else None
    if rule is not None and rule.jvp is not None:      # a custom VJP is the caller's to use (function.py)
        args = [Const(None) if p in nones else low.subst.get(p, Name(outer.get(p, p))) for p in params]
        body, outs, is_tuple = low.out, *low.through_rule(rule, top.name, args, top.tree)
    else:
        for p, local in copies.items():
            low.assign(local, Const(None) if p in nones else Name(outer.get(p, p)))
        body, outs, is_tuple = low.function()
    body[:0] = ctx.frozen.values()       # module-level arrays read, bound once on entry
    if not outs:
        raise top.error(top.tree, "a function that returns nothing", "return the value(s) to differentiate")
    name = top.name if top.name not in RESERVED else f"{top.name}_function"   # (not a helper's name: `eigenvectors`)
    fn = Function(name, [outer.get(p, p) for p in params], body, outs, is_tuple, names=ctx.names, sources=ctx.infos)
    fn.facts.put(Lowered(ctx.moved, ctx.results, {items: name for name, (items, _) in ctx.lists.items()}))
    return fn


class _Context:
    """What the lowering of one top function shares across the helpers it inlines."""

    def __init__(self, top, differentiated=False):
        self.differentiated = differentiated
        self.rule_sites = []         # functions called through a custom VJP, by key (`through_vjp_rule`)
        self.names = Names(all_names(top.tree) | RESERVED)
        self.moved = set()           # names bound by a helper's result: a move, not an alias
        self.results = {}            # name bound where a function returns early -> its call (Origin.call)
        self.calls = 0               # helper calls inlined so far
        self.stack = [top.pyfunc]    # helpers being inlined (recursion is refused)
        self.infos = [top]
        self.loaded = {}
        self.sites = {}              # helper name -> number of call sites inlined so far
        self.tuples = {}             # local bound to a tuple -> the names of its elements
        self.records = {}            # a tuple made by a named tuple class (its items' names) -> its fields
        self.lists = {}              # local bound to a list grown by append -> (its items, its length)
        self.list_storage = {}       # items of a list -> the statements allocating them (`new_list`)
        self.list_dtype = {}         # items of a list -> np.int64 once an integer is appended first
        self.list_rows = {}          # local bound to a list of arrays -> the items' (rank, dtype)
        self.ints = set()            # names known to hold integers as lowering goes (`int_valued`)
        self.numbers = {}            # local -> the number it holds here, as lowering goes (`constant_test`)
        self.int_arrays = set()      # parameters that are arrays of integers
        self.frozen = {}             # key of a module-level array read (`freeze`) -> the statement binding it

    def load(self, pyfunc):
        if pyfunc not in self.loaded:
            info = load(pyfunc, helper=True)
            self.loaded[pyfunc] = info
            self.infos.append(info)
            self.names.used |= all_names(info.tree)
        return self.loaded[pyfunc]


def _is_named_tuple(value):
    """Is `value` a named tuple class (`collections.namedtuple`, `typing.NamedTuple`)?"""
    return isinstance(value, type) and issubclass(value, tuple) and hasattr(value, "_fields")


class _Renamed(ast.NodeTransformer):
    """An AST with names renamed (`mapping`: old -> new), read or bound."""

    def __init__(self, mapping):
        self.mapping = mapping

    def visit_Name(self, node):
        return ast.copy_location(ast.Name(self.mapping.get(node.id, node.id), node.ctx), node)


def _storage(dtype):
    """The first storage of a list grown by append: 16 items, floats or (`dtype` "np.int64") integers."""
    return Call("np.empty", (Const(16),) + ((Global(dtype),) if dtype else ()))


def _rows_storage(rank, dtype):
    """The first storage of a list of arrays of `rank`: no row yet (`runtime.list_rows_room` makes the first
    sixteen rows of the first item's shape)."""
    return Call("np.empty", (Tuple((Const(0),) * (rank + 1)), Global(dtype)))


def _count(items):
    return "one value" if items is None else f"a tuple of {len(items)}"


def _assigned_names(stmts):
    return {node.id for s in stmts for node in ast.walk(s)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}


def _contains(stmts, kinds, into_loops):
    """Is one of `kinds` among `stmts` or the statements nested in them (not in a nested `def`, and
    not in a loop's body unless `into_loops`)?"""
    for s in stmts:
        if isinstance(s, kinds):
            return True
        if isinstance(s, ast.FunctionDef):
            continue
        for field_name in ("body", "orelse"):
            sub = getattr(s, field_name, None)
            if not sub or (isinstance(s, (ast.For, ast.While)) and field_name == "body" and not into_loops):
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


@dataclass(frozen=True, eq=False)
class _Callee:
    """A function known when compiling, as Numba takes functions (a constant of the compile): a Python
    function, or a `def` inside the compiled code with the lowerer it was defined in (`definer`), whose
    names it reads when called, as a Python closure reads them; `defaults` are evaluated where defined."""
    pyfunc: object = None
    info: object = None
    definer: object = None
    defaults: dict = None

    @property
    def key(self):
        return self.pyfunc if self.pyfunc is not None else self.info.tree

    @property
    def name(self):
        return self.pyfunc.__name__ if self.pyfunc is not None else self.info.name


def _default_value(v):
    """A helper's default value as the IR takes it: a function stays a function."""
    return _Callee(pyfunc=unwrap(v)) if inspect.isfunction(unwrap(v)) else Const(_plain_number(v))


def _flag_breaks(stmts, flag):
    """`stmts` with `flag = True` before each `break` of their loop (not of loops nested in them)."""
    out = []
    for s in stmts:
        if isinstance(s, ast.Break):
            out.append(ast.copy_location(ast.Assign(targets=[ast.Name(id=flag, ctx=ast.Store())],
                                                    value=ast.Constant(True)), s))
            out.append(s)
        elif isinstance(s, (ast.If, ast.For, ast.While)):
            s = copy.copy(s)
            if isinstance(s, ast.If):
                s.body = _flag_breaks(s.body, flag)
            s.orelse = _flag_breaks(s.orelse, flag)
            out.append(s)
        else:
            out.append(s)
    return out


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


def _same_number(a, b):
    """Are `a` and `b` the same Const (of the same type: 1 and 1.0 and True are three)?"""
    return isinstance(a, Const) and isinstance(b, Const) and type(a.value) is type(b.value) and a.value == b.value


def _same_numbers(a, b):
    """What two ways of reaching a point (`ctx.numbers` along each) both know there."""
    return {n: v for n, v in a.items() if _same_number(v, b.get(n))}


def _with_numbers(e, numbers):
    """IR expression `e` with the locals that hold `numbers` read as them, folded where that makes it a
    constant (`abs(p)` where p holds 5 is 5)."""
    if isinstance(e, Name):
        return numbers.get(e.id, e)
    if isinstance(e, (BinOp, Compare)):
        return folded(replace(e, left=_with_numbers(e.left, numbers), right=_with_numbers(e.right, numbers)))
    if isinstance(e, UnaryOp):
        return folded(replace(e, operand=_with_numbers(e.operand, numbers)))
    if isinstance(e, Call) and e.fn in _FOLDED_CALLS:
        return folded(replace(e, args=tuple(_with_numbers(a, numbers) for a in e.args)))
    return e


def _unified(value, args):
    return float(value) if any(type(a) is float for a in args) else value


def folded(e):
    """`e` as a constant when it is an operator (or abs, min, max) on constants only (`ORDER > 1` with
    ORDER a global)."""
    if isinstance(e, (BinOp, Compare)) and isinstance(e.left, Const) and isinstance(e.right, Const):
        args = (e.left.value, e.right.value)
        op = _FOLD.get(e.op)
    elif isinstance(e, UnaryOp) and isinstance(e.operand, Const):
        args = (e.operand.value,)
        op = {"-": operator.neg, "+": operator.pos, "not": operator.not_}.get(e.op)
    elif isinstance(e, Call) and e.fn in _FOLDED_CALLS and e.args and \
            all(isinstance(a, Const) and type(a.value) in (int, float) for a in e.args):
        args = tuple(a.value for a in e.args)
        op = _FOLDED_CALLS[e.fn]
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


def add_into(array, index, value):
    """`array[index] += value`, made by many threads at once: a kernel's `cuda.atomic.add`
    (srcad/cuda/kernels.py), lowered to an accumulation, never a read and a write."""
    array[index] += value


class _Lowerer:
    """Lowers one function body (the top function or an inlined helper)."""

    def __init__(self, ctx, info, rename, subst, helper, call_path=(), nones=frozenset()):
        self.ctx, self.info = ctx, info
        self.rename, self.subst = rename, subst
        self.nones = nones           # parameters passed None: only `is None` tests may read them
        self.given = frozenset()     # parameters passed something else, where that decides `is None` tests
        self.helper = helper
        self.call_path = call_path   # this inlined call of a helper (Origin.call)
        self.known = {}              # id of a test's AST node -> (the node, its value when made of constants, or None)
        self.out = []
        self.loops = []              # (break flag, continue flag) of the enclosing loops
        self.ret_flag = None
        self.ret_vars = None
        self.returns_tuple = False
        self.origin = None
        self.defs = {}               # functions defined by `def` in this body, by name (_Callee)
        self.rule = False            # a custom rule's body: it returns tuples of tuples, `(out, out_tangent)`
        self.deciding = False        # lowering a test to decide it (`_constant_test`)

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
        if self.int_valued(value):
            self.ctx.ints.add(target)
        else:
            self.ctx.ints.discard(target)
        number = _with_numbers(value, self.ctx.numbers)
        if isinstance(number, Const) and isinstance(number.value, (bool, int, float)):
            self.ctx.numbers[target] = number
        else:
            self.ctx.numbers.pop(target, None)
        self.emit(Assign(target, value, self.origin))

    def int_valued(self, e):
        """Does `e` hold an integer, as far as lowering can tell (literals, loop indices, lengths, shapes,
        arithmetic of those, elements of integer arrays passed in)? It decides the storage of a list that
        integers are appended to."""
        if isinstance(e, Const):
            return type(e.value) is int
        if isinstance(e, Name):
            return e.id in self.ctx.ints
        if isinstance(e, BinOp):
            return e.op in ("+", "-", "*", "//", "%") and self.int_valued(e.left) and self.int_valued(e.right)
        if isinstance(e, UnaryOp):
            return e.op in ("-", "+") and self.int_valued(e.operand)
        if isinstance(e, Call):
            return e.fn in ("len", "int", "round", "np.argmax", "np.argmin") or \
                (e.fn in ("abs", "min", "max") and all(self.int_valued(a) for a in e.args))
        if isinstance(e, Subscript):
            if isinstance(e.base, Attribute):
                return e.base.attr == "shape"
            return isinstance(e.base, Name) and e.base.id in self.ctx.int_arrays and \
                not any(isinstance(i, Slice) or not self.int_valued(i) for i in e.index)
        return False

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
        early = _contains(body[:-1], ast.Return, True) or \
            (body and not isinstance(body[-1], ast.Return) and _contains(body[-1:], ast.Return, True))
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
            return [self.tuple_item(x) if self.rule else self.as_atom(x) for x in e.items]
        return [self.as_atom(e)]

    # ---- statements ------------------------------------------------------------------------------
    def block(self, stmts):
        for k, s in enumerate(stmts):
            self.at(s)
            self.stmt(s)
            if self.always_returns(s):
                return               # the rest never runs (and may not even type: `if w is None: return`)
            flags = [f for f in self.jump_flags(s) if not _same_number(self.ctx.numbers.get(f), Const(False))]
            rest = stmts[k + 1:]
            if flags and rest:      # (a flag still False here: its `break`, `continue` or `return` was not lowered)
                self.at(rest[0])
                go = self.guard(flags)
                before = dict(self.ctx.numbers)
                body = self.sub_block(rest)
                self.ctx.numbers = _same_numbers(before, self.ctx.numbers)     # (the rest may not run)
                self.emit(If(go, body, [], self.origin))
                return

    def always_returns(self, s):
        """Does statement `s` return (or raise) on every path, its constant tests decided as `stmt_If`
        decides them?"""
        if isinstance(s, (ast.Return, ast.Raise)):
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
        """Lowers `s`, keeping `ctx.numbers` true after it: a name a loop binds holds no known number in
        the loop (it is read from the last iteration); after a loop, a name holds what it held before
        only where the body leaves it so (`_same_numbers`; an `If` meets its branches itself)."""
        method = getattr(self, "stmt_" + type(s).__name__, None)
        if method is None:
            raise self.err(s, f"`{type(s).__name__}` statement", "see docs/subset.md for the supported subset")
        if not hasattr(s, "body") or isinstance(s, ast.If):
            method(s)
            return
        written = {self.local(n) for n in _assigned_names([s])}
        before = {n: v for n, v in self.ctx.numbers.items() if n not in written}
        self.ctx.numbers = dict(before)
        method(s)
        self.ctx.numbers = _same_numbers(before, self.ctx.numbers)

    def stmt_Pass(self, s):
        pass

    def stmt_Expr(self, s):
        if isinstance(s.value, ast.Constant) and isinstance(s.value.value, str):
            return                # a string standing as a comment, as Numba ignores it
        if not isinstance(s.value, ast.Call):
            raise self.err(s, "expression statement", "assign the value to a name or remove it")
        callee = self.callee(s.value.func)
        if callee is not None and callee.pyfunc is add_into:
            self.add_into(*s.value.args)
            return
        e = self.expr(s.value)
        if isinstance(e, Call):
            self.temp(e)

    def add_into(self, array, index, value):
        """`add_into(a, i, v)`: an element accumulation, which threads running at once may make into
        one element (a kernel's `cuda.atomic.add`)."""
        element = self.expr(ast.Subscript(array, index, ast.Load()))
        if not isinstance(element, Subscript):
            raise self.err(array, "adding into something other than one array element", "add into `a[i]`")
        self.emit(Accumulate(element, self.atom(value), origin=self.origin))

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
        if isinstance(target, ast.Name) and isinstance(s.value, ast.List) and not s.value.elts:
            self.new_list(self.local(target.id))
            return
        if isinstance(target, ast.Name) and isinstance(s.value, ast.ListComp) and \
                self.unrolled_items(s.value) is None and not isinstance(s.value.elt, (ast.List, ast.ListComp)):
            self.comprehension_list(s.value, self.local(target.id))
            return
        if isinstance(target, ast.Name) and self.local(target.id) in self.ctx.lists:
            raise self.err(s, f"`{target.id}` bound to a list and to another value", "use a different name for each")
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
        bound, fields = Tuple(tuple(Name(e) for e in elems)), self.ctx.records.get(value)
        if fields is not None:
            self.ctx.records.setdefault(bound, fields)
        if self.ctx.records.get(bound) != fields:
            raise self.err(node, f"`{local}` bound to a named tuple and to another tuple",
                           "use a different name for each")
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
            items = self.list_of(target.value)
            if items is not None:
                self.emit(Store(items[0], (self.list_index(items, target.slice),), self.as_atom(value), self.origin))
                return
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
        targets = {self.local(t.id if isinstance(t, ast.Name) else getattr(t.value, "id", None)) for t, _ in pairs}
        read = {n for _, a in pairs for n in names_in(a)}     # IR names: compare with the targets' IR names
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
            self.ctx.numbers.pop(cur.id, None)
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
        known = self.known.get(id(node))
        if known is None or known[0] is not node:      # (kept with the node: a copied test, freed, frees its id)
            known = self.known[id(node)] = (node, self._constant_test(node))
        return known[1]

    def known_number(self, atom):
        """`atom`, or the number it holds here while a test is decided (a local of this body, or the
        caller's local a helper's parameter stands for)."""
        if self.deciding and isinstance(atom, Name):
            return self.ctx.numbers.get(atom.id, atom)
        return atom

    def _constant_test(self, node):
        """Reads the locals that hold a known number here as that number (`if power == 1:` after
        `power = abs(n)` of a constant `n`), so the branch that does not run is not lowered at all."""
        saved = self.out
        self.out, self.deciding = [], True
        try:
            e = self.expr(node)
        except TransformError:
            e = None
        finally:
            emitted, self.out, self.deciding = self.out, saved, False
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
        if cond.id in {self.local(n) for n in _assigned_names(s.body + s.orelse)}:
            cond = self.temp(cond, "cond")   # (`if first: first = False`: the adjoint tests the value on entry)
        origin = self.origin
        before = dict(self.ctx.numbers)
        body = self.sub_block(s.body)
        after_body, self.ctx.numbers = self.ctx.numbers, before
        orelse = self.sub_block(s.orelse)
        self.ctx.numbers = _same_numbers(after_body, self.ctx.numbers)
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
        if s.orelse or not self.counted(s):
            self.for_each(s)
            return
        args = [self.atom(a) for a in s.iter.args]
        if len(args) == 1:
            args = [Const(0), args[0], Const(1)]
        elif len(args) == 2:
            args.append(Const(1))
        start, stop, step = (self.stable(a, s.body) for a in args)
        var = self.local(s.target.id)
        self.ctx.ints.add(var)
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
            kind = loop_kind(self.info, s.iter.func)
            self.emit(For(var, start, stop, step, body, origin, parallel=kind in ("prange", "phase"),
                          phase=kind == "phase"))
            return
        if not (isinstance(step, Const) and step.value != 0):
            raise self.err(s, "`break` or `return` inside a for loop with a non-constant step",
                           "use a while loop")
        if brk:
            self.assign(brk, Const(False))
        k = self.temp(start, "k")
        self.ctx.numbers.pop(k.id, None)     # (the count the body reads changes every iteration)
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
        self.emit(While(more.id, body, origin, bound=Call("srcad.trip_count", (start, stop, step))))

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
        if s.orelse:
            self.loop_else(s)
            return
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

    # ---- loops over sequences, loop `else` --------------------------------------------------------
    def counted(self, s):
        """Is `s` a `for name in range(...)` loop (or prange), which the IR's `For` states directly?"""
        it = s.iter
        return isinstance(it, ast.Call) and not it.keywords and 1 <= len(it.args) <= 3 and \
            isinstance(s.target, ast.Name) and loop_kind(self.info, it.func) is not None

    def synthetic(self, value, base):
        """An AST name that stands for the IR value `value` (bound once, never rebound)."""
        name = self.fresh(base)
        self.subst[name] = value
        return ast.Name(id=name, ctx=ast.Load())

    def for_each(self, s):
        """`for target in seq:` over an array (its elements, or rows), a table of numbers, `enumerate`,
        `zip` or `range`: a loop over range(n) whose body first binds `target` to the k-th item, as
        Python binds it (the sequence is read once; its elements when their turn comes)."""
        if self.counted(s):
            self.loop_else(s)
            return
        n, item = self.iterable(s.iter, s)
        k = self.fresh("k")
        self.rename[k] = k
        index = ast.Name(id=k, ctx=ast.Load())
        bind = ast.copy_location(ast.Assign(targets=[s.target], value=item(index)), s)
        header = ast.Call(func=ast.Name(id="range", ctx=ast.Load()), args=[self.synthetic(n, "n")], keywords=[])
        loop = ast.fix_missing_locations(ast.copy_location(
            ast.For(target=ast.Name(id=k, ctx=ast.Store()), iter=header, body=[bind] + s.body, orelse=s.orelse,
                    type_comment=None), s))
        self.stmt_For(loop)

    def iterable(self, node, s):
        """(length, item) of what `for` loop `s` walks: `item(k)` is the AST of its k-th element."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not self.is_local(node.func.id):
            kind = resolve(self.info, node.func.id)
            if kind[0] == "builtin" and kind[1] in ("enumerate", "zip", "range"):
                return getattr(self, "iter_" + kind[1])(node, s)
            if kind[0] == "builtin":
                raise self.err(node, f"`for` over {kind[1]}(...)", "loop over indices: for i in range(len(a)): "
                               "... a[i] ...")
        value = self.expr(node)
        if isinstance(value, Tuple):
            if not all(isinstance(x, Const) for x in value.items):
                return Const(len(value.items)), self.choice_of_items(value, s)
            seq = self.synthetic(value, "seq")
            return Const(len(value.items)), lambda k: ast.Subscript(value=seq, slice=k, ctx=ast.Load())
        if isinstance(value, Const):
            raise self.err(node, "`for` over a number", "loop over range(...) or over an array")
        seq = self.stable(self.named(self.as_atom(value)), s.body)
        n = Subscript(Attribute(seq, "shape"), (Const(0),))
        seq = self.synthetic(seq, "seq")
        return n, lambda k: ast.Subscript(value=seq, slice=k, ctx=ast.Load())

    def choice_of_items(self, value, s):
        """The k-th item of a tuple of values (numbers or arrays, read once before the loop, as Python
        reads them) as a choice among its items: `a if k == 0 else (b if k == 1 else c)`, so that items of
        any kind, arrays of different lengths included, keep their own values."""
        names = [self.synthetic(self.stable(self.as_atom(x), s.body), "item") for x in value.items]

        def item(k):
            chosen = names[-1]
            for j in range(len(names) - 2, -1, -1):
                test = ast.Compare(left=k, ops=[ast.Eq()], comparators=[ast.Constant(j)])
                chosen = ast.IfExp(test=test, body=names[j], orelse=chosen)
            return chosen
        return item

    def iter_enumerate(self, node, s):
        start = node.args[1] if len(node.args) == 2 else next((k.value for k in node.keywords if k.arg == "start"),
                                                                 None)
        if not 1 <= len(node.args) <= 2 or any(k.arg != "start" for k in node.keywords):
            raise self.err(node, "this call of enumerate", "write enumerate(seq) or enumerate(seq, start)")
        n, inner = self.iterable(node.args[0], s)
        first = None if start is None else self.synthetic(self.stable(self.atom(start), s.body), "start")

        def item(k):
            count = k if first is None else ast.BinOp(left=first, op=ast.Add(), right=k)
            return ast.Tuple(elts=[count, inner(k)], ctx=ast.Load())
        return n, item

    def iter_zip(self, node, s):
        if not node.args or node.keywords:
            raise self.err(node, "this call of zip", "write zip(a, b, ...) of arrays and ranges")
        parts = [self.iterable(a, s) for a in node.args]
        n = parts[0][0]
        for m, _ in parts[1:]:
            n = self.temp(Call("min", (n, m)), "n")
        return n, lambda k: ast.Tuple(elts=[item(k) for _, item in parts], ctx=ast.Load())

    def iter_range(self, node, s):
        """range(...) inside zip or enumerate (or with a tuple target): its length and k-th value."""
        if node.keywords or not 1 <= len(node.args) <= 3:
            raise self.err(node, "this call of range", "give range one to three arguments")
        args = [self.stable(self.atom(a), s.body) for a in node.args]
        start, stop, step = [Const(0), args[0], Const(1)] if len(args) == 1 else (args + [Const(1)])[:3]
        if not (isinstance(step, Const) and isinstance(step.value, int) and step.value != 0):
            raise self.err(node, "range(...) with a step that is not a constant, in zip or enumerate",
                           "loop over range(n) and compute the value from the index")
        size = abs(step.value)
        span = folded(BinOp("-", stop, start) if step.value > 0 else BinOp("-", start, stop))
        n = span if size == 1 else folded(BinOp("//", self.as_atom(folded(BinOp("+", span, Const(size - 1)))),
                                                Const(size)))
        n = self.as_atom(n)
        first = self.synthetic(start, "start")

        def item(k):
            scaled = k if size == 1 and step.value > 0 else ast.BinOp(left=k, op=ast.Mult(),
                                                                      right=ast.Constant(step.value))
            return scaled if start == Const(0) else ast.BinOp(left=first, op=ast.Add(), right=scaled)
        return n, item

    def loop_else(self, s):
        """A loop with `else:`: the clause runs when the loop ends without `break` (a flag set next to
        each `break`) or `return`."""
        plain = copy.copy(s)
        plain.orelse = []
        flags = []
        if _contains(s.body, ast.Break, False):
            flag = self.fresh("broke_out")
            self.rename[flag] = flag
            self.assign(flag, Const(False))
            plain.body = _flag_breaks(s.body, flag)
            flags.append(flag)
        if self.ret_flag is not None and _contains(s.body, ast.Return, True):
            flags.append(self.ret_flag)
        self.stmt(plain)
        self.at(s.orelse[0])
        if not flags:
            self.block(s.orelse)
            return
        go = self.guard(flags)
        origin = self.origin
        self.emit(If(go, self.sub_block(s.orelse), [], origin))

    # ---- raise and assert -------------------------------------------------------------------------
    def stmt_Raise(self, s):
        if s.exc is None:
            raise self.err(s, "a bare `raise` (re-raising)", 'raise an exception: raise ValueError("...")')
        if s.cause is not None and not _is_none(s.cause):
            raise self.err(s, "`raise ... from ...`", "raise the exception alone")
        exc, args = s.exc, []
        if isinstance(exc, ast.Call):
            if exc.keywords or any(isinstance(a, ast.Starred) for a in exc.args):
                raise self.err(s, "keyword or star arguments of an exception", "pass its arguments by position")
            exc, args = exc.func, exc.args
        self.fail(self.exception_class(exc), args)

    def stmt_Assert(self, s):
        known = self.constant_test(s.test)
        if known:
            return
        if known is None:
            failed = self.temp(UnaryOp("not", self.condition(s.test)), "failed")
            origin = self.origin
            saved, self.out = self.out, []
            self.fail(AssertionError, [s.msg] if s.msg is not None else [])
            body, self.out = self.out, saved
            self.emit(If(failed, body, [], origin))
            return
        self.fail(AssertionError, [s.msg] if s.msg is not None else [])

    def exception_class(self, node):
        """The exception class a `raise` names (a builtin, or one of a module)."""
        obj = None
        if isinstance(node, ast.Name) and not self.is_local(node.id):
            obj = self.info.namespace.get(node.id, getattr(builtins, node.id, None))
        elif isinstance(node, ast.Attribute):
            obj = self.module_path(node)[1]
        if not (isinstance(obj, type) and issubclass(obj, BaseException)):
            raise self.err(node, "raising something other than an exception class",
                           'raise a builtin or module-level exception class: raise ValueError("...")')
        return obj

    def fail(self, cls, arg_nodes):
        """Raise `cls(*args)` here, as Python would: `runtime.fail` carries the class's import path, the
        arguments and the line; `Checked` raises the user's exception of them."""
        args = []
        for a in arg_nodes:
            if isinstance(a, ast.JoinedStr) and all(isinstance(v, ast.Constant) for v in a.values):
                args.append(Const("".join(v.value for v in a.values)))      # f"..." with no fields
            elif isinstance(a, ast.Constant) and isinstance(a.value, (str, int, float, bool)):
                args.append(Const(a.value))
            elif isinstance(a, (ast.Constant, ast.JoinedStr)) or any(
                    isinstance(n, ast.Constant) and isinstance(n.value, (str, bytes)) for n in ast.walk(a)):
                raise self.err(a, "a formatted or non-constant string in an exception",
                               'give it a constant message: raise ValueError("n must be positive")')
            else:
                args.append(self.atom(a))
        at = f"{where(self.origin)}: {self.origin.text}"
        self.emit(Effect(Call("srcad.fail", (Const(f"{cls.__module__}:{cls.__qualname__}"), Tuple(tuple(args)),
                                             Const(at))), self.origin))

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
        if node.value is Ellipsis:
            raise self.err(node, "`...` outside an index", "use it only in an index: U[..., k]")
        if node.value is not None and not isinstance(node.value, (bool, int, float, complex, str)):
            raise self.err(node, f"the constant {node.value!r}", "use numbers, strings (options compared with ==) "
                           "or None")
        return Const(node.value)

    def expr_Name(self, node):
        n = node.id
        if n in self.nones:
            raise TypeError(f"{where(self.origin)}: argument `{n}` is None here, and `{self.origin.text}` uses it "
                            f"as a value. Hint: pass a value for `{n}`, or test `if {n} is None:` first")
        if isinstance(self.subst.get(n), _Callee) or n in self.defs or \
                not self.is_local(n) and resolve(self.info, n)[0] == "function":
            raise self.err(node, f"function `{n}` used as a value", "call it, or pass it to a function it calls")
        if n in self.subst:
            return self.known_number(self.subst[n])
        if n in self.rename and self.rename[n] in self.ctx.lists:
            return self.list_value(self.ctx.lists[self.rename[n]], n)
        if n in self.rename:
            elems = self.ctx.tuples.get(self.rename[n])
            if elems is not None:
                return Tuple(tuple(Name(e) for e in elems))
            return self.known_number(Name(self.rename[n]))
        kind = resolve(self.info, n)
        if kind[0] == "const":
            return Const(_plain_number(kind[1]))
        if kind[0] == "tuple":
            return Tuple(tuple(Const(_plain_number(v)) for v in kind[1]))
        if kind[0] == "array":
            return self.frozen_array(node, kind[1])
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
        if len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            return self.membership(node.left, node.comparators[0], isinstance(node.ops[0], ast.NotIn))
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

    def membership(self, left, right, negate):
        """`a in (1, 2)`, `a not in [x, y]`, `a in TABLE`: `a == item` for each item, or-ed (decided
        here where they are constants); `a in arr`, as Numba has it: whether any element equals `a`."""
        if isinstance(right, (ast.Tuple, ast.List)):
            items = [self.atom(e) for e in right.elts]
        else:
            value = self.expr(right)
            if not isinstance(value, Tuple):          # an array (or a list grown by append): any element equal
                hit = self.as_atom(Call("np.any", (self.temp(Compare("==", self.as_atom(value), self.atom(left))),)))
                return UnaryOp("not", hit) if negate else hit
            items = list(value.items)
        a = self.atom(left)
        parts = []
        for item in items:
            test = folded(Compare("==", a, item))
            if isinstance(test, Const) and test.value:
                return Const(not negate)
            if not isinstance(test, Const):
                parts.append(self.as_atom(test))
        if not parts:
            return Const(negate)
        hit = parts[0]
        for p in parts[1:]:
            hit = self.as_atom(BinOp("|", hit, p))
        return UnaryOp("not", hit) if negate else hit

    def none_test(self, node):
        """`w is None` / `w is not None` of a parameter passed None (or known `given`), decided here; else None."""
        op, sides = node.ops[0], (node.left, node.comparators[0])
        if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(sides[0], ast.Name) and sides[0].id in self.given \
                and _is_none(sides[1]):
            return Const(isinstance(op, ast.IsNot))
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
            cond = self.temp(t if isinstance(node.op, ast.And) else UnaryOp("not", t), "test")   # (not `t`: rebound)
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

    def expr_List(self, node):
        return self.list_array(node)

    def expr_ListComp(self, node):
        """`[f(i) for i in range(3)]` over a sequence of constants (a range of constant bounds, a tuple
        or list of numbers): written out as the list literal it makes, which np.array then types as
        Numba types the list. Over any other sequence: the list it grows by append (`comprehension_list`)."""
        rows = isinstance(node.elt, (ast.List, ast.ListComp))      # a list of lists: np.array stacks them
        items = self.unrolled_items(node)
        if items is None:
            if rows:
                raise self.err(node, "a list comprehension of lists over a sequence that is not made of "
                               "constants", "allocate the 2-d array, np.empty((n, m)), and fill it in a for loop")
            return self.comprehension_list(node)
        name, elems = node.generators[0].target.id, []
        shadowed = self.subst.get(name)
        try:
            for v in items:
                self.subst[name] = Const(v)
                for n in ast.walk(node.elt):     # a test of the loop name is decided again for each value
                    self.known.pop(id(n), None)
                elems.append(self.temp(self.expr(node.elt), "row") if rows else self.atom(node.elt))
        finally:
            if shadowed is None:
                del self.subst[name]
            else:
                self.subst[name] = shadowed
        return Call("np.stack" if rows else "np.array", (Tuple(tuple(elems)),))

    # ---- NumPy functions written as others that have derivative rules (`WRITTEN_AS`) ---------------------
    def peak_to_peak(self, args, kws):
        """`np.ptp(x)`: max minus min (Numba takes no axis)."""
        if len(args) != 1 or kws:
            return None
        x = self.atom(args[0])
        return BinOp("-", self.temp(Call("np.max", (x,))), self.temp(Call("np.min", (x,))))

    def differences_of_flat(self, args, kws):
        """`np.ediff1d(x)`: the differences of the flattened array."""
        if len(args) != 1 or kws:
            return None
        return Call("np.diff", (self.temp(Call("np.ravel", (self.atom(args[0]),))),))

    def taken(self, args, kws):
        """`np.take(x, idx)`: the flattened array indexed by `idx` (an index or an array of them)."""
        if len(args) != 2 or kws:
            return None
        flat = self.temp(Call("np.ravel", (self.atom(args[0]),)))
        return Subscript(flat, (self.atom(args[1]),))

    def nancumsum(self, args, kws):
        return self.nans_as(0.0, "np.cumsum", args, kws)

    def nanprod(self, args, kws):
        return self.nans_as(1.0, "np.prod", args, kws)

    def nans_as(self, neutral, then, args, kws):
        """`np.nancumsum(x)`, `np.nanprod(x)`: `then` of x with its NaNs replaced by `neutral`."""
        if len(args) != 1 or kws:
            return None
        x = self.atom(args[0])
        kept = self.temp(Call("np.where", (self.temp(Call("np.isnan", (x,))), Const(neutral), x)))
        return Call(then, (kept,))

    def in_parts(self, args, kws, parts, counts=(1,)):
        """A factorisation returning a tuple, as one call per part (`parts`: (runtime function, name)) of the
        same arguments (as many as one of `counts`), so that each part has a rule of its own, or is refused by
        its name."""
        if kws or len(args) not in counts:
            return None
        given = tuple(self.atom(a) for a in args)
        return Tuple(tuple(self.temp(Call(part, given), name) for part, name in parts))

    def sign_and_log_det(self, args, kws):
        """`np.linalg.slogdet(a)`: its sign (no derivative) and log |det a| (`srcad.log_abs_det` has the rule)."""
        return self.in_parts(args, kws, (("srcad.det_sign", "sign"), ("srcad.log_abs_det", "logdet")))

    def eigenvalues_and_vectors(self, args, kws):
        """`np.linalg.eigh(a)`: np.linalg.eigvalsh(a) and `srcad.eigenvectors(a)`, each with its rule."""
        return self.in_parts(args, kws, (("np.linalg.eigvalsh", "eigenvalues"), ("srcad.eigenvectors", "eigenvectors")))

    def singular_value_decomposition(self, args, kws):
        """`np.linalg.svd(a)` (Numba's: full matrices): U, s and Vh (`s` has the rule; a gradient through U or
        Vh is refused, naming them)."""
        return self.in_parts(args, kws, (("srcad.left_singular_vectors", "u"), ("srcad.singular_values", "s"),
                                         ("srcad.right_singular_vectors", "vh")))

    def general_eigen(self, args, kws):
        """`np.linalg.eig(a)` of a real matrix (real eigenvalues, as Numba requires): w and V, each with its rule."""
        return self.in_parts(args, kws, (("srcad.real_eigenvalues", "eigenvalues"),
                                         ("srcad.right_eigenvectors", "eigenvectors")))

    def general_eigenvalues(self, args, kws):
        """`np.linalg.eigvals(a)`: the eigenvalues np.linalg.eig(a) gives, in their order."""
        return Call("srcad.real_eigenvalues", (self.atom(args[0]),)) if len(args) == 1 and not kws else None

    def q_and_r(self, args, kws):
        """`np.linalg.qr(a)` (reduced, as Numba's): Q and R, each with its rule."""
        return self.in_parts(args, kws, (("srcad.qr_q", "q"), ("srcad.qr_r", "r")))

    def least_squares(self, args, kws):
        """`np.linalg.lstsq(a, b[, rcond])`: x (differentiated), the residuals (refused where a gradient
        flows: compute them from x), the rank and the singular values of `a` (differentiated)."""
        return self.in_parts(args, kws, (("srcad.least_squares", "x"), ("srcad.least_squares_residuals", "residuals"),
                                         ("srcad.least_squares_rank", "rank"),
                                         ("srcad.least_squares_singular_values", "s")), counts=(2, 3))

    def contraction(self, args, kws):
        """`np.einsum(subscripts, *operands)` as matrix products, sums and broadcast products (`einsum.py`);
        `optimize=` is accepted and has no effect (the order of the products is einsum.py's)."""
        if not args or set(dict(kws)) - {"optimize"}:
            return None
        spec = self.constant_of(args[0])
        spec = self.static_value(args[0]) if spec is None else spec
        if not isinstance(spec, str):
            raise self.err(args[0], "np.einsum with subscripts that are not a constant string",
                           "write them in the call, np.einsum('ij,jk->ik', a, b), or as a module constant")
        try:
            terms, output = einsum.parse(spec, len(args) - 1)
        except einsum.Refused as refused:
            raise self.err(args[0], *refused.args) from None
        operands = [self.named(self.atom(a)) for a in args[1:]]
        return einsum.contraction(terms, output, operands, self.temp)

    def running_product(self, args, kws):
        """`np.cumprod(x)`: the running product of the flattened array, as the loop it is (its derivative
        is then the loop's: exact where entries are zero, and at any order)."""
        if len(args) != 1 or kws:
            return None
        return self.running_product_of(self.atom(args[0]))

    def nan_running_product(self, args, kws):
        """`np.nancumprod(x)`: the running product with the NaNs taken as 1."""
        if len(args) != 1 or kws:
            return None
        x = self.atom(args[0])
        return self.running_product_of(self.temp(Call("np.where", (self.temp(Call("np.isnan", (x,))), Const(1.0),
                                                                                  x))))

    def running_product_of(self, x):
        flat = self.temp(Call("np.ravel", (x,)), "flat")
        out = self.temp(Call("np.empty_like", (flat,)), "running")
        one = self.temp(Call("np.ones", (Const(1), Attribute(flat, "dtype"))), "one")
        acc = self.temp(Subscript(one, (Const(0),)), "product")
        i = self.fresh("i")
        self.ctx.ints.add(i)
        body = [Assign(acc.id, BinOp("*", acc, Subscript(flat, (Name(i),))), self.origin),
                Store(out.id, (Name(i),), acc, self.origin)]
        self.emit(For(i, Const(0), Subscript(Attribute(flat, "shape"), (Const(0),)), Const(1), body, self.origin))
        return out

    def convolution(self, args, kws):
        """`np.convolve(a, v)` (Numba's: the full convolution) as the loops it is:
        `out[i + j] += a[i] * v[j]`."""
        if len(args) != 2 or kws:
            return None
        a, v = (self.as_name(self.atom(x)) for x in args)
        joined = self.temp(Call("np.concatenate", (Tuple((self.temp(Subscript(a, (Slice(Const(1)),))), v)),)))
        out = self.temp(Call("np.zeros_like", (joined,)), "convolved")       # the dtype NumPy gives
        i, j, k = self.fresh("i"), self.fresh("j"), self.fresh("k")
        self.ctx.ints |= {i, j, k}
        inner = [Assign(k, BinOp("+", Name(i), Name(j)), self.origin)] + \
            self.add_product(out, Name(k), a, Name(i), v, Name(j))
        self.emit(For(i, Const(0), Subscript(Attribute(a, "shape"), (Const(0),)), Const(1),
                      [For(j, Const(0), Subscript(Attribute(v, "shape"), (Const(0),)), Const(1), inner, self.origin)],
                      self.origin))
        return out

    def correlation(self, args, kws):
        """`np.correlate(a, v)` (Numba's: mode "valid") as the loops it is, `out[i] += a[i + j] * v[j]`; where
        `v` is the longer, with their roles swapped and the result reversed, as NumPy does."""
        if len(args) != 2 or kws:
            return None
        a, v = (self.as_name(self.atom(x)) for x in args)
        la, lv = (self.temp(Subscript(Attribute(x, "shape"), (Const(0),))) for x in (a, v))
        longer = self.temp(Compare(">=", la, lv))
        n_out = self.temp(BinOp("+", Call("abs", (BinOp("-", la, lv),)), Const(1)))
        first = Slice(None, Const(1))
        probe = self.temp(BinOp("*", Subscript(a, (first,)), Subscript(v, (first,))))     # the dtype NumPy gives
        out = self.temp(Call("np.zeros", (n_out, Attribute(probe, "dtype"))), "correlated")
        self.emit(If(longer, self.correlation_loops(a, v, out, n_out, False),
                     self.correlation_loops(v, a, out, n_out, True), self.origin))
        return out

    def correlation_loops(self, long, short, out, n_out, reverse):
        """`out[i] += long[i + j] * short[j]` (into `out[n_out - 1 - i]` where `reverse`)."""
        i, j, at = self.fresh("i"), self.fresh("j"), self.fresh("at")
        self.ctx.ints |= {i, j, at}
        to = Name(i)
        inner = [Assign(at, BinOp("+", Name(i), Name(j)), self.origin)]
        if reverse:
            to = Name(self.fresh("k"))
            self.ctx.ints.add(to.id)
            inner.append(Assign(to.id, BinOp("-", BinOp("-", n_out, Const(1)), Name(i)), self.origin))
        inner += self.add_product(out, to, long, Name(at), short, Name(j))
        return [For(i, Const(0), n_out, Const(1),
                    [For(j, Const(0), Subscript(Attribute(short, "shape"), (Const(0),)), Const(1), inner, self.origin)],
                    self.origin)]

    def add_product(self, out, at, x, i, y, j):
        """`out[at] += x[i] * y[j]` as statements: the sum bound to a name first (a stored value is an atom,
        whose adjoint the reverse pass reads)."""
        total = self.fresh("total")
        return [Assign(total, BinOp("+", Subscript(out, (at,)), BinOp("*", Subscript(x, (i,)), Subscript(y, (j,)))),
                       self.origin),
                Store(out.id, (at,), Name(total), self.origin)]

    def vandermonde(self, args, kws):
        """`np.vander(x, N=None, increasing=False)` as the loops it is: `out[i, j] = x[i] ** power`."""
        named = dict(kws)
        if len(args) > 2 or len(args) < 1 or set(named) - {"N", "increasing"} or (len(args) == 2 and "N" in named):
            return None
        increasing = named.get("increasing", Const(False))
        if not isinstance(increasing, Const):
            return None
        x = self.as_name(self.atom(args[0]))
        n = Subscript(Attribute(x, "shape"), (Const(0),))
        given = self.atom(args[1]) if len(args) == 2 else named.get("N", Const(None))
        cols = self.as_name(n if isinstance(given, Const) and given.value is None else given)
        out = self.temp(Call("np.empty", (Tuple((self.as_name(n), cols)), Attribute(x, "dtype"))), "vander")
        i, j, power, entry = self.fresh("i"), self.fresh("j"), self.fresh("power"), self.fresh("entry")
        self.ctx.ints |= {i, j, power}
        exponent = Name(j) if increasing.value else BinOp("-", BinOp("-", cols, Const(1)), Name(j))
        inner = [Assign(power, exponent, self.origin),
                 Assign(entry, BinOp("**", Subscript(x, (Name(i),)), Name(power)), self.origin),
                 Store(out.id, (Name(i), Name(j)), Name(entry), self.origin)]
        self.emit(For(i, Const(0), n, Const(1),
                      [For(j, Const(0), cols, Const(1), inner, self.origin)], self.origin))
        return out

    def as_name(self, e):
        """`e` bound to a name of its own unless it is one."""
        return e if isinstance(e, Name) else self.temp(e)

    def stacked_rows(self, args, kws):
        """`np.vstack((a, b, ...))`: the arrays as rows of at least 2 dimensions, joined along the first."""
        if len(args) != 1 or kws or not isinstance(args[0], (ast.Tuple, ast.List)):
            return None
        rows = tuple(self.temp(Call("np.atleast_2d", (self.atom(e),))) for e in args[0].elts)
        return Call("np.concatenate", (Tuple(rows),), (("axis", Const(0)),))

    def record(self, cls, node):
        """`Point(a, y=b)` of a named tuple class: the tuple of its fields' values (defaults filled in), each
        bound to a name of its own, and known by its fields (`ctx.records`), so that `p.y` reads an item."""
        fields = cls._fields
        given = dict(zip(fields, node.args))
        if len(node.args) > len(fields):
            raise self.err(node, f"{cls.__name__}(...) with {len(node.args)} values for {len(fields)} fields",
                           "give each field once")
        for k in node.keywords:
            if k.arg not in fields or k.arg in given:
                raise self.err(node, f"{cls.__name__}(...) with the keyword `{k.arg}`", "give each field once, "
                               f"by position or by name: {', '.join(fields)}")
            given[k.arg] = k.value
        missing = [f for f in fields if f not in given and f not in cls._field_defaults]
        if missing:
            raise self.err(node, f"{cls.__name__}(...) without its field `{missing[0]}`", "give every field "
                           "that has no default")
        items = []
        for f in fields:
            value = self.expr(given[f]) if f in given else self.constant(node, cls._field_defaults[f])
            if isinstance(value, Tuple):
                raise self.err(node, "a tuple nested in a named tuple", "give its fields numbers or arrays")
            items.append(self.temp(value, f))
        made = Tuple(tuple(items))
        self.ctx.records[made] = fields
        return made

    def comprehension_list(self, node, acc=None):
        """`[e for v in seq if c]` over any sequence a `for` takes: the list grown by append it makes,
        `acc = []; for v in seq: if c: acc.append(e)`, as an array (or, given `acc`, bound to that local
        as a list). Its loop names are its own, as in Python (they do not leak into the function); the
        first sequence is read outside them."""
        as_value = acc is None
        acc = self.fresh("comprehension") if as_value else acc
        own = {}
        for gen in node.generators:
            for n in ast.walk(gen.target):
                if isinstance(n, ast.Name):
                    own[n.id] = own.get(n.id) or self.fresh(n.id)
        for local in (acc, *own.values()):
            self.rename[local] = local
        private = _Renamed(own)
        body = [ast.Expr(ast.Call(ast.Attribute(ast.Name(acc, ast.Load()), "append", ast.Load()),
                                  [private.visit(copy.deepcopy(node.elt))], []))]
        for k, gen in reversed(list(enumerate(node.generators))):
            ifs = [private.visit(copy.deepcopy(c)) for c in gen.ifs]
            if ifs:
                body = [ast.If(ifs[0] if len(ifs) == 1 else ast.BoolOp(ast.And(), ifs), body, [])]
            seq = gen.iter if k == 0 else private.visit(copy.deepcopy(gen.iter))
            body = [ast.For(private.visit(copy.deepcopy(gen.target)), seq, body, [])]
        loop = ast.fix_missing_locations(ast.copy_location(body[0], node))
        for n in ast.walk(loop):
            ast.copy_location(n, node)
        self.new_list(acc)
        self.stmt(loop)
        self.at(node)
        return self.list_value(self.ctx.lists[acc], acc) if as_value else None

    def unrolled_items(self, node):
        """The values the loop name of the list comprehension `node` takes where it is written out as a list
        literal (one loop over constants, no `if`), else None."""
        gen = node.generators[0]
        items = self.constant_items(gen.iter) if len(node.generators) == 1 and not gen.ifs and \
            isinstance(gen.target, ast.Name) else None
        return items if items is not None and len(items) <= _UNROLLED else None

    def constant_items(self, node):
        """The values of a sequence made of constants only (range of constants, tuple or list of
        numbers), else None."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not self.is_local(node.func.id) \
                and resolve(self.info, node.func.id) == ("builtin", "range") and not node.keywords:
            bounds = [self.constant_of(a) for a in node.args]
            ok = 1 <= len(bounds) <= 3 and all(isinstance(b, int) and not isinstance(b, bool) for b in bounds)
            return list(range(*bounds)) if ok and (len(bounds) < 3 or bounds[2] != 0) else None
        elts = node.elts if isinstance(node, (ast.Tuple, ast.List)) else None
        if elts is None:
            value = self.constant_of(node, whole=True)
            return list(value) if isinstance(value, tuple) else None
        values = [self.constant_of(e) for e in elts]
        return values if all(isinstance(v, (bool, int, float)) for v in values) else None

    def constant_of(self, node, whole=False):
        """The constant (a tuple of them with `whole`) an expression is, when it emits nothing; else None."""
        saved, self.out = self.out, []
        try:
            e = self.expr(node)
        except TransformError:
            e = None
        finally:
            emitted, self.out = self.out, saved
        if emitted:
            return None
        if whole and isinstance(e, Tuple) and all(isinstance(x, Const) for x in e.items):
            return tuple(x.value for x in e.items)
        return e.value if isinstance(e, Const) else None

    def list_array(self, node, kws=()):
        """A list literal as the array np.array makes of it: np.array of a tuple, rows of a nested one
        stacked (`np.array([[a, b], [c, d]])`)."""
        if node.elts and all(isinstance(e, ast.List) for e in node.elts):
            return Call("np.stack", (Tuple(tuple(self.temp(self.list_array(e, kws), "row") for e in node.elts)),))
        if not node.elts:
            raise self.err(node, "an empty list used as a value", "bind it to a name and grow it there: "
                           "acc = [] then acc.append(v)")
        if any(isinstance(e, (ast.List, ast.Starred)) for e in node.elts):
            raise self.err(node, "a list mixing lists and values", "make every row a list")
        return Call("np.array", (Tuple(tuple(self.atom(e) for e in node.elts)),), kws)

    def expr_Tuple(self, node):
        elts = self.spread(node.elts)
        return Tuple(tuple(self.tuple_item(self.expr(e)) if self.rule else self.atom(e) for e in elts))

    def spread(self, nodes):
        """Call arguments or tuple items with `*t` (a tuple) replaced by t's items, as Python spreads them."""
        out = []
        for node in nodes:
            if not isinstance(node, ast.Starred):
                out.append(node)
                continue
            value = self.expr(node.value)
            if not isinstance(value, Tuple):
                raise self.err(node, "`*` on something other than a tuple", "spread a tuple: f(*t) with t = (a, b)")
            out.extend(self.synthetic(self.as_atom(x) if not isinstance(x, Tuple) else x, "item")
                       for x in value.items)
        return out

    def tuple_item(self, e):
        """An item of a tuple a rule returns: an atom, or a tuple of atoms (outputs of a tuple function)."""
        return Tuple(tuple(self.as_atom(x) for x in e.items)) if isinstance(e, Tuple) else self.as_atom(e)

    def index(self, node):
        """The index of a subscript as a tuple of atoms and slices."""
        items = node.elts if isinstance(node, ast.Tuple) else [node]
        out = []
        for item in items:
            if isinstance(item, ast.Slice):
                out.append(Slice(*(self.atom(p) if p is not None else None
                                   for p in (item.lower, item.upper, item.step))))
                continue
            if isinstance(item, ast.Constant) and item.value is Ellipsis:     # slices once ranks are known
                out.append(Const(Ellipsis))
                continue
            a = self.atom(item)
            if isinstance(a, Subscript) and not is_shape_entry(a):
                a = self.temp(a, "idx")
            out.append(a)
        return tuple(out)

    def expr_Subscript(self, node):
        v = node.value
        items = self.list_of(v)
        if items is not None and not isinstance(node.slice, (ast.Slice, ast.Tuple)):
            return Subscript(Name(items[0]), (self.list_index(items, node.slice),))
        if isinstance(v, ast.Attribute) and v.attr == "shape":
            return Subscript(Attribute(self.atom(v.value), "shape"), self.index(node.slice))
        made = None
        if isinstance(v, (ast.Name, ast.Call)) or self.static_value(v) is not _NOT_STATIC:     # a tuple perhaps
            whole = made = self.expr(v)
            if isinstance(whole, Tuple):
                k = node.slice.value if isinstance(node.slice, ast.Constant) else None
                if k is None and all(isinstance(x, Const) for x in whole.items):     # a table of numbers
                    return Subscript(Const(tuple(x.value for x in whole.items)), self.index(node.slice))
                if k is None and not isinstance(node.slice, (ast.Slice, ast.Tuple)):
                    # a homogeneous tuple indexed by a variable: its items stacked (differentiated as np.asarray)
                    return Subscript(self.temp(Call("np.asarray", (whole,)), "stacked"), self.index(node.slice))
                if not isinstance(k, int) or not -len(whole.items) <= k < len(whole.items):
                    raise self.err(node, "indexing a tuple with something other than a constant in range",
                                   "index tuples with constants, or unpack them: a, b = t")
                return whole.items[k]
        base = self.atom(v) if made is None else self.as_atom(made)
        if not isinstance(base, Name):
            base = self.temp(base)
        field = node.slice.value if isinstance(node.slice, ast.Constant) else None
        if isinstance(field, str):        # a record's field, as Numba reads it: the rest reads a number
            if not field.isidentifier():
                raise self.err(node, f"the record field {field!r}", "name record fields as Python identifiers")
            return self.temp(Attribute(base, field), "field")
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

    def static_value(self, node):
        """The value of an attribute chain rooted at a module-level name (`constants.FTOL`, `cfg.N`,
        `np.finfo(np.float64).eps`), read when compiling as Numba reads globals; `_NOT_STATIC` otherwise."""
        if isinstance(node, ast.Name):
            if self.is_local(node.id) or node.id not in self.info.namespace:
                return _NOT_STATIC
            return self.info.namespace[node.id]
        if isinstance(node, ast.Attribute):
            base = self.static_value(node.value)
            return _NOT_STATIC if base is _NOT_STATIC else getattr(base, node.attr, _NOT_STATIC)
        if isinstance(node, ast.Call) and not node.keywords:
            fn = self.static_value(node.func)
            args = [self.static_value(a) for a in node.args]
            if canonical_callable(fn) in _STATIC_CALLS and _NOT_STATIC not in args:
                try:
                    return fn(*args)
                except (TypeError, ValueError):
                    return _NOT_STATIC
        return _NOT_STATIC

    def constant(self, node, value):
        """A module-level value read when compiling: a number, a string, a tuple of numbers or a NumPy array
        (frozen); anything else is refused, naming it."""
        if isinstance(value, (complex, np.complexfloating)):
            return Const(complex(value))
        if isinstance(value, _NUMBERS):
            return Const(_plain_number(value))
        if isinstance(value, str):
            return Const(value)
        if isinstance(value, tuple) and value and all(isinstance(v, _NUMBERS) for v in value):
            return Tuple(tuple(Const(_plain_number(v)) for v in value))
        if isinstance(value, np.ndarray):
            return self.frozen_array(node, value)
        raise self.err(node, f"`{ast.unparse(node)}` (a {type(value).__name__} used as a value)",
                       "module-level numbers, strings, tuples of numbers and NumPy arrays are read as constants "
                       "when compiling; pass other values as arguments")

    def frozen_array(self, node, value):
        """A module-level NumPy array: read-only, its content frozen into the compiled code when first compiled
        (as Numba freezes global arrays; the content is part of the cache key), bound once on entry."""
        if value.dtype.kind not in "biufc":
            raise self.err(node, f"module-level array `{ast.unparse(node)}` of dtype {value.dtype}",
                           "pass it as an argument")
        key = freeze(value)
        if key not in self.ctx.frozen:
            spelled = node.attr if isinstance(node, ast.Attribute) else node.id
            name = self.ctx.names.fresh(spelled, spelled=spelled)
            self.ctx.frozen[key] = Assign(name, Call("srcad.frozen_array", (Const(key),)), self.origin)
        return Name(self.ctx.frozen[key].target)

    def expr_Attribute(self, node):
        path, obj = self.module_path(node)
        if path is not None and obj is None and node.attr == "newaxis":
            return Const(None)
        if path is not None and isinstance(obj, (int, float)):
            return Global(path)
        value = self.static_value(node)
        if value is not _NOT_STATIC:
            return self.constant(node, value)
        if path is not None:
            raise self.err(node, f"`{path}` used as a value", "call it, or use it as a dtype")
        value = self.expr(node.value)
        fields = self.ctx.records.get(value) if isinstance(value, Tuple) else None
        if fields is not None:                          # a field of a named tuple made here
            if node.attr not in fields:
                raise self.err(node, f"field `{node.attr}` of a named tuple with fields {', '.join(fields)}",
                               "read one of its fields")
            return value.items[fields.index(node.attr)]
        if isinstance(value, Tuple):
            raise self.err(node, "tuple used as a value", "unpack it: a, b = ...")
        base = self.named(self.as_atom(value))          # of a name, or of any array expression
        if node.attr == "T":
            return Call("np.transpose", (base,))
        if node.attr in ("real", "imag"):               # of a float too (Numba's np.real / np.imag)
            return Call("np." + node.attr, (base,))
        return Attribute(base, node.attr)     # .shape, .ndim, .size, .dtype; a field of a named tuple or a record

    def expr_Call(self, node):
        f = node.func
        if any(k.arg is None for k in node.keywords):
            raise self.err(node, "**kwargs in a call", "pass arguments explicitly")
        if any(isinstance(a, ast.Starred) for a in node.args):
            node = ast.copy_location(ast.Call(func=f, args=self.spread(node.args), keywords=node.keywords), node)
        if isinstance(f, ast.Attribute) and f.attr == "append" and self.list_of(f.value) is not None:
            return self.list_append(self.list_of(f.value), node)
        helper = self.callee(f)
        if helper is not None:
            return self.inline(helper, node)
        kws = tuple((k.arg, self.kw_value(k.value)) for k in node.keywords)
        if isinstance(f, ast.Name) and not self.is_local(f.id):
            kind = resolve(self.info, f.id)
            if kind[0] == "stop_gradient":
                return self.stop_gradient(node)
            if kind[0] == "callable":
                return self.call(kind[1], node.args, kws, node)
            if kind[0] == "builtin" and kind[1] in _BUILTINS:
                return self.call(kind[1], node.args, kws)
            if kind[0] == "unknown" and _is_named_tuple(kind[1]):
                return self.record(kind[1], node)
            if kind[0] == "builtin" and kind[1] == "range":
                raise self.err(node, "range() outside a for loop", "use range only as `for i in range(...)`")
            raise self.err(node, f"call to `{f.id}`", "call math/NumPy functions, builtins abs/min/max/"
                           "float/int/len, or plain Python functions")
        if isinstance(f, ast.Attribute):
            path, obj = self.module_path(f)
            if obj is not None:
                if is_stop_gradient(obj):
                    return self.stop_gradient(node)
                if path is not None:
                    return self.call(canonical_callable(obj) or path, node.args, kws, node)
            of_value = not isinstance(f.value, ast.Name) or self.is_local(f.value.id) or \
                resolve(self.info, f.value.id)[0] == "array"
            if f.attr in _METHODS and of_value:
                args = list(node.args)
                if f.attr in ("reshape", "transpose") and len(args) > 1:   # x.reshape(2, 3): np.reshape(x, (2, 3))
                    args = [ast.Tuple(elts=args, ctx=ast.Load())]
                return self.call(_METHODS[f.attr], [f.value] + args, kws)
            if f.attr == "flatten" and of_value and not node.args and not kws:     # a copy, whatever the layout
                return Call(".copy", (self.temp(Call("np.ravel", (self.named(self.atom(f.value)),))),))
            if f.attr == "astype" and of_value:
                return Call(".astype", (self.named(self.atom(f.value)),) + tuple(self.kw_value(a) for a in node.args))
            if f.attr in ("append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"):
                raise self.err(node, f"a list changed with .{f.attr}(...)", "grow a list of numbers made with "
                               "`acc = []` in this function by acc.append(v), and read it by acc[i], len(acc) "
                               "or np.array(acc); or allocate the array, np.empty(n), and fill it by index")
        raise self.err(node, "this call", "call math/NumPy functions, plain Python functions, or the array "
                       "methods " + ", ".join(sorted(_METHODS)))

    def call(self, fn, args, kws, node=None):
        """A call of a known function (made at `node`, where it is a call in the source); n-ary min/max
        become nested binary ones (Python's tie rule: the first of equal values wins, as the rule for
        `max(a, b)` assumes)."""
        fn = _SUPPLIED.get(fn, fn)
        if fn in WRITTEN_IN_PYTHON and node is not None:
            return self.written_in_python(WRITTEN_IN_PYTHON[fn], args, kws, node)
        if fn in WRITTEN_AS:
            written = getattr(self, WRITTEN_AS[fn])(args, kws)
            if written is not None:
                return written
        if fn == "len" and len(args) == 1 and self.list_of(args[0]) is not None:
            return Name(self.list_of(args[0])[1])
        if fn in ("np.array", "np.asarray") and len(args) == 1 and self.list_of(args[0]) is not None:
            value = self.list_value(self.list_of(args[0]), args[0].id)
            dtype = next((v for k, v in kws if k == "dtype"), None)
            return value if dtype is None else Call(".astype", (value, dtype))
        if fn in ("np.array", "np.asarray") and len(args) == 1 and isinstance(args[0], ast.List):
            return self.list_array(args[0], kws)
        if fn in ("np.array", "np.asarray") and len(args) == 1 and isinstance(args[0], ast.ListComp) and not kws:
            return self.expr(args[0])
        if fn in ("min", "max", "sum") and len(args) == 1 and not kws:      # of an array: its extremum, sum
            fn = "np." + fn
        if fn == "sum" and len(args) == 2 and not kws:                     # with a start value
            return BinOp("+", self.as_atom(self.call("np.sum", args[:1], ())), self.operand(args[1]))
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
            return folded(Call(fn, tuple(self.operand(a) for a in args)))
        args = [self.arg(a) for a in args]
        axis = dict(kws).get("axis")
        if fn == "np.mean" and len(args) == 1 and axis is not None:      # Numba has no mean along an axis
            base = self.named(args[0])
            return BinOp("/", self.temp(Call("np.sum", (base,), kws)), Subscript(Attribute(base, "shape"), (axis,)))
        if fn in _ALONG_AN_AXIS and axis is not None and len(args) == 1 and set(dict(kws)) == {"axis"}:
            fn = _ALONG_AN_AXIS[fn]
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

    def callee(self, node):
        """The function (a _Callee) a name or a module's attribute stands for, where it is one: a
        global or module function, a `def` of this body or of an enclosing one, or a function passed
        to this helper; else None."""
        if isinstance(node, ast.Name):
            n = node.id
            if isinstance(self.subst.get(n), _Callee):
                return self.subst[n]
            if n in self.defs:
                return self.defs[n]
            if self.is_local(n):
                return None
            kind = resolve(self.info, n)
            return _Callee(pyfunc=kind[1]) if kind[0] == "function" else None
        if isinstance(node, ast.Attribute):
            path, obj = self.module_path(node)
            if obj is not None and not is_stop_gradient(obj) and not canonical_callable(obj) and \
                    inspect.isfunction(unwrap(obj)):
                return _Callee(pyfunc=unwrap(obj))
        return None

    # ---- lists of numbers grown by append: an array of items and a length -----------------------------
    def new_list(self, local):
        """`acc = []`: storage for 16 items, doubled as it fills (`runtime.list_room`), and no item yet."""
        items, length = self.ctx.lists.get(local) or (self.fresh(f"{local}_items"), self.fresh(f"{local}_length"))
        self.ctx.lists[local] = (items, length)
        rows = self.ctx.list_rows.get(local)
        self.assign(items, _storage(self.ctx.list_dtype.get(items)) if rows is None else _rows_storage(*rows))
        self.ctx.list_storage.setdefault(items, []).append(self.out[-1])
        self.assign(length, Const(0))

    def list_of(self, node):
        """(items, length) of the list a name stands for, or None."""
        if isinstance(node, ast.Name) and node.id in self.rename:
            return self.ctx.lists.get(self.rename[node.id])
        return None

    def list_append(self, lst, node):
        if len(node.args) != 1 or node.keywords:
            raise self.err(node, "append with other than one value", "append one value at a time")
        items, length = lst
        value = self.as_atom(self.expr(node.args[0]))
        if self.rename[node.func.value.id] in self.ctx.list_rows:       # arrays: each a row of the storage
            self.assign(items, Call("srcad.list_rows_room", (Name(items), Name(length), value)))
            self.emit(Store(items, (Name(length),), value, self.origin))
            self.assign(length, BinOp("+", Name(length), Const(1)))
            return Const(None)
        if items not in self.ctx.list_dtype:         # the first append decides: integers, or floats
            self.ctx.list_dtype[items] = "np.int64" if self.int_valued(value) else None
            for allocation in self.ctx.list_storage[items]:
                allocation.value = _storage(self.ctx.list_dtype[items])
            if self.ctx.list_dtype[items]:
                self.ctx.int_arrays.add(items)
        self.assign(items, Call("srcad.list_room", (Name(items), Name(length))))
        self.emit(Store(items, (Name(length),), value, self.origin))
        self.assign(length, BinOp("+", Name(length), Const(1)))
        return Const(None)

    def list_index(self, lst, node):
        """The index of item `node` (an AST), checked and counted from the end where negative, as Python does."""
        return self.temp(Call("srcad.list_index", (self.atom(node), Name(lst[1]))), "at")

    def list_value(self, lst, name):
        """The list as an array of its items (a copy: the list may still grow)."""
        items, length = lst
        return self.temp(Call("np.copy", (Subscript(Name(items), (Slice(None, Name(length)),)),)), f"{name}_array")

    def stmt_FunctionDef(self, s):
        """A `def` inside the function: called, it is inlined like any helper, reading the names of
        this body as they are at the call (a closure); its defaults are evaluated here."""
        spec = s.args
        if s.decorator_list or spec.vararg or spec.kwarg or spec.posonlyargs:
            raise self.err(s, "a nested function with decorators, *args, **kwargs or positional-only "
                           "parameters", "define it with plain parameters and no decorator")
        if s.name in self.defs or self.is_local(s.name):
            raise self.err(s, f"`{s.name}` defined twice, or also bound to a value", "give each function its "
                           "own name")
        positional = [a.arg for a in spec.args]
        defaults = dict(zip(positional[len(positional) - len(spec.defaults):],
                            (self.arg_value(d) for d in spec.defaults)))
        defaults.update((a.arg, self.arg_value(d)) for a, d in zip(spec.kwonlyargs, spec.kw_defaults) if d is not None)
        info = FuncInfo(self.info.pyfunc, s.name, self.info.filename, self.info.first_line, self.info.lines, s,
                        self.info.namespace, helper=True)
        self.ctx.infos.append(info)
        self.defs[s.name] = _Callee(info=info, definer=self, defaults=defaults)

    def bind_arguments(self, callee, info, node):
        """A helper's parameters and the call's arguments for them: by position, by keyword, else
        the parameter's default value."""
        spec = info.tree.args
        positional = [a.arg for a in spec.args]
        params = positional + [a.arg for a in spec.kwonlyargs]
        if callee.pyfunc is None:
            defaults = callee.defaults
        else:
            given = info.pyfunc.__defaults__ or ()
            defaults = {p: _default_value(v) for p, v in zip(positional[len(positional) - len(given):], given)}
            defaults.update((p, _default_value(v)) for p, v in (info.pyfunc.__kwdefaults__ or {}).items())
        if len(node.args) > len(positional):
            raise self.err(node, f"call to `{info.name}` with {len(node.args)} arguments "
                           f"(it takes {len(positional)})", "pass every parameter once")
        bound = dict(zip(positional, (self.arg_value(a) for a in node.args)))
        for k in node.keywords:
            if k.arg not in params or k.arg in bound:
                raise self.err(node, f"keyword argument `{k.arg}` in a call to `{info.name}`",
                               "name one of its parameters, once" if k.arg not in params else
                               "give each parameter once")
            bound[k.arg] = self.arg_value(k.value)
        missing = [p for p in params if p not in bound and p not in defaults]
        if missing:
            raise self.err(node, f"call to `{info.name}` without its parameter `{missing[0]}`",
                           "pass every parameter that has no default value")
        return params, [bound[p] if p in bound else defaults[p] for p in params]

    def inline(self, callee, node):
        if callee.key in self.ctx.stack:
            raise self.err(node, f"recursion (`{callee.name}` calls itself)", "rewrite the recursion as a loop")
        pyfunc = callee.pyfunc
        wrapped = getattr(pyfunc, "__wrapped__", None)
        if inspect.isgeneratorfunction(wrapped):
            raise self.err(node, f"a context manager (`{pyfunc.__name__}`, a contextlib.contextmanager) and the "
                           "`with` statement", "enter the context outside the compiled function and call the "
                           "compiled function inside it")
        if wrapped is not None:
            raise self.err(node, f"a call to `{pyfunc.__name__}`, wrapped by a decorator", "call the undecorated "
                           "function (decorate helpers with @ad.function or @numba.njit only)")
        info = self.ctx.load(pyfunc) if pyfunc is not None else callee.info
        params, args = self.bind_arguments(callee, info, node)
        rule = rule_of(pyfunc) if self.ctx.differentiated else None
        if rule is not None:
            outs, is_tuple = self.through_rule(rule, info.name, args, node)
            return Tuple(tuple(outs)) if is_tuple else outs[0]
        return self.inline_bound(callee, info, params, args, node)

    def inline_bound(self, callee, info, params, args, node, rule=False, given=frozenset()):
        """The inlined body of `callee` (parsed as `info`) for the arguments `args` of its `params`;
        `rule`: it is a custom rule (`through_rule`); `given`: parameters whose `is None` tests are False."""
        k = self.ctx.sites.get(info.name, 0) + 1
        self.ctx.sites[info.name] = k
        prefix = info.name if k == 1 else f"{info.name}{k}"
        assigned = _assigned_names(info.tree.body)
        rename, subst = {}, {}
        nones = {p for p, a in zip(params, args) if p not in assigned and a == Const(None)}
        for p, a in zip(params, args):
            if isinstance(a, _Callee) and p in assigned:
                raise self.err(node, f"`{info.name}` rebinds its parameter `{p}`, a function",
                               "bind the value to another name")
            if p not in assigned and p not in nones and isinstance(a, (Name, Const, Tuple, _Callee)):
                subst[p] = a
        for n in sorted(assigned | set(params)):
            if n not in subst:
                rename[n] = self.ctx.names.fresh(f"{prefix}_{n}", spelled=n)
        if callee.definer is not None:
            nones |= self.captured(callee, set(params) | assigned, rename, subst)
        for p, a in zip(params, args):
            if p not in subst and p not in nones:
                if isinstance(a, Tuple):
                    self.bind_tuple(rename[p], a, node)
                else:
                    self.assign(rename[p], a)
        self.ctx.stack.append(callee.key)
        self.ctx.calls += 1
        sub = _Lowerer(self.ctx, info, rename, subst, True, self.call_path + (self.ctx.calls,), nones)
        sub.rule, sub.given = rule, frozenset(given)
        if callee.definer is not None:
            sub.defs.update((n, d) for n, d in callee.definer.defs.items() if n not in rename)
        try:
            body, outs, is_tuple = sub.function()
        finally:                     # a test tried as a constant (`constant_test`) may fail half-way
            self.ctx.stack.pop()
        self.out.extend(body)
        # a helper's returned local is dead after the call: binding it is a move, not an alias
        self.ctx.moved.update(o.id for o in outs if isinstance(o, Name) and o.id in rename.values())
        if is_tuple:
            return Tuple(tuple(outs))
        return outs[0] if outs else Const(0)

    def through_rule(self, rule, name, args, node):
        """`name(*args)` by its custom rule (`f.defjvp`, `f.defvjp`): (output atoms, returns a tuple)."""
        if any(isinstance(a, _Callee) for a in args):
            raise self.err(node, f"a function passed to `{name}`, which has a custom rule",
                           "pass arrays and numbers only")
        if rule.jvp is None:
            return self.through_vjp_rule(rule, name, args, node)
        return self.through_jvp_rule(rule, name, args, node)

    def through_vjp_rule(self, rule, name, args, node):
        """With `fwd` and `bwd`: each output is its `out` of `out, residuals = fwd(*args)`, plus
        `rule_vjp(out, args, key, k, n_outputs)`, zero, whose adjoints together (`ad/local.py`) run the statements of
        `bwd(residuals, g)` kept here in a branch that never runs (`rule_block`; typed with the rest), and
        add each cotangent into its argument."""
        info, result = self.inline_rule(rule.fwd, args, node)
        pair = self.tuple_items(result)
        if pair is None or len(pair) != 2:
            raise RuleError(f"{where(self.origin)}: the fwd rule of `{name}` ({info.name}) returns {_count(pair)}; "
                            "expected two values: (out, residuals)")
        out, residuals = pair
        is_tuple = self.tuple_items(out) is not None
        outs = [self.as_atom(o) for o in (self.tuple_items(out) if is_tuple else [out])]
        key = Const(len(self.ctx.rule_sites))
        self.ctx.rule_sites.append(name)
        saved, self.out = self.out, []
        gs = [self.temp(Call("srcad.stop_gradient", (o,)), f"g_{name}") for o in outs]
        g = Tuple(tuple(gs)) if is_tuple else gs[0]
        binfo, result = self.inline_rule(rule.bwd, [residuals, g], node)
        cotangents = self.tuple_items(result)
        if cotangents is None or len(cotangents) != len(args):
            raise RuleError(f"{where(self.origin)}: the bwd rule of `{name}` ({binfo.name}) returns "
                            f"{_count(cotangents)}; expected a tuple of {len(args)} cotangents, one per argument "
                            "(None for one without)")
        for k, (a, c) in enumerate(zip(args, cotangents)):
            items = self.tuple_items(c)
            if isinstance(a, Tuple) and c != Const(None) and (items is None or len(items) != len(a.items)):
                raise RuleError(f"{where(self.origin)}: the bwd rule of `{name}` ({binfo.name}) returns "
                                f"{_count(items)} for argument {k}, a tuple of {len(a.items)}; expected a tuple of "
                                f"{len(a.items)} cotangents, one per item (None for one without)")
        cotangents = [self.cotangent_atoms(c, isinstance(a, Tuple)) for a, c in zip(args, cotangents)]
        for k, (a, c) in enumerate(zip(args, cotangents)):
            if c != Const(None) and not isinstance(a, Tuple):
                self.check_same_shape(a, c, f"the bwd rule of `{name}` returns a cotangent of another shape than "
                                            f"argument {k}; expected the argument's shape")
        self.emit(Effect(Call("srcad.rule_cotangents", (key, Tuple(tuple(cotangents)))), self.origin))
        block, self.out = self.out, saved
        self.emit(If(Call("srcad.rule_block", (key,)), block, [], self.origin))
        results = []
        for k, o in enumerate(outs):
            zero = self.temp(Call("srcad.rule_vjp", (o, Tuple(tuple(args)), key, Const(k), Const(len(outs)))),
                             f"{name}_vjp")
            stopped = self.temp(Call("srcad.stop_gradient", (o,)), "stopped")
            results.append(self.temp(BinOp("+", stopped, zero), f"{name}_result"))
        return results, is_tuple

    def cotangent_atoms(self, c, of_tuple):
        """A cotangent a bwd rule returns as an atom, or for a tuple argument a Tuple of atoms, one per item
        (so each is a value the adjoint can differentiate again); None as it is."""
        if c == Const(None):
            return c
        if of_tuple:
            return Tuple(tuple(self.cotangent_atoms(i, False) for i in self.tuple_items(c)))
        return self.as_atom(c)

    def written_in_python(self, pyfunc, args, kws, node):
        """A NumPy function `numpy_in_python` writes, inlined for the call's arguments."""
        info = self.ctx.load(pyfunc)
        params = [a.arg for a in info.tree.args.args]
        defaults = dict(zip(params[len(params) - len(pyfunc.__defaults__ or ()):], pyfunc.__defaults__ or ()))
        named = dict(kws)
        given = dict(zip(params, (self.atom(a) for a in args))) | {k: self.as_atom(v) for k, v in named.items()}
        if len(args) > len(params) or set(named) - set(params[len(args):]) or set(params) - set(given) - set(defaults):
            raise self.err(node, f"np.{pyfunc.__name__} with other arguments than ({', '.join(params)})",
                           f"call it as np.{pyfunc.__name__}({', '.join(params)}), as Numba supports it")
        known = {p for p in given if p in defaults and defaults[p] is None and given[p] != Const(None)}
        return self.inline_bound(_Callee(pyfunc=pyfunc), info, params,
                                 [given[p] if p in given else Const(defaults[p]) for p in params], node, given=known)

    def inline_rule(self, pyfunc, args, node):
        """(its parsed form, its result): rule function `pyfunc` inlined for the argument atoms `args` by position."""
        info = self.ctx.load(pyfunc)
        params = [a.arg for a in info.tree.args.args]
        return info, self.inline_bound(_Callee(pyfunc=pyfunc), info, params, args, node, rule=True)

    def check_same_shape(self, a, b, message):
        """Raise ValueError(message) where `a` and `b` differ in shape (`runtime.shape_differs`)."""
        differs = self.temp(Call("srcad.shape_differs", (a, b)), "differs")
        saved, self.out = self.out, []
        self.fail(ValueError, [ast.Constant(message)])
        raising, self.out = self.out, saved
        self.emit(If(differs, raising, [], self.origin))

    def through_jvp_rule(self, rule, name, args, node):
        """With `jvp`: the value is the rule's `out` plus its tangent, zero, for the steps `t = rule_step(a)`
        at the midpoints `rule_midpoint(a, t)`: first and second derivatives are the rule's, in both modes
        (runtime.rule_step)."""
        info = self.ctx.load(rule.jvp)
        if len(info.tree.args.args) != 2:
            raise RuleError(f"{where(self.origin)}: the jvp rule of `{name}` ({info.name}) takes "
                            f"{len(info.tree.args.args)} parameters; expected two: (primals, tangents)")
        steps = [self.through_step(a, "rule_step") for a in args]
        midpoints = [self.through_step(a, "rule_midpoint", t) for a, t in zip(args, steps)]
        _, result = self.inline_rule(rule.jvp, [Tuple(tuple(midpoints)), Tuple(tuple(steps))], node)
        pair = self.tuple_items(result)
        if pair is None or len(pair) != 2:
            raise RuleError(f"{where(self.origin)}: the jvp rule of `{name}` ({info.name}) returns "
                            f"{_count(pair)}; expected two: (out, out_tangent)")
        outs, tangents = (self.tuple_items(x) for x in pair)
        if (outs is None) != (tangents is None) or (outs is not None and len(outs) != len(tangents)):
            raise RuleError(f"{where(self.origin)}: the jvp rule of `{name}` ({info.name}) returns out = "
                            f"{_count(outs)} and out_tangent = {_count(tangents)}; expected one tangent per output")
        is_tuple = outs is not None
        if not is_tuple:
            outs, tangents = pair[:1], pair[1:]
        return [self.ruled_output(o, t, name) for o, t in zip(outs, tangents)], is_tuple

    def through_step(self, a, step, *more):
        """`srcad.<step>(a, *more)` (`runtime.rule_step`) of an argument: of each item of a tuple; None stays."""
        if isinstance(a, Tuple):
            return Tuple(tuple(self.through_step(x, step, *(m.items[k] for m in more)) for k, x in enumerate(a.items)))
        if a == Const(None):
            return a
        return self.temp(Call(f"srcad.{step}", (a, *more)), f"{step[5:]}_{a.id}" if isinstance(a, Name) else step[5:])

    def tuple_items(self, e):
        """The items of a tuple a helper returned (a literal, or a local bound to one); else None."""
        if isinstance(e, Tuple):
            return list(e.items)
        if isinstance(e, Name) and e.id in self.ctx.tuples:
            return [Name(n) for n in self.ctx.tuples[e.id]]
        return None

    def ruled_output(self, out, tangent, name):
        """`stop_gradient(out) + tangent`, once a check has made sure their shapes agree."""
        out, tangent = self.as_atom(out), self.as_atom(tangent)
        self.check_same_shape(out, tangent, f"the jvp rule of `{name}` returns an out_tangent of another shape "
                                            "than its out; expected the same shape")
        stopped = self.temp(Call("srcad.stop_gradient", (out,)), "stopped")
        return self.temp(BinOp("+", stopped, tangent), f"{name}_result")

    @staticmethod
    def captured(callee, own, rename, subst):
        """Bind the free names of a nested function to its definer's (a closure reads them at the call);
        returns those that are None there."""
        definer, nones = callee.definer, set()
        for node in ast.walk(callee.info.tree):
            n = node.id if isinstance(node, ast.Name) else None
            if n is None or n in own:
                continue
            if n in definer.subst:
                subst[n] = definer.subst[n]
            elif n in definer.rename:
                rename[n] = definer.rename[n]
            if n in definer.nones:
                nones.add(n)
        return nones

    def arg_value(self, node):
        """A helper's argument: an atom, a tuple of atoms (passed whole), or a function (a _Callee);
        None passed on as None."""
        if isinstance(node, ast.Name) and node.id in self.nones:
            return Const(None)
        function = self.callee(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
        if function is not None:
            return function
        e = self.expr(node)
        if isinstance(e, Tuple):
            return Tuple(tuple(self.as_atom(x) for x in e.items))
        return self.as_atom(e)

