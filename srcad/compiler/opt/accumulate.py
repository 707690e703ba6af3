"""Loop-invariant adjoint accumulations go through a local, not through memory.

In a reverse loop such as

    for row in range(d - 1, col, -1):
        d_icf[k, idx] += d_t5 * xc[col]
        d_xc[col] += d_t5 * icf[k, idx]

`d_xc[col]` is the same element on every iteration, but Numba cannot prove
that the stores into `d_icf` leave it alone, so it loads and stores it each
time. Summing into a local and adding the sum once after the loop keeps the
accumulation in a register:

    d_xc_sum = 0.0
    for row in ...:
        ...
        d_xc_sum += d_t5 * icf[k, idx]
    if d_xc_sum != 0.0:          # the loop ran: its index is valid
        d_xc[col] += d_xc_sum

An accumulation qualifies when it sits in a for loop's body (directly, or in a
branch of it: an adjoint runs only where its cotangent is not zero), adds into
one element (an index per axis), its index names are not bound in that body,
and its array is used in the body only by such accumulations (a shared
parameter `d_p[0] += ...; d_p[1] += ...` several times per iteration): each
element gets a local, and the sums are added in after the loop.
"""
from numba.core import types as nt

from ..analysis.types import index_array
from ..ir import Accumulate, Assign, Compare, Const, For, If, Name, Slice, Subscript
from ..ir.visit import assigned, blocks, names_in, own_exprs, walk, written_array


def sum_invariant_accumulations(fn):
    """Rewrite, in place, every for loop of `fn` (innermost first); returns `fn`."""
    _block(fn, fn.body)
    return fn


def _block(fn, stmts):
    k = 0
    while k < len(stmts):
        s = stmts[k]
        for b in blocks(s):
            _block(fn, b)
        if isinstance(s, For):
            before, after = _hoist(fn, s)
            stmts[k:k + 1] = before + [s] + after
            k += len(before) + len(after)
        k += 1


def _in_body(stmts):
    """(block, position, statement) for the statements of a loop body, those of its branches included
    (not those of inner loops: they run another number of times)."""
    for k, s in enumerate(stmts):
        yield stmts, k, s
        if isinstance(s, If):
            yield from _in_body(s.body)
            yield from _in_body(s.orelse)


def _hoist(fn, loop):
    bound = assigned(loop.body) | {loop.var}
    before, after = [], []
    totals = {}                  # (array, index) -> the local summing into that element
    for block, k, s in list(_in_body(loop.body)):
        element = _element(fn, s)
        if element is None:
            continue
        array, index = element
        if set().union(*(names_in(i) for i in index)) & bound or not _only_added_into(loop.body, array):
            continue
        total = totals.get(element)
        if total is None:
            total = totals[element] = fn.names.fresh(f"{array}_sum")
            fn.types[total] = nt.float64
            before.append(Assign(total, Const(0.0)))
            after.append(If(Compare("!=", Name(total), Const(0.0)),
                            [Accumulate(Subscript(Name(array), index), Name(total), origin=s.origin)]))
        block[k] = Accumulate(Name(total), s.value, origin=s.origin)
    return before, after


def _element(fn, s):
    """(array, index) of `array[index] += value` adding into one element, else None."""
    if not isinstance(s, Accumulate) or s.reduce or not isinstance(s.target, Subscript):
        return None
    base = s.target.base
    ty = fn.types.get(base.id) if isinstance(base, Name) else None
    index = s.target.index
    if not isinstance(ty, nt.Array) or len(index) != ty.ndim or \
            any(isinstance(i, Slice) or index_array(fn, i) is not None for i in index):
        return None
    return base.id, index


def _only_added_into(body, array):
    """Is `array` used in `body` only as the target of element accumulations (so that sums of them
    may be added in any order, several elements at once)?"""
    for t in walk(body):
        if isinstance(t, Accumulate) and isinstance(t.target, Subscript) and t.target.base == Name(array):
            if array in names_in(t.value) or any(array in names_in(i) for i in t.target.index):
                return False
        elif written_array(t) == array or any(array in names_in(e) for e in own_exprs(t)):
            return False
    return True
