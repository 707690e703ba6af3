"""The adjoint of one statement: what the reverse sweep does there, built from the rule table.

`LocalAdjoints(fn).of(s)` returns IR statements that read the values every
name held just *before* `s` ran (the reverse transform restores them first)
and move the adjoint of what `s` wrote onto what it read:

* `v = f(a, b)`: `d_a += d_v * pa`, `d_b += d_v * pb`, then `d_v` starts
  over (it belongs to the value `v` had before). A tree is differentiated
  down to its leaves; a function on whole arrays uses its transpose.
* `a[i] = e`: `d_e += d_a[i]`, `d_a[i] = 0` (a copy within one array takes
  the incoming adjoint out before zeroing, since NumPy reads the right-hand
  side whole before writing).
* `t += e` (an Accumulate of generated code): `d_e += d_t`.

Adjoint names are `d_<name>` (`adjoint_name`); the values an adjoint reads
are what the save analysis keeps available (`reads`).
"""
from functools import reduce

import numpy as np
from numba.core import types as nt
from numba.np import numpy_support

from ..analysis.types import gather_axis, index_array, rank, type_of
from ..errors import TransformError, problem, where
from ..ir import (Accumulate, Assign, Attribute, BinOp, Call, Compare, Const, Global, If, Name, Pop, Push, Slice, Store,
                  Subscript, Tuple, UnaryOp)
from ..ir.facts import Activity
from ..ir.forms import data_names, is_atom, is_tree, leaves
from ..ir.visit import all_blocks, children, clone, defines, names_in, own_exprs, subexpressions, walk
from .rules import (ARRAY_RULES, ELEMENTWISE, JOINS, NONDIFF, has_result_partial, instantiate, is_elementwise,
                    partials_of, no_rule, result_partial)

_SHAPE_ONLY_CALLS = frozenset({"np.zeros_like", "np.empty_like", "np.shape", "np.size", "len", "np.ndim"})


class LocalAdjoints:
    """The adjoints of the statements of `fn` (typed, with activity), memoized per statement.
    `shape_varying`: arrays whose bindings may differ in shape (their adjoints are made again).
    `overwritten`: where the target keeps results (`Policy.keeps_results`), the names the reverse sweep
    may have to bring back (`saving.LoopFacts`), which decide where a partial of `rules.result_partial`
    reads the statement's result (`result_read`); None where it never does."""

    def __init__(self, fn, shape_varying=frozenset(), overwritten=None):
        self.fn = fn
        self.shape_varying = shape_varying
        self.overwritten = overwritten
        self.active = fn.facts.of(Activity).active
        self.d = {}
        self.memo = {}
        self.locals = {}
        self.guards = set()      # flags of the zero-cotangent guards made (`unless_zero`)

    # ---- names ---------------------------------------------------------------------------------
    def adjoint_name(self, v):
        if v not in self.d:
            self.d[v] = self.fn.names.fresh(f"d_{v}")
        return self.d[v]

    def local(self, stmt, base):
        """One fresh name per statement and purpose."""
        key = (stmt.uid, base)
        if key not in self.locals:
            self.locals[key] = self.fn.names.fresh(base)
        return self.locals[key]

    def zero(self, v):
        """The adjoint of `v` set back to zero: 0.0; for an array, zeroed in place, or made again shaped
        like the binding `v` has now where bindings may differ in shape."""
        ty = self.fn.types.get(v)
        if isinstance(ty, nt.Array) and v not in self.shape_varying:
            return Store(self.adjoint_name(v), (Slice(),) * ty.ndim, Const(0.0))
        return self.initial(v)

    def initial(self, v):
        """The adjoint of `v` made: zeros shaped like `v`'s value now, or 0.0."""
        if isinstance(self.fn.types.get(v), nt.Array):
            return Assign(self.adjoint_name(v), Call("np.zeros_like", (Name(v),)))
        return Assign(self.adjoint_name(v), Const(0.0))

    def is_active(self, atom):
        return is_active_atom(atom, self.active)

    # ---- statements ----------------------------------------------------------------------------
    def of(self, s):
        """The adjoint statements of `s` (empty when it moves no derivative).

        A cotangent that is exactly zero contributes nothing, even times a partial that is inf or nan
        (`exp(-inf)` is 0 in a soft minimum, and the partial after it is inf): a scalar statement's
        adjoint runs only where its cotangent is not 0 (`unless_zero`), the partials along a path are
        multiplied through `srcad.cotangent_times` (0 after a partial that is 0), and so is an array
        cotangent by a partial."""
        if s.uid not in self.memo:
            out = self._build(s)
            for t in walk(out):
                t.origin = s.origin
                _check_scatter(self.fn, t)
            self.memo[s.uid] = out
        return self.memo[s.uid]

    def _build(self, s):
        if isinstance(s, Assign) and isinstance(s.value, Call) and s.value.fn == "srcad.rule_vjp":
            return self._rule_vjp(s) if s.target in self.active else []
        if isinstance(s, Assign):
            return self._assign(s) if s.target in self.active else []
        if isinstance(s, Store):
            return self._store(s) if s.array in self.active else []
        if isinstance(s, Accumulate):
            return self._accumulate_stmt(s)
        if isinstance(s, Push):
            return self._push(s) if s.stack in self.active else []
        if isinstance(s, Pop):
            return self._pop(s) if s.stack in self.active else self._pop_inactive(s)
        return []

    def result_read(self, s):
        """The name `s` binds its result to where the adjoint of `s` reads that result, not the
        arguments, for its partial (`y = math.tanh(x)`: `d_x += d_y * (1.0 - y * y)`), else None. The
        reverse sweep then runs that adjoint before it brings back `y`'s earlier value. Chosen where
        keeping `y` costs no more than calling again: `y` is bound once, or the call reads values the
        reverse sweep would have to bring back (`kept_is_cheaper`)."""
        if self.overwritten is None or not isinstance(s, Assign) or s.target not in self.active:
            return None
        v, ty = s.value, self.fn.types.get(s.target)
        if not has_result_partial(v):
            return None
        if s.target in names_in(v) or ty != result_type(self.fn, v):
            return None
        return s.target if kept_is_cheaper(s.target, v, self.overwritten) else None

    def reads(self, s):
        """(names whose values the adjoint of `s` reads, names it reads at all: shapes included). The
        result `result_read(s)` is among them: a value after `s`, not before."""
        stmts = self.of(s)
        defined = set().union(*(defines(t) for t in walk(stmts)))
        adjoints = set(self.d.values())
        every, values = set(), set()
        for t in walk(stmts):
            for e in own_exprs(t):
                every |= names_in(e)
                values |= value_names(e)
        keep = lambda ns: {n for n in ns if n not in adjoints and n not in defined}  # noqa: E731
        return keep(values), keep(every)

    def _assign(self, s):
        v = s.target
        dv = Name(self.adjoint_name(v))
        result = self.result_read(s)
        contributions = _grouped(self.contributions(s, s.value, self.fn.types.get(v), dv,
                                                    None if result is None else Name(result)))
        self_uses = [c for c in contributions if data_names(c[0]) == [v]]     # `v`, or an element or view of it
        others = [c for c in contributions if data_names(c[0]) != [v]]
        out = []
        if not self_uses:
            for atom, expr, mode, r in others:
                out += self.accumulate(atom, expr, mode, r)
            return self.unless_zero(s, dv, out, self.fn.types.get(v)) + [self.zero(v)]
        if len(self_uses) == 1 and self_uses[0][0] == Name(v) and \
                (self_uses[0][2] == "exact" or rank(self.fn.types.get(v)) == 0):
            for atom, expr, mode, r in others:
                out += self.accumulate(atom, expr, mode, r)
            new = self_uses[0][1]
            if rank(self.fn.types.get(v)) == 0 and self_uses[0][3] > 0:
                new = Call("np.sum", (new,))
            return self.unless_zero(s, dv, out + ([Assign(dv.id, new)] if new != dv else []),
                                    self.fn.types.get(v))    # 0 stays 0
        g = self.local(s, f"g_{v}")
        # the incoming adjoint is taken out, and `d_v` starts over as a new array (not zeroed in place:
        # `g` holds the old one)
        restart = Assign(dv.id, Call("np.zeros_like", (Name(g),))) if isinstance(self.fn.types.get(v), nt.Array) \
            and v not in self.shape_varying else self.zero(v)
        out = []
        for atom, expr, mode, r in _grouped(self.contributions(s, s.value, self.fn.types.get(v), Name(g))):
            out += self.accumulate(atom, expr, mode, r)
        return [Assign(g, dv), restart] + self.unless_zero(s, Name(g), out, self.fn.types.get(v))

    def unless_zero(self, s, cotangent, stmts, ty):
        """`stmts` (the adjoint of `s`) under `if cotangent != 0:` where the cotangent, a scalar of type `ty`,
        is multiplied by a partial that is not a constant (`tree`): tested once per statement, off the chain
        of products, so a cotangent that is exactly 0 sends no 0 * inf back. The test is bound to a name (an
        If reads its condition as the statement starts, also when this code is differentiated again)."""
        if isinstance(ty, nt.Array) or not any(_times_a_partial(x, cotangent)
                                               for t in stmts for e in own_exprs(t) for x in subexpressions(e)):
            return stmts
        flag = self.local(s, "nonzero")
        self.fn.types[flag] = nt.boolean
        self.guards.add(flag)
        return [Assign(flag, Compare("!=", cotangent, Const(0.0))), If(Name(flag), stmts)]

    def _rule_vjp(self, s):
        """`z = rule_vjp(out, args, key, k, n)`, one per output of a call through a custom VJP (front/lower.py
        `through_vjp_rule`): the statements of the user's `bwd`, kept in the branch `if rule_block(key):`,
        with its cotangents bound to the adjoints of the outputs' `z` (zero where one carries none); each
        cotangent they compute goes into its argument. They run once, at the first active `z`: the last
        the reverse sweep meets, when the others have their adjoints."""
        _, args, key, _, n = s.value.args
        group = _rule_outputs(self.fn, s, key, n.value)
        if s is not min((t for t in group if t.target in self.active), key=group.index):
            return []
        block = _rule_block(self.fn, key)
        marker = block[-1]
        out = [Assign(g.target, Name(self.adjoint_name(t.target)) if t.target in self.active else
                      _zero_like(self.fn, t.value.args[0])) for g, t in zip(block, group)]
        out += clone(block[len(group):-1])
        for a, c in _argument_cotangents(args.items, marker.call.args[1].items):
            out += self.accumulate(a, c, "exact", rank(type_of(self.fn, c)))
        return out + [self.zero(t.target) for t in group if t.target in self.active]

    def _store(self, s):
        view = Subscript(Name(self.adjoint_name(s.array)), s.index)
        stored_rank = rank(type_of(self.fn, Subscript(Name(s.array), s.index)))
        zero = Store(self.adjoint_name(s.array), s.index, Const(0.0))
        v = s.value
        assert is_atom(v), f"a stored value is an atom (front/flatten.py), not {v!r}: its adjoint would be lost"
        k = gather_axis(self.fn, s.index)
        first = index_array(self.fn, s.index[k]) if k is not None else None
        if first is not None and not isinstance(first.dtype, nt.Boolean) and any(self.is_active(a) for a in _atoms(v)):
            # through an index array, a repeated index keeps its last write: only that value gets its adjoint
            w = self.local(s, "last_write")
            self.fn.types[w] = nt.Array(nt.float64, 1, "C")
            size = Subscript(Attribute(Name(s.array), "shape"), (Const(k),))
            weights = Subscript(Name(w), (Slice(),) + (Const(None),) * (stored_rank - 1))
            return [Assign(w, Call("srcad.last_written", (s.index[k], size)))] + \
                self.accumulate(v, BinOp("*", view, weights), "reduce", stored_rank) + [zero]
        if isinstance(v, Subscript) and v.base == Name(s.array):
            # source and destination may overlap: take the adjoint out before zeroing it
            g = self.local(s, f"g_{s.array}")
            taken = Call("np.copy", (view,)) if stored_rank else view
            return [Assign(g, taken), zero] + self.accumulate(v, Name(g), "reduce", stored_rank)
        return self.accumulate(v, view, "reduce", stored_rank) + [zero]

    def _accumulate_stmt(self, s):
        """`t += e`: the adjoint of `t` flows to `e` (broadcast back up when `e` was summed down)."""
        t = s.target
        base = t if isinstance(t, Name) else t.base
        if not self.is_active(base):
            return []
        d_base = Name(self.adjoint_name(base.id))
        dt = d_base if isinstance(t, Name) else Subscript(d_base, t.index)
        value_ty = self.value_type(s.value)
        target_ty = type_of(self.fn, t)
        out_ty = target_ty if rank(target_ty) > rank(value_ty) else value_ty
        out = []
        for atom, expr, mode, r in _grouped(self.contributions(s, s.value, out_ty, dt)):
            out += self.accumulate(atom, expr, mode, r)
        return self.unless_zero(s, dt, out, out_ty)

    def value_type(self, e):
        return value_type(self.fn, e)

    def _push(self, s):
        """`push(S, v)`: the adjoint of the value on top of S flows to `v` (generated code saved it)."""
        top = self.local(s, f"g_{s.stack}")
        out = []
        for atom, expr, mode, r in self.contributions(s, s.value, self.value_type(s.value), Name(top)):
            out += self.accumulate(atom, expr, mode, r)
        return [Pop(self.adjoint_name(s.stack), Name(top))] + self.unless_zero(s, Name(top), out, self.value_type(s.value))

    def _pop(self, s):
        """`v = pop(S)`: the adjoint of `v` goes on top of the adjoint of S; `v`'s starts over."""
        t = s.target
        if isinstance(t, Name):
            dt = Name(self.adjoint_name(t.id))
            return [Push(self.adjoint_name(s.stack), dt), self.zero(t.id)]     # a new array: the pushed one is kept
        dt = Subscript(Name(self.adjoint_name(t.base.id)), t.index)
        taken = Call(".copy", (dt,)) if rank(type_of(self.fn, t)) else dt        # (C order, as the stack's)
        return [Push(self.adjoint_name(s.stack), taken), Store(self.adjoint_name(t.base.id), t.index, Const(0.0))]

    def _pop_inactive(self, s):
        """`v = pop(S)` of a value no derivative flows into: the adjoint of `v`'s old value starts at zero."""
        t = s.target
        return [self.zero(t.id)] if isinstance(t, Name) and t.id in self.active else []

    # ---- contributions -------------------------------------------------------------------------
    def contributions(self, s, value, out_ty, g, result=None):
        """(atom, adjoint expression, mode, rank of the expression) for each input of `value`, the
        value statement `s` computes (of type `out_ty`), given its adjoint `g`; `result`, the name
        holding that value where the partial is taken from it (`result_read`)."""
        out_rank = rank(out_ty)
        if isinstance(value, (Name, Subscript)) and is_atom(value):
            return [(value, g, "exact", out_rank)]
        if isinstance(value, (Const, Global, Attribute)):
            return []
        if is_tree(value, is_elementwise):
            return self.tree(value, out_ty, g, result)
        if isinstance(value, BinOp) and value.op == "@":
            return self.array_rule(s, "@", [value.left, value.right], None, g, out_rank)
        if isinstance(value, Call):
            fn = value.fn
            if fn in NONDIFF or fn == "srcad.stop_gradient":
                return []
            if fn == ".astype":
                return [(value.args[0], g, "exact", out_rank)]
            axis = value.keyword("axis")
            axis = axis.value if isinstance(axis, Const) else None
            if fn in ARRAY_RULES:
                return self.array_rule(s, fn, list(value.args), axis, g, out_rank, value.keywords)
            if fn in JOINS and value.args and isinstance(value.args[0], Tuple):
                return self.join_rule(fn, list(value.args[0].items), axis, g)
            if fn in ELEMENTWISE:
                return self.tree(value, out_ty, g, result)
            raise no_rule(s, fn)
        if isinstance(value, (BinOp, UnaryOp, Tuple)) and not any(self.is_active(a) for a in _atoms(value)):
            return []
        raise TransformError(f"{where(s.origin)}: cannot differentiate `{s.origin.text}`. Hint: write it with "
                             f"supported operations (docs/subset.md)")

    def tree(self, root, out_ty, g, result=None):
        """Chain rule down an elementwise tree: one contribution per active leaf, the incoming
        adjoint times the partials along the path to it; the root's partial from `result`, the name
        holding its value, where given (`rules.result_partial`)."""
        all_leaves = leaves(root)
        out_rank = rank(out_ty)
        scalar = not isinstance(out_ty, nt.Array) and \
            not any(isinstance(type_of(self.fn, a), nt.Array) for a in all_leaves)     # a 0-d array is not
        module = "math" if scalar and out_ty == nt.float64 else "np"
        one_array = len({a for a in all_leaves if rank(type_of(self.fn, a)) > 0}) <= 1
        found = []

        def visit(node, factors, negative):
            if is_atom(node):
                if not self.is_active(node):
                    return
                mode = "exact" if rank(type_of(self.fn, node)) == out_rank and one_array else "reduce"
                expr = reduce(times, factors, g)
                found.append((node, UnaryOp("-", expr) if negative else expr, mode, out_rank))
                return
            children, partials = partials_of(node)
            if node is root and result is not None:
                argument, of_result = result_partial(node)
                children, partials = [argument], (lambda *_: of_result(result),)
            for child, partial in zip(children, partials):
                if partial is None or not any(self.is_active(a) for a in leaves(child)):
                    continue
                p = instantiate(partial(*children), module)
                if p == Const(1.0) or p == Const(1):
                    visit(child, factors, negative)
                elif p == Const(-1.0) or p == Const(-1):
                    visit(child, factors, not negative)
                else:
                    visit(child, factors + [p], negative)
        visit(root, [], False)
        return found

    def zero_d(self, expr):
        """Does `expr` read a 0-d array (`np.array(x)` of a scalar) or its adjoint? (Then it is one too,
        and a scalar's adjoint takes its value, not the array.)"""
        primal = {d: v for v, d in self.d.items()}
        types = (self.fn.types.get(primal.get(n, n)) for n in names_in(expr))
        return any(isinstance(ty, nt.Array) and ty.ndim == 0 for ty in types)

    def array_rule(self, s, fn, args, axis, g, out_rank, keywords=()):
        ranks = [rank(type_of(self.fn, a)) for a in args]
        rule = ARRAY_RULES[fn]
        others = {k: v for k, v in keywords if k != "axis"}
        result = []
        for k, transpose in enumerate(rule.transposes):
            if k >= len(args) or transpose is None or not self.is_active(args[k]):
                continue
            found = None if others and not (rule.keywords and rule.keywords(others, ranks)) else \
                transpose(args, g, ranks, axis)
            if found is None:
                given = "".join(f", {k}={_shown(v)}" for k, v in (("axis", axis),) + tuple(others.items())
                                if v is not None)
                raise TransformError(f"{where(s.origin)}: no derivative rule for `{fn}` of "
                                     f"{_kinds(ranks)}{given} in `{s.origin.text}`. Hint: use explicit loops or a "
                                     f"supported form (docs/rules.md)")
            expr, mode = found
            result.append((args[k], expr, mode, ranks[k] if mode in ("exact", "expand") else out_rank))
        return result

    def join_rule(self, fn, items, axis, g):
        """The contributions of the arrays of a tuple (np.concatenate, np.stack)."""
        ranks = [rank(type_of(self.fn, x)) for x in items]
        result = []
        for k, item in enumerate(items):
            if self.is_active(item):
                expr, mode = JOINS[fn].transpose(items, k, g, ranks, axis)
                result.append((item, expr, mode, ranks[k]))
        return result

    def accumulate(self, atom, expr, mode, expr_rank):
        """Statements adding `expr` into the adjoint of `atom`."""
        if isinstance(atom, (Const, Global, Attribute)) or not self.is_active(atom):
            return []
        if isinstance(atom, Name):
            target = Name(self.adjoint_name(atom.id))
        else:
            target = Subscript(Name(self.adjoint_name(atom.base.id)), atom.index)
        ra = rank(type_of(self.fn, atom))
        if ra == 0 and (expr_rank > 0 or (not isinstance(type_of(self.fn, atom), nt.Array) and self.zero_d(expr))):
            return [Accumulate(target, Call("np.sum", (expr,)))]
        if ra == 0 or expr_rank == 0 or mode in ("exact", "expand"):
            return [Accumulate(target, expr)]
        return [Accumulate(target, expr, reduce=True)]


def is_active_atom(atom, active):
    """Does the atom `atom` (a name, or an element or region of one) read a name of `active`?"""
    if isinstance(atom, Name):
        return atom.id in active
    if isinstance(atom, Subscript) and isinstance(atom.base, Name) and not isinstance(atom.base, Attribute):
        return atom.base.id in active
    return False


def kept_is_cheaper(name, call, overwritten):
    """Is keeping the result of `call`, bound to `name`, for the reverse sweep cheaper than calling again?
    Yes where `name` is bound once (kept at most once), or where the call reads a value that is
    overwritten (it would be saved in the call's stead); not where it reads only values that stay
    (`math.exp(x[i])` of an argument: calling again costs no save, keeping costs one per iteration)."""
    return name not in overwritten or bool(names_in(call) & overwritten)


def value_type(fn, e):
    """The type of an elementwise value of `fn`: an array of its leaves' largest rank, else a float."""
    found = [type_of(fn, a) for a in leaves(e)] if is_tree(e, is_elementwise) or is_atom(e) else []
    arrays = [t for t in found if isinstance(t, nt.Array)]
    floats = [t for t in found if isinstance(t, nt.Float)]
    if arrays:          # as Numba types it: a float64 number makes float32 arrays float64, an integer does not
        dtypes = [numpy_support.as_dtype(t.dtype) for t in arrays] + [numpy_support.as_dtype(t) for t in floats]
        return max(arrays, key=lambda t: t.ndim).copy(dtype=numpy_support.from_dtype(np.result_type(*dtypes)))
    return floats[0] if floats else nt.float64


def result_type(fn, call):
    """The type of what an elementwise `call` returns: a new C-ordered array where it takes one (of a
    view of any layout), else a float."""
    ty = value_type(fn, call)
    return ty.copy(layout="C", readonly=False) if isinstance(ty, nt.Array) else ty


def times(cotangent, partial):
    """`cotangent * partial`, 0 where the cotangent is 0 (see `LocalAdjoints.of`); a constant partial is
    finite."""
    if not names_in(partial):
        return BinOp("*", cotangent, partial)
    return Call("srcad.cotangent_times", (cotangent, partial))


def _times_a_partial(e, cotangent):
    """Is `e` the product of `cotangent` by a partial that is not a constant (`times`)?"""
    if isinstance(e, Call) and e.fn == "srcad.cotangent_times" or isinstance(e, BinOp) and e.op == "*":
        left, right = (e.args if isinstance(e, Call) else (e.left, e.right))
        return left == cotangent and bool(names_in(right))
    return False


def _argument_cotangents(args, cotangents):
    """(argument, its cotangent) pairs of a custom VJP's arguments, an argument passed as a tuple item by
    item (its cotangent a Tuple: `front/lower.py` `cotangent_atoms`); those whose cotangent is None are left
    out."""
    for a, c in zip(args, cotangents):
        if c == Const(None):
            continue
        if isinstance(a, Tuple):
            yield from _argument_cotangents(a.items, c.items)
        else:
            yield a, c


def _check_scatter(fn, t):
    """An accumulation through an index array adds each of its indices (a scatter-add, see the
    backend): supported with one 1-d index array or mask on the first axis."""
    if not (isinstance(t, Accumulate) and isinstance(t.target, Subscript)):
        return
    index = t.target.index
    if any(index_array(fn, i) is not None for i in index) and gather_axis(fn, index) is None:
        raise problem(t.origin, f"`{t.origin.text}` indexes an array that carries a gradient with arrays of "
                                "indices other than one 1-d index array or mask after integer indices only "
                                "(`x[idx]`, `A[idx, :]`, `H[i, mask]`), which srcad cannot differentiate",
                      "index with one such array, or loop over the indices")


def _kinds(ranks):
    """Arguments by kind, for messages: `a 2-d array and a scalar`."""
    kinds = ["a scalar" if r == 0 else f"a {r}-d array" for r in ranks]
    return " and ".join(kinds) if len(kinds) <= 2 else ", ".join(kinds[:-1]) + " and " + kinds[-1]


def _shown(v):
    """A keyword's value as the user wrote it, where it is a constant."""
    if isinstance(v, Const):
        return repr(v.value)
    return v.path if isinstance(v, Global) else "..."


def _grouped(contributions):
    """Contributions to the same atom (in the same mode) summed into one: `x[i] * y` adds `d * y` and
    `x[i] * z` adds `d * z` into `d_x[i]` once, as `d * y + d * z`. Equal terms are counted, not summed
    again: `x * x` adds `2.0 * (d * x)` (the same number as `d * x + d * x`, computed once)."""
    terms = {}
    for atom, expr, mode, r in contributions:
        counts = terms.setdefault((atom, mode, r), {})       # by the text of the term (IR constants may be arrays)
        seen = counts.setdefault(repr(expr), [expr, 0])
        seen[1] += 1
    out = []
    for (atom, mode, r), counts in terms.items():
        total = None
        for expr, count in counts.values():
            term = expr if count == 1 else BinOp("*", Const(float(count)), expr)
            total = term if total is None else BinOp("+", total, term)
        out.append((atom, total, mode, r))
    return out


def _atoms(e):
    return [x for x in subexpressions(e) if is_atom(x)]


def value_names(e):
    """Names whose element values `e` reads (not only their shapes)."""
    if isinstance(e, Name):
        return {e.id}
    if isinstance(e, Attribute) and e.attr in ("shape", "size", "ndim", "dtype"):
        return set()
    parts = e.args[1:] + tuple(v for _, v in e.keywords) if isinstance(e, Call) and e.fn in _SHAPE_ONLY_CALLS \
        else children(e)
    return set().union(*(value_names(x) for x in parts)) if parts else set()


def _rule_outputs(fn, s, key, n):
    """The `rule_vjp` statements of the call `s` is one output of, in output order: in the block of `s`,
    the nearest to it for each output (code made from the forward may run the call again elsewhere)."""
    block = next(b for b in all_blocks(fn.body) if any(t is s for t in b))
    at = next(i for i, t in enumerate(block) if t is s)
    sites = [(i, t) for i, t in enumerate(block) if isinstance(t, Assign) and isinstance(t.value, Call)
             and t.value.fn == "srcad.rule_vjp" and t.value.args[2] == key]
    return [min((p for p in sites if p[1].value.args[3].value == k), key=lambda p: abs(p[0] - at))[1]
            for k in range(n)]


def _zero_like(fn, atom):
    return Call("np.zeros_like", (atom,)) if isinstance(type_of(fn, atom), nt.Array) else Const(0.0)


def _rule_block(fn, key):
    """The statements of `if rule_block(key):` in `fn`: the custom VJP of call `key`, ended by its
    `rule_cotangents` marker."""
    for t in walk(fn.body):
        if isinstance(t, If) and isinstance(t.cond, Call) and t.cond.fn == "srcad.rule_block" and t.cond.args == (key,):
            return t.body
    raise TransformError(f"{fn.name}: the code of custom VJP {key.value} is missing (internal error)")
