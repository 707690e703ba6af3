"""The compiler's entry point and the object the tape integration uses."""
import numba
from numba.core import errors as nb_errors
from numba.core import types as nt

from .activity import Analysis, is_float, unify_types
from .backend import cache_dir, cache_key, import_module, jit, load_meta, save_meta, user_error, write_module
from .codegen import HEADER, primal_source
from .frontend import load, unwrap
from .normalize import lower
from .reverse import Reverse


class Transformed:
    """The compiled primal, forward and adjoint of one function for one signature.

    Calling conventions (all Numba dispatchers):

    * ``primal(*args)`` returns exactly what the user function returns.
    ``forward`` and ``adjoint`` wrap their dispatchers (attributes pass
    through) so that a compile error names the user's line.

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
    "primal", "forward" or "adjoint".
    """

    def __init__(self, name, primal, forward, adjoint, sources, returns_tuple, output_types, active):
        self.name = name
        self.primal, self.forward, self.adjoint = primal, forward, adjoint
        self.sources = sources
        self.returns_tuple = returns_tuple
        self.output_types = output_types
        self.n_outputs = len(output_types)
        self.active = active

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

    def __call__(self, *args):
        try:
            return self.dispatcher(*args)
        except (nb_errors.TypingError, nb_errors.UnsupportedError, nb_errors.LoweringError) as exc:
            raise user_error(exc, *self._where) from None

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


def transform(pyfunc, arg_types, active):
    """Parse, transform and compile `pyfunc` for `arg_types` (numba types),
    differentiating the arguments whose `active` flag is True."""
    pyfunc = unwrap(pyfunc)
    arg_types = tuple(arg_types)
    active = tuple(bool(a) for a in active)
    info = load(pyfunc)
    _check_arguments(info, arg_types, active)
    program = lower(info)
    fname = info.name
    primal_w = primal_source(program, f"{fname}_primal")
    primal_src = HEADER + "\n\n" + primal_w.text()
    key = cache_key(primal_src, arg_types, active)
    root = cache_dir()
    base = f"{fname}_{key}"
    primal_path = root / f"{base}_primal.py"
    module_path = root / f"{base}.py"
    meta = load_meta(root / f"{base}.json")
    write_module(primal_path, primal_src)
    primal = jit(getattr(import_module(primal_path), f"{fname}_primal"))
    if meta is not None and module_path.exists():
        forward, adjoint = _load(module_path, [], fname)
        return Transformed(fname, primal, forward, adjoint, meta["sources"], meta["returns_tuple"],
                           [None] * meta["n_outputs"], active)
    offset = primal_src.count("\n") - primal_w.text().count("\n")
    try:
        primal.compile(arg_types)
    except (nb_errors.TypingError, nb_errors.UnsupportedError, nb_errors.LoweringError, NameError) as exc:
        raise user_error(exc, primal_path, [None] * offset + primal_w.origins, fname) from None
    overload = primal.overloads[arg_types]
    if not hasattr(overload.type_annotation, "typemap"):
        # Loaded from Numba's disk cache, which drops the typemap: type it afresh.
        fresh = numba.njit(cache=False)(primal.py_func)
        fresh.compile(arg_types)
        overload = fresh.overloads[arg_types]
    types = unify_types(overload.type_annotation.typemap)
    for p, t in zip(program.params, arg_types):
        types[p] = t
    analysis = Analysis(program, types, active)
    analysis.check(program.infos)
    rev = Reverse(program, analysis, program.names, fname)
    forward_w = rev.forward_source()
    adjoint_w = rev.adjoint_source(active)
    head = HEADER + "\n" + rev.type_defs() + "\n\n"
    module_src = head + forward_w.text() + "\n\n" + adjoint_w.text()
    origins = [None] * head.count("\n") + forward_w.origins + [None, None] + adjoint_w.origins
    write_module(module_path, module_src)
    forward, adjoint = _load(module_path, origins, fname)
    sources = {"primal": primal_w.text(), "forward": forward_w.text(), "adjoint": adjoint_w.text()}
    outputs = _split_outputs(overload.signature.return_type, program.returns_tuple)
    save_meta(root / f"{base}.json", {"sources": sources, "returns_tuple": program.returns_tuple,
                                      "n_outputs": len(outputs)})
    return Transformed(fname, primal, forward, adjoint, sources, program.returns_tuple, outputs, active)


def _load(path, origins, name):
    module = import_module(path)
    return tuple(Checked(jit(getattr(module, f"{name}_{kind}")), path, origins, name)
                 for kind in ("forward", "adjoint"))
