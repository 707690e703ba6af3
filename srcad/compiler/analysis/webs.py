"""One name per web of definitions and uses, so that each name has one type.

A user may rebind a name to a value of another kind (`x = np.sum(x)`: an
array, then a float). Numba types each binding separately; srcad's passes
key types, activity and saves by name. So before typing, definitions that
reach a common use are grouped into webs (reaching definitions over the
structured IR, loops iterated to a fixed point) and every web but the first
of a name gets a fresh name.
"""
from ..ir import Assign, For, If, Store, While
from ..ir.facts import Lowered
from ..ir.visit import names_in, own_exprs, rename_expr, walk


def split_webs(fn):
    """Rename, in place, the webs of `fn`'s names that share a name with another web."""
    finder = _Reaching(fn)
    final = finder.block(fn.body, {p: frozenset({("param", p)}) for p in fn.params})
    for k, out in enumerate(fn.outputs):
        for n in names_in(out):
            finder.use(("output", k, n), n, final)
    parent = {}

    def find(d):
        while parent.get(d, d) != d:
            d = parent[d]
        return d

    for reaching in finder.uses.values():
        first, *rest = sorted(reaching, key=repr)
        for d in rest:
            parent[find(d)] = find(first)
    webs = {}
    for d, name in finder.defs.items():
        webs.setdefault(name, {}).setdefault(find(d), []).append(d)
    renames = {}
    moved = fn.facts.of(Lowered).moved
    for name, groups in webs.items():
        if all(isinstance(finder.statement[d], For) for ds in groups.values() for d in ds):
            continue   # the indices of separate loops: integers all, the user's name kept
        ordered = sorted(groups.values(), key=lambda ds: min(finder.order[d] for d in ds))
        for ds in ordered[1:]:
            new = fn.names.fresh(name, spelled=name)
            if name in moved:
                moved.add(new)
            for d in ds:
                renames[find(d)] = new
    if renames:
        finder.apply(renames, find)
    return fn


class _Reaching:
    """Reaching definitions: `uses[site]` is the set of definitions reaching that use."""

    def __init__(self, fn):
        self.fn = fn
        self.defs = {("param", p): p for p in fn.params}
        self.order = {("param", p): -1 for p in fn.params}
        self.statement = {("param", p): None for p in fn.params}
        self.uses = {}          # site -> frozenset of definitions
        self.sites = {}         # site -> (statement or None, name)

    def define(self, s, name):
        key = ("stmt", id(s))
        self.defs[key] = name
        self.statement[key] = s
        self.order.setdefault(key, len(self.order))
        return key

    def use(self, key, name, state, stmt=None):
        if name in state:
            self.uses[key] = self.uses.get(key, frozenset()) | state[name]
            self.sites[key] = (stmt, name)

    def reads(self, s, state):
        names = set()
        for e in own_exprs(s):
            names |= names_in(e)
        if isinstance(s, Store):
            names.add(s.array)
        for n in names:
            self.use(("read", id(s), n), n, state, s)

    def block(self, stmts, state):
        for s in stmts:
            state = self.stmt(s, state)
        return state

    def stmt(self, s, state):
        state = dict(state)
        if isinstance(s, Assign):
            self.reads(s, state)
            d = self.define(s, s.target)
            if s.inplace and s.target in state:
                # `a op= v` updates the binding it finds (in place, for an array): one web with it
                key = ("inplace", id(s))
                self.uses[key] = self.uses.get(key, frozenset()) | state[s.target] | {d}
                self.sites[key] = (None, s.target)
            state[s.target] = frozenset({d})
        elif isinstance(s, Store):
            self.reads(s, state)
        elif isinstance(s, If):
            self.reads(s, state)
            return _merge(self.block(s.body, state), self.block(s.orelse, state))
        elif isinstance(s, (For, While)):
            if isinstance(s, For):
                self.reads(s, state)
            elif s.bound is not None:       # read on entry
                for n in names_in(s.bound):
                    self.use(("read", id(s), n), n, state, s)
            head = state
            while True:
                inner = dict(head)
                if isinstance(s, For):
                    inner[s.var] = frozenset({self.define(s, s.var)})
                else:
                    self.use(("cond", id(s)), s.cond, inner, s)
                end = self.block(s.body, inner)
                new_head = _merge(head, end)
                if new_head == head:
                    return _merge(head, end)
                head = new_head
        return state

    def apply(self, renames, find):
        """Rename definitions, and every use they reach, in place."""
        per_stmt = {}
        for key, reaching in self.uses.items():
            stmt, name = self.sites[key]
            new = next((renames[find(d)] for d in reaching if find(d) in renames), None)
            if new is not None:
                per_stmt.setdefault(id(stmt) if stmt is not None else key, (stmt, {}))[1][name] = new
        for s in walk(self.fn.body):
            key = ("stmt", id(s))
            if key in self.defs and find(key) in renames:
                new = renames[find(key)]
                if isinstance(s, Assign):
                    s.target = new
                elif isinstance(s, For):
                    s.var = new
        for stmt, mapping in per_stmt.values():
            if stmt is None:
                continue
            _rename_reads(stmt, mapping)
        for key, (stmt, name) in self.sites.items():
            if key[0] == "output":
                new = next((renames[find(d)] for d in self.uses[key] if find(d) in renames), None)
                if new is not None:
                    k = key[1]
                    self.fn.outputs[k] = rename_expr(self.fn.outputs[k], {name: new})


def _rename_reads(s, mapping):
    """Rename the names statement `s` itself reads (not the one it binds)."""
    if isinstance(s, Assign):
        s.value = rename_expr(s.value, mapping)
    elif isinstance(s, Store):
        s.index = tuple(rename_expr(i, mapping) for i in s.index)
        s.value = rename_expr(s.value, mapping)
        s.array = mapping.get(s.array, s.array)
    elif isinstance(s, If):
        s.cond = rename_expr(s.cond, mapping)
    elif isinstance(s, For):
        s.start, s.stop, s.step = (rename_expr(e, mapping) for e in (s.start, s.stop, s.step))
    elif isinstance(s, While):
        s.cond = mapping.get(s.cond, s.cond)
        s.bound = rename_expr(s.bound, mapping) if s.bound is not None else None


def _merge(a, b):
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, frozenset()) | v
    return out
