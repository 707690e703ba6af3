"""What the reverse sweep brings back, and how: decided over the primal IR before any code is written.

The reverse sweep runs the statements backwards, and an adjoint reads the
values its statement read. `SavePlan(fn, policy)` decides, for every
statement that overwrites such a value, how the value comes back (the means
are described in `saving`): saved by the forward, undone, replayed, or left
to a checkpointed loop, which saves only what each iteration starts from.
Checkpointing a loop is chosen by comparing what it saves per iteration with
what taping it would: both are computed from the IR, the loop's re-run and
adjoint included (`_iteration_live_in`), so nothing is generated to decide.

`reverse` then generates the forward and the adjoint once, asking the plan
at each statement. Statements are named by `uid`, which copies keep, so the
plan stays valid for copies of the statements it was made for.
"""
from numba.core import types as nt

from ..ir import Accumulate, Assign, Effect, For, If, Pop, Push, Store, Subscript, Name, While
from ..ir.facts import Activity, Aliasing
from ..ir.visit import assigned, blocks, defines, distinct_ids, names_in, own_exprs, walk, written_array
from ..opt.cleanup import live_in, statement_reads
from .local import LocalAdjoints, value_names
from .parallel import carries_only_sums
from .saving import CPU, checkpoint_candidate, loop_facts, required_before, undo_of


class Context:
    """Statements whose saves are planned together: the function body, or the body of a checkpointed
    loop (one iteration, re-run in the adjoint). `req`: their save analysis (statement uid -> the names
    required before it; "end" -> those required when the reverse sweep starts)."""

    def __init__(self, body, checkpoint=None):
        self.body = body
        self.checkpoint = checkpoint
        self.req = {}

    @property
    def loop(self):
        return self.checkpoint.loop if self.checkpoint is not None else None

    def owns(self, loop):
        """Is `loop` the checkpointed loop whose iterations this context plans?"""
        return self.checkpoint is not None and loop.uid == self.checkpoint.loop.uid


class SavePlan:
    """The save decisions for `fn` (typed, with activity and aliasing facts) under `policy`."""

    def __init__(self, fn, policy=CPU):
        distinct_ids(fn.body)
        self.fn = fn
        self.policy = policy
        self.types = fn.types
        self.facts = loop_facts(fn)
        self.local = LocalAdjoints(fn, self.facts.shape_varying,
                                   self.facts.overwritten if policy.keeps_results else None)
        self.active = fn.facts.of(Activity).active
        self.undo = {s.uid: u for s in walk(fn.body) if (u := undo_of(s, self.types, self.facts.stable))}
        self.counters = {}           # uid of a While -> the name counting its iterations
        for s in walk(fn.body):
            if isinstance(s, While):
                self.counters[s.uid] = fn.names.fresh("n_iter")
                self.types[self.counters[s.uid]] = nt.intp
        self.value_reads = set().union(*(self.local.reads(s)[0] for s in walk(fn.body) if has_adjoint(s)))
        self.top = Context(fn.body)
        self.checkpoints = {}        # uid of a For -> its Checkpoint
        self.inner = {}              # uid of a checkpointed For -> the Context of its iterations
        self.iteration_reads = {}    # uid of a checkpointed For -> names its reversed iterations read first
        self.top.req = self._required(self.top)
        planned_inside = set()
        for s in walk(fn.body):
            if isinstance(s, For) and s.uid not in planned_inside and self._consider_checkpoint(s):
                if not self._plans_loops_inside(s):
                    planned_inside |= {t.uid for t in walk(s.body)}

    # ---- the save analysis ----------------------------------------------------------------------
    def _required(self, ctx):
        """The save analysis of `ctx`'s statements (stored per statement in `ctx.req`)."""
        req, end = required_before(ctx.body, lambda s: self.reads(s, ctx), self._kills,
                                   lambda s, req: self._after(s, req, ctx),
                                   lambda s: self.is_checkpoint_in(s, ctx))
        req["end"] = end
        return req

    def is_checkpoint_in(self, s, ctx):
        """Is `s` a checkpointed loop nested in `ctx` (opaque to its save analysis)?"""
        return s.uid in self.checkpoints and not ctx.owns(s)

    def reads(self, s, ctx):
        """Names whose values before `s` the reverse of `s` reads."""
        if has_adjoint(s):
            out = set(self.local.reads(s)[1]) - {self.local.result_read(s)}
            v = rebound(s)
            if v in self.facts.shape_varying and v in self.active:
                out.add(v)            # its adjoint is made again shaped like the previous binding
            array = written_array(s)
            if array in self.facts.multi and self.may(array) & self.value_reads:
                out.add(array)        # a saved region goes back into the array this name is bound to now
            return frozenset(out - self.facts.replayed)
        if self.is_checkpoint_in(s, ctx):
            cp = self.checkpoints[s.uid]
            return frozenset(self.iteration_reads[s.uid] - cp.assigned - self.facts.replayed)
        return frozenset()

    def _kills(self, s):
        if s.uid in self.checkpoints:
            return frozenset(self.checkpoints[s.uid].assigned)
        v = self.bound(s)
        return frozenset({v} - self.facts.replayed) if v is not None else frozenset()

    def _after(self, s, req, ctx):
        """Names the reverse of `s` reads in the state after it (`req`: those required before it)."""
        if isinstance(s, If):
            return frozenset(names_in(s.cond) - self.facts.replayed)
        if isinstance(s, For):
            bounds = set().union(*(names_in(e) for e in (s.start, s.stop, s.step)))
            replayed = set().union(*(names_in(t.value) for t in self.facts.replay.get(s.uid, ())))
            return frozenset((bounds | replayed) - self.facts.replayed - {s.var})
        if isinstance(s, While):
            return frozenset({self.counters[s.uid]})
        if s.uid in self.undo and self.needs_old(s, ctx, req):
            return frozenset(names_in(self.undo[s.uid].value))
        if has_adjoint(s) and (result := self.local.result_read(s)) is not None:
            return frozenset({result})
        return frozenset()

    # ---- checkpointing --------------------------------------------------------------------------
    def _consider_checkpoint(self, loop):
        """Checkpoint `loop` when that saves fewer values per iteration than taping it (True if chosen);
        where a saved value costs less than a step run again (`Policy.keeps_results`, a CPU), only when
        the values it saves (what each iteration starts from, and what its re-run saves inside) are at
        most half of what taping would: a re-run that saves as much as taping buys nothing with its
        time (ADBench GMM as the paper reads: the Mahalanobis norm's row sums, saved either way).
        Where storage cannot grow, only a loop whose re-run saves can be counted before the call: the
        saves of an iteration run again in the adjoint may depend on values it restores there
        (`n = pop(...)` before `for j in range(n)`), which the call cannot count beforehand
        (`_rerun_is_countable`). (A parallel loop whose iterations share only sums runs each iteration
        again from the values every iteration starts from, and the target sizes its storage per
        iteration.)"""
        alone = loop.parallel and carries_only_sums(loop, self._adjoint_reads(loop))
        back = set().union(*(self._reverse_reads(s) for s in walk(loop.body))) if loop.phase else frozenset()
        countable = self.policy.growable or alone or _rerun_is_countable(loop)
        if self._checkpoints_around(loop) and any(written_array(t) is not None for t in walk(loop.body)):
            return False          # (nested: a re-run inside a re-run keeps no arrays' old values)
        cp = checkpoint_candidate(self.fn, loop, self.facts, self.active, back) if countable else None
        if cp is None:
            return False
        ctx = Context(loop.body, cp)
        ctx.req = self._required(ctx)
        carried = sorted(v for v in self._iteration_live_in(loop, ctx) & cp.assigned if v != loop.var)
        scalars = all(isinstance(self.types.get(v), (nt.Number, nt.Boolean)) for v in carried)
        if alone:
            carried = []          # iterations that run at once: checkpointed, nothing saved per iteration
        elif not scalars or not self._checkpoint_pays(loop, ctx, len(carried)):
            return False
        cp.carried = carried
        self.checkpoints[loop.uid] = cp
        self.inner[loop.uid] = ctx
        self.value_reads |= _value_reads(loop.body) - cp.scratch - cp.stale     # the re-run reads them again
        self.iteration_reads[loop.uid] = self._iteration_live_in(loop, ctx)
        for outer in self._checkpoints_around(loop):          # (outermost first: each reads the next's facts)
            self.inner[outer.uid].req = self._required(self.inner[outer.uid])
            self.iteration_reads[outer.uid] = self._iteration_live_in(outer, self.inner[outer.uid])
        self.top.req = self._required(self.top)
        return True

    def _plans_loops_inside(self, loop):
        """Are the loops inside checkpointed `loop` considered for checkpoints of their own? Where storage
        cannot grow (a GPU thread, whose saves are device memory traffic), inside a parallel loop whose
        iterations run again from nothing saved: a step run once more costs less than the values it
        would save. (Such an inner loop is checkpointed only if it writes no arrays: `_consider_checkpoint`.)"""
        return not self.policy.growable and loop.parallel and not self.checkpoints[loop.uid].carried

    def _checkpoints_around(self, loop):
        """The checkpointed loops whose bodies hold `loop`, outermost first."""
        return [self.checkpoints[uid].loop for uid in self.checkpoints
                if uid != loop.uid and any(t.uid == loop.uid for t in walk(self.checkpoints[uid].loop.body))]

    def _iteration_live_in(self, loop, ctx):
        """Names one reversed iteration of checkpointed `loop` reads before binding them: those its
        re-run reads first (a value it saves is read where it is saved), and those the iteration's
        adjoint reads that the re-run may leave unbound."""
        rerun = live_in(loop.body, set(), gen=lambda s: self._rerun_reads(s, ctx))
        back = set().union(*(self._reverse_reads(s) for s in walk(loop.body)))
        if loop.phase:      # (restoring an external array's region reads none of its values)
            back -= ctx.checkpoint.stale | ctx.checkpoint.external
        return (rerun | (back - _bound_on_every_path(loop.body))) & set(self.types)

    def _rerun_reads(self, s, ctx):
        """Names statement `s` reads as an iteration runs again in the adjoint (None: the re-run leaves
        it out, as an index check or a write into an array the iteration never reads)."""
        if isinstance(s, Effect) or written_array(s) in ctx.checkpoint.external or defines(s) & ctx.checkpoint.stale:
            return None
        out = set(statement_reads(s))
        v = self.bound(s)
        if v is not None and self.saves(s, ctx):
            out.add(v)
        return out

    def _reverse_reads(self, s):
        """Names the reverse of `s` itself reads (its adjoint, the restore before it, its loop or branch)."""
        if has_adjoint(s):
            out = set(self.local.reads(s)[1])
            if written_array(s) is not None:
                out |= names_in(region(s))
            if s.uid in self.undo:
                out |= names_in(self.undo[s.uid].value)
            if rebound(s) in self.facts.shape_varying:
                out.add(rebound(s))
            return out
        if isinstance(s, If):
            return names_in(s.cond)
        if isinstance(s, For):
            out = set().union(*(names_in(e) for e in (s.start, s.stop, s.step)))
            return out.union(*(names_in(t.value) for t in self.facts.replay.get(s.uid, ())))
        return set()

    def _adjoint_reads(self, loop):
        """Names the adjoints of `loop`'s statements read."""
        return set().union(*(self.local.reads(s)[1] for s in walk(loop.body) if has_adjoint(s)))

    def _checkpoint_pays(self, loop, inner, carried):
        """Does checkpointing `loop` (`inner`: the Context of its iterations) save fewer values than
        taping it, by half where saving costs less than running again (see `_consider_checkpoint`)?"""
        around = self._checkpoints_around(loop)
        taped = self._saves_in(loop.body, self.inner[around[-1].uid] if around else self.top)
        if not self.policy.keeps_results:
            return carried < taped
        return 2 * (carried + self._saves_in(loop.body, inner)) <= taped

    def _saves_in(self, body, ctx):
        """Values `body` saves per run under the save analysis of `ctx` (a save in an inner loop counts ten)."""
        def cost(stmts, weight):
            total = 0
            for s in stmts:
                total += weight if self.saves(s, ctx) else 0
                inner = weight * 10 if isinstance(s, (For, While)) else weight
                total += sum(cost(b, inner) for b in blocks(s))
            return total
        return cost(body, 1)

    # ---- decisions --------------------------------------------------------------------------------
    def bound(self, s):
        """The name statement `s` overwrites (a While: its trip counter; `v += e`: `v`)."""
        if isinstance(s, While):
            return self.counters[s.uid]
        if isinstance(s, For):
            return s.var
        if isinstance(s, Accumulate) and isinstance(s.target, Name):
            return s.target.id
        return rebound(s)

    def needs_old(self, s, ctx, req=None):
        """Does the reverse sweep need the value `s` overwrites (the name it binds)? `req`: the names
        required before `s`, when the save analysis of `ctx` is still running."""
        v = self.bound(s)
        if v is None or v in self.facts.private | self.facts.invariant | self.facts.replayed:
            return False
        req = ctx.req.get(s.uid, frozenset()) if req is None else req
        return v in req or (rebound(s) == v and v in self.reads(s, ctx))

    def undoes(self, s, ctx):
        """The statement undoing `s` in the reverse sweep, where the old value is needed (else None)."""
        return self.undo[s.uid] if s.uid in self.undo and self.needs_old(s, ctx) else None

    def saves(self, s, ctx):
        """Does the forward save what `s` overwrites? (Undone increments and checkpointed loops keep
        nothing here; a checkpointed loop saves what it binds on entry, see `entry_saves`.)"""
        if written_array(s) is not None:
            return self.saves_region(s, ctx)
        if isinstance(s, If) or s.uid in self.undo or self.is_checkpoint_in(s, ctx):
            return False
        return self.needs_old(s, ctx)

    def saves_region(self, s, ctx):
        """Does the forward save the array region `s` overwrites (a store, a restore into a region, an
        accumulation into one)? An external array of a checkpointed loop is decided for the whole loop,
        by the code around it."""
        array = written_array(s)
        if self.is_external(s, ctx):
            req = self.top.req.get(ctx.loop.uid, frozenset())
        else:
            req = ctx.req.get(s.uid, frozenset())
        sharing = self.may(array)                   # the memory, whatever its name
        if len(sharing) > 1 and sharing & self.value_reads:
            return True     # buffers rotated by rebinding: an earlier binding, restored later, may still need it
        return any(a in self.value_reads and a in req for a in sharing)

    def is_external(self, s, ctx):
        """Does `s` write into an array its checkpointed iteration never reads?"""
        return ctx.checkpoint is not None and written_array(s) in ctx.checkpoint.external

    def region_context(self, s, ctx):
        """The context whose storage a saved region goes to (an external array's: the forward's)."""
        return self.top if self.is_external(s, ctx) else ctx

    def entry_saves(self, loop, ctx):
        """Names a checkpointed loop binds whose values before it the code before it still reads."""
        req = ctx.req.get(loop.uid, frozenset())
        keep = self.facts.private | self.facts.invariant
        return [v for v in sorted(self.checkpoints[loop.uid].assigned) if v in req and v not in keep]

    def once(self, s, ctx):
        """Does `s` run at most once per run of its context's code (no loop in between)?"""
        inner = self.facts.innermost.get(s.uid)
        return inner is None if ctx.loop is None else inner is not None and inner.uid == ctx.loop.uid

    def replays(self, loop):
        """The statements recomputed atop each reversed iteration of `loop`."""
        return self.facts.replay.get(loop.uid, [])

    def may(self, a):
        """The names that may share `a`'s memory, `a` included."""
        return self.fn.facts.of(Aliasing).may.get(a, {a})


def has_adjoint(s):
    """Statements whose own adjoint `LocalAdjoints.of` builds (the others are control flow)."""
    return isinstance(s, (Assign, Store, Accumulate, Push, Pop))


def rebound(s):
    """The name an assignment or a pop into a name binds anew (None for other statements)."""
    if isinstance(s, Assign):
        return s.target
    if isinstance(s, Pop) and isinstance(s.target, Name):
        return s.target.id
    return None


def region(s):
    """The array region statement `s` writes into (`a[i]` of a store, or of a Pop / an Accumulate)."""
    if isinstance(s, Store):
        return Subscript(Name(s.array), s.index)
    return s.target


def _value_reads(stmts):
    """Names whose element values `stmts` read (index checks read only shapes)."""
    out = set()
    for t in walk(stmts):
        if not isinstance(t, Effect):
            for e in own_exprs(t):
                out |= value_names(e)
    return out


def _bound_on_every_path(stmts):
    """Names `stmts` bind whatever path runs (a loop's index counted as bound: it is read only inside)."""
    out = set()
    for s in stmts:
        if isinstance(s, If):
            out |= _bound_on_every_path(s.body) & _bound_on_every_path(s.orelse)
        elif isinstance(s, For):
            out.add(s.var)
            out |= {t.var for t in walk(s.body) if isinstance(t, For)}
        elif not isinstance(s, While):
            out |= defines(s)
    return out


def _rerun_is_countable(loop):
    """Are the saves of `loop`'s iterations, run again in the adjoint, counted by the trip counts of
    loops whose bounds the iteration does not bind? (No while loop, no inner bound computed in it.)"""
    bound = assigned(loop.body) | {loop.var}
    for t in walk(loop.body):
        if isinstance(t, While):
            return False
        if isinstance(t, For) and set().union(*(names_in(e) for e in (t.start, t.stop, t.step))) & bound:
            return False
    return True
