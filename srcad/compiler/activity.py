"""Types of IR variables and which of them carry derivatives.

Types come from Numba itself: the normalized primal is compiled first and
its typemap read back (SSA versions `x.1`, `x.2` unified). A variable is
active when it is float-valued and computed, through differentiable
operations, from an active argument. Integers and booleans never are.
"""
import ast

from numba.core import types as nt

from .frontend import TransformError
from .normalize import Assign, For, If, Store, While, is_tree, leaves
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


def walk(stmts):
    """Every IR statement, depth first."""
    for s in stmts:
        yield s
        if isinstance(s, If):
            yield from walk(s.body)
            yield from walk(s.orelse)
        elif isinstance(s, (For, While)):
            yield from walk(s.body)


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
            dropped = sum(1 for e in idx if not isinstance(e, ast.Slice))
            nd = base.ndim - dropped
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
        """Refuse writes into active inputs and aliasing we cannot differentiate."""
        params = set(self.program.params)
        groups = self.alias_groups()
        stored = {s.array: s for s in walk(self.program.body) if isinstance(s, Store)}
        for arr, s in stored.items():
            if arr in self.active_params:
                raise TransformError(
                    f"{self.program.name} ({s.origin.file}, line {s.origin.line}): `{s.origin.text}` writes into its "
                    f"input `{arr}` which needs a gradient; copy it first: {arr} = {arr}.copy()")
            group = groups.get(arr, {arr})
            if len(group) > 1 and any(n in self.active or n in params for n in group):
                others = ", ".join(sorted(group - {arr}))
                raise TransformError(
                    f"{s.origin.func} ({s.origin.file}, line {s.origin.line}): `{s.origin.text}` writes into "
                    f"array `{arr}` which shares memory with {others} (aliasing is not supported). "
                    f"Hint: make an independent array with .copy()")
        copies = {local: p for p, local in self.program.param_copies.items()}
        defs = {}
        for s in walk(self.program.body):
            if isinstance(s, Assign):
                defs.setdefault(s.target, []).append(s)
        for s in walk(self.program.body):
            if not (isinstance(s, Assign) and s.aug and isinstance(self.types.get(s.target), nt.Array)):
                continue
            fresh = [d for d in defs[s.target] if not d.aug and not (isinstance(d.value, ast.Name)
                                                                     and d.value.id in copies.values())]
            shared = len(groups.get(s.target, ())) > 1
            if shared or (s.target in copies and not fresh):
                raise TransformError(
                    f"{s.origin.func} ({s.origin.file}, line {s.origin.line}): `{s.origin.text}` updates "
                    f"an array in place that is an input or shares memory with another name. "
                    f"Hint: write `a = a + ...`, or copy first: a = a.copy()")

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
