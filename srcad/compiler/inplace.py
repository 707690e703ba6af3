"""In-place updates of arrays are writes into memory, whatever name they go through.

`a op= v` on an array changes the array `a` refers to (NumPy's semantics), so
after typing it becomes a store into the whole array: `t = a op v; a[:] = t`.
A name bound to another array name (`z = y`, or a helper's parameter bound
to the caller's array) is the same array, not a copy: where that binding
stays valid for every use of the name, the uses are rewritten to the
original name, so that writes through the alias are writes into it.
"""
import ast

from numba.core import types as nt

from .normalize import Assign, For, If, Store, While, blocks, defined_names, walk


def resolve_inplace(program, types):
    """Rewrite `program` (after typing) as described above; `types` gains the new temporaries."""
    _stores_for_inplace_updates(program.body, program, types)
    _propagate_aliases(program, types)


def _stores_for_inplace_updates(stmts, program, types):
    k = 0
    while k < len(stmts):
        s = stmts[k]
        for block in blocks(s):
            _stores_for_inplace_updates(block, program, types)
        ty = types.get(s.target) if isinstance(s, Assign) else None
        if isinstance(s, Assign) and s.aug and isinstance(ty, nt.Array):
            tmp = program.names.fresh("t")
            types[tmp] = ty
            full = ast.Slice(lower=None, upper=None, step=None)
            index = full if ty.ndim == 1 else ast.Tuple(elts=[full] * ty.ndim, ctx=ast.Load())
            stmts[k:k + 1] = [Assign(tmp, s.value, s.origin),
                              Store(s.target, index, ast.Name(id=tmp, ctx=ast.Load()), s.origin)]
            k += 1
        k += 1


def _own_reads(s):
    """Names statement `s` itself reads (not its nested blocks)."""
    exprs = {Assign: lambda u: [u.value], Store: lambda u: [u.index, u.value],
             If: lambda u: [], For: lambda u: [u.start, u.stop, u.step], While: lambda u: []}[type(s)](s)
    out = {n.id for e in exprs for n in ast.walk(e) if isinstance(n, ast.Name)}
    if isinstance(s, Store):
        out.add(s.array)
    elif isinstance(s, (If, While)):
        out.add(s.cond)
    return out


def _reads(s):
    """Names statement `s` reads, its nested blocks included."""
    return set().union(*(_own_reads(t) for t in walk([s])))


def _propagate_aliases(program, types):
    """Replace `z` by `y` after `z = y` (arrays) where z has no other binding, every use of z
    follows the binding in the same block, and y is not rebound in between."""
    count = {}
    for s in walk(program.body):
        for n in defined_names(s):
            count[n] = count.get(n, 0) + 1
    outputs = {a.id for a in program.outputs if isinstance(a, ast.Name)}
    changed = True
    while changed:
        changed = False
        for block in _allblocks(program.body):
            for k, s in enumerate(block):
                if not _is_array_alias(s, types, count, program.params):
                    continue
                z, y = s.target, s.value.id
                rest = block[k + 1:]
                elsewhere = [t for t in walk(program.body) if t is not s and not any(t is u for u in walk(rest))]
                if any(z in _own_reads(t) for t in elsewhere):
                    continue
                last = max((i for i, t in enumerate(rest) if z in _reads(t)), default=-1)
                # y may be rebound by the statement that reads z last (`D = z`: read before the write)
                span = rest if z in outputs else rest[:last] + \
                    ([] if last < 0 or isinstance(rest[last], Assign) else [rest[last]])
                if any(y in defined_names(t) for t in walk(span)):
                    continue
                _rename_reads(rest, z, y)
                if z in outputs:
                    program.outputs = [ast.Name(id=y, ctx=ast.Load()) if isinstance(a, ast.Name) and a.id == z
                                       else a for a in program.outputs]
                del block[k]
                block[:] = [t for t in block if not _is_self_binding(t)]
                changed = True
                break
            if changed:
                break


def _is_array_alias(s, types, count, params):
    return isinstance(s, Assign) and not s.aug and not s.nodiff and isinstance(s.value, ast.Name) \
        and isinstance(types.get(s.target), nt.Array) and isinstance(types.get(s.value.id), nt.Array) \
        and count.get(s.target, 0) == 1 and s.target not in params and s.value.id != s.target


def _is_self_binding(s):
    return isinstance(s, Assign) and isinstance(s.value, ast.Name) and s.value.id == s.target and not s.aug


def _allblocks(stmts):
    yield stmts
    for s in stmts:
        for block in blocks(s):
            yield from _allblocks(block)


class _Rename(ast.NodeTransformer):
    def __init__(self, old, new):
        self.old, self.new = old, new

    def visit_Name(self, node):
        return ast.Name(id=self.new, ctx=node.ctx) if node.id == self.old else node


def _rename_reads(stmts, old, new):
    rename = _Rename(old, new)
    for t in walk(stmts):
        if isinstance(t, Assign):
            t.value = rename.visit(t.value)
        elif isinstance(t, Store):
            t.index, t.value = rename.visit(t.index), rename.visit(t.value)
            if t.array == old:
                t.array = new
        elif isinstance(t, For):
            t.start, t.stop, t.step = (rename.visit(e) for e in (t.start, t.stop, t.step))
        elif isinstance(t, (If, While)) and t.cond == old:
            t.cond = new
