"""The adjoint with plain products, compiled beside the guarded one and run first.

Zero-cotangent guards (`if d_v != 0.0:`, `LocalAdjoints.unless_zero`) and `srcad.cotangent_times`
keep a cotangent that is exactly 0 from sending 0 * inf back. Where nothing is zero they only cost: a
test per statement and two per product, and a loop body that branches does not vectorise. In GMM's
triangular loops they made the adjoint a third longer; `opt/zero_guards.py` removes them from
stretches that write scalars only, not from statements that add into arrays.

So the compiled code also holds the adjoint without any guard, its products plain
(`<name>_adjoint_plain`), and `compiled.Transformed.adjoint` runs that one first. The two differ only
where a zero meets an inf or a nan: the plain one makes a nan there, where the guarded one makes 0.
The adjoint is linear in its cotangents (sums, products by partials, copies), and +, - and * carry a
nan into every gradient it reaches. So where no gradient holds a nan, the plain result is the guarded
one (up to the sign of a zero); where one does, the guarded adjoint runs (compiled then, on first
need) and its result is returned.

One kind of guard stays, out of its loop: a loop whose whole body is one guard on a cotangent the
loop does not change (`for col: if d_s != 0.0: d_Q[...] += ...; d_means[...] -= ...`) runs under that
guard instead (`if d_s != 0.0: for col: ...`). Where most such cotangents are exactly 0 (components
of a mixture whose weight `exp` rounds to 0, as in GMM at d64) the guarded adjoint skipped the loop's
work, and the plain one would do it all: unswitched, it skips it too, at one test per loop.

Not made where that reasoning fails: an adjoint that restores the forward's buffers in place (it may
run once per forward), or that runs a custom VJP's `bwd` (the user's code may turn a nan into a number).
"""
from dataclasses import replace

from ..ir import Assign, Compare, Const, For, If, Name
from ..ir.facts import Reverse
from ..ir.visit import blocks, called, defines, walk
from .zero_guards import unguarded


def plain_adjoint(primal, adjoint, copy_function):
    """A copy of the adjoint IR `adjoint` of `primal` without zero-cotangent guards, its `cotangent_times`
    plain products, named `<name>_plain`; None where it would be the same code or could differ from
    `adjoint` by more than a nan (see the module). `copy_function`: the pipeline's copy of a Function."""
    facts = adjoint.facts.of(Reverse)
    if facts.once_per_forward or not ("srcad.cotangent_times" in called(adjoint.body) or facts.guards):
        return None
    if "srcad.rule_vjp" in called(primal.body):         # a call through a custom VJP (`LocalAdjoints._rule_vjp`)
        return None
    plain = copy_function(adjoint)
    plain.name = f"{adjoint.name}_plain"
    kept = set()
    plain.body = _unswitched(plain.body, facts.guards, kept)
    plain.body = unguarded(plain.body, facts.guards - kept)
    return plain


def _unswitched(stmts, guards, kept):
    """`stmts` with each loop whose body is one guard on a cotangent it does not change run under that
    guard instead; the flags of those guards are added to `kept`."""
    out = []
    for s in stmts:
        for block in blocks(s):
            block[:] = _unswitched(block, guards, kept)
        flag = _invariant_guard(s, guards)
        if flag is None:
            out.append(s)
            continue
        test, guarded = s.body
        kept.add(flag)
        out += [test, If(Name(flag), [replace(s, body=guarded.body)], [], guarded.origin)]
    return out


def _invariant_guard(s, guards):
    """The flag of the guard that is the whole body of loop `s`, where the loop leaves its cotangent as it
    is; else None."""
    if not isinstance(s, For) or s.parallel or len(s.body) != 2:
        return None
    test, guarded = s.body
    if not (isinstance(test, Assign) and test.target in guards and isinstance(guarded, If)
            and guarded.cond == Name(test.target) and not guarded.orelse):
        return None
    cotangent = test.value.left if isinstance(test.value, Compare) and test.value.right == Const(0.0) else None
    if not isinstance(cotangent, Name) or any(cotangent.id in defines(t) for t in walk(s.body)):
        return None
    return test.target
