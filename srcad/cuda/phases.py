"""A kernel with barriers (`cuda.syncthreads()`) and shared memory (`cuda.shared.array`), as phases.

A barrier splits the threads' work into phases: every thread of a block
finishes one phase before any starts the next. Each phase becomes a parallel
loop of its own over the threads of the grid (a barrier across the grid is a
barrier across each block), so the launch function reads:

    def block_sum_launch(x, out, srcad_blocks_x, srcad_threads_x, srcad_width_x):
        tile = np.zeros((64, srcad_blocks_x), np.float64)     # shared memory: one column per block
        srcad_carry_t = np.zeros(srcad_width_x, np.int64)     # a local one phase binds and a later one reads
        for srcad_thread in numba.prange(srcad_width_x):
            block_sum_phase0(srcad_thread, ..., x, out, tile, srcad_carry_t)
        for srcad_thread in numba.prange(srcad_width_x):
            block_sum_phase1(srcad_thread, ..., x, out, tile, srcad_carry_t, 32)   # step = 32
        ...

and the compiler differentiates it like any sequence of parallel loops: the
adjoint runs the phases' adjoints in reverse order, a barrier between each.

A barrier inside a loop or a branch is allowed where its condition is the
same for every thread of the launch (computed from the launch's shape,
`blockDim`, `gridDim`, the numbers passed and the arrays' shapes: "uniform").
Such control runs when the launch is made, and what the threads see of it (a
loop's `step`) is passed to each phase as a constant: a launch of another
shape compiles again. Names a phase binds and a later phase reads live in
one element per thread of a `srcad_carry_<name>` array; a shared array is
indexed by the block in its last axis, so that `tile[cuda.threadIdx.x]` is
the thread's own element.
"""
import ast
import builtins
import copy
import types
from dataclasses import dataclass, field

import numpy as np
from numba import cuda
from numba.core import types as numba_types
from numba.np.numpy_support import as_dtype

from ..compiler.errors import TransformError

DOC = "docs/cuda.md"
MAX_PHASES = 256
CARRY = "srcad_carry_"
_UNIFORM_CALLS = frozenset({"len", "min", "max", "abs", "int", "float", "range"})


def has_barriers(tree, globals_):
    """Does the kernel's tree call `cuda.syncthreads()` or allocate `cuda.shared.array`?"""
    return any(_cuda_path(n, globals_) in (("syncthreads",), ("shared", "array"))
               for n in ast.walk(tree) if isinstance(n, ast.Call) for n in [n.func])


def _cuda_path(node, globals_):
    """('shared', 'array') for `cuda.shared.array` (through the module's name), else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and globals_.get(node.id) is cuda:
        return tuple(reversed(parts))
    return None


# ---- the plan: segments of thread code, uniform control around them -----------------------------------

@dataclass
class Segment:
    paths: list                 # paths of its statements in the kernel's tree: ((field, index), ...)
    loads: set = field(default_factory=set)     # names it reads
    stores: set = field(default_factory=set)    # names it binds
    last: bool = False          # no barrier after it (a `return` may end the thread there)


@dataclass
class Plan:
    """How a kernel with barriers runs as phases (see the module)."""
    items: list                 # ("segment", k) | ("run", stmt) | ("for"/"while"/"if", stmt, items[, orelse])
    segments: list
    shared: dict                # name -> the `cuda.shared.array(shape, dtype)` call
    uniform: set                # names the control around the barriers reads
    carried: dict               # name -> np dtype (a local read by a later phase than the one binding it)


class _Refusal:
    def __init__(self, pyfunc, source):
        self.pyfunc, self.source = pyfunc, source

    def __call__(self, node, what, hint):
        line = self.source.first_line + node.lineno - 1
        text = self.source.text.splitlines()[node.lineno - 1].strip() if hasattr(node, "lineno") else ""
        return TransformError(f"{self.pyfunc.__name__} ({self.source.filename}, line {line}): {what} in `{text}` "
                              f"is not supported in a differentiated kernel yet. Hint: {hint} (see {DOC})")


def plan(tree, pyfunc, source, scalars):
    """The Plan of kernel `tree` (a FunctionDef); `scalars`: the parameters passed numbers (constants)."""
    refuse = _Refusal(pyfunc, source)
    g = pyfunc.__globals__
    shared = {}
    body = []
    for k, s in enumerate(tree.body):
        if isinstance(s, ast.Assign) and isinstance(s.value, ast.Call) and \
                _cuda_path(s.value.func, g) == ("shared", "array"):
            if len(s.targets) != 1 or not isinstance(s.targets[0], ast.Name):
                raise refuse(s, "a shared array not bound to one name", "write `tile = cuda.shared.array(...)`")
            shared[s.targets[0].id] = s.value
        else:
            body.append(((("body", k),), s))
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and _cuda_path(n.func, g) == ("shared", "array") and \
                not any(n is c for c in shared.values()):
            raise refuse(n, "`cuda.shared.array` inside a branch or loop", "allocate shared arrays at the top "
                         "of the kernel")
    uniform = _uniform_names(tree, g, refuse)
    params = [a.arg for a in tree.args.args]
    known = uniform | set(scalars) | set(params) | set(g) | _UNIFORM_CALLS
    segments = []
    items = _items(body, segments, g, refuse, uniform, known)
    if segments:
        segments[-1].last = _ends_kernel(items)
    _refuse_early_returns(tree, segments, refuse)
    carried = _carried(items, segments) - set(shared) - set(params) - uniform - set(g)
    return Plan(items, segments, shared, uniform, {v: _dtype_of(tree, v, g) for v in sorted(carried)})


def _ends_kernel(items):
    """Is the last item a segment at the top level (after the last barrier)?"""
    return bool(items) and items[-1][0] == "segment"


def _has_barrier(s, g):
    return any(isinstance(n, ast.Call) and _cuda_path(n.func, g) == ("syncthreads",) for n in ast.walk(s))


def _is_barrier(s, g):
    return isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and \
        _cuda_path(s.value.func, g) == ("syncthreads",)


def _control_reads(s):
    """The expressions a compound statement's control reads (a loop's range, a condition)."""
    if isinstance(s, ast.For):
        return [s.iter]
    return [s.test]


def _uniform_names(tree, g, refuse):
    """Names the control around barriers reads, and the names those are computed from."""
    wanted = set()
    compounds = [s for s in ast.walk(tree) if isinstance(s, (ast.For, ast.While, ast.If)) and
                 _has_barrier(ast.Module(s.body + s.orelse, []), g)]
    for s in compounds:
        for e in _control_reads(s):
            wanted |= {n.id for n in ast.walk(e) if isinstance(n, ast.Name)}
        if isinstance(s, ast.For):
            if not isinstance(s.target, ast.Name):
                raise refuse(s, "a loop around a barrier unpacking its items", "loop over `range(...)`")
            wanted.add(s.target.id)
    grew = True
    while grew:
        grew = False
        for s in ast.walk(tree):
            if isinstance(s, (ast.Assign, ast.AugAssign)) and _assigned(s) & wanted:
                more = {n.id for n in ast.walk(s.value) if isinstance(n, ast.Name)} - wanted
                if more:
                    wanted |= more
                    grew = True
    return wanted - {a.arg for a in tree.args.args} - set(g) - set(vars(builtins))


def _assigned(s):
    targets = s.targets if isinstance(s, ast.Assign) else [s.target] if isinstance(s, (ast.AugAssign, ast.For)) \
        else []
    return {n.id for t in targets for n in (t.elts if isinstance(t, ast.Tuple) else [t]) if isinstance(n, ast.Name)}


def _items(stmts, segments, g, refuse, uniform, known):
    """The plan's items for `stmts` (pairs of path and statement)."""
    items, current = [], None
    for path, s in stmts:
        if _is_barrier(s, g):
            current = None
            continue
        if _has_barrier(s, g):
            current = None
            items.append(_control(path, s, segments, g, refuse, uniform, known))
            continue
        if isinstance(s, (ast.Assign, ast.AugAssign)) and _assigned(s) & uniform:
            _check_uniform(s.value, s, g, refuse, known)
            items.append(("run", s))
            current = None
            continue
        inner = {n for t in ast.walk(s) if isinstance(t, (ast.Assign, ast.AugAssign, ast.For)) for n in _assigned(t)}
        if inner & uniform:
            raise refuse(s, f"`{sorted(inner & uniform)[0]}`, which controls a barrier, bound by one thread",
                         "compute what a loop or branch around cuda.syncthreads() tests the same in every thread")
        if current is None:
            current = Segment([])
            segments.append(current)
            items.append(("segment", len(segments) - 1))
        current.paths.append(path)
        for n in ast.walk(s):
            if isinstance(n, ast.Name):
                (current.stores if isinstance(n.ctx, ast.Store) else current.loads).add(n.id)
            if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
                current.loads.add(n.target.id)
    return items


def _control(path, s, segments, g, refuse, uniform, known):
    """A loop or branch around a barrier: run when the launch is made, its bodies planned in turn."""
    if isinstance(s, ast.For) and not (isinstance(s.iter, ast.Call) and isinstance(s.iter.func, ast.Name)
                                        and s.iter.func.id == "range"):
        raise refuse(s, "a loop around a barrier that is not over `range(...)`", "loop over range(...)")
    if not isinstance(s, (ast.For, ast.While, ast.If)):
        raise refuse(s, "a barrier inside this statement", "put cuda.syncthreads() at the kernel's level, or "
                     "in a loop or branch the same for every thread")
    if isinstance(s, (ast.For, ast.While)) and s.orelse:
        raise refuse(s, "a loop's else around a barrier", "write the else's statements after the loop")
    for e in _control_reads(s):
        _check_uniform(e, s, g, refuse, known)
    kind = {ast.For: "for", ast.While: "while", ast.If: "if"}[type(s)]
    body = _items([(path + (("body", k),), t) for k, t in enumerate(s.body)], segments, g, refuse, uniform, known)
    if kind != "if":
        return (kind, s, body)
    orelse = _items([(path + (("orelse", k),), t) for k, t in enumerate(s.orelse)], segments, g, refuse, uniform,
                    known)
    return (kind, s, body, orelse)


def _check_uniform(e, s, g, refuse, known):
    """Refuse expression `e` unless every thread computes the same from it (see the module)."""
    for n in ast.walk(e):
        path = _cuda_path(n, g) if isinstance(n, (ast.Attribute, ast.Name)) else None
        if path and path[0] in ("threadIdx", "blockIdx", "grid", "atomic", "shared"):
            raise refuse(s, f"a barrier under control that depends on the thread (`cuda.{'.'.join(path)}`)",
                         "every thread of a block must reach the same cuda.syncthreads(): test only the launch's "
                         "shape, numbers passed and the arrays' shapes around it")
        if isinstance(n, ast.Name) and n.id not in known:
            raise refuse(s, f"a barrier under control that depends on `{n.id}`, which differs from thread to thread",
                         "test only the launch's shape, numbers passed and the arrays' shapes around a barrier")
        if isinstance(n, ast.Subscript) and not (isinstance(n.value, ast.Attribute) and n.value.attr == "shape"):
            raise refuse(s, "a barrier under control that reads an array's element",
                         "test only the launch's shape, numbers passed and the arrays' shapes around a barrier")


def _refuse_early_returns(tree, segments, refuse):
    """A thread may stop (`return`) only after the last barrier: the other phases would miss it."""
    for s in segments:
        if s.last:
            continue
        for path in s.paths:
            for n in ast.walk(_at(tree, path)):
                if isinstance(n, ast.Return):
                    raise refuse(n, "a `return` before a barrier", "let every thread reach cuda.syncthreads(): "
                                 "put the work under `if` instead of returning early")


def _carried(items, segments):
    """Locals a segment reads that another one binds (or the same one in an earlier iteration of a loop)."""
    looped = set()

    def visit(xs, in_loop):
        for x in xs:
            if x[0] == "segment" and in_loop:
                looped.add(x[1])
            elif x[0] in ("for", "while"):
                visit(x[2], True)
            elif x[0] == "if":
                visit(x[2], in_loop)
                visit(x[3], in_loop)
    visit(items, False)
    carried = set()
    for k, s in enumerate(segments):
        for j, other in enumerate(segments):
            if j != k or k in looped:
                carried |= s.loads & other.stores
    return carried


_INT_CALLS = frozenset({"len", "int", "range"})


def _dtype_of(tree, name, g):
    """The dtype of a carried local: int64 where every binding is an integer (indices, the thread's
    coordinates, shapes, integer arithmetic), bool for comparisons, else float64."""
    kinds = {"float"}
    bindings = [s for s in ast.walk(tree) if isinstance(s, (ast.Assign, ast.AugAssign, ast.For))
                and name in _assigned(s)]
    if bindings:
        kinds = {_kind(s, name, tree, g, set()) for s in bindings}
    if kinds == {"int"}:
        return np.int64
    if kinds == {"bool"}:
        return np.bool_
    return np.float64


def _kind(s, name, tree, g, seen):
    if isinstance(s, ast.For):
        return "int"
    value = s.value
    if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Tuple):
        return "int" if _cuda_path(getattr(value, "func", None), g) in (("grid",), ("gridsize",)) else "float"
    kind = _expr_kind(value, tree, g, seen | {name})
    if isinstance(s, ast.AugAssign):
        kind = "int" if kind == "int" and _expr_kind(ast.Name(name, ast.Load()), tree, g, seen) == "int" \
            else "float"
    return kind


def _expr_kind(e, tree, g, seen):
    if isinstance(e, ast.Constant):
        return "bool" if isinstance(e.value, bool) else "int" if isinstance(e.value, int) else "float"
    if isinstance(e, (ast.Compare, ast.BoolOp)) or isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        return "bool"
    path = _cuda_path(e.func if isinstance(e, ast.Call) else e, g)
    if path and path[0] in ("threadIdx", "blockIdx", "blockDim", "gridDim", "grid", "gridsize"):
        return "int"
    if isinstance(e, ast.Subscript) and isinstance(e.value, ast.Attribute) and e.value.attr == "shape":
        return "int"
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in _INT_CALLS:
        return "int"
    if isinstance(e, ast.BinOp) and not isinstance(e.op, (ast.Div, ast.Pow)):
        both = {_expr_kind(e.left, tree, g, seen), _expr_kind(e.right, tree, g, seen)}
        return "int" if both <= {"int"} else "float"
    if isinstance(e, ast.UnaryOp):
        return _expr_kind(e.operand, tree, g, seen)
    if isinstance(e, ast.Name):
        if e.id in seen:
            return "int"            # (a recursive binding: decided by the others)
        params = {a.arg for a in tree.args.args}
        if e.id in params or e.id in g:
            return "float"
        bindings = [s for s in ast.walk(tree) if isinstance(s, (ast.Assign, ast.AugAssign, ast.For))
                    and e.id in _assigned(s)]
        kinds = {_kind(s, e.id, tree, g, seen | {e.id}) for s in bindings}
        return kinds.pop() if len(kinds) == 1 else "float"
    return "float"


def _at(tree, path):
    node = tree
    for field_name, k in path:
        node = getattr(node, field_name)[k]
    return node


# ---- a phase's function and the launch's source -----------------------------------------------------------

def phase_tree(tree, p, k, block_index):
    """Kernel `tree` (a fresh parse of its source) cut to segment `k` of plan `p`: the carried locals
    loaded first and stored last, shared arrays indexed by `block_index` (an expression of the cuda
    intrinsics) in their last axis, the uniform names it reads as parameters (constants at the call)."""
    seg = p.segments[k]
    stmts = [_at(tree, path) for path in seg.paths]
    stmts = [_SharedIndex(p.shared, block_index).visit(s) for s in stmts]
    where = stmts[0]
    loads = [ast.copy_location(ast.Assign([ast.Name(v, ast.Store())],
                                          ast.Subscript(ast.Name(CARRY + v, ast.Load()), ast.Name(_THREAD, ast.Load()),
                                                        ast.Load())), where)
             for v in sorted(p.carried) if v in seg.loads | seg.stores]
    stores = [] if seg.last else [
        ast.copy_location(ast.Assign([ast.Subscript(ast.Name(CARRY + v, ast.Load()), ast.Name(_THREAD, ast.Load()),
                                                    ast.Store())], ast.Name(v, ast.Load())), stmts[-1])
        for v in sorted(p.carried) if v in seg.stores]
    tree.body = loads + stmts + stores
    tree.args.args += [ast.arg(n) for n in phase_extra_params(p, k)]
    return ast.fix_missing_locations(tree)


_THREAD = "srcad_thread"


def phase_extra_params(p, k):
    """What a phase takes after the kernel's own parameters: shared arrays, carried locals' arrays, and
    the uniform names it reads."""
    return list(p.shared) + [CARRY + v for v in sorted(p.carried)] + sorted(p.segments[k].loads & p.uniform)


class _SharedIndex(ast.NodeTransformer):
    """`tile[i]` of a shared array as `tile[i, block]`."""

    def __init__(self, shared, block_index):
        self.shared, self.block = shared, block_index

    def visit_Subscript(self, node):
        self.generic_visit(node)
        if isinstance(node.value, ast.Name) and node.value.id in self.shared:
            idx = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
            node.slice = ast.Tuple(idx + [copy.deepcopy(self.block)], ast.Load())
        return node


class Emitter:
    """The launch function's statements for one launch: uniform control run now, each segment a
    parallel loop calling its phase with the uniform names' values of the moment."""

    def __init__(self, p, pyfunc, scope, call_of):
        self.p, self.name, self.scope, self.call_of = p, pyfunc.__name__, scope, call_of
        self.lines, self.count = [], 0

    def run(self, items):
        for x in items:
            if x[0] == "segment":
                self.count += 1
                if self.count > MAX_PHASES:
                    raise TransformError(f"{self.name}: this launch runs more than {MAX_PHASES} phases between "
                                         f"barriers (cuda.syncthreads() in a loop), each a loop of its own once "
                                         f"compiled. Hint: fewer iterations per launch, or launch the kernel once per "
                                         f"step (see {DOC})")
                values = [self.scope[n] for n in sorted(self.p.segments[x[1]].loads & self.p.uniform)]
                self.lines.append(self.call_of(x[1], values))
            elif x[0] == "run":
                exec(compile(ast.fix_missing_locations(ast.Module([x[1]], [])), "<uniform>", "exec"), self.scope)
            elif x[0] == "for":
                for v in self._eval(x[1].iter):
                    self.scope[x[1].target.id] = v
                    self.run(x[2])
            elif x[0] == "while":
                while self._eval(x[1].test):
                    self.run(x[2])
            else:
                self.run(x[2] if self._eval(x[1].test) else x[3])
        return self.lines

    def _eval(self, e):
        return eval(compile(ast.fix_missing_locations(ast.Expression(e)), "<uniform>", "eval"), self.scope)


class LaunchShape:
    """What `cuda` means to the uniform code of a launch: its shape (blockDim, gridDim, gridsize)."""

    def __init__(self, blocks, threads):
        def dim3(d):
            d = tuple(d) + (1,) * (3 - len(d))
            return types.SimpleNamespace(x=d[0], y=d[1], z=d[2])
        self.blockDim, self.gridDim = dim3(threads), dim3(blocks)
        self._width = tuple(b * t for b, t in zip(blocks, threads))

    def gridsize(self, n):
        w = self._width + (1,) * (3 - len(self._width))
        return w[0] if n == 1 else w[:n]


def uniform_scope(pyfunc, blocks, threads, params, args):
    """The names uniform code may read when a launch is made: the kernel's globals (the cuda module as
    the launch's shape) and its arguments (numbers; arrays for their shapes)."""
    shape = LaunchShape(blocks, threads)
    scope = {k: (shape if v is cuda else v) for k, v in pyfunc.__globals__.items()}
    scope.update(zip(params, args))
    return scope


def shared_allocation(call, scope, blocks_total):
    """`(shape + (blocks,), dtype)` of a `cuda.shared.array(shape, dtype)` call, evaluated now."""
    given = dict(zip(("shape", "dtype"), call.args)) | {kw.arg: kw.value for kw in call.keywords}
    shape_e, dtype_e = given["shape"], given["dtype"]
    shape = eval(compile(ast.Expression(shape_e), "<shared>", "eval"), scope)
    dtype = eval(compile(ast.Expression(dtype_e), "<shared>", "eval"), scope)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return shape + (blocks_total,), as_dtype(dtype) if isinstance(dtype, numba_types.Type) else np.dtype(dtype)

