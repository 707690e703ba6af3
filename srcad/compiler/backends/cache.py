"""The on-disk cache of generated modules: private, verified, atomic, shared safely between processes.

Generated code is written as real .py files under the cache directory
($SRCAD_CACHE_DIR, else ~/.cache/srcad), named by a hash of the normalized
primal source, the argument types, the active mask and the source of srcad's
compiler (every file, subfolders included) and Numba's version, so a second
process imports the files and loads Numba's machine code instead of
generating and compiling again.

The cache is code this process will run, so it is kept private and checked
(see `cache_dir`, `read_module`): directory mode 0700, every file the user's
own, each module verified against the content hash written with it, writes
through fresh O_EXCL files renamed into place, one process at a time per
entry (`entry_lock`). Anything that fails these checks or cannot be loaded is
discarded and compiled again, with one `CacheWarning`.
"""
import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import stat
import sys
import tempfile
import threading
import types
import warnings
from pathlib import Path

import numba

_COMPILER_ROOT = Path(__file__).parent.parent


class CacheWarning(UserWarning):
    """The on-disk cache was not used as is (foreign, corrupted or unwritable); srcad compiled anyway."""


_LOCK = threading.RLock()     # warnings issued, the private fallback directory, module imports
_WARNED = set()
_PRIVATE = None
_REFUSED = {}                 # configured root -> why it was refused (a failed write, this process)
_HASH_LINE = "# srcad-sha256: "


def warn_once(key, message):
    with _LOCK:
        if key in _WARNED:
            return
        _WARNED.add(key)
    warnings.warn(message, CacheWarning, stacklevel=3)


def _not_private(path, st):
    """Why a cache directory or file found on disk must not be trusted, or None."""
    if st.st_uid != os.getuid():
        return f"{path} is owned by uid {st.st_uid}, not by you (uid {os.getuid()})"
    if st.st_mode & 0o022:
        return f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _prepare(root):
    """Create `root` (mode 0700) and Numba's __pycache__ in it; why it cannot be used, or None."""
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        (root / "__pycache__").mkdir(mode=0o700, exist_ok=True)
        for d in (root, root / "__pycache__"):
            problem = _not_private(d, os.stat(d))
            if problem:
                return problem
    except OSError as e:
        return f"it cannot be created ({e.strerror or e})"
    if not os.access(root, os.W_OK | os.X_OK) or not os.access(root / "__pycache__", os.W_OK | os.X_OK):
        return "it is not writable"
    return None


def _private_dir():
    """A fresh directory only this process uses (mkdtemp: mode 0700), removed at exit."""
    global _PRIVATE
    if _PRIVATE is None:
        _PRIVATE = Path(tempfile.mkdtemp(prefix="srcad-"))
        (_PRIVATE / "__pycache__").mkdir(mode=0o700)
        atexit.register(shutil.rmtree, _PRIVATE, True)
    return _PRIVATE


def cache_dir():
    """The cache directory: $SRCAD_CACHE_DIR, else ~/.cache/srcad, created with mode 0700.

    Code loaded from it runs in this process, so it must be the user's own: a
    directory owned by another user, writable by group or others, or one that
    cannot be created or written is refused with one warning, and this process
    compiles into a private temporary directory instead."""
    root = Path(os.environ.get("SRCAD_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "srcad"))
    problem = _REFUSED.get(root) or _prepare(root)
    if problem is None:
        return root
    with _LOCK:
        private = _private_dir()
    warn_once(("dir", root), f"srcad: not using the cache directory {root}: {problem}. Compiling into the "
                             f"private temporary directory {private} for this process instead; set "
                             f"SRCAD_CACHE_DIR to a directory of your own (mode 0700) to keep compiled code.")
    return private


def refuse(root, error):
    """Stop using `root` in this process after a failed write into it (full disk...)."""
    _REFUSED[Path(root)] = f"writing into it failed ({error.strerror or error})"


_COMPILER_HASH = None


def compiler_hash():
    """Changes whenever the compiler's own source changes (stale caches are never reused)."""
    global _COMPILER_HASH
    if _COMPILER_HASH is None:
        # Numba's optimization level too: its own cache does not key on it (the tests compile at 0)
        _COMPILER_HASH = tree_hash(_COMPILER_ROOT, f"{numba.__version__} opt={int(numba.config.OPT)}")
    return _COMPILER_HASH


def tree_hash(root, salt=""):
    """A hash of every .py file under `root`, subfolders included, with its path: a file moved,
    added or edited anywhere in the compiler gives another key."""
    h = hashlib.sha256(salt.encode())
    for f in sorted(Path(root).rglob("*.py")):
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        h.update(f.read_bytes())
    return h.hexdigest()


def cache_key(primal_source, arg_types, active, options=()):
    """`options`: the compile options (Numba's own cache does not key on them)."""
    h = hashlib.sha256(compiler_hash().encode())
    h.update(repr(tuple(options)).encode())
    h.update(primal_source.encode())
    h.update(repr([_stable_name(t) for t in arg_types]).encode())
    h.update(repr(list(active)).encode())
    return h.hexdigest()[:20]


def _stable_name(ty):
    """A type's name, the same in every process: a function passed as an argument is named by its module
    and qualified name (Numba's name of it holds an address; its body is inlined in the printed primal)."""
    dispatcher = getattr(ty, "dispatcher", None)
    py_func = getattr(dispatcher, "py_func", None)
    if py_func is not None:
        return f"function {py_func.__module__}.{py_func.__qualname__}"
    return str(ty)


def _write_atomic(path, data):
    """Write `data` (bytes) via a new file with a random name in the same directory (O_EXCL:
    never through a planted file or symlink), then rename it over `path`, so that readers
    never see half a file."""
    path = Path(path)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(8)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None:
            exc.filename = str(tmp)       # a full disk: say where (transform gives up this directory)
        raise


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _discard(path, why):
    warn_once(("file", str(path)), f"srcad: discarded the cache file {path} ({why}); compiling it again.")
    with contextlib.suppress(OSError):
        os.unlink(path)


def _read_own(path):
    """The bytes of a cache file, or None when it is missing or not the user's own (then discarded)."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK)   # NONBLOCK: a planted FIFO
    except FileNotFoundError:
        return None
    except OSError as e:       # ELOOP: a symlink planted in the cache
        _discard(path, f"cannot open it safely: {e.strerror or e}")
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        problem = "not a regular file" if not stat.S_ISREG(st.st_mode) else _not_private(path, st)
        if problem:
            _discard(path, problem)
            return None
        return f.read()


def content_hash(text):
    return hashlib.sha256(text.encode()).hexdigest()


def read_module(path):
    """A generated module's source, checked against the content hash written with it;
    None when it is missing, or (discarded, with a warning) truncated, corrupted or foreign."""
    data = _read_own(path)
    if data is None:
        return None
    try:
        text = data.decode()
        body, _, last = text[:-1].rpartition("\n")
        if not text.endswith("\n") or last != _HASH_LINE + content_hash(body + "\n"):
            raise ValueError
    except ValueError:
        _discard(path, "its content does not match the hash recorded when it was written: truncated or changed")
        return None
    return body + "\n"


def write_module(path, source):
    """Write a generated module, its content hash as the last line (see read_module)."""
    if not source.endswith("\n"):
        source += "\n"
    if read_module(path) != source:
        _write_atomic(path, (source + _HASH_LINE + content_hash(source) + "\n").encode())
    return path


def import_source(path, source):
    """Import the generated module `source` (already verified, or just written) as the file
    `path`, executing exactly that text: never re-reading the file, nor a bytecode cache."""
    name = "srcad_generated_" + Path(path).stem
    digest = content_hash(source)
    with _LOCK:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__srcad_sha256__", None) == digest \
                and module.__file__ == str(path):
            return module
        module = types.ModuleType(name)
        module.__file__ = str(path)
        exec(compile(source, str(path), "exec"), module.__dict__)
        module.__srcad_sha256__ = digest
        sys.modules[name] = module
    return module


def import_module(path):
    """Import a module written by `write_module`, after checking its content hash."""
    source = read_module(path)
    if source is None:
        raise ImportError(f"srcad: the generated module {path} is missing or failed its content check")
    return import_source(path, source)


@contextlib.contextmanager
def entry_lock(root, base):
    """An exclusive lock (fcntl.flock) on one cache entry, so that processes sharing
    the cache generate and write an entry one at a time."""
    fd = os.open(Path(root) / f"{base}.lock", os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def save_meta(path, meta):
    _write_atomic(path, json.dumps(meta).encode())


def load_meta(path, keys):
    """A cache entry's description (a JSON object with `keys`), or None when it is
    missing, or (discarded, with a warning) unreadable, foreign or incomplete."""
    data = _read_own(path)
    if data is None:
        return None
    try:
        meta = json.loads(data)
        if not isinstance(meta, dict) or not set(keys) <= set(meta):
            raise ValueError
    except ValueError:
        _discard(path, "truncated or corrupted")
        return None
    return meta
