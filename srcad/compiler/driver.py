"""The cache driver: compile a function (or IR) once per signature, target and policy, or load it.

`transform(pyfunc, ...)` and `transform_function(fn, ...)` (IR itself:
generated code, differentiated again) work alike: the primal is printed by
the target, and the printed primal, the argument types, the active mask, the
target's name and saving policy and the compiler's own source make the cache
key (`backends/cache.py`). Under one lock per process (`COMPILE_LOCK`) and
one per cache entry across processes (`cache.entry_lock`), an entry on disk
is loaded; otherwise the pass manager (`pipeline.py`) runs, and the forward
and adjoint are printed, written, loaded and described (`_compile`) for the
calling convention of `compiled.Transformed`.
"""
from pathlib import Path

from .backends import cache
from .backends.base import get as get_backend
from .compiled import COMPILE_LOCK, Checked, Transformed, collection_paused, primal_of
from .front.flatten import flatten
from .ir.facts import Aliasing, Bounds, OptionalValues, Reverse
from .pipeline import ListOfArrays, Program, check_arguments, copy_function, finish, front

_META_KEYS = ("sources", "returns_tuple", "n_outputs", "written_params", "workspace", "slots", "sites",
              "once_per_forward", "optional_outputs", "plain_adjoint", "module_sha256")


def transform(pyfunc, arg_types, active, boundscheck=True, target="cpu"):
    """Parse, transform and compile `pyfunc` for `arg_types` (Numba types) and the target named
    `target`, differentiating the arguments whose `active` flag is True; returns a `Transformed`.

    Only the target's typing runs on the primal here (its types drive the transform); the primal
    itself is compiled when first called, so a gradient compiles two functions, not three.
    `boundscheck`: index checks (`front.bounds`); without them an index out of range reads or writes
    memory it should not. One transform at a time in a process, one process at a time per cache
    entry; a cache directory that fails a write is given up for a private one (`cache.cache_dir`)."""
    get_backend(target)                 # an unknown target is refused before anything is parsed

    def made(list_rows=None):
        program = front(pyfunc, arg_types, active, bool(boundscheck), target, list_rows)
        return program, program.primal
    return _in_cache_dir(lambda root: _entry(made, root))


def transform_function(fn, arg_types, active, target="cpu"):
    """Differentiate an IR Function (generated code, say `ad.vjp.vjp_function` of an earlier
    transform) the way `transform` differentiates Python, cached and locked the same way: its values
    are brought to atoms (`flatten`), its types come from the target's typing of its printed copy
    (lowered for the target), then the passes from `types` on. Its index checks, if any, are in the
    IR, so the printed IR in the key covers them. Returns a `Transformed`."""
    backend = get_backend(target)

    def made(list_rows=None):
        flat = flatten(copy_function(fn))
        program = Program(flat, arg_types=tuple(arg_types), active=tuple(bool(a) for a in active), backend=backend)
        check_arguments(flat, program.arg_types, program.active)
        return program, backend.lower(copy_function(flat))
    return _in_cache_dir(lambda root: _entry(made, root))


def _in_cache_dir(job):
    """`job(root)` in the cache directory, under the process's compile lock; after a failed write into
    the directory (full disk...), again in a private one."""
    with COMPILE_LOCK, collection_paused():
        root = cache.cache_dir()
        try:
            return job(root)
        except OSError as exc:
            if exc.filename is None or root not in Path(exc.filename).parents:
                raise
            cache.refuse(root, exc)
            return job(cache.cache_dir())


def _entry(made, root, list_rows=None):
    """The cache entry of what `made(list_rows)` makes ((Program before typing, the primal function as the
    target prints it)): loaded if it is on disk, else generated, compiled and written. Where typing finds
    a list of arrays (`ListOfArrays`), the function is made again, keeping it as rows of an array."""
    program, printed = made(list_rows)
    backend, name = program.backend, printed.name
    source, _ = backend.module_source([printed], f"{name}_primal")
    base = f"{name}_{cache.cache_key(source, program.arg_types, program.active, backend.key())}"
    with cache.entry_lock(root, base):
        primal = primal_of(printed, program.arg_types, root, backend)
        loaded = _load_entry(program, primal, root, base, lambda: finish(made(list_rows)[0], primal).ir)
        if loaded is not None:
            return loaded
        try:
            program = finish(program, primal, compile_it=not any(program.active))
        except ListOfArrays as found:
            list_rows = found.rows
        else:
            return _compile(program, primal, root, base)
    return _entry(made, root, list_rows)


def _load_entry(program, primal, root, base, regenerate):
    """The `Transformed` of the cache entry `base` if it is on disk and intact, else None. Its IR is
    made again (`regenerate`) only if someone asks for it."""
    meta = cache.load_meta(root / f"{base}.json", _META_KEYS)
    source = cache.read_module(root / f"{base}.py") if meta is not None else None
    if source is None or cache.content_hash(source) != meta["module_sha256"]:
        return None
    loaded = _load(root / f"{base}.py", source, [], primal.name, meta["sites"], program.backend, meta["plain_adjoint"])
    return Transformed(primal.name, primal, *loaded, meta, program.active, program.backend, ir=regenerate,
                       from_cache=True)


def _compile(program, primal, root, base):
    """Print, write, load and describe the forward and adjoint of `program`."""
    backend, name = program.backend, primal.name
    forward, adjoint, plain = program.forward, program.adjoint, program.plain_adjoint
    source, origins = backend.module_source([forward, *program.adjoints()], name)
    path = root / f"{base}.py"
    cache.write_module(path, source)
    sites = program.primal.facts.of(Bounds).sites
    loaded = _load(path, source, origins, name, sites, backend, plain is not None)
    meta = {"sources": {"primal": primal.text, "forward": backend.function_source(forward, name),
                        "adjoint": backend.function_source(adjoint, name),
                        **({"plain adjoint": backend.function_source(plain, name)} if plain is not None else {})},
            "returns_tuple": program.primal.returns_tuple, "n_outputs": len(program.primal.outputs),
            "written_params": program.primal.facts.of(Aliasing).written_params,
            "workspace": [backend.buffer_dtype(forward.stacks[w]) for w in forward.workspace],
            "slots": _workspace_slots(forward), "sites": sites,
            "once_per_forward": adjoint.facts.of(Reverse).once_per_forward,
            "optional_outputs": _optional_outputs(program), "plain_adjoint": plain is not None,
            "module_sha256": cache.content_hash(source)}
    cache.save_meta(root / f"{base}.json", meta)
    types = backend.output_types(program.typed.return_type, program.primal.returns_tuple)
    return Transformed(name, primal, *loaded, meta, program.active, backend, types, ir=program.ir)


def _workspace_slots(forward):
    """Where each workspace stack's final buffer sits in the forward's `saved`."""
    saved = forward.facts.of(Reverse).saved
    return [saved.index(w) for w in forward.workspace]


def _optional_outputs(program):
    """(output, position of its flag in `saved`, rank, dtype) of each output that may be None."""
    primal, saved = program.primal, program.forward.facts.of(Reverse).saved
    out = []
    for k, flag in sorted(primal.facts.of(OptionalValues).outputs.items()):
        ty = primal.types[primal.outputs[k].id]
        out.append((k, saved.index(flag), getattr(ty, "ndim", 0), str(getattr(ty, "dtype", ty))))
    return out


def _load(path, source, origins, name, sites, backend, plain):
    """The forward, the adjoint and the plain adjoint (None where there is none) of module `source`."""
    kinds = ("forward", "adjoint") + (("adjoint_plain",) if plain else ())
    loaded = [Checked(backend.load(path, source, f"{name}_{kind}"), path, origins, name, backend, sites)
              for kind in kinds]
    return tuple(loaded) + (None,) * (3 - len(loaded))


__all__ = ["transform", "transform_function"]
