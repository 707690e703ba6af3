"""Values that may be None: a name bound to None on one path and to an array or a float on another.

Numba types such a name as optional, and the plain call returns None or the
value, as Python does. Under a tape the name must have one type, so each of
its bindings to None becomes an empty placeholder of its type and a flag
records which the name holds: the forward hands back None where the flag is
set, and the adjoint takes the cotangent of that output only where it is not.
A name copied from such a name (`z = y`) may be None too and gets a flag of
its own, and a test `y is None` reads the flag. Other reads (arithmetic, a
call, a store) are fine where the name is known not to be None (after a
binding to a value, under `if y is not None:`); elsewhere they are refused
with the user's line: srcad cannot differentiate a value that may be None there.
What is known follows the flow and the flags: a name bound to a value under
`if flag:` is known again under a later `if flag:` while neither is bound anew
(`out = None; if keep: out = np.zeros(n)` ... `if keep: out[i] = v`), and a
test kept in a name (`t = y is None`, `u = not t`, as `or` and `and` make them)
says where `y` holds a value until either is bound anew.

Runs after activity, on active names only (the others keep their None).
Stores on `fn.facts["optional"]`: `flags` (name -> its flag) and `outputs`
(output position -> the flag of the name returned there).
"""
from numba.core import types as nt

from ..errors import problem
from ..ir import Assign, Compare, Const, For, If, Name, UnaryOp, While
from ..ir.facts import Activity, OptionalValues
from ..ir.visit import all_blocks, assigned, defines, map_exprs, names_in, reads, rewrite_top_down, walk
from .types import placeholder


def flag_optional_values(fn):
    """Rewrite the active names of `fn` that may be None, in place; returns `fn`."""
    active = fn.facts.of(Activity).active
    maybe_none = _maybe_none(fn, active)
    flags = {n: fn.names.fresh(f"{n}_is_none") for n in sorted(maybe_none)}
    for flag in flags.values():
        fn.types[flag] = nt.boolean
    _refuse_reads_where_none(fn, maybe_none)
    _tests_read_the_flags(fn, flags)
    for block in all_blocks(fn.body):
        block[:] = [t for s in block for t in _with_flag(fn, s, flags)]
    outputs = {k: flags[out.id] for k, out in enumerate(fn.outputs) if isinstance(out, Name) and out.id in flags}
    fn.facts.put(OptionalValues(flags, outputs))
    return fn


def _maybe_none(fn, active):
    """Active names bound to None somewhere, and the names copied from them."""
    found = {s.target for s in walk(fn.body) if isinstance(s, Assign) and s.value == Const(None) and s.target in active}
    changed = True
    while changed:
        changed = False
        for s in walk(fn.body):
            if isinstance(s, Assign) and isinstance(s.value, Name) and s.value.id in found and s.target not in found:
                found.add(s.target)
                changed = True
    return found


def _tests_read_the_flags(fn, flags):
    """`y is None` / `y is not None` on such a name is its flag (or the flag's negation)."""
    def test(e):
        if isinstance(e, Compare) and e.op in ("is", "is not") and e.right == Const(None) \
                and isinstance(e.left, Name) and e.left.id in flags:
            flag = Name(flags[e.left.id])
            return flag if e.op == "is" else UnaryOp("not", flag)
        return None
    for s in walk(fn.body):
        map_exprs(s, lambda e: rewrite_top_down(e, test))


def _refuse_reads_where_none(fn, maybe_none):
    """Refuse a read of a name that may be None (other than a copy into another such name, a test
    `is None`, a return) where it is not known not to be: known after a binding to a value, in the
    branch of `if y is not None:` (or the else of `if y is None:`), and under a flag it was bound under
    (the facts above); branches join, loops iterate."""
    nones = [s for s in walk(fn.body) if isinstance(s, Assign) and s.target in maybe_none and s.value == Const(None)]

    def refuse(s, name):
        none = next((t for t in nones if t.target == name), nones[0])
        raise problem(s.origin, f"`{s.origin.text}` reads `{fn.names.user(name)}`, which is None where line "
                                f"{none.origin.line} (`{none.origin.text}`) bound it, while on another path it "
                                f"carries a gradient: srcad cannot differentiate a value that may be None there",
                      "test it first (`if y is not None:`), give it an array on every path (np.zeros(0) for an "
                      "empty one), or only return it")

    def block(stmts, known):
        for s in stmts:
            known = stmt(s, known)
        return known

    def stmt(s, known):
        if isinstance(s, If):
            flag = s.cond.id if isinstance(s.cond, Name) else None
            body, orelse = known | _implied(known, flag, True), known | _implied(known, flag, False)
            after_body, after_orelse = block(s.body, body), block(s.orelse, orelse)
            joined = _join(after_body, after_orelse)
            if flag is not None and flag not in assigned(s.body) | assigned(s.orelse):
                joined |= {(n, flag, True) for n in _names(after_body) - after_orelse if n in maybe_none}
                joined |= {(n, flag, False) for n in _names(after_orelse) - after_body if n in maybe_none}
            return joined
        if isinstance(s, (For, While)):
            head = _forget(known, defines(s))
            while True:
                after = block(s.body, head)
                if head & after == head:
                    return head
                head = head & after
        harmless = isinstance(s, Assign) and (s.value == Const(None) or _is_none_test(s.value) or (
            isinstance(s.value, Name) and s.target in maybe_none))
        for name in reads(s) & maybe_none:
            if name not in known and not harmless:
                refuse(s, name)
        known = _forget(known, defines(s))
        if not isinstance(s, Assign):
            return known
        v = s.value
        if _is_none_test(v) and isinstance(v.left, Name) and v.left.id in maybe_none:
            return known | {(v.left.id, s.target, v.op == "is not")}
        if isinstance(v, UnaryOp) and v.op == "not" and isinstance(v.operand, Name):
            return known | {(n, s.target, not p) for n, f, p in _facts(known) if f == v.operand.id}
        if s.target in maybe_none:
            none = v == Const(None) or (isinstance(v, Name) and v.id in maybe_none and v.id not in known)
            return known - {s.target} if none else known | {s.target}
        return known

    block(fn.body, frozenset())
    for out in fn.outputs:
        if names_in(out) & maybe_none and not isinstance(out, Name):
            raise problem(nones[0].origin, f"`{fn.names.user(nones[0].target)}` may be None "
                                           f"(`{nones[0].origin.text}`) and is returned indexed: srcad cannot "
                                           f"differentiate that", "test it first, or return it as it is")


# What is known of names that may be None, at a point: a name (it holds a value), or a fact (name, flag,
# polarity): it holds a value wherever `flag` is `polarity`.

def _is_none_test(e):
    return isinstance(e, Compare) and e.op in ("is", "is not") and e.right == Const(None)


def _facts(known):
    return [k for k in known if isinstance(k, tuple)]


def _names(known):
    return {k for k in known if not isinstance(k, tuple)}


def _implied(known, flag, polarity):
    """The names known to hold a value in the branch of `if flag:` taken where it is `polarity`."""
    return {n for n, f, p in _facts(known) if f == flag and p == polarity}


def _forget(known, bound):
    """`known` once the names `bound` are bound anew: facts about them, or tested by them, are gone."""
    return frozenset(k for k in known if not (isinstance(k, tuple) and bound & {k[0], k[1]}))


def _join(a, b):
    """What is known after two paths meet: what both know, and a fact one knows about a name the other
    knows outright."""
    return (a & b) | {k for k in _facts(a) if k[0] in b} | {k for k in _facts(b) if k[0] in a}


def _with_flag(fn, s, flags):
    """`s`, and the statement setting its target's flag: True where it binds None (to a placeholder now)."""
    if not (isinstance(s, Assign) and s.target in flags):
        return [s]
    flag = flags[s.target]
    if s.value == Const(None):
        return [Assign(s.target, placeholder(fn.types[s.target]), s.origin), Assign(flag, Const(True), s.origin)]
    if isinstance(s.value, Name) and s.value.id in flags:
        return [s, Assign(flag, Name(flags[s.value.id]), s.origin)]
    return [s, Assign(flag, Const(False), s.origin)]
