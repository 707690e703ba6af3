"""Numba compilation and the on-disk cache of generated modules.

Generated code is written as real .py files under the cache directory
($SRCAD_CACHE_DIR, else ~/.cache/srcad), named by a hash of the normalized
primal source, the argument types, the active mask and the versions of
srcad's compiler and Numba. Functions are compiled with `cache=True`, so a
second process imports the files and loads Numba's machine code instead of
generating and compiling again.

Compile time: the transform needs only the primal's types, so `infer_types`
runs Numba's frontend and type inference without lowering; `load_cached`
loads cached machine code without first initialising all of Numba's CPU
target (see each for the numbers).
"""
import hashlib
import importlib.util
import json
import os
import re
import sys
from pathlib import Path

import numba

from .frontend import TransformError

_HERE = Path(__file__).parent


def cache_dir():
    root = os.environ.get("SRCAD_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "srcad")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


_COMPILER_HASH = None


def compiler_hash():
    """Changes whenever the compiler's own source changes (stale caches are never reused)."""
    global _COMPILER_HASH
    if _COMPILER_HASH is None:
        h = hashlib.sha256(numba.__version__.encode())
        for f in sorted(_HERE.glob("*.py")):
            h.update(f.read_bytes())
        _COMPILER_HASH = h.hexdigest()
    return _COMPILER_HASH


def cache_key(primal_source, arg_types, active):
    h = hashlib.sha256(compiler_hash().encode())
    h.update(primal_source.encode())
    h.update(repr([str(t) for t in arg_types]).encode())
    h.update(repr(list(active)).encode())
    return h.hexdigest()[:20]


def _write_atomic(path, text):
    """Write via a per-process temporary file, so concurrent processes never read half a file."""
    tmp = Path(path).with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_module(path, source):
    path = Path(path)
    if not (path.exists() and path.read_text() == source):
        _write_atomic(path, source)
    return path


def import_module(path):
    name = "srcad_generated_" + Path(path).stem
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def jit(function):
    # no_cfunc_wrapper: the C-callable wrapper Numba builds by default (for
    # first-class function values) is never used for generated code, and for a
    # forward that returns a large `saved` tuple it is a fifth of the LLVM IR.
    return numba.njit(cache=True, no_cfunc_wrapper=True)(function)


def load_cached(dispatcher, args):
    """Load `dispatcher`'s overload for `args` from Numba's disk cache, without
    initialising the whole CPU target first.

    Numba's own cache load (Dispatcher.compile) starts with
    ``targetctx.refresh()``, which imports every typing and lowering registry
    (scipy.linalg included): ~0.3 s in a fresh process, though nothing that is
    loaded from the cache needs them. This mirrors the cache-hit branch of
    Dispatcher.compile minus that refresh; any later compile refreshes as
    usual. Returns True when the overload is there afterwards; False (having
    changed nothing) on a cache miss or anything unexpected, and the caller
    then simply calls the dispatcher.
    """
    try:
        from numba.core.compiler_lock import global_compiler_lock
        from numba.core.runtime import rtsys

        with global_compiler_lock:
            sig = tuple(dispatcher.typeof_pyval(a) for a in args)
            if sig in dispatcher.overloads:
                return True
            ctx = dispatcher.targetctx
            rtsys.initialize(ctx)
            cres = dispatcher._cache._load_overload(sig, ctx)
            if cres is None or cres.objectmode:
                return False
            ctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
            dispatcher.add_overload(cres)
            dispatcher._cache_hits[sig] += 1
            return True
    except Exception:
        return False


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


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def user_error(exc, path, origins, func_name):
    """A Numba error in generated code, re-stated on the user's function and line."""
    text = _ANSI.sub("", str(exc))
    origin = None
    for m in re.finditer(r'File "([^"]+)", line (\d+)', text):
        if Path(m.group(1)).name == Path(path).name:
            line = int(m.group(2)) - 1
            while line >= 0 and (line >= len(origins) or origins[line] is None):
                line -= 1
            if line >= 0:
                origin = origins[line]
                break
    reason = next((ln.strip() for ln in text.splitlines() if ln.strip()
                   and not ln.startswith("Failed in")), text.strip())
    if origin is None:
        return TransformError(f"{func_name}: Numba cannot compile it: {reason}")
    return TransformError(f"{origin.func} ({origin.file}, line {origin.line}): Numba cannot compile "
                          f"`{origin.text}`: {reason}")


def save_meta(path, meta):
    _write_atomic(path, json.dumps(meta))


def load_meta(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
