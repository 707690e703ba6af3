"""In-place updates of arrays are writes into memory, whatever name they go through.

`a op= v` on an array changes the array `a` refers to (NumPy's semantics), so
after typing it becomes a store into the whole array: `t = a op v; a[:] = t`.
A name bound to another array name (`z = y`, or a helper's parameter bound
to the caller's array) is the same array, not a copy, and a name bound to a
basic view (`row = C[i, :]`, `v = y[1:]`) is a region of it: where that
binding stays valid for every use of the name, the uses are rewritten on the
original array (`row[k]` is `C[i, k]`), so that writes through the alias or
the view are writes into it, and a view read after its base was written sees
the new values, as in NumPy.
"""
import copy

from numba.core import types as nt

from ..ir import Assign, Attribute, Const, Name, Slice, Store, Subscript, Tuple
from ..ir.forms import is_shape_entry
from ..ir.visit import (all_blocks, binding_counts, blocks, defines, map_exprs, names_in, read_anywhere, reads,
                        rewrite_top_down, walk)


def resolve_inplace(fn):
    """Rewrite `fn` (typed) as described above, in place; returns `fn`."""
    _stores_for_inplace_updates(fn, fn.body)
    _propagate_aliases(fn)
    return fn


def _stores_for_inplace_updates(fn, stmts):
    k = 0
    while k < len(stmts):
        s = stmts[k]
        for block in blocks(s):
            _stores_for_inplace_updates(fn, block)
        ty = fn.types.get(s.target) if isinstance(s, Assign) else None
        if isinstance(s, Assign) and s.inplace and isinstance(ty, nt.Array):
            tmp = fn.names.fresh("t")
            fn.types[tmp] = ty
            stmts[k:k + 1] = [Assign(tmp, s.value, s.origin),
                              Store(s.target, (Slice(),) * ty.ndim, Name(tmp), s.origin)]
            k += 1
        k += 1


def _propagate_aliases(fn):
    """Replace `z` by what it names after `z = y` or `z = y[index]` (a basic view: integers and
    slices) where z has no other binding, every use of z follows the binding in the same block, and
    neither y nor a name of the index is rebound in between: reads and writes through z are then
    reads and writes of y's memory, with NumPy's semantics (a view sees later writes into its base)."""
    count = binding_counts(fn.body)
    outputs = {n for out in fn.outputs for n in names_in(out)}
    changed = True
    while changed:
        changed = False
        for block in all_blocks(fn.body):
            for k, s in enumerate(block):
                view = _view_binding(fn, s, count)
                if view is None or not _substitute_view(fn, block, k, view, outputs):
                    continue
                del block[k]
                block[:] = [t for t in block if not _is_self_binding(t)]
                changed = True
                break
            if changed:
                break


def _view_binding(fn, s, count):
    """`View` when `s` binds an array name (once, not a parameter) to another array or a basic view of it."""
    if not (isinstance(s, Assign) and not s.inplace and isinstance(fn.types.get(s.target), nt.Array)
            and count.get(s.target, 0) == 1 and s.target not in fn.params):
        return None
    v = s.value
    if isinstance(v, Name) and v.id != s.target and isinstance(fn.types.get(v.id), nt.Array):
        return View(s.target, v.id, None, fn.types[v.id].ndim, fn.types[s.target].ndim)
    if isinstance(v, Subscript) and isinstance(v.base, Name) and v.base.id != s.target \
            and isinstance(fn.types.get(v.base.id), nt.Array) and all(_basic(fn, i) for i in v.index):
        return View(s.target, v.base.id, v.index, fn.types[v.base.id].ndim, fn.types[s.target].ndim)
    return None


def _basic(fn, item):
    """An index item of a basic view: a slice, or an integer."""
    if isinstance(item, Slice):
        return True
    if isinstance(item, Const):
        return type(item.value) is int
    if isinstance(item, Name):
        return isinstance(fn.types.get(item.id), nt.Integer)
    return is_shape_entry(item)


class View:
    """`name` (of rank `ndim`) bound to `base` (of rank `base_ndim`; `index` None) or to `base[index]`."""

    def __init__(self, name, base, index, base_ndim, ndim):
        self.name, self.base, self.index, self.ndim = name, base, index, ndim
        full = index if index is not None else ()
        self.axes = full + (Slice(),) * (base_ndim - len(full))     # one item per axis of the base

    def whole(self):
        return Name(self.base) if self.index is None else Subscript(Name(self.base), self.index)

    def base_axis(self, k):
        """The axis of the base that axis `k` of the view is, when the view spans all of it (its
        length is then the base's); raises LookupError for a part of an axis (`y[1:]`)."""
        a = [a for a, item in enumerate(self.axes) if isinstance(item, Slice)][k]
        if self.axes[a] != Slice():
            raise LookupError(self.axes[a])
        return a

    def element(self, index):
        """The index into the base of `name[index]`, or None where that is no basic index of the base."""
        if self.index is None:
            return index
        if any(i == Const(None) for i in index):
            return None
        free = iter(index)
        out = []
        for item in self.axes:
            if not isinstance(item, Slice):
                out.append(item)
                continue
            u = next(free, Slice())
            if item == Slice():
                out.append(u)
            elif u == Slice():
                out.append(item)
            else:
                return None
        return tuple(out) if next(free, None) is None else None

    def expr(self, e):
        """`e` with the view's name replaced, top-down; raises LookupError where a use has no equal
        expression on the base."""
        z = Name(self.name)

        def visit(x):
            if x == z:
                return self.whole()
            if isinstance(x, Subscript) and x.base == z:
                index = self.element(tuple(map(self.expr, x.index)))
                if index is None:
                    raise LookupError(x)
                return Subscript(Name(self.base), index)
            if is_shape_entry(x) and x.base.base == z and isinstance(x.index[0], Const):
                k = x.index[0].value
                return Subscript(Attribute(Name(self.base), "shape"), (Const(self.base_axis(k % self.ndim)),))
            if isinstance(x, Attribute) and x.base == z:
                if x.attr == "dtype":
                    return Attribute(Name(self.base), "dtype")
                if x.attr == "ndim":
                    return Const(self.ndim)
                if x.attr == "shape":
                    return Tuple(tuple(Subscript(Attribute(Name(self.base), "shape"), (Const(self.base_axis(k)),))
                                       for k in range(self.ndim)))
                raise LookupError(x)
            return None
        return rewrite_top_down(e, visit)


def _substitute_view(fn, block, k, view, outputs):
    """Rewrite the uses of `view` after `block[k]` on the base; False (nothing changed) where that
    would not be the same memory: a use elsewhere, the base or an index name rebound in between, or
    a use with no equal expression on the base."""
    z = view.name
    rest = block[k + 1:]
    later = {id(t) for t in walk(rest)}
    if any(z in reads(t) for t in walk(fn.body) if t is not block[k] and id(t) not in later):
        return False
    if z in outputs and block is not fn.body:
        return False        # returned: the names of its index must hold until the end, beyond this block
    last = max((i for i, t in enumerate(rest) if z in read_anywhere([t])), default=-1)
    # y may be rebound by the statement that reads z last (`D = z`: read before the write)
    span = rest if z in outputs else rest[:last] + ([] if last < 0 or isinstance(rest[last], Assign) else [rest[last]])
    fixed = {view.base} | (names_in(Tuple(view.index)) if view.index is not None else set())
    if any(fixed & defines(t) for t in walk(span)):
        return False
    try:
        rewritten = [(t, _rewritten_stmt(t, view)) for t in walk(rest)]
        new_outputs = [view.expr(out) if z in names_in(out) else out for out in fn.outputs]
    except LookupError:
        return False
    for t, (exprs, array) in rewritten:
        it = iter(exprs)
        map_exprs(t, lambda e: next(it))
        if array is not None:
            t.array, t.index = array
    fn.outputs = new_outputs
    return True


def _rewritten_stmt(t, view):
    """(the new expressions of `t`, in map_exprs order, and for a store through the view the new
    (array, index)), computed without changing `t`."""
    exprs = []
    map_exprs(copy.copy(t), lambda e: exprs.append(view.expr(e)) or e)
    if isinstance(t, Store) and t.array == view.name:
        index = view.element(tuple(exprs[:len(t.index)]))
        if index is None:
            raise LookupError(t)
        return exprs, (view.base, index)
    return exprs, None


def _is_self_binding(s):
    return isinstance(s, Assign) and isinstance(s.value, Name) and s.value.id == s.target
