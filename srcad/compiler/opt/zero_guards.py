"""Zero-cotangent guards paid for only where a cotangent is zero.

A scalar statement's adjoint runs under `if d_v != 0.0:` (`LocalAdjoints.unless_zero`),
and the partials along a path multiply through `srcad.cotangent_times`: a
cotangent that is exactly zero sends no 0 * inf back. In a loop the tests add up
(a quarter of an RK4 step's adjoint). Where a loop body runs a stretch of such
guarded statements that write scalars only, the stretch runs first without its
guards, with plain products, and again as it was, from the values before it,
only if a scalar it wrote came out nan:

    d_x_before = d_x                      # every scalar the stretch writes
    <the stretch, unguarded, plain products>
    if d_x + d_y + ... != d_x + d_y + ...:   # a nan somewhere (or inf - inf)
        d_x = d_x_before
        <the stretch as it was>

Without guards, a product differs from the guarded one only where a zero meets
an inf or a nan, and that makes a nan, which + and * carry into every scalar
the stretch adds it to; where none comes out, the result is the guarded one
(up to the sign of a zero).
"""
from numba.core import types as nt

from ..ir import Accumulate, Assign, BinOp, Call, Compare, Const, For, If, Name
from ..ir.facts import Reverse
from ..ir.visit import blocks, clone, map_exprs, rebuild, walk
from .cleanup import live_in


def version_guarded_stretches(fn):
    """Rewrite, in place, the stretches of guarded scalar statements in the loop bodies of `fn` (an
    adjoint: its guards' flags are in its `Reverse` record)."""
    guards = fn.facts.of(Reverse).guards
    for loop in [s for s in walk(fn.body) if isinstance(s, For)]:
        loop.body[:] = _versioned(fn, loop.body, guards)
    return fn


def _versioned(fn, body, guards):
    out, k = [], 0
    while k < len(body):
        end = _stretch_end(fn, body, k, guards)
        if end is None:
            out.append(body[k])
            k += 1
            continue
        out += _two_versions(fn, body[k:end], guards)
        k = end
    return out


def _is_guard(body, k, guards):
    """Is `body[k]` the flag of a zero-cotangent guard, `body[k + 1]` the guarded statements?"""
    s = body[k]
    return k + 1 < len(body) and isinstance(s, Assign) and s.target in guards and \
        isinstance(body[k + 1], If) and body[k + 1].cond == Name(s.target) and not body[k + 1].orelse


def _stretch_end(fn, body, k, guards):
    """The end of the stretch starting at guard `body[k]`: guards and scalar statements up to the last
    guard before something else (None if `body[k]` starts no guard or the stretch has one guard only)."""
    if not _is_guard(body, k, guards):
        return None
    last, count, j = None, 0, k
    while j < len(body):
        if _is_guard(body, j, guards) and _scalar_only(fn, body[j + 1].body):
            count += 1
            j += 2
            last = j
        elif _scalar_only(fn, [body[j]]):
            j += 1
        else:
            break
    return last if count > 1 else None


def _scalar_only(fn, stmts):
    """Do `stmts` only bind or add into scalar names, unconditionally? (Within a stretch only its guards
    branch, and they bind adjoint names, which the adjoint binds on entry: so what the stretch reads
    first is bound before it, and can be kept for its second run.)"""
    for s in walk(stmts):
        target = _bound_name(s)
        if target is None or not isinstance(fn.types.get(target), (nt.Number, nt.Boolean)):
            return False
    return True


def _bound_name(s):
    """The name `s` binds or adds into (an Assign, an Accumulate into a name), else None."""
    if isinstance(s, Assign):
        return s.target
    return s.target.id if isinstance(s, Accumulate) and isinstance(s.target, Name) else None


def _two_versions(fn, stretch, guards):
    """The stretch unguarded, then again guarded from the values before it where a nan came out."""
    written = {_bound_name(s) for s in walk(stretch)} - {None}      # (the guards bind nothing themselves)
    # a nan the unguarded run makes lands in what the guarded statements write (the others recompute
    # primal values or zero an adjoint): only those are checked, so a primal inf costs nothing
    guarded = {_bound_name(t) for k, s in enumerate(stretch) if _is_guard(stretch, k, guards)
               for t in walk(stretch[k + 1].body)}
    floats = sorted(v for v in guarded if isinstance(fn.types.get(v), nt.Float))
    # what the stretch reads before it binds it (or may leave as it was) comes back for the second run
    before = {v: fn.names.fresh(f"{v}_before") for v in sorted(live_in(stretch, written) & written)}
    for v, b in before.items():
        fn.types[b] = fn.types[v]
    origin = stretch[0].origin
    keep = [Assign(b, Name(v), origin) for v, b in before.items()]
    total = Name(fn.names.fresh("written_sum"))
    fn.types[total.id] = nt.float64
    bad = fn.names.fresh("made_nan")
    fn.types[bad] = nt.boolean
    sums = Const(0.0)
    for v in floats:
        sums = BinOp("+", sums, Name(v)) if sums != Const(0.0) else Name(v)
    check = [Assign(total.id, sums, origin), Assign(bad, Compare("!=", total, total), origin)]
    again = [Assign(v, Name(b), origin) for v, b in before.items()] + stretch
    return keep + unguarded(clone(stretch), guards) + check + [If(Name(bad), again, [], origin)]


def unguarded(stmts, guards, plain=True):
    """`stmts` without their zero-cotangent guards; with `plain`, products of partials plain (else they
    stay `cotangent_times`, 0 where the cotangent is 0: the same values as under the guards)."""
    out, k = [], 0
    while k < len(stmts):
        if _is_guard(stmts, k, guards):
            out += unguarded(stmts[k + 1].body, guards, plain)
            k += 2
            continue
        s = stmts[k]
        for block in blocks(s):
            block[:] = unguarded(block, guards, plain)
        if plain:
            map_exprs(s, lambda e: rebuild(e, _plain))
        out.append(s)
        k += 1
    return out


def _plain(e):
    """`cotangent_times(a, b)` as `a * b`."""
    if isinstance(e, Call) and e.fn == "srcad.cotangent_times":
        return BinOp("*", e.args[0], e.args[1])
    return e
