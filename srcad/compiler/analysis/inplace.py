"""In-place updates of arrays are writes into memory, whatever name they go through.

`a op= v` on an array changes the array `a` refers to (NumPy's semantics), so
after typing it becomes a store into the whole array: `t = a op v; a[:] = t`.
A name bound to another array name (`z = y`, or a helper's parameter bound
to the caller's array) is the same array, not a copy: where that binding
stays valid for every use of the name, the uses are rewritten to the
original name, so that writes through the alias are writes into it.
"""
from numba.core import types as nt

from ..ir import Assign, Name, Slice, Store, While
from ..ir.visit import all_blocks, blocks, defines, map_exprs, names_in, reads, rename_expr, walk


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
    """Replace `z` by `y` after `z = y` (arrays) where z has no other binding, every use of z
    follows the binding in the same block, and y is not rebound in between."""
    count = {}
    for s in walk(fn.body):
        for n in defines(s):
            count[n] = count.get(n, 0) + 1
    outputs = {n for out in fn.outputs for n in names_in(out)}
    changed = True
    while changed:
        changed = False
        for block in all_blocks(fn.body):
            for k, s in enumerate(block):
                if not _is_array_alias(fn, s, count):
                    continue
                z, y = s.target, s.value.id
                rest = block[k + 1:]
                later = {id(t) for t in walk(rest)}
                if any(z in reads(t) for t in walk(fn.body) if t is not s and id(t) not in later):
                    continue
                last = max((i for i, t in enumerate(rest) if z in _reads_within(t)), default=-1)
                # y may be rebound by the statement that reads z last (`D = z`: read before the write)
                span = rest if z in outputs else rest[:last] + \
                    ([] if last < 0 or isinstance(rest[last], Assign) else [rest[last]])
                if any(y in defines(t) for t in walk(span)):
                    continue
                _rename_reads(rest, z, y)
                if z in outputs:
                    fn.outputs = [rename_expr(out, {z: y}) for out in fn.outputs]
                del block[k]
                block[:] = [t for t in block if not _is_self_binding(t)]
                changed = True
                break
            if changed:
                break


def _is_array_alias(fn, s, count):
    return isinstance(s, Assign) and not s.inplace and isinstance(s.value, Name) \
        and isinstance(fn.types.get(s.target), nt.Array) and isinstance(fn.types.get(s.value.id), nt.Array) \
        and count.get(s.target, 0) == 1 and s.target not in fn.params and s.value.id != s.target


def _is_self_binding(s):
    return isinstance(s, Assign) and isinstance(s.value, Name) and s.value.id == s.target


def _reads_within(s):
    """Names statement `s` reads, its nested blocks included."""
    return set().union(*(reads(t) for t in walk([s])))


def _rename_reads(stmts, old, new):
    for t in walk(stmts):
        map_exprs(t, lambda e: rename_expr(e, {old: new}))
        if isinstance(t, Store) and t.array == old:
            t.array = new
        if isinstance(t, While) and t.cond == old:
            t.cond = new
