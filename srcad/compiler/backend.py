"""Numba compilation and the on-disk cache of generated modules.

Generated code is written as real .py files under the cache directory
($SRCAD_CACHE_DIR, else ~/.cache/srcad), named by a hash of the normalized
primal source, the argument types, the active mask and the versions of
srcad's compiler and Numba. Functions are compiled with `cache=True`, so a
second process imports the files and loads Numba's machine code instead of
generating and compiling again.
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


def write_module(path, source):
    path = Path(path)
    if path.exists() and path.read_text() == source:
        return path
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(source)
    os.replace(tmp, path)
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
    return numba.njit(cache=True)(function)


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
    tmp = Path(path).with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(meta))
    os.replace(tmp, path)


def load_meta(path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
