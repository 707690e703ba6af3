"""Forward mode: the tangent of a function, one statement at a time, from the same rule table.

`tangent(fn)` takes a typed primal with its activity and returns
`f_tangent(*args, *tangents) -> (*outputs, *output_tangents)`: one tangent
argument per active argument, in argument order, and one tangent per output
(zeros where an output does not depend on them).

Each statement is preceded by its tangent, which reads the values every name
held just before it, as the primal statement does:

* `v = f(a, b)`: `tan_v = pa * tan_a + pb * tan_b` (an elementwise tree is
  differentiated down to its leaves, each product a `cotangent_times`: 0 where
  either factor is 0, as in the adjoint, so that a partial that is 0 after one
  that is inf gives 0, not nan; a function of whole arrays uses its rule's
  `tangent`, a function of a tuple of arrays its join rule's);
* `a[i] = e`: `tan_a[i] = tan_e`;
* `t += e` (an Accumulate of generated code): `tan_t += tan_e`, with the same
  reduction;
* `push(S, e)` / `v = pop(S)` / `reserve(S, n)`: the same on a stack of
  tangents with a height of its own, so generated code (a gradient) has a
  tangent too: that is forward-over-reverse.

Names bound to another array or a view of one (`b = a`, `row = C[i, :]`)
have tangents bound the same way (`tan_row = tan_C[i, :]`), so writes through
aliases reach the tangent they share. Inactive values get no tangent: a term
whose input has none is left out, and a name with nothing active flowing in
starts at zero. Control flow is the primal's.
"""
from numba.core import types as nt

from ..analysis.types import rank, type_of
from ..errors import TransformError, where
from ..ir import (Accumulate, Assign, Attribute, BinOp, Call, Const, Effect, For, Function, Global, If, Name, Pop,
                  Push, Reserve, Stack, Store, Subscript, Tuple, UnaryOp, While)
from ..ir.facts import Activity, Bounds, Facts, Lowered
from ..ir.forms import is_atom, is_tree, leaves
from ..ir.visit import names_in
from .local import times, value_type
from .rules import ARRAY_RULES, ELEMENTWISE, JOINS, NONDIFF, instantiate, is_elementwise, no_rule, partials_of

# calls whose tangent is the argument's, as a new array (the primal makes a copy)
_COPIES = frozenset({"np.copy", ".copy", "np.array", "np.ascontiguousarray"})


def tangent(fn):
    """The tangent IR function of `fn` (typed, with activity facts); `fn` is left as it was."""
    return _Tangent(fn).function()


class _Tangent:
    def __init__(self, fn):
        self.fn = fn
        self.active = fn.facts.of(Activity).active
        self.names = fn.names
        self.types = dict(fn.types)
        self.stacks = dict(fn.stacks)
        self.tan = {}
        self.typed = Function(fn.name, [], [], [], types=self.types)     # the types of tangents too

    # ---- names ---------------------------------------------------------------------------------
    def name(self, v):
        """The tangent of name `v` (typed like it)."""
        if v not in self.tan:
            self.tan[v] = self.names.fresh(f"tan_{v}")
            if v in self.fn.types:
                self.types[self.tan[v]] = self.fn.types[v]
            if v in self.fn.stacks:
                stack = self.fn.stacks[v]
                top = self.names.fresh(f"tan_{stack.top}")
                self.types[top] = nt.intp
                self.stacks[self.tan[v]] = Stack(stack.item, top, stack.checked, stack.size)
        return self.tan[v]

    def is_active(self, atom):
        if isinstance(atom, Name):
            return atom.id in self.active
        return isinstance(atom, Subscript) and isinstance(atom.base, Name) and atom.base.id in self.active

    def of_atom(self, atom):
        """The tangent of an atom: `tan_x`, or the same element or view of `tan_x`; None if inactive."""
        if not self.is_active(atom):
            return None
        if isinstance(atom, Name):
            return Name(self.name(atom.id))
        return Subscript(Name(self.name(atom.base.id)), atom.index)

    def zero(self, v):
        """`tan_v` starting at zero, shaped like `v` now (after its statement ran)."""
        if isinstance(self.fn.types.get(v), nt.Array):
            return Assign(self.name(v), Call("np.zeros_like", (Name(v),)))
        return Assign(self.name(v), Const(0.0))

    # ---- the function --------------------------------------------------------------------------
    def function(self):
        fn = self.fn
        active_params = fn.facts.of(Activity).params      # one tangent each, used or not
        # a parameter that is not differentiated but gets derivatives written into it (`out[i] = x[i]`)
        # starts with a zero tangent
        written = [self.zero(p) for p in fn.params if p in self.active and p not in active_params]
        body = written + self.block(fn.body)
        outputs = list(fn.outputs) + [self.output_tangent(o) for o in fn.outputs]
        name = f"{fn.name}_tangent"
        return Function(name, list(fn.params) + [self.name(p) for p in active_params], body, outputs, True,
                        self.types, self.stacks, Facts(Lowered(), Bounds()), self.names, [],
                        fn.sources)

    def output_tangent(self, out):
        t = self.of_atom(out) if is_atom(out) else None
        if t is not None:
            return t
        return Call("np.zeros_like", (out,)) if rank(type_of(self.fn, out)) else Const(0.0)

    def block(self, stmts):
        out = []
        for s in stmts:
            out += self.statement(s)
        return out

    def statement(self, s):
        """The tangent statements of `s`, with `s` itself in its place."""
        if isinstance(s, Assign):
            return self.assign(s)
        if isinstance(s, Store):
            return self.store(s)
        if isinstance(s, Accumulate):
            return self.accumulate(s)
        if isinstance(s, Push):
            return self.push(s)
        if isinstance(s, Pop):
            return self.pop(s)
        if isinstance(s, Reserve):
            extra = [Reserve(self.name(s.stack), s.count, s.origin)] if s.stack in self.active else []
            return extra + [s]
        if isinstance(s, If):
            return [If(s.cond, self.block(s.body), self.block(s.orelse), s.origin)]
        if isinstance(s, For):
            return [For(s.var, s.start, s.stop, s.step, self.block(s.body), s.origin, s.parallel, s.phase)]
        if isinstance(s, While):
            return [While(s.cond, self.block(s.body), s.origin)]
        if isinstance(s, Effect):
            return [s]
        raise TransformError(f"{where(s.origin)}: no tangent rule for the statement {type(s).__name__}")

    def assign(self, s):
        v = s.target
        if v not in self.active:
            return [s]
        out_ty = self.fn.types.get(v)
        t = self.value(s, s.value, out_ty)
        if t is None:
            return [s, _at(self.zero(v), s)]
        if (is_atom(t) or is_tree(t, is_elementwise)) and rank(self.rank_of(t)) < rank(out_ty):
            # a scalar tangent of an array (`y = x + s`, only `s` active): broadcast once `y` exists
            before = self.names.fresh(f"tan_{v}_part")
            self.types[before] = self.rank_of(t)
            return [_at(Assign(before, t), s), s,
                    _at(Assign(self.name(v), BinOp("+", Call("np.zeros_like", (Name(v),)), Name(before))), s)]
        return [_at(Assign(self.name(v), _in_dtype(t, out_ty)), s), s]

    def store(self, s):
        if s.array not in self.active:
            return [s]
        t = self.value(s, s.value, type_of(self.fn, Subscript(Name(s.array), s.index)))
        return [_at(Store(self.name(s.array), s.index, Const(0.0) if t is None else t), s), s]

    def accumulate(self, s):
        base = s.target if isinstance(s.target, Name) else s.target.base
        if base.id not in self.active:
            return [s]
        t = self.value(s, s.value, type_of(self.fn, s.target))
        if t is None:
            return [s]
        target = self.of_atom(s.target)
        return [_at(Accumulate(target, t, s.reduce), s), s]

    def push(self, s):
        if s.stack not in self.active:
            return [s]
        t = self.value(s, s.value, self.fn.stacks[s.stack].item)
        if t is None:
            t = Call("np.zeros_like", (s.value,)) if rank(self.fn.stacks[s.stack].item) else Const(0.0)
        return [_at(Push(self.name(s.stack), t), s), s]

    def pop(self, s):
        target = s.target
        target_name = target.id if isinstance(target, Name) else target.base.id
        if target_name not in self.active:
            return [s]
        if s.stack in self.active:
            return [s, _at(Pop(self.name(s.stack), self.of_atom(target)), s)]
        if isinstance(target, Name):
            return [s, _at(self.zero(target.id), s)]
        return [s, _at(Store(self.name(target_name), target.index, Const(0.0)), s)]

    # ---- values --------------------------------------------------------------------------------
    def value(self, s, value, out_ty):
        """The tangent of the value `value` statement `s` computes (None: no active input)."""
        if is_atom(value):
            return None if isinstance(value, (Const, Global, Attribute)) else self.of_atom(value)
        if is_tree(value, is_elementwise):
            t = self.tree(value, out_ty)
            return self.copied(value, t)
        if isinstance(value, BinOp) and value.op == "@":
            return self.array_rule(s, "@", [value.left, value.right], None, ())
        if isinstance(value, Call):
            fn = value.fn
            if fn in NONDIFF or fn == "srcad.stop_gradient":
                return None
            if fn == ".astype":
                t = self.value(s, value.args[0], out_ty)
                return None if t is None else Call(".astype", (t,) + value.args[1:], value.keywords)
            axis = value.keyword("axis")
            axis = axis.value if isinstance(axis, Const) else None
            if fn in ARRAY_RULES:
                return self.array_rule(s, fn, list(value.args), axis, value.keywords)
            if fn in JOINS and value.args and isinstance(value.args[0], Tuple):
                items = list(value.args[0].items)
                ditems = [self.of_atom(x) for x in items]
                if all(d is None for d in ditems):
                    return None
                return JOINS[fn].tangent(items, ditems, [rank(type_of(self.fn, x)) for x in items], axis)
            if fn in ELEMENTWISE:
                return self.copied(value, self.tree(value, out_ty))
            raise no_rule(s, fn)
        if isinstance(value, (BinOp, UnaryOp, Tuple)) and not any(self.is_active(a) for a in names_atoms(value)):
            return None
        raise TransformError(f"{where(s.origin)}: cannot differentiate `{s.origin.text}`. Hint: write it with "
                             f"supported operations (docs/subset.md)")

    def tree(self, root, out_ty):
        """Chain rule down an elementwise tree: the sum over active leaves of the partials along the path
        to each, times its tangent."""
        scalar64 = out_ty == nt.float64 and all(rank(type_of(self.fn, a)) == 0 for a in leaves(root))
        module = "math" if scalar64 else "np"

        def visit(node):
            if is_atom(node):
                return self.of_atom(node)
            children, partials = partials_of(node)
            terms = []
            for child, partial in zip(children, partials):
                if partial is None or not any(self.is_active(a) for a in leaves(child)):
                    continue
                d = visit(child)
                if d is None:
                    continue
                p = instantiate(partial(*children), module)
                terms.append(d if p in (Const(1.0), Const(1)) else UnaryOp("-", d) if p in (Const(-1.0), Const(-1))
                             else times(d, p))
            return _sum(terms)
        return visit(root)

    def copied(self, value, t):
        """A tangent that is another name's array, made a new array where the primal makes one
        (`y = x.copy()`: `tan_y` must not share `tan_x`)."""
        if t is not None and is_atom(t) and rank(self.rank_of(t)) and not is_atom(value):
            copy = value.fn if isinstance(value, Call) and value.fn in _COPIES else ".copy"
            return Call(copy, (t,))       # the primal's own copy: `.copy()` keeps C order, as it does
        return t

    def array_rule(self, s, fn, args, axis, keywords):
        ranks = [rank(type_of(self.fn, a)) for a in args]
        dargs = [self.of_atom(a) if is_atom(a) else None for a in args]
        if all(d is None for d in dargs):
            return None
        rule = ARRAY_RULES[fn]
        others = {k: v for k, v in keywords if k != "axis"}
        found = None if others and not (rule.keywords and rule.keywords(others, ranks)) else \
            rule.tangent(args, dargs, ranks, axis)
        if found is None:
            raise TransformError(f"{where(s.origin)}: no tangent rule for `{fn}` of these arguments in "
                                 f"`{s.origin.text}`. Hint: use explicit loops or a supported form (docs/rules.md)")
        return found

    def rank_of(self, e):
        """The type of an elementwise tangent expression: that of its highest-rank leaf."""
        return value_type(self.typed, e)


def names_atoms(e):
    return [Name(n) for n in names_in(e)]


def _in_dtype(t, ty):
    """The tangent `t` in the dtype of its primal of type `ty` where that is float32: Numba widens float32
    times a float64 constant (a partial's `1.0 - ...`) to float64, and a name must keep one type."""
    dtype = getattr(ty, "dtype", ty)
    if dtype != nt.float32 or is_atom(t):
        return t
    return Call(".astype", (t, Global("np.float32"))) if isinstance(ty, nt.Array) else Call("np.float32", (t,))


def _sum(terms):
    if not terms:
        return None
    total = terms[0]
    for t in terms[1:]:
        total = BinOp("-", total, t.operand) if isinstance(t, UnaryOp) and t.op == "-" else BinOp("+", total, t)
    return total


def _at(stmt, s):
    stmt.origin = s.origin
    return stmt


__all__ = ["tangent"]
