"""Pickling ``@ad.function`` by source and closure, never by its compiled code.

Compiled Numba dispatchers do not travel: they name modules generated in the
sender's cache, and a Dask graph that carries them recurses too deep.  So a
:class:`~srcad.function.Function` pickles as

* a reference (module and qualified name) when it is a module-level name of an
  importable module, the way ``pickle`` pickles plain functions; or
* by value (``__main__``, a notebook, a local function, a module registered
  with ``cloudpickle.register_pickle_by_value``): its Python function through
  cloudpickle (code, closure, referenced globals) plus the
  :class:`~srcad.source.Source` of it and of every plain helper it calls, so a
  process that lacks the defining file can still compile it.

A process rebuilds each shipped function once: a per-process registry keyed by
the hash of what was shipped (source, code and closure) hands every later
unpickle the same Function, with whatever it has compiled already.  A Dask
worker therefore compiles once (from its disk cache where it has one) and not
once per task.
"""

import hashlib
import importlib
import inspect
import pickle
import sys
import threading

from .source import capture_source

__all__ = ["reduce_function", "registry", "registry_stats"]

_REGISTRY = {}          # payload hash -> Function rebuilt in this process (kept alive: workers reuse it)
_LOCK = threading.Lock()
_STATS = {"rebuilt": 0, "reused": 0}

# Functions of these packages are library code, present wherever srcad runs: never shipped as source.
_LIBRARY = frozenset(("numpy", "scipy", "numba", "math", "srcad", "builtins", "llvmlite"))


def reduce_function(fn):
    """``Function.__reduce__``: by reference where importable, else by value (see the module docstring)."""
    if _importable(fn):
        return _import_function, (fn.__module__, fn.__qualname__)
    pyfunc = fn.python_function
    try:
        import cloudpickle
    except ImportError:
        raise pickle.PicklingError(
            f"@ad.function {fn.__qualname__}: it is not a module-level name of an importable module, so it "
            f"pickles by value, which needs cloudpickle: pip install cloudpickle (or define it at module level "
            f"of an importable module)") from None
    sources = {}
    for helper in _helpers(pyfunc):
        src = capture_source(helper)   # also set on the helper, so cloudpickle ships it in its __dict__
        if src is not None:
            sources[_name(helper)] = src
    capture_source(pyfunc)
    payload = cloudpickle.dumps(pyfunc, protocol=pickle.DEFAULT_PROTOCOL)
    boundscheck = getattr(fn, "_boundscheck", None)
    key = hashlib.sha256(payload + repr(boundscheck).encode()).hexdigest()
    return _rebuild_function, (key, payload, sources, boundscheck)


def registry():
    """{hash: Function} of the functions this process rebuilt from pickles (one each)."""
    with _LOCK:
        return dict(_REGISTRY)


def registry_stats():
    """How this process's registry was used: ``rebuilt`` Functions, ``reused`` unpickles, and the
    ``compiled`` signatures of each rebuilt one by name (what tests count to see one compile per worker)."""
    with _LOCK:
        compiled = {}
        for fn in _REGISTRY.values():
            name = fn.python_function.__qualname__
            compiled[name] = compiled.get(name, 0) + len(fn._transforms)
        return {"rebuilt": _STATS["rebuilt"], "reused": _STATS["reused"], "compiled": compiled}


def _importable(fn):
    """Is ``fn`` what its module and qualified name resolve to, in a module pickled by reference?"""
    module_name = getattr(fn, "__module__", None)
    if module_name in (None, "__main__", "__mp_main__") or module_name not in sys.modules:
        return False
    if "cloudpickle" in sys.modules:
        by_value = sys.modules["cloudpickle"].list_registry_pickle_by_value()
        if any(module_name == m or module_name.startswith(m + ".") for m in by_value):
            return False
    obj = sys.modules[module_name]
    for part in fn.__qualname__.split("."):
        obj = getattr(obj, part, None)
    return obj is fn


def _import_function(module_name, qualname):
    try:
        obj = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise pickle.UnpicklingError(
            f"@ad.function {module_name}.{qualname} was pickled by reference, but this process cannot import "
            f"it ({e}). Install the module here, or pickle it by value: "
            f"cloudpickle.register_pickle_by_value({module_name.split('.')[0]}) before cloudpickle.dumps") from None
    return obj


def _rebuild_function(key, payload, sources, boundscheck=None):
    with _LOCK:
        fn = _REGISTRY.get(key)
        if fn is not None:
            _STATS["reused"] += 1
            return fn
    from .function import Function

    pyfunc = pickle.loads(payload)
    for helper in (pyfunc, *_helpers(pyfunc)):
        src = sources.get(_name(helper))
        if src is not None and getattr(helper, "__srcad_source__", None) is None:
            helper.__srcad_source__ = src
    fn = Function(pyfunc) if boundscheck is None else Function(pyfunc, boundscheck)
    with _LOCK:
        if key in _REGISTRY:        # another thread rebuilt it meanwhile: keep one
            _STATS["reused"] += 1
            return _REGISTRY[key]
        _REGISTRY[key] = fn
        _STATS["rebuilt"] += 1
    return fn


def _name(f):
    return f"{f.__module__}:{f.__qualname__}"


def _helpers(pyfunc):
    """The plain Python functions ``pyfunc`` calls through its globals and closure, transitively
    (the ones the compiler follows and reads the source of)."""
    found, stack = {}, [pyfunc]
    while stack:
        f = stack.pop()
        for obj in _referenced(f):
            if inspect.isfunction(obj) and obj is not pyfunc and id(obj) not in found and _is_user_code(obj):
                found[id(obj)] = obj
                stack.append(obj)
    return list(found.values())


def _referenced(f):
    names = set()
    codes = [f.__code__]
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(c for c in code.co_consts if inspect.iscode(c))
    g = f.__globals__
    out = [g[n] for n in names if n in g]
    for cell in f.__closure__ or ():
        try:
            out.append(cell.cell_contents)
        except ValueError:   # an empty cell
            pass
    return out


def _is_user_code(f):
    module = (getattr(f, "__module__", None) or "").split(".")[0]
    return module not in _LIBRARY
