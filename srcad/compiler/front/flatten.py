"""Generated IR brought to the form lowering gives user code, so it can be differentiated again.

Derivative rules read atoms (see `ir.forms`). Adjoint code writes formulas
such as `d_x += np.transpose(a) @ d_y`; `flatten` gives each operation that
is not elementwise a temporary of its own (`t = np.transpose(a)`,
`d_x += t @ d_y`), keeping elementwise trees whole and stored values atoms.
"""
from ..ad.rules import is_elementwise
from ..ir import Accumulate, Assign, Attribute, BinOp, Call, Name, Push, Slice, Store, Subscript, Tuple, UnaryOp
from ..ir.forms import TREE_BINOPS, TREE_UNARY, is_atom
from ..ir.visit import all_blocks


def flatten(fn):
    """Rewrite, in place, the values of `fn`'s statements into atoms, trees and single operations."""
    for block in all_blocks(fn.body):
        out = []
        for s in block:
            before = []
            if isinstance(s, (Assign, Accumulate, Push)):
                s.value = _Flat(fn, before, s.origin).simple(s.value)
            elif isinstance(s, Store):
                s.value = _Flat(fn, before, s.origin).atom(s.value)
            out += before + [s]
        block[:] = out
    return fn


class _Flat:
    """Temporaries of one statement's value, appended to `out` (with the statement's origin)."""

    def __init__(self, fn, out, origin):
        self.fn = fn
        self.out = out
        self.origin = origin

    def atom(self, e):
        if is_atom(e):
            return e
        t = self.fn.names.fresh("t")
        self.out.append(Assign(t, self.simple(e), self.origin))
        return Name(t)

    def tree_part(self, e):
        """An operand inside an elementwise tree: an atom, or a tree node with such operands."""
        if is_atom(e):
            return e
        if _is_tree_node(e):
            return self.rebuild(e, self.tree_part)
        return self.atom(e)

    def simple(self, e):
        """An atom, an elementwise tree over atoms, or one operation on atoms."""
        if is_atom(e):
            return e
        if _is_tree_node(e):
            return self.rebuild(e, self.tree_part)
        return self.rebuild(e, self.atom)

    def rebuild(self, e, part):
        if isinstance(e, BinOp):
            return BinOp(e.op, part(e.left), part(e.right))
        if isinstance(e, UnaryOp):
            return UnaryOp(e.op, part(e.operand))
        if isinstance(e, Call):       # a tuple argument stays a tuple of atoms (np.concatenate((a, b)))
            return Call(e.fn, tuple(Tuple(tuple(map(self.atom, a.items))) if isinstance(a, Tuple) else part(a)
                                    for a in e.args), tuple((k, self.atom(v)) for k, v in e.keywords))
        if isinstance(e, Subscript):
            index = tuple(Slice(*(self.atom(p) if p is not None else None for p in (i.lower, i.upper, i.step)))
                          if isinstance(i, Slice) else self.atom(i) for i in e.index)
            base = e.base if isinstance(e.base, Attribute) else self.atom(e.base)
            return Subscript(base, index)
        if hasattr(e, "left"):
            return type(e)(e.op, self.atom(e.left), self.atom(e.right))
        return e


def _is_tree_node(e):
    if isinstance(e, BinOp):
        return e.op in TREE_BINOPS
    if isinstance(e, UnaryOp):
        return e.op in TREE_UNARY
    return isinstance(e, Call) and is_elementwise(e.fn) and not e.keywords
