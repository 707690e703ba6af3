"""Reverse mode in split form: a forward that saves, an adjoint that runs the statements backwards.

`reverse(fn, policy)` takes a typed primal with its activity and returns two
IR functions:

* the *forward*: the primal plus what the reverse sweep will need, returning
  `(outputs, saved)`. `saved` holds the final values the reverse sweep reads,
  the locals single saves went to, and the stacks (each with its height).
  Its scalar stacks are also parameters (`workspace`): the caller hands in
  buffers kept from an earlier call, so a gradient in a loop does not
  allocate its saves afresh each time.
* the *adjoint*: takes the primal's arguments, the entries of `saved` and one
  cotangent per output, and returns the gradient of each active argument.
  Where the forward overwrote a value the reverse sweep brings it back (pop,
  undo or replay: see `saving`), then runs the statement's adjoint
  (`LocalAdjoints`). Loops run backwards (a while loop as many times as the
  forward counted); a checkpointed loop runs each iteration again from its
  saved start, saving into stacks of its own, then reverses it.

Both are plain IR, so they can be cleaned up, printed for any target, and
differentiated again.
"""
from dataclasses import replace

from numba.core import types as nt

from ..analysis.types import placeholder, rank, type_of
from ..ir import (Accumulate, Assign, BinOp, Call, Const, Effect, For, Function, If, Name, Pop, Push, Reserve,
                  Stack, Store, Subscript, Tuple, While)
from ..ir.facts import Activity, Aliasing, Facts, OptionalValues, Reverse
from ..ir.visit import all_blocks, blocks, clone, names_in, own_exprs, walk, written_array
from ..opt.cleanup import live_in
from .local import LocalAdjoints, value_names
from .parallel import carries_only_sums, rerun_alone, reversed_in_parallel
from .saving import (CPU, Unsized, checkpoint_candidate, loop_facts, refuse_unsized, required_before, reserve_room,
                     save_sizes, undo_of)

# How the forward of a statement is generated: with its saves, without them (the iterations of a
# checkpointed loop in the forward), or as the re-run of a checkpointed iteration inside the adjoint.
FORWARD, PLAIN, RERUN = "forward", "plain", "rerun"


def reverse(fn, policy=CPU):
    """(forward, adjoint) IR functions of `fn` (typed, with activity and aliasing facts)."""
    return _Reverse(fn, policy).run()


class _Context:
    """Statements whose saves are planned together: the function body, or the body of a
    checkpointed loop (one iteration, re-run in the adjoint). `req` is their save analysis."""

    def __init__(self, body, checkpoint=None):
        self.body = body
        self.checkpoint = checkpoint
        self.req = {}
        self.locals = {}          # (id(stmt), kind, name) -> the local the value is saved in
        self.stacks = {}          # (name, kind, item type) -> stack name

    @property
    def loop(self):
        return self.checkpoint.loop if self.checkpoint is not None else None


class _Reverse:
    def __init__(self, fn, policy):
        self.fn = fn
        self.policy = policy
        self.types = fn.types
        self.facts = loop_facts(fn)
        self.local = LocalAdjoints(fn, self.facts.shape_varying)
        self.active = fn.facts.of(Activity).active
        self.undo = {id(s): u for s in walk(fn.body) if (u := undo_of(s, self.types, self.facts.stable))}
        self.counters = {}           # id(While) -> the name counting its iterations
        for s in walk(fn.body):
            if isinstance(s, While):
                self.counters[id(s)] = fn.names.fresh("n_iter")
                self.types[self.counters[id(s)]] = nt.intp
        self.value_reads = set().union(*(self.local.reads(s)[0] for s in walk(fn.body) if _has_adjoint(s)))
        self.top = _Context(fn.body)
        self.owner = {id(s): self.top for s in walk(fn.body)}
        self.checkpoints = {}        # id(For) -> its Checkpoint
        self.saved_locals = []       # locals of the forward that go into `saved`
        self.restored = set()        # arrays the adjoint writes saved regions back into
        self.rebinds = []            # statements of the adjoint bringing back a saved binding of a name
        self.stacks = {self.top: {}}
        self.top.req = self._required(self.top)
        for s in walk(fn.body):
            if isinstance(s, For) and self.owner[id(s)] is self.top:
                self._consider_checkpoint(s)

    # ---- the save analysis ----------------------------------------------------------------------
    def _required(self, ctx):
        """The save analysis of `ctx`'s statements (stored per statement in `ctx.req`)."""
        req, end = required_before(ctx.body, lambda s: self._reads(s, ctx), self._kills, self._after,
                                   lambda s: self._is_checkpoint_in(s, ctx))
        req["end"] = end
        return req

    def _is_checkpoint_in(self, s, ctx):
        """Is `s` a checkpointed loop nested in `ctx` (opaque to its save analysis)?"""
        return id(s) in self.checkpoints and s is not ctx.loop

    def _reads(self, s, ctx):
        """Names whose values before `s` the reverse of `s` reads."""
        if _has_adjoint(s):
            out = set(self.local.reads(s)[1])
            v = _rebound(s)
            if v in self.facts.shape_varying and v in self.active:
                out.add(v)            # its adjoint is made again shaped like the previous binding
            array = written_array(s)
            if array in self.facts.multi and self._may(array) & self.value_reads:
                out.add(array)        # a saved region goes back into the array this name is bound to now
            return frozenset(out - self.facts.replayed)
        if self._is_checkpoint_in(s, ctx):
            cp = self.checkpoints[id(s)]
            return frozenset(self._iteration_live_in(s) - cp.assigned - self.facts.replayed)
        return frozenset()

    def _kills(self, s):
        if id(s) in self.checkpoints:
            return frozenset(self.checkpoints[id(s)].assigned)
        bound = _bound(s, self.counters)
        return frozenset({bound} - self.facts.replayed) if bound is not None else frozenset()

    def _after(self, s, req):
        """Names the reverse of `s` reads in the state after it (`req`: those required before it)."""
        if isinstance(s, If):
            return frozenset(names_in(s.cond) - self.facts.replayed)
        if isinstance(s, For):
            bounds = set().union(*(names_in(e) for e in (s.start, s.stop, s.step)))
            replayed = set().union(*(names_in(t.value) for t in self.facts.replay.get(id(s), ())))
            return frozenset((bounds | replayed) - self.facts.replayed - {s.var})
        if isinstance(s, While):
            return frozenset({self.counters[id(s)]})
        if id(s) in self.undo and self._needs_old(s, self.owner[id(s)], req):
            return frozenset(names_in(self.undo[id(s)].value))
        return frozenset()

    def _iteration_live_in(self, loop):
        """Names one reversed iteration of checkpointed `loop` reads before binding them."""
        inner = self.owner[id(loop.body[0])]
        code = self._forward_block(loop.body, inner, RERUN) + self._reverse_block(loop.body, inner)
        cp = self.checkpoints[id(loop)]
        adjoints = set(self.local.d.values())
        return (live_in(code, adjoints | (set(self.types) - cp.assigned)) - adjoints) & set(self.types)

    # ---- checkpointing --------------------------------------------------------------------------
    def _consider_checkpoint(self, loop):
        """Checkpoint `loop` when that saves fewer values per iteration than taping it. Not where storage
        cannot grow: the saves of an iteration run again in the adjoint depend on values it restores
        there (`n = pop(...)` before `for j in range(n)`), which the call cannot count beforehand."""
        cp = checkpoint_candidate(self.fn, loop, self.facts, self.active) if self.policy.growable else None
        if cp is None:
            return
        taped = self._tape_cost(loop)
        ctx = _Context(loop.body, cp)
        self.stacks[ctx] = {}
        for s in walk(loop.body):
            self.owner[id(s)] = ctx
        self.checkpoints[id(loop)] = cp
        ctx.req = self._required(ctx)
        cp.carried = sorted(v for v in self._iteration_live_in(loop) & cp.assigned if v != loop.var)
        scalars = all(isinstance(self.types.get(v), (nt.Number, nt.Boolean)) for v in cp.carried)
        if loop.parallel and carries_only_sums(loop, self._adjoint_reads(loop)):
            cp.carried = []       # iterations that run at once: checkpointed, nothing saved per iteration
        elif len(cp.carried) >= taped or not scalars:
            del self.checkpoints[id(loop)]
            del self.stacks[ctx]
            for s in walk(loop.body):
                self.owner[id(s)] = self.top
            return
        self.value_reads |= _value_reads(loop.body) - cp.scratch    # the re-run reads them again
        self.top.req = self._required(self.top)

    def _adjoint_reads(self, loop):
        """Names the adjoints of `loop`'s statements read."""
        return set().union(*(self.local.reads(s)[1] for s in walk(loop.body) if _has_adjoint(s)))

    def _tape_cost(self, loop):
        """Values saved per iteration of `loop` if it is taped (a save in an inner loop counts ten)."""
        def cost(stmts, weight):
            total = 0
            for s in stmts:
                total += weight if self._saves(s) else 0
                inner = weight * 10 if isinstance(s, (For, While)) else weight
                total += sum(cost(b, inner) for b in blocks(s))
            return total
        return cost(loop.body, 1)

    # ---- save decisions -------------------------------------------------------------------------
    def _needs_old(self, s, ctx, req=None):
        """Does the reverse sweep need the value `s` overwrites (the name it binds)? `req`: the names
        required before `s`, when the save analysis of `ctx` is still running."""
        v = _bound(s, self.counters)
        if v is None or v in self.facts.private | self.facts.invariant | self.facts.replayed:
            return False
        req = ctx.req.get(id(s), frozenset()) if req is None else req
        return v in req or (_rebound(s) == v and v in self._reads(s, ctx))

    def _saves(self, s):
        """Does the forward save what `s` overwrites? (Undone increments and checkpointed loops
        keep nothing here; a checkpointed loop saves what it binds on entry, see `_entry_saves`.)"""
        ctx = self.owner[id(s)]
        if written_array(s) is not None:
            return self._saves_region(s)
        if isinstance(s, If) or id(s) in self.undo or self._is_checkpoint_in(s, ctx):
            return False
        return self._needs_old(s, ctx)

    def _saves_region(self, s):
        """Does the forward save the array region `s` overwrites (a store, a restore into a region,
        an accumulation into one)? An external array of a checkpointed loop is decided for the whole
        loop, by the code around it."""
        ctx = self.owner[id(s)]
        array = written_array(s)
        if ctx.checkpoint is not None and array in ctx.checkpoint.external:
            req = self.top.req.get(id(ctx.loop), frozenset())
        else:
            req = ctx.req.get(id(s), frozenset())
        sharing = self._may(array)                  # the memory, whatever its name
        if len(sharing) > 1 and sharing & self.value_reads:
            return True     # buffers rotated by rebinding: an earlier binding, restored later, may still need it
        return any(a in self.value_reads and a in req for a in sharing)

    def _region_ctx(self, s):
        """The context whose storage a saved region goes to (an external array's: the forward's)."""
        ctx = self.owner[id(s)]
        return self.top if ctx.checkpoint is not None and written_array(s) in ctx.checkpoint.external else ctx

    def _entry_saves(self, loop):
        """Names a checkpointed loop binds whose values before it the code before it still reads."""
        ctx = self.owner[id(loop)]
        req = ctx.req.get(id(loop), frozenset())
        keep = self.facts.private | self.facts.invariant
        return [v for v in sorted(self.checkpoints[id(loop)].assigned) if v in req and v not in keep]

    # ---- storage --------------------------------------------------------------------------------
    def _once(self, s, ctx):
        """Does `s` run at most once per run of its context's code (no loop in between)?"""
        return self.facts.innermost.get(id(s)) is ctx.loop

    def _stack(self, ctx, name, kind, item):
        key = (name, kind, item)       # regions of other ranks or layouts go to stacks of their own
        if key not in ctx.stacks:
            base = {"value": f"{name}_stack", "elem": f"{name}_elems", "region": f"{name}_regions"}[kind]
            stack = self.fn.names.fresh(base if ctx is self.top else base + "_it")
            ctx.stacks[key] = stack
            self.stacks[ctx][stack] = Stack(item, self.fn.names.fresh(f"{stack}_top"))
        return ctx.stacks[key]

    def _save(self, s, ctx, value, target, kind, item, once=None):
        """(forward statements saving `value`, reverse statements restoring it into `target`)."""
        name = target.id if isinstance(target, Name) else target.base.id
        if isinstance(target, Subscript) and ctx is self.top:
            self.restored.add(name)
        if self._once(s, ctx) if once is None else once:
            key = (id(s), kind, name)
            if key not in ctx.locals:
                ctx.locals[key] = self.fn.names.fresh(f"{name}_saved")
                self.types[ctx.locals[key]] = item
                if ctx is self.top:
                    self.saved_locals.append(ctx.locals[key])
            keep = ctx.locals[key]
            save = Assign(keep, value, s.origin)
            restore = Assign(name, Name(keep), s.origin) if isinstance(target, Name) else \
                Store(name, target.index, Name(keep), s.origin)
        else:
            stack = self._stack(ctx, name, kind, item)
            save, restore = Push(stack, value, s.origin), Pop(stack, target, s.origin)
        if isinstance(target, Name):
            self.rebinds.append(restore)
        return [save], [restore]

    def _value_save(self, s, ctx, v, once=None):
        return self._save(s, ctx, Name(v), Name(v), "value", _saved_type(self.types[v]), once)

    def _region_save(self, s):
        ctx = self._region_ctx(s)
        view = _region(s)
        region = type_of(self.fn, view)
        if isinstance(region, nt.Array):
            return self._save(s, ctx, Call("np.copy", (view,)), view, "region", nt.Array(region.dtype, region.ndim, "C"))
        return self._save(s, ctx, view, view, "elem", region)

    # ---- forward --------------------------------------------------------------------------------
    def _forward_block(self, stmts, ctx, mode=FORWARD):
        out = []
        for s in stmts:
            out += self._forward_stmt(s, ctx, mode)
        return out

    def _forward_stmt(self, s, ctx, mode):
        if self._is_checkpoint_in(s, ctx):
            return self._forward_checkpoint(s, ctx)
        saving = mode != PLAIN
        if written_array(s) is not None:
            external = ctx.checkpoint is not None and written_array(s) in ctx.checkpoint.external
            if mode == RERUN and external:
                return []            # a re-run leaves the arrays it only writes alone
            if self._saves_region(s) and (saving or external):
                return self._region_save(s)[0] + [_copy(s)]
            return [_copy(s)]
        if isinstance(s, (Assign, Accumulate, Pop)):
            v = _bound(s, self.counters)
            return (self._value_save(s, ctx, v)[0] if v and saving and self._saves(s) else []) + [_copy(s)]
        if isinstance(s, (Push, Reserve)):
            return [_copy(s)]
        if isinstance(s, Effect):            # an index check: the re-run repeats none
            return [] if mode == RERUN else [_copy(s)]
        if isinstance(s, If):
            return [If(s.cond, self._forward_block(s.body, ctx, mode), self._forward_block(s.orelse, ctx, mode),
                       s.origin)]
        if isinstance(s, For):
            pre = self._value_save(s, ctx, s.var)[0] if saving and self._saves(s) else []
            body = self._forward_block(s.body, ctx, mode)
            return pre + [For(s.var, s.start, s.stop, s.step, body, s.origin, parallel=s.parallel)]
        if isinstance(s, While):
            counter = self.counters[id(s)]
            pre = self._value_save(s, ctx, counter)[0] if saving and self._saves(s) else []
            body = [Assign(counter, BinOp("+", Name(counter), Const(1)), s.origin)] + \
                self._forward_block(s.body, ctx, mode)
            return pre + [Assign(counter, Const(0), s.origin), While(s.cond, body, s.origin, s.bound)]
        raise TypeError(f"no forward for {s!r}")

    def _forward_checkpoint(self, loop, ctx):
        """A checkpointed loop in the forward: each iteration saves the scalars it starts from, and
        nothing else but the old values of arrays it writes that the code before it reads."""
        cp = self.checkpoints[id(loop)]
        inner = self.owner[id(loop.body[0])]
        pre = [t for v in self._entry_saves(loop) for t in self._value_save(loop, ctx, v)[0]]
        starts = [t for v in cp.carried for t in self._value_save(loop, ctx, v, once=False)[0]]
        body = starts + self._forward_block(loop.body, inner, PLAIN)
        return pre + [For(loop.var, loop.start, loop.stop, loop.step, body, loop.origin,
                          parallel=loop.parallel)]

    def _make_room(self, fn):
        """Room for the pushes `fn` makes onto stacks this transform made (not the primal's own: they keep
        the room the transform that made them took). Growable storage: reserved once before the
        outermost statement whose pushes can be counted (`saving.reserve_room`); else each stack is sized
        for the whole run (`Stack.size`), and pushes that cannot be counted are refused."""
        mine = sorted({t.stack for t in walk(fn.body) if isinstance(t, Push)} - set(self.fn.stacks))
        if self.policy.growable:
            fn.body[:] = reserve_room(fn.body, mine, fn.types, fn.names)
            return fn
        try:
            sizes = save_sizes(fn.body, mine, fn.types, fn.names)
        except Unsized as why:
            raise refuse_unsized(self.fn, self.policy, why) from None
        for k, size in sizes.items():
            fn.stacks[k] = replace(fn.stacks[k], size=size)
        return fn

    # ---- reverse --------------------------------------------------------------------------------
    def _reverse_block(self, stmts, ctx):
        out = []
        for s in reversed(stmts):
            out += self._reverse_stmt(s, ctx)
        return out

    def _reverse_stmt(self, s, ctx):
        if self._is_checkpoint_in(s, ctx):
            return self._reverse_checkpoint(s, ctx)
        if isinstance(s, Assign):
            restore = []
            if id(s) in self.undo and self._needs_old(s, ctx):
                restore = [_copy(self.undo[id(s)])]
            elif self._saves(s):
                restore = self._value_save(s, ctx, s.target)[1]
            return restore + self.local.of(s)
        if written_array(s) is not None:
            return (self._region_save(s)[1] if self._saves_region(s) else []) + self.local.of(s)
        if isinstance(s, (Accumulate, Pop, Push)):
            v = _bound(s, self.counters)
            return (self._value_save(s, ctx, v)[1] if v and self._saves(s) else []) + self.local.of(s)
        if isinstance(s, (Reserve, Effect)):
            return []
        if isinstance(s, If):
            body, orelse = self._reverse_block(s.body, ctx), self._reverse_block(s.orelse, ctx)
            return [If(s.cond, body, orelse, s.origin)] if _has_effect(body + orelse) else []
        if isinstance(s, For):
            body = self._replays(s) + self._reverse_block(s.body, ctx)
            restore = self._value_save(s, ctx, s.var)[1] if self._saves(s) else []
            return ([_reversed_loop(s, body)] if _has_effect(body) else []) + restore
        if isinstance(s, While):
            counter = self.counters[id(s)]
            body = self._reverse_block(s.body, ctx)
            restore = self._value_save(s, ctx, counter)[1] if self._saves(s) else []
            loop = For(self.fn.names.fresh("k"), Const(0), Name(counter), Const(1), body, s.origin)
            return ([loop] if _has_effect(body) else []) + restore
        raise TypeError(f"no reverse for {s!r}")

    def _reverse_checkpoint(self, loop, ctx):
        """Each iteration, last first: back to its saved start, run again, reversed."""
        cp = self.checkpoints[id(loop)]
        inner = self.owner[id(loop.body[0])]
        body = [t for v in reversed(cp.carried) for t in self._value_save(loop, ctx, v, once=False)[1]]
        rerun = self._replays(loop) + self._forward_block(loop.body, inner, RERUN)
        back = self._reverse_block(loop.body, inner)
        if loop.parallel and not cp.carried:
            rerun = rerun_alone(self.fn, loop, rerun, back)
        after = [t for v in reversed(self._entry_saves(loop)) for t in self._value_save(loop, ctx, v)[1]]
        parallel = reversed_in_parallel(self.fn, self.local, loop, rerun, back, set(self.stacks[inner]))
        return (parallel or [_reversed_loop(loop, body + rerun + back)]) + after

    def _replays(self, loop):
        return clone(self.facts.replay.get(id(loop), []))

    # ---- the two functions ----------------------------------------------------------------------
    def run(self):
        fn = self.fn
        forward_body = self._forward_block(fn.body, self.top)
        adjoint_body = self._reverse_block(fn.body, self.top)
        final = set(self.top.req["end"]) | {v for v in self.active if isinstance(self.types.get(v), nt.Array)}
        final |= {n for out in fn.outputs for n in names_in(out)}     # what the seeds read (`d_D[n, m] += d_out`)
        final |= set(fn.facts.of(OptionalValues).outputs.values())     # and whether they take it
        final -= self.facts.private | set(fn.params)
        stacks = self.stacks[self.top]
        saved = sorted(final) + self.saved_locals + [n for s in sorted(stacks) for n in (s, stacks[s].top)]
        shared = self._restored_in_place()
        _copy_when_brought_back(adjoint_body, self.rebinds, self.restored - shared, self.types)
        forward = self._make_room(self._forward_function(forward_body, saved, shared))
        return forward, self._make_room(self._adjoint_function(adjoint_body, saved, shared))

    def _restored_in_place(self):
        """Restored arrays whose memory other names (or saved bindings) may share, like buffers rotated by
        rebinding: the adjoint restores their regions in place (a copy of one name would part it from
        the others), so the forward hands out copies of them and an adjoint runs once per forward.
        (Rotations among an argument's memory are refused by the aliasing pass: the rotation reads the
        other names after the write.)"""
        return {a for a in self.restored if len(self._may(a)) > 1}

    def _forward_function(self, body, saved, shared):
        fn = self.fn
        stacks = self.stacks[self.top]
        pushed = {t.value.id for t in walk(body) if isinstance(t, Push) and isinstance(t.value, Name)}
        every = {**fn.stacks, **stacks}
        defaults = sorted((set(saved) | pushed) - set(fn.params) - set(every) - {s.top for s in every.values()})
        init = [Assign(v, placeholder(self.types[v])) for v in defaults]
        handed = [Call("np.copy", (o,)) if names_in(o) & set().union(*(self._may(a) for a in shared)) else o
                  for o in fn.outputs]
        outputs = Tuple(tuple(handed)) if fn.returns_tuple else handed[0]
        workspace = [s for s in sorted(stacks) if not isinstance(stacks[s].item, nt.Array)] \
            if self.policy.growable else []        # sized storage is made by the target, for each call
        return Function(f"{fn.name}_forward", fn.params + workspace, init + body,
                        [outputs, Tuple(tuple(Name(n) for n in saved))], True, dict(self.types),
                        {**fn.stacks, **stacks},
                        Facts(Reverse(saved)), fn.names, workspace, fn.sources)

    def _may(self, a):
        """The names that may share `a`'s memory, `a` included."""
        return self.fn.facts.of(Aliasing).may.get(a, {a})

    def _adjoint_function(self, body, saved, shared):
        fn = self.fn
        d_outs = [fn.names.fresh(f"d_out{k}" if fn.returns_tuple else "d_out") for k in range(len(fn.outputs))]
        params = fn.facts.of(Activity).params
        zeros = [self.local.initial(v) for v in sorted(self.active | set(params), key=lambda n: (n not in params, n))
                 if v not in fn.stacks]
        copies = [Assign(a, Call("np.copy", (Name(a),))) for a in sorted(self.restored - shared)]
        seeds = []
        optional = fn.facts.of(OptionalValues).outputs
        for k, (out, d) in enumerate(zip(fn.outputs, d_outs)):
            seed = self.local.accumulate(out, Name(d), "exact", rank(type_of(fn, out)))
            seeds += [If(Name(optional[k]), [], seed)] if k in optional and seed else seed     # None: no cotangent
        grads, casts = [], []       # gradients are names (so the adjoint can be differentiated again)
        for p in params:
            g = self.local.adjoint_name(p)
            if self.types[p] == nt.float32:       # a float32 scalar's gradient in its dtype
                cast = fn.names.fresh(f"{g}_32")
                self.types[cast] = nt.float32
                casts.append(Assign(cast, Call("np.float32", (Name(g),))))
                g = cast
            grads.append(Name(g))
        types = dict(self.types)
        for v, d in self.local.d.items():
            ty = self.types.get(v)
            types[d] = nt.Array(nt.float64 if ty.dtype == nt.float64 else ty.dtype, ty.ndim, "C") \
                if isinstance(ty, nt.Array) else nt.float64
        for d, out in zip(d_outs, fn.outputs):
            types[d] = type_of(fn, out)
        stacks = {k: v for table in self.stacks.values() for k, v in table.items()}
        stacks.update(fn.stacks)
        for v in self.active & set(fn.stacks):     # pushed in reversed loops: room is made as they go
            d = self.local.adjoint_name(v)
            stacks[d] = Stack(fn.stacks[v].item, fn.names.fresh(f"{d}_top"))
        return Function(f"{fn.name}_adjoint", fn.params + saved + d_outs, copies + zeros + seeds + body + casts,
                        grads, True, types, stacks,
                        # the adjoint reads the primal's arrays as they may share memory there; its own
                        # adjoint arrays share memory with nothing (`Reverse.adjoints`)
                        Facts(Reverse(saved, d_outs, dict(self.stacks[self.top]), set(self.local.d.values()),
                                      bool(shared)), fn.facts.copy().of(Aliasing)),
                        fn.names, [], fn.sources)


def _copy_when_brought_back(body, rebinds, restored, types):
    """An earlier binding of an array the adjoint restores regions into is brought back as a copy: its
    memory belongs to `saved`, which must stay as it was for another run of the adjoint."""
    names = {id(t): t.target.id if isinstance(t, Pop) else t.target for t in rebinds}
    copied = {k for k, n in names.items() if n in restored and isinstance(types.get(n), nt.Array)}
    for block in all_blocks(body):
        block[:] = [u for t in block for u in
                    ([t, Assign(names[id(t)], Call("np.copy", (Name(names[id(t)]),)), t.origin)] if id(t) in copied
                     else [t])]


def _bound(s, counters):
    """The name statement `s` overwrites (a While: its trip counter; `v += e`: `v`)."""
    if isinstance(s, Assign):
        return s.target
    if isinstance(s, For):
        return s.var
    if isinstance(s, While):
        return counters[id(s)]
    if isinstance(s, (Accumulate, Pop)) and isinstance(s.target, Name):
        return s.target.id
    return None


def _rebound(s):
    """The name an assignment or a pop into a name binds anew (None for other statements)."""
    if isinstance(s, Assign):
        return s.target
    if isinstance(s, Pop) and isinstance(s.target, Name):
        return s.target.id
    return None


def _value_reads(stmts):
    """Names whose element values `stmts` read (index checks read only shapes)."""
    out = set()
    for t in walk(stmts):
        if not isinstance(t, Effect):
            for e in own_exprs(t):
                out |= value_names(e)
    return out


def _region(s):
    """The array region statement `s` writes into (`a[i]` of a store, or of a Pop / an Accumulate)."""
    if isinstance(s, Store):
        return Subscript(Name(s.array), s.index)
    return s.target


def _has_adjoint(s):
    """Statements whose own adjoint `LocalAdjoints.of` builds (the others are control flow)."""
    return isinstance(s, (Assign, Store, Accumulate, Push, Pop))


def _copy(s):
    return clone([s])[0]


def _has_effect(stmts):
    return any(not isinstance(t, If) or _has_effect(t.body) or _has_effect(t.orelse) for t in stmts)


def _reversed_loop(s, body):
    """A For running `s`'s iterations in reverse order."""
    if s.step == Const(1):
        stop = Const(s.start.value - 1) if isinstance(s.start, Const) else BinOp("-", s.start, Const(1))
        return For(s.var, BinOp("-", s.stop, Const(1)), stop, Const(-1), body, s.origin)
    if s.step == Const(-1):
        start = Const(s.stop.value + 1) if isinstance(s.stop, Const) else BinOp("+", s.stop, Const(1))
        return For(s.var, start, BinOp("+", s.start, Const(1)), Const(1), body, s.origin)
    trips = Call("srcad.trip_count", (s.start, s.stop, s.step))
    last = BinOp("+", s.start, BinOp("*", BinOp("-", trips, Const(1)), s.step))
    step = Const(-s.step.value) if isinstance(s.step, Const) else BinOp("-", Const(0), s.step)
    return For(s.var, last, BinOp("-", s.start, s.step), step, body, s.origin)


def _saved_type(ty):
    """The type a saved value of type `ty` is kept as: a non-contiguous array (a transpose, a view) as
    layout 'A', since the forward's placeholder (C) and the value unify to it."""
    if isinstance(ty, nt.Array) and ty.layout != "C":
        return nt.Array(ty.dtype, ty.ndim, "A", readonly=not ty.mutable)
    return ty
