"""The CPU target: stacks as NumPy buffers, IR printed as Python, compiled with `numba.njit`.

`NumbaCPU` is this target's `Backend` (registered as "cpu"). `lower_for_target`
turns the save constructs into this target's storage (a stack of scalars is a
NumPy buffer and a top counter, room reserved before a for loop, grown by
doubling in while loops; a stack of arrays copies may stand for, a buffer of
copies end to end with a list beside it for big ones, `runtime.push_array`;
other arrays a typed list) and accumulations through index arrays into
scatter-adds. After it the IR is plain assignments,
stores and calls, which `module_source` prints with a header of imports.
`infer_types` runs Numba's type inference (only) on a printed function; `jit`
compiles with Numba's on-disk cache and `load_cached` loads machine code from
it cheaply. Every Numba cache this target uses, srcad's runtime helpers'
included, drops an entry it cannot load (`DroppingEntries`). Loading it sets glibc's malloc
thresholds once (`heap.py`): what a call freed serves the next.
"""
import contextlib
import glob
import os
import stat
import textwrap
import threading
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numba
import numpy as np
from numba.core import errors as nb_errors
from numba.core import types as nt
from numba.core.caching import FunctionCache
from numba.core.dispatcher import Dispatcher

from .. import heap, runtime, subnormals
from ..ad.parallel import serial_where_unsafe
from ..ad.saving import CPU
from ..analysis.types import gather_axis, index_array, type_of
from ..ir import (Accumulate, Assign, BinOp, Call, Compare, Const, Effect, For, Global, If, Name, Pop, Push, Reserve,
                  Store, Subscript, TypeRef, UnaryOp)
from ..ir.forms import is_atom
from ..ir.printer import Printer, Writer
from ..opt.elementwise import ARITHMETIC
from ..ir.visit import all_blocks, clone, map_exprs, names_in, own_exprs, rewrite_top_down, subexpressions, walk
from ..runtime import EXPORTS
from .base import Backend
from .cache import _discard, import_source, warn_once

HEADER = "\n".join(["import math", "import numpy as np", "import numba", "from numba import types",
                    "from numba.typed import List",
                    textwrap.fill(f"from srcad.compiler.runtime import ({', '.join(EXPORTS)})", 110,
                                  subsequent_indent=" " * 36), ""])


def lower_for_target(fn, policy=CPU):
    """`fn` with the IR constructs this target has no statement for lowered, in place (storage as
    `policy` keeps it); returns `fn`."""
    return lower_scatter_adds(lower_stacks(serial_where_unsafe(fn), policy))


# ---- stacks ---------------------------------------------------------------------------------------

def lower_stacks(fn, policy=CPU):
    """Replace Push / Pop / Reserve in `fn` by buffer operations, in place; returns `fn`."""
    owners = _iteration_stacks(fn)
    copied = {name for name, stack in fn.stacks.items() if isinstance(stack.item, nt.Array)
              and stack.size is None and stack.objects and policy.in_buffer(stack)}
    for block in all_blocks(fn.body):
        block[:] = [t for s in block for t in _lowered(fn, s, copied)]
    init, counted = [], set()
    for name, stack in sorted(fn.stacks.items()):
        made = _allocation(name, stack, counted, name in copied) if name not in fn.params else []
        made += [Assign(stack.top, Const(0))] if stack.top not in fn.params else []
        if stack.objects and stack.objects not in fn.params:
            made.append(Assign(stack.objects, Call("List.empty_list", (TypeRef(stack.item),))))
        if name in owners:
            owners[name].body[:0] = made
        else:
            init += made
        fn.types.setdefault(stack.top, nt.intp)
    fn.body[:0] = init
    return fn


def _iteration_stacks(fn):
    """{stack: the parallel loop} for the stacks used only within the iterations of a parallel loop: each
    iteration makes its own, so that threads never share one."""
    every = _stack_uses(fn.body)
    owners = {}
    for loop in walk(fn.body):
        if isinstance(loop, For) and loop.parallel:
            owners.update((k, loop) for k, n in _stack_uses(loop.body).items() if n == every[k])
    return owners


def _stack_uses(stmts):
    return Counter(t.stack for t in walk(stmts) if isinstance(t, (Push, Pop, Reserve)))


def _allocation(name, stack, counted, copied):
    """A stack's storage: as large as `stack.size` where the policy sized it before the run (after the
    statements counting it, once for the stacks `counted` together), else a small buffer that grows
    (arrays: a typed list, or one buffer where they are `copied` end to end)."""
    if isinstance(stack.item, nt.Array) and not copied:
        return [Assign(name, Call("List.empty_list", (TypeRef(stack.item),)))]
    if stack.size is None:
        return [Assign(name, Call("np.empty", (Const(16), Global(f"np.{buffer_dtype(stack)}"))))]
    setup = [] if stack.size.setup in counted else clone(list(stack.size.setup))
    counted.add(stack.size.setup)
    return setup + [Assign(name, Call("np.empty", (stack.size.count, Global(f"np.{buffer_dtype(stack)}"))))]


def buffer_dtype(stack):
    """The dtype's name of the buffer a stack kept in one is: its scalars', or its arrays' elements'."""
    ty = stack.item.dtype if isinstance(stack.item, nt.Array) else stack.item
    return "bool_" if isinstance(ty, nt.Boolean) else str(ty)


def _lowered(fn, s, copying):
    """`s` on this target's storage (`copying`: the stacks keeping arrays as copies end to end)."""
    if not isinstance(s, (Push, Pop, Reserve)):
        return [s]
    copied = s.stack in copying
    stack = fn.stacks[s.stack]
    buf, top = Name(s.stack), Name(stack.top)
    if isinstance(s, Reserve):
        if isinstance(stack.item, nt.Array):      # arrays: each push makes its own room
            return []
        need = BinOp("+", top, s.count)
        return [If(Compare(">", need, Call("len", (buf,))), [Assign(s.stack, Call("grow", (buf, need)), s.origin)],
                   [], s.origin)]
    if isinstance(s, Push):
        bump = Assign(stack.top, BinOp("+", top, Const(1)), s.origin)
        if copied:
            return _copy_pushed(fn, s, stack)
        if isinstance(stack.item, nt.Array):     # a list popped and pushed again: written at its height
            return [If(Compare("<", top, Call("len", (buf,))), [Store(s.stack, (top,), s.value, s.origin)],
                       [Effect(Call(".append", (buf, s.value)), s.origin)], s.origin), bump]
        room = []
        if stack.checked:
            room = [If(Compare("==", top, Call("len", (buf,))),
                       [Assign(s.stack, Call("grow", (buf, BinOp("+", top, Const(1)))), s.origin)], [], s.origin)]
        return room + [Store(s.stack, (top,), s.value, s.origin), bump]
    drop = Assign(stack.top, BinOp("-", top, Const(1)), s.origin)
    value = Subscript(buf, (top,))
    if copied:
        kept = Call("kept_object", (buf, Name(stack.objects), top))
        return [If(Call("popped_object", (buf, top)), [_popped_into(s, kept)],
                   [_popped_into(s, Call("popped_array", (buf, top, Const(stack.item.ndim))))], s.origin),
                Assign(stack.top, Call("height_before_pop", (buf, top)), s.origin)]
    return [drop, _popped_into(s, value)]


def _popped_into(pop, value):
    if isinstance(pop.target, Name):
        return Assign(pop.target.id, value, pop.origin)
    return Store(pop.target.base.id, pop.target.index, value, pop.origin)


def _copy_pushed(fn, push, stack):
    """A push onto a stack of arrays kept as copies in one buffer (`runtime.push_array`; one too big to
    copy kept as an object in the list beside it, `runtime.keep_object`). A region's copy made only to
    be pushed is not made: the push copies the region (or keeps a copy of it as an object), where a
    rebound name's array is kept as it is. The buffer grows, and the list is touched, only in the
    branches that need them."""
    value, copied = push.value, False
    if isinstance(value, Call) and value.fn == ".copy":
        value, copied = value.args[0], True
    out = []
    if not isinstance(value, Name):
        bound = fn.names.fresh(f"{push.stack}_item")
        fn.types[bound] = type_of(fn, value)
        out, value = [Assign(bound, value, push.origin)], Name(bound)
    kept = Call(".copy", (value,)) if copied else value
    buf, top, o = Name(push.stack), Name(stack.top), push.origin
    height = fn.names.fresh(f"{stack.top}_after")
    fn.types[height] = nt.intp
    grown = Assign(push.stack, Call("grow", (buf, Name(height))), o)
    keep = Effect(Call("keep_object", (buf, Name(stack.objects), top, kept)), o)
    return out + [Assign(height, Call("height_after_push", (top, value)), o),
                  If(Compare(">", Name(height), Call("len", (buf,))), [grown], [], o),
                  If(Call("kept_as_object", (value,)), [keep], [Effect(Call("push_array", (buf, top, value)), o)], o),
                  Assign(stack.top, Name(height), o)]


# ---- accumulations through index arrays ----------------------------------------------------------------

def lower_scatter_adds(fn):
    """`d_x[idx] += g` with an index array becomes `add_at(d_x, idx, g)`, in place: Numba, like NumPy,
    applies `+=` once per distinct index, and an index repeated in `idx` must add each of its values."""
    for block in all_blocks(fn.body):
        block[:] = [t for s in block for t in _scatter_add(fn, s)]
    return fn


def _scatter_add(fn, s):
    if not (isinstance(s, Accumulate) and isinstance(s.target, Subscript)
            and any(index_array(fn, i) is not None for i in s.target.index)):
        return [s]
    value, out = s.value, []
    if s.reduce:          # summed down to the region's shape first
        region = fn.names.fresh("region")
        fn.types[region] = type_of(fn, s.target)
        out = [Assign(region, Call("np.zeros_like", (s.target,)), s.origin),
               Effect(Call("srcad.sum_into", (Name(region), value)), s.origin)]
        value = Name(region)
    k = gather_axis(fn, s.target.index)          # after integers only (the check of ad.local)
    dest = s.target.base if k == 0 else Subscript(s.target.base, s.target.index[:k])
    return out + [Effect(Call("srcad.add_at", (dest, s.target.index[k], value)), s.origin)]


# ---- printing ---------------------------------------------------------------------------------------

# exp and tanh of a float64 number, as `vector_math` computes them, in loops that vectorise
VECTOR_MATH = {"np.exp": "vector_exp", "math.exp": "vector_exp", "np.tanh": "vector_tanh", "math.tanh": "vector_tanh"}


def with_vector_math(fn):
    """`fn`, or a copy of it (its statements copied) whose elementwise loops (`_elementwise_loop`) call
    `vector_math`'s exp and tanh of float64 numbers: this target's spelling of them, in every function
    it prints. Elsewhere (a sum of exps, say) no loop is widened, and the C library's exp, one number
    at a time, costs less (4.3 ns against 6.9 ns)."""
    made = []

    def spelled(e):
        if _vector_math_call(fn, e):
            made.append(e)
            return Call(VECTOR_MATH[e.fn], tuple(rewrite_top_down(a, spelled) for a in e.args))
        return None
    body = clone(fn.body)
    for loop in walk(body):
        if _elementwise_loop(loop):
            for t in loop.body:
                map_exprs(t, lambda e: rewrite_top_down(e, spelled))
    return replace(fn, body=body) if made else fn


def _elementwise_loop(s):
    """Is `s` a loop whose iterations carry nothing from one to the next: each writes elements
    (`a[i] = v`, `a[i] += v`) from temporaries it binds before reading them, and nothing else?"""
    if not isinstance(s, For):
        return False
    temporaries = {t.target for t in s.body if isinstance(t, Assign)}
    bound = set()
    for t in s.body:
        if not isinstance(t, (Assign, Store, Accumulate)) or \
                isinstance(t, Accumulate) and not isinstance(t.target, Subscript):
            return False
        if any(names_in(e) & temporaries - bound for e in own_exprs(t)):
            return False           # a value of the iteration before
        if isinstance(t, Assign):
            bound.add(t.target)
    return True


def _vector_math_call(fn, e):
    return isinstance(e, Call) and e.fn in VECTOR_MATH and len(e.args) == 1 and not e.keywords and \
        _float64_number(fn, e.args[0])


def _float64_number(fn, e):
    """Is `e` arithmetic on numbers (no array) that gives a float64: some float64 in it, no float32?"""
    def kinds(x):
        if isinstance(x, Const):
            return {"float"} if isinstance(x.value, float) else {"int"} if type(x.value) is int else {"other"}
        if is_atom(x):
            ty = type_of(fn, x)
            return {"float"} if ty == nt.float64 else {"int"} if isinstance(ty, nt.Integer) else {"other"}
        if isinstance(x, BinOp) and x.op in ARITHMETIC:
            return kinds(x.left) | kinds(x.right)
        if isinstance(x, UnaryOp) and x.op in ("-", "+"):
            return kinds(x.operand)
        if isinstance(x, Call) and x.fn in VECTOR_MATH and len(x.args) == 1 and not x.keywords:
            return kinds(x.args[0]) | {"float"}
        return {"other"}
    found = kinds(e)
    return "float" in found and "other" not in found


class _TypeNames:
    """Module-level aliases for the Numba types generated code names (typed-list items)."""

    def __init__(self, prefix):
        self.prefix = prefix
        self.names = {}

    def __call__(self, ty):
        key = _type_source(ty)
        if key not in self.names:
            self.names[key] = f"{self.prefix}_{len(self.names)}"
        return self.names[key]

    def definitions(self):
        return "".join(f"{name} = {key}\n" for key, name in self.names.items())


def _type_source(ty):
    dtype = "boolean" if isinstance(ty.dtype, nt.Boolean) else str(ty.dtype)
    readonly = "" if ty.mutable else ", readonly=True"
    return f'types.Array(types.{dtype}, {ty.ndim}, "{ty.layout}"{readonly})'


def function_source(fn, prefix):
    """One generated function's text, as `ad.show_source` shows it."""
    return Printer(fn.types, _TypeNames(f"T_{prefix}")).function(with_vector_math(fn)).text()


def module_source(functions, prefix):
    """(module text, origins per line) of the functions, after the header; `prefix` names type aliases."""
    type_names = _TypeNames(f"T_{prefix}")
    body = Writer()
    for fn in functions:
        Printer(fn.types, type_names).function(with_vector_math(fn), body)
        body.line(0, "")
        body.line(0, "")
    head = HEADER + type_names.definitions() + "\n\n"
    origins = [None] * head.count("\n") + body.origins
    return head + body.text().rstrip("\n") + "\n", origins


# ---- compiling ---------------------------------------------------------------------------------------

def jit(function):
    # no_cfunc_wrapper: the C-callable wrapper Numba builds by default (for
    # first-class function values) is never used for generated code, and for a
    # forward that returns a large `saved` tuple it is a fifth of the LLVM IR.
    # error_model="numpy": x / 0, log(0), the adjoint of sqrt at 0 give inf and
    # nan, as the eager tape and NumPy do, instead of raising ZeroDivisionError.
    return _dropping(numba.njit(cache=True, no_cfunc_wrapper=True, error_model="numpy",
                                parallel=uses_prange(function))(function))


def uses_prange(function):
    """Does generated `function` run a loop in parallel (`numba.prange`, printed for a parallel For)?
    Only then is it compiled with parallel=True, which costs compile time everywhere else."""
    return "prange" in function.__code__.co_names


class DroppingEntries:
    """A Numba disk cache (mixed into its class) that discards an entry it cannot load (its index or
    data file truncated by a full disk or a killed process: Numba unpickles them and raises, and so
    would every later process) with a warning, and compiles again instead of failing the compile."""

    def load_overload(self, sig, target_context):
        try:
            return super().load_overload(sig, target_context)
        except Exception as exc:
            _discard_numba_entry(self._cache_file._index_path, exc)
            return None

    def save_overload(self, sig, data):
        try:
            super().save_overload(sig, data)
        except Exception as exc:      # an index another process left truncated since our load
            _discard_numba_entry(self._cache_file._index_path, exc)
            super().save_overload(sig, data)


class _DroppingCache(DroppingEntries, FunctionCache):
    """Numba's disk cache of one CPU function, dropping entries it cannot load."""


def _dropping(dispatcher):
    """`dispatcher` with its Numba disk cache (if any) made a `_DroppingCache`. The class is swapped on
    the cache object Numba made (same state, loading and saving guarded), not rebuilt: no second
    cache lookup."""
    if type(getattr(dispatcher, "_cache", None)) is FunctionCache:
        dispatcher._cache.__class__ = _DroppingCache
    return dispatcher


def _guard_runtime_caches():
    """srcad's runtime helpers (njit(cache=True), called by all generated code) and the register helpers
    every cpu adjoint's call runs drop unloadable entries too."""
    for module in (runtime, subnormals):
        for value in vars(module).values():
            if isinstance(value, Dispatcher):
                _dropping(value)


_guard_runtime_caches()
heap.keep_freed_memory()       # the arrays a forward keeps come back from the heap, not the kernel


def load_cached(dispatcher, args):
    """Load `dispatcher`'s overload for `args` from Numba's disk cache, without
    initialising the whole CPU target first.

    Numba's own cache load (Dispatcher.compile) starts with
    ``targetctx.refresh()``, which imports every typing and lowering registry
    (scipy.linalg included): ~0.3 s in a fresh process, though nothing that is
    loaded from the cache needs them. This mirrors the cache-hit branch of
    Dispatcher.compile minus that refresh; any later compile refreshes as
    usual. Returns True when the overload is there afterwards; False on a cache
    miss or anything unexpected, and the caller then simply calls the dispatcher.

    Numba unpickles its index and data files: files not the user's own are
    discarded first, and an entry that cannot be loaded (even with the full
    refresh) is discarded by `_DroppingCache` and compiled again.
    """
    from numba.core.compiler_lock import global_compiler_lock
    from numba.core.runtime import rtsys

    with global_compiler_lock:
        try:
            sig = tuple(dispatcher.typeof_pyval(a) for a in args)
        except Exception:
            return False
        if sig in dispatcher.overloads:
            return True
        cache = getattr(dispatcher, "_cache", None)
        index = getattr(getattr(cache, "_cache_file", None), "_index_path", None)
        if index is None:
            return False
        _check_numba_files(index)
        ctx = dispatcher.targetctx
        try:
            rtsys.initialize(ctx)
            cres = cache._load_overload(sig, ctx)
        except Exception:
            cres = cache.load_overload(sig, ctx)      # with Numba's refresh; None where it cannot load
        if cres is None or cres.objectmode:
            return False
        try:
            ctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
            dispatcher.add_overload(cres)
            dispatcher._cache_hits[sig] += 1
        except Exception:
            return False
        return True


def _numba_files(index):
    """Numba's index file of one function and its data files (<base>.nbi, <base>.<n>.nbc)."""
    base = index[:-len(".nbi")] if index.endswith(".nbi") else index
    return glob.glob(glob.escape(base) + ".*")


def _check_numba_files(index):
    for path in _numba_files(index):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode) or st.st_uid != os.getuid():
            _discard(path, "a symlink" if stat.S_ISLNK(st.st_mode) else
                     f"owned by uid {st.st_uid}, not by you (uid {os.getuid()})")


def _discard_numba_entry(index, exc):
    warn_once(("numba", index), f"srcad: discarded Numba's cache of {Path(index).name} in {Path(index).parent} "
                                f"(it cannot be loaded: {type(exc).__name__}: {exc}); compiling it again.")
    for path in _numba_files(index):
        with contextlib.suppress(OSError):
            os.unlink(path)


class Typed:
    """What type inference alone gives: Numba's SSA typemap and the return type."""

    def __init__(self, typemap, return_type):
        self.typemap = typemap
        self.return_type = return_type


_TYPE_ONLY = None


def _type_only_compiler():
    """A Numba compiler class whose pipeline stops after type inference: no
    lowering, no LLVM (the types of the primal are all the transform needs)."""
    global _TYPE_ONLY
    if _TYPE_ONLY is not None:
        return _TYPE_ONLY
    from numba.core.compiler import CompilerBase, DefaultPassBuilder
    from numba.core.compiler_machinery import FunctionPass, PassManager, register_pass
    from numba.core.typed_passes import NopythonTypeInference

    @register_pass(mutates_CFG=False, analysis_only=True)
    class StopAfterTyping(FunctionPass):
        _name = "srcad_stop_after_typing"

        def __init__(self):
            FunctionPass.__init__(self)

        def run_pass(self, state):
            state.cr = Typed(state.typemap, state.return_type)
            return False

    class TypeOnly(CompilerBase):
        def define_pipelines(self):
            pm = PassManager("srcad_type_only")
            pm.passes.extend(DefaultPassBuilder.define_untyped_pipeline(self.state).passes)
            pm.add_pass(NopythonTypeInference, "nopython frontend")
            pm.add_pass(StopAfterTyping, "stop after typing")
            pm.finalize()
            return [pm]

    _TYPE_ONLY = TypeOnly
    return TypeOnly


def infer_types(dispatcher, arg_types):
    """Run Numba's frontend and type inference (only) of a `jit` dispatcher's
    Python function for `arg_types`; returns a `Typed`. Typing errors are
    Numba's, as from a compile."""
    from numba.core import compiler
    from numba.core.compiler_lock import global_compiler_lock

    flags = compiler.Flags()
    dispatcher.targetdescr.options.parse_as_flags(flags, dispatcher.targetoptions)
    with global_compiler_lock:
        return compiler.compile_extra(dispatcher.targetdescr.typing_context, dispatcher.targetdescr.target_context,
                                      dispatcher.py_func, args=tuple(arg_types), return_type=None, flags=flags,
                                      locals=dispatcher.locals, pipeline_class=_type_only_compiler())



def import_jit(path, source, name, callees=None):
    """Function `name` of the generated module `source` (at `path`), as a Numba dispatcher; `callees`
    are the dispatchers it calls, by name (globals of the module, as Numba resolves them).

    One dispatcher per generated function and process: the same code loaded again (a new
    `ad.function` of the same function, a gradient function differentiated again, the same
    signature in another test) runs what was compiled already. A new dispatcher would compile it
    again wherever Numba's disk cache cannot serve it (code that holds a process's addresses, or
    compiled without optimizations), and read the cache file where it can."""
    module = import_source(path, source)
    vars(module).update(callees or {})
    with _LOADED_LOCK:
        made = vars(module).setdefault("__srcad_dispatchers__", {})
        if name not in made:
            made[name] = jit(getattr(module, name))
        return made[name]


_LOADED_LOCK = threading.Lock()


def primal_types(dispatcher, arg_types, compile_it):
    """Numba's typing of the primal. With `compile_it` (no gradient wanted: the caller is about to run
    the primal) compile it and read the types off the compile; otherwise type inference alone."""
    if compile_it:
        try:
            dispatcher.compile(tuple(arg_types))
        except AssertionError:      # an internal error of Numba's lowering: the passes on the types name the line
            pass
    overload = dispatcher.overloads.get(tuple(arg_types))
    if overload is not None and hasattr(overload.type_annotation, "typemap"):
        return Typed(overload.type_annotation.typemap, overload.signature.return_type)
    return infer_types(dispatcher, arg_types)      # not compiled, or loaded from Numba's cache (no typemap)


def output_types(return_type, returns_tuple):
    if returns_tuple and isinstance(return_type, nt.BaseTuple):
        return list(return_type.types)
    return [return_type]


# ---- the forward's stacks, handed in and kept from call to call -------------------------------------

def new_buffer(dtype):
    return np.empty(16, dtype)


# ---- the backend --------------------------------------------------------------------------------------

class NumbaCPU(Backend):
    """The "cpu" target: the functions of this module behind the `Backend` interface."""

    name = "cpu"
    policy = CPU
    errors = (nb_errors.TypingError, nb_errors.UnsupportedError, nb_errors.LoweringError)

    def types(self, dispatcher, arg_types, compile_it):
        return primal_types(dispatcher, arg_types, compile_it)

    def lower(self, fn):
        return lower_for_target(fn, self.policy)

    def module_source(self, functions, prefix):
        return module_source(functions, prefix)

    def function_source(self, fn, prefix):
        return function_source(fn, prefix)

    def load(self, path, source, name, callees=None):
        return import_jit(path, source, name, callees)

    def load_cached(self, dispatcher, args):
        return load_cached(dispatcher, args)

    def output_types(self, return_type, returns_tuple):
        return output_types(return_type, returns_tuple)

    def buffer_dtype(self, stack):
        return buffer_dtype(stack)

    def running_adjoint(self, state):
        return subnormals.flushing_subnormals

    def new_buffer(self, dtype):
        return new_buffer(dtype)
