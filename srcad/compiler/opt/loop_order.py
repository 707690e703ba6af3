"""Reversed loops whose iterations touch nothing in common run in ascending order.

The reverse sweep runs every loop backwards, `for j in range(n - 1, -1, -1)`,
because in general an iteration's adjoint needs what the later iterations left.
Where nothing passes from one iteration to another, the order is free, and a
descending loop costs: Numba and LLVM vectorise and prefetch the ascending one
better (the inner reverse loop of a triangular matrix-vector product,

    for col in range(row + 1 - 1, -1, -1):
        d_Q[k, row, col] += d_s * (x[i, col] - means[k, col])
        d_means[k, col] -= d_s * Q[k, row, col]

descending, made the whole gradient of ADBench GMM at d10 1.37x slower). Such a
loop becomes `for col in range(row + 1)`. Its iterations are independent when:

* it restores nothing (no Push, Pop, Reserve, While) and calls only functions
  that write nothing (`math.*`, NumPy's elementwise functions, srcad's pure
  helpers);
* every name its body binds is bound before it is read in each iteration and
  is not read after the loop (no scalar passes on: `d_s += ...` across
  iterations keeps its order);
* every array it writes is one of the adjoint's own (no other name shares its
  memory), and every use of it in the body is at the iteration's own elements
  (indexed by the loop index in one axis: `ad/parallel.disjoint`).

Then each element of memory is read and written by one iteration only, in the
same order within it: the results are bitwise those of the descending loop.
"""
from ..ad.parallel import disjoint
from ..ad.reverse import reversed_loop
from ..ad.rules import ELEMENTWISE
from ..ir import Call, Const, For, Pop, Push, Reserve, While
from ..ir.facts import Reverse
from ..ir.visit import assigned, names_in, own_exprs, subexpressions, walk, written_array
from .cleanup import live_in
from .first_writes import viewed_arrays

_PURE_HELPERS = frozenset({"srcad.cotangent_times", "srcad.trip_count", "srcad.reciprocal_or_zero",
                           "srcad.log_or_zero", "srcad.finite_or_zero", "srcad.power_slope",
                           "srcad.check_index", "srcad.check_loop_index", "abs", "min", "max", "float", "int"})


def ascend_independent_loops(fn):
    """Rewrite, in place, the descending loops of adjoint `fn` whose iterations are independent (see the
    module) into ascending ones. Returns `fn`."""
    loops = [s for s in walk(fn.body) if isinstance(s, For) and s.step == Const(-1) and not s.parallel]
    if not loops:
        return fn
    live_after = {}
    live_in(fn.body, set().union(*(names_in(o) for o in fn.outputs)), live_after)
    own = (fn.facts.of(Reverse).adjoints if fn.facts.has(Reverse) else set()) - viewed_arrays(fn)
    for loop in loops:
        if _independent(loop, live_after[id(loop)], own):
            ascending = reversed_loop(loop, loop.body)
            loop.start, loop.stop, loop.step = ascending.start, ascending.stop, ascending.step
    return fn


def _independent(loop, live_after, own):
    body = loop.body
    for s in walk(body):
        if isinstance(s, (Push, Pop, Reserve, While)) or not all(_writes_nothing(e) for e in own_exprs(s)):
            return False
    bound = assigned(body)
    if bound & live_in(body, set()) or (bound | {loop.var}) & set(live_after):
        return False
    written = {a for s in walk(body) if (a := written_array(s)) is not None}
    return all(a in own and a not in bound and disjoint(body, a, loop.var) for a in written)


def _writes_nothing(e):
    return all(not isinstance(x, Call) or (x.fn in _PURE_HELPERS or x.fn.startswith("math.") or x.fn in ELEMENTWISE)
               and x.keyword("out") is None for x in subexpressions(e))

