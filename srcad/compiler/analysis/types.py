"""Types of the IR's names, from Numba's own type inference of the printed primal.

Numba types each SSA version of a variable (`x.1`, `x.2`); after `webs` every
IR name holds one kind of value, so the versions unify into one type per name.
Names Numba never typed (code it pruned as dead) get a boolean: the code is
unreachable and any scalar type keeps it valid.
"""
from numba.core import types as nt

from ..errors import problem, where
from ..ir import Assign, Attribute, Call, Const, For, Global, Name, Slice, Store, Subscript, Tuple, While
from ..ir.facts import Lowered
from ..ir.visit import assigned, children, map_exprs, own_exprs, rebuild, subexpressions, walk


def assign_types(fn, typemap, arg_types):
    """Store on `fn` the type of every name: `typemap` is Numba's SSA typemap of the printed primal."""
    types = unify(typemap)
    for p, t in zip(fn.params, arg_types):
        types[p] = t
    for n in assigned(fn.body):
        types.setdefault(n, nt.boolean)
    for s in walk(fn.body):
        if isinstance(s, While):
            types.setdefault(s.cond, nt.boolean)
    fn.types = types
    _expand_ellipses(fn)
    _check_loop_bounds(fn)
    _check_list_items(fn)
    _check_masks(fn)
    return fn


def _expand_ellipses(fn):
    """`U[..., k]`: the `...` of an index becomes the full slices it stands for, now that ranks are known
    (Numba typed the primal with it; the passes after this one read explicit slices)."""
    def expand(base, index):
        ty = type_of(fn, base)
        if _ELLIPSIS not in index or not isinstance(ty, nt.Array):
            return index
        k = index.index(_ELLIPSIS)
        taken = sum(1 for i in index if i != _ELLIPSIS and i != Const(None))
        return index[:k] + (Slice(),) * (ty.ndim - taken) + index[k + 1:]

    def in_expr(e):
        return Subscript(e.base, expand(e.base, e.index)) if isinstance(e, Subscript) else e
    for s in walk(fn.body):
        map_exprs(s, lambda e: rebuild(e, in_expr))
        if isinstance(s, Store):
            s.index = expand(Name(s.array), s.index)


_ELLIPSIS = Const(Ellipsis)


def _check_masks(fn):
    """Numba indexes with 1-d boolean masks only (a 2-d one fails inside Numba, with no message)."""
    for s in walk(fn.body):
        indices = [x.index for e in own_exprs(s) for x in subexpressions(e) if isinstance(x, Subscript)]
        for item in (i for index in indices + ([s.index] if isinstance(s, Store) else []) for i in index):
            mask = index_array(fn, item)
            if mask is not None and isinstance(mask.dtype, nt.Boolean) and mask.ndim > 1:
                raise problem(s.origin, f"`{s.origin.text}` indexes with a boolean mask of {mask.ndim} "
                                        "dimensions, which Numba does not support (1-d masks only)",
                              "use np.where(mask, a, b), or index the array's ravel() with the mask's")


def _check_loop_bounds(fn):
    """`range()` takes integers, as in Python (Numba would also run it over floats)."""
    for s in walk(fn.body):
        if isinstance(s, For):
            for bound in (s.start, s.stop, s.step):
                ty = type_of(fn, bound)
                if ty is not None and not isinstance(ty, (nt.Integer, nt.Boolean)):
                    raise TypeError(f"{where(s.origin)}: range() takes integers, and {_shown(fn, bound)} is {ty} in "
                                    f"`{s.origin.text}`, as Python would refuse it. Hint: pass an int, or convert it "
                                    f"with int(...)")


def _shown(fn, atom):
    """An atom as the user would name it in a message."""
    if isinstance(atom, Name):
        user = fn.names.user(atom.id)
        return "a bound" if user in fn.names.made else f"`{user}`"
    return f"`{atom.value!r}`" if isinstance(atom, Const) else "a bound"


def unify(typemap):
    """IR name -> one Numba type, from Numba's SSA typemap."""
    groups = {}
    for key, ty in typemap.items():
        if key.startswith("$") or key.startswith("arg."):
            continue
        groups.setdefault(key.split(".")[0], []).append(ty)
    return {n: _unify(ts) for n, ts in groups.items()}


def _unify(ts):
    ts = [nt.unliteral(t.type if isinstance(t, nt.Optional) else t) for t in ts]
    ts = [t for t in ts if not isinstance(t, (nt.NoneType, nt.Omitted))] or ts
    arrays = [t for t in ts if isinstance(t, nt.Array)]
    if arrays:
        first = arrays[0]
        if all(a == first for a in arrays):
            return first
        floats = [a.dtype for a in arrays if isinstance(a.dtype, nt.Float)]
        dtype = max(floats, key=lambda d: d.bitwidth) if floats else first.dtype
        return nt.Array(dtype, first.ndim, "A")
    floats = [t for t in ts if isinstance(t, nt.Float)]
    if floats:
        return max(floats, key=lambda d: d.bitwidth)
    ints = [t for t in ts if isinstance(t, nt.Integer)]
    if ints:
        return max(ints, key=lambda d: d.bitwidth)
    return ts[0]


def refuse_complex(fn, s, name, varied):
    """A complex value computed from values being differentiated (`np.exp(1j * w)` with `w` varied, in a
    statement or inside its expression): refused, naming complex numbers, rather than a gradient that
    silently stops there. Complex values no derivative reaches (`np.exp(2j * np.pi / n)`) are fine."""
    reached = [n for e in own_exprs(s) for n in _complex_from(fn, e, varied)]
    if _is_complex(fn.types.get(name)):
        reached += [x.id for e in own_exprs(s) for x in subexpressions(e) if isinstance(x, Name) and x.id in varied]
    if reached:
        raise problem(s.origin, f"`{s.origin.text}` makes a complex value from `{fn.names.user(reached[0])}`, "
                                "which is being differentiated; srcad differentiates real values only, not through "
                                "complex numbers",
                      "write the real and imaginary parts as two real values (cos/sin for exp(1j * w)), or "
                      "wrap what does not need a gradient in ad.stop_gradient(...)")


def _complex_from(fn, e, varied):
    """The varied names a complex part of expression `e` is computed from."""
    def visit(x):      # (is x complex, the varied names in x)
        if isinstance(x, Const):
            return isinstance(x.value, complex), []
        if isinstance(x, Name):
            return _is_complex(fn.types.get(x.id)), [x.id] if x.id in varied else []
        parts = [visit(c) for c in children(x)]
        names = [n for _, ns in parts for n in ns]
        complex_ = any(c for c, _ in parts)
        if complex_ and names:
            found.extend(names)
        return complex_ and not (isinstance(x, Call) and x.fn in _REAL_OF_COMPLEX), names
    found = []
    visit(e)
    return found


# functions giving a real value of a complex one
_REAL_OF_COMPLEX = frozenset({"abs", "np.abs", "np.real", "np.imag", "np.angle"})


def _is_complex(ty):
    return isinstance(getattr(ty, "dtype", ty), nt.Complex)


def is_float(ty):
    """Can values of this type carry a derivative (float scalars and float arrays)?"""
    if isinstance(ty, nt.Array):
        return isinstance(ty.dtype, nt.Float)
    return isinstance(ty, nt.Float)


def rank(ty):
    return ty.ndim if isinstance(ty, nt.Array) else 0


def type_of(fn, e):
    """The type of an atom of `fn` (a name, an element or view, a constant), or None."""
    if isinstance(e, Name):
        return fn.types.get(e.id)
    if isinstance(e, Subscript) and isinstance(e.base, Name):
        base = fn.types.get(e.base.id)
        if not isinstance(base, nt.Array):
            if isinstance(base, nt.BaseTuple) and isinstance(e.index[0], Const):
                return base.types[e.index[0].value] if hasattr(base, "types") else getattr(base, "dtype", None)
            return None
        nd = base.ndim
        for i in e.index:
            ty = index_array(fn, i)
            if isinstance(i, Const) and i.value is None:
                nd += 1                                  # np.newaxis
            elif ty is None:
                nd -= 0 if isinstance(i, Slice) else 1   # a slice keeps its axis, an integer drops it
            elif isinstance(ty.dtype, nt.Boolean):
                nd += 1 - ty.ndim                        # a mask: its axes become one
            else:
                nd += ty.ndim - 1                        # an array of indices: its axes replace one
        return base.dtype if nd == 0 else nt.Array(base.dtype, nd, "A")
    if isinstance(e, Const):
        v = e.value
        return nt.boolean if isinstance(v, bool) else nt.int64 if isinstance(v, int) else nt.float64
    if isinstance(e, Subscript) and isinstance(e.base, Attribute) and e.base.attr == "shape":
        return nt.intp                                   # an entry of a shape (an atom too)
    return None


def index_array(fn, item):
    """The type of an index item that is an array (of integers, or a boolean mask), else None: a name,
    or part of one (`perm[i:i + b]`, `order[::-1]`, where a view of an index array stands in the index)."""
    ty = type_of(fn, item) if isinstance(item, (Name, Subscript)) else None
    return ty if isinstance(ty, nt.Array) else None


def gather_axis(fn, index):
    """Where the one 1-d index array (or mask) of `index` stands, when it stands after integers only and
    before whole axes only (`x[idx]`, `A[idx, :]`, `H[i, mask]`): the form a scatter-add takes; else None."""
    arrays = [k for k, i in enumerate(index) if index_array(fn, i) is not None]
    if len(arrays) != 1 or index_array(fn, index[arrays[0]]).ndim != 1:
        return None
    k = arrays[0]
    if any(isinstance(i, Slice) or i == Const(None) for i in index[:k]) or any(i != Slice() for i in index[k + 1:]):
        return None
    return k


def placeholder(ty):
    """A value of type `ty` standing for none (an empty array, a zero): what a name holds before its
    first binding, or where its value is None."""
    if isinstance(ty, nt.Array):
        dtype = "bool_" if isinstance(ty.dtype, nt.Boolean) else str(ty.dtype)
        return Call("np.empty", (Tuple((Const(0),) * ty.ndim), Global(f"np.{dtype}")))
    if isinstance(ty, nt.Boolean):
        return Const(False)
    if isinstance(ty, nt.Integer):
        return Const(0)
    if isinstance(ty, nt.Float):
        return Call(f"np.{ty}", (Const(0),))
    return Const(0)


def list_storages(fn):
    """The arrays that keep the items of a list grown by append -> the list's name: its first storage,
    and the storage made again as it grows (named anew by the webs pass)."""
    lists = dict(fn.facts.of(Lowered).lists)
    for s in walk(fn.body):
        if isinstance(s, Assign) and isinstance(s.value, Call) and s.value.fn in ("srcad.list_room",
                                                                                 "srcad.list_rows_room") and \
                isinstance(s.value.args[0], Name) and s.value.args[0].id in lists:
            lists[s.target] = lists[s.value.args[0].id]
    return lists


def _check_list_items(fn):
    """The items of a list grown by append are kept in an array of floats, or of integers where the first
    item appended is an integer (`front/lower.py` `list_append`): an item of the other kind is refused (it
    would read back converted)."""
    lists = list_storages(fn)
    for s in walk(fn.body):
        if isinstance(s, Store) and s.array in lists and getattr(fn.types[s.array], "ndim", 1) > 1:
            item = type_of(fn, s.value)
            if not (isinstance(item, nt.Array) and item.ndim == fn.types[s.array].ndim - 1):
                raise problem(s.origin, f"the list `{fn.names.user(lists[s.array])}` of arrays gets an item of "
                                        f"type {item}", "append arrays of one rank and shape to a list of arrays")
        elif isinstance(s, Store) and s.array in lists:
            kind = nt.Integer if isinstance(fn.types[s.array].dtype, nt.Integer) else nt.Float
            if not isinstance(type_of(fn, s.value), kind):
                raise problem(s.origin, f"the list `{fn.names.user(lists[s.array])}` gets an item of type "
                                        f"{type_of(fn, s.value)} in a list of "
                                        f"{'integers' if kind is nt.Integer else 'floats'}",
                              "srcad keeps a list grown by append as an array of floats, or of integers: append "
                              "items of one kind (float(v) or int(v)), or allocate np.empty(n, dtype) and fill it")
