"""Elementwise array statements as loops over their elements: one pass, no temporaries.

NumPy evaluates `d_c += cotangent_times(d_x, 1.0 - np.tanh(c) ** 2)` one operation at a time, each
into a new array: four allocations and four passes over memory where one loop does. Inside a loop
over time steps, on arrays of a few dozen elements, the allocations cost more than the arithmetic.
This pass writes such a statement as a loop nest over the elements of its result:

    x = a * b + np.exp(c)        ->   x = np.empty((a.shape[0],), np.float64)
                                      for e in range(a.shape[0]):
                                          x[e] = a[e] * b[e] + np.exp(c[e])
    d[i] += u * v                ->   the same loop adding into the view d[i]
    s += np.sum(u * v)           ->   a sum kept in a scalar, added to s once
    r = np.sum(u * v, axis=1)    ->   per row a sum kept in a scalar, stored in r once
    sum_into(d_m[k], -d_c)       ->   each element of -d_c added into d_m[k] at its trailing indices
    d_t[:, :] = np.expand_dims(d_r, 1)
    d_c += d_t * c               ->   one loop reading d_r[e] where d_c's read d_t[e, e2]

A statement qualifies when its value is arithmetic and elementwise functions (`ELEMENTWISE`) over
float64 arrays and scalars (integer and boolean arrays too, where the result goes into floats: a mask
in the adjoint of `np.max`), with at least one operation on an array (a copy or a scalar fill makes no
temporary). Operands of lower rank are aligned on the trailing axes, and a static new axis (`m[:, None]`)
broadcasts, as in NumPy. Whether every other axis has the result's length is known only when the code
runs: the loop runs under that check, and where it fails (NumPy broadcasts an axis of length 1, or
raises) the statement runs as written. Writes and additions go only into arrays of the adjoint's own,
which no other name views, and only at an index the value does not read at another place, so no
element is read after the loop has written it; an assignment makes a new array. Sums add in the same
order as Numba's `np.sum` of the temporary would.

Statements inside loops, where the arrays are made again on every iteration. One run once per call
gains little and would cost compile time (the loop nest and the statement as written are both
compiled), unless it calls a function of the maths library or sums along an axis (`_pays_once`).
CPU code only (`Policy.elementwise_loops`): a GPU thread runs scalar code already.
"""
from collections import Counter
from copy import copy

from numba.core import types as nt

from ..analysis.types import index_array, type_of
from ..ir import Accumulate, Assign, Attribute, BinOp, Call, Compare, Const, For, Global, If, Name, Slice, Store, \
    Subscript, Tuple, UnaryOp, While
from ..ir.facts import Reverse
from ..ir.visit import blocks, children, defines, names_in, reads, rebuild, subexpressions, substitute, walk
from .first_writes import NEW_ARRAYS, arrays_held_elsewhere, held_after, viewed_arrays, viewed_by

ARITHMETIC = frozenset({"+", "-", "*", "/", "**"})

# functions of an element that cost a call of the maths library each: worth computing once
TRANSCENDENTAL = frozenset({"np.exp", "np.log", "np.tanh", "np.sin", "np.cos", "np.tan", "np.log1p", "np.expm1",
                            "np.sinh", "np.cosh", "np.arctan", "np.arcsin", "np.arccos"})

# functions that act element by element, and whose scalar form gives what their array form gives
ELEMENTWISE = TRANSCENDENTAL | frozenset({
    "np.sqrt", "np.abs", "np.square", "np.negative",
    "srcad.cotangent_times", "srcad.finite_or_zero", "srcad.log_or_zero", "srcad.reciprocal_or_zero",
    "srcad.power_slope",
})

# calls of one array giving a scalar: evaluated once, before the loop
SCALAR_OF_ARRAY = frozenset({"np.sum", "np.max", "np.min", "np.mean", "np.prod"})


def loop_elementwise(fn):
    """Rewrite, in place, the qualifying statements of `fn` (see the module) inside loops, not parallel
    ones: where the arrays are made again on every iteration. A statement run once per call keeps its
    NumPy form, which Numba compiles faster than a loop nest and its fallback, unless `_pays_once`."""
    own = fn.facts.of(Reverse).adjoints if fn.facts.has(Reverse) else set()
    own = {n for n in own if getattr(fn.types.get(n), "ndim", 0) >= 1} - viewed_arrays(fn) - arrays_held_elsewhere(fn)
    for s in walk(fn.body):
        if isinstance(s, Assign) and s.target not in fn.types:
            _infer_type(fn, s)
    _in_block(fn, fn.body, own, _uses(fn))
    return fn


def _infer_type(fn, s):
    """The type of a name a pass made after typing, where its value says it: another name's (`g_h = d_h`),
    or a comparison's mask (`np.equal(terms, m)`, in the adjoint of `np.max`)."""
    v = s.value
    if isinstance(v, Name) and v.id in fn.types:
        fn.types[s.target] = fn.types[v.id]
    elif isinstance(v, Call) and v.fn in _COMPARED and not v.keywords:
        ranks = [t.ndim for t in (type_of(fn, a) for a in v.args) if isinstance(t, nt.Array)]
        if ranks and all(isinstance(a, (Name, Subscript, Const)) for a in v.args):
            fn.types[s.target] = nt.Array(nt.boolean, max(ranks), "C")


_COMPARED = {"np.equal": "==", "np.not_equal": "!=", "np.less": "<", "np.less_equal": "<=", "np.greater": ">",
             "np.greater_equal": ">="}


def _in_block(fn, stmts, own, uses, in_loop=False):
    """`stmts` rewritten. Besides `own`, an array this block made anew (`d = np.zeros_like(g)` after
    `g = d`) is written by a loop while no other name has been bound to it since. Temporaries that only
    the statement after them reads (`shared = -g; e = np.exp(shared); d_g -= d_s * e / (1.0 + e) ** 2`,
    as `share` binds a subexpression a formula repeats) go into that statement's loop, not into arrays
    of their own; so does a fill of a whole array that only the next statement reads (`_with_fill`)."""
    out, fresh, held = [], set(), []
    for s in stmts:
        if isinstance(s, For) and s.parallel:
            out.extend(_emitted(fn, held, own | fresh))
            out.append(s)
            fresh, held = set(), []
            continue
        for block in blocks(s):
            _in_block(fn, block, own, uses, in_loop or isinstance(s, (For, While)))
        if not in_loop:
            out.extend((_as_loop(fn, s, own | fresh) if _pays_once(s) else None) or [s])
        elif _is_temporary(fn, s, uses) and not _holds_fill(held):
            held.append(s)
            continue
        elif _resets_after_fill(held, s, own):
            held.append(s)
            continue
        else:
            for t in held:
                fresh = _fresh_after(fn, t, fresh)
            fused = _with_fill(fn, held, s, own | fresh) or _with_temporaries(fn, s, held, uses, own | fresh)
            if not fused:
                out.extend(_emitted(fn, held, own | fresh))
            held = []
            if not fused and _fills_for_next(fn, s, own, uses):
                held.append(s)           # for the statement after it (`_with_fill`)
                continue
            out.extend(fused or _as_loop(fn, s, own | fresh) or [s])
        fresh = _fresh_after(fn, s, fresh)
    out.extend(_emitted(fn, held, own | fresh))
    stmts[:] = out


def _pays_once(s):
    """Is `s` worth a loop where it runs once per call: does it call a function of the maths library
    (the loop calls `vector_math`'s exp and tanh, which vectorise, where NumPy's call the C library once
    per element) or sum along an axis (Numba's `np.sum(a, axis=k)` takes twice the loop's time)?"""
    value = getattr(s, "value", None)
    return value is not None and (_axis_sum(value) is not None or any(
        isinstance(x, Call) and x.fn in TRANSCENDENTAL for x in subexpressions(value)))


def statements_in_loops(fn):
    """The ids of the statements this pass may rewrite: inside a loop, none of them parallel."""
    found = set()

    def visit(stmts, in_loop):
        for s in stmts:
            if isinstance(s, For) and s.parallel:
                continue
            if in_loop:
                found.add(id(s))
            for block in blocks(s):
                visit(block, in_loop or isinstance(s, (For, While)))
    visit(fn.body, False)
    return found


def _uses(fn):
    """How many statements of `fn` read each name (the outputs count as one), and how many bind it."""
    read, bound = Counter(), Counter()
    for s in walk(fn.body):
        read.update(reads(s))
        bound.update(defines(s))
    for o in fn.outputs:
        read.update(names_in(o))
    return read, bound


def _is_temporary(fn, s, uses):
    """An array made by one elementwise operation and bound nowhere else: perhaps a temporary only the
    statements after it read."""
    read, bound = uses
    return isinstance(s, Assign) and _operates(s.value) and _maybe_float_array(fn.types.get(s.target)) \
        and bound[s.target] == 1 and read[s.target] >= 1 and s.target not in names_in(s.value)


def _emitted(fn, held, own):
    """Held temporaries, each a loop of its own after all."""
    return [x for t in held for x in (_as_loop(fn, t, own) or [t])]


def _with_temporaries(fn, s, held, uses, own):
    """`s` as one loop into which the held temporaries go, each read of one becoming its value; None
    unless they are read nowhere else and `s` becomes a loop."""
    if not held or not isinstance(s, (Assign, Store, Accumulate)) or not all(isinstance(t, Assign) for t in held):
        return None
    read, _ = uses
    names = {t.target for t in held}
    inside = Counter(n for x in held + [s] for n in reads(x) if n in names)
    if inside != {n: read[n] for n in names} or names & set().union(*map(names_in, _places(s))):
        return None
    value = {}
    for t in held:
        value[t.target] = substitute(t.value, value)
    merged = copy(s)
    merged.value = substitute(s.value, value)
    return _as_loop(fn, merged, own)


def _fills_for_next(fn, s, own, uses):
    """Is `s` a fill of a whole array of the adjoint's own that only the statement after it can read
    (`d_t5[:, :] = np.expand_dims(d_t6, 1)`, the adjoint of a sum along an axis, then
    `d_qx[:, :] = 2.0 * (d_t5 * qx)`): no other statement reads or writes the array?"""
    read, _ = uses
    ty = fn.types.get(s.array) if isinstance(s, Store) else None
    return _is_float_array(ty) and s.array in own and read[s.array] == 2 and len(s.index) == ty.ndim and \
        all(i == Slice() for i in s.index) and _filled_value(fn, s.value) is not None


def _filled_value(fn, v):
    """What a fill writes, as an operand that broadcasts in a loop nest (`np.expand_dims(d, 1)` as
    `d[:, None]`), or None."""
    if isinstance(v, Call) and v.fn == "np.expand_dims" and len(v.args) == 2 and not v.keywords \
            and isinstance(v.args[0], Name) and isinstance(v.args[1], Const) and type(v.args[1].value) is int:
        ty = fn.types.get(v.args[0].id)
        if not _is_float_array(ty):
            return None
        axis = v.args[1].value % (ty.ndim + 1) if -ty.ndim - 1 <= v.args[1].value <= ty.ndim else None
        return None if axis is None else Subscript(v.args[0], (Slice(),) * axis + (Const(None),))
    return v if _operates(v) or isinstance(v, Name) and _is_float_array(fn.types.get(v.id)) else None


def _holds_fill(held):
    """Do the statements held start with a fill (`_fills_for_next`), the resets after it following?"""
    return bool(held) and isinstance(held[0], Store)


def _resets_after_fill(held, s, own):
    """Is `s` a reset of another array of the adjoint's own (`d_t6[:] = 0.0`, after the fill read it), after
    the fill `held` starts with: one the loop of the statement reading the fill runs before instead?"""
    return _holds_fill(held) and isinstance(s, Store) and isinstance(s.value, Const) and s.array in own and \
        s.array not in {t.array for t in held} and all(isinstance(i, Slice) for i in s.index)


def _with_fill(fn, held, s, own):
    """`s` as one loop that reads, for the filled array of `held` (`_fills_for_next`), the value filled
    in, under a check that the array has the loop's shape (the fill's broadcast is then the loop's);
    the fill and `s` as written where the check fails. None unless `s` becomes a loop."""
    if not _holds_fill(held) or not isinstance(s, (Assign, Store, Accumulate)):
        return None
    fill, resets = held[0], held[1:]
    written = {_base(p) for p in _places(s)} | defines(s)
    if fill.array in written or any(isinstance(x, Subscript) and x.base == Name(fill.array)
                                    for x in subexpressions(s.value)) \
            or {t.array for t in resets} & (reads(s) | written):
        return None
    merged = copy(s)
    merged.value = substitute(s.value, {fill.array: _filled_value(fn, fill.value)})
    fused = _as_loop(fn, merged, own, witness=fill.array, fallback=[fill, s])
    return fused and fused + resets


def _places(s):
    """The expressions of `s` that say where it writes (not what)."""
    if isinstance(s, Store):
        return [Name(s.array), *s.index]
    if isinstance(s, Accumulate):
        return [s.target]
    return []


def _fresh_after(fn, s, fresh):
    """The arrays made anew and held by one name only, after `s`."""
    for t in [t for block in blocks(s) for t in walk(block)] + [s]:
        fresh = fresh - held_after(t, fn.types)
        if isinstance(t, Assign):
            fresh = fresh - {t.target} - viewed_by(t.value)
    if isinstance(s, Assign) and isinstance(s.value, Call) and s.value.fn in NEW_ARRAYS:
        fresh = fresh | {s.target}
    return fresh


class _Unfit(Exception):
    """The statement is left as written."""


def _as_loop(fn, s, own, witness=None, fallback=None):
    """The statements that replace `s`, or None. `witness`: the array of a fill (`_with_fill`), which must
    have the loop's shape; `fallback`: what runs where the loop's checks fail (`s`)."""
    def nest(exact_operands=False):
        return _Nest(fn, s, exact_operands, witness, fallback)
    try:
        if isinstance(s, Assign) and _operates(s.value) and _maybe_float_array(fn.types.get(s.target)):
            return nest().assign(s.target)
        if isinstance(s, Assign) and (summed := _axis_sum(s.value)) and _maybe_float_array(fn.types.get(s.target)):
            return nest().reduced(s.target, *summed)
        if isinstance(s, Store) and s.array in own and _operates(s.value):
            return nest(exact_operands=True).into(Subscript(Name(s.array), s.index), add=False)
        if isinstance(s, Accumulate) and isinstance(type_of(fn, s.target), nt.Float):
            summed = _summed_operation(s.value) or (s.value if s.reduce and _operates(s.value) else None)
            return nest(exact_operands=True).summed(summed) if summed is not None else None
        if isinstance(s, Accumulate) and _base(s.target) in own and _operates(s.value):
            return nest(exact_operands=True).into(s.target, add=True)
    except _Unfit:
        return None
    return None


def _base(target):
    e = target.base if isinstance(target, Subscript) else target
    return e.id if isinstance(e, Name) else None


def _operates(e):
    """Is `e` an operation (not a name, an element or a view: those make no temporary)?"""
    return isinstance(e, (BinOp, UnaryOp)) or isinstance(e, Call) and e.fn in ELEMENTWISE


def is_comparison(e):
    """Is `e` a comparison element by element (`np.equal(terms, m)`: a mask)?"""
    return isinstance(e, Call) and e.fn in _COMPARED and len(e.args) == 2 and not e.keywords


def is_mask_of_a_loop(fn, e):
    """A comparison of a float64 array with a number (`np.equal(terms, m)`, the mask of the adjoint of
    `np.max`): in a statement this pass rewrites, each loop compares the element it reads, where a
    temporary (`opt/shared.py`) would allocate the mask, write it and read it back, on every iteration
    of the loop around it (ADBench GMM's log-sum-exp per point: 10,000 masks of 5 elements per gradient)."""
    if not is_comparison(e) or not all(isinstance(a, (Name, Subscript, Const)) for a in e.args):
        return False
    kinds = [type_of(fn, a) for a in e.args]
    arrays = [_is_float_array(t) for t in kinds]
    return arrays.count(True) == 1 and all(a or isinstance(t, (nt.Number, nt.Boolean)) for a, t in zip(arrays, kinds))


def _axis_sum(e):
    """(the array, the axis) of `np.sum(a, axis=k)`, `k` a number, or None."""
    if isinstance(e, Call) and e.fn == "np.sum" and len(e.args) == 1 and len(e.keywords) == 1:
        axis = e.keyword("axis")
        if isinstance(axis, Const) and type(axis.value) is int:
            return e.args[0], axis.value
    return None


def _summed_operation(e):
    """The operation `e` sums (`np.sum(u * v)`, `np.sum(np.equal(a, m))`), or None."""
    if isinstance(e, Call) and e.fn == "np.sum" and len(e.args) == 1 and not e.keywords \
            and (_operates(e.args[0]) or is_comparison(e.args[0])):
        return e.args[0]
    return None


def _is_float_array(ty):
    return isinstance(ty, nt.Array) and ty.dtype == nt.float64


def _maybe_float_array(ty):
    """A name's type: a float64 array, or not known (a name a pass after typing made)."""
    return ty is None or _is_float_array(ty)


def _rank_of(fn, e):
    ty = type_of(fn, e)
    return ty.ndim if isinstance(ty, nt.Array) else 0 if isinstance(ty, (nt.Number, nt.Boolean)) else None


class _Nest:
    """The loop nest of one statement: its array operands (leaves), their views, the result's shape."""

    def __init__(self, fn, s, exact_operands=False, witness=None, fallback=None):
        self.fn, self.s = fn, s
        self.exact_operands = exact_operands    # arrays of integers and booleans too (into a float target)
        self.witness = witness                  # an array that must have the result's shape (`_with_fill`)
        self.fallback = fallback or [s]
        self.leaves = {}          # array operand -> per axis: True (indexed) or False (a new axis, length 1)
        self.ranks = {}
        self.before = []          # views and scalars made once, before the check
        self.views = {}

    # ---- what the value is made of ----

    def rank(self, e):
        if e not in self.ranks:
            self.ranks[e] = self._rank(e)
        return self.ranks[e]

    def _rank(self, e):
        if isinstance(e, Const):
            if isinstance(e.value, (bool, int, float)):
                return 0
            raise _Unfit
        if isinstance(e, (Name, Subscript)):
            return self._operand(e)
        if isinstance(e, BinOp) and e.op in ARITHMETIC:
            rank = max(self.rank(e.left), self.rank(e.right))
            for exact, other in ((e.left, e.right), (e.right, e.left)):
                if self._is_exact_array(exact) and not (e.op in ("*", "/") and self._is_float(other)):
                    raise _Unfit      # `mask + mask` is a logical or in NumPy, 2 element by element
            return rank
        if isinstance(e, UnaryOp) and e.op == "-":
            if self._is_exact_array(e.operand):
                raise _Unfit      # NumPy refuses the negative of a mask
            return self.rank(e.operand)
        if isinstance(e, Call) and not e.keywords and e.fn in ELEMENTWISE:
            return max(self.rank(a) for a in e.args)
        if is_comparison(e) and self.exact_operands:
            return max(self.rank(a) for a in e.args)
        if isinstance(e, Call) and not e.keywords and len(e.args) == 1 and e.fn in SCALAR_OF_ARRAY \
                and self._is_array(e.args[0]):
            return 0
        if isinstance(e, Call) and e.fn.startswith("math.") and all(self.rank(a) == 0 for a in e.args):
            return 0
        raise _Unfit

    def _is_array(self, e):
        """Is `e` an array: one of a known type, or an operation of this pass's on arrays (its leaves are
        not this statement's: a scalar part of the value is computed before the loop)?"""
        if isinstance(type_of(self.fn, e), nt.Array):
            return True
        try:
            return (_operates(e) or is_comparison(e)) and _Nest(self.fn, self.s, exact_operands=True).rank(e) > 0
        except _Unfit:
            return False

    def _is_exact_array(self, e):
        if is_comparison(e):
            return self.rank(e) > 0
        ty = type_of(self.fn, e) if e in self.leaves else None
        return isinstance(ty, nt.Array) and not _is_float_array(ty)

    def _is_float(self, e):
        ty = type_of(self.fn, e) if isinstance(e, (Name, Subscript, Const)) else None
        return isinstance(getattr(ty, "dtype", ty), nt.Float)

    def _operand(self, e):
        ty = type_of(self.fn, e)
        if isinstance(ty, nt.Boolean) or isinstance(ty, nt.Number) and not isinstance(ty, nt.Complex):
            return 0
        if not (_is_float_array(ty) or self.exact_operands and isinstance(ty, nt.Array)
                and isinstance(ty.dtype, (nt.Integer, nt.Boolean))):
            raise _Unfit
        self.leaves[e] = _axes(self.fn, e, ty.ndim)
        return ty.ndim

    # ---- the loop ----

    def assign(self, target):
        """`target = value` as a new array filled by the loop."""
        rank = self.rank(self.s.value)
        if rank == 0:
            raise _Unfit
        full = self._full_operand(rank)
        shape = self._shape_of(full)
        out, done = self._new_array(target, rank)
        index = self._index(rank)
        make = Assign(out, Call("np.empty", (Tuple(tuple(shape)), _FLOAT64)), self.s.origin)
        loop = _loop(index, shape, self._once(Store(out, index, self.element(self.s.value, index), self.s.origin)))
        return self._guarded(shape, [make, loop] + done, skip=full)

    def _new_array(self, target, rank):
        """The name the loop fills for `target = ...` (a new one where the value reads `target`), and what
        binds `target` to it after the loop."""
        out = self.fn.names.fresh("fused") if target in names_in(self.s.value) else target
        for name in {out, target}:
            self.fn.types.setdefault(name, nt.Array(nt.float64, rank, "C"))
        return out, [Assign(target, Name(out), self.s.origin)] if out != target else []

    def into(self, region, add):
        """`region[...] = value` (or `+=`), `region` an array of the adjoint's own or a part of it. A value
        of higher rank, or into a region with a new axis (`d_m[:, None]`), added with `reduce` (`sum_into`),
        is summed over the axes `region` lacks: the loop runs over its elements, each added into the element
        of `region` at its trailing indices, in the order `runtime.sum_into` adds them."""
        rank, value_rank = _rank_of(self.fn, region), self.rank(self.s.value)
        if not rank or not _is_float_array(type_of(self.fn, region)):
            raise _Unfit
        axes = _axes(self.fn, region, rank)
        summed = value_rank > rank or not all(axes)
        if summed and not (add and self.s.reduce and value_rank >= rank):
            raise _Unfit
        base = _base(region)
        if any(base in names_in(x) and x != region for x in subexpressions(self.s.value)
               if isinstance(x, Subscript) or x == Name(base)):
            raise _Unfit                  # the value reads the array at another place than it writes
        view, whole = self._view(region), region
        if summed:
            whole = self._full_operand(value_rank)
            self.leaves[region] = axes         # checked to have the trailing lengths, a new axis none
        shape = self._shape_of(whole)
        index = self._index(len(shape))
        value = self.element(self.s.value, index)
        at = tuple(i if real else Const(0) for i, real in zip(index[len(index) - rank:], axes))
        write = Accumulate(Subscript(Name(view), at), value, origin=self.s.origin) if add else \
            Store(view, at, value, self.s.origin)
        return self._guarded(shape, [_loop(index, shape, self._once(write))], skip=whole)

    def reduced(self, target, value, axis):
        """`target = np.sum(value, axis=axis)` as a new array: the loop nest runs over the elements of
        `value` and adds each into its element of the result, which starts at 0.0, in the order Numba's
        `np.sum` adds them (a result of 1,000 sums of 10: 2.8 us here, 6.6 us as the temporary `value` and
        Numba's sum). Over the last axis, the sum is kept in a scalar and stored once."""
        rank = self.rank(value)
        if rank < 2 or not -rank <= axis < rank:
            raise _Unfit
        axis %= rank
        full = self._full_operand(rank)
        shape, index = self._shape_of(full), self._index(rank)
        kept, kept_shape = index[:axis] + index[axis + 1:], shape[:axis] + shape[axis + 1:]
        out, done = self._new_array(target, rank - 1)
        element, o = self.element(value, index), self.s.origin
        if axis == rank - 1:
            total = self.fn.names.fresh("total")
            self.fn.types[total] = nt.float64
            inner = _loop(index[-1:], shape[-1:], self._once(Accumulate(Name(total), element, origin=o)))
            nest = _loop(kept, kept_shape, [Assign(total, Const(0.0), o), inner, Store(out, kept, Name(total), o)])
            make = Assign(out, Call("np.empty", (Tuple(tuple(kept_shape)), _FLOAT64)), o)
        else:
            nest = _loop(index, shape, self._once(Accumulate(Subscript(Name(out), kept), element, origin=o)))
            make = Assign(out, Call("np.zeros", (Tuple(tuple(kept_shape)), _FLOAT64)), o)
        return self._guarded(shape, [make, nest] + done, skip=full)

    def _full_operand(self, rank):
        """An operand indexed on every axis of a value of `rank` axes: the loop takes its shape."""
        full = [e for e, axes in self.leaves.items() if len(axes) == rank and all(axes)]
        if not full:
            raise _Unfit
        return full[0]

    def summed(self, value):
        """`target += np.sum(value)` as a loop adding into a scalar, then one addition."""
        rank = self.rank(value)
        if rank == 0:
            raise _Unfit
        full = self._full_operand(rank)
        shape = self._shape_of(full)
        total = self.fn.names.fresh("total")
        self.fn.types[total] = nt.float64
        index = self._index(rank)
        body = [Assign(total, Const(0.0), self.s.origin),
                _loop(index, shape, self._once(Accumulate(Name(total), self.element(value, index),
                                                          origin=self.s.origin))),
                Accumulate(self.s.target, Name(total), origin=self.s.origin)]
        return self._guarded(shape, body, skip=full)

    def _once(self, write):
        """The loop's body: `write`, a function of an element that it calls more than once (a formula's
        repeated factor: `np.exp(-g[e])` in the adjoint of a sigmoid) computed once before it."""
        body = []
        while True:
            counts = Counter(x for x in subexpressions(write.value) if isinstance(x, Call) and x.fn in ELEMENTWISE)
            repeated = [x for x, n in counts.items() if n > 1]
            if not repeated:
                return body + [write]
            call = min(repeated, key=lambda x: sum(1 for _ in subexpressions(x)))
            name = self.fn.names.fresh(call.fn.rsplit(".", 1)[-1] + "_here")
            self.fn.types[name] = nt.float64
            body.append(Assign(name, call, write.origin))
            write.value = rebuild(write.value, lambda x, call=call, name=name: Name(name) if x == call else x)

    def element(self, e, index):
        """`e` at one element of the result (`index`: the loop variables, one per axis of the result)."""
        if e in self.leaves:
            axes = self.leaves[e]
            at = index[len(index) - len(axes):]
            return Subscript(Name(self._view(e)), tuple(i if real else Const(0) for i, real in zip(at, axes)))
        if self.rank(e) == 0:
            return self._scalar(e)
        if is_comparison(e):
            return Compare(_COMPARED[e.fn], *(self.element(a, index) for a in e.args))
        return _with_children(e, [self.element(c, index) for c in children(e)])

    def _scalar(self, e):
        """A scalar part of the value: computed once, before the loop, where it calls anything; a sum of
        an elementwise value (`np.sum(np.equal(terms, m))`, the count of tied extrema) as a loop of its own."""
        if not any(isinstance(x, Call) for x in subexpressions(e)):
            return e
        name = self.fn.names.fresh("scalar")
        summed = _summed_operation(e)
        if summed is not None and self._is_array(summed):
            self.fn.types[name] = nt.float64
            total = Accumulate(Name(name), e, origin=self.s.origin)
            self.before += [Assign(name, Const(0.0), self.s.origin), *(_as_loop(self.fn, total, set()) or [total])]
        else:
            self.before.append(Assign(name, e, self.s.origin))
        return Name(name)

    def _view(self, e):
        if isinstance(e, Name):
            return e.id
        if e not in self.views:
            self.views[e] = self.fn.names.fresh("view")
            self.fn.types[self.views[e]] = nt.Array(nt.float64, len(_axes(self.fn, e, type_of(self.fn, e).ndim)), "A")
            self.before.append(Assign(self.views[e], e, self.s.origin))
        return self.views[e]

    def _shape_of(self, e):
        view = Name(self._view(e))
        return [Subscript(Attribute(view, "shape"), (Const(k),)) for k in range(type_of(self.fn, e).ndim)]

    def _index(self, rank):
        names = [self.fn.names.fresh("e") for _ in range(rank)]
        for n in names:
            self.fn.types[n] = nt.intp
        return tuple(Name(n) for n in names)

    def _guarded(self, shape, loop, skip):
        """`loop` where every operand's indexed axes have the result's lengths, else the statement."""
        checks = []
        for e, axes in self.leaves.items():
            if e == skip:
                continue
            view, at = Name(self._view(e)), shape[len(shape) - len(axes):]
            checks += [Compare("==", Subscript(Attribute(view, "shape"), (Const(k),)), n)
                       for k, (n, real) in enumerate(zip(at, axes)) if real]
        if self.witness is not None:
            rank = self.fn.types[self.witness].ndim
            if rank > len(shape):
                raise _Unfit
            checks += [Compare("==", Subscript(Attribute(Name(self.witness), "shape"), (Const(k),)), n)
                       for k, n in enumerate(shape[len(shape) - rank:])]
        if not checks:
            return self.before + loop
        cond = checks[0]
        for c in checks[1:]:
            cond = BinOp("&", cond, c)
        return self.before + [If(cond, loop, self.fallback, self.s.origin)]


_FLOAT64 = Global("np.float64")


def _loop(index, shape, body):
    """`body` in a loop nest over `shape`, the variables `index` outermost first."""
    for var, length in reversed(list(zip(index, shape))):
        body = [For(var.id, Const(0), length, Const(1), body, body[0].origin)]
    return body[0]


def _axes(fn, e, ndim):
    """Per axis of array operand `e` (of `ndim` axes): True where it is indexed, False for a new axis
    (`m[:, None]`). Raises _Unfit for an index that is not basic (an index array)."""
    if isinstance(e, Name):
        return [True] * ndim
    if not isinstance(e.base, Name) or any(index_array(fn, i) is not None for i in e.index):
        raise _Unfit
    axes = [i != Const(None) for i in e.index if isinstance(i, Slice) or i == Const(None)]
    return axes + [True] * (ndim - len(axes))


def _with_children(e, kids):
    if isinstance(e, BinOp):
        return BinOp(e.op, *kids)
    if isinstance(e, UnaryOp):
        return UnaryOp(e.op, kids[0])
    return Call(e.fn, tuple(kids))
