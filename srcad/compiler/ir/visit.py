"""Walking and rebuilding IR: what a statement reads and binds, and rewrites of its expressions."""
import dataclasses
from collections import Counter

from .nodes import (Accumulate, Assign, Attribute, BinOp, Call, Compare, Const, Effect, Expr, For, Global, If, Name,
                    Pop, Push, Reserve, Slice, Store, Subscript, Tuple, TypeRef, UnaryOp, While, new_uid)


# ---- expressions --------------------------------------------------------------------------------

def children(e):
    """The direct sub-expressions of `e`."""
    if isinstance(e, (Const, Name, Global, TypeRef)) or e is None:
        return ()
    if isinstance(e, Subscript):
        return (e.base,) + e.index
    if isinstance(e, Slice):
        return tuple(x for x in (e.lower, e.upper, e.step) if x is not None)
    if isinstance(e, Attribute):
        return (e.base,)
    if isinstance(e, (BinOp, Compare)):
        return (e.left, e.right)
    if isinstance(e, UnaryOp):
        return (e.operand,)
    if isinstance(e, Call):
        return e.args + tuple(v for _, v in e.keywords)
    if isinstance(e, Tuple):
        return e.items
    raise TypeError(f"not an IR expression: {e!r}")


def subexpressions(e):
    """`e` and everything below it, parents first."""
    stack = [e]
    while stack:
        x = stack.pop()
        if x is None:
            continue
        yield x
        stack.extend(reversed(children(x)))


def names_in(e):
    """The names an expression reads."""
    return {x.id for x in subexpressions(e) if isinstance(x, Name)}


def map_children(e, fn):
    """`e` rebuilt with `fn` applied to each of its direct sub-expressions."""
    if isinstance(e, (Const, Name, Global, TypeRef)) or e is None:
        return e
    if isinstance(e, Subscript):
        return Subscript(fn(e.base), tuple(fn(i) for i in e.index))
    if isinstance(e, Slice):
        return Slice(*(None if p is None else fn(p) for p in (e.lower, e.upper, e.step)))
    if isinstance(e, Attribute):
        return Attribute(fn(e.base), e.attr)
    if isinstance(e, BinOp):
        return BinOp(e.op, fn(e.left), fn(e.right))
    if isinstance(e, Compare):
        return Compare(e.op, fn(e.left), fn(e.right))
    if isinstance(e, UnaryOp):
        return UnaryOp(e.op, fn(e.operand))
    if isinstance(e, Call):
        return Call(e.fn, tuple(fn(a) for a in e.args), tuple((k, fn(v)) for k, v in e.keywords))
    if isinstance(e, Tuple):
        return Tuple(tuple(fn(i) for i in e.items))
    raise TypeError(f"not an IR expression: {e!r}")


def rebuild(e, fn):
    """`e` with `fn` applied bottom-up: each node is rebuilt from its rewritten children, then
    `fn(node)` returns its replacement (or the node itself)."""
    if e is None:
        return None
    return fn(map_children(e, lambda c: rebuild(c, fn)))


def rewrite_top_down(e, fn):
    """`e` with `fn` applied top-down: where `fn(node)` returns an expression, that replaces the node
    (and its parts are not visited); where it returns None, the node's parts are visited."""
    if e is None:
        return None
    new = fn(e)
    return new if new is not None else map_children(e, lambda c: rewrite_top_down(c, fn))


def substitute(e, mapping):
    """`e` with the names in `mapping` replaced by their expressions."""
    if not mapping:
        return e
    return rebuild(e, lambda x: mapping.get(x.id, x) if isinstance(x, Name) else x)


def rename_expr(e, mapping):
    """`e` with names renamed (`mapping`: old name -> new name)."""
    return substitute(e, {old: Name(new) for old, new in mapping.items()})


# ---- statements ---------------------------------------------------------------------------------

def blocks(s):
    """The statement lists nested directly in `s`."""
    if isinstance(s, If):
        return [s.body, s.orelse]
    if isinstance(s, (For, While)):
        return [s.body]
    return []


def walk(stmts):
    """Every statement, depth first, parents before their bodies."""
    for s in stmts:
        yield s
        for block in blocks(s):
            yield from walk(block)


def all_blocks(stmts):
    """`stmts` and every statement list nested in it."""
    yield stmts
    for s in stmts:
        for block in blocks(s):
            yield from all_blocks(block)


def stack_statements(fn, kind):
    """{stack: [(block, statement)] of `fn`'s statements of `kind` (Push, Pop, Reserve) on it}, the stacks
    in the order their first such statement comes in `fn`."""
    found = {}
    for block in all_blocks(fn.body):
        for s in block:
            if isinstance(s, kind):
                found.setdefault(s.stack, []).append((block, s))
    order = {id(s): k for k, s in enumerate(walk(fn.body))}
    return dict(sorted(found.items(), key=lambda item: order[id(item[1][0][1])]))


def own_exprs(s):
    """The expressions statement `s` itself evaluates (not those of its nested blocks)."""
    if isinstance(s, Assign):
        return [s.value]
    if isinstance(s, Store):
        return list(s.index) + [s.value]
    if isinstance(s, Accumulate):
        return [s.target, s.value]
    if isinstance(s, If):
        return [s.cond]
    if isinstance(s, For):
        return [s.start, s.stop, s.step]
    if isinstance(s, While):
        return [Name(s.cond)] + ([s.bound] if s.bound is not None else [])
    if isinstance(s, Push):
        return [s.value]
    if isinstance(s, Effect):
        return [s.call]
    if isinstance(s, Pop):
        return list(s.target.index) + [s.target.base] if isinstance(s.target, Subscript) else []
    if isinstance(s, Reserve):
        return [s.count]
    raise TypeError(f"not an IR statement: {s!r}")


def reads(s):
    """Names statement `s` itself reads (a store reads the binding of the array it writes into)."""
    out = set()
    for e in own_exprs(s):
        out |= names_in(e)
    if isinstance(s, Store):
        out.add(s.array)
    return out


def defines(s):
    """Names statement `s` itself binds (`v += e` binds `v` anew)."""
    if isinstance(s, Assign):
        return {s.target}
    if isinstance(s, For):
        return {s.var}
    if isinstance(s, (Pop, Accumulate)) and isinstance(s.target, Name):
        return {s.target.id}
    return set()


def written_array(s):
    """The array whose memory `s` writes into (a Store, an Accumulate or a Pop into a region), or None."""
    if isinstance(s, Store):
        return s.array
    target = getattr(s, "target", None) if isinstance(s, (Accumulate, Pop)) else None
    if isinstance(target, Subscript) and isinstance(target.base, Name):
        return target.base.id
    return None


def assigned(stmts):
    """Every name bound anywhere in `stmts`."""
    out = set()
    for s in walk(stmts):
        out |= defines(s)
    return out


def called(stmts):
    """The names of the functions `stmts` call (`np.exp`, `srcad.cotangent_times`...)."""
    return {x.fn for s in walk(stmts) for e in own_exprs(s) for x in subexpressions(e) if isinstance(x, Call)}


def binding_counts(stmts):
    """name -> how many statements of `stmts` (nested ones included) bind it."""
    return Counter(n for s in walk(stmts) for n in defines(s))


def read_anywhere(stmts):
    out = set()
    for s in walk(stmts):
        out |= reads(s)
    return out


def map_exprs(s, fn):
    """Rewrite, in place, every expression `s` itself holds with `fn(expr) -> expr`."""
    if isinstance(s, Assign):
        s.value = fn(s.value)
    elif isinstance(s, Store):
        s.index = tuple(fn(i) for i in s.index)
        s.value = fn(s.value)
    elif isinstance(s, Accumulate):
        s.target, s.value = fn(s.target), fn(s.value)
    elif isinstance(s, If):
        s.cond = fn(s.cond)
    elif isinstance(s, For):
        s.start, s.stop, s.step = fn(s.start), fn(s.stop), fn(s.step)
    elif isinstance(s, Push):
        s.value = fn(s.value)
    elif isinstance(s, Effect):
        s.call = fn(s.call)
    elif isinstance(s, Pop):
        s.target = fn(s.target)
    elif isinstance(s, Reserve):
        s.count = fn(s.count)
    elif isinstance(s, While) and s.bound is not None:
        s.bound = fn(s.bound)
    return s


def rename_stmts(stmts, mapping):
    """Rename names, in place, in every statement of `stmts` (bindings and reads)."""
    if not mapping:
        return stmts
    for s in walk(stmts):
        map_exprs(s, lambda e: rename_expr(e, mapping))
        if isinstance(s, Assign):
            s.target = mapping.get(s.target, s.target)
        elif isinstance(s, Store):
            s.array = mapping.get(s.array, s.array)
        elif isinstance(s, For):
            s.var = mapping.get(s.var, s.var)
        elif isinstance(s, While):
            s.cond = mapping.get(s.cond, s.cond)
        elif isinstance(s, (Push, Pop, Reserve)):
            s.stack = mapping.get(s.stack, s.stack)
    return stmts


def clone(stmts):
    """A copy of `stmts` with new statement objects (expressions are immutable and shared)."""
    out = []
    for s in stmts:
        c = dataclasses.replace(s)
        if isinstance(c, If):
            c.body, c.orelse = clone(s.body), clone(s.orelse)
        elif isinstance(c, (For, While)):
            c.body = clone(s.body)
        out.append(c)
    return out


def distinct_ids(stmts):
    """Give, in place, a new `uid` to each statement of `stmts` whose uid an earlier one already has
    (generated code holds several copies of one statement), so analyses can key statements by uid."""
    seen = set()
    for s in walk(stmts):
        if s.uid in seen:
            s.uid = new_uid()
        seen.add(s.uid)
    return stmts


def is_expr(x):
    return isinstance(x, Expr)
