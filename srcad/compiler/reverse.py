"""Reverse mode in split form: a forward that saves, an adjoint that replays backwards.

The forward is the primal plus pushes: before a statement overwrites a value
the adjoint reads, the old value goes on a stack (one per variable; old
array elements on one per array). The adjoint walks the statements in
reverse, pops to restore each overwritten value, then accumulates adjoints
(`d_name`). Which values the adjoint reads is found by generating it and
reading its names back, until that set stops growing, so only what is read
is saved; and only where it is still needed (saves.py: a statement saves the
old value only if the reverse of an earlier statement reads it). Integer
steps `i += c` are undone in the reverse sweep instead of saved.

Two kinds of loops save per iteration only the scalars the iteration starts
from: straight-line scalar bodies (the reverse recomputes the intermediates it
needs), and bodies that rewrite their scratch arrays before reading them (the
reverse re-runs the whole iteration, saving into small `..._it` stacks that
every iteration reuses, then reverses it).
"""
import ast
import copy

from numba.core import types as nt

from .accumulate import hoist_invariant_accumulations
from .activity import rank
from .codegen import Hooks, Writer, emit_block, outputs_src, src, subscript, tidy, tuple_src
from .frontend import TransformError
from .normalize import Assign, For, If, Store, While, defined_names, is_atom, is_tree, leaves, walk
from .rules import ARRAY_RULES, ELEMENTWISE, NONDIFF, OPERATORS
from .saves import required_before, undoable


def np_dtype(ty):
    if isinstance(ty, nt.Boolean):
        return "np.bool_"
    return f"np.{ty}"


def numba_type_src(ty):
    dtype = "boolean" if isinstance(ty.dtype, nt.Boolean) else str(ty.dtype)
    return f'types.Array(types.{dtype}, {ty.ndim}, "{ty.layout}")'


def zero_of(ty):
    if isinstance(ty, nt.Boolean):
        return "False"
    return f"{np_dtype(ty)}(0)"


class Reverse:
    """Plans the saves and writes forward and adjoint source for one Program."""

    def __init__(self, program, analysis, names, fname):
        self.p = program
        self.an = analysis
        self.types = analysis.types
        self.names = names
        self.fname = fname
        self.params = set(program.params)
        for s in walk(program.body):
            if isinstance(s, While):
                self.types[s.counter] = nt.int64
            for n in defined_names(s):
                # Numba prunes branches on constants and leaves their names untyped:
                # the code is dead, any scalar type keeps the generated code valid.
                self.types.setdefault(n, nt.boolean)
        self.d = {}
        self.locals_ = {}
        self.stacks = {}
        self.list_types = {}
        self.multi = self.find_multi()
        self.shape_varying = self.find_shape_varying()
        self.private = self.loop_private()
        self.innermost = {}
        self.map_loops(program.body, None)
        self.invariant = self.loop_invariant()
        # Never change once set: the steps an integer update may be undone by.
        self.stable = self.invariant | (self.params - {n for t in walk(program.body) for n in defined_names(t)})
        self.ctx = None           # the loop whose iteration the adjoint is re-running, if any
        self.req = {}             # id(loop or None) -> {id(stmt): names required before it}
        self.recompute = self.find_recompute_loops()
        self.recompute.update(self.find_rerun_loops())
        self.rec_owner = {}
        for info in self.recompute.values():
            for t in walk(info["body"]):
                old = self.rec_owner.get(id(t))
                if old is None or old is info["loop"] or _inside(old, info["loop"]):
                    self.rec_owner[id(t)] = info["loop"]
        self.fresh_defs = self.first_top_level_defs()
        self.R, self.RV = set(), set()
        self.plan()

    # ---- naming --------------------------------------------------------
    def adj(self, v):
        if v not in self.d:
            self.d[v] = self.names.fresh(f"d_{v}")
        return self.d[v]

    def stack(self, v, kind):
        """(stack, top) names of the values of `v` saved by kind 'value'/'elem'/'slice'.
        While the adjoint re-runs an iteration, its saves go to that loop's own small
        stacks (`..._it`), except old elements of arrays the loop only writes."""
        ctx = self.ctx
        if ctx is not None and kind != "value" and v in self.recompute[id(ctx)]["external"]:
            ctx = None
        key = (v, kind) if ctx is None else (v, kind, id(ctx))
        if key not in self.stacks:
            base = {"value": f"{v}_stack", "elem": f"{v}_elems", "slice": f"{v}_slices"}[kind]
            if ctx is not None:
                base += "_it"
            self.stacks[key] = (self.names.fresh(base), self.names.fresh(f"{base}_top"))
        return self.stacks[key]

    # ---- analysis ------------------------------------------------------
    def find_multi(self):
        count, looped = {}, set()

        def visit(stmts, depth):
            for s in stmts:
                for target in defined_names(s):
                    count[target] = count.get(target, 0) + 1
                    if depth:
                        looped.add(target)
                if isinstance(s, If):
                    visit(s.body, depth)
                    visit(s.orelse, depth)
                elif isinstance(s, (For, While)):
                    visit(s.body, depth + 1)
        visit(self.p.body, 0)
        return {n for n, c in count.items() if c > 1 or n in looped}

    def find_shape_varying(self):
        """Arrays rebound in loops whose shape may change from one binding to the next (slices
        with moving bounds, allocations of varying size, and arrays computed from those). The
        reverse sweep restores each one's previous binding at its definition, so that its adjoint
        is re-created there with the shape the earlier uses need."""
        defs = {}
        for t in walk(self.p.body):
            for n in defined_names(t):
                defs.setdefault(n, []).append(t)
        moving = self.multi | {_loop_var(t) for t in walk(self.p.body) if isinstance(t, (For, While))}
        memo = {}

        def varies(n):
            if n not in memo:
                memo[n] = False
                memo[n] = isinstance(self.types.get(n), nt.Array) and n not in self.params and \
                    any(isinstance(d, Assign) and expr_varies(d.value) for d in defs.get(n, ()))
            return memo[n]

        def expr_varies(e):
            for node in ast.walk(e):
                if isinstance(node, ast.Slice) and any(_names(b) & moving for b in (node.lower, node.upper, node.step)):
                    return True
                if isinstance(node, ast.Call) and getattr(node, "srcad_fn", None) in NONDIFF and \
                        any(_names(a) & moving for a in node.args):
                    return True
                if isinstance(node, ast.Name) and varies(node.id):
                    return True
            return False
        return {n for n in self.multi if varies(n)}

    def loop_private(self):
        """Loop indices defined only by `for` headers and read only inside their
        loops: the reverse loop sets them itself, so they are never saved."""
        headers, other_defs, outside = set(), set(), set()

        def visit(stmts, inside):
            for s in stmts:
                if isinstance(s, For):
                    headers.add(s.var)
                    outside.update(n for n in _stmt_reads(s) if n not in inside)
                    visit(s.body, inside | {s.var})
                    continue
                other_defs.update(defined_names(s))
                outside.update(n for n in _stmt_reads(s) if n not in inside)
                if isinstance(s, If):
                    visit(s.body, inside)
                    visit(s.orelse, inside)
                elif isinstance(s, While):
                    visit(s.body, inside)
        visit(self.p.body, frozenset())
        outside |= {n for a in self.p.outputs for n in _names(a)}
        return headers - other_defs - outside

    def map_loops(self, stmts, loop):
        for s in stmts:
            self.innermost[id(s)] = loop
            if isinstance(s, If):
                self.map_loops(s.body, loop)
                self.map_loops(s.orelse, loop)
            elif isinstance(s, (For, While)):
                self.map_loops(s.body, s)

    def loop_invariant(self):
        """Names assigned once, from constants and never-assigned names only: the same
        value every time, so never saved however often the assignment runs."""
        defs = {}
        for s in walk(self.p.body):
            for n in defined_names(s):
                defs.setdefault(n, []).append(s)
        invariant = set()
        changed = True
        while changed:
            changed = False
            for n, sites in defs.items():
                if n in invariant or len(sites) != 1 or not isinstance(sites[0], Assign) or sites[0].aug:
                    continue
                reads = _stmt_reads(sites[0])
                if all(m not in defs or m in invariant for m in reads) and \
                        not any(isinstance(x, ast.Subscript) for x in ast.walk(sites[0].value)):
                    invariant.add(n)
                    changed = True
        return invariant

    def find_recompute_loops(self):
        """For loops whose body is straight-line scalar code save only the values the
        body starts from (say the state of an integrator) once per iteration; the
        reverse sweep recomputes the iteration's intermediates from them."""
        loops = {}
        for s in walk(self.p.body):
            if not isinstance(s, For) or not s.body:
                continue
            body = s.body
            if not all(isinstance(t, Assign) and not isinstance(self.types.get(t.target), nt.Array)
                       and self.types.get(t.target) is not None and t.target != s.var for t in body):
                continue
            if not any(t.target in self.an.active for t in body):
                continue
            assigned = {t.target for t in body}
            if not all(isinstance(self.types.get(v), (nt.Number, nt.Boolean)) for v in assigned):
                continue
            inside = {id(t) for t in body}
            outside_reads = set()
            outside_defs = set()
            for t in walk(self.p.body):
                if id(t) not in inside:
                    outside_reads |= _stmt_reads(t)
                    outside_defs |= defined_names(t)
            outside_reads |= {n for a in self.p.outputs for n in _names(a)}
            shared = sorted(v for v in assigned if v in outside_reads or v in outside_defs)
            needed, exposed = self.recomputed_statements(body)
            carried = sorted(exposed & assigned)
            loops[id(s)] = {"loop": s, "body": body, "carried": carried, "shared": shared,
                            "needed": {id(t) for t in needed}, "assigned": assigned | {s.var},
                            "rerun": False}
        return loops

    def recomputed_statements(self, body):
        """What the reverse sweep of a straight-line loop body needs from its forward.

        Returns the statements whose values the body's adjoint reads (directly or
        through other such statements), and the names whose value at the start of
        the iteration is read.  A read is matched to the definition that reaches
        it, so `r = sin(r) + y[i]`, whose adjoint reads the *old* r, is not
        recomputed: its r is restored from the iteration's start instead.
        """
        reaching, last = [], {}
        for t in body:
            reaching.append(dict(last))
            last[t.target] = t
        needed, exposed = set(), set()
        for k in range(len(body) - 1, -1, -1):
            t = body[k]
            wanted = set()
            if t.target in self.an.active and not t.nodiff:
                wanted |= self.names_read(self.adjoint_assign(t))[0]
            if id(t) in needed:
                wanted |= _stmt_reads(t)
            for n in wanted:
                if n in reaching[k]:
                    needed.add(id(reaching[k][n]))
                else:
                    exposed.add(n)
        return [t for t in body if id(t) in needed], exposed

    def find_rerun_loops(self):
        """For loops whose body rewrites its scratch arrays before reading them: the forward
        saves only the scalars an iteration starts from; the reverse sweep re-runs the
        iteration (saving into small stacks reused by every iteration) and reverses it."""
        loops, taken = {}, set()
        for s in walk(self.p.body):
            if isinstance(s, For) and id(s) not in taken and id(s) not in self.recompute:
                info = self.rerun_info(s)
                if info:
                    loops[id(s)] = info
                    taken |= {id(t) for t in walk(s.body)}
        return loops

    def rerun_info(self, s):
        inner = list(walk(s.body))
        if any(isinstance(t, Assign) and not isinstance(self.types.get(t.target), (nt.Number, nt.Boolean))
               for t in inner):
            return None
        stored = {t.array for t in inner if isinstance(t, Store)}
        read = set()
        for t in inner:
            read |= (_names(t.index) | _names(t.value)) if isinstance(t, Store) else _stmt_reads(t)
        scratch = stored & read
        external = stored - read
        if not scratch or not all(self.rewritten_first(a, s) for a in scratch):
            return None
        if any(isinstance(t, Store) and t.array in scratch and self.store_kind(t) != "elem" for t in inner):
            return None
        assigned = {n for t in inner for n in defined_names(t)}
        exposed = _exposed(s.body, {s.var})
        carried = sorted((exposed & assigned) - scratch)
        if not all(isinstance(self.types.get(v), (nt.Number, nt.Boolean)) for v in carried):
            return None
        if not any(n in self.an.active for n in assigned | stored):
            return None
        return {"loop": s, "body": s.body, "carried": carried, "shared": sorted(assigned),
                "assigned": assigned | {s.var}, "scratch": scratch, "external": external,
                "rerun": True}

    def rewritten_first(self, a, loop):
        """`a` is a 1-d array allocated once outside `loop` with np.empty/np.zeros(E), used
        nowhere else, and the first statement of the loop's body touching it is
        `for j in range(E): a[j] = <expression not reading a>`."""
        if a in self.params or any(a in _names(o) for o in self.p.outputs):
            return False
        ty = self.types.get(a)
        if not isinstance(ty, nt.Array) or ty.ndim != 1:
            return False
        inside = {id(t) for t in walk(loop.body)}
        allocs = []
        defs = {}
        for t in walk(self.p.body):
            for n in defined_names(t):
                defs[n] = defs.get(n, 0) + 1
        for t in walk(self.p.body):
            if id(t) in inside:
                continue
            if isinstance(t, Assign) and t.target == a:
                allocs.append(t)
            elif a in _stmt_reads(t):
                return False
        if len(allocs) != 1:
            return False
        v = allocs[0].value
        if not (isinstance(v, ast.Call) and src(v.func) in ("np.empty", "np.zeros")
                and len(v.args) == 1 and not v.keywords):
            return False
        size = v.args[0]
        top = {n for t in self.p.body if isinstance(t, Assign) for n in defined_names(t)}
        for n in _names(size):   # the same value wherever it is read: a parameter or set once, at top level
            if defs.get(n, 0) > 1 or (n in self.params and defs.get(n, 0)) or (defs.get(n, 0) and n not in top):
                return False
        for t in loop.body:
            touched = set()
            for u in walk([t]):
                touched |= _stmt_reads(u) | ({u.array} if isinstance(u, Store) else set())
            if a not in touched:
                continue
            if not (isinstance(t, For) and src(t.start) == "0" and src(t.step) == "1"
                    and ast.dump(t.stop) == ast.dump(size)):
                return False
            stores = [u for u in t.body if isinstance(u, Store)]
            if len(stores) != 1 or stores[0].array != a or src(stores[0].index) != t.var:
                return False
            for u in t.body:
                if not isinstance(u, (Assign, Store)):
                    return False
                if isinstance(u, Assign) and u.target in (t.var, a):
                    return False
                if a in ((_names(u.index) | _names(u.value)) if isinstance(u, Store) else _stmt_reads(u)):
                    return False
            return True
        return False

    def first_top_level_defs(self):
        """Top-level assignments whose target holds nothing yet: no need to save the old value."""
        seen, fresh = set(self.params), set()
        for s in self.p.body:
            if isinstance(s, Assign) and s.target not in seen and s.target not in _stmt_reads(s):
                fresh.add(id(s))
            for t in walk([s]):
                seen.update(_stmt_reads(t))
                seen.update(defined_names(t))
        return fresh

    def plan(self):
        """Grow the set of values the adjoint reads, and which statements must save,
        until both are stable."""
        self.variables = {n for n in self.types} | self.params
        for _ in range(50):
            lines = self.adjoint_lines()
            reads, value_reads = self.names_read(lines)
            reads &= self.variables
            value_reads &= self.variables
            req = self.required()
            if reads <= self.R and value_reads <= self.RV and req == self.req:
                break
            self.R |= reads
            self.RV |= value_reads
            self.req = req
        else:
            raise AssertionError("save planning did not converge")
        self.lines = lines

    # ---- what each statement's reverse reads (for saves.required_before) --
    def own_reads(self, s):
        """Names whose values before `s` its adjoint reads."""
        if isinstance(s, Assign):
            lines = self.adjoint_assign(s) if s.target in self.an.active and not s.nodiff else []
            own = {s.target} if s.target in self.shape_varying and s.target in self.an.active else set()
            return frozenset(self.names_read(lines)[1] & self.variables | own)
        if isinstance(s, Store):
            lines = self.rev_store(s, pops=False)
            return frozenset(self.names_read(lines)[1] & self.variables)
        if isinstance(s, (For, While)) and id(s) in self.recompute:
            info = self.recompute[id(s)]
            reads = self.names_read(self.rev_recompute(s))[1] & self.variables
            return frozenset(reads - info["assigned"] - info.get("scratch", set()))
        return frozenset()

    def after_reads(self, s):
        if isinstance(s, If):
            return frozenset({s.cond})
        if isinstance(s, For):
            return frozenset(_stmt_reads(s))
        if isinstance(s, While):
            return frozenset({s.counter})
        u = self.undo(s)
        return frozenset({s.target} | u[1]) if u else frozenset()

    def kills(self, s):
        if isinstance(s, (For, While)) and id(s) in self.recompute:
            return frozenset(self.recompute[id(s)]["assigned"])
        return frozenset(defined_names(s))

    def undo(self, s):
        return undoable(s, self.types, self.stable)

    def required(self):
        """Req before every statement: at top level, and per re-run loop for its body."""
        def opaque(t):
            return id(t) in self.recompute and (self.ctx is None or t is not self.ctx)
        out = {}
        saved = self.ctx
        try:
            self.ctx = None
            out[None] = required_before(self.p.body, self.own_reads, self.kills, self.after_reads, opaque)
            for info in self.recompute.values():
                if info["rerun"]:
                    self.ctx = info["loop"]
                    out[id(info["loop"])] = required_before(info["body"], self.own_reads, self.kills,
                                                            self.after_reads, opaque)
        finally:
            self.ctx = saved
        return out

    def req_before(self, s):
        table = self.req.get(None if self.ctx is None else id(self.ctx), {})
        return table.get(id(s), frozenset())

    def owned(self, s):
        """`s` runs (and saves) in the code being generated now: the forward, or the
        re-run of one iteration of `self.ctx`."""
        return self.rec_owner.get(id(s)) is self.ctx

    def needed_before(self, s, v):
        return v in self.req_before(s) or (isinstance(s, Assign) and v in self.own_reads(s))

    @staticmethod
    def names_read(lines):
        text = "def _f():\n" + "\n".join("    " * (d + 1) + t for d, t, _ in lines) + "\n    pass\n"
        tree = ast.parse(text)
        reads, value_reads, shape_only = set(), set(), set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and src(node.func) == "np.zeros_like":
                shape_only |= {id(a) for a in node.args}
            elif isinstance(node, ast.Attribute) and node.attr in ("shape", "size", "ndim"):
                shape_only.add(id(node.value))
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
                shape_only.add(id(node.value))
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                reads.add(node.id)
                if id(node) not in shape_only:
                    value_reads.add(node.id)
        return reads, value_reads

    def pushes_value(self, v):
        return v in self.R and v in self.multi and v not in self.private and v not in self.invariant

    def undoes_site(self, s):
        return self.owned(s) and self.undo(s) is not None and self.pushes_value(s.target) \
            and id(s) not in self.fresh_defs and self.needed_before(s, s.target)

    def pushes_site(self, s):
        return self.owned(s) and self.pushes_value(s.target) and id(s) not in self.fresh_defs \
            and self.undo(s) is None and self.needed_before(s, s.target)

    def pushes_loop_value(self, s):
        """A for loop saves its index (a while loop its trip counter) on entry."""
        v = _loop_var(s)
        return self.owned(s) and self.pushes_value(v) and v in self.req_before(s)

    def is_external(self, s):
        owner = self.rec_owner.get(id(s))
        info = self.recompute.get(id(owner)) if owner is not None else None
        return info is not None and info["rerun"] and s.array in info["external"]

    def pushes_store(self, s):
        if self.is_external(s):
            return s.array in self.RV
        return self.owned(s) and s.array in self.RV and s.array in self.req_before(s)

    def stored_type(self, s):
        """The type of what Store `s` writes into: an element, or a slice of its array."""
        return self.an.type_of(ast.Subscript(value=ast.Name(id=s.array, ctx=ast.Load()), slice=s.index))

    def store_kind(self, s):
        return "slice" if isinstance(self.stored_type(s), nt.Array) else "elem"

    # ---- adjoint statements ----------------------------------------------
    def err(self, s, what, hint):
        o = s.origin
        return TransformError(f"{o.func} ({o.file}, line {o.line}): {what} in `{o.text}`. Hint: {hint}")

    def adjoint_lines(self):
        out = []
        for k, atom in enumerate(self.p.outputs):
            seed = f"d_out[{k}]" if self.p.returns_tuple else "d_out"
            out += self.accumulate(atom, seed, "exact", rank(self.an.type_of(atom)))
        body = self.rev_block(self.p.body)
        inits = [(0, f"{self.adj(v)} = {self.zero_adj(v)}", None) for v in self.active_order()]
        return inits + [(0, t, None) for _, t, _ in out] + body

    def active_order(self):
        return sorted(self.an.active, key=lambda n: (n not in self.params, n))

    def rev_block(self, stmts):
        out = []
        for s in reversed(stmts):
            out += self.rev_stmt(s)
        return out

    def rev_stmt(self, s):
        comment = [(0, s.origin.comment(), s.origin)]
        if isinstance(s, Assign):
            body = self.pop_value(s.target) if self.pushes_site(s) else []
            if self.undoes_site(s):
                body = [(0, self.undo(s)[0], None)]
            if s.target in self.an.active and not s.nodiff:
                body += self.adjoint_assign(s)
            return comment + body if body else []
        if isinstance(s, Store):
            return self.rev_store(s)
        if isinstance(s, If):
            rb, ro = self.rev_block(s.body), self.rev_block(s.orelse)
            if not rb and not ro:
                return []
            out = [(0, f"if {s.cond}:", s.origin)] + self.indent(rb or [(0, "pass", None)])
            if ro:
                out += [(0, "else:", s.origin)] + self.indent(ro)
            return out
        if isinstance(s, For) and id(s) in self.recompute:
            return self.rev_recompute(s)
        if isinstance(s, (For, While)):
            rb = self.rev_block(s.body)
            pop = self.pop_value(_loop_var(s)) if self.pushes_loop_value(s) else []
            if not rb:
                return pop
            head = f"for {s.var} in {self.reversed_range(s)}:" if isinstance(s, For) else \
                f"for _ in range({s.counter}):"
            return [(0, head, s.origin)] + self.indent(rb) + pop
        raise AssertionError(s)

    def rev_recompute(self, s):
        info = self.recompute[id(s)]
        if info["rerun"]:
            return self.rev_rerun(s)
        body = [(0, "# recompute this iteration from its saved start", None)] if info["needed"] else []
        for v in info["carried"]:
            body += self.pop_value(v)
        saves = {}
        first = set()
        for t in info["body"]:
            if id(t) not in info["needed"]:
                continue
            v = t.target
            if v in self.R and (v in info["carried"] or v in first):
                saves[id(t)] = self.local_name(t, f"{v}_before")
                body.append((0, f"{saves[id(t)]} = {v}", None))
            first.add(v)
            body.append((0, f"{v} = {src(t.value)}", None))
        for t in reversed(info["body"]):
            lines = [(0, f"{t.target} = {saves[id(t)]}", None)] if id(t) in saves else []
            if t.target in self.an.active and not t.nodiff:
                lines += self.adjoint_assign(t)
            if lines:
                body += [(0, t.origin.comment(), t.origin)] + lines
        out = []
        if any(not t.startswith("#") for _, t, _ in body):
            out = [(0, f"for {s.var} in {self.reversed_range(s)}:", s.origin)] + self.indent(body)
        return out + self.pop_on_exit(s, info)

    def rev_rerun(self, s):
        """Reverse one iteration at a time: restore the scalars it started from, run it
        forward again saving into the loop's own stacks, then reverse it."""
        info = self.recompute[id(s)]
        body = [(0, "# run this iteration again from its saved start, then reverse it", None)]
        for v in info["carried"]:
            body += self.pop_value(v)
        outer, self.ctx = self.ctx, s
        try:
            hooks = ForwardHooks(self)
            w = Writer()
            hooks.reserve(s, 0, w, per_iteration=True)
            emit_block(w, info["body"], 0, hooks)
            for text in w.lines:
                stripped = text.lstrip(" ")
                body.append(((len(text) - len(stripped)) // 4, stripped, None))
            body += [(0, "# reverse it", None)] + self.rev_block(info["body"])
            local = [(key, names) for key, names in self.stacks.items() if len(key) == 3 and key[2] == id(s)]
        finally:
            self.ctx = outer
        out = []
        for (v, kind, _), (stack, top) in sorted(local):
            dty = self.types.get(v).dtype if kind == "elem" else self.types.get(v)
            out += [(0, f"{stack} = np.empty(16, {np_dtype(dty)})", None), (0, f"{top} = 0", None)]
        out += [(0, f"for {s.var} in {self.reversed_range(s)}:", s.origin)] + self.indent(body)
        return out + self.pop_on_exit(s, info)

    def pop_on_exit(self, s, info):
        """Restore what the forward of recomputed loop `s` saved on entry, in reverse order."""
        out = []
        for v in reversed(self.shared_saved(info)):
            out += self.pop_value(v)
        if self.pushes_loop_value(s):
            out += self.pop_value(s.var)
        return out

    def shared_saved(self, info):
        """Names the loop overwrites whose old values are needed before it: saved on entry."""
        return [v for v in sorted(info["assigned"] - {info["loop"].var})
                if v in self.req_before(info["loop"]) and self.pushes_value(v)]

    @staticmethod
    def indent(lines):
        return [(d + 1, t, o) for d, t, o in lines]

    def reversed_range(self, s):
        start, stop, step = src(s.start), src(s.stop), src(s.step)
        if step == "1":
            first = int(start) - 1 if start.lstrip("-").isdigit() else tidy(f"{start} - 1")
            return f"range({tidy(f'{stop} - 1')}, {first}, -1)"
        last = f"{start} + (trip_count({start}, {stop}, {step}) - 1) * {step}"
        return f"range({tidy(last)}, {tidy(f'{start} - {step}')}, {tidy(f'-{step}')})"

    def pop_value(self, v):
        stack, top = self.stack(v, "value")
        return [(0, f"{top} -= 1", None), (0, f"{v} = {stack}[{top}]", None)]

    def rev_store(self, s, pops=True):
        out = []
        if pops and self.pushes_store(s):
            stack, top = self.stack(s.array, self.store_kind(s))
            out += [(0, f"{top} -= 1", None), (0, f"{subscript(s.array, s.index)} = {stack}[{top}]", None)]
        if s.array in self.an.active:
            view = subscript(self.adj(s.array), s.index)
            stored_rank = rank(self.stored_type(s))
            if self.reads_own_array(s):
                # NumPy reads the right-hand side completely before writing, so where source and
                # destination may overlap (z[1:] = z[:-1], z[i] = z[j] with i == j) the incoming
                # adjoint is taken out before it is zeroed and passed on.
                g = self.local_name(s, f"g_{s.array}")
                taken = f"{view}.copy()" if stored_rank else view
                out += [(0, f"{g} = {taken}", None), (0, f"{view} = 0.0", None)]
                out += self.accumulate(s.value, g, "reduce", stored_rank)
            else:
                out += self.accumulate(s.value, view, "reduce", stored_rank)
                out.append((0, f"{view} = 0.0", None))
        return [(0, s.origin.comment(), s.origin)] + out if out else []

    def reads_own_array(self, s):
        """Does Store `s` copy from the array it writes into?"""
        v = s.value
        return isinstance(v, ast.Subscript) and isinstance(v.value, ast.Name) and v.value.id == s.array

    def adjoint_assign(self, s):
        v, ty = s.target, self.types.get(s.target)
        contribs = self.contributions(s)
        dv = self.adj(v)
        self_uses = [c for c in contribs if isinstance(c[0], ast.Name) and c[0].id == v]
        others = [c for c in contribs if c not in self_uses]
        out = []
        if not self_uses:
            for atom, expr, mode, r in others:
                out += self.accumulate(atom, expr.replace("\0g", dv), mode, r)
            if v in self.multi:
                out.append((0, f"{dv} = {self.zero_adj(v)}", None))
            return out
        if len(self_uses) == 1 and (self_uses[0][2] == "exact" or rank(ty) == 0):
            for atom, expr, mode, r in others:
                out += self.accumulate(atom, expr.replace("\0g", dv), mode, r)
            new = tidy(self_uses[0][1].replace("\0g", dv))
            if rank(ty) == 0 and self_uses[0][3] > 0:
                new = f"np.sum({new})"
            if new != dv:
                out.append((0, f"{dv} = {new}", None))
            return out
        g = self.local_name(s, f"g_{v}")
        out += [(0, f"{g} = {dv}", None), (0, f"{dv} = {self.zero_adj(v)}", None)]
        for atom, expr, mode, r in contribs:
            out += self.accumulate(atom, expr.replace("\0g", g), mode, r)
        return out

    def local_name(self, stmt, base):
        """One fresh name per statement, stable across the rounds of plan()."""
        key = (id(stmt), base)
        if key not in self.locals_:
            self.locals_[key] = self.names.fresh(base)
        return self.locals_[key]

    def zero_adj(self, v):
        return "np.zeros_like(%s)" % v if isinstance(self.types.get(v), nt.Array) else "0.0"

    def contributions(self, s):
        """(argument atom, adjoint expression with \\0g for the incoming adjoint, mode, rank)."""
        value, out_ty = s.value, self.types.get(s.target)
        out_rank = rank(out_ty)
        if isinstance(value, (ast.Name, ast.Subscript)):
            return [(value, "\0g", "exact", out_rank)]
        if isinstance(value, (ast.Constant, ast.Attribute)):
            return []
        if is_tree(value):
            return self.tree(value, out_ty)
        if isinstance(value, ast.BinOp) and isinstance(value.op, ast.MatMult):
            return self.array_rule(s, "MatMult", [value.left, value.right], None)
        if isinstance(value, ast.Call):
            fn = getattr(value, "srcad_fn", None)
            if fn is None:
                return [(value.func.value, "\0g", "exact", out_rank)]
            if fn in NONDIFF:
                return []
            axis = next((k.value.value for k in value.keywords if k.arg == "axis"
                         and isinstance(k.value, ast.Constant)), None)
            if fn in ARRAY_RULES:
                return self.array_rule(s, fn, value.args, axis)
            if fn in ELEMENTWISE:
                return self.elementwise(s, ELEMENTWISE[fn], value.args, out_ty)
            raise self.err(s, f"no derivative rule for `{fn}`",
                           "wrap it with ad.stop_gradient(...) if it should not be differentiated, "
                           "or write it with supported math/NumPy functions")
        return []

    def subst(self, template, args, module="np"):
        """A rule's expression with the arguments in place of `a`, `b`, `c`, `module` in place of `M`,
        and the incoming adjoint's placeholder in place of `g` (substituted on the parsed expression)."""
        return ast.unparse(_Fill(args, module).visit(ast.parse(template, mode="eval")))

    def tree(self, root, out_ty):
        """Chain rule down an expression tree: one contribution per active leaf,
        the incoming adjoint times the partials along the path to it."""
        all_leaves = leaves(root)
        out_rank = rank(out_ty)
        scalar64 = out_ty == nt.float64 and all(rank(self.an.type_of(a)) == 0 for a in all_leaves)
        module = "math" if scalar64 else "np"
        others_scalar = sum(1 for a in all_leaves if rank(self.an.type_of(a)) > 0) <= 1
        result = []

        def visit(node, factors, negative):
            if is_atom(node):
                if not self.an.is_active(node):
                    return
                mode = "exact" if rank(self.an.type_of(node)) == out_rank and others_scalar else "reduce"
                expr = " * ".join(["\0g"] + [f"({f})" for f in factors])
                result.append((node, ("-" if negative else "") + expr, mode, out_rank))
                return
            children, partials = _children_and_partials(node)
            for child, p in zip(children, partials):
                if p is None or not any(self.an.is_active(a) for a in leaves(child)):
                    continue
                p = self.subst(p, children, module).replace("\0g", "g")
                if p.strip() in ("1", "1.0"):
                    visit(child, factors, negative)
                elif p.strip() in ("-1", "-1.0"):
                    visit(child, factors, not negative)
                else:
                    visit(child, factors + [p], negative)
        visit(root, [], False)
        return result

    def array_rule(self, s, fn, args, axis):
        ranks = [rank(self.an.type_of(a)) for a in args]
        triples = ARRAY_RULES[fn](ranks, axis)
        if triples is None:
            raise self.err(s, f"no derivative rule for `{fn}` on arrays of rank {ranks}",
                           "use explicit loops or a supported form")
        out_rank = rank(self.types.get(s.target))
        result = []
        for k, expr, mode in triples:
            if not self.an.is_active(args[k]):
                continue
            r = ranks[k] if mode in ("exact", "expand") else out_rank
            result.append((args[k], self.subst(expr, args), mode, r))
        return result

    def accumulate(self, atom, expr, mode, expr_rank):
        """Lines adding `expr` into the adjoint of `atom`."""
        if isinstance(atom, (ast.Constant, ast.Attribute)) or not self.an.is_active(atom):
            return []
        if isinstance(atom, ast.Name):
            lhs = self.adj(atom.id)
        else:
            lhs = subscript(self.adj(atom.value.id), atom.slice)
        ra = rank(self.an.type_of(atom))
        expr = tidy(expr)
        if ra == 0 and expr_rank > 0:
            return [(0, f"{lhs} += np.sum({expr})", None)]
        if ra == 0 or expr_rank == 0 or mode in ("exact", "expand"):
            return [(0, f"{lhs} += {expr}", None)]
        return [(0, f"sum_into({lhs}, {expr})", None)]

    # ---- forward -------------------------------------------------------
    def saved_locals(self):
        return sorted(n for n in self.R if n not in self.params and n not in self.private)

    def forward_source(self):
        w = Writer()
        w.line(0, f"def {self.fname}_forward({', '.join(self.p.params)}):")
        for (v, kind), (stack, top) in sorted((k, n) for k, n in self.stacks.items() if len(k) == 2):
            ty = self.types.get(v)
            if kind == "value" and isinstance(ty, nt.Array):
                w.line(1, f"{stack} = List.empty_list({self.list_type(ty)})")
            elif kind == "slice":
                vt = nt.Array(ty.dtype, self.slice_rank(v), "C")
                w.line(1, f"{stack} = List.empty_list({self.list_type(vt)})")
            else:
                dty = ty.dtype if kind == "elem" else ty
                w.line(1, f"{stack} = np.empty(16, {np_dtype(dty)})")
            w.line(1, f"{top} = 0")
        for v in self.saved_locals():
            ty = self.types.get(v)
            if isinstance(ty, nt.Array):
                w.line(1, f"{v} = np.empty({(0,) * ty.ndim}, {np_dtype(ty.dtype)})")
            elif isinstance(ty, (nt.Number, nt.Boolean)):
                w.line(1, f"{v} = {zero_of(ty)}")
            else:
                raise TransformError(f"{self.p.name}: cannot save `{v}` of type {ty} for the reverse sweep. "
                                     "Hint: keep tuples and other non-array values out of differentiated loops")
        emit_block(w, self.p.body, 1, ForwardHooks(self))
        saved = []
        for key in sorted(k for k in self.stacks if len(k) == 2):
            saved += list(self.stacks[key])
        saved += self.saved_locals()
        self.saved_names = saved
        w.line(1, f"return {outputs_src(self.p)}, {tuple_src(saved)}")
        return w

    def slice_rank(self, v):
        for s in walk(self.p.body):
            if isinstance(s, Store) and s.array == v and self.store_kind(s) == "slice":
                return rank(self.stored_type(s))
        return 1

    def list_type(self, ty):
        key = numba_type_src(ty)
        if key not in self.list_types:
            self.list_types[key] = f"T_{self.fname}_{len(self.list_types)}"
        return self.list_types[key]

    def type_defs(self):
        return "".join(f"{name} = {key}\n" for key, name in self.list_types.items())

    # ---- adjoint -------------------------------------------------------
    def adjoint_rank(self, name):
        """The rank of the array behind an adjoint name (None if it is not an array's adjoint)."""
        for v, d in self.d.items():
            if d == name:
                ty = self.types.get(v)
                return ty.ndim if isinstance(ty, nt.Array) else None
        return None

    def adjoint_source(self, active_args):
        w = Writer()
        params = ", ".join(self.p.params + ["saved", "d_out"])
        w.line(0, f"def {self.fname}_adjoint({params}):")
        saved = self.saved_names
        if saved:
            w.line(1, f"{tuple_src(saved)} = saved")
        restored = {s.array for s in walk(self.p.body) if isinstance(s, Store) and self.pushes_store(s)}
        for info in self.recompute.values():
            if info["rerun"]:
                restored |= info["scratch"] & self.R
        restored = sorted(restored)
        for a in restored:
            w.line(1, f"{a} = {a}.copy()")
        for d, t, o in hoist_invariant_accumulations(self.lines, self.names.fresh, self.adjoint_rank):
            if o is not None and t == o.comment():
                w.at(1 + d, o)
                continue
            w.line(1 + d, t, o)
            if t.endswith(":"):
                w.reset()
        grads = []
        for p, act in zip(self.p.params, active_args):
            if not act:
                continue
            ty = self.types.get(p)
            g = self.adj(p)
            grads.append(f"np.float32({g})" if ty == nt.float32 else g)
        w.line(1, f"return {tuple_src(grads)}")
        return w


class ForwardHooks(Hooks):
    """Pushes old values before they are overwritten; counts while-loop trips."""

    def __init__(self, rev):
        self.rev = rev

    def skip(self, s):
        """A re-run iteration leaves arrays it only writes alone: they hold the values
        after it already, and their old elements come off the forward's stack."""
        return self.rev.ctx is not None and isinstance(s, Store) and self.rev.is_external(s)

    def before(self, s, indent, w):
        rev = self.rev
        if isinstance(s, Assign) and rev.pushes_site(s):
            self.push_value(s.target, indent, w, s)
        elif isinstance(s, Store) and rev.pushes_store(s):
            kind = rev.store_kind(s)
            stack, top = rev.stack(s.array, kind)
            old = subscript(s.array, s.index)
            if kind == "elem":
                self.push_scalar(stack, top, old, indent, w, s)
            else:
                w.line(indent, f"{stack}.append({old}.copy())", s.origin)
                w.line(indent, f"{top} += 1", s.origin)
        elif isinstance(s, For):
            if rev.pushes_loop_value(s):
                self.push_value(s.var, indent, w, s)
            if id(s) in rev.recompute:
                if rev.owned(s):
                    self.before_recompute(s, indent, w)
            else:
                self.reserve(s, indent, w)
        elif isinstance(s, While) and s.counter in rev.R and rev.owned(s):
            if rev.pushes_loop_value(s):
                self.push_value(s.counter, indent, w, s)
            w.line(indent, f"{s.counter} = 0", s.origin)

    def loop_top(self, s, indent, w):
        if isinstance(s, While) and s.counter in self.rev.R and self.rev.owned(s):
            w.line(indent, f"{s.counter} += 1", s.origin)
        if isinstance(s, For) and id(s) in self.rev.recompute and self.rev.owned(s):
            for v in self.rev.recompute[id(s)]["carried"]:
                stack, top = self.rev.stack(v, "value")
                w.line(indent, f"{stack}[{top}] = {v}")
                w.line(indent, f"{top} += 1")

    def before_recompute(self, s, indent, w):
        """Save what the loop overwrites for the code around it; reserve one entry per
        carried value and iteration."""
        info = self.rev.recompute[id(s)]
        for v in self.rev.shared_saved(info):
            stack, top = self.rev.stack(v, "value")
            w.line(indent, f"{stack}, {top} = push({stack}, {top}, {v})", s.origin)
        trip = self.trip(s)
        for v in info["carried"]:
            self.reserve_line(*self.rev.stack(v, "value"), trip, indent, w, s)
        if info["rerun"]:
            self.reserve(s, indent, w)

    @staticmethod
    def trip(s):
        start, stop, step = src(s.start), src(s.stop), src(s.step)
        span = stop if start == "0" else tidy(f"{stop} - {start}")
        return f"max({span}, 0)" if step == "1" else f"trip_count({start}, {stop}, {step})"

    def push_value(self, v, indent, w, site):
        stack, top = self.rev.stack(v, "value")
        if isinstance(self.rev.types.get(v), nt.Array):
            w.line(indent, f"{stack}.append({v})")
            w.line(indent, f"{top} += 1")
        else:
            self.push_scalar(stack, top, v, indent, w, site)

    def push_scalar(self, stack, top, value, indent, w, site):
        """Inside a for loop the room was reserved before it: a plain store.
        In a while loop: grow when full. Elsewhere (runs once): the helper."""
        loop = self.rev.innermost.get(id(site))
        if isinstance(loop, For):
            w.line(indent, f"{stack}[{top}] = {value}")
            w.line(indent, f"{top} += 1")
        elif isinstance(loop, While):
            w.line(indent, f"if {top} == {stack}.shape[0]:")
            w.line(indent + 1, f"{stack} = grow({stack}, {top} + 1)")
            w.line(indent, f"{stack}[{top}] = {value}")
            w.line(indent, f"{top} += 1")
        else:
            w.line(indent, f"{stack}, {top} = push({stack}, {top}, {value})")

    def reserve(self, s, indent, w, per_iteration=False):
        """Room for every push of one loop before it starts: none inside it (with
        per_iteration: for one iteration, at its top)."""
        counts = {}

        def visit(stmts):
            for t in stmts:
                if isinstance(t, Assign) and self.rev.pushes_site(t) \
                        and not isinstance(self.rev.types.get(t.target), nt.Array):
                    key = self.rev.stack(t.target, "value")
                elif isinstance(t, Store) and self.rev.pushes_store(t) and self.rev.store_kind(t) == "elem" \
                        and not self.skip(t):
                    key = self.rev.stack(t.array, "elem")
                elif isinstance(t, (For, While)) and self.rev.pushes_loop_value(t):
                    key = self.rev.stack(_loop_var(t), "value")
                else:
                    key = None
                if key:
                    counts[key] = counts.get(key, 0) + 1
                if isinstance(t, If):
                    visit(t.body)
                    visit(t.orelse)
        visit(s.body)
        if not counts:
            return
        trip = "1" if per_iteration else self.trip(s)
        for (stack, top), k in counts.items():
            count = str(k) if per_iteration else trip if k == 1 else f"{k} * {trip}"
            self.reserve_line(stack, top, count, indent, w, s)

    @staticmethod
    def reserve_line(stack, top, count, indent, w, s):
        """Grow (rarely: amortised doubling) only when the loop's pushes would not fit."""
        need = f"{top} + {count}"
        w.line(indent, f"if {need} > {stack}.shape[0]:", s.origin)
        w.line(indent + 1, f"{stack} = grow({stack}, {need})", s.origin)


def _inside(outer, inner):
    return any(t is inner for t in walk(outer.body))


def _exposed(stmts, defined):
    """Names read in `stmts` before being surely assigned there."""
    exposed = set()

    def block(body, defined):
        defined = set(defined)
        for t in body:
            if isinstance(t, If):
                exposed.update(n for n in _stmt_reads(t) if n not in defined)
                defined |= block(t.body, defined) & block(t.orelse, defined)
            elif isinstance(t, For):
                exposed.update(n for n in _stmt_reads(t) if n not in defined)
                block(t.body, defined | {t.var})
            elif isinstance(t, While):
                exposed.update(n for n in _stmt_reads(t) if n not in defined)
                block(t.body, defined | {t.counter})
            elif isinstance(t, Store):
                exposed.update(n for n in _names(t.index) | _names(t.value) if n not in defined)
            else:
                exposed.update(n for n in _stmt_reads(t) if n not in defined)
                defined.add(t.target)
        return defined
    block(stmts, defined)
    return exposed


def _loop_var(s):
    """The name a loop sets every iteration: a for loop's index, a while loop's trip counter."""
    return s.var if isinstance(s, For) else s.counter


def _names(expr):
    return {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)} if expr is not None else set()


def _stmt_reads(s):
    """Names a statement itself reads (not its nested blocks)."""
    if isinstance(s, Assign):
        return _names(s.value)
    if isinstance(s, Store):
        return _names(s.index) | _names(s.value) | {s.array}
    if isinstance(s, If):
        return {s.cond}
    if isinstance(s, For):
        return _names(s.start) | _names(s.stop) | _names(s.step)
    if isinstance(s, While):
        return {s.cond}
    return set()


def _children_and_partials(node):
    """Operands of a tree node and the partial derivative template for each."""
    if isinstance(node, ast.BinOp):
        key = type(node.op).__name__
        partials = OPERATORS[key]
        if key == "Pow" and isinstance(node.right, ast.Constant):
            c = node.right.value
            partials = ("1" if c == 1 else f"{float(c)!r} * a" if c == 2 else
                        f"{float(c)!r} * a ** {float(c - 1)!r}", None)
        return [node.left, node.right], partials
    if isinstance(node, ast.UnaryOp):
        return [node.operand], OPERATORS[type(node.op).__name__]
    return list(node.args), ELEMENTWISE[node.srcad_fn]


class _Fill(ast.NodeTransformer):
    """Fills a rule template's names: a, b, c (the arguments), M (the module), g (the adjoint)."""

    def __init__(self, args, module):
        self.names = {name: arg for name, arg in zip("abc", args)}
        self.module = module

    def visit_Name(self, node):
        if node.id in self.names:
            return copy.deepcopy(self.names[node.id])
        if node.id in ("M", "g"):
            return ast.Name(id=self.module if node.id == "M" else "\0g", ctx=ast.Load())
        return node

