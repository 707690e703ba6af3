"""An adjoint array's first accumulation writes it; zeros nobody reads are not written.

The adjoint of an array value is zero-filled where it is made and zeroed again
after each use, and each contribution is added into it. In a loop over
components of a vectorised model that is a pass over memory per zeroing and
an extra read per addition, for every n-by-d temporary:

    d_qx += 2.0 * cotangent_times(d_t5, qx)       # d_qx is zero here
    d_t3 += d_qx @ np.transpose(Lt)               # and d_t3 too
    d_qx[:, :] = 0.0

Where an array is known to be zero along every path (the must-analysis of
`cleanup.zeros_through`, loops to a fixed point), its accumulation becomes a
write of the whole array, `d_qx[:, :] = e` (broadcast as `+=` broadcasts, into
the same memory); then a zeroing whose zeros are overwritten before anything
reads them goes, and an allocation whose zeros nobody reads is made with
`np.empty_like`. An array made again in a loop after each use (`d = np.zeros_like(x)`) is
zeroed in its own memory where it has that shape already. Only arrays of the adjoint's own (no other name shares their
memory) are touched, and only in the code compiled: the IR differentiated
again keeps its accumulations. A matrix product so written or added is one
GEMM into the adjoint's memory (`runtime.matmul_into`), where the target's
policy allows it: no temporary, no second pass to add it.
"""
from numba.core import types as nt

from ..analysis.aliasing import VIEW_CALLS
from ..analysis.types import type_of
from ..ir import (Accumulate, Assign, Attribute, BinOp, Call, Compare, Const, Effect, For, If, Name, Pop, Push,
                  Slice, Store, Subscript, UnaryOp, While)
from ..ir.facts import Reverse
from ..ir.visit import all_blocks, blocks, names_in, walk
from .cleanup import live_in, statement_reads, zeros_through

_ZEROS = {"np.zeros_like": "np.empty_like", "np.zeros": "np.empty"}


def write_first_accumulations(fn, products_in_place=True):
    """Rewrite, in place, the adjoint `fn` (see the module); with `products_in_place` (the target's
    policy), matrix products written or added into its matrices outside parallel loops are one GEMM
    into their memory. Returns `fn`."""
    arrays = {n for n in fn.facts.of(Reverse).adjoints if getattr(fn.types.get(n), "ndim", 0) >= 1}
    arrays -= viewed_arrays(fn)
    if not arrays:
        return fn
    zeros_through(fn.body, frozenset(), _ArrayZeros(fn, arrays), rewrite=True)
    _drop_unread_zeros(fn, arrays)
    _made_again_in_place(fn, arrays)
    if products_in_place:
        _products_in_place(fn, fn.body, arrays)
    return fn


def viewed_arrays(fn):
    """Arrays another name is bound to a view of (`v = d[i]`, `v = d`, `v = np.transpose(d)`): reads
    through that name would read their zeros unseen, so they are left as they are. A name a pass made
    after typing (`g = d`, no type of its own) views what its value does, unless that is a number."""
    out = set()
    for s in walk(fn.body):
        ty = fn.types.get(s.target) if isinstance(s, Assign) else None
        if isinstance(s, Assign) and (getattr(ty, "ndim", 0) or ty is None and not isinstance(
                _atom_type(fn, s.value), (nt.Number, nt.Boolean))):
            out |= viewed_by(s.value)
    return out


def viewed_by(value):
    """The array a value bound to a name may be a view of (`d[i]`, `d`, `np.transpose(d)`): {d}, or {}."""
    e = value
    while isinstance(e, Subscript) or isinstance(e, Call) and e.fn in VIEW_CALLS and e.args:
        e = e.base if isinstance(e, Subscript) else e.args[0]
    return {e.id} if isinstance(e, Name) else set()


def _atom_type(fn, e):
    return type_of(fn, e) if isinstance(e, (Name, Subscript)) else None


def _products_in_place(fn, stmts, arrays):
    """`d[:, :] = a @ b` and `d += a @ b`, float64 matrices, as `matmul_into(d, a, b, 0.0 / 1.0)`."""
    for k, s in enumerate(stmts):
        if isinstance(s, For) and s.parallel:
            continue
        for block in blocks(s):
            _products_in_place(fn, block, arrays)
        if isinstance(s, Store) and s.array in arrays and s.index == _whole(fn, s.array):
            target, beta = s.array, 0.0
        elif isinstance(s, Accumulate) and not s.reduce and isinstance(s.target, Name):
            target, beta = s.target.id, 1.0
        else:
            continue
        ty, value = fn.types.get(target), s.value
        if target in arrays and _is_matrix(ty) and ty.layout == "C" and isinstance(value, BinOp) \
                and value.op == "@" and all(_is_matrix(_type_of(fn, x)) for x in (value.left, value.right)) \
                and target not in names_in(value):
            stmts[k] = Effect(Call("srcad.matmul_into", (Name(target), value.left, value.right, Const(beta))),
                              s.origin)


def _made_again_in_place(fn, arrays):
    """An array of `arrays` made again in a loop (`d = np.zeros_like(x)` after each use of `d`) is zeroed
    in its own memory where it has that shape already, rather than allocated on every iteration."""
    arrays = {n for n in arrays if n not in arrays_held_elsewhere(fn)}
    bound = set()
    for s in fn.body:
        if isinstance(s, Assign):
            bound.add(s.target)
        elif isinstance(s, (For, While)) and not getattr(s, "parallel", False):
            for block in list(all_blocks(s.body)):
                block[:] = [_in_place(fn, t, arrays & bound) for t in block]


def arrays_held_elsewhere(fn):
    """Arrays whose memory something besides their name may hold (`held_after`, anywhere in `fn`)."""
    return set().union(*(held_after(s, fn.types) for s in walk(fn.body)))


def held_after(s, types):
    """The names whose array another holder may keep after `s` (of a function whose types are `types`): a
    name bound to anything but a new array (a value taken back from a stack, another name's array), an
    array pushed or stored whole into a container (a list), not into an array (that copies its elements),
    arrays handed to a call made for its effect."""
    if isinstance(s, Assign):
        new = isinstance(s.value, Call) and s.value.fn in NEW_ARRAYS or isinstance(s.value, (BinOp, UnaryOp))
        return set() if new else {s.target}
    if isinstance(s, Push) and isinstance(s.value, Name) or \
            isinstance(s, Store) and isinstance(s.value, Name) and not isinstance(types.get(s.array), nt.Array):
        return {s.value.id}
    if isinstance(s, Effect) and s.call.fn not in KEEPS_NOTHING:
        return names_in(s.call)
    if isinstance(s, Pop):
        return names_in(s.target)
    return set()


NEW_ARRAYS = frozenset({"np.zeros_like", "np.empty_like", "np.zeros", "np.empty", "np.copy"})
# calls made for their effect that read or write the arrays they are given and keep no hold on them
KEEPS_NOTHING = frozenset({"srcad.matmul_into", "srcad.add_at", "srcad.sum_into", "srcad.store_row"})


def _in_place(fn, s, arrays):
    if not (isinstance(s, Assign) and s.target in arrays and isinstance(s.value, Call) and s.value.fn in
            ("np.zeros_like", "np.empty_like") and len(s.value.args) == 1 and isinstance(s.value.args[0], Name)
            and not s.value.keywords):
        return s
    same = Compare("==", Attribute(Name(s.target), "shape"), Attribute(s.value.args[0], "shape"))
    if s.value.fn == "np.empty_like":
        return If(UnaryOp("not", same), [s], [], s.origin)
    return If(same, [Store(s.target, _whole(fn, s.target), Const(0.0), s.origin)], [s], s.origin)


def _is_matrix(ty):
    return isinstance(ty, nt.Array) and ty.ndim == 2 and ty.dtype == nt.float64


def _type_of(fn, e):
    """The type of a matrix operand: a name, or its transpose."""
    if isinstance(e, Name):
        return fn.types.get(e.id)
    if isinstance(e, Call) and e.fn == "np.transpose" and len(e.args) == 1 and not e.keywords:
        return _type_of(fn, e.args[0])
    return None


def _whole(fn, name):
    return (Slice(),) * fn.types[name].ndim


class _ArrayZeros:
    """What `zeros_through` needs to know of the adjoint's arrays."""

    def __init__(self, fn, arrays):
        self.fn, self.arrays = fn, arrays

    def written(self, s, zero):
        if isinstance(s, Accumulate) and not s.reduce and getattr(s.target, "id", None) in zero \
                and s.target.id not in names_in(s.value):
            return Store(s.target.id, _whole(self.fn, s.target.id), s.value, s.origin)
        return None

    def changed(self, s):
        """The arrays whose memory `s` may change: those it binds, writes or adds into, and those it makes
        another name for (a view) or hands to a call made for its effect."""
        if isinstance(s, Assign):
            changed = {s.target}
            if getattr(self.fn.types.get(s.target), "ndim", 0):
                changed |= names_in(s.value)
            return changed & self.arrays
        if isinstance(s, Store):
            return {s.array} & self.arrays
        if isinstance(s, (Accumulate, Pop)):
            return names_in(s.target) & self.arrays
        if isinstance(s, Effect):
            return names_in(s.call) & self.arrays
        return set()

    def made_zero(self, s):
        if isinstance(s, Assign) and s.target in self.arrays and isinstance(s.value, Call) and s.value.fn in _ZEROS:
            return s.target
        if isinstance(s, Store) and s.array in self.arrays and all(i == Slice() for i in s.index) \
                and len(s.index) == self.fn.types[s.array].ndim and s.value in (Const(0.0), Const(0)):
            return s.array
        return None


def _drop_unread_zeros(fn, arrays):
    """Zeroings of `arrays` whose zeros are overwritten whole before anything reads them go; their
    first allocation is made empty where its zeros are unread the same way."""
    whole = {n: _whole(fn, n) for n in arrays}

    def overwritten(s):
        if isinstance(s, Store) and s.array in arrays and s.index == whole[s.array] \
                and s.array not in names_in(s.value):
            return s.array
        return None

    def gen(s):
        return (statement_reads(s) - {overwritten(s)}) & arrays

    def kill(s):
        return ({s.target} if isinstance(s, Assign) else {overwritten(s)}) & arrays

    outputs = set().union(*(names_in(o) for o in fn.outputs))
    marks = {}
    live_in(fn.body, outputs, marks, gen, kill)
    for block in all_blocks(fn.body):
        kept = []
        for s in block:
            zeroes = _ArrayZeros(fn, arrays).made_zero(s)
            if zeroes is not None and zeroes not in marks.get(id(s), {zeroes}):
                if isinstance(s, Store):
                    continue
                s.value = Call(_ZEROS[s.value.fn], s.value.args, s.value.keywords)
            kept.append(s)
        block[:] = kept
