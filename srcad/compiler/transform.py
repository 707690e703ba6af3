"""The compiler's entry point and the object the tape integration uses."""
import threading
from pathlib import Path

from numba.core import errors as nb_errors
from numba.core import types as nt

from .activity import Analysis, is_float, unify_types, walk
from .backend import (Typed, cache_dir, cache_key, content_hash, entry_lock, import_source, infer_types, jit,
                      load_cached, load_meta, read_module, refuse, save_meta, user_error, write_module)
from .codegen import HEADER, primal_source
from .frontend import load
from .inplace import resolve_inplace
from .normalize import Store, lower
from .reverse import Reverse
from .webs import split_webs


class Transformed:
    """The compiled primal, forward and adjoint of one function for one signature.

    Calling conventions (all Numba dispatchers):

    * ``primal(*args)`` returns exactly what the user function returns; it is
      compiled on its first call (a `LazyPrimal`). ``primal``, ``forward`` and
      ``adjoint`` wrap their dispatchers (attributes pass through) so that a
      compile error names the user's line.

    * ``forward(*args)`` returns ``(outputs, saved)``: ``outputs`` as from
      ``primal``, ``saved`` an opaque tuple for the adjoint (stacks, their
      tops, final values of the locals the reverse sweep reads).
    * ``adjoint(*args, saved, d_out)`` returns a tuple with one gradient per
      *active* argument, in argument order. ``d_out`` has the structure of
      the outputs: one float or array, or a tuple with one entry per output
      (give 0.0 or zeros for outputs that carry no gradient). Gradients of
      array arguments have the argument's shape and dtype; of float32
      scalars, float32. The adjoint does not modify ``saved``, so it may be
      called more than once (persistent tapes).

    ``n_outputs``, ``returns_tuple`` and ``output_types`` (numba types, None
    when loaded from the disk cache) describe the outputs; ``source(kind)`` gives the generated source of
    "primal", "forward" or "adjoint". ``written_params`` names the parameters
    the function writes into (``a[i] = ...``, ``a += ...``, also through an
    alias): an argument that shares memory with one of them would be changed
    behind the tape's back, so the caller refuses that.
    """

    def __init__(self, name, primal, forward, adjoint, sources, returns_tuple, output_types, active,
                 written_params=()):
        self.name = name
        self.primal, self.forward, self.adjoint = primal, forward, adjoint
        self.sources = sources
        self.returns_tuple = returns_tuple
        self.output_types = output_types
        self.n_outputs = len(output_types)
        self.active = active
        self.written_params = tuple(written_params)

    def source(self, kind="adjoint"):
        if kind not in self.sources:
            raise ValueError(f"kind must be one of {sorted(self.sources)}, got {kind!r}")
        return self.sources[kind]

    def __repr__(self):
        return f"<Transformed {self.name} outputs={self.n_outputs} active={self.active}>"


class Checked:
    """A Numba dispatcher whose compile errors name the user's function and line
    instead of the generated code. Attributes are the dispatcher's."""

    def __init__(self, dispatcher, path, origins, name):
        self.dispatcher = dispatcher
        self._where = (path, origins, name)
        self._try_cache = True

    def __call__(self, *args):
        if self._try_cache:
            # First call: a light (and checked) load from Numba's disk cache (see load_cached).
            self._try_cache = False
            load_cached(self.dispatcher, args)
        try:
            return self.dispatcher(*args)
        except (nb_errors.TypingError, nb_errors.UnsupportedError, nb_errors.LoweringError) as exc:
            raise user_error(exc, *self._where) from None
        except IndexError as exc:   # boundscheck=True
            raise IndexError(f"{self._where[2]}: an index is out of range in the compiled code ({exc})") from None

    def __getattr__(self, name):
        return getattr(self.dispatcher, name)


def _check_arguments(info, arg_types, active):
    params = [a.arg for a in info.tree.args.args]
    if len(arg_types) != len(params) or len(active) != len(params):
        raise TypeError(f"{info.name} takes {len(params)} arguments ({', '.join(params)}); "
                        f"got {len(arg_types)} types and {len(active)} activity flags")
    for p, t, a in zip(params, arg_types, active):
        if a and not is_float(t):
            raise TypeError(f"argument `{p}` of {info.name} has type {t}; only float scalars and float "
                            "arrays can be differentiated")


def _split_outputs(return_type, returns_tuple):
    if returns_tuple and isinstance(return_type, nt.BaseTuple):
        return list(return_type.types)
    return [return_type]


_COMPILE_LOCK = threading.RLock()
_META_KEYS = ("sources", "returns_tuple", "n_outputs", "written_params", "module_sha256")


def transform(pyfunc, arg_types, active, boundscheck=False):
    """Parse, transform and compile `pyfunc` for `arg_types` (numba types),
    differentiating the arguments whose `active` flag is True.

    Only Numba's type inference runs on the primal here (its types drive the
    transform); the primal itself is compiled when it is first called, so a
    gradient compiles two functions (forward and adjoint), not three.
    `boundscheck`: compiled indexing raises IndexError when out of range
    (Numba's boundscheck; costs run time).

    One transform at a time in a process (they share generated modules), and
    one process at a time per cache entry (`entry_lock`); a cache directory
    that fails a write is given up for a private one (`backend.cache_dir`)."""
    with _COMPILE_LOCK:
        root = cache_dir()
        try:
            return _transform(pyfunc, arg_types, active, bool(boundscheck), root)
        except OSError as exc:
            if exc.filename is None or root not in Path(exc.filename).parents:
                raise
            refuse(root, exc)
            return _transform(pyfunc, arg_types, active, bool(boundscheck), cache_dir())


def _transform(pyfunc, arg_types, active, boundscheck, root):
    arg_types = tuple(arg_types)
    active = tuple(bool(a) for a in active)
    info = load(pyfunc)
    _check_arguments(info, arg_types, active)
    program = lower(info)
    split_webs(program)
    fname = info.name
    primal_w = primal_source(program, f"{fname}_primal")
    primal_text = primal_w.text()
    primal_src = HEADER + "\n\n" + primal_text
    options = (("boundscheck", boundscheck),)
    key = cache_key(primal_src, arg_types, active, options)
    base = f"{fname}_{key}"
    # One primal module per signature, shared by every active mask: a plain
    # call and a gradient of the same signature compile / type it once.
    primal_path = root / f"{fname}_{cache_key(primal_src, arg_types, (), options)}_primal.py"
    module_path = root / f"{base}.py"
    offset = primal_src.count("\n") - primal_text.count("\n")
    primal_origins = [None] * offset + primal_w.origins
    with entry_lock(root, base):
        write_module(primal_path, primal_src)
        primal = _lazy_primal(primal_path, primal_src, primal_origins, fname, boundscheck)
        meta = load_meta(root / f"{base}.json", _META_KEYS)
        module_src = read_module(module_path) if meta is not None else None
        if module_src is not None and content_hash(module_src) == meta["module_sha256"]:
            forward, adjoint = _load(module_path, module_src, [], fname, boundscheck)
            return Transformed(fname, primal, forward, adjoint, meta["sources"], meta["returns_tuple"],
                               [None] * meta["n_outputs"], active, meta["written_params"])
        return _generate(program, info, primal, primal_text, primal_path, primal_origins, arg_types, active,
                         boundscheck, module_path, root / f"{base}.json")


def _generate(program, info, primal, primal_text, primal_path, primal_origins, arg_types, active, boundscheck,
              module_path, meta_path):
    fname = info.name
    try:
        typed = _primal_types(primal, arg_types, compile_it=not any(active))
    except (nb_errors.TypingError, nb_errors.UnsupportedError, nb_errors.LoweringError, NameError) as exc:
        raise user_error(exc, primal_path, primal_origins, fname) from None
    types = unify_types(typed.typemap)
    for p, t in zip(program.params, arg_types):
        types[p] = t
    resolve_inplace(program, types)
    analysis = Analysis(program, types, active)
    analysis.check()
    written = _written_params(program, analysis)
    rev = Reverse(program, analysis, program.names, fname)
    forward_w = rev.forward_source()
    adjoint_w = rev.adjoint_source(active)
    head = HEADER + "\n" + rev.type_defs() + "\n\n"
    sources = {"primal": primal_text, "forward": forward_w.text(), "adjoint": adjoint_w.text()}
    module_src = head + sources["forward"] + "\n\n" + sources["adjoint"]
    origins = [None] * head.count("\n") + forward_w.origins + [None, None] + adjoint_w.origins
    write_module(module_path, module_src)
    forward, adjoint = _load(module_path, module_src, origins, fname, boundscheck)
    outputs = _split_outputs(typed.return_type, program.returns_tuple)
    save_meta(meta_path, {"sources": sources, "returns_tuple": program.returns_tuple, "n_outputs": len(outputs),
                          "written_params": written, "module_sha256": content_hash(module_src)})
    return Transformed(fname, primal, forward, adjoint, sources, program.returns_tuple, outputs, active, written)


def _written_params(program, analysis):
    """The parameters whose memory the function writes into: a Store into the
    parameter, or into a name that aliases it."""
    groups = analysis.alias_groups()
    stored = {s.array for s in walk(program.body) if isinstance(s, Store)}
    return [p for p in program.params if any(a == p or p in groups.get(a, ()) for a in stored)]


def _primal_types(primal, arg_types, compile_it):
    """Numba's types of the primal. Without active arguments the caller is
    about to run the primal itself, so compile it and read the types off the
    compile; otherwise run type inference alone (no lowering, no LLVM)."""
    dispatcher = primal.dispatcher
    if compile_it:
        dispatcher.compile(arg_types)
    overload = dispatcher.overloads.get(arg_types)
    if overload is not None and hasattr(overload.type_annotation, "typemap"):
        return Typed(overload.type_annotation.typemap, overload.signature.return_type)
    # Not compiled, or loaded from Numba's disk cache (which drops the typemap).
    return infer_types(dispatcher, arg_types)


_PRIMALS = {}


def _lazy_primal(path, source, origins, name, boundscheck):
    primal = _PRIMALS.get(path)
    if primal is None:
        primal = _PRIMALS[path] = LazyPrimal(path, source, origins, name, boundscheck)
    return primal


class LazyPrimal:
    """The plain compiled primal, imported and compiled (or loaded from Numba's
    disk cache) only when first used: the gradient path never needs it.
    Calls and attributes are those of a `Checked` Numba dispatcher."""

    def __init__(self, path, source, origins, name, boundscheck):
        self._spec = (path, source, origins, name, boundscheck)
        self._checked = None

    @property
    def checked(self):
        with _COMPILE_LOCK:
            if self._checked is None:
                path, source, origins, name, boundscheck = self._spec
                module = import_source(path, source)
                self._checked = Checked(jit(getattr(module, f"{name}_primal"), boundscheck), path, origins, name)
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


def _load(path, source, origins, name, boundscheck):
    module = import_source(path, source)
    return tuple(Checked(jit(getattr(module, f"{name}_{kind}"), boundscheck), path, origins, name)
                 for kind in ("forward", "adjoint"))
