"""Types of IR variables and which of them carry derivatives.

Types come from Numba itself: the normalized primal is compiled first and
its typemap read back (SSA versions `x.1`, `x.2` unified). A variable is
active when it is float-valued and computed, through differentiable
operations, from an active argument. Integers and booleans never are.
"""
import ast

from numba.core import types as nt

from .frontend import TransformError
from .normalize import Assign, For, If, Store, While, blocks, is_tree, leaves, walk
from .rules import NONDIFF, OPERATORS


def unify_types(typemap):
    """IR name -> one numba type, from Numba's SSA typemap."""
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
        dtype = first.dtype
        floats = [a.dtype for a in arrays if isinstance(a.dtype, nt.Float)]
        if floats:
            dtype = max(floats, key=lambda d: d.bitwidth)
        return nt.Array(dtype, first.ndim, "A")
    floats = [t for t in ts if isinstance(t, nt.Float)]
    if floats:
        return max(floats, key=lambda d: d.bitwidth)
    ints = [t for t in ts if isinstance(t, nt.Integer)]
    if ints:
        return max(ints, key=lambda d: d.bitwidth)
    return ts[0]


def is_float(ty):
    if isinstance(ty, nt.Array):
        return isinstance(ty.dtype, nt.Float)
    return isinstance(ty, nt.Float)


def rank(ty):
    return ty.ndim if isinstance(ty, nt.Array) else 0


def data_names(expr):
    """Names whose values (not just indices or shapes) flow into `expr`."""
    if isinstance(expr, ast.Name):
        return [expr.id]
    if isinstance(expr, ast.Subscript):
        return data_names(expr.value) if isinstance(expr.value, ast.Name) else []
    if isinstance(expr, ast.Tuple):
        return [n for e in expr.elts for n in data_names(e)]
    return []


def diff_inputs(value):
    """Argument atoms of a differentiable IR expression (None if it has no derivative)."""
    if isinstance(value, (ast.Name, ast.Subscript, ast.Constant)):
        return [value]
    if is_tree(value):
        return leaves(value)
    if isinstance(value, ast.BinOp):
        key = type(value.op).__name__
        return [value.left, value.right] if key in OPERATORS or key == "MatMult" else None
    if isinstance(value, ast.UnaryOp):
        return [value.operand] if type(value.op).__name__ in OPERATORS else None
    if isinstance(value, ast.Call):
        fn = getattr(value, "srcad_fn", None)
        if fn is None and isinstance(value.func, ast.Attribute) and value.func.attr == "astype":
            return [value.func.value]
        if fn in NONDIFF:
            return None
        return list(value.args)
    return None


class Analysis:
    """Types, activity and the checks that need both."""

    def __init__(self, program, types, active_args):
        self.program = program
        self.types = types
        self.active = {p for p, a in zip(program.params, active_args) if a}
        self.active_params = set(self.active)
        self.fixpoint()

    def type_of(self, atom):
        if isinstance(atom, ast.Name):
            return self.types.get(atom.id)
        if isinstance(atom, ast.Subscript) and isinstance(atom.value, ast.Name):
            base = self.types.get(atom.value.id)
            if not isinstance(base, nt.Array):
                return base.dtype if isinstance(base, nt.BaseTuple) and hasattr(base, "dtype") else None
            idx = atom.slice.elts if isinstance(atom.slice, ast.Tuple) else [atom.slice]
            new_axes = sum(1 for e in idx if isinstance(e, ast.Constant) and e.value is None)
            dropped = sum(1 for e in idx if not isinstance(e, ast.Slice)) - new_axes
            nd = base.ndim - dropped + new_axes
            return base.dtype if nd == 0 else nt.Array(base.dtype, nd, "A")
        if isinstance(atom, ast.Constant):
            v = atom.value
            return nt.boolean if isinstance(v, bool) else nt.int64 if isinstance(v, int) else nt.float64
        return None

    def is_active(self, atom):
        names = data_names(atom)
        return any(n in self.active for n in names)

    def fixpoint(self):
        changed = True
        while changed:
            changed = False
            for s in walk(self.program.body):
                if isinstance(s, Assign) and s.target not in self.active and not s.nodiff:
                    inputs = diff_inputs(s.value)
                    if inputs and is_float(self.types.get(s.target)) and any(self.is_active(a) for a in inputs):
                        self.active.add(s.target)
                        changed = True
                elif isinstance(s, Store) and s.array not in self.active:
                    if self.is_active(s.value) and is_float(self.types.get(s.array)):
                        self.active.add(s.array)
                        changed = True

    def check(self):
        """Refuse writes into active inputs, and writes into memory that another name still
        reads afterwards (a view or alias treated as a copy would give a wrong gradient)."""
        groups = self.alias_groups()
        defs = {}
        for s in walk(self.program.body):
            if isinstance(s, Assign):
                defs.setdefault(s.target, s)
        outputs = {n for a in self.program.outputs for n in data_names(a)}
        for s in walk(self.program.body):
            if isinstance(s, Assign) and isinstance(s.value, ast.Constant) and s.value.value is None \
                    and s.target in self.active:
                raise TransformError(
                    f"{s.origin.func} ({s.origin.file}, line {s.origin.line}): `{s.origin.text}` makes "
                    f"`{s.target}` None on one path, while on another it carries a gradient; srcad cannot "
                    f"differentiate a value that may be None. Hint: give it an array of the same kind on "
                    f"every path (np.zeros(0) for an empty one), or compute it outside the differentiated call")
        for path in _paths(self.program.body):
            s = path[-1][0][path[-1][1]]
            if not isinstance(s, Store):
                continue
            arr = s.array
            if arr in self.active_params:
                raise TransformError(
                    f"{self.program.name} ({s.origin.file}, line {s.origin.line}): `{s.origin.text}` writes into its "
                    f"input `{arr}` which needs a gradient; copy it first: {arr} = {arr}.copy()")
            for other in sorted(groups.get(arr, {arr}) - {arr}):
                if _disjoint(defs.get(other), s) or not _live_after(path, other, outputs):
                    continue
                where = defs.get(other)
                seen = f" (line {where.origin.line}: `{where.origin.text}`)" if where is not None else ""
                raise TransformError(
                    f"{s.origin.func} ({s.origin.file}, line {s.origin.line}): `{s.origin.text}` writes into "
                    f"`{arr}` while `{other}`{seen}, which shares its memory, is read afterwards: srcad "
                    f"cannot differentiate that correctly. Hint: make `{other}` an independent array with "
                    f".copy(), or finish reading it before the write")

    def alias_groups(self):
        parent = {}

        def find(n):
            while parent.get(n, n) != n:
                n = parent[n]
            return n

        sources = {}
        moved = self.program.moved
        for s in walk(self.program.body):
            if isinstance(s, Assign) and isinstance(self.types.get(s.target), nt.Array):
                v = s.value
                src = v.id if isinstance(v, ast.Name) else \
                    v.value.id if isinstance(v, ast.Subscript) and isinstance(v.value, ast.Name) else None
                ok = src is not None and isinstance(self.types.get(src), nt.Array) and src not in moved
                sources.setdefault(s.target, []).append(src if ok else None)
        for target, srcs in sources.items():
            if all(srcs):   # a name rebound to a fresh array somewhere is not treated as an alias
                for src in srcs:
                    parent[find(target)] = find(src)
        groups = {}
        for n in list(parent):
            groups.setdefault(find(n), set()).update({n, find(n)})
        return {n: g for g in groups.values() for n in g}


def _paths(stmts, prefix=()):
    """Every statement's position: a tuple of (block, index) pairs from the top block down."""
    for k, s in enumerate(stmts):
        here = prefix + ((stmts, k),)
        yield here
        for block in blocks(s):
            yield from _paths(block, here)


def _reads_name(s, v):
    """Does statement `s` itself (not its nested blocks) read name `v`?"""
    if isinstance(s, Assign):
        exprs = [s.value]
    elif isinstance(s, Store):
        if s.array == v:
            return True
        exprs = [s.index, s.value]
    elif isinstance(s, For):
        exprs = [s.start, s.stop, s.step]
    else:
        return s.cond == v
    return any(isinstance(n, ast.Name) and n.id == v for e in exprs for n in ast.walk(e))


def _scan(stmts, v):
    """'read' if `v` is read in `stmts` before being rebound on every path, 'rebound' if it is
    rebound first, None if neither."""
    for s in stmts:
        if _reads_name(s, v):
            return "read"
        if isinstance(s, If):
            a, b = _scan(s.body, v), _scan(s.orelse, v)
            if "read" in (a, b):
                return "read"
            if a == b == "rebound":
                return "rebound"
        elif isinstance(s, (For, While)):
            if _scan(s.body, v) == "read":
                return "read"
        elif isinstance(s, Assign) and s.target == v:
            return "rebound"
    return None


def _live_after(path, v, outputs):
    """Is the binding `v` has at the statement at `path` read after that statement
    (later in its block, in a later iteration of an enclosing loop, or as an output)?"""
    for depth in range(len(path) - 1, -1, -1):
        block, k = path[depth]
        found = _scan(block[k + 1:], v)
        if found is not None:
            return found == "read"
        if depth > 0 and isinstance(path[depth - 1][0][path[depth - 1][1]], (For, While)):
            if _scan(block[:k + 1], v) == "read":
                return True
    return v in outputs


def _interval(index):
    """[lo, hi) along the first axis for a constant, non-negative index or slice; None otherwise."""
    e = index.elts[0] if isinstance(index, ast.Tuple) else index
    if isinstance(e, ast.Constant) and type(e.value) is int and e.value >= 0:
        return e.value, e.value + 1
    if isinstance(e, ast.Slice) and e.step is None:
        lo = 0 if e.lower is None else e.lower.value if isinstance(e.lower, ast.Constant) else None
        hi = float("inf") if e.upper is None else e.upper.value if isinstance(e.upper, ast.Constant) else None
        if type(lo) is int and lo >= 0 and (hi == float("inf") or (type(hi) is int and hi >= 0)):
            return lo, hi
    return None


def _disjoint(view_def, store):
    """A view `v = a[...]` and a write `a[...] = ...` on constant, non-overlapping ranges of the first axis."""
    if view_def is None or not isinstance(view_def.value, ast.Subscript):
        return False
    base = view_def.value.value
    if not (isinstance(base, ast.Name) and base.id == store.array):
        return False
    a, b = _interval(view_def.value.slice), _interval(store.index)
    return a is not None and b is not None and (a[1] <= b[0] or b[1] <= a[0])

