"""Subexpressions that one statement evaluates more than once are computed once.

A derivative rule is a formula in which a factor appears several times: the adjoint of
`q, r = np.linalg.qr(a)` reads R's square block five times, that of `np.linalg.pinv` the
pseudo-inverse six. Printed as written, each occurrence would factorise the matrix again
(and the line would be unreadable). Here each call or operator that a statement evaluates
twice or more is bound to a temporary just before the statement, innermost first, and so is a
mathematical function (`np.tanh(c)`) that a later statement evaluates too; a later statement of
the same block reads that temporary while nothing it was computed from has changed:

    d_a += (g + qr_q(a) @ m) @ np.transpose(np.linalg.inv(qr_r(a)[:, :k])) ... qr_q(a) ...

becomes

    qr_q_of_a = qr_q(a)
    d_a += (g + qr_q_of_a @ m) @ ...

It is safe because the IR has no lazy expressions (a condition is a statement of its own),
so every occurrence was evaluated anyway, and a value is a pure function of what it reads
(dead-code elimination relies on that too). Allocations are left alone: two `np.zeros(n)`
are two arrays.
"""
from collections import Counter

from numba.core import types as nt

from ..ir import Accumulate, Assign, BinOp, Call, Compare, Name, Store, Subscript, Tuple, UnaryOp
from ..ir.facts import Reverse
from ..ir.visit import all_blocks, children, map_exprs, names_in, rebuild, subexpressions, written_array
from .elementwise import TRANSCENDENTAL

_ALLOCATIONS = frozenset("""np.zeros np.ones np.empty np.full np.zeros_like np.ones_like np.empty_like np.full_like
    np.copy np.array np.asarray np.eye np.identity np.arange np.linspace""".split())


def compute_repeats_once(fn):
    """Bind, in place, each subexpression a statement of `fn` evaluates twice or more to a temporary; a
    later statement of the same block reads the temporary too while nothing it reads can have changed."""
    for block in all_blocks(fn.body):
        out, known = [], {}
        for k, s in enumerate(block):
            if isinstance(s, (Assign, Store, Accumulate)):
                _rewrite_values(s, lambda x: rebuild(x, lambda y: Name(known[y]) if y in known else y))
                made = _hoisted(fn, s) + _hoisted_for_later(fn, block, k)
                known.update((a.value, a.target) for a in made)
                out.extend(made)
            out.append(s)
            known = _still_known(fn, s, known)
        block[:] = out
    return fn


def _hoisted_for_later(fn, block, k):
    """The assignments of temporaries for the calls of mathematical functions that statement `k` of
    `block` and a later one both evaluate, nothing they read changed in between (`s` rewritten to read
    them): the adjoint of `x = sig * np.tanh(c)` reads `np.tanh(c)` in the statement for `sig` and in
    the one for `c`."""
    s = block[k]
    calls = {e for v in _values(s) for e in subexpressions(v) if isinstance(e, Call) and _mathematical(e.fn)}
    # (smallest first; one inside a call bound already is no longer in `s`)
    return [_bound(fn, s, e) for e in sorted(calls, key=_size) if _evaluates(s, e) and _read_later(fn, block, k, e)]


def _mathematical(name):
    """A function of numbers that costs a call of the maths library (on arrays, one per element: more than
    the temporary the statements then share)."""
    return name.startswith("math.") or name in TRANSCENDENTAL


def _read_later(fn, block, k, e):
    """Does a statement after `block[k]` evaluate `e` while nothing `e` reads has changed?"""
    known = _still_known(fn, block[k], {e: None})
    for later in block[k + 1:]:
        if not known:
            return False
        if isinstance(later, (Assign, Store, Accumulate)) and _evaluates(later, e):
            return True
        known = _still_known(fn, later, known)
    return False


def _evaluates(s, e):
    return any(x == e for v in _values(s) for x in subexpressions(v))


def _still_known(fn, s, known):
    """What `known` still holds after `s`: a name it binds, or an adjoint's own array it writes into (which
    shares memory with nothing), drops what reads it; another write into memory drops all."""
    private = fn.facts.of(Reverse).adjoints if fn.facts.has(Reverse) else set()
    target = s.target.id if isinstance(s, Accumulate) and isinstance(s.target, Name) else None
    if isinstance(s, Assign):
        changed = s.target
    elif target is not None and (target in private or isinstance(fn.types.get(target), nt.Number)):
        changed = target
    elif written_array(s) in private:
        changed = written_array(s)
    else:
        return {}
    return {e: n for e, n in known.items() if changed not in names_in(e)}


def _hoisted(fn, s):
    """The assignments of the temporaries `s` now reads, innermost first (`s` rewritten to read them)."""
    made = []
    while True:
        repeated = _repeated(_values(s))
        if not repeated:
            return made
        made.append(_bound(fn, s, min(repeated, key=_size)))


def _bound(fn, s, e):
    """The assignment of `e` to a new temporary, `s` rewritten to read it."""
    name = fn.names.fresh(_name_of(e))
    _rewrite_values(s, lambda x: rebuild(x, lambda y: Name(name) if y == e else y))
    return Assign(name, e, origin=s.origin)


def _values(s):
    """The expressions of `s` that compute values (an accumulation's target is a place)."""
    if isinstance(s, Accumulate):
        return [s.value]
    if isinstance(s, Store):
        return list(s.index) + [s.value]
    return [s.value]


def _rewrite_values(s, f):
    if isinstance(s, Accumulate):
        s.value = f(s.value)
    else:
        map_exprs(s, f)


def _repeated(exprs):
    """The subexpressions worth a temporary that `exprs` evaluate twice or more."""
    counts = Counter()

    def count(e, under_tuple):
        if _worth(e) and not under_tuple:
            counts[e] += 1
        for c in children(e):
            count(c, isinstance(e, Tuple) and e is top)
    for top in exprs:
        count(top, False)
    return [e for e, n in counts.items() if n > 1]


def _worth(e):
    """A call (not an allocation), an operator, or a part of a computed value (`f(a)[0]`)."""
    if isinstance(e, Call):
        return e.fn not in _ALLOCATIONS and not e.fn.startswith("np.random.")
    if isinstance(e, Subscript):
        return not isinstance(e.base, Name)
    return isinstance(e, (BinOp, UnaryOp, Compare))


def _size(e):
    return 1 + sum(_size(c) for c in children(e))


def _name_of(e):
    """`qr_r_of_a` for `qr_r(a)`, `shared` for an operator."""
    if isinstance(e, Call):
        short = e.fn.rsplit(".", 1)[-1]
        names = [a.id if isinstance(a, Name) else a.base.id for a in e.args
                 if isinstance(a, Name) or isinstance(a, Subscript) and isinstance(a.base, Name)]
        return f"{short}_of_{'_'.join(names)}" if names else short
    if isinstance(e, Subscript) and isinstance(e.base, Call):
        return _name_of(e.base) + "_part"
    return "shared"
