"""Subexpressions that one statement evaluates more than once are computed once.

A derivative rule is a formula in which a factor appears several times: the adjoint of
`q, r = np.linalg.qr(a)` reads R's square block five times, that of `np.linalg.pinv` the
pseudo-inverse six. Printed as written, each occurrence would factorise the matrix again
(and the line would be unreadable). Here each call or operator that a statement evaluates
twice or more is bound to a temporary just before the statement, innermost first, and so is a
mathematical function (`np.tanh(c)`), a factorisation (`np.linalg.inv(a)`, `eigenvectors(s)`) or a
reduction of a named array (`np.sum(d_t)`) that a later statement evaluates too; a later statement
of the same block reads that temporary while nothing it was computed from has changed. (The adjoint
of a gradient function that reads one `np.linalg.eigh(s)` in six statements factorised `s` twelve
times; now twice.)

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

from ..analysis.types import type_of
from ..front.bounds import INDEX_CHECKS
from ..ir import Accumulate, Assign, BinOp, Call, Compare, Effect, Name, Push, Store, Subscript, Tuple, UnaryOp
from ..ir.facts import Reverse
from ..ir.visit import (all_blocks, binding_counts, children, map_exprs, names_in, rebuild, subexpressions, walk,
                        written_array)
from .elementwise import SCALAR_OF_ARRAY, TRANSCENDENTAL, is_mask_of_a_loop, statements_in_loops
from .first_writes import KEEPS_NOTHING, NEW_ARRAYS, arrays_held_elsewhere, viewed_arrays, viewed_by

# srcad's parts of np.linalg's decompositions (runtime.py), each a factorisation of its own
_FACTORISATIONS = frozenset("""srcad.det_sign srcad.log_abs_det srcad.eigenvectors srcad.left_singular_vectors
    srcad.singular_values srcad.right_singular_vectors srcad.real_eigenvalues srcad.right_eigenvectors srcad.qr_q
    srcad.qr_r srcad.least_squares srcad.least_squares_rank srcad.least_squares_singular_values""".split())
_ALLOCATIONS = frozenset("""np.zeros np.ones np.empty np.full np.zeros_like np.ones_like np.empty_like np.full_like
    np.copy np.array np.asarray np.eye np.identity np.arange np.linspace""".split())


def compute_repeats_once(fn, given=None, fused=False):
    """Bind, in place, each subexpression a statement of `fn` evaluates twice or more to a temporary; a
    later statement of the same block reads the temporary too while nothing it reads can have changed.
    `given`: values `fn` is handed (`results_handed_on`), read wherever it would compute them again, where
    neither they nor what they are computed from is bound or written into in `fn`. `fused`: `fn`'s array
    statements in loops become loops over their elements next (`opt/elementwise.py`), where a mask is
    evaluated again at no cost (`elementwise.is_mask_of_a_loop`)."""
    own, written = _own_arrays(fn), _written_in_place(fn)
    looped = statements_in_loops(fn) if fused else set()
    bound = binding_counts(fn.body)
    given = {e: n for e, n in (given or {}).items()
             if not any(bound[m] or m in written for m in names_in(e) | {n})}
    for block in all_blocks(fn.body):
        out, known, shared = [], dict(given), set(given.values())
        for k, s in enumerate(block):
            if isinstance(s, (Assign, Store, Accumulate)):
                as_written = s.value
                _rewrite_values(s, lambda x: rebuild(x, lambda y: Name(known[y]) if y in known else y))
                made = _hoisted(fn, s, id(s) in looped) + _hoisted_for_later(fn, own, block, k)
                known.update((a.value, a.target) for a in made)
                shared.update(a.target for a in made if not _is_number(a.value))
                if isinstance(s, Assign) and s.target in written and viewed_by(s.value) & shared:
                    s.value = as_written
                out.extend(made)
            out.append(s)
            known = {**given, **_still_known(fn, own, s, known)}     # (what `fn` is given holds throughout)
            if _names_a_costly_value(s, written):         # `v = eigenvectors(s)`: later statements read `v`
                known[s.value] = s.target
                shared.add(s.target)
        block[:] = out
    return fn


def results_handed_on(primal, adjoint):
    """The costly calls of `primal`'s top level whose results `adjoint` is handed, by the name it gets
    them under (`{eigenvectors(S): v}` for `w, v = np.linalg.eigh(S)`, `v` saved): a derivative rule
    that factorises again (eigh's adjoint reads the eigenvectors) reads them instead. Only a value bound
    once, of names bound at most once, none of them written into, so that the adjoint's are the same.
    (The first-order gradient of `eigh` of a 60 x 60 matrix factorised it four times, now twice.)"""
    bound, written = binding_counts(primal.body), _written_in_place(primal)
    handed = set(adjoint.params)

    def steady(name):
        return name in handed and bound[name] <= 1 and name not in written
    return {s.value: s.target for s in primal.body
            if _names_a_costly_value(s, written) and steady(s.target) and all(map(steady, names_in(s.value)))}


def _names_a_costly_value(s, written):
    return isinstance(s, Assign) and isinstance(s.value, Call) and _costly(s.value.fn) \
        and s.target not in written and s.target not in names_in(s.value)


def _written_in_place(fn):
    """The names whose memory `fn` writes into, itself or through a name bound to a view of it, or saves
    on a stack. One of them bound to a temporary others read (`b = np.exp(x); b[0] = 0` after
    `a = np.exp(x)`) would change what they read: such an assignment keeps a value of its own."""
    out = set()
    for s in walk(fn.body):
        out |= {written_array(s)} - {None}
        if isinstance(s, Accumulate) and isinstance(s.target, Name) \
                and not isinstance(fn.types.get(s.target.id), (nt.Number, nt.Boolean)):
            out.add(s.target.id)
        elif isinstance(s, Effect) and s.call.fn not in INDEX_CHECKS:
            out |= names_in(s.call.args[0]) if s.call.fn in KEEPS_NOTHING and s.call.args else names_in(s.call)
        elif isinstance(s, Push) and isinstance(s.value, Name):
            out.add(s.value.id)
    views = [(s.target, viewed_by(s.value)) for s in walk(fn.body) if isinstance(s, Assign)]
    grew = True
    while grew:
        grew = False
        for name, bases in views:
            if name in out and not bases <= out:
                out |= bases
                grew = True
    return out


def _is_number(e):
    return isinstance(e, Call) and e.fn.startswith("math.")


def _own_arrays(fn):
    """The adjoint's arrays, and arrays `fn` makes that no other name views or holds: a write into one
    changes only what reads it by name."""
    private = fn.facts.of(Reverse).adjoints if fn.facts.has(Reverse) else set()
    made = {s.target for s in walk(fn.body) if isinstance(s, Assign) and isinstance(s.value, Call)
            and s.value.fn in NEW_ARRAYS}           # (a name also bound to another value is held elsewhere)
    return set(private) | (made - set(fn.params) - arrays_held_elsewhere(fn) - viewed_arrays(fn))


def _hoisted_for_later(fn, own, block, k):
    """The assignments of temporaries for the costly calls (`_costly`) that statement `k` of `block` and a
    later one both evaluate, nothing they read changed in between (`s` rewritten to read them): the
    adjoint of `x = sig * np.tanh(c)` reads `np.tanh(c)` in the statement for `sig` and in the one for
    `c`."""
    s = block[k]
    calls = {e for v in _values(s) for e in subexpressions(v)
             if isinstance(e, Call) and (_costly(e.fn) or _reduces_an_array(fn, e))}
    # (smallest first; one inside a call bound already is no longer in `s`)
    return [_bound(fn, s, e) for e in sorted(calls, key=_size)
            if _evaluates(s, e) and _read_later(fn, own, block, k, e)]


def _costly(name):
    """A function of numbers that costs a call of the maths library (on arrays, one per element: more than
    the temporary the statements then share), or a factorisation of a matrix (cubic in its size)."""
    return name.startswith(("math.", "np.linalg.")) or name in TRANSCENDENTAL or name in _FACTORISATIONS


def _reduces_an_array(fn, e):
    """A sum, extremum, mean or product of a named array: a pass over it for one number, which later
    statements may read again (the adjoint of `m[:, k] = a[k] + np.sum(q) - r` sums `d_t` for `d_a[k]` and
    for the cotangent of `np.sum(q)`)."""
    return e.fn in SCALAR_OF_ARRAY and len(e.args) == 1 and not e.keywords and isinstance(e.args[0], Name) \
        and isinstance(type_of(fn, e.args[0]), nt.Array)


def _read_later(fn, own, block, k, e):
    """Does a statement after `block[k]` evaluate `e` while nothing `e` reads has changed?"""
    known = _still_known(fn, own, block[k], {e: None})
    for later in block[k + 1:]:
        if not known:
            return False
        if isinstance(later, (Assign, Store, Accumulate)) and _evaluates(later, e):
            return True
        known = _still_known(fn, own, later, known)
    return False


def _evaluates(s, e):
    return any(x == e for v in _values(s) for x in subexpressions(v))


def _still_known(fn, private, s, known):
    """What `known` still holds after `s`: a name it binds, or an array of `private` it writes into (which
    shares memory with nothing; `sum_into(d_a, ...)` and `matmul_into(d_a, ...)` write their first argument
    only), drops what reads it; another write into memory drops all."""
    target = s.target.id if isinstance(s, Accumulate) and isinstance(s.target, Name) else None
    into = s.call.args[0] if isinstance(s, Effect) and s.call.fn in KEEPS_NOTHING and s.call.args else None
    if isinstance(s, Effect) and s.call.fn in INDEX_CHECKS:
        return known
    if isinstance(s, Assign):
        changed = s.target
    elif target is not None and (target in private or isinstance(fn.types.get(target), nt.Number)):
        changed = target
    elif written_array(s) in private:
        changed = written_array(s)
    elif isinstance(into, Name) and into.id in private:
        changed = into.id
    else:
        return {}
    return {e: n for e, n in known.items() if changed not in names_in(e) and n != changed}


def _hoisted(fn, s, fused=False):
    """The assignments of the temporaries `s` now reads, innermost first (`s` rewritten to read them);
    `fused`: `s` becomes a loop over elements."""
    made = []
    while True:
        repeated = [e for e in _repeated(_values(s)) if not (fused and is_mask_of_a_loop(fn, e))]
        if not repeated:
            return made
        made.append(_bound(fn, s, min(repeated, key=_size)))


def _bound(fn, s, e):
    """The assignment of `e` to a new temporary, `s` rewritten to read it."""
    name = fn.names.fresh(_name_of(e))
    _rewrite_values(s, lambda x: rebuild(x, lambda y: Name(name) if y == e else y))
    if isinstance(e, Call) and e.fn in SCALAR_OF_ARRAY and len(e.args) == 1 and not e.keywords:
        of = type_of(fn, e.args[0])
        if isinstance(of, nt.Array) and isinstance(of.dtype, nt.Float):
            fn.types[name] = of.dtype       # (read by `opt/elementwise.py`)
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
