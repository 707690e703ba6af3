"""The compiler's passes, in order, in one place; `transform` runs them and compiles the result.

    source --lower--> primal IR --webs, coalesce, bounds--> (cache key) --types--> typed primal
      --inplace, aliasing, activity, optional--> facts --reverse--> forward, adjoint
      --cleanup, accumulate--> --lower_stacks--> printed and compiled by Numba

Every pass takes the `Program` (the IR functions made so far) and returns it.
`run(pyfunc, arg_types, active, until=name)` stops after any pass and
`dump(program)` prints what is there: that is how tests look at the IR
between passes. `transform_function` differentiates IR itself (generated
code, for second derivatives).
"""
import threading
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from numba.core import errors as nb_errors
from numba.core import types as nb_types

from .ad.reverse import reverse
from .analysis.activity import analyse_activity
from .analysis.aliasing import analyse_aliasing
from .analysis.inplace import resolve_inplace
from .analysis.optional import flag_optional_values
from .analysis.types import assign_types, is_float
from .analysis.webs import split_webs
from .backends import cache
from .backends import numba_cpu as cpu
from .errors import TransformError, from_numba
from .front.bounds import insert_index_checks, site_message
from .front.flatten import flatten
from .front.lower import lower
from .front.parse import load
from .ir.printer import function_text
from .ir.visit import clone
from .opt.accumulate import sum_invariant_accumulations
from .opt.cleanup import (coalesce_copies, drop_restores_of_unchanged, drop_round_trips, drop_unread_saved,
                          eliminate_dead_code, first_accumulations, fold_constants, simplify)

_NUMBA_ERRORS = (nb_errors.TypingError, nb_errors.UnsupportedError, nb_errors.LoweringError)


@dataclass
class Program:
    """What one transform has made so far: the primal, then the forward and the adjoint."""
    primal: object
    forward: object = None
    adjoint: object = None
    arg_types: tuple = ()
    active: tuple = ()
    boundscheck: bool = True
    typed: object = None                 # Numba's typing of the primal (the driver sets it before `types`)

    def functions(self):
        return [f for f in (self.primal, self.forward, self.adjoint) if f is not None]


# ---- the passes ---------------------------------------------------------------------------------

def _lower(program):
    return program                       # `front` starts from `lower(load(pyfunc))`


def _webs(program):
    split_webs(program.primal)
    return program


def _coalesce(program):
    coalesce_copies(program.primal)
    return program


def _bounds(program):
    if program.boundscheck:
        insert_index_checks(program.primal)
    return program


def _types(program):
    assign_types(program.primal, program.typed.typemap, program.arg_types)
    return program


def _inplace(program):
    resolve_inplace(program.primal)
    return program


def _aliasing(program):
    fn = program.primal
    analyse_aliasing(fn, [p for p, a in zip(fn.params, program.active) if a])
    return program


def _activity(program):
    fn = program.primal
    analyse_activity(fn, [p for p, a in zip(fn.params, program.active) if a])
    return program


def _optional(program):
    flag_optional_values(program.primal)
    return program


def _reverse(program):
    program.forward, program.adjoint = reverse(program.primal)
    return program


def _cleanup(program):
    forward, adjoint = program.forward, program.adjoint
    for fn in (forward, adjoint):
        fold_constants(fn)
        simplify(fn)
    first_accumulations(adjoint)
    drop_round_trips(adjoint)
    eliminate_dead_code(adjoint)
    drop_restores_of_unchanged(adjoint)
    eliminate_dead_code(adjoint)
    drop_unread_saved(forward, adjoint)
    eliminate_dead_code(adjoint)
    return program


def _accumulate(program):
    sum_invariant_accumulations(program.adjoint)
    return program


def _lower_stacks(program):
    for fn in (program.forward, program.adjoint):
        cpu.lower_for_target(fn)
    return program


PASSES = [
    ("lower", _lower),
    ("webs", _webs),
    ("coalesce", _coalesce),
    ("bounds", _bounds),
    ("types", _types),
    ("inplace", _inplace),
    ("aliasing", _aliasing),
    ("activity", _activity),
    ("optional", _optional),
    ("reverse", _reverse),
    ("cleanup", _cleanup),
    ("accumulate", _accumulate),
    ("lower_stacks", _lower_stacks),
]
PASS_NAMES = [name for name, _ in PASSES]
_FRONT = PASS_NAMES[:PASS_NAMES.index("types")]    # enough for the cache key: they run on every compile


def front(pyfunc, arg_types, active, boundscheck=True):
    """The Program after the front passes (nothing of Numba's runs)."""
    info = load(pyfunc)
    nones = {a.arg for a, t in zip(info.tree.args.args, arg_types) if t == nb_types.none}
    program = Program(lower(info, nones), arg_types=tuple(arg_types), active=tuple(bool(a) for a in active),
                      boundscheck=boundscheck)
    _check_arguments(program.primal, program.arg_types, program.active)
    return _run_passes(program, _FRONT)


def _run_passes(program, names, until=None):
    for name, step in PASSES:
        if name in names:
            program = step(program)
        if name == until:
            break
    return program


def run(pyfunc, arg_types, active, until=None, boundscheck=True):
    """The Program after pass `until` (default: all of them), for inspection: `dump(run(...))`."""
    if until is not None and until not in PASS_NAMES:
        raise ValueError(f"no pass named {until!r}; the passes are {', '.join(PASS_NAMES)}")
    program = front(pyfunc, arg_types, active, boundscheck)
    if until in _FRONT:
        return program
    primal = _primal_of(program, cache.cache_dir())
    program.typed = _typing(primal.dispatcher, program, primal.path, primal.origins)
    return _run_passes(program, PASS_NAMES[len(_FRONT):], until)


def dump(program):
    """The text of every function in `program`."""
    return "\n".join(function_text(fn) for fn in program.functions())


def _check_arguments(fn, arg_types, active):
    if len(arg_types) != len(fn.params) or len(active) != len(fn.params):
        raise TypeError(f"{fn.name} takes {len(fn.params)} arguments ({', '.join(map(fn.names.user, fn.params))}); "
                        f"got {len(arg_types)} types and {len(active)} activity flags")
    for p, t, a in zip(fn.params, arg_types, active):
        if a and not is_float(t):
            raise TypeError(f"argument `{fn.names.user(p)}` of {fn.name} has type {t}; only float scalars and float "
                            "arrays can be differentiated")


def _typing(dispatcher, program, path, origins, compile_it=False):
    try:
        return cpu.primal_types(dispatcher, program.arg_types, compile_it)
    except _NUMBA_ERRORS + (NameError,) as exc:
        raise from_numba(exc, path, origins, program.primal.name) from None


# ---- differentiating IR -------------------------------------------------------------------------

def transform_function(fn, arg_types, active):
    """Differentiate an IR Function (generated code, say `ad.vjp.vjp_function` of an earlier
    transform) the way `transform` differentiates Python: its values are brought to atoms
    (`flatten`), its types come from Numba's inference on its printed copy (lowered for the target),
    then the passes from `inplace` on. Returns a `Transformed`."""
    fn = flatten(copy_function(fn))
    program = Program(fn, arg_types=tuple(arg_types), active=tuple(bool(a) for a in active))
    _check_arguments(fn, program.arg_types, program.active)
    typed_copy = cpu.lower_for_target(copy_function(fn))
    src, origins = cpu.module_source([typed_copy], fn.name)
    root = cache.cache_dir()
    path = root / f"{fn.name}_{cache.content_hash(src)[:20]}_ir.py"
    cache.write_module(path, src)
    primal = Checked(cpu.import_jit(path, src, fn.name), path, origins, fn.name)
    program.typed = _typing(primal.dispatcher, program, path, origins)
    assign_types(fn, program.typed.typemap, program.arg_types)
    program = _run_passes(program, PASS_NAMES[PASS_NAMES.index("inplace"):])
    return _compile(program, primal, src[src.index("def "):], root, fn.name)


def copy_function(fn):
    """A copy of `fn` that passes may change freely (statements copied, expressions shared)."""
    return replace(fn, params=list(fn.params), body=clone(fn.body), outputs=list(fn.outputs), types=dict(fn.types),
                   stacks=dict(fn.stacks), facts=dict(fn.facts), workspace=list(fn.workspace))


# ---- compiling and caching ----------------------------------------------------------------------

class Transformed:
    """The compiled primal, forward and adjoint of one function for one signature.

    * ``primal(*args)`` returns exactly what the user function returns (compiled on first use).
    * ``forward(*args)`` returns ``(outputs, saved)``: ``outputs`` as from ``primal``, ``saved`` an
      opaque value for the adjoint. Its stacks are buffers of earlier calls, given back when their
      `saved` is dropped, so repeated gradients do not allocate their saves afresh.
    * ``adjoint(*args, saved, d_out)`` returns one gradient per *active* argument, in argument order;
      ``d_out`` has the structure of the outputs (one float or array, or a tuple). Gradients have the
      argument's shape and dtype (float32 scalars: float32). It leaves ``saved`` as it was, so it may
      run more than once (persistent tapes).

    ``returns_tuple``, ``n_outputs`` and ``output_types`` describe the outputs; ``source(kind)`` gives
    the generated code of "primal", "forward" or "adjoint"; ``written_params`` names the parameters the
    function writes into (an argument sharing memory with one of them is refused by the caller);
    ``dispatchers`` are the three Numba dispatchers.
    """

    def __init__(self, name, primal, forward, adjoint, meta, active, output_types=None):
        self.name = name
        self.primal = primal
        self._forward, self._adjoint = forward, adjoint
        self.sources = meta["sources"]
        self.returns_tuple = meta["returns_tuple"]
        self.n_outputs = meta["n_outputs"]
        self.output_types = output_types if output_types is not None else [None] * self.n_outputs
        self.active = active
        self.written_params = tuple(meta["written_params"])
        self._workspace = list(meta["workspace"])          # dtypes of the forward's scalar stacks
        self._slots = tuple(meta["slots"])                  # where their final buffers sit in `saved`
        self._once = meta["once_per_forward"]               # the adjoint restores shared buffers in place
        self._optional = [tuple(o) for o in meta["optional_outputs"]]   # (output, slot of its flag, ndim, dtype)
        self._pool = []

    def forward(self, *args):
        try:
            buffers = self._pool.pop()
        except IndexError:
            buffers = tuple(cpu.new_buffer(d) for d in self._workspace)
        inputs = _copies(args) if self._once else None
        outputs, saved = self._forward(*args, *buffers)
        if self._optional:
            outputs = self._none_where_flagged(outputs, saved)
        return outputs, Saved(saved, self, inputs) if self._workspace or self._once else saved

    def _none_where_flagged(self, outputs, saved):
        """Outputs that may be None are None where the forward's flag says so (it computed a placeholder)."""
        outs = list(outputs) if self.returns_tuple else [outputs]
        for k, slot, _, _ in self._optional:
            if saved[slot]:
                outs[k] = None
        return tuple(outs) if self.returns_tuple else outs[0]

    def cotangent_of_none(self, k, lead=()):
        """What the adjoint takes as the cotangent of output `k` where it is None (it is not used)."""
        ndim, dtype = next((ndim, dtype) for j, _, ndim, dtype in self._optional if j == k)
        return np.zeros(tuple(lead) + (0,) * ndim, dtype)

    def release(self, saved):
        """Keep the stack buffers of a `saved` nobody needs any more, for the next forward."""
        if len(self._pool) < 2:
            self._pool.append(tuple(saved[i] for i in self._slots))

    def adjoint(self, *args):
        *values, saved, d_out = args
        d_outs = d_out if self.returns_tuple else (d_out,)
        if isinstance(saved, Saved):
            if self._once and saved.used:     # the last adjoint took the buffers back: run the forward again
                buffers = (cpu.new_buffer(d) for d in self._workspace)
                saved.values = self._forward(*_copies(saved.inputs), *buffers)[1]
            saved.used = True
            saved = saved.values
        return self._adjoint(*values, *saved, *d_outs)

    @property
    def dispatchers(self):
        return (self.primal, self._forward, self._adjoint)

    def source(self, kind="adjoint"):
        if kind not in self.sources:
            raise ValueError(f"kind must be one of {sorted(self.sources)}, got {kind!r}")
        return self.sources[kind]

    def __repr__(self):
        return f"<Transformed {self.name} outputs={self.n_outputs} active={self.active}>"


def _copies(args):
    """The arguments of a call, arrays copied (what a forward that writes into them may run on again)."""
    return tuple(np.copy(a) if isinstance(a, np.ndarray) else a for a in args)


class Saved:
    """What a forward saved for its adjoint. When it is dropped (the tape node that held it is gone),
    its stack buffers go back to the function for the next forward instead of back to the OS."""

    __slots__ = ("values", "used", "inputs", "_owner")

    def __init__(self, values, owner, inputs=None):
        self.values = values
        self.used = False
        self.inputs = inputs          # the arguments as the forward got them, where it may have to run again
        self._owner = owner

    def __del__(self):
        try:
            if self._owner._workspace:
                self._owner.release(self.values)
        except Exception:      # interpreter shutdown: nothing to keep them for
            pass


class Checked:
    """A Numba dispatcher whose errors name the user's function and line instead of the generated
    code: compile errors, and the index checks of `front.bounds` (`sites`). Attributes are the
    dispatcher's."""

    def __init__(self, dispatcher, path, origins, name, sites=()):
        self.dispatcher = dispatcher
        self._where = (path, origins, name)
        self._sites = sites
        self._try_cache = True

    def __call__(self, *args):
        if self._try_cache:
            self._try_cache = False     # first call: a light (and checked) load from Numba's disk cache
            cpu.load_cached(self.dispatcher, args)
        try:
            return self.dispatcher(*args)
        except _NUMBA_ERRORS as exc:
            raise from_numba(exc, *self._where) from None
        except IndexError as exc:
            raise IndexError(site_message(self._where[2], self._sites, exc)) from None

    def __getattr__(self, name):
        return getattr(self.dispatcher, name)


_COMPILE_LOCK = threading.RLock()
_META_KEYS = ("sources", "returns_tuple", "n_outputs", "written_params", "workspace", "slots", "sites",
              "once_per_forward", "optional_outputs", "module_sha256")


def transform(pyfunc, arg_types, active, boundscheck=True):
    """Parse, transform and compile `pyfunc` for `arg_types` (Numba types), differentiating the
    arguments whose `active` flag is True; returns a `Transformed`.

    Only Numba's type inference runs on the primal here (its types drive the transform); the primal
    itself is compiled when first called, so a gradient compiles two functions, not three.
    `boundscheck`: index checks (`front.bounds`); without them an index out of range reads or writes
    memory it should not. One transform at a time in a process, one process at a time per cache
    entry; a cache directory that fails a write is given up for a private one (`cache.cache_dir`)."""
    with _COMPILE_LOCK:
        root = cache.cache_dir()
        try:
            return _transform(pyfunc, arg_types, active, bool(boundscheck), root)
        except OSError as exc:
            if exc.filename is None or root not in Path(exc.filename).parents:
                raise
            cache.refuse(root, exc)
            return _transform(pyfunc, arg_types, active, bool(boundscheck), cache.cache_dir())


def _transform(pyfunc, arg_types, active, boundscheck, root):
    program = front(pyfunc, arg_types, active, boundscheck)
    name = program.primal.name
    primal_src, _ = cpu.module_source([program.primal], f"{name}_primal")
    base = f"{name}_{cache.cache_key(primal_src, program.arg_types, program.active)}"
    with cache.entry_lock(root, base):
        primal = _primal_of(program, root)
        meta = cache.load_meta(root / f"{base}.json", _META_KEYS)
        module_src = cache.read_module(root / f"{base}.py") if meta is not None else None
        if module_src is not None and cache.content_hash(module_src) == meta["module_sha256"]:
            forward, adjoint = _load(root / f"{base}.py", module_src, [], name, meta["sites"])
            return Transformed(name, primal, forward, adjoint, meta, program.active)
        program.typed = _typing(primal.dispatcher, program, primal.path, primal.origins,
                                compile_it=not any(program.active))
        program = _run_passes(program, PASS_NAMES[len(_FRONT):])
        return _compile(program, primal, primal.text, root, name, base)


def _primal_of(program, root):
    """The primal's module, written once per signature (shared by every active mask), lazily compiled."""
    fn = program.primal
    src, origins = cpu.module_source([fn], f"{fn.name}_primal")
    path = root / f"{fn.name}_{cache.cache_key(src, program.arg_types, ())}_primal.py"
    cache.write_module(path, src)
    return _lazy_primal(path, src, origins, fn.name, fn.facts.get("bounds", {}).get("sites", []))


def _compile(program, primal, primal_text, root, name, base=None):
    """Print, write, load and describe the forward and adjoint of `program`."""
    forward, adjoint = program.forward, program.adjoint
    module_src, origins = cpu.module_source([forward, adjoint], name)
    path = root / f"{base or name + '_' + cache.content_hash(module_src)[:20]}.py"
    cache.write_module(path, module_src)
    sites = program.primal.facts.get("bounds", {}).get("sites", [])
    fwd, adj = _load(path, module_src, origins, name, sites)
    meta = {"sources": {"primal": primal_text,
                        "forward": cpu.function_source(forward, name), "adjoint": cpu.function_source(adjoint, name)},
            "returns_tuple": program.primal.returns_tuple, "n_outputs": len(program.primal.outputs),
            "written_params": program.primal.facts["aliasing"]["written_params"],
            "workspace": [cpu.buffer_dtype(forward.stacks[w]) for w in forward.workspace],
            "slots": cpu.workspace_slots(forward), "sites": sites,
            "once_per_forward": adjoint.facts["reverse"]["once_per_forward"],
            "optional_outputs": _optional_outputs(program),
            "module_sha256": cache.content_hash(module_src)}
    if base is not None:
        cache.save_meta(root / f"{base}.json", meta)
    types = cpu.output_types(program.typed.return_type, program.primal.returns_tuple)
    return Transformed(name, primal, fwd, adj, meta, program.active, types)


def _optional_outputs(program):
    """(output, position of its flag in `saved`, rank, dtype) of each output that may be None."""
    primal, saved = program.primal, program.forward.facts["reverse"]["saved"]
    out = []
    for k, flag in sorted(primal.facts.get("optional", {}).get("outputs", {}).items()):
        ty = primal.types[primal.outputs[k].id]
        out.append((k, saved.index(flag), getattr(ty, "ndim", 0), str(getattr(ty, "dtype", ty))))
    return out


_PRIMALS = {}


def _lazy_primal(path, source, origins, name, sites):
    primal = _PRIMALS.get(path)
    if primal is None:
        primal = _PRIMALS[path] = LazyPrimal(path, source, origins, name, sites)
    return primal


class LazyPrimal:
    """The plain compiled primal, imported and compiled (or loaded from Numba's disk cache) only when
    first used: the gradient path never needs it. Calls and attributes are a `Checked` dispatcher's."""

    def __init__(self, path, source, origins, name, sites):
        self.path, self.source, self.origins, self.name, self.sites = path, source, origins, name, sites
        self._checked = None

    @property
    def text(self):
        """The primal function's source, without the module's header."""
        return self.source[self.source.index("def "):]

    @property
    def checked(self):
        with _COMPILE_LOCK:
            if self._checked is None:
                dispatcher = cpu.import_jit(self.path, self.source, self.name)
                self._checked = Checked(dispatcher, self.path, self.origins, self.name, self.sites)
        return self._checked

    @property
    def dispatcher(self):
        return self.checked.dispatcher

    def __call__(self, *args):
        return (self._checked or self.checked)(*args)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.checked.dispatcher, name)


def _load(path, source, origins, name, sites):
    return tuple(Checked(cpu.import_jit(path, source, f"{name}_{kind}"), path, origins, name, sites)
                 for kind in ("forward", "adjoint"))


__all__ = ["PASSES", "Program", "Transformed", "TransformError", "dump", "run", "transform", "transform_function"]
