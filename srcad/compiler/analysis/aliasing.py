"""Which names share memory, and the writes that would make a gradient wrong.

After `inplace`, a name bound to a view of another array (`v = y[1:]`,
`t = y.T`) still shares its memory. srcad differentiates a view as the
values it held when it was taken, so a write into an array while a view of
the written region is read afterwards is refused, naming the user's write,
view and lines. Writes into an argument that needs a gradient are refused
too (the caller's value would change behind the tape). Whether two regions
can overlap is decided per write and per element range: constant, disjoint
ranges along the first axis never do.

Stores on `fn.facts["aliasing"]`: `groups` (name -> the names sharing its
memory on every path), `may` (name -> the names that share it on some path:
buffers rotated by rebinding, `u_prev, u, u_next = u, u_next, u_prev`; a write
through one of them must save what the others still need) and
`written_params` (the parameters the function writes into).
"""
from numba.core import types as nt

from ..errors import TransformError, problem, where
from ..ir import Assign, Call, Const, For, Name, Slice, Store, Subscript, While
from ..ir.facts import Aliasing, Lowered
from ..ir.visit import binding_counts, blocks, defines, names_in, reads, walk, written_array
from .types import index_array

# calls whose result may be (a view of) their first argument: `srcad.list_room` gives it back while it has room,
# `np.ascontiguousarray` and `np.asfortranarray` an array already so laid out (in Numba, a 1-d one either way)
VIEW_CALLS = frozenset({"srcad.stop_gradient", "np.transpose", "np.asarray", "np.ravel", "np.reshape",
                        "np.ascontiguousarray", "np.asfortranarray", "np.expand_dims", "np.atleast_1d",
                        "np.atleast_2d", "np.atleast_3d", "srcad.list_room", "srcad.list_rows_room",
                        "np.flip", "np.fliplr", "np.flipud", "np.real"})     # (Numba's flips and real: views too)


def analyse_aliasing(fn, active_params):
    """Check `fn` (typed, in-place updates resolved) and store what was found; returns `fn`."""
    groups, may = alias_groups(fn), alias_groups(fn, every_binding=False)
    if active_params:           # a plain call runs as NumPy would: nothing of this can make it wrong
        _check_writes(fn, groups, alias_groups(fn, entries_apart=True), may, set(active_params))
    stored = {written_array(s) for s in walk(fn.body)} - {None}
    written = [fn.names.user(p) for p in fn.params if any(a == p or p in groups.get(a, ()) for a in stored)]
    fn.facts.put(Aliasing(groups, may, written))
    return fn


def view_source(fn, value):
    """The array name whose memory `value` (an Assign's value) refers to, or None: the name itself, a
    basic slice of it, or a view call (`np.transpose`...) of either."""
    if isinstance(value, Call) and value.fn in VIEW_CALLS and value.args:
        value = value.args[0]
    if isinstance(value, Name):
        src = value.id
    elif isinstance(value, Subscript) and isinstance(value.base, Name):
        if any(index_array(fn, i) is not None for i in value.index):
            return None                     # indexing with an array makes a copy
        src = value.base.id
    else:
        return None
    return src if isinstance(fn.types.get(src), nt.Array) else None


def alias_groups(fn, every_binding=True, entries_apart=False):
    """name -> the set of names sharing its memory (arrays bound to each other or to views): with
    `every_binding`, only names whose every binding is such an alias (a name also bound to a new
    array is apart), else names with any such binding. `entries_apart`: the local a rebound parameter
    is copied into on entry counts as an array of its own there, as the caller's arguments written into
    share no memory (`function` refuses it) and the parameter itself is never read again: arguments
    rotated by rebinding (`a, tmp = tmp, a`) are then apart, as local buffers rotated so are."""
    parent = {}

    def find(n):
        while parent.get(n, n) != n:
            n = parent[n]
        return n

    moved = fn.facts.of(Lowered).moved
    sources = {}
    for s in walk(fn.body):
        if isinstance(s, Assign) and isinstance(fn.types.get(s.target), nt.Array):
            src = view_source(fn, s.value)
            entry = entries_apart and src in fn.params and fn.names.user(s.target) == src != s.target
            sources.setdefault(s.target, []).append(src if src not in moved and not entry else None)
    for target, srcs in sources.items():
        if all(srcs) or not every_binding:
            for src in filter(None, srcs):
                parent[find(target)] = find(src)
    groups = {}
    for n in list(parent):
        groups.setdefault(find(n), set()).update({n, find(n)})
    return {n: g for g in groups.values() for n in g}


def _check_writes(fn, groups, apart, may, active_params):
    """Refuse a write into an argument that needs a gradient (through a name that always shares its
    memory, `groups`), and a write into an array while another name that shares its memory is read
    afterwards: one that always does (`apart`: arguments rotated by rebinding are apart), or one bound
    once to an array that other names are rotated through (`may`: it holds one of the rotated buffers)."""
    defs, count = {}, binding_counts(fn.body)
    for s in walk(fn.body):
        if isinstance(s, Assign):
            defs.setdefault(s.target, s)
    outputs = {n for out in fn.outputs for n in names_in(out)}
    results = fn.facts.of(Lowered).results
    for path in _paths(fn.body):
        s = path[-1][0][path[-1][1]]
        if not isinstance(s, Store):
            continue
        arr = s.array
        written = sorted(({arr} | groups.get(arr, set())) & active_params)
        if written:
            user = fn.names.user(written[0])
            raise TransformError(f"{where(s.origin)}: `{s.origin.text}` writes into its input `{user}` which needs "
                                 f"a gradient; copy it first: {user} = {user}.copy()")
        held = {m for m in may.get(arr, ()) if count.get(m) == 1 and m not in fn.params}
        for other in sorted((apart.get(arr, {arr}) | held) - {arr}, key=lambda n: (_internal(fn, n), n)):
            if _disjoint(defs.get(other), s) or _returned_after(other, s, results) or \
                    not _live_after(path, other, outputs):
                continue
            view = defs.get(other)
            seen = f" (line {view.origin.line}: `{view.origin.text}`)" if view is not None else ""
            read = fn.names.user(other)
            if _internal(fn, other) and view is not None:     # no name of the user's: say where it was made
                read = f"the value {'returned' if other in results else 'made'} at line {view.origin.line}"
                what, fix = f"{read} (`{view.origin.text}`)", f"make {read} an independent array with .copy()"
            else:
                what, fix = f"`{read}`{seen}", f"make `{read}` an independent array with .copy()"
            raise problem(s.origin, f"`{s.origin.text}` writes into `{fn.names.user(arr)}` while {what}, which "
                                    f"shares its memory, is read afterwards: srcad cannot differentiate that "
                                    f"correctly", f"{fix}, or finish reading it before the write")


def _internal(fn, name):
    """Is `name` one the compiler made, standing for no variable of the user's?"""
    return fn.names.user(name) in fn.names.made


def _returned_after(name, store, results):
    """Is `name` bound only where a function returns, and `store` part of that function's call? (Its
    binding then comes after the write, and nothing of the call runs after it.)"""
    call = results.get(name)
    return call is not None and store.origin is not None and store.origin.call[:len(call)] == call


def _paths(stmts, prefix=()):
    """Every statement's position: a tuple of (block, index) pairs from the top block down."""
    for k, s in enumerate(stmts):
        here = prefix + ((stmts, k),)
        yield here
        for block in blocks(s):
            yield from _paths(block, here)


def _scan(stmts, v):
    """'read' if `v` is read in `stmts` before being rebound on every path, 'rebound' if it is
    rebound first, None if neither."""
    for s in stmts:
        if v in reads(s):
            return "read"
        if blocks(s) and not isinstance(s, (For, While)):
            a, b = (_scan(block, v) for block in blocks(s))
            if "read" in (a, b):
                return "read"
            if a == b == "rebound":
                return "rebound"
        elif isinstance(s, (For, While)):
            if _scan(s.body, v) == "read":
                return "read"
        elif v in defines(s):
            return "rebound"
    return None


def _live_after(path, v, outputs):
    """Is the binding `v` has at the statement at `path` read after that statement
    (later in its block, in a later iteration of an enclosing loop, or as an output)?"""
    for depth in range(len(path) - 1, -1, -1):
        block, k = path[depth]
        found = _scan(block[k + 1:], v)
        if found is not None:
            return found == "read"
        if depth > 0 and isinstance(path[depth - 1][0][path[depth - 1][1]], (For, While)):
            if _scan(block[:k + 1], v) == "read":
                return True
    return v in outputs


def _interval(index):
    """[lo, hi) along the first axis for a constant, non-negative index or slice; None otherwise."""
    e = index[0]
    if isinstance(e, Const) and type(e.value) is int and e.value >= 0:
        return e.value, e.value + 1
    if isinstance(e, Slice) and e.step is None:
        lo = 0 if e.lower is None else e.lower.value if isinstance(e.lower, Const) else None
        hi = float("inf") if e.upper is None else e.upper.value if isinstance(e.upper, Const) else None
        if type(lo) is int and lo >= 0 and (hi == float("inf") or (type(hi) is int and hi >= 0)):
            return lo, hi
    return None


def _disjoint(view_def, store):
    """A view `v = a[...]` and a write `a[...] = ...` on constant, non-overlapping ranges of the first axis."""
    if view_def is None or not isinstance(view_def.value, Subscript):
        return False
    base = view_def.value.base
    if not (isinstance(base, Name) and base.id == store.array):
        return False
    a, b = _interval(view_def.value.index), _interval(store.index)
    return a is not None and b is not None and (a[1] <= b[0] or b[1] <= a[0])
