"""The compiler's passes, in order, in one place, and the pass manager that runs them.

    source --lower--> primal IR --webs, coalesce, bounds--> (cache key) --types--> typed primal
      --inplace, aliasing, activity, optional--> facts --results, reverse--> forward, adjoint
      --cleanup, accumulate--> (kept: `Program.ir`) --lower_stacks, zero_guards (and the plain adjoint),
      loop_order, first_writes, share, elementwise--> the target's IR

Every pass takes the `Program` (the IR functions made so far) and returns it.
The target (a `Backend`, found by name) types the primal, decides where saved
values may be kept (`policy`, given to `reverse`) and lowers what it has no
statement for. `run(pyfunc, arg_types, active, until=name)` stops after any
pass and `dump(program)` prints what is there: that is how tests look at the
IR between passes. Compiling and caching the result is `driver.py`'s job.
"""
import copy
from dataclasses import dataclass, replace

from numba.core import types as nb_types

from .ad.results import name_results
from .ad.reverse import reverse
from .analysis.activity import analyse_activity
from .analysis.aliasing import analyse_aliasing
from .analysis.inplace import resolve_inplace
from .analysis.optional import flag_optional_values
from .analysis.types import assign_types, is_float, list_storages, unify
from .analysis.webs import split_webs
from .backends import cache
from .backends.base import get as get_backend
from .compiled import IR, primal_of
from .errors import from_numba, numba_origin, refuse
from .front.bounds import insert_index_checks
from .front.lower import lower
from .front.parse import load
from .ir.facts import Activity, Aliasing, Bounds, Lowered, OptionalValues, Reverse
from .ir.printer import function_text
from .ir import Assign, Name, Store
from .ir.visit import blocks, clone, walk
from .opt.accumulate import sum_invariant_accumulations
from .opt.first_writes import write_first_accumulations
from .opt.loop_order import ascend_independent_loops
from .opt.merged_stacks import merge_stacks
from .opt.recomputed_saves import recompute_cheap_saves
from .opt.saved_when_made import save_when_made
from .opt.elementwise import loop_elementwise
from .opt.shared import compute_repeats_once, results_handed_on
from .opt.plain_adjoint import plain_adjoint
from .opt.summed_products import sum_products_first
from .opt.zero_guards import version_guarded_stretches
from .opt.cleanup import (coalesce_copies, drop_restores_of_unchanged, drop_round_trips, drop_unread_saved,
                          eliminate_dead_code, first_accumulations, fold_constants, simplify)


@dataclass
class Program:
    """What one transform has made so far: the primal, then the forward and the adjoint, for one target."""
    primal: object
    forward: object = None
    adjoint: object = None
    arg_types: tuple = ()
    active: tuple = ()
    boundscheck: bool = True
    backend: object = None               # the target's `Backend`
    typed: object = None                 # the target's typing of the primal (set before `types`)
    ir: IR = None                        # primal, forward and adjoint before `lower_stacks`
    list_rows: dict = None               # lists of arrays found so far (`ListOfArrays`) -> items' (rank, dtype)
    plain_adjoint: object = None         # the adjoint without zero-cotangent guards (`opt/plain_adjoint.py`)

    def functions(self):
        return [f for f in (self.primal, self.forward, self.adjoint, self.plain_adjoint) if f is not None]

    def adjoints(self):
        """The adjoint, and the plain one where there is one: the passes after `zero_guards` run on both."""
        return [f for f in (self.adjoint, self.plain_adjoint) if f is not None]


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
    else:
        program.primal.facts.put(Bounds())
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


def _results(program):
    name_results(program.primal, program.backend.policy)
    return program


def _reverse(program):
    program.forward, program.adjoint = reverse(program.primal, program.backend.policy)
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


def _zero_guards(program):
    """On the code compiled; the IR kept (`Program.ir`) keeps its guards alone, and the gradient function
    made of it to differentiate again versions them too (`ad/vjp.py`). Where the target runs one, the
    adjoint without guards is made first (`opt/plain_adjoint.py`)."""
    if program.backend.policy.plain_adjoint:
        program.plain_adjoint = plain_adjoint(program.primal, program.adjoint, copy_function)
    version_guarded_stretches(program.adjoint)
    return program


def _loop_order(program):
    for fn in program.adjoints():
        ascend_independent_loops(fn)
    return program


def _first_writes(program):
    """On the code compiled only: the IR kept (`Program.ir`), differentiated again, keeps its accumulations."""
    for fn in program.adjoints():
        write_first_accumulations(fn, program.backend.policy.products_in_place)
        sum_products_first(fn)
    return program


def _share(program):
    fused = program.backend.policy.elementwise_loops
    compute_repeats_once(program.forward, fused=fused)
    for fn in program.adjoints():
        compute_repeats_once(fn, results_handed_on(program.primal, fn), fused)
    return program


def _elementwise(program):
    """On the code compiled only (`Program.ir` keeps the array statements, differentiated again)."""
    if program.backend.policy.elementwise_loops:
        for fn in (program.forward, *program.adjoints()):
            loop_elementwise(fn)
    return program


def _lower_stacks(program):
    """The IR is kept as the reverse pass left it; the compiled code saves scalars in loops when they are
    made, makes the cheap ones again instead, and keeps several on one stack (`opt/saved_when_made.py`,
    `opt/recomputed_saves.py`, `opt/merged_stacks.py`), then the target lowers its stacks."""
    program.ir = IR(program.primal, copy_function(program.forward), copy_function(program.adjoint))
    recompute_cheap_saves(program.forward, program.adjoint, save_when_made(program.forward, program.adjoint))
    merge_stacks(program.forward, program.adjoint)
    for fn in (program.forward, program.adjoint):
        program.backend.lower(fn)
    return program


@dataclass(frozen=True)
class Pass:
    """One pass: `run(program) -> program`. A pass that changes the IR of some of the program's functions
    (`changes`: "primal", "forward", "adjoint") names the facts that stay true of them (`keeps`, besides
    those it makes itself); run_passes drops the others. An analysis changes nothing."""
    name: str
    run: object
    changes: tuple = ()
    keeps: tuple = ()


PASSES = [
    Pass("lower", _lower),
    Pass("webs", _webs, ("primal",), (Lowered,)),
    Pass("coalesce", _coalesce, ("primal",), (Lowered,)),
    Pass("bounds", _bounds, ("primal",), (Lowered, Bounds)),
    Pass("types", _types),
    Pass("inplace", _inplace, ("primal",), (Lowered, Bounds)),
    Pass("aliasing", _aliasing),
    Pass("activity", _activity),
    Pass("optional", _optional, ("primal",), (Lowered, Bounds, Aliasing, Activity, OptionalValues)),
    Pass("results", _results, ("primal",), (Lowered, Bounds, Aliasing, Activity, OptionalValues)),
    Pass("reverse", _reverse),
    Pass("cleanup", _cleanup, ("forward", "adjoint"), (Reverse, Aliasing)),
    Pass("accumulate", _accumulate, ("adjoint",), (Reverse, Aliasing)),
    Pass("lower_stacks", _lower_stacks, ("forward", "adjoint"), (Reverse,)),
    Pass("zero_guards", _zero_guards, ("adjoint",), (Reverse,)),
    Pass("loop_order", _loop_order, ("adjoint",), (Reverse,)),
    Pass("first_writes", _first_writes, ("adjoint",), (Reverse,)),
    Pass("share", _share, ("forward", "adjoint"), (Reverse,)),
    Pass("elementwise", _elementwise, ("forward", "adjoint"), (Reverse,)),
]
PASS_NAMES = [p.name for p in PASSES]
FRONT = PASS_NAMES[:PASS_NAMES.index("types")]    # enough for the cache key: they run on every compile


# ---- the pass manager -----------------------------------------------------------------------------

def front(pyfunc, arg_types, active, boundscheck=True, target="cpu", list_rows=None):
    """The Program of `pyfunc` after the front passes (nothing of the target's runs but printing);
    `list_rows`: its lists of arrays (`ListOfArrays`), once typing has found them."""
    info = load(pyfunc)
    nones = {a.arg for a, t in zip(info.tree.args.args, arg_types) if t == nb_types.none}
    options = {a.arg: t.literal_value for a, t in zip(info.tree.args.args, arg_types)
               if isinstance(t, nb_types.StringLiteral)}     # strings: constants of this compile, as in Numba
    options.update((a.arg, t.dispatcher.py_func) for a, t in zip(info.tree.args.args, arg_types)
                   if isinstance(t, nb_types.Dispatcher))     # functions too: inlined where called
    arg_types = [nb_types.unicode_type if isinstance(t, nb_types.StringLiteral) else t for t in arg_types]
    params = [a.arg for a in info.tree.args.args]
    integers = {p for p, t in zip(params, arg_types) if isinstance(t, nb_types.Integer)}
    integer_arrays = {p for p, t in zip(params, arg_types)
                      if isinstance(t, nb_types.Array) and isinstance(t.dtype, nb_types.Integer)}
    program = Program(lower(info, nones, options, any(active), integers, integer_arrays, list_rows),
                      arg_types=tuple(arg_types), active=tuple(bool(a) for a in active),
                      boundscheck=boundscheck, backend=get_backend(target), list_rows=dict(list_rows or {}))
    check_arguments(program.primal, program.arg_types, program.active)
    return run_passes(program, FRONT)


def finish(program, primal, until=None, compile_it=False):
    """Type `program`'s primal with its compiled form `primal` (a `compiled.LazyPrimal`), then run the
    passes from `types` on (to `until`). `compile_it`: the primal is about to run anyway. Raises
    `ListOfArrays` where a list grown by append turns out to hold arrays: the caller lowers again."""
    backend = program.backend
    try:
        program.typed = backend.types(primal.dispatcher, program.arg_types, compile_it)
    except backend.errors + (NameError,) as exc:
        origin = numba_origin(exc, primal.path, primal.origins)
        appended = _appended_at(program.primal, origin)
        if appended is None:
            raise from_numba(exc, primal.path, primal.origins, program.primal.name) from None
        raise _list_of_arrays(program, appended) from None
    return run_passes(program, PASS_NAMES[len(FRONT):], until)


class ListOfArrays(Exception):
    """Typing found that a list grown by append holds arrays: lower the function again with `rows`
    (every list of arrays found so far -> its items' (rank, dtype)), keeping it as the rows of one array."""

    def __init__(self, rows):
        super().__init__(f"lists of arrays: {rows}")
        self.rows = rows


def _appended_at(fn, origin):
    """The store of an item into a list's storage on the line `origin` (where typing failed), or None."""
    lists = list_storages(fn)
    return next((s for s in walk(fn.body) if isinstance(s, Store) and origin is not None and s.origin == origin
                 and s.array in lists), None)


def _list_of_arrays(program, store):
    """`ListOfArrays` for the list `store` appends to where its item types as an array of numbers (typed
    by the function cut right after that item is computed), else its refusal."""
    fn = program.primal
    name = list_storages(fn)[store.array]
    item = _item_type(program, store)
    if isinstance(item, nb_types.Array) and isinstance(item.dtype, (nb_types.Float, nb_types.Integer)) and \
            name not in program.list_rows:
        return ListOfArrays({**program.list_rows, name: (item.ndim, f"np.{item.dtype}")})
    return refuse(store.origin, f"a list of {item or 'other items than numbers'}, `{fn.names.user(name)}`",
                  "srcad keeps a list grown by append as an array of numbers, or of arrays of one shape: append "
                  "numbers or arrays, or allocate the array and fill it")


def _item_type(program, store):
    """The type of the item `store` puts into a list: the primal cut right after that item is computed
    (it returns the item), typed by the target; None where that fails."""
    fn = copy_function(program.primal)
    item = fn.names.fresh("appended")
    fn.body, _ = _cut_at(fn.body, store.uid, item, store.value)
    fn.outputs, fn.returns_tuple = [Name(item)], False
    try:
        typed = program.backend.types(primal_of(fn, program.arg_types, cache.cache_dir(), program.backend).dispatcher,
                                      program.arg_types, False)
    except program.backend.errors + (NameError,):
        return None
    return unify(typed.typemap).get(item)


def _cut_at(stmts, uid, item, value):
    """`stmts` up to the statement `uid`, which becomes `item = value` (the blocks around it cut there
    too); and whether it was found."""
    out = []
    for s in stmts:
        if s.uid == uid:
            return out + [Assign(item, value, s.origin)], True
        for block in blocks(s):
            cut, found = _cut_at(block, uid, item, value)
            if found:
                block[:] = cut
                return out + [s], True
        out.append(s)
    return out, False


def run_passes(program, names, until=None):
    for p in PASSES:
        if p.name in names:
            program = p.run(program)
            changed = [f for which in p.changes
                       for f in (program.adjoints() if which == "adjoint" else [getattr(program, which)])]
            for fn in filter(None, changed):
                fn.facts.keep(*p.keeps)
        if p.name == until:
            break
    return program


def run(pyfunc, arg_types, active, until=None, boundscheck=True, target="cpu"):
    """The Program after pass `until` (default: all of them), for inspection: `dump(run(...))`."""
    if until is not None and until not in PASS_NAMES:
        raise ValueError(f"no pass named {until!r}; the passes are {', '.join(PASS_NAMES)}")
    list_rows = None
    while True:
        program = front(pyfunc, arg_types, active, boundscheck, target, list_rows)
        if until in FRONT:
            return program
        try:
            return finish(program, primal_of(program.primal, program.arg_types, cache.cache_dir(), program.backend),
                          until)
        except ListOfArrays as found:
            list_rows = found.rows


def dump(program):
    """The text of every function in `program`."""
    return "\n".join(function_text(fn) for fn in program.functions())


def check_arguments(fn, arg_types, active):
    if len(arg_types) != len(fn.params) or len(active) != len(fn.params):
        raise TypeError(f"{fn.name} takes {len(fn.params)} arguments ({', '.join(map(fn.names.user, fn.params))}); "
                        f"got {len(arg_types)} types and {len(active)} activity flags")
    for p, t, a in zip(fn.params, arg_types, active):
        if a and not is_float(t):
            raise TypeError(f"argument `{fn.names.user(p)}` of {fn.name} has type {t}; only float scalars and float "
                            "arrays can be differentiated")


def copy_function(fn):
    """A copy of `fn` that passes may change freely (statements copied, expressions shared). It draws
    fresh names of its own, so that transforming the same IR twice gives the same code (and cache key)."""
    return replace(fn, params=list(fn.params), body=clone(fn.body), outputs=list(fn.outputs), types=dict(fn.types),
                   stacks=dict(fn.stacks), facts=fn.facts.copy(), workspace=list(fn.workspace),
                   names=_copy_names(fn.names))


def _copy_names(names):
    copied = copy.copy(names)
    copied.used, copied.made, copied.spelled = set(names.used), set(names.made), dict(names.spelled)
    return copied


__all__ = ["FRONT", "PASSES", "PASS_NAMES", "Program", "dump", "finish", "front", "run", "run_passes"]
