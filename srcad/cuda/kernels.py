"""`@ad.kernel`: a numba.cuda kernel, differentiable, launched as in Numba (`k[blocks, threads](args)`).

A kernel is read as a function of its launch: one parallel loop over the
threads of the grid, each iteration running the kernel's body for one thread
(an inlined helper), and returning the buffers named in `outputs`:

    def saxpy_launch(a, x, y, out, blocks_x, threads_x):
        for thread in numba.prange(blocks_x * threads_x):
            saxpy(thread, blocks_x, threads_x, a, x, y, out)     # the kernel's body, one thread
        return out

In the body, `cuda.grid`, `cuda.gridsize`, `cuda.threadIdx`, `blockIdx`,
`blockDim` and `gridDim` become arithmetic on the thread's number and the
launch's shape, and `cuda.atomic.add(a, i, v)` is an accumulation into the
element (`lower.add_into`: a sum, whatever the order of the threads). The
compiler differentiates that function like any other with a parallel loop,
and the "cuda" target prints each parallel
loop as a kernel again (`compiler/backends/numba_cuda.py`); the "cpu" target
runs the same function with Numba's threads, which is how tests compare the
two. One launch is one node of the tape, from the arguments (and the
buffers' starting values) to the buffers it returns.
"""
import ast
import functools
import inspect
import textwrap
import types

import numba
import numpy as np
from numba import cuda

from ..compiler.errors import TransformError
from ..compiler.front.lower import add_into
from ..compiler.runtime import threads_between_barriers
from ..source import Source, capture_source
from ..tensor import Tensor
from . import phases

DOC = "docs/cuda.md"
AXES = ("x", "y", "z")
THREAD = "srcad_thread"
ADD_INTO = "srcad_add_into"
PHASE_RANGE = "srcad_threads_between_barriers"


def kernel(pyfunc=None, *, outputs, target="cuda", boundscheck=None):
    """Make a numba.cuda-style kernel differentiable. `outputs` names the parameters that are result
    buffers: a launch returns them (a Tensor, or a tuple in the order of `outputs`), and the tape records
    the launch from the other arguments to them. ``target="cpu"`` runs the same kernel on the CPU's
    threads (the same gradient, no GPU needed)."""
    if pyfunc is None:
        return functools.partial(kernel, outputs=outputs, target=target, boundscheck=boundscheck)
    if not inspect.isfunction(pyfunc):
        raise TypeError(f"@ad.kernel expects a Python function, got {pyfunc!r}")
    if isinstance(outputs, str):
        outputs = [outputs]
    params = list(inspect.signature(pyfunc).parameters)
    unknown = [o for o in outputs if o not in params]
    if not outputs or unknown:
        raise TypeError(f"@ad.kernel({pyfunc.__name__}): outputs must name parameters of the kernel "
                        f"({', '.join(params)}); got {list(outputs)!r}")
    return Kernel(pyfunc, tuple(outputs), target, boundscheck)


class Kernel:
    """A differentiable kernel; `kernel[blocks, threads]` is a launch, called with the kernel's arguments."""

    def __init__(self, pyfunc, outputs, target, boundscheck):
        from ..compiler.backends.base import check
        from ..function import Function
        check(target)
        self.python_function, self.outputs, self.target = pyfunc, outputs, target
        self._compiled = {}
        self._barriers = None           # (whether it calls cuda.syncthreads or allocates shared memory)
        self._phases = {}               # (scalar parameters, grid dimensions) -> (plan, phase functions)
        self._launch_sources = {}       # (launch shape, numbers, arrays' shapes) -> phased_launch's (key, make)
        params = list(inspect.signature(pyfunc).parameters)
        self._output_positions = tuple((o, params.index(o)) for o in outputs)
        self._function = functools.partial(Function, boundscheck=boundscheck, target=target)
        functools.update_wrapper(self, pyfunc)

    def __getitem__(self, config):
        if not (isinstance(config, tuple) and len(config) in (2, 3, 4)):
            raise TypeError(f"{self.__name__}: launch as {self.__name__}[blocks, threads](...)")
        blocks, threads = _dims(self, config[0], "blocks"), _dims(self, config[1], "threads")
        if len(blocks) != len(threads):
            raise TypeError(f"{self.__name__}[{config[0]!r}, {config[1]!r}]: blocks and threads must have as many "
                            f"dimensions as each other")
        return functools.partial(self._launch, blocks, threads)

    def _launch(self, blocks, threads, *args):
        """A launch: the kernel writes into the output buffers passed as arrays, as Numba's does; a Tensor
        passed as one is a value, never changed: the launch starts from a copy of it (whose starting
        value then gets its gradient: 1 where the kernel does not write)."""
        copied = tuple(o for o, k in self._output_positions if k < len(args) and isinstance(args[k], Tensor))
        if self._has_barriers():
            seen = (blocks, threads, copied, _launch_values(args))      # all the uniform code may read
            if seen not in self._launch_sources:
                self._launch_sources[seen] = phased_launch(self, blocks, threads, copied, args)
            key, make = self._launch_sources[seen]
        else:
            key, make = (len(blocks), copied), functools.partial(launch_function, self, len(blocks), copied)
        launch = self._compiled.get(key)
        if launch is None:
            launch = self._compiled[key] = self._function(make())
        return launch(*args, *blocks, *threads, *(b * t for b, t in zip(blocks, threads)))

    def _has_barriers(self):
        if self._barriers is None:
            self._barriers = phases.has_barriers(_kernel_tree(self.python_function), self.python_function.__globals__)
        return self._barriers

    def __call__(self, *args):
        raise TypeError(f"{self.__name__} is a kernel: launch it as {self.__name__}[blocks, threads](...)")


def _dims(k, d, what):
    d = (d,) if isinstance(d, int) else tuple(d)
    if not 1 <= len(d) <= 3 or not all(isinstance(n, int) and n > 0 for n in d):
        raise TypeError(f"{k.__name__}: {what} of a launch must be a positive int or a tuple of one to three, "
                        f"got {d!r}")
    return d


# ---- the kernel as a function of its launch ---------------------------------------------------------------

def launch_function(k, ndim, copied=()):
    """The Python function of `k`'s launch over an `ndim`-dimensional grid (see the module); the output
    buffers named in `copied` are copied first."""
    pyfunc = k.python_function
    name = pyfunc.__name__
    params = list(inspect.signature(pyfunc).parameters)
    blocks, threads, widths = _launch_names(ndim)
    body = _thread_function(pyfunc, ndim, blocks, threads, widths)
    total = _product([_name(n) for n in widths])
    call = ast.Expr(ast.Call(_name(f"{name}_thread"),
                             [_name(n) for n in [THREAD] + blocks + threads + widths + params], []))
    loop = ast.For(ast.Name(THREAD, ast.Store()), _thread_range(k, total, _attr(_name("numba"), "prange")), [call], [])
    text, namespace = _launch_module(k, ndim, copied, [loop])
    namespace[f"{name}_thread"] = body
    return _made_launch(name, text, namespace)


def _thread_range(k, total, parallel):
    """`parallel(total)` (a parallel loop's header), or `range(total)` on the cpu target where threads add
    atomically (Numba's threads would race on them)."""
    serial = k.target == "cpu" and _adds_atomically(k.python_function)
    return ast.Call(_name("range") if serial else parallel, [total], [])


def _launch_module(k, ndim, copied, statements):
    """(source, namespace) of the launch function of `k` running `statements` between copying the output
    buffers named in `copied` and returning the outputs."""
    params = list(inspect.signature(k.python_function).parameters)
    blocks, threads, widths = _launch_names(ndim)
    outs = [_name(o) for o in k.outputs]
    ret = ast.Return(outs[0] if len(outs) == 1 else ast.Tuple(outs, ast.Load()))
    copies = [ast.Assign([ast.Name(o, ast.Store())], ast.Call(_attr(_name("np"), "copy"), [_name(o)], []))
              for o in copied]
    args = ast.arguments([], [ast.arg(p) for p in params + blocks + threads + widths], None, [], [], None, [])
    definition = ast.FunctionDef(k.python_function.__name__, args, copies + statements + [ret], [], None)
    module = ast.fix_missing_locations(ast.Module([definition], []))
    return ast.unparse(module) + "\n", {"numba": numba, "np": np}


def _made_launch(name, text, namespace):
    filename = f"<srcad launch of kernel {name}>"
    exec(compile(text, filename, "exec"), namespace)
    launch = namespace[name]
    launch.__srcad_source__ = Source(text, filename, 1)
    return launch


def phased_launch(k, blocks, threads, copied, args):
    """(key, make) of a launch of kernel `k`, which has barriers (srcad/cuda/phases.py): its uniform
    control run for this launch's shape and numbers, each phase a parallel loop. The key is the launch
    function's source; `make()` builds it."""
    pyfunc = k.python_function
    name, ndim = pyfunc.__name__, len(blocks)
    params = list(inspect.signature(pyfunc).parameters)
    scalars = tuple(p for p, a in zip(params, args) if isinstance(a, (int, float, np.number)))
    if (scalars, ndim) not in k._phases:
        k._phases[scalars, ndim] = _phase_functions(k, scalars, ndim)
    plan, functions = k._phases[scalars, ndim]
    bnames, tnames, wnames = _launch_names(ndim)
    scope = phases.uniform_scope(pyfunc, blocks, threads, params, args)
    total, nblocks = int(np.prod([b * t for b, t in zip(blocks, threads)])), int(np.prod(blocks))
    made = [_name(n) for n in list(plan.shared) + [phases.CARRY + v for v in plan.carried]]
    fixed = [_name(n) for n in [THREAD] + bnames + tnames + wnames + params] + made

    header = _thread_range(k, _const(total), _name(PHASE_RANGE))

    def phase(seg, values):
        call = ast.Call(_name(f"{name}_phase{seg}"), fixed + [_const(_plain(v)) for v in values], [])
        return ast.For(ast.Name(THREAD, ast.Store()), header, [ast.Expr(call)], [])
    loops = phases.Emitter(plan, pyfunc, scope, phase).run(plan.items)
    arrays = [(n,) + phases.shared_allocation(c, scope, nblocks) for n, c in plan.shared.items()]
    arrays += [(phases.CARRY + v, (total,), np.dtype(d)) for v, d in plan.carried.items()]
    allocations = [ast.Assign([ast.Name(n, ast.Store())],
                              ast.Call(_attr(_name("np"), "zeros"),
                                       [ast.Tuple([_const(d) for d in shape], ast.Load()), _attr(_name("np"), dt.name)],
                                       []))
                   for n, shape, dt in arrays]
    text, namespace = _launch_module(k, ndim, copied, allocations + loops)
    namespace.update({f"{name}_phase{i}": f for i, f in enumerate(functions)})
    namespace[PHASE_RANGE] = threads_between_barriers
    return text, functools.partial(_made_launch, name, text, namespace)


def _launch_values(args):
    """What the uniform code of a launch may read of its arguments: numbers, and arrays' shapes and dtypes."""
    return tuple((type(a), a) if isinstance(a, (int, float, np.number)) else
                 (type(a), getattr(a, "shape", None), str(getattr(a, "dtype", ""))) for a in args)


def _plain(v):
    return v.item() if isinstance(v, np.generic) else v


def _phase_functions(k, scalars, ndim):
    """The plan of kernel `k` (given which parameters are numbers) and one thread function per phase."""
    pyfunc = k.python_function
    plan = phases.plan(_kernel_tree(pyfunc), pyfunc, _source(pyfunc), scalars)
    cuda_name = next(n for n, v in pyfunc.__globals__.items() if v is cuda)

    def intrinsic(what, axis):
        return _attr(_attr(_name(cuda_name), what), axis)
    block, stride = intrinsic("blockIdx", "x"), intrinsic("gridDim", "x")
    for axis in AXES[1:ndim]:                   # the block's number, x fastest
        block = _binop(block, ast.Add(), _binop(stride, ast.Mult(), intrinsic("blockIdx", axis)))
        stride = _binop(stride, ast.Mult(), intrinsic("gridDim", axis))
    functions = [_thread_function(pyfunc, ndim, *_launch_names(ndim),
                                  cut=functools.partial(phases.phase_tree, p=plan, k=i, block_index=block))
                 for i in range(len(plan.segments))]
    return plan, functions


def _launch_names(ndim):
    """The launch function's parameters after the kernel's: blocks, threads per block, threads along each axis."""
    return ([f"srcad_blocks_{a}" for a in AXES[:ndim]], [f"srcad_threads_{a}" for a in AXES[:ndim]],
            [f"srcad_width_{a}" for a in AXES[:ndim]])


def _adds_atomically(pyfunc):
    """Does the kernel make atomic adds (which the cpu target runs with its threads one at a time)?"""
    tree = ast.parse(textwrap.dedent(capture_source(pyfunc).text))
    return any(isinstance(n, ast.Attribute) and n.attr == "atomic" for n in ast.walk(tree))


def _thread_function(pyfunc, ndim, blocks, threads, widths, cut=None):
    """`pyfunc` as the body of one thread: its source read as the user wrote it, then rewritten when
    the compiler parses it (`__srcad_rewrite__`), with the thread's number and the launch's shape as
    its first parameters. `cut(tree)`, if given, first keeps one phase of it (`phases.phase_tree`)."""
    source = _source(pyfunc)
    namespace = {**pyfunc.__globals__, ADD_INTO: add_into}
    body = types.FunctionType(pyfunc.__code__, namespace, pyfunc.__name__, pyfunc.__defaults__, pyfunc.__closure__)
    body.__srcad_source__ = source
    body.__srcad_globals__ = (ADD_INTO,)
    body.__srcad_rewrite__ = functools.partial(_rewrite, pyfunc, ndim, blocks, threads, widths, source, cut)
    return body


def _source(pyfunc):
    source = capture_source(pyfunc)
    if source is None:
        raise TransformError(f"{pyfunc.__name__}: cannot read its source. Hint: define the kernel in a file")
    return source


def _kernel_tree(pyfunc):
    """The kernel's FunctionDef, parsed from its source as the compiler parses it."""
    return ast.parse(textwrap.dedent(_source(pyfunc).text)).body[0]


def _rewrite(pyfunc, ndim, blocks, threads, widths, source, cut, tree):
    """The kernel's parsed `tree` (a FunctionDef) as the body of one thread (of one phase: `cut`)."""
    if cut is not None:
        tree = cut(tree)
    tree.args.args[:0] = [ast.arg(n) for n in [THREAD] + blocks + threads + widths]
    _Intrinsics(pyfunc, ndim, blocks, threads, widths, source).visit(tree)
    return tree


class _Intrinsics(ast.NodeTransformer):
    """numba.cuda's thread intrinsics as arithmetic on the thread's number; atomic adds as `+=`."""

    def __init__(self, pyfunc, ndim, blocks, threads, widths, source):
        self.pyfunc, self.ndim, self.source = pyfunc, ndim, source
        self.blocks, self.threads = [_name(n) for n in blocks], [_name(n) for n in threads]
        width = [_name(n) for n in widths]     # (names the launch binds: the stride of a grid-stride loop)
        t = _name(THREAD)
        self.grid = [_binop(t, ast.Mod(), width[0]) if ndim > 1 else t]
        if ndim > 1:
            self.grid.append(_binop(_binop(t, ast.FloorDiv(), width[0]), ast.Mod(), width[1]) if ndim > 2
                             else _binop(t, ast.FloorDiv(), width[0]))
        if ndim > 2:
            self.grid.append(_binop(t, ast.FloorDiv(), _product(width[:2])))
        self.width = width

    def _is_cuda(self, node):
        return isinstance(node, ast.Name) and self.pyfunc.__globals__.get(node.id) is cuda

    def _refuse(self, node, what, hint):
        line = self.source.first_line + node.lineno - 1
        text = self.source.text.splitlines()[node.lineno - 1].strip()
        return TransformError(f"{self.pyfunc.__name__} ({self.source.filename}, line {line}): {what} in `{text}` "
                              f"is not supported in a differentiated kernel yet. Hint: {hint} (see {DOC})")

    def visit_Expr(self, node):
        call = node.value
        if isinstance(call, ast.Call) and self._path(call.func) == ("atomic", "add"):
            if len(call.args) != 3:
                raise self._refuse(node, "cuda.atomic.add with other than three arguments",
                                   "pass (array, index, value)")
            call = ast.Call(_name(ADD_INTO), [self.visit(a) for a in call.args], [])
            return ast.copy_location(ast.Expr(call), node)
        return self.generic_visit(node)

    def _path(self, node):
        """('threadIdx', 'x') for `cuda.threadIdx.x` (through the module's name), else None."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        return tuple(reversed(parts)) if self._is_cuda(node) else None

    def visit_Attribute(self, node):
        path = self._path(node)
        if path is None:
            return self.generic_visit(node)
        if len(path) == 2 and path[0] in ("threadIdx", "blockIdx", "blockDim", "gridDim") and path[1] in AXES:
            return ast.copy_location(self._index(path[0], AXES.index(path[1])), node)
        raise self._refuse(node, f"`cuda.{'.'.join(path)}`", "kernels may use cuda.grid, cuda.gridsize, threadIdx, "
                           "blockIdx, blockDim, gridDim and cuda.atomic.add")

    def visit_BinOp(self, node):
        """`cuda.threadIdx.x + cuda.blockIdx.x * cuda.blockDim.x` (either way round) is the thread's
        coordinate in the grid, as `cuda.grid` gives it, and `cuda.blockDim.x * cuda.gridDim.x` the
        grid's width, as `cuda.gridsize` gives it: written so, the analysis that sees which elements
        are the thread's own (in a grid-stride loop too) recognises them."""
        if isinstance(node.op, ast.Add):
            for a, b in ((node.left, node.right), (node.right, node.left)):
                axis = self._grid_sum(a, b)
                if axis is not None:
                    return ast.copy_location(self._coordinate(axis), node)
        axis = self._pair(node, "blockDim", "gridDim") if isinstance(node.op, ast.Mult) else None
        if axis is not None:
            return ast.copy_location(self.width[axis] if axis < self.ndim else _const(1), node)
        return self.generic_visit(node)

    def _pair(self, product, a, b):
        """The axis of `cuda.<a>.x * cuda.<b>.x` (either order, one axis), else None."""
        pair = {self._path(product.left), self._path(product.right)}
        axes = [k for k in range(3) if pair == {(a, AXES[k]), (b, AXES[k])}]
        return axes[0] if axes else None

    def _grid_sum(self, thread, product):
        t = self._path(thread)
        if t is None or len(t) != 2 or t[0] != "threadIdx" or not isinstance(product, ast.BinOp) \
                or not isinstance(product.op, ast.Mult):
            return None
        axis = self._pair(product, "blockIdx", "blockDim")
        return axis if axis is not None and AXES[axis] == t[1] else None

    def _coordinate(self, axis):
        return self.grid[axis] if axis < self.ndim else _const(0)

    def visit_Call(self, node):
        path = self._path(node.func)
        if path in (("grid",), ("gridsize",)):
            if len(node.args) != 1 or not isinstance(node.args[0], ast.Constant) or node.args[0].value not in (1, 2, 3):
                raise self._refuse(node, f"cuda.{path[0]} without a constant 1, 2 or 3", f"write cuda.{path[0]}(1)")
            n = node.args[0].value
            items = self.grid if path == ("grid",) else self.width
            items = [self._coordinate(a) if path == ("grid",) else items[a] if a < self.ndim else _const(1)
                     for a in range(n)]
            return ast.copy_location(items[0] if n == 1 else ast.Tuple(items, ast.Load()), node)
        if path is not None:
            what = "an atomic operation whose result is used" if path == ("atomic", "add") \
                else f"`cuda.{'.'.join(path)}`"
            raise self._refuse(node, what, "kernels may use cuda.grid, cuda.gridsize, threadIdx, blockIdx, blockDim, "
                               "gridDim and cuda.atomic.add as a statement")
        return self.generic_visit(node)

    def _index(self, what, axis):
        if axis >= self.ndim:
            return _const(0 if what in ("threadIdx", "blockIdx") else 1)
        if what == "blockDim":
            return self.threads[axis]
        if what == "gridDim":
            return self.blocks[axis]
        g = self.grid[axis]
        return _binop(g, ast.Mod(), self.threads[axis]) if what == "threadIdx" \
            else _binop(g, ast.FloorDiv(), self.threads[axis])


def _name(n):
    return ast.Name(n, ast.Load())


def _attr(v, a):
    return ast.Attribute(v, a, ast.Load())


def _const(v):
    return ast.Constant(v)


def _binop(a, op, b):
    return ast.BinOp(a, op, b)


def _product(items):
    out = items[0]
    for x in items[1:]:
        out = _binop(out, ast.Mult(), x)
    return out


__all__ = ["kernel", "Kernel", "launch_function"]
