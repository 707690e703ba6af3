"""Parallel loops (`numba.prange`) in reverse mode: when their forward and adjoint may run in parallel.

A parallel loop's iterations bind their own names and write elements no other
iteration touches, except sums (`s += v`) that Numba combines as reductions.
The reverse pass checkpoints such a loop (nothing is carried from one
iteration to the next, so nothing is saved per iteration): the forward runs
the loop as the primal does, in parallel, and each iteration of the adjoint
runs its iteration again (saving into stacks of its own, which the target
makes afresh in every iteration) and then reverses it. In that reversed
iteration:

* adjoints of the names the iteration binds start at zero in every iteration
  (nothing after the loop reads those names);
* the cotangent of a reduction (`d_s` of `s += v`) is only read: every
  iteration gets the same;
* an adjoint array written only at elements indexed by the loop index (in one
  axis, the same for every access) is written by one iteration per element;
* any other accumulation (into a shared parameter `d_w[k]`, through gathers
  `d_x[idx[i]]`, into a scalar read by every iteration) goes into a partial
  sum of the thread running the iteration (`numba.get_thread_id()`), and the
  partial sums are added up after the loop: no two threads add into the same
  memory.

Anything else (the adjoint writing a shared element otherwise than by adding
into it, a stack shared with code outside the loop) makes the adjoint loop run
serially, which is always correct.
"""
from dataclasses import replace

from numba.core import types as nt

from ..analysis.types import placeholder
from ..ir import (Accumulate, Assign, Attribute, BinOp, Call, Const, Effect, For, Name, Pop, Push, Reserve, Store,
                  Subscript, Tuple)
from ..ir.visit import (all_blocks, assigned, blocks, defines, names_in, own_exprs, reads,
                        subexpressions, walk, written_array)
from ..opt.cleanup import live_in

THREAD_ID, NUM_THREADS = "numba.get_thread_id", "srcad.thread_count"


def serial_where_unsafe(fn, atomic_sums=False):
    """Make every parallel loop of `fn` (generated code, just before the target prints it) serial
    unless running its iterations at once computes what running them in order does; returns `fn`.
    The forward of a loop the user wrote with prange can differ from the primal in ways Numba would
    not run in parallel: a stack pushed in it, an array reduction turned into stores (`acc += v`),
    a name bound in it and read after it (kept for the adjoint). Numba's own rules are then kept.
    `atomic_sums`: the target adds into shared places atomically (`Policy.shared_sums`), so an array
    the iterations only add into is no reason to run them in order."""
    loops = [s for s in walk(fn.body) if isinstance(s, For) and s.parallel]
    if loops:
        live_after = _live_after(fn)
        for loop in loops:
            loop.parallel = _independent(fn, loop, live_after[id(loop)], atomic_sums)
    return fn


def _live_after(fn):
    """{id(statement): the names live just after it} over the whole of `fn`."""
    marks = {}
    live_in(fn.body, {n for o in fn.outputs for n in names_in(o)}, marks)
    return marks


def _independent(fn, loop, live_after, atomic_sums):
    """Do the iterations of parallel `loop` share only scalar reductions, stacks of their own and
    elements indexed by the loop index (or by the thread running them: partial sums)?"""
    body = loop.body
    exposed = live_in(body, set())
    bound = assigned(body)
    reductions = bound & exposed
    if ((bound - reductions) | {loop.var}) & live_after:
        return False
    if not all(_is_reduction(fn, t, reductions) for t in walk(body) if defines(t) & reductions):
        return False
    inside = {id(t) for t in walk(body)}
    stacks = {t.stack for t in walk(body) if isinstance(t, (Push, Pop, Reserve))}
    elsewhere = {t.stack for t in walk(fn.body) if isinstance(t, (Push, Pop, Reserve)) and id(t) not in inside}
    if stacks & (elsewhere | live_after):
        return False
    if loop.phase:
        return True             # (its threads touch elements no other thread of the phase does: CUDA's rules)
    threads = {t.target for t in body if isinstance(t, Assign) and t.value == Call(THREAD_ID)}
    written = {written_array(t) for t in walk(body)} - {None}
    return all(a in bound and a not in exposed or disjoint(body, a, loop.var, width(fn, loop))
               or any(disjoint(body, a, v) for v in threads)
               or atomic_sums and _only_added_into(body, a) for a in written)


def _is_reduction(fn, t, reductions):
    """Is `t`, binding a reduction, `s = s op e` / `s += e` on a scalar, `e` not reading another one?"""
    if isinstance(fn.types.get(next(iter(defines(t)))), nt.Array):
        return False
    if isinstance(t, Accumulate):
        return not names_in(t.value) & reductions
    if not isinstance(t, Assign) or not isinstance(t.value, BinOp) or t.value.op not in ("+", "-", "*"):
        return False
    me, v = Name(t.target), t.value
    other = v.right if v.left == me else v.left if v.right == me and v.op != "-" else None
    return other is not None and not names_in(other) & reductions


def reversed_in_parallel(fn, local, loop, rerun, back, own_stacks, shared_sums="partials"):
    """The adjoint of checkpointed parallel `loop` as statements running its iterations in parallel
    (`rerun`: one iteration computed again, `back`: its reverse), or None where it must run serially.
    `local` is the reverse pass's LocalAdjoints (adjoint names and their initial values); `own_stacks`
    the stacks the re-run iteration saves into (made afresh in each iteration by the target).
    `shared_sums` is the policy's (`saving.Policy`): with "atomic" the accumulations into shared places
    stay as they are, for the target to print as atomic adds."""
    own = assigned(loop.body) - live_in(loop.body, set())      # bound before read in every iteration
    if not loop.parallel or loop.var in assigned(loop.body) or (own | {loop.var}) & _live_after(fn)[id(loop)]:
        return None                # (the adjoints of names read after the loop do not start at zero)
    starts = [local.initial(v) for v in sorted(own) if v in local.d]
    body = rerun + starts + back
    shared = _shared_sums(fn, loop, body, own_stacks, trusted=loop.phase and shared_sums == "atomic")
    if shared is None:
        return None
    before, after = [], []
    if shared and shared_sums == "partials":
        thread = fn.names.fresh("thread")
        fn.types[thread] = nt.intp
        parts = {}
        primal = {d: v for v, d in local.d.items()}
        for a in sorted(shared):
            part = fn.names.fresh(f"{a}_part")
            ndim = getattr(fn.types[primal.get(a, a)], "ndim", 0)
            fn.types[part] = nt.Array(nt.float64, ndim + 1, "C")
            shape = tuple(Subscript(Attribute(Name(a), "shape"), (Const(k),)) for k in range(ndim))
            before.append(Assign(part, Call("np.zeros", (Tuple((Call(NUM_THREADS),) + shape),)), loop.origin))
            slot = fn.names.fresh("slot")           # a loop over the partial sums, not np.sum(part, axis=0):
            fn.types[slot] = nt.intp                # its adjoint needs no broadcast Numba's parfors would check
            add = Accumulate(Name(a), Subscript(Name(part), (Name(slot),)), origin=loop.origin)
            after.append(For(slot, Const(0), Subscript(Attribute(Name(part), "shape"), (Const(0),)), Const(1), [add],
                             loop.origin))
            parts[a] = part
        for block in all_blocks(body):       # new statements: those of `back` are the memoized adjoints
            block[:] = [replace(t, target=_into_part(t.target, parts, thread)) if isinstance(t, Accumulate) else t
                        for t in block]
        body = [Assign(thread, Call(THREAD_ID), loop.origin)] + body
    return before + [For(loop.var, loop.start, loop.stop, loop.step, body, loop.origin, True, loop.phase)] + after


def _shared_sums(fn, loop, body, own_stacks, trusted=False):
    """Names (scalars or arrays) that several iterations of `body` add into, each to be summed per
    thread; None when an iteration writes shared memory otherwise than by adding into it, unless the
    loop is `trusted`: a phase between barriers whose target adds atomically, where CUDA's rules make
    every element that one thread writes its own in the primal, and so in the adjoint (only elements
    the primal reads are added into by several threads)."""
    exposed = live_in(body, set())
    if any(isinstance(t, (Push, Pop, Reserve)) and t.stack not in own_stacks for t in walk(body)):
        return None
    shared = set()
    for t in walk(body):
        names = defines(t) & exposed
        if names:                                  # an exposed name bound: only `v += e` may do it
            if not (isinstance(t, Accumulate) and not (names_in(t.value) & names)):
                return None
            shared |= names
    written = {written_array(t) for t in walk(body)} - {None}
    for a in written & exposed:                    # arrays of the code around the loop
        if disjoint(body, a, loop.var, width(fn, loop)):
            continue
        if all(isinstance(t, Accumulate) for t in walk(body) if written_array(t) == a):
            shared.add(a)
        elif not trusted:
            return None
    return shared if all(_only_added_into(body, a) for a in shared) else None


def _only_added_into(body, a):
    """Is `a` only the target of accumulations in `body`, never read?"""
    for t in walk(body):
        if isinstance(t, Accumulate):
            index = t.target.index if isinstance(t.target, Subscript) else ()
            if a in names_in(t.value) or any(a in names_in(i) for i in index):
                return False
        elif a in reads(t) and not isinstance(t, Effect):      # (an index check reads the shape alone)
            return False
    return True


def width(fn, loop):
    """How many iterations `loop` of `fn` runs, as an expression of names `fn` never binds, when it
    counts from 0 by 1 (else None): a loop inside an iteration `for i in range(var, n, width)` visits
    that iteration's own indices alone."""
    if loop.start != Const(0) or loop.step != Const(1):
        return None
    stop = loop.stop
    if isinstance(stop, Name):
        values = [t.value if isinstance(t, Assign) else None for t in walk(fn.body) if stop.id in defines(t)]
        if values:
            stop = values[0] if all(v is not None and v == values[0] for v in values) else None
    fixed = stop is not None and not any(names_in(stop) & defines(t) for t in walk(fn.body))
    return stop if fixed else None


def disjoint(body, a, var, count=None):
    """Is every use of array `a` in `body` an element or a region indexed by the loop index `var`,
    in the same axis (so that two iterations never touch the same element)? A name bound once in
    `body` to the loop index (`i = t`, a kernel's `i = cuda.grid(1)`) is the loop index too, and so is
    the index of a loop striding from it by the `count` of iterations (a grid-stride loop)."""
    place = own_places(body, var, count)
    axes = set()
    for t in walk(body):
        if isinstance(t, Effect):
            continue                    # an index check reads shapes only
        exprs = list(own_exprs(t))
        if isinstance(t, Store) and t.array == a:
            exprs.append(Subscript(Name(a), t.index))
        for e in exprs:
            for x in subexpressions(e):
                if isinstance(x, Subscript) and x.base == Name(a):
                    axes.add(place(x.index))
                elif x == Name(a) and not _under_subscript_or_shape(e, a):
                    return False
    return len(axes) == 1 and None not in axes


def own_places(body, var, count=None):
    """A function telling where an index tuple holds the iteration's own coordinates (None if it
    does not): `("axis", k)` where axis k holds the loop index `var` (or a name `body` binds only to a
    copy of it, or to the index of a loop `range(own, n, count)` of `count` the number of iterations),
    `("pair", p, q)` where axes p and q hold `var % w` and `var // w` for one `w` the same in every
    iteration (a two-dimensional grid: `x, y = cuda.grid(2)`)."""
    values, binders = {}, {}
    for t in walk(body):
        for n in defines(t):
            values.setdefault(n, set()).add(t.value if isinstance(t, Assign) else None)
            binders.setdefault(n, []).append(t)
    bound = set(values)

    def invariant(w):
        """`w` as an expression of names the same in every iteration (a name bound once to one
        is that expression), or None."""
        if isinstance(w, Name) and w.id in values:
            vs = values[w.id]
            w = next(iter(vs)) if len(vs) == 1 else None
        return w if w is not None and not names_in(w) & bound else None

    def is_count(e):
        return count is not None and invariant(e) == count

    def copies_own(t, own):
        """Does `t` bind its name to the iteration's own index: a copy of one, or the index of a loop
        striding by the `count` of iterations from one (`range(own, n, count)`), or back to it (the
        reverse pass's `range(own + m * count, own - count, -count)`)?"""
        if isinstance(t, Assign):
            return isinstance(t.value, Name) and t.value.id in own
        if not isinstance(t, For):
            return False
        if isinstance(t.start, Name) and t.start.id in own:
            return is_count(t.step)
        up = t.start
        return isinstance(up, BinOp) and up.op == "+" and isinstance(up.left, Name) and up.left.id in own \
            and isinstance(up.right, BinOp) and up.right.op == "*" and is_count(up.right.right) \
            and t.step == BinOp("-", Const(0), up.right.right) and t.stop == BinOp("-", up.left, up.right.right)
    own, grew = {var}, True
    while grew:
        more = {n for n, ts in binders.items() if n not in own and all(copies_own(t, own) for t in ts)}
        own |= more
        grew = bool(more)

    def split(op):
        """{name: w} of the names bound only to `own <op> w`, w the same in every iteration."""
        out = {}
        for n, vs in values.items():
            if len(vs) == 1 and isinstance(v := next(iter(vs)), BinOp) and v.op == op \
                    and isinstance(v.left, Name) and v.left.id in own and invariant(v.right) is not None:
                out[n] = invariant(v.right)
        return out
    mods, divs = split("%"), split("//")

    def place(index):
        names = [i.id if isinstance(i, Name) else None for i in index]
        for k, n in enumerate(names):
            if n in own:
                return ("axis", k)
        for p, m in enumerate(names):
            for q, d in enumerate(names):
                if m in mods and d in divs and mods[m] == divs[d]:
                    return ("pair", p, q)
        return None
    return place


def _under_subscript_or_shape(e, a):
    """Is every occurrence of Name(a) in `e` the base of a subscript or of `.shape`?"""
    bare = sum(1 for x in subexpressions(e) if x == Name(a))
    based = sum(1 for x in subexpressions(e) if isinstance(x, (Subscript, Attribute)) and x.base == Name(a))
    return bare == based


def _into_part(target, parts, thread):
    """An accumulation's target moved into the thread's partial sum."""
    if isinstance(target, Name) and target.id in parts:
        return Subscript(Name(parts[target.id]), (Name(thread),))
    if isinstance(target, Subscript) and isinstance(target.base, Name) and target.base.id in parts:
        return Subscript(Name(parts[target.base.id]), (Name(thread),) + target.index)
    return target


def sums(loop):
    """The reductions of a parallel loop: names its iterations read before binding them (`s += v`)."""
    return assigned(loop.body) & live_in(loop.body, set())


def carries_only_sums(loop, adjoint_reads):
    """Can parallel `loop` be checkpointed with nothing saved per iteration? Its iterations share only
    reductions (a name read before it is bound in an iteration is one: Numba's model), so that is
    when no adjoint reads a reduction. (The save analysis may still find other names carried from one
    iteration to the next, along paths where an inner loop runs no iteration: the reverse sweep runs
    none of it there either.)"""
    return not sums(loop) & adjoint_reads


def rerun_alone(fn, loop, rerun, back):
    """The re-run of an iteration of parallel `loop` (checkpointed by `carries_only_sums`) standing
    alone: without the updates of its reductions (nothing in the reversed iteration reads them), and
    with the names it reads only along paths that run nothing (an inner loop of no iteration) bound to
    placeholders first, so that each iteration binds all it reads."""
    found = sums(loop)
    rerun = _without(rerun, found)
    unbound = (live_in(rerun + back, set()) & assigned(loop.body)) - found - {loop.var}
    return [Assign(v, placeholder(fn.types[v]), loop.origin) for v in sorted(unbound)] + rerun


def _without(stmts, names):
    """`stmts` without the assignments and accumulations into `names` (nested blocks rewritten in place)."""
    out = []
    for t in stmts:
        if isinstance(t, (Assign, Accumulate)) and defines(t) & names:
            continue
        for b in blocks(t):
            b[:] = _without(b, names)
        out.append(t)
    return out
