"""Values that may be None: a name bound to None on one path and to an array or a float on another.

Numba types such a name as optional, and the plain call returns None or the
value, as Python does. Under a tape the name must have one type, so each of
its bindings to None becomes an empty placeholder of its type and a flag
records which the name holds: the forward hands back None where the flag is
set, and the adjoint takes the cotangent of that output only where it is not.
A name copied from such a name (`z = y`) may be None too and gets a flag of
its own. Any other read of one (arithmetic, a call, a store) is refused with
the user's line: srcad cannot differentiate a value that may be None there.

Runs after activity, on active names only (the others keep their None).
Stores on `fn.facts["optional"]`: `flags` (name -> its flag) and `outputs`
(output position -> the flag of the name returned there).
"""
from numba.core import types as nt

from ..errors import problem
from ..ir import Assign, Const, Name
from ..ir.visit import all_blocks, names_in, reads, walk
from .types import placeholder


def flag_optional_values(fn):
    """Rewrite the active names of `fn` that may be None, in place; returns `fn`."""
    active = fn.facts["activity"]["active"]
    maybe_none = _maybe_none(fn, active)
    flags = {n: fn.names.fresh(f"{n}_is_none") for n in sorted(maybe_none)}
    for n in maybe_none:
        _refuse_other_reads(fn, n, maybe_none)
    for flag in flags.values():
        fn.types[flag] = nt.boolean
    for block in all_blocks(fn.body):
        block[:] = [t for s in block for t in _with_flag(fn, s, flags)]
    outputs = {k: flags[out.id] for k, out in enumerate(fn.outputs) if isinstance(out, Name) and out.id in flags}
    fn.facts["optional"] = {"flags": flags, "outputs": outputs}
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


def _refuse_other_reads(fn, name, maybe_none):
    none = next(t for t in walk(fn.body) if isinstance(t, Assign) and t.target in maybe_none and t.value == Const(None))
    hint = "give it an array of the same kind on every path (np.zeros(0) for an empty one), or only return it"
    for s in walk(fn.body):
        copy = isinstance(s, Assign) and s.value == Name(name) and s.target in maybe_none
        if name in reads(s) and not copy:
            raise problem(s.origin, f"`{s.origin.text}` reads `{fn.names.user(name)}`, which is None where line "
                                    f"{none.origin.line} (`{none.origin.text}`) bound it, while on another path it "
                                    f"carries a gradient: srcad cannot differentiate a value that may be None there",
                          hint)
    if any(name in names_in(out) and out != Name(name) for out in fn.outputs):
        raise problem(none.origin, f"`{fn.names.user(name)}` may be None (`{none.origin.text}`) and is returned "
                                   f"indexed: srcad cannot differentiate that", hint)


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
