"""Saving, as a policy: which values the reverse sweep needs, and how each is kept.

The reverse sweep runs the statements backwards, and each adjoint reads the
values its statement read (`LocalAdjoints.reads`). A value overwritten later
in the forward must then be brought back. For each overwrite the forward
either does nothing (no adjoint reads the old value: the *to-be-recorded*
analysis, `required_before`), or brings the value back by the cheapest means
that is exact:

* **undo**: `k = k + c` on integers is reversed by `k = k - c`;
* **replay**: an integer or boolean temporary computed from loop indices and
  values that never change (`idx = i * d + j`, `odd = i % 2 == 1`) is
  computed again at the top of each reversed iteration instead of saved;
* **checkpoint**: a loop whose iterations only rewrite scratch arrays and
  write arrays they do not read saves, per iteration, only the scalars the
  iteration starts from; the reverse sweep runs each iteration again from
  them and reverses it (chosen when that saves fewer values than taping);
* **save**: otherwise the old value is kept, in a *local* where the statement
  runs at most once per run of the code around it, else on a *stack* (room
  reserved before the outermost loop whose pushes can be counted; pushes in
  a while loop check for room, growing by doubling, which only the CPU target
  allows: `Policy`). `save_sizes` counts what each stack receives, before the
  call, for a target whose storage cannot grow.
"""
from dataclasses import dataclass, field

from numba.core import types as nt

from ..analysis.types import index_array
from ..errors import SUBSET_DOC, TransformError
from ..ir import (Accumulate, Assign, Attribute, BinOp, Call, Const, Effect, For, If, Name, Pop, Push, Reserve, Slice,
                  Store, Subscript, Tuple, UnaryOp, While)
from ..ir.facts import Aliasing
from ..ir.visit import (assigned, blocks, defines, names_in, own_exprs, reads, rewrite_top_down, subexpressions, substitute, walk,
                        written_array)
from .local import value_names
from .parallel import sums
from .rules import ELEMENTWISE, JOINS


@dataclass(frozen=True)
class Policy:
    """Where a target may keep saved values. `growable`: stacks may grow while the code runs (CPU:
    room is reserved once before the outermost loop whose pushes can be counted, and checked where
    they cannot, as in a while loop). Without it (a GPU thread) each stack is sized exactly before the
    call (`Stack.size`, from `save_sizes`), and values saved where no count exists are refused.
    `shared_sums`: how the adjoint of a parallel loop adds what several iterations add into one place:
    "partials" (a partial sum per thread, summed after the loop) or "atomic" (the target prints such
    an accumulation as an atomic add: a GPU's threads outnumber any partial sums). `products_in_place`:
    code outside parallel loops may write or add a matrix product straight into an adjoint's matrix
    (`runtime.matmul_into`, one BLAS call; a GPU target's host code runs NumPy instead).
    `keeps_results`: the adjoint of `y = exp(x)` reads `y` rather than calling exp again
    (`rules.FROM_RESULT`), and such calls inside larger expressions get names of their own
    (`ad/results.py`), where a saved value costs less than a call (a CPU; a GPU thread recomputes).
    `elementwise_loops`: array expressions run as loops over their elements (`opt/elementwise.py`)
    rather than as NumPy operations each making an array (a GPU thread computes scalars already).
    `plain_adjoint`: the adjoint is also compiled without zero-cotangent guards and runs first, the guarded
    one only where its gradients hold a nan (`opt/plain_adjoint.py`; a GPU target's kernels keep theirs).
    `copied_dtypes`: the dtypes of arrays the target keeps, where a copy may stand for each
    (`Stack.by_value`), as copies end to end in one growing buffer, each followed by its shape and where
    it starts (a CPU: no object and no allocation per saved array; one too big to copy, over
    `runtime.COPIED_AT_MOST` elements, is kept as an object in a list beside the buffer); other saved
    arrays are kept as objects."""
    name: str = "cpu"
    growable: bool = True
    shared_sums: str = "partials"
    products_in_place: bool = True
    keeps_results: bool = True
    elementwise_loops: bool = True
    plain_adjoint: bool = True
    copied_dtypes: frozenset = frozenset()

    def in_buffer(self, stack):
        """Is `stack` kept in one buffer of its dtype (a scalar's, or arrays copied end to end)? Such a
        buffer is handed in by the caller where storage grows (`Function.workspace`)."""
        item = stack.item
        if not isinstance(item, nt.Array):
            return True
        return (stack.by_value and self.growable and item.ndim > 0 and item.layout == "C"
                and str(item.dtype) in self.copied_dtypes)


CPU = Policy("cpu", growable=True, copied_dtypes=frozenset({"float64"}))

SIZED = Policy("sized", growable=False)      # the CPU printer with exactly sized, non-growing storage


def required_before(stmts, reads_of, kills, after, opaque):
    """The to-be-recorded analysis: ({stmt uid: names whose current values the reverse sweep of some
    *earlier* statement reads}, for every statement reached (opaque loops are not entered), and the
    same set after the last statement: what the reverse sweep reads when it starts).

        Req_out(s) = ((Req_in(s) | reads(s)) - kills(s)) | after(s)

    `reads(s)`: names the adjoint of `s` reads (values before `s`); `after(s, req)`: names the reverse
    of `s` reads in the state after it (branch conditions, loop bounds, trip counts, undone increments),
    given the names required before it.
    Loop bodies iterate to a fixed point over their back edge; branches join by union."""
    req_in = {}

    def block(body, req):
        for s in body:
            req = stmt(s, req)
        return req

    def stmt(s, req):
        req_in[s.uid] = req
        if isinstance(s, If):
            return block(s.body, req) | block(s.orelse, req) | after(s, req)
        if isinstance(s, (For, While)) and not opaque(s):
            head = req
            while True:
                new = head | block(s.body, head - kills(s))
                if new == head:
                    return head | after(s, req)
                head = new
        return ((req | reads_of(s)) - kills(s)) | after(s, req)

    return req_in, block(stmts, frozenset())


def undo_of(s, types, stable):
    """`v = v + c` / `v = c + v` / `v = v - c` on integers, `c` a constant or a name that never
    changes once set: the statement restoring `v` exactly (`v = v - c`), else None."""
    if not isinstance(s, Assign) or not isinstance(types.get(s.target), nt.Integer):
        return None
    v = s.value
    if not isinstance(v, BinOp) or v.op not in ("+", "-"):
        return None
    me = Name(s.target)

    def is_step(e):
        if isinstance(e, Const):
            return type(e.value) is int
        return isinstance(e, Name) and e.id != s.target and e.id in stable and isinstance(types.get(e.id), nt.Integer)

    if v.left == me and is_step(v.right):
        step = v.right
    elif v.op == "+" and v.right == me and is_step(v.left):
        step = v.left
    else:
        return None
    return Assign(s.target, BinOp("-" if v.op == "+" else "+", me, step), s.origin)


@dataclass
class LoopFacts:
    """What the save analysis needs to know about the names of a function, found once."""
    multi: set            # bound more than once, or inside a loop
    private: set          # for-loop indices read only inside their loops
    invariant: set        # bound once, from constants and names never rebound: the same value always
    stable: set           # never change once set (invariant names, parameters never rebound)
    innermost: dict       # stmt uid -> the innermost loop around it (None at top level)
    shape_varying: set    # arrays rebound in loops whose shape may change from one binding to the next
    overwritten: set      # names the reverse sweep may have to bring back: multi (but loop indices) and
                          # arrays something writes into; what reads none of them is computed again for free
    replay: dict = field(default_factory=dict)   # uid of a For -> statements recomputed atop each reversed iteration
    replayed: set = field(default_factory=set)


def loop_facts(fn):
    body, params = fn.body, set(fn.params)
    defs = {}
    innermost = {}
    looped = set()

    def visit(stmts, loop):
        for s in stmts:
            innermost[s.uid] = loop
            for n in defines(s):
                defs.setdefault(n, []).append(s)
                if loop is not None:
                    looped.add(n)
            if isinstance(s, While):
                looped.add(s.cond)
            inner = s if isinstance(s, (For, While)) else loop
            for b in blocks(s):
                visit(b, inner)
    visit(body, None)
    multi = {n for n, ds in defs.items() if len(ds) > 1} | looped
    invariant = _invariant(fn, defs)
    stable = invariant | (params - set(defs))
    overwritten = {n for n in multi if not _only_header_binds(n, defs)} | \
        {a for s in walk(body) if (a := written_array(s)) is not None}
    facts = LoopFacts(multi, _private(fn), invariant, stable, innermost, _shape_varying(fn, defs, multi), overwritten)
    _find_replays(fn, facts, defs)
    return facts


def _private(fn):
    """Loop indices bound only by `for` headers and read only inside their loops."""
    headers, other_defs, outside = set(), set(), set()

    def visit(stmts, inside):
        for s in stmts:
            if isinstance(s, For):
                headers.add(s.var)
                outside.update(n for n in reads(s) if n not in inside)
                visit(s.body, inside | {s.var})
                continue
            other_defs.update(defines(s))
            outside.update(n for n in reads(s) if n not in inside)
            for b in blocks(s):
                visit(b, inside)
    visit(fn.body, frozenset())
    outside |= {n for out in fn.outputs for n in names_in(out)}
    return headers - other_defs - outside


def _invariant(fn, defs):
    """Names bound once, by an assignment reading only constants and other such names, and no values
    held in an array (an array's elements may change while its name stays bound); an array written
    into is none of them (`w = np.empty(2)` in a loop, then filled: a new array each iteration)."""
    written = _written_memory(fn)
    invariant = set()
    changed = True
    while changed:
        changed = False
        for n, sites in defs.items():
            if n in invariant or n in written or len(sites) != 1 or not isinstance(sites[0], Assign) or \
                    sites[0].inplace:
                continue
            value = sites[0].value
            if all(m not in defs or m in invariant for m in names_in(value)) and not _reads_array_values(fn, value):
                invariant.add(n)
                changed = True
    return invariant


def _written_memory(fn):
    """Names of arrays whose memory some statement writes into, through whatever name."""
    may = fn.facts.of(Aliasing).may
    out = set()
    for s in walk(fn.body):
        a = written_array(s)
        if a is not None:
            out |= may.get(a, {a})
    return out


def _reads_array_values(fn, e):
    """Does `e` read elements of an array (not only its shape)?"""
    return any(isinstance(fn.types.get(n), nt.Array) for n in value_names(e))


def _shape_varying(fn, defs, multi):
    """Arrays rebound in loops whose shape may differ between bindings (slices with moving bounds,
    allocations of a varying size, part of an array that is itself rebound (`p = p[1:]`), gathers
    through index arrays or masks, joins with such an array, another name for one of several arrays,
    arrays computed from those, and arrays
    restored from a stack in generated code, whose first binding is an empty placeholder): the reverse
    sweep restores each one's previous binding where it was bound, so that its adjoint is made again
    with that shape."""
    moving = multi | {s.var for s in walk(fn.body) if isinstance(s, For)}
    varying = set()         # grown to the least fixed point (names bound in a cycle vary only if fed)

    def varies(n):
        return isinstance(fn.types.get(n), nt.Array) and n not in fn.params and \
            (any(isinstance(d, Pop) or isinstance(d, Assign) and expr_varies(d.value) for d in defs.get(n, ()))
             or len(fixed_sources(n)) > 1)

    def fixed_sources(n):
        """The arrays bound outside the loops that `n` is made another name of (`arr = a` on one path,
        `arr = b` on another): each may have its own shape. (Buffers rotated in a loop name each
        other, arrays of the loop: not counted.)"""
        return {d.value.id for d in defs.get(n, ()) if isinstance(d, Assign) and isinstance(d.value, Name)
                and d.value.id not in multi}

    def expr_varies(e):
        for x in subexpressions(e):
            if isinstance(x, Slice) and any(p is not None and names_in(p) & moving for p in (x.lower, x.upper, x.step)):
                return True
            if isinstance(x, Call) and x.fn in _ALLOCATIONS and any(names_in(a) & moving for a in x.args):
                return True
            if isinstance(x, Subscript) and isinstance(x.base, Name) and x.base.id in moving and \
                    not all(i == Slice() for i in x.index):
                return True
            if isinstance(x, Subscript) and any(index_array(fn, i) is not None for i in x.index):
                return True           # a gather: as many elements as the index array (or mask) picks
            if isinstance(x, Call) and x.fn in _JOINS and names_in(x) & moving:
                return True
            if isinstance(x, Name) and x.id in varying:
                return True
        return False
    while True:
        grown = {n for n in defs if n not in varying and varies(n)}
        if not grown:
            return varying & multi
        varying |= grown


_JOINS = frozenset(JOINS) | {"np.tile"}       # results as large as their arguments together
_ALLOCATIONS = frozenset({"np.zeros", "np.ones", "np.empty", "np.full", "np.arange", "np.linspace", "np.eye",
                          "np.zeros_like", "np.ones_like", "np.empty_like", "np.full_like"})


def _find_replays(fn, facts, defs):
    """Integer and boolean temporaries of a for loop's body that the reverse sweep computes again at
    the top of each reversed iteration instead of saving them: bound once, at the body's top level,
    from the indices of the loops around, values that never change and earlier such temporaries (an
    outer loop's included: `w = 2 * layer` outside, `w + 1` in the inner loop), and read nowhere
    outside the loop."""
    def visit(stmts, indices):
        for s in stmts:
            if isinstance(s, For):
                inner = indices | {s.var} if _only_header_binds(s.var, defs) else indices
                available = inner | facts.stable
                found = []
                read_before = set()
                for t in s.body:
                    if isinstance(t, Assign) and t.target not in read_before and \
                            _replayable(fn, t, defs, available, s):
                        found.append(t)
                        available = available | {t.target}
                    read_before |= set().union(*(reads(u) for u in walk([t])))
                if found:
                    facts.replay[s.uid] = found
                    facts.replayed.update(t.target for t in found)
                visit(s.body, inner | {t.target for t in found})
            else:
                for b in blocks(s):
                    visit(b, indices)
    visit(fn.body, frozenset())


def _only_header_binds(var, defs):
    return all(isinstance(d, For) for d in defs.get(var, ()))


def _replayable(fn, s, defs, available, loop):
    ty = fn.types.get(s.target)
    if not isinstance(ty, (nt.Integer, nt.Boolean)) or len(defs.get(s.target, ())) != 1 or s.inplace:
        return False
    if not names_in(s.value) <= available or _reads_array_values(fn, s.value):
        return False
    inside = {id(t) for t in walk(loop.body)}
    return not any(s.target in reads(t) for t in walk(fn.body) if id(t) not in inside) and \
        not any(s.target in names_in(o) for o in fn.outputs)


# ---- checkpointed loops -------------------------------------------------------------------------

@dataclass
class Checkpoint:
    """A for loop whose reverse sweep runs each iteration again from its saved start."""
    loop: For
    scratch: set           # arrays each iteration rewrites before reading them
    external: set          # arrays the iteration writes and never reads (or reads only for `stale` values)
    assigned: set          # names the body binds (the loop index included)
    carried: list = field(default_factory=list)   # scalars saved per iteration (found by the reverse pass)
    stale: set = field(default_factory=set)       # external arrays the iteration reads only for values nothing
                                                  # needs, and those values: the re-run leaves them alone


def checkpoint_candidate(fn, loop, facts, active, back_reads=frozenset()):
    """A Checkpoint for `loop` if its iterations can be run again from their scalars alone, else None:
    every array it writes is scratch (rewritten first in each iteration), made afresh in the
    iteration, or external (never read in it, or, in a phase between barriers, read only for values
    that none of `back_reads`, what the loop's reverse reads, depends on: `tile[t] += tile[t + s]`), and
    every array name it binds is made afresh in the iteration before it is read (so only scalars are
    saved per iteration)."""
    inner = list(walk(loop.body))
    if not any(defines(t) & active or written_array(t) in active for t in inner):
        return None
    reductions = sums(loop) if loop.parallel else set()
    if any(isinstance(t, (Push, Pop, While)) or isinstance(t, Accumulate) and written_array(t) is None and
           not (isinstance(t.target, Name) and t.target.id in reductions) for t in inner):
        return None             # (adding into an array's elements is a write like a store; a parallel loop's
                                # reductions are left out of its re-run: `parallel.rerun_alone`)
    arrays = {t.target for t in inner if isinstance(t, Assign) and isinstance(fn.types.get(t.target), nt.Array)}
    if arrays & _exposed(loop.body) or not all(_made_afresh(fn, a, inner) for a in arrays):
        return None
    stored = {written_array(t) for t in inner} - {None} - arrays
    value_read = set()
    for t in inner:
        if isinstance(t, Effect):
            continue            # an index check reads shapes, not values
        exprs = (*t.index, t.value) if isinstance(t, Store) else \
            (*t.target.index, t.value) if isinstance(t, Accumulate) and written_array(t) else own_exprs(t)
        value_read |= set().union(*(value_names(e) for e in exprs))
    external = stored - value_read
    scratch = stored & value_read
    stale = set()
    for a in sorted(scratch) if loop.phase else ():      # (each thread's elements are its own: CUDA's rules)
        fed = _feeds(loop.body, a)
        if not fed & (set(back_reads) | {a}):
            external, scratch, stale = external | {a}, scratch - {a}, stale | fed | {a}
    if not all(_rewritten_first(fn, a, loop) for a in scratch):
        return None
    return Checkpoint(loop, scratch, external, assigned(loop.body) | {loop.var}, stale=stale)


_VIEWS = frozenset({"srcad.stop_gradient", "np.transpose", "np.asarray", "np.ravel", "np.reshape",
                    "np.ascontiguousarray", ".astype", "srcad.list_room", "srcad.list_rows_room"})


def _made_afresh(fn, a, inner):
    """Every binding of array `a` among statements `inner` is a new array (an arithmetic result, an
    allocation, a copy: never a view of another array), and `a` shares memory with nothing."""
    groups = fn.facts.of(Aliasing).groups
    if len(groups.get(a, {a})) > 1:
        return False
    for t in inner:
        if isinstance(t, Assign) and t.target == a:
            v = t.value
            if isinstance(v, (Name, Subscript)) or (isinstance(v, Call) and v.fn in _VIEWS) or a in names_in(v):
                return False
    return True


def _feeds(stmts, a):
    """The names whose values in `stmts` depend on array `a`'s elements (through assignments, stores
    into other arrays, branches and loop bounds), and `a` itself if an index depends on them: what a
    re-run that leaves `a`'s writes alone would compute wrongly."""
    tainted, grew = {a}, True

    def visit(body, under):
        nonlocal grew
        for t in body:
            if isinstance(t, Effect):
                continue
            if isinstance(t, (If, For, While)):
                inner = under or bool(set(reads(t)) & tainted)     # (a branch's condition, a loop's bounds)
                for b in blocks(t):
                    visit(b, inner)
                continue
            target = written_array(t) or next(iter(defines(t)), None)
            if target is not None and target not in tainted and (under or set(reads(t)) & tainted):
                tainted.add(target)
                grew = True
    while grew:
        grew = False
        visit(stmts, False)
    return (tainted - {a}) | ({a} if _index_tainted(stmts, tainted) else set())


def _index_tainted(stmts, tainted):
    """Does an index in `stmts` read a name computed from the tainted ones?"""
    for t in walk(stmts):
        exprs = list(own_exprs(t)) + ([Subscript(Name(t.array), t.index)] if isinstance(t, Store) else [])
        for e in exprs:
            for x in subexpressions(e):
                if isinstance(x, Subscript) and any(names_in(i) & tainted for i in x.index):
                    return True
    return False


def _exposed(stmts, defined=frozenset()):
    """Names `stmts` read before binding them on every path (index checks read no values)."""
    exposed = set()

    def block(body, defined):
        defined = set(defined)
        for t in body:
            if isinstance(t, Effect):
                continue
            exposed.update(n for n in reads(t) if n not in defined)
            if isinstance(t, If):
                defined |= block(t.body, defined) & block(t.orelse, defined)
            elif isinstance(t, (For, While)):
                block(t.body, defined | defines(t))
            else:
                defined |= defines(t)
        return defined
    block(stmts, defined)
    return exposed


def _rewritten_first(fn, a, loop):
    """`a` is a local 1-d array allocated once outside `loop`, used nowhere else, and the first
    statement of the loop's body touching it fills all of it before reading it:
    `for j in range(n): a[j] = <not reading a>` with n its length, or `a[:] = <not reading a>`."""
    ty = fn.types.get(a)
    if a in fn.params or not isinstance(ty, nt.Array) or any(a in names_in(o) for o in fn.outputs):
        return False
    groups = fn.facts.of(Aliasing).groups
    if len(groups.get(a, {a})) > 1:
        return False
    inside = {id(t) for t in walk(loop.body)}
    allocations = []
    for t in walk(fn.body):
        if id(t) in inside or isinstance(t, Effect):
            continue
        if isinstance(t, Assign) and t.target == a:
            allocations.append(t)
        elif a in reads(t):
            return False
    if len(allocations) != 1 or not isinstance(allocations[0].value, Call) or \
            allocations[0].value.fn not in _ALLOCATIONS:
        return False
    lengths = _lengths(fn, a, allocations[0].value)
    for t in loop.body:
        touched = set().union(*(reads(u) for u in walk([t]) if not isinstance(u, Effect)))
        if a not in touched:
            continue
        if isinstance(t, Store) and t.array == a and all(i == Slice() for i in t.index) \
                and len(t.index) == ty.ndim and a not in names_in(t.value):
            return True
        if not (ty.ndim == 1 and isinstance(t, For) and t.start == Const(0) and t.step == Const(1)
                and t.stop in lengths):
            return False
        stores = [u for u in t.body if isinstance(u, Store) and u.array == a]
        if len(stores) != 1 or stores[0].index != (Name(t.var),):
            return False
        for u in walk(t.body):
            if isinstance(u, Effect):
                continue
            if t.var in defines(u) or a in defines(u) or (isinstance(u, (For, While, If))):
                return False
            if a in (set().union(*(names_in(e) for e in (*u.index, u.value))) if isinstance(u, Store) else reads(u)):
                return False
        return True
    return False


def _lengths(fn, a, allocation):
    """Expressions equal to the length of 1-d array `a` allocated by `allocation`."""
    out = {Subscript(_attribute(a), (Const(0),))}
    arg = allocation.args[0] if allocation.args else None
    if allocation.fn.endswith("_like") and isinstance(arg, Name):
        out.add(Subscript(_attribute(arg.id), (Const(0),)))
    elif arg is not None and not isinstance(arg, Call):
        stable = all(n in fn.params or n not in assigned(fn.body) or _bound_once_at_top(fn, n)
                     for n in names_in(arg))
        if stable:
            out.add(arg)
    return out


def _attribute(name):
    return Attribute(Name(name), "shape")


def _bound_once_at_top(fn, n):
    sites = [t for t in walk(fn.body) if n in defines(t)]
    return len(sites) == 1 and any(t is sites[0] for t in fn.body) and n not in fn.params


def _trips(start, stop, step):
    """The number of iterations of `range(start, stop, step)`, as an expression."""
    if step == Const(1):
        span = stop if start == Const(0) else BinOp("-", stop, start)
        return Call("max", (span, Const(0)))
    return Call("srcad.trip_count", (start, stop, step))


# ---- how many values each stack receives ------------------------------------------------------------

@dataclass(frozen=True)
class SaveSize:
    """How many values a stack receives in one run, known before the run: `setup` (counting loops,
    where an inner loop's trip count depends on the index of a loop around it: a triangle is summed,
    not bounded by a product) then `count`. `exact` is False where a branch was counted as its larger
    side or a loop with `break` as its most iterations: then `count` is an upper bound."""
    count: object
    setup: tuple
    exact: bool


class Unsized(Exception):
    """The pushes inside `stmt` cannot be counted before it runs: `why` is "while" (no trip count on
    entry) or "bounds" (loop bounds computed where the count cannot see them: `names`)."""

    def __init__(self, stmt, why, names=()):
        super().__init__(why)
        self.stmt, self.why, self.names = stmt, why, tuple(names)


# Calls a counted integer may be computed with (pure, reading no array values).
_COUNTABLE_CALLS = frozenset({"int", "min", "max", "abs", "len", "srcad.trip_count", "math.floor", "math.ceil"})


class _Counter:
    """Counts the pushes onto `stacks` a statement list makes, as expressions read before it runs.

    A name the list binds before the point counted may appear in a count only as its value: scalars
    bound from constants, names not bound yet and earlier such scalars are substituted (`m = i + 1` before
    `for j in range(m)`), and so are the shapes of arrays made from known shapes (`B = A.copy()`,
    `np.zeros((n, m))`: `B.shape[0]`); a loop index becomes the index of a counting loop. A loop whose pushes do
    not depend on its index counts as trip count times body; one whose do is summed by a counting
    loop. A branch counts as its larger side. With `bounded_whiles`, a while loop with a `bound` (a for
    loop with a `break`) counts as that many iterations; else it has no count."""

    def __init__(self, types, names, stacks, bounded_whiles=True):
        self.types, self.names, self.stacks = types, names, frozenset(stacks)
        self.bounded_whiles = bounded_whiles

    def count(self, stmts):
        """(setup, {stack: count}, exact) for `stmts`, counted just before them; raises Unsized."""
        return self.block(stmts, {}, frozenset())

    def pushed(self, stmts):
        return {t.stack for t in walk(stmts) if isinstance(t, Push)} & self.stacks

    def block(self, stmts, env, changed):
        """`changed`: the names that may have been bound anew since the point the count is read at."""
        setup, total, exact = [], {}, True
        for s in stmts:
            if self.pushed([s]):
                more, counts, ex = self.stmt(s, env, changed)
                setup += more
                exact &= ex
                for k, c in counts.items():
                    total[k] = _plus(total.get(k, Const(0)), c)
            self.bind(s, env, changed)
            changed = changed | assigned([s])
        return setup, total, exact

    def bind(self, s, env, changed):
        """Update `env` (name -> its value in names read before the count; ("shape", array) -> its
        shape, a tuple of such values) past statement `s`."""
        known = None
        if isinstance(s, Assign) and not s.inplace and isinstance(self.types.get(s.target), nt.Array):
            known = ("shape", s.target), self.shape_of(s.value, env, changed)
        elif isinstance(s, Assign) and isinstance(self.types.get(s.target), (nt.Number, nt.Boolean)) \
                and all(x.fn in _COUNTABLE_CALLS for x in subexpressions(s.value) if isinstance(x, Call)) \
                and not any(isinstance(self.types.get(n), nt.Array) for n in value_names(s.value)):
            known = s.target, self.fixed(s.value, env, changed)
        _forget(env, assigned([s]))
        if known is not None and known[1] is not None:
            env[known[0]] = known[1]

    def fixed(self, e, env, changed):
        """`e` in names read before the count, or None."""
        e = substitute(rewrite_top_down(e, lambda x: self.known_extent(x, env)), env)
        return None if names_in(e) & changed else e

    @staticmethod
    def known_extent(x, env):
        """`a.shape[k]` or `len(a)` as the extent `env` knows for array `a`, else None."""
        if isinstance(x, Subscript) and isinstance(x.base, Attribute) and x.base.attr == "shape" and \
                isinstance(x.base.base, Name) and len(x.index) == 1 and isinstance(x.index[0], Const):
            shape = env.get(("shape", x.base.base.id))
            return shape[x.index[0].value] if shape is not None else None
        if isinstance(x, Call) and x.fn == "len" and len(x.args) == 1 and isinstance(x.args[0], Name):
            shape = env.get(("shape", x.args[0].id))
            return shape[0] if shape else None
        return None

    def inductions(self, body, env, changed):
        """[(v, c)]: integers a loop body steps once per iteration (`v = v + c` at its top level, the
        only binding of `v` in it, `c` known in every iteration): at the top of an iteration, `v` is its
        value before the loop plus `c` times the iterations before it (where that value is known)."""
        out = []
        for t in body:
            if not (isinstance(t, Assign) and isinstance(self.types.get(t.target), nt.Integer)
                    and isinstance(t.value, BinOp) and t.value.op in ("+", "-") and t.value.left == Name(t.target)):
                continue
            step = self.fixed(t.value.right, env, changed)
            if step is None or sum(t.target in defines(u) for u in walk(body)) != 1:
                continue
            out.append((t.target, step if t.value.op == "+" else UnaryOp("-", step)))
        return out

    def shape_of(self, e, env, changed):
        """The shape of array expression `e` as a tuple of values read before the count, or None: an array
        name, a view of one through full slices, integers and new axes, a copy, an elementwise result
        (broadcast), a matrix product, a transpose, or an allocation of a known shape."""
        if isinstance(e, Name):
            ty = self.types.get(e.id)
            if ("shape", e.id) in env:
                return env[("shape", e.id)]
            if e.id in changed or not isinstance(ty, nt.Array):
                return None
            return tuple(Subscript(Attribute(e, "shape"), (Const(k),)) for k in range(ty.ndim))
        if isinstance(e, Subscript) and isinstance(e.base, Name):
            return _view_shape(self.shape_of(e.base, env, changed), e.index, self.types)
        if isinstance(e, UnaryOp) and e.op in ("-", "+"):
            return self.shape_of(e.operand, env, changed)
        if isinstance(e, BinOp) and e.op == "@":
            return _product_shape(self.operand_shape(e.left, env, changed), self.operand_shape(e.right, env, changed))
        if isinstance(e, BinOp) and e.op in ("+", "-", "*", "/", "**"):
            return _broadcast([self.operand_shape(x, env, changed) for x in (e.left, e.right)])
        if not isinstance(e, Call) or not e.args:
            return None
        if e.fn == "np.transpose" and len(e.args) == 1:
            shape = self.shape_of(e.args[0], env, changed)
            return shape[::-1] if shape is not None else None
        if e.fn == "np.dot" and len(e.args) == 2:
            return _product_shape(*(self.operand_shape(x, env, changed) for x in e.args))
        if e.fn in ELEMENTWISE and not e.keywords:
            return _broadcast([self.operand_shape(x, env, changed) for x in e.args])
        if e.fn in _SAME_SHAPE:
            return self.shape_of(e.args[0], env, changed)
        if e.fn in _MADE_OF_SHAPE:
            shape = e.args[0]
            if isinstance(shape, Attribute) and shape.attr == "shape":     # np.zeros(x.shape): x's axes
                return self.shape_of(shape.base, env, changed)
            if isinstance(_expr_type(self.types, shape), nt.BaseTuple):
                return None
            dims = shape.items if isinstance(shape, Tuple) else (shape,)
            dims = tuple(self.fixed(d, env, changed) for d in dims)
            return None if any(d is None for d in dims) else dims
        return None

    def operand_shape(self, e, env, changed):
        """The shape of an operand: () for a scalar, else as `shape_of`."""
        if isinstance(_expr_type(self.types, e), (nt.Number, nt.Boolean)):
            return ()
        return self.shape_of(e, env, changed)

    def stmt(self, s, env, changed):
        if isinstance(s, Push):
            return [], {s.stack: Const(1)}, True
        if isinstance(s, If):
            a, ca, xa = self.block(s.body, dict(env), changed)
            b, cb, xb = self.block(s.orelse, dict(env), changed)
            counts = {k: ca.get(k, Const(0)) if ca.get(k) == cb.get(k) else
                      Call("max", (ca.get(k, Const(0)), cb.get(k, Const(0)))) for k in set(ca) | set(cb)}
            return a + b, counts, xa and xb and ca == cb
        if isinstance(s, For):
            return self.loop(s, env, changed)
        if isinstance(s, While):
            limit = s.bound if self.bounded_whiles else None
            limit = None if limit is None else self.fixed(limit, env, changed)
            if limit is None:
                raise Unsized(s, "while")
            inner = dict(env)
            _forget(inner, assigned(s.body))
            setup, counts, _ = self.block(s.body, inner, changed | assigned(s.body))
            return setup, {k: _times(limit, c) for k, c in counts.items()}, False
        raise TypeError(f"no count for {s!r}")

    def loop(self, s, env, changed):
        ends = [self.fixed(e, env, changed) for e in (s.start, s.stop, s.step)]
        if any(e is None for e in ends):
            raise Unsized(s, "bounds", sorted(set().union(*(names_in(e) & changed for e in (s.start, s.stop, s.step)))
                                              - {k for k in env if isinstance(k, str)}))
        index = self.names.fresh(f"{s.var}_count")
        self.types[index] = nt.intp
        inner = dict(env)
        _forget(inner, assigned(s.body))
        inner[s.var] = Name(index)
        done = BinOp("-", Name(index), ends[0])          # iterations before this one
        done = done if ends[2] == Const(1) else BinOp("//", done, ends[2])
        carried = changed | assigned(s.body)
        for v, step in self.inductions(s.body, inner, carried):
            start = self.fixed(Name(v), env, changed)
            if start is not None:
                inner[v] = _plus(start, _times(done, step))
        setup, counts, exact = self.block(s.body, inner, carried)
        if index not in set().union(*(names_in(c) for c in counts.values()), *(reads(t) for t in walk(setup))):
            trips = _trips(*ends)
            return setup, {k: _times(trips, c) for k, c in counts.items()}, exact
        sums = {}
        for k in sorted(counts):
            sums[k] = self.names.fresh("n_saves")
            self.types[sums[k]] = nt.intp
        body = setup + [Assign(sums[k], BinOp("+", Name(sums[k]), counts[k]), s.origin) for k in sorted(counts)]
        start = [Assign(sums[k], Const(0), s.origin) for k in sorted(counts)]
        return start + [For(index, *ends, body, s.origin)], {k: Name(v) for k, v in sums.items()}, exact


def _forget(env, names):
    for k in [k for k in env if (k[1] if isinstance(k, tuple) else k) in names]:
        del env[k]


def _expr_type(types, e):
    """The type of a name or a constant (None for other expressions)."""
    if isinstance(e, Name):
        return types.get(e.id)
    return nt.float64 if isinstance(e, Const) else None


_SAME_SHAPE = frozenset({"np.copy", ".copy", "np.ascontiguousarray", "np.zeros_like", "np.ones_like",
                         "np.empty_like", "np.full_like"})
_MADE_OF_SHAPE = frozenset({"np.zeros", "np.ones", "np.empty", "np.full"})


def _broadcast(shapes):
    """The shape NumPy broadcasts `shapes` to, where each axis is known (a 1 meets anything), else None."""
    if any(shape is None for shape in shapes):
        return None
    ndim = max(len(shape) for shape in shapes)
    out = []
    for k in range(ndim):
        extents = {shape[k - ndim + len(shape)] for shape in shapes if k - ndim + len(shape) >= 0} - {Const(1)}
        if len(extents) > 1:
            return None
        out.append(extents.pop() if extents else Const(1))
    return tuple(out)


def _product_shape(a, b):
    """The shape of `a @ b` for operands of 1 or 2 axes, else None."""
    if a is None or b is None or not 1 <= len(a) <= 2 or not 1 <= len(b) <= 2:
        return None
    return a[:-1] + b[1:] if len(b) == 2 else a[:-1]


def _view_shape(shape, index, types):
    """The shape of `a[index]` for `a` of `shape`: full slices keep an axis, new axes add one, integers
    drop one (other slices and index arrays: None)."""
    if shape is None:
        return None
    out, axis = [], 0
    for i in index:
        if i == Const(None):
            out.append(Const(1))
        elif i == Slice():
            out.append(shape[axis])
            axis += 1
        elif isinstance(_expr_type(types, i), nt.Integer) or (isinstance(i, Const) and type(i.value) is int):
            axis += 1
        else:
            return None
    return tuple(out) + tuple(shape[axis:])


def _plus(a, b):
    if a == Const(0):
        return b
    if b == Const(0):
        return a
    return BinOp("+", a, b)


def _times(a, b):
    if a == Const(1) or b == Const(0):
        return b
    if b == Const(1) or a == Const(0):
        return a
    return BinOp("*", a, b)


def save_sizes(body, stacks, types, names):
    """{stack: SaveSize} of the values `body` pushes onto each of `stacks` (pops not counted: for a
    stack also popped in `body`, an upper bound on its height), counted before `body` runs; raises
    Unsized where no count exists. Counting loops get fresh names (typed in `types`)."""
    setup, counts, exact = _Counter(types, names, stacks).count(body)
    return {k: SaveSize(counts.get(k, Const(0)), tuple(setup), exact) for k in stacks}


def reserve_room(body, stacks, types, names):
    """`body` with a `Reserve` before the statements pushing onto `stacks`, as far out as their pushes
    can be counted: the whole of `body` if it can (once per run), else each statement in turn, else
    (a while loop, a loop whose bounds are computed in the loop around it) inside it, down to single
    pushes. A statement popping a stack it pushes is gone into as well (the room it needs at once is
    what it pushes between pops), and so is a loop with a `break` (room for all its iterations would
    be taken however early it stops). Nested blocks are rewritten in place."""
    counter = _Counter(types, names, stacks, bounded_whiles=False)

    def room(stmts):
        """Reserves before `stmts`, or None where they cannot be counted."""
        pushed = counter.pushed(stmts)
        if not pushed:
            return []
        if {t.stack for t in walk(stmts) if isinstance(t, Pop)} & pushed:
            return None
        try:
            setup, counts, _ = counter.count(stmts)
        except Unsized:
            return None
        origin = stmts[0].origin
        return setup + [Reserve(k, counts[k], origin) for k in sorted(counts)]

    def block(stmts):
        whole = room(stmts)
        if whole is not None:
            return whole + stmts
        out = []
        for s in stmts:
            before = room([s])
            if before is None:
                for b in blocks(s):
                    b[:] = block(b)
                before = []
            out += before + [s]
        return out

    return block(body)


def refuse_unsized(fn, policy, why):
    """The refusal for values saved where `policy`'s storage, sized before the call, cannot be counted."""
    s = why.stmt
    line = f"line {s.origin.line}: `{s.origin.text}`" if s.origin is not None else "generated code"
    if why.why == "while":
        return TransformError(
            f"{fn.name}: values are saved inside the while loop at {line}, which has no trip count known before "
            f"the call, and the {policy.name} target sizes its storage for saved values before the call (it "
            f"cannot grow while a loop runs). Hint: give the loop a bound: `for it in range(max_iter):` with "
            f"`if <done>: break` instead of the while loop (see {SUBSET_DOC})")
    spelled = ", ".join(f"`{fn.names.user(n)}`" for n in why.names)
    return TransformError(
        f"{fn.name}: the loop at {line} saves values, and its bounds depend on {spelled or 'values'} computed "
        f"in the function (from array elements, or changed from one iteration to the next), so the values it "
        f"saves cannot be counted before the call, as the {policy.name} target needs (it sizes its storage "
        f"for saved values before the call). Hint: loop to a bound computed from the arguments and their "
        f"shapes, skipping the iterations past the end with `if` (see {SUBSET_DOC})")
