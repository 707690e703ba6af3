"""One name per web of definitions and uses, so that each name has one type.

A user may rebind a name to a value of another kind (`x = np.sum(x)`: an
array, then a float). Numba types each binding separately; srcad's passes
key types, activity and saves by name. So before typing, definitions that
reach a common use are grouped into webs (reaching definitions over the
structured IR, loops iterated to a fixed point) and every web but the first
of a name gets a fresh name.
"""
import ast

from .normalize import Assign, For, If, Store, While, walk


def split_webs(program):
    """Rename, in place, the webs of `program`'s names that share a name with another web."""
    finder = _Reaching(program)
    final = finder.block(program.body, {p: frozenset({("param", p)}) for p in program.params})
    for k, a in enumerate(program.outputs):
        if isinstance(a, ast.Name):
            finder.use(("output", k), a.id, final,
                       lambda new, k=k: program.outputs.__setitem__(k, ast.Name(id=new, ctx=ast.Load())))
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
    rename = {}
    for name, groups in webs.items():
        if all(isinstance(finder.statement[d], For) for ds in groups.values() for d in ds):
            continue   # the indices of separate loops: integers all, the user's name kept
        ordered = sorted(groups.values(), key=lambda ds: min(finder.order[d] for d in ds))
        for ds in ordered[1:]:
            new = program.names.fresh(name)
            if name in program.moved:
                program.moved.add(new)
            for d in ds:
                rename[d] = new
    if rename:
        finder.apply(rename, find)


class _Reaching:
    """Reaching definitions: `uses[site]` is the set of definitions reaching that use."""

    def __init__(self, program):
        self.program = program
        self.defs = {("param", p): p for p in program.params}
        self.order = {("param", p): -1 for p in program.params}
        self.statement = {("param", p): None for p in program.params}
        self.uses = {}          # site key -> frozenset of definitions
        self.sites = {}         # site key -> (name, setter)

    def define(self, s, name):
        key = ("stmt", id(s))
        self.defs[key] = name
        self.statement[key] = s
        self.order.setdefault(key, len(self.order))
        return key

    def use(self, key, name, state, setter):
        if name in state:
            self.uses[key] = self.uses.get(key, frozenset()) | state[name]
            self.sites[key] = (name, setter)

    def expr(self, e, state):
        for node in ast.walk(e):
            if isinstance(node, ast.Name):
                self.use(("name", id(node)), node.id, state, lambda new, node=node: setattr(node, "id", new))

    def block(self, stmts, state):
        for s in stmts:
            state = self.stmt(s, state)
        return state

    def stmt(self, s, state):
        state = dict(state)
        if isinstance(s, Assign):
            self.expr(s.value, state)
            d = self.define(s, s.target)
            if s.aug and s.target in state:
                # `a op= v` updates the binding it finds (in place, for an array): one web with it
                key = ("aug", id(s))
                self.uses[key] = self.uses.get(key, frozenset()) | state[s.target] | {d}
                self.sites[key] = (s.target, lambda new: None)
            state[s.target] = frozenset({d})
        elif isinstance(s, Store):
            self.expr(s.index, state)
            self.expr(s.value, state)
            self.use(("store", id(s)), s.array, state, lambda new, s=s: setattr(s, "array", new))
        elif isinstance(s, If):
            self.use(("cond", id(s)), s.cond, state, lambda new, s=s: setattr(s, "cond", new))
            return _merge(self.block(s.body, state), self.block(s.orelse, state))
        elif isinstance(s, (For, While)):
            if isinstance(s, For):
                for e in (s.start, s.stop, s.step):
                    self.expr(e, state)
            head = state
            while True:
                inner = dict(head)
                if isinstance(s, For):
                    inner[s.var] = frozenset({self.define(s, s.var)})
                else:
                    self.use(("cond", id(s)), s.cond, inner, lambda new, s=s: setattr(s, "cond", new))
                end = self.block(s.body, inner)
                new_head = _merge(head, end)
                if new_head == head:
                    return _merge(head, end)
                head = new_head
        return state

    def apply(self, rename, find):
        """Rename definitions and every use they reach."""
        by_root = {}
        for d, new in rename.items():
            by_root[find(d)] = new
        for key, reaching in self.uses.items():
            roots = {find(d) for d in reaching}
            new = next((by_root[r] for r in roots if r in by_root), None)
            if new is not None:
                self.sites[key][1](new)
        for s in walk(self.program.body):
            key = ("stmt", id(s))
            if key in rename:
                if isinstance(s, Assign):
                    s.target = rename[key]
                elif isinstance(s, For):
                    s.var = rename[key]


def _merge(a, b):
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, frozenset()) | v
    return out
