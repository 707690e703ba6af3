"""Clean-ups on IR: what generated code computes and nobody reads goes.

* `coalesce_copies`: `t = e; k = t` with `t` a temporary read once becomes
  `k = e` (an inlined helper's results bound to the caller's names).
* `fold_constants`: operators on constants are computed.
* `first_accumulations`: `d = 0.0` then `d += e` becomes `d = e`.
* `drop_round_trips`: `g = a[i]; a[i] = 0.0; a[i] += g` keeps only `g = a[i]`.
* `eliminate_dead_code`: assignments whose value is never read (liveness over
  the structured IR, loops to a fixed point), scalars read only by their own
  updates (`sq += s * s` and nothing else reads `sq`), and stacks whose
  restored values are never read, with all their saves.
* `drop_unread_saved`: entries of `saved` the adjoint never reads leave both
  functions (the forward then stops computing what only they needed).

Stores into arrays stay, but for the adjoint's own arrays (which share memory with nothing): an array
may be a view of another.
"""
from numba.core import types as nt

from ..front.lower import folded
from ..ir import (Accumulate, Assign, BinOp, Compare, Const, For, If, Name, Pop, Push, Reserve, Store, Subscript, Tuple,
                  UnaryOp, While)
from ..ir.facts import Aliasing, Reverse
from ..ir.visit import all_blocks, map_exprs, names_in, rebuild, reads, walk, written_array


# ---- liveness -----------------------------------------------------------------------------------

def statement_reads(s):
    """Names `s` itself reads (a Pop reads its stack; an Accumulate reads what it adds to)."""
    out = set(reads(s))
    if isinstance(s, (Push, Pop, Reserve)):
        out.add(s.stack)
    if isinstance(s, Accumulate):
        out |= names_in(s.target)
    return out


def _kill(s):
    if isinstance(s, Assign):
        return {s.target}
    if isinstance(s, Pop) and isinstance(s.target, Name):
        return {s.target.id}
    return set()


def _changes(s):
    """Names whose value `s` changes: those it binds, and those it adds to."""
    if isinstance(s, Accumulate) and isinstance(s.target, Name):
        return {s.target.id}
    return _kill(s)


def live_in(stmts, live_out, marks=None, gen=statement_reads, kill=_kill, own=None):
    """Names `stmts` read before binding them, given the names live after them. With `marks` (a dict),
    record for each statement the names live just after it. `gen(s)`: the names `s` itself reads (None:
    take `s` as absent), for the liveness of code to be made from `stmts`; `kill(s)`: those whose value
    it replaces whole. `own`: {id of a parallel loop: arrays each iteration of it touches only at its own
    elements}: what one iteration writes there no other iteration reads."""
    live = set(live_out)
    for s in reversed(stmts):
        live = _live_before(s, live, marks, gen, kill, own)
    return live


def _live_before(s, live, marks, gen, kill, own=None):
    if marks is not None:
        marks[id(s)] = frozenset(live)
    reads_here = gen(s)
    if reads_here is None:
        return live
    if isinstance(s, If):
        return live_in(s.body, live, marks, gen, kill, own) | live_in(s.orelse, live, marks, gen, kill, own) | \
            reads_here
    if isinstance(s, For):
        mine = (own or {}).get(id(s), frozenset())     # (the next iteration reads none of it: only the code after)
        head = set(live)
        while True:
            after_body = (head - mine) | (set(live) & mine)
            new = set(live) | (live_in(s.body, after_body, marks, gen, kill, own) - {s.var})
            if new <= head:
                break
            head |= new
        return head | reads_here
    if isinstance(s, While):
        head = set(live) | {s.cond} | (names_in(s.bound) if s.bound is not None else set())
        while True:
            new = head | live_in(s.body, head, marks, gen, kill, own)
            if new <= head:
                break
            head = new
        return head
    return (live - kill(s)) | reads_here


# ---- dead code ----------------------------------------------------------------------------------

def eliminate_dead_code(fn, live_out=None):
    """Remove, in place, assignments nobody reads, stacks whose restores nobody reads, and writes into
    the adjoint's own arrays nobody reads (no other name can share their memory)."""
    outputs = set().union(*(names_in(o) for o in fn.outputs)) if live_out is None else set(live_out)
    # an adjoint's own arrays (those of a function reverse mode made) share memory with nothing
    private = fn.facts.of(Reverse).adjoints if fn.facts.has(Reverse) else set()
    sharing = fn.facts.of(Aliasing).may if private else {}
    own = _iterations_own(fn, private)          # (removing statements only ever adds to it: found once)
    while True:
        marks = {}
        live_in(fn.body, outputs, marks, own=own)
        dead_stacks = _dead_stacks(fn, marks, sharing)
        faint = _faint(fn, outputs)
        changed = False
        for block in all_blocks(fn.body):
            kept = [s for s in block if not _dead(s, marks, dead_stacks, private) and not
                    (isinstance(s, (Assign, Accumulate)) and _changes(s) & faint)]
            kept = [s for s in kept if not (isinstance(s, (For, While, If)) and _empty(s))]
            if len(kept) != len(block):
                block[:] = kept
                changed = True
        for stack in dead_stacks:
            fn.stacks.pop(stack, None)
        if not changed:
            return fn


def _faint(fn, keep):
    """Scalars whose every read is in a statement that binds or adds into that same name: a sum that
    only adds to itself (`sq += s * s` in an iteration run again in the adjoint, for a value only the
    primal needed). Liveness keeps them (each iteration reads the last one's); nothing else reads them."""
    bound, read = set(), set(keep)
    for s in walk(fn.body):
        changed = _changes(s) if isinstance(s, (Assign, Accumulate)) else set()
        bound |= changed
        read |= statement_reads(s) - changed
    return {v for v in bound - read if isinstance(fn.types.get(v), (nt.Number, nt.Boolean))}


def _iterations_own(fn, private):
    """{id of a parallel loop: the adjoint's own arrays (`private`) it writes that each of its iterations
    touches only at elements of its own}: the zeroing of an output's cotangent after its one read,
    `d_out[i] = 0.0`, is then dead when nothing after the loop reads `d_out`. (Not yet in the phases of
    a kernel with barriers: the second derivative of the smoothing kernel of tests/cuda/test_barriers.py
    then restores regions in a loop that reads indices it does not bind, a fault of the reverse pass
    this would expose.)"""
    from ..ad.parallel import disjoint, width
    found = {}
    for loop in walk(fn.body):
        if isinstance(loop, For) and loop.parallel and not loop.phase:
            written = {written_array(t) for t in walk(loop.body)} & set(private)
            found[id(loop)] = frozenset(a for a in written if disjoint(loop.body, a, loop.var, width(fn, loop)))
    return found


def _dead(s, marks, dead_stacks, private):
    after = marks.get(id(s), frozenset())
    if isinstance(s, Assign):
        return s.target not in after
    if isinstance(s, Accumulate) and isinstance(s.target, Name):
        return s.target.id not in after
    array = written_array(s)
    if array in private and not isinstance(s, Pop):
        return array not in after
    if isinstance(s, (Push, Pop, Reserve)):
        return s.stack in dead_stacks
    return False


def _empty(s):
    if isinstance(s, If):
        return not s.body and not s.orelse
    return not s.body


def _dead_stacks(fn, marks, sharing):
    """Stacks of `fn` that `fn` does not hand on and whose every pop restores a value nobody reads
    afterwards (under any name sharing its memory): their pushes and pops can all go."""
    handed_on = set().union(*(names_in(o) for o in fn.outputs))
    used = set()
    referenced = set()
    for s in walk(fn.body):
        if isinstance(s, (Push, Pop, Reserve)):
            referenced.add(s.stack)
        if isinstance(s, Pop):
            target = s.target.id if isinstance(s.target, Name) else s.target.base.id
            names = {target} if isinstance(s.target, Name) else sharing.get(target, {target})
            if names & marks.get(id(s), frozenset()):
                used.add(s.stack)
    return (set(fn.stacks) | referenced) - handed_on - used


# ---- saved entries ------------------------------------------------------------------------------

def drop_unread_saved(forward, adjoint):
    """Remove from both functions the entries of `saved` the adjoint never reads; returns the
    names of the entries left."""
    saved = adjoint.facts.of(Reverse).saved
    read = live_in(adjoint.body, set().union(*(names_in(o) for o in adjoint.outputs)))
    stacks = adjoint.facts.of(Reverse).forward_stacks
    beside = {n: name for name, s in stacks.items() for n in (s.top, s.objects) if n}    # handed on with it
    keep = [n for n in saved if n in read or (n in beside and beside[n] in read)]
    adjoint.params = [p for p in adjoint.params if p not in saved or p in keep]
    forward.outputs[1] = Tuple(tuple(Name(n) for n in keep))
    for name in set(stacks) - set(keep):
        forward.stacks.pop(name, None)
        adjoint.stacks.pop(name, None)
    forward.workspace = [w for w in forward.workspace if w in keep]
    forward.params = [p for p in forward.params if p not in stacks or p in keep]
    forward.facts.of(Reverse).saved = adjoint.facts.of(Reverse).saved = keep
    eliminate_dead_code(forward, set().union(*(names_in(o) for o in forward.outputs)) | set(forward.stacks))
    return keep


# ---- copies and constants -----------------------------------------------------------------------

def coalesce_copies(fn):
    """`t = e ... k = t` with `t` a compiler temporary read only there, `k` neither read nor bound in
    between: bind `k = e` directly."""
    uses = {}
    for s in walk(fn.body):
        for n in reads(s):
            uses[n] = uses.get(n, 0) + 1
    for n in set().union(*(names_in(o) for o in fn.outputs)):
        uses[n] = uses.get(n, 0) + 1
    defs = {}
    for s in walk(fn.body):
        if isinstance(s, Assign):
            defs[s.target] = defs.get(s.target, 0) + 1

    def coalesce(block, k):
        s = block[k]
        temp = s.value.id
        if temp not in fn.names.made or uses.get(temp) != 1 or defs.get(temp) != 1 or s.inplace:
            return False
        j = _binding_before(block, k, temp, lambda u: s.target in reads(u) or s.target in _changes(u))
        if j is None or s.target in names_in(block[j].value):
            return False
        block[j].target = s.target
        del block[k]
        return True
    _each_copy(fn, coalesce)
    return fn


def _each_copy(fn, rewrite):
    """Offer every copy `a = b` of `fn` to `rewrite(block, k)`, which returns True when it removed it."""
    for block in all_blocks(fn.body):
        k = 0
        while k < len(block):
            s = block[k]
            if not (isinstance(s, Assign) and isinstance(s.value, Name) and rewrite(block, k)):
                k += 1


def _binding_before(block, k, name, stops):
    """Index of the last `name = ...` before `block[k]`, unless a statement in between `stops`."""
    for j in range(k - 1, -1, -1):
        t = block[j]
        if isinstance(t, Assign) and t.target == name:
            return j
        if any(stops(u) for u in walk([t])):
            return None
    return None


def fold_constants(fn):
    """Operators on constants computed, in place."""
    def fold(e):
        return folded(e) if isinstance(e, (BinOp, UnaryOp, Compare)) else e
    for s in walk(fn.body):
        map_exprs(s, lambda e: rebuild(e, fold))
    return fn


def first_accumulations(fn):
    """`d += e` where `d` is known to be zero becomes `d = e`: the adjoint of a value's first use is a
    copy, not an addition. Zero is known along every path (a must-analysis over the structured IR,
    loops to a fixed point), so an adjoint zeroed at the end of each iteration is written, not added
    to, at the top of the next; the zeroing and the initial zero then go as dead code."""
    scalars = {n for n, t in fn.types.items() if not hasattr(t, "ndim")}
    zeros_through(fn.body, frozenset(), _ScalarZeros(scalars), rewrite=True)
    return fn


class _ScalarZeros:
    """What `zeros_through` needs to know of scalars: `d = 0.0` zeroes `d`, `d += e` first becomes `d = e`."""

    def __init__(self, scalars):
        self.scalars = scalars

    def written(self, s, zero):
        if isinstance(s, Accumulate) and isinstance(s.target, Name) and s.target.id in zero and not s.reduce \
                and s.target.id not in names_in(s.value):
            return Assign(s.target.id, s.value, s.origin)
        return None

    def changed(self, s):
        return _kill(s) | (names_in(s.target) if isinstance(s, Accumulate) else set())

    def made_zero(self, s):
        if isinstance(s, Assign) and s.target in self.scalars and s.value in (Const(0.0), Const(0)) \
                and s.value.value is not False:
            return s.target
        return None


def zeros_through(stmts, zero, rules, rewrite):
    """The names known to be zero after `stmts`, given those before (`rules` says which statements
    zero a name, change it, and how a first accumulation is written); with `rewrite`, rewrite in place."""
    for k, s in enumerate(stmts):
        if isinstance(s, If):
            zero = zeros_through(s.body, zero, rules, rewrite) & zeros_through(s.orelse, zero, rules, rewrite)
        elif isinstance(s, (For, While)):
            head = zero
            while True:
                after = zeros_through(s.body, head, rules, False)
                new = head & after
                if new == head:
                    break
                head = new
            zeros_through(s.body, head, rules, rewrite)
            zero = head - ({s.var} if isinstance(s, For) else set())
        else:
            written = rules.written(s, zero) if rewrite else None
            if written is not None:
                stmts[k] = s = written
            zero = zero - rules.changed(s)
            made = rules.made_zero(s)
            if made is not None:
                zero = zero | {made}
    return zero


def drop_restores_of_unchanged(fn):
    """`k = v ... v = k` with neither changed in between (a save around code that is gone): the
    restore goes, and the save with it when nothing else reads `k`."""
    def restore(block, k):
        v, keep = block[k].target, block[k].value.id
        j = _binding_before(block, k, keep, lambda u: v in _changes(u) or keep in _changes(u))
        if j is None or block[j].value != Name(v):
            return False
        del block[k]
        return True
    _each_copy(fn, restore)
    return fn


def drop_round_trips(fn):
    """`g = a[i]; a[i] = 0.0; a[i] += g` leaves `a[i]` as it was (the adjoint of `a[i] = a[i] + e`, an
    update in place): the last two go, a store and a reload fewer in what is often an inner loop."""
    for block in all_blocks(fn.body):
        k = 0
        while k + 2 < len(block):
            take, zero, back = block[k:k + 3]
            if isinstance(take, Assign) and isinstance(take.value, Subscript) and \
                    not hasattr(fn.types.get(take.target), "ndim") and \
                    isinstance(zero, Store) and Subscript(Name(zero.array), zero.index) == take.value and \
                    zero.value == Const(0.0) and isinstance(back, Accumulate) and not back.reduce and \
                    back.target == take.value and back.value == Name(take.target):
                del block[k + 1:k + 3]
            k += 1
    return fn


def simplify(fn):
    """`a + -b` is `a - b`, `--a` is `a`: as a person would write the generated formulas."""
    def tidy(e):
        if isinstance(e, BinOp) and e.op == "+" and isinstance(e.right, UnaryOp) and e.right.op == "-":
            return BinOp("-", e.left, e.right.operand)
        if isinstance(e, UnaryOp) and e.op == "-" and isinstance(e.operand, UnaryOp) and e.operand.op == "-":
            return e.operand.operand
        return e
    for s in walk(fn.body):
        map_exprs(s, lambda e: rebuild(e, tidy))
    return fn
