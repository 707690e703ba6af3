"""The shapes of expressions the passes rely on after lowering.

An *atom* is a value read without computing: a constant, a name, a module
constant, an attribute of an array (`x.shape`, `x.dtype`), an element or a
view of a named array with atom indices, or one entry of a shape
(`x.shape[0]`). A *tree* is elementwise arithmetic over atoms, kept whole as
the user wrote it (`0.5 * s + x[i] * math.sin(y)`): its derivative is the
chain rule down the tree, with no temporaries.
"""
from .nodes import Attribute, BinOp, Call, Const, Global, Name, Slice, Subscript, UnaryOp

TREE_BINOPS = frozenset({"+", "-", "*", "/", "**", "%"})
TREE_UNARY = frozenset({"-", "+"})
ARRAY_ATTRIBUTES = frozenset({"shape", "ndim", "size", "dtype"})


def is_shape_entry(e):
    """`x.shape[k]`."""
    return isinstance(e, Subscript) and isinstance(e.base, Attribute) and e.base.attr == "shape" \
        and isinstance(e.base.base, Name)


def is_index_item(e):
    if isinstance(e, Slice):
        return all(p is None or is_atom(p) for p in (e.lower, e.upper, e.step))
    return is_atom(e)


def is_atom(e):
    if isinstance(e, (Const, Name, Global)):
        return True
    if isinstance(e, Attribute):
        return isinstance(e.base, Name) and e.attr in ARRAY_ATTRIBUTES
    if isinstance(e, Subscript):
        return is_shape_entry(e) or (isinstance(e.base, Name) and all(is_index_item(i) for i in e.index))
    return False


def is_tree(e, elementwise):
    """An elementwise expression over atoms; `elementwise(fn)` says which calls are elementwise."""
    if isinstance(e, BinOp):
        return e.op in TREE_BINOPS and all(is_atom(c) or is_tree(c, elementwise) for c in (e.left, e.right))
    if isinstance(e, UnaryOp):
        return e.op in TREE_UNARY and (is_atom(e.operand) or is_tree(e.operand, elementwise))
    if isinstance(e, Call):
        return elementwise(e.fn) and not e.keywords and all(is_atom(a) or is_tree(a, elementwise) for a in e.args)
    return False


def leaves(e):
    """The atoms a tree reads, left to right (an atom is its own leaf)."""
    if is_atom(e):
        return [e]
    if isinstance(e, BinOp):
        return leaves(e.left) + leaves(e.right)
    if isinstance(e, UnaryOp):
        return leaves(e.operand)
    if isinstance(e, Call):
        return [x for a in e.args for x in leaves(a)]
    return []


def data_names(e):
    """Names whose values (not only their indices or shapes) an atom or tuple of atoms reads."""
    if isinstance(e, Name):
        return [e.id]
    if isinstance(e, Subscript) and isinstance(e.base, Name):
        return [e.base.id]
    if hasattr(e, "items"):
        return [n for x in e.items for n in data_names(x)]
    return []
