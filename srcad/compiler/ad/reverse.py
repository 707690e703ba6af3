"""Reverse mode in split form: a forward that saves, an adjoint that runs the statements backwards.

`reverse(fn, policy)` takes a typed primal with its activity and returns two
IR functions:

* the *forward*: the primal plus what the reverse sweep will need, returning
  `(outputs, saved)`. `saved` holds the final values the reverse sweep reads,
  the locals single saves went to, and the stacks (each with its height).
  Its stacks kept in buffers (`Policy.in_buffer`) are also parameters
  (`workspace`): the caller hands in buffers kept from an earlier call, so a
  gradient in a loop does not allocate its saves afresh each time.
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
from collections import defaultdict
from dataclasses import replace

from numba.core import types as nt

from ..analysis.types import placeholder, rank, type_of
from ..ir import (Accumulate, Assign, BinOp, Call, Const, Effect, For, Function, If, Name, Pop, Push, Reserve,
                  Stack, Store, Subscript, Tuple, While)
from ..ir.facts import Activity, Aliasing, Facts, OptionalValues, Reverse
from ..ir.visit import all_blocks, assigned, clone, defines, names_in, walk, written_array
from .parallel import rerun_alone, reversed_in_parallel
from .plan import SavePlan, region
from .saving import CPU, Unsized, refuse_unsized, reserve_room, save_sizes

# How the forward of a statement is generated: with its saves, without them (the iterations of a
# checkpointed loop in the forward), or as the re-run of a checkpointed iteration inside the adjoint.
FORWARD, PLAIN, RERUN = "forward", "plain", "rerun"


def reverse(fn, policy=CPU):
    """(forward, adjoint) IR functions of `fn` (typed, with activity and aliasing facts)."""
    return _Reverse(fn, policy).run()


class _Reverse:
    """Generates the two functions from the plan, once: each statement's forward with its saves, and
    its reverse with its restores and adjoint."""

    def __init__(self, fn, policy):
        self.fn = fn
        self.policy = policy
        self.plan = SavePlan(fn, policy)
        self.types = fn.types
        self.local = self.plan.local
        self.active = self.plan.active
        self.locals = {}             # (context, statement uid, kind, name) -> the local a value is saved in
        self.stack_of = {}           # (context, name, kind, item type) -> stack name
        self.stacks = defaultdict(dict)    # context -> {stack name: Stack} it saves onto
        self.saved_locals = []       # locals of the forward that go into `saved`
        self.restored = set()        # arrays the adjoint writes saved regions back into
        self.rebinds = []            # statements of the adjoint bringing back a saved binding of a name

    # ---- storage --------------------------------------------------------------------------------
    def _stack(self, ctx, name, kind, item):
        key = (ctx, name, kind, item)       # regions of other ranks or layouts go to stacks of their own
        if key not in self.stack_of:
            base = {"value": f"{name}_stack", "elem": f"{name}_elems", "region": f"{name}_regions"}[kind]
            stack = self.fn.names.fresh(base if ctx is self.plan.top else base + "_it")
            self.stack_of[key] = stack
            made = Stack(item, self.fn.names.fresh(f"{stack}_top"), by_value=self._by_value(ctx, name, kind, item))
            if isinstance(item, nt.Array) and self.policy.in_buffer(made):
                made = replace(made, objects=self.fn.names.fresh(f"{stack}_objects"))
            self.stacks[ctx][stack] = made
        return self.stack_of[key]

    def _by_value(self, ctx, name, kind, item):
        """May a copy of each array saved on this stack stand for it? A region's is a copy already; a
        rebound name's old array may be copied where no other name can see its memory (a write through
        another name would then miss the copy) and it is not the caller's. Only for the stacks the
        forward fills and the adjoint empties: a re-run in the adjoint pushes again over what it popped."""
        if ctx is not self.plan.top or not isinstance(item, nt.Array):
            return False
        return kind == "region" or (kind == "value" and name not in self.fn.params
                                    and self.plan.may(name) == {name})

    def _save(self, s, ctx, value, target, kind, item, once=None):
        """(forward statements saving `value`, reverse statements restoring it into `target`)."""
        name = target.id if isinstance(target, Name) else target.base.id
        if isinstance(target, Subscript) and ctx is self.plan.top:
            self.restored.add(name)
        if self.plan.once(s, ctx) if once is None else once:
            key = (ctx, s.uid, kind, name)
            if key not in self.locals:
                self.locals[key] = self.fn.names.fresh(f"{name}_saved")
                self.types[self.locals[key]] = item
                if ctx is self.plan.top:
                    self.saved_locals.append(self.locals[key])
            keep = self.locals[key]
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

    def _region_save(self, s, ctx):
        ctx = self.plan.region_context(s, ctx)
        view = region(s)
        ty = type_of(self.fn, view)
        if isinstance(ty, nt.Array):
            # (`.copy()`: C order always; `np.copy` keeps a column of a Fortran array 'F', another type)
            return self._save(s, ctx, Call(".copy", (view,)), view, "region", nt.Array(ty.dtype, ty.ndim, "C"))
        return self._save(s, ctx, view, view, "elem", ty)

    # ---- forward --------------------------------------------------------------------------------
    def _forward_block(self, stmts, ctx, mode=FORWARD):
        out = []
        for s in stmts:
            out += self._forward_stmt(s, ctx, mode)
        return out

    def _forward_stmt(self, s, ctx, mode):
        plan = self.plan
        if plan.is_checkpoint_in(s, ctx) and mode != PLAIN:
            return self._forward_checkpoint(s, ctx)
        saving = mode != PLAIN
        if written_array(s) is not None:
            external = plan.is_external(s, ctx)
            if mode == RERUN and external:
                return []            # a re-run leaves the arrays it only writes alone
            if plan.saves_region(s, ctx) and (saving or external):
                return self._region_save(s, ctx)[0] + [_copy(s)]
            return [_copy(s)]
        if isinstance(s, (Assign, Accumulate, Pop)):
            if mode == RERUN and ctx.checkpoint is not None and defines(s) & ctx.checkpoint.stale:
                return []            # nor the values it would compute from them
            v = plan.bound(s)
            return (self._value_save(s, ctx, v)[0] if v and saving and plan.saves(s, ctx) else []) + [_copy(s)]
        if isinstance(s, (Push, Reserve)):
            return [_copy(s)]
        if isinstance(s, Effect):            # an index check: the re-run repeats none
            return [] if mode == RERUN else [_copy(s)]
        if isinstance(s, If):
            return [If(s.cond, self._forward_block(s.body, ctx, mode), self._forward_block(s.orelse, ctx, mode),
                       s.origin)]
        if isinstance(s, For):
            pre = self._value_save(s, ctx, s.var)[0] if saving and plan.saves(s, ctx) else []
            body = self._forward_block(s.body, ctx, mode)
            return pre + [For(s.var, s.start, s.stop, s.step, body, s.origin, s.parallel, s.phase)]
        if isinstance(s, While):
            counter = plan.bound(s)
            pre = self._value_save(s, ctx, counter)[0] if saving and plan.saves(s, ctx) else []
            body = [Assign(counter, BinOp("+", Name(counter), Const(1)), s.origin)] + \
                self._forward_block(s.body, ctx, mode)
            return pre + [Assign(counter, Const(0), s.origin), While(s.cond, body, s.origin, s.bound)]
        raise TypeError(f"no forward for {s!r}")

    def _forward_checkpoint(self, loop, ctx):
        """A checkpointed loop in the forward: each iteration saves the scalars it starts from, and
        nothing else but the old values of arrays it writes that the code before it reads."""
        cp, inner = self.plan.checkpoints[loop.uid], self.plan.inner[loop.uid]
        pre = [t for v in self.plan.entry_saves(loop, ctx) for t in self._value_save(loop, ctx, v)[0]]
        starts = [t for v in cp.carried for t in self._value_save(loop, ctx, v, once=False)[0]]
        body = starts + self._forward_block(loop.body, inner, PLAIN)
        return pre + [For(loop.var, loop.start, loop.stop, loop.step, body, loop.origin, loop.parallel, loop.phase)]

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
        plan = self.plan
        if plan.is_checkpoint_in(s, ctx):
            return self._reverse_checkpoint(s, ctx)
        if isinstance(s, Assign):
            restore = []
            if (undo := plan.undoes(s, ctx)) is not None:
                restore = [_copy(undo)]
            elif plan.saves(s, ctx):
                restore = self._value_save(s, ctx, s.target)[1]
            if self.local.result_read(s) is None:
                return restore + self.local.of(s)
            adjoint = self.local.of(s)                       # it reads what `s` computed: before the restore
            if s.target in plan.facts.shape_varying:         # but its adjoint is made again like the binding
                return adjoint[:-1] + restore + adjoint[-1:]  # restored (`LocalAdjoints.zero`, last)
            return adjoint + restore
        if written_array(s) is not None:
            return (self._region_save(s, ctx)[1] if plan.saves_region(s, ctx) else []) + self.local.of(s)
        if isinstance(s, (Accumulate, Pop, Push)):
            v = plan.bound(s)
            return (self._value_save(s, ctx, v)[1] if v and plan.saves(s, ctx) else []) + self.local.of(s)
        if isinstance(s, (Reserve, Effect)):
            return []
        if isinstance(s, If):
            body, orelse = self._reverse_block(s.body, ctx), self._reverse_block(s.orelse, ctx)
            if not _has_effect(body + orelse):
                return []
            assert not names_in(s.cond) & assigned(s.body + s.orelse), \
                f"the condition of `{s.origin.text if s.origin else s.cond}` is rebound in its own branches: its " \
                f"reverse would test the new value"
            return [If(s.cond, body, orelse, s.origin)]
        if isinstance(s, For):
            body = self._replays(s) + self._reverse_block(s.body, ctx)
            restore = self._value_save(s, ctx, s.var)[1] if plan.saves(s, ctx) else []
            return ([reversed_loop(s, body)] if _has_effect(body) else []) + restore
        if isinstance(s, While):
            counter = plan.bound(s)
            body = self._reverse_block(s.body, ctx)
            restore = self._value_save(s, ctx, counter)[1] if plan.saves(s, ctx) else []
            loop = For(self.fn.names.fresh("k"), Const(0), Name(counter), Const(1), body, s.origin)
            return ([loop] if _has_effect(body) else []) + restore
        raise TypeError(f"no reverse for {s!r}")

    def _reverse_checkpoint(self, loop, ctx):
        """Each iteration, last first: back to its saved start, run again, reversed."""
        cp, inner = self.plan.checkpoints[loop.uid], self.plan.inner[loop.uid]
        body = [t for v in reversed(cp.carried) for t in self._value_save(loop, ctx, v, once=False)[1]]
        rerun = self._replays(loop) + self._forward_block(loop.body, inner, RERUN)
        back = self._reverse_block(loop.body, inner)
        if loop.parallel and not cp.carried:
            rerun = rerun_alone(self.fn, loop, rerun, back)
        after = [t for v in reversed(self.plan.entry_saves(loop, ctx)) for t in self._value_save(loop, ctx, v)[1]]
        parallel = reversed_in_parallel(self.fn, self.local, loop, rerun, back, set(self.stacks[inner]),
                                        self.policy.shared_sums)
        return (parallel or [reversed_loop(loop, body + rerun + back)]) + after

    def _replays(self, loop):
        return clone(self.plan.replays(loop))

    # ---- the two functions ----------------------------------------------------------------------
    def run(self):
        fn = self.fn
        top = self.plan.top
        forward_body = self._forward_block(fn.body, top)
        adjoint_body = self._reverse_block(fn.body, top)
        final = set(top.req["end"]) | {v for v in self.active if isinstance(self.types.get(v), nt.Array)}
        final |= {n for out in fn.outputs for n in names_in(out)}     # what the seeds read (`d_D[n, m] += d_out`)
        final |= set(fn.facts.of(OptionalValues).outputs.values())     # and whether they take it
        final -= self.plan.facts.private | set(fn.params)
        stacks = self.stacks[top]
        saved = sorted(final) + self.saved_locals + [n for s in sorted(stacks) for n in _handed_on(s, stacks[s])]
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
        return {a for a in self.restored if len(self.plan.may(a)) > 1}

    def _forward_function(self, body, saved, shared):
        fn = self.fn
        stacks = self.stacks[self.plan.top]
        pushed = {t.value.id for t in walk(body) if isinstance(t, Push) and isinstance(t.value, Name)}
        every = {**fn.stacks, **stacks}
        storage = {n for k, s in every.items() for n in _handed_on(k, s)}
        defaults = sorted((set(saved) | pushed) - set(fn.params) - storage)
        init = [Assign(v, placeholder(self.types[v])) for v in defaults]
        handed = [Call("np.copy", (o,)) if names_in(o) & set().union(*(self.plan.may(a) for a in shared)) else o
                  for o in fn.outputs]
        outputs = Tuple(tuple(handed)) if fn.returns_tuple else handed[0]
        workspace = [s for s in sorted(stacks) if self.policy.in_buffer(stacks[s])] \
            if self.policy.growable else []        # sized storage is made by the target, for each call
        return Function(f"{fn.name}_forward", fn.params + workspace, init + body,
                        [outputs, Tuple(tuple(Name(n) for n in saved))], True, dict(self.types),
                        {**fn.stacks, **stacks},
                        Facts(Reverse(saved)), fn.names, workspace, fn.sources)

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
                        Facts(Reverse(saved, d_outs, dict(self.stacks[self.plan.top]), set(self.local.d.values()),
                                      bool(shared), set(self.local.guards)), fn.facts.copy().of(Aliasing)),
                        fn.names, [], fn.sources)


def _handed_on(name, stack):
    """The names the forward hands the adjoint for a stack: its storage and height (and the list of the
    arrays kept as objects beside a buffer of copies)."""
    return (name, stack.top) + ((stack.objects,) if stack.objects else ())


def _copy_when_brought_back(body, rebinds, restored, types):
    """An earlier binding of an array the adjoint restores regions into is brought back as a copy: its
    memory belongs to `saved`, which must stay as it was for another run of the adjoint."""
    names = {t.uid: t.target.id if isinstance(t, Pop) else t.target for t in rebinds}
    copied = {k for k, n in names.items() if n in restored and isinstance(types.get(n), nt.Array)}
    for block in all_blocks(body):
        block[:] = [u for t in block for u in
                    ([t, Assign(names[t.uid], Call("np.copy", (Name(names[t.uid]),)), t.origin)] if t.uid in copied
                     else [t])]


def _copy(s):
    return clone([s])[0]


def _has_effect(stmts):
    return any(not isinstance(t, If) or _has_effect(t.body) or _has_effect(t.orelse) for t in stmts)


def reversed_loop(s, body):
    """A For running `s`'s iterations in reverse order (also used to turn a reversed loop back)."""
    if s.step == Const(1):
        stop = Const(s.start.value - 1) if isinstance(s.start, Const) else BinOp("-", s.start, Const(1))
        return For(s.var, BinOp("-", s.stop, Const(1)), stop, Const(-1), body, s.origin)
    if s.step == Const(-1):
        return For(s.var, _plus_one(s.stop), _plus_one(s.start), Const(1), body, s.origin)
    trips = Call("srcad.trip_count", (s.start, s.stop, s.step))
    last = BinOp("+", s.start, BinOp("*", BinOp("-", trips, Const(1)), s.step))
    step = Const(-s.step.value) if isinstance(s.step, Const) else BinOp("-", Const(0), s.step)
    return For(s.var, last, BinOp("-", s.start, s.step), step, body, s.origin)


def _plus_one(e):
    """`e + 1`, folded where `e` is a constant or ends in `- 1`."""
    if isinstance(e, Const):
        return Const(e.value + 1)
    if isinstance(e, BinOp) and e.op == "-" and e.right == Const(1):
        return e.left
    return BinOp("+", e, Const(1))


def _saved_type(ty):
    """The type a saved value of type `ty` is kept as: a non-contiguous array (a transpose, a view) as
    layout 'A', since the forward's placeholder (C) and the value unify to it."""
    if isinstance(ty, nt.Array) and ty.layout != "C":
        return nt.Array(ty.dtype, ty.ndim, "A", readonly=not ty.mutable)
    return ty
