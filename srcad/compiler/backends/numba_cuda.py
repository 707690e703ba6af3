"""The GPU target: each parallel loop of a generated function is a CUDA kernel, one thread per iteration.

`@ad.kernel` (srcad/cuda) writes a numba.cuda kernel as a function whose body
is one parallel loop over the threads of the launch; the passes differentiate
it like any parallel loop (each iteration of the adjoint runs its thread again
and then reverses it). This target prints what comes out:

* a parallel loop (not inside another one) becomes a `@cuda.jit` kernel on a
  grid the device holds at once, each thread running the iterations `t`, `t`
  plus the grid's size...; its inputs are the names it reads from the code
  around it, and the host code launches it through `launch.run_threads`;
* the rest of the function is host code, plain Python on NumPy arrays;
* an accumulation that several threads may make into the same place (a shared
  parameter `d_w[k]`, a gather `d_x[idx[i]]`, a scalar of the host code) is a
  `cuda.atomic.add`; one into an element only its own thread touches (indexed
  by the loop index in one axis: `parallel.disjoint`) is a plain `+=`;
* a stack an iteration saves into is a per-thread column of one buffer,
  `[height, thread]`, sized before the launch (the policy has no growable
  storage): neighbouring threads touch neighbouring addresses;
* index checks record the first failure in an error record the host reads.

The CPU printing of each function is kept beside it (`<name>_cpu`) for the
typing of the primal, which Numba's CPU inference does.
"""
from dataclasses import replace

from numba.core import types as nt

from ...cuda import device, launch
from ..ad.parallel import disjoint, serial_where_unsafe, width
from ..ad.saving import Policy, Unsized, save_sizes
from ..errors import TransformError
from ..front.bounds import INDEX_CHECKS
from ..ir import (Accumulate, Assign, Attribute, BinOp, Call, Const, Effect, For, Global, If, Name, Pop, Push,
                  Reserve, Store, Subscript, Tuple, While)
from ..ir.printer import Printer, Writer, expr_text
from ..ir.visit import all_blocks, assigned, defines, map_children, names_in, reads, walk, written_array
from ..opt.cleanup import live_in
from . import numba_cpu
from .cache import import_source

SUBSET_DOC = "docs/cuda.md"
HEADER = "\n".join(["import math", "import numpy as np", "import numba", "from numba import cuda",
                    "from srcad.cuda import device as cuda_device",
                    "from srcad.cuda import launch as cuda_launch", ""])


# ---- lowering ---------------------------------------------------------------------------------------

def lower_for_cuda(fn):
    """`fn` with its stacks as per-thread columns of buffers the host makes; in place, returns `fn`."""
    serial_where_unsafe(fn, atomic_sums=True)
    for block in all_blocks(fn.body):
        block[:] = [t for s in block for t in (_thread_stacks(fn, s) if _is_kernel(s) else [s])]
    left = [t for t in walk(fn.body) if isinstance(t, (Push, Pop, Reserve))]
    in_phases = {id(t) for s in walk(fn.body) if isinstance(s, For) and s.phase for t in walk(s.body)}
    if left and id(left[0]) in in_phases:
        raise _refusal(fn, left[0], "a value saved by one phase between barriers for another kernel (an element "
                       "the phase overwrites that its adjoint needs, or a gradient's value differentiated again)",
                       "on the cuda target a phase may overwrite an element only where the adjoint reads no old "
                       "value of it (a sum, a copy, a linear update): write the new values into another shared "
                       "array, or run the kernel with target=\"cpu\"")
    if left:
        raise _refusal(fn, left[0], "values saved outside the threads of a kernel",
                       "the threads of a kernel must be independent to be differentiated: a thread reads only "
                       "elements no other thread writes (its own, or inputs no thread writes) and shares only "
                       "sums (cuda.atomic.add); what its adjoint needs is then kept per thread")
    return fn


def _is_kernel(s):
    return isinstance(s, For) and s.parallel


def _thread_stacks(fn, loop):
    """The statements making the buffers of the stacks `loop`'s iterations use, then `loop`, each push
    and pop of theirs an element of the thread's column."""
    inner = sorted({t.stack for t in walk(loop.body) if isinstance(t, (Push, Pop, Reserve))})
    if not inner:
        return [loop]
    try:
        sizes = save_sizes(loop.body, inner, fn.types, fn.names)
    except Unsized as why:
        raise _refusal(fn, why.stmt, "values saved in a loop whose trip count is not known when the kernel starts",
                       "bound the loop by the arguments (`for k in range(n_steps):`)") from None
    threads = fn.names.fresh("threads")
    fn.types[threads] = nt.intp
    before = [Assign(threads, _trips(loop), loop.origin)]
    starts = []
    for k in inner:
        stack, size = fn.stacks[k], sizes[k]
        if isinstance(stack.item, nt.Array):
            raise _refusal(fn, loop, "arrays saved inside a kernel", "save scalars: a kernel's thread cannot "
                           "allocate arrays")
        host = set(fn.params) | _bound_outside(fn, loop)
        free = (set().union(*(reads(t) for t in walk(list(size.setup)))) | names_in(size.count)) - assigned(size.setup)
        if not free <= host:
            raise _refusal(fn, loop, "values saved in a loop whose trip count differs from thread to thread",
                           "bound the loop by the arguments, the same for every thread")
        dtype = "bool_" if isinstance(stack.item, nt.Boolean) else str(stack.item)
        shape = Tuple((size.count, Name(threads)))
        before += list(size.setup) + [Assign(k, Call("srcad.thread_buffer", (shape, Global(f"np.{dtype}"))),
                                             loop.origin)]
        fn.types[k] = nt.Array(stack.item, 2, "C")
        fn.types[stack.top] = nt.intp
        starts.append(Assign(stack.top, Const(0), loop.origin))
    for block in all_blocks(loop.body):
        block[:] = [t for s in block for t in _column_op(fn, s, loop.var)]
    loop.body[:0] = starts
    return before + [loop]


def _bound_outside(fn, loop):
    inside = {id(t) for t in walk(loop.body)}
    return {n for t in walk(fn.body) if id(t) not in inside and t is not loop for n in defines(t)}


def _column_op(fn, s, thread):
    """A push, pop or reserve of a per-thread stack as an element of the thread's column."""
    if not isinstance(s, (Push, Pop, Reserve)):
        return [s]
    if isinstance(s, Reserve):
        return []
    top, buf = fn.stacks[s.stack].top, s.stack
    if isinstance(s, Push):
        return [Store(buf, (Name(top), Name(thread)), s.value, s.origin),
                Assign(top, BinOp("+", Name(top), Const(1)), s.origin)]
    value = Subscript(Name(buf), (Name(top), Name(thread)))
    drop = Assign(top, BinOp("-", Name(top), Const(1)), s.origin)
    if isinstance(s.target, Name):
        return [drop, Assign(s.target.id, value, s.origin)]
    return [drop, Store(s.target.base.id, s.target.index, value, s.origin)]


def _trips(loop):
    """How many iterations `loop` runs (threads of its kernel), as host code computes it."""
    return Call("len", (Call("range", (loop.start, loop.stop, loop.step)),))


def _refusal(fn, s, construct, hint):
    where = f"line {s.origin.line}: `{s.origin.text}`" if getattr(s, "origin", None) is not None else "generated code"
    return TransformError(f"{fn.name}: {construct} ({where}) cannot run on the cuda target. Hint: {hint} "
                          f"(see {SUBSET_DOC})")


# ---- printing ---------------------------------------------------------------------------------------

class _Kernel:
    """A parallel loop printed as a kernel: its name, parameters (names of the host code it reads,
    scalars of the host code it adds into as one-element `cells`) and the arrays it writes that are
    copied back (`written`: the caller's, and those the host code reads after it, `live_after`)."""

    def __init__(self, fn, loop, name, live_after):
        self.fn, self.loop, self.name = fn, loop, name
        body = loop.body
        inside = {n for t in walk(body) if not isinstance(t, Accumulate) for n in defines(t)}   # (sums: outside)
        used = set().union(*(reads(t) for t in walk(body)))
        used |= names_in(loop.start) | names_in(loop.step)
        self.params = sorted(used - inside - {loop.var})
        self.cells = {t.target.id for t in walk(body) if isinstance(t, Accumulate) and isinstance(t.target, Name)
                      and t.target.id in self.params}
        for c in self.cells:
            if isinstance(fn.types.get(c), nt.Array):
                raise _refusal(fn, loop, "a whole array added into by every thread", "add into its elements")
        scratch = _fresh_arrays(fn) - live_after        # made by the host code, not read after the kernel
        self.written = [k for k, p in enumerate(self.params)
                        if p in self.cells or p not in scratch and any(written_array(t) == p for t in walk(body))]
        self.own = {a for a in {written_array(t) for t in walk(body)} - {None} if disjoint(body, a, loop.var, width(fn, loop))}
        taken = set(self.params) | assigned(body) | {loop.var}
        checks = any(isinstance(t, Effect) and t.call.fn in INDEX_CHECKS for t in walk(body))
        self.errors = [_fresh("errors", taken)] if checks else []     # the error record, where there are checks
        self.count = _fresh("count", taken)
        self.index = _fresh("index", taken)
        self.tile = _fresh("tile", taken)
        self.sums = {}          # target of a sum every thread adds into -> the thread's local of it
        for t in walk(body):
            target = self.summed_by_all(t)
            if target is not None and target not in self.sums:
                self.sums[target] = _fresh(f"sum{len(self.sums)}", taken)
        taken |= set(self.sums.values())
        self.thread_sums = {a: _fresh(f"{a}_mine", taken) for a in self.sums.values()}   # over its iterations

    def summed_by_all(self, t):
        """The target of accumulation `t` when it is one place for every thread (a host scalar, or an
        element at an index of the arguments): the threads sum into locals, a block adds once."""
        if not isinstance(t, Accumulate):
            return None
        if isinstance(t.target, Name) and t.target.id in self.cells:
            return t.target
        if isinstance(t.target, Subscript) and t.target.base.id not in self.own and \
                set().union(*(names_in(i) for i in t.target.index)) <= set(self.params):
            return t.target
        return None

    def cell(self, name):
        return f"{name}_cell"


_ALLOCATIONS = ("np.zeros", "np.zeros_like", "np.empty", "np.empty_like", "np.ones", "np.copy")


def _fresh_arrays(fn):
    """Names every binding of which in `fn` is a new array (an allocation or a copy): no other name
    shares their memory."""
    found = {}
    for t in walk(fn.body):
        if isinstance(t, Assign):
            fresh = isinstance(t.value, Call) and t.value.fn in _ALLOCATIONS
            found[t.target] = found.get(t.target, True) and fresh
    return {n for n, fresh in found.items() if fresh} - set(fn.params)


def _maybe_array(fn, a):
    """Is `a` an array, or of a type not known yet (the primal is printed before it is typed)?"""
    ty = fn.types.get(getattr(a, "id", None))
    return ty is None or isinstance(ty, nt.Array)


def _fresh(base, taken):
    name, k = base, 2
    while name in taken:
        name, k = f"{base}{k}", k + 1
    return name


class _KernelPrinter(Printer):
    """The body of a kernel: atomics where threads may share an element, device helpers, checks that
    record their failure."""

    def __init__(self, kernel):
        super().__init__(kernel.fn.types)
        self.k = kernel

    def stmt_text(self, s):
        fn, k = self.k.fn, self.k
        if isinstance(s, Accumulate):
            if s.reduce or (isinstance(s.target, Name) and isinstance(fn.types.get(s.target.id), nt.Array)):
                raise _refusal(fn, s, "an array added into as a whole inside a kernel", "add element by element")
            value = s.value
            if k.summed_by_all(s) is not None:
                return f"{k.sums[s.target]} += {self.expr(value)}"
            if isinstance(s.target, Name) and s.target.id in k.cells:
                return f"cuda.atomic.add({k.cell(s.target.id)}, 0, {self.expr(value)})"
            if isinstance(s.target, Subscript) and s.target.base.id not in k.own:
                index = s.target.index
                at = self.expr(index[0]) if len(index) == 1 else self.expr(Tuple(index))
                return f"cuda.atomic.add({s.target.base.id}, {at}, {self.expr(value)})"
        if isinstance(s, Effect):
            return self._effect(s)
        return super().stmt_text(s)

    def _effect(self, s):
        call, k = s.call, self.k
        if call.fn == "srcad.check_index":
            a, axis, i, site = call.args
            if not _maybe_array(k.fn, a):
                return "pass"
            size = Subscript(Attribute(a, "shape"), (axis,))
            check = f"cuda_device.index_fails({k.errors[0]}, {self.expr(size)}, {self.expr(i)}, {self.expr(site)})"
            return f"if {check}: {self.exit}"
        if call.fn == "srcad.check_loop_index":
            a, axis, start, stop, step, scale, offset, site, runs = call.args
            if not _maybe_array(k.fn, a):
                return "pass"
            size = self.expr(Subscript(Attribute(a, "shape"), (axis,)))
            trips = f"cuda_device.trip_count({self.expr(start)}, {self.expr(stop)}, {self.expr(step)})"
            first = f"{self.expr(scale)} * {self.expr(start)} + {self.expr(offset)}"
            last = f"{first} + ({trips} - 1) * ({self.expr(scale)} * {self.expr(step)})"
            fails = "cuda_device.index_fails"
            errors = k.errors[0]
            return (f"if {trips} > 0 and {self.expr(runs)} > 0 and ({fails}({errors}, {size}, {first}, "
                    f"{self.expr(site)}) or {fails}({errors}, {size}, {last}, {self.expr(site)})): {self.exit}")
        raise _refusal(k.fn, s, f"`{expr_text(call)}`", "kernels run arithmetic, math calls and array elements")

    def expr(self, e):
        return super().expr(_runtime_calls(self.k.fn, e, "cuda_device", device.NAMES))

    def kernel(self, w):
        """The kernel, each of its threads running the iterations `index`, `index` + the grid's size...
        (a grid sized to fill the device: `launch.run_threads`); with sums every iteration adds into, a
        device function for the iteration (returning its sums), summed in the thread, and the block's
        sums added once (`device.block_sum`), not each thread's or iteration's."""
        k = self.k
        params = [k.cell(p) if p in k.cells else p for p in k.params]
        sums = list(k.sums.values())
        self.exit = f"return ({', '.join(sums)},)" if sums else "return"
        if sums:
            w.line(0, "@cuda.jit(device=True, inline=\"always\")")
            w.line(0, f"def {k.name}_thread({', '.join([k.index] + params + k.errors)}):")
            for a in sums:
                w.line(1, f"{a} = 0.0")
            self._thread(w, 1)
            w.line(1, self.exit)
            w.line(0, "")
            w.line(0, "")
        w.line(0, "@cuda.jit(cache=True)")
        w.line(0, f"def {k.name}({', '.join([k.count] + params + k.errors)}):")
        stride = f"for {k.index} in range(cuda.grid(1), {k.count}, cuda.gridsize(1)):"
        if not sums:
            w.line(1, stride)
            self._thread(w, 2)
        else:
            mine = [k.thread_sums[a] for a in sums]
            w.line(1, f"{', '.join(mine)} = {', '.join('0.0' for _ in sums)}")
            w.line(1, stride)
            w.line(2, f"{', '.join(sums)}, = {k.name}_thread({', '.join([k.index] + params + k.errors)})")
            for a, m in zip(sums, mine):
                w.line(2, f"{m} += {a}")
            for a, m in zip(sums, mine):
                w.line(1, f"{a} = {m}")
            w.line(1, f"{k.tile} = cuda.shared.array({launch.THREADS_PER_BLOCK}, numba.float64)")
            for target, a in k.sums.items():
                w.line(1, f"{a} = cuda_device.block_sum({k.tile}, {a})")
                place = f"{k.cell(target.id)}, 0" if isinstance(target, Name) else \
                    f"{target.base.id}, {self.expr(target.index[0] if len(target.index) == 1 else Tuple(target.index))}"
                w.line(1, f"if cuda.threadIdx.x == 0 and {a} != 0.0:")
                w.line(2, f"cuda.atomic.add({place}, {a})")
        w.line(0, "")
        w.line(0, "")

    def _thread(self, w, indent):
        """One thread's iteration: the loop variable, then the loop's body."""
        k, loop = self.k, self.k.loop
        start, step = self.expr(loop.start), self.expr(loop.step)
        first = f"{k.index}" if loop.step == Const(1) else f"{k.index} * {step}"
        w.line(indent, f"{loop.var} = {first}" if loop.start == Const(0) else f"{loop.var} = {start} + {first}",
               loop.origin)
        self.block(w, loop.body, indent)


class _HostPrinter(Printer):
    """The host code of a function: its parallel loops launch their kernels."""

    def __init__(self, fn, kernels):
        super().__init__(fn.types)
        self.fn, self.kernels = fn, kernels

    def stmt(self, w, s, indent):
        if _is_kernel(s):
            k = self.kernels[id(s)]
            w.comment(indent, s.origin)
            for c in sorted(k.cells):
                w.line(indent, f"{k.cell(c)} = np.zeros(1)", s.origin)
            args = ", ".join(k.cell(p) if p in k.cells else p for p in k.params)
            count = self.expr(_trips(s))
            written = "".join(f"{i}, " for i in k.written)
            w.line(indent, f"cuda_launch.run_threads({k.name}, {count}, ({args}{',' if len(k.params) == 1 else ''}), "
                           f"({written}), {bool(k.errors)})", s.origin)
            for c in sorted(k.cells):
                w.line(indent, f"{c} += {k.cell(c)}[0]", s.origin)
            w.end_block()
            return
        if isinstance(s, (For, While)):
            raise _refusal(self.fn, s, "a loop whose iterations cannot run as independent threads",
                           "threads of a kernel may share only sums; keep what one thread computes in its own "
                           "locals and elements")
        super().stmt(w, s, indent)

    def expr(self, e):
        return super().expr(_runtime_calls(self.fn, e, "cuda_launch", launch.HOST_NAMES))


def _runtime_calls(fn, e, module, names):
    """`e` with srcad's runtime helpers called from `module` (the host's or the device's versions);
    a helper `names` does not hold is refused."""
    def visit(x):
        x = map_children(x, visit)
        if isinstance(x, Call) and x.fn.startswith("srcad."):
            name = x.fn[len("srcad."):]
            if name not in names:
                raise TransformError(f"{fn.name}: `{name}` has no version for the cuda target: this operation "
                                     f"cannot run in a kernel or around it (see {SUBSET_DOC})")
            return replace(x, fn=f"{module}.{name}")
        return x
    return visit(e)


def _kernels(fn):
    """{id(loop): _Kernel} for the parallel loops of `fn` outside other parallel loops."""
    found, count = {}, 0
    live = {}
    live_in(fn.body, {n for o in fn.outputs for n in names_in(o)}, live)

    def visit(stmts):
        nonlocal count
        for s in stmts:
            if _is_kernel(s):
                found[id(s)] = _Kernel(fn, s, f"{fn.name}_threads{count}", live[id(s)])
                count += 1
            elif isinstance(s, If):
                visit(s.body)
                visit(s.orelse)
    visit(fn.body)
    return found


def function_writer(fn, w=None):
    """The kernels and the host function of `fn`, then its CPU printing (`<name>_cpu`, for typing)."""
    w = w or Writer()
    kernels = _kernels(fn)
    for k in kernels.values():
        _KernelPrinter(k).kernel(w)
    _HostPrinter(fn, kernels).function(fn, w)
    return w


def function_source(fn, prefix):
    return function_writer(fn).text()


def module_source(functions, prefix):
    body = Writer()
    for fn in functions:
        function_writer(fn, body)
        body.line(0, "")
        body.line(0, "")
    cpu, _ = numba_cpu.module_source([replace(fn, name=f"{fn.name}_cpu") for fn in functions], prefix)
    head = HEADER + "\n\n"
    text = head + body.text().rstrip("\n") + "\n\n\n" + cpu
    origins = [None] * head.count("\n") + body.origins
    return text, origins + [None] * (text.count("\n") - len(origins))


class Host:
    """A generated host function; `cpu` is the same function for the CPU (compiled when typing asks)."""

    def __init__(self, run, cpu):
        self.run, self._cpu, self._jitted = run, cpu, None
        self.__name__ = run.__name__

    def __call__(self, *args):
        return self.run(*args)

    def cpu(self):
        if self._jitted is None:
            self._jitted = numba_cpu.jit(self._cpu)
        return self._jitted


def _dropping(kernel):
    """A kernel's Numba disk cache (its compiled code, next to the generated module, as the CPU's) made to
    drop entries it cannot load, as the CPU target's caches do (`numba_cpu.DroppingEntries`)."""
    if _CUDACache is not None and type(getattr(kernel, "_cache", None)) is _CUDACache:
        kernel._cache.__class__ = _DroppingCUDACache


try:
    from numba.cuda.dispatcher import CUDACache as _CUDACache
except ImportError:                   # Numba's CUDA simulator: nothing is compiled, nothing cached
    _CUDACache = None
else:
    class _DroppingCUDACache(numba_cpu.DroppingEntries, _CUDACache):
        """numba-cuda's disk cache of one kernel, dropping entries it cannot load."""


class NumbaCUDA(numba_cpu.NumbaCPU):
    """Kernels for one thread per iteration of each parallel loop, host code around them (see module)."""
    name = "cuda"
    policy = Policy("cuda", growable=False, shared_sums="atomic", products_in_place=False, keeps_results=False,
                    elementwise_loops=False, plain_adjoint=False)

    def types(self, dispatcher, arg_types, compile_it):
        return numba_cpu.primal_types(dispatcher.cpu(), arg_types, False)

    def lower(self, fn):
        return lower_for_cuda(fn)

    def module_source(self, functions, prefix):
        return module_source(functions, prefix)

    def function_source(self, fn, prefix):
        return function_source(fn, prefix)

    def load(self, path, source, name, callees=None):
        module = import_source(path, source)
        vars(module).update(callees or {})
        for value in vars(module).values():
            _dropping(value)
        return Host(getattr(module, name), getattr(module, f"{name}_cpu"))

    def load_cached(self, dispatcher, args):
        return False

    def call_state(self, args):
        return launch.Resident(args)

    def running(self, state):
        return launch.resident(state)

    def running_adjoint(self, state):
        return self.running(state)        # (kernels keep their own float modes; the host's is left as it is)
