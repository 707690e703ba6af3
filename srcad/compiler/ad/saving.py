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
  reserved before a for loop from its trip count; pushes in a while loop
  check for room, growing by doubling, which only the CPU target allows:
  `Policy`).
"""
from dataclasses import dataclass, field

from numba.core import types as nt

from ..analysis.types import index_array
from ..errors import TransformError
from ..ir import (Accumulate, Assign, Attribute, BinOp, Call, Const, Effect, For, If, Name, Pop, Push, Slice, Store,
                  Subscript, While)
from ..ir.visit import assigned, blocks, defines, names_in, reads, subexpressions, walk, written_array
from .local import value_names
from .rules import JOINS


@dataclass(frozen=True)
class Policy:
    """Where a target may keep saved values. `growable`: stacks may grow while a loop runs (CPU);
    without it every stack is sized before the loop that fills it, and a save inside a while loop
    (trip count unknown on entry) is refused."""
    name: str
    growable: bool


CPU = Policy("cpu", growable=True)


def required_before(stmts, reads_of, kills, after, opaque):
    """The to-be-recorded analysis: ({id(stmt): names whose current values the reverse sweep of some
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
        req_in[id(s)] = req
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
    innermost: dict       # id(stmt) -> the innermost loop around it (None at top level)
    shape_varying: set    # arrays rebound in loops whose shape may change from one binding to the next
    replay: dict = field(default_factory=dict)   # id(For) -> statements recomputed atop each reversed iteration
    replayed: set = field(default_factory=set)


def loop_facts(fn):
    body, params = fn.body, set(fn.params)
    defs = {}
    innermost = {}
    looped = set()

    def visit(stmts, loop):
        for s in stmts:
            innermost[id(s)] = loop
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
    facts = LoopFacts(multi, _private(fn), invariant, stable, innermost, _shape_varying(fn, defs, multi))
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
    may = fn.facts.get("aliasing", {}).get("may", {})
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
    through index arrays or masks, joins with such an array, arrays computed from those, and arrays
    restored from a stack in generated code, whose first binding is an empty placeholder): the reverse
    sweep restores each one's previous binding where it was bound, so that its adjoint is made again
    with that shape."""
    moving = multi | {s.var for s in walk(fn.body) if isinstance(s, For)}
    memo = {}

    def varies(n):
        if n not in memo:
            memo[n] = False
            memo[n] = isinstance(fn.types.get(n), nt.Array) and n not in fn.params and \
                any(isinstance(d, Pop) or isinstance(d, Assign) and expr_varies(d.value) for d in defs.get(n, ()))
        return memo[n]

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
            if isinstance(x, Name) and varies(x.id):
                return True
        return False
    return {n for n in multi if varies(n)}


_JOINS = frozenset(JOINS) | {"np.tile"}       # results as large as their arguments together
_ALLOCATIONS = frozenset({"np.zeros", "np.ones", "np.empty", "np.full", "np.arange", "np.linspace", "np.eye",
                          "np.zeros_like", "np.ones_like", "np.empty_like", "np.full_like"})


def _find_replays(fn, facts, defs):
    """Integer and boolean temporaries of a for loop's body that the reverse sweep computes again at
    the top of each reversed iteration instead of saving them: bound once, at the body's top level,
    from the indices of the loops around, values that never change and earlier such temporaries, and
    read nowhere outside the loop."""
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
                    facts.replay[id(s)] = found
                    facts.replayed.update(t.target for t in found)
                visit(s.body, inner)
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
    external: set          # arrays the iteration writes and never reads
    assigned: set          # names the body binds (the loop index included)
    carried: list = field(default_factory=list)   # scalars saved per iteration (found by the reverse pass)


def checkpoint_candidate(fn, loop, facts, active):
    """A Checkpoint for `loop` if its iterations can be run again from their scalars alone, else None:
    every array it writes is scratch (rewritten first in each iteration), made afresh in the
    iteration, or external (never read in it), and every array name it binds is made afresh in the
    iteration before it is read (so only scalars are saved per iteration)."""
    inner = list(walk(loop.body))
    if not any(defines(t) & active or written_array(t) in active for t in inner):
        return None
    if any(isinstance(t, (Push, Pop, Accumulate, While)) for t in inner):
        return None
    arrays = {t.target for t in inner if isinstance(t, Assign) and isinstance(fn.types.get(t.target), nt.Array)}
    if arrays & _exposed(loop.body) or not all(_made_afresh(fn, a, inner) for a in arrays):
        return None
    stored = {written_array(t) for t in inner} - {None} - arrays
    value_read = set()
    for t in inner:
        if isinstance(t, Effect):
            continue            # an index check reads shapes, not values
        value_read |= (set().union(*(names_in(e) for e in (*t.index, t.value)))) if isinstance(t, Store) \
            else reads(t)
    external = stored - value_read
    scratch = stored & value_read
    if not all(_rewritten_first(fn, a, loop) for a in scratch):
        return None
    return Checkpoint(loop, scratch, external, assigned(loop.body) | {loop.var})


_VIEWS = frozenset({"srcad.stop_gradient", "np.transpose", "np.asarray", "np.ravel", "np.reshape",
                    "np.ascontiguousarray", ".astype"})


def _made_afresh(fn, a, inner):
    """Every binding of array `a` among statements `inner` is a new array (an arithmetic result, an
    allocation, a copy: never a view of another array), and `a` shares memory with nothing."""
    groups = fn.facts.get("aliasing", {}).get("groups", {})
    if len(groups.get(a, {a})) > 1:
        return False
    for t in inner:
        if isinstance(t, Assign) and t.target == a:
            v = t.value
            if isinstance(v, (Name, Subscript)) or (isinstance(v, Call) and v.fn in _VIEWS) or a in names_in(v):
                return False
    return True


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
    groups = fn.facts.get("aliasing", {}).get("groups", {})
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


def trip_count(loop):
    """The number of iterations of `loop`, as an expression (read before it starts)."""
    if loop.step == Const(1):
        span = loop.stop if loop.start == Const(0) else BinOp("-", loop.stop, loop.start)
        return Call("max", (span, Const(0)))
    return Call("srcad.trip_count", (loop.start, loop.stop, loop.step))


def refuse_unsized(fn, origin):
    return TransformError(f"{fn.name}: a value saved inside a while loop needs a stack that grows while the "
                          f"loop runs, which this target cannot do (line {origin.line}: `{origin.text}`). Hint: "
                          f"bound the loop with a for loop over range(...)")
