"""What a target must provide, and the registry that finds a target by name.

The passes are the same for every target; a `Backend` is everything that is
not: how the primal is typed, how save stacks and other constructs without a
statement of their own become this target's code (`lower`), how IR is printed,
compiled and loaded, and the calling convention of the compiled forward (the
buffers it is handed, where they come back in `saved`, the types of its
outputs). `policy` tells the reverse pass where this target may keep saved
values. A backend is found by its target name with `get`: `"cpu"` is
`numba_cpu.NumbaCPU`; `register` adds another (a test backend, or the CUDA one).
"""
import abc
import contextlib
import importlib
import threading


class Backend(abc.ABC):
    """A compilation target. `name` and `policy` are part of every cache key (`key`): two targets never
    share generated code. `errors`: the exceptions of the target's compiler that are restated on the
    user's line."""

    name: str
    policy: object        # an `ad.saving.Policy`
    errors: tuple = ()

    def key(self):
        """What of the target decides the generated code (in the cache key)."""
        return (self.name, repr(self.policy))

    # ---- typing -------------------------------------------------------------------------------
    @abc.abstractmethod
    def types(self, dispatcher, arg_types, compile_it):
        """The types of the primal (`dispatcher`, from `load`) for `arg_types`: an object with `typemap`
        (the target compiler's SSA typemap, read by `analysis.types.assign_types`) and `return_type`.
        `compile_it`: the caller is about to run the primal, so compiling it now costs nothing extra."""

    # ---- lowering and printing ------------------------------------------------------------------
    @abc.abstractmethod
    def lower(self, fn):
        """`fn` with the constructs this target has no statement for (save stacks...) lowered, in place."""

    @abc.abstractmethod
    def module_source(self, functions, prefix):
        """(text, origins): the module holding the printed `functions`; `origins[k]` is the user line of
        the module's line k (or None)."""

    @abc.abstractmethod
    def function_source(self, fn, prefix):
        """The text of one function, as `ad.show_source` shows it."""

    # ---- compiling and loading --------------------------------------------------------------------
    @abc.abstractmethod
    def load(self, path, source, name, callees=None):
        """Function `name` of the module `source` (written at `path`), compiled lazily for this target.
        `callees`: the compiled functions (as `load` gave them) the module calls, by the name it calls."""

    def load_cached(self, dispatcher, args):
        """Before the first call of `dispatcher` with `args`: load its machine code from a disk cache
        cheaply if the target can. True when it did."""
        return False

    # ---- the calling convention ------------------------------------------------------------------
    @abc.abstractmethod
    def output_types(self, return_type, returns_tuple):
        """The type of each output, from the primal's return type."""

    @abc.abstractmethod
    def buffer_dtype(self, stack):
        """The dtype (a string, kept in the cache's JSON) of the buffer handed in for a workspace stack."""

    @abc.abstractmethod
    def new_buffer(self, dtype):
        """A fresh buffer for a workspace stack of `dtype`, handed to the forward."""

    def call_state(self, args):
        """What the forward and the adjoint of one call with `args` share beyond its saved values (None:
        nothing). The cuda target keeps there the device copies of the arrays the call reads."""
        return None

    def running(self, state):
        """The context the forward or adjoint of a call with `state` (from `call_state`) runs in."""
        return _NOTHING

    def running_adjoint(self, state):
        """The context the adjoint of a call with `state` runs in: `running`'s, unless the target sets
        how its arithmetic treats subnormal numbers there (the cpu target flushes them to zero,
        `compiler/subnormals.py`)."""
        return self.running(state)


_NOTHING = contextlib.nullcontext()           # (reusable: one for every call, on the tape's path)


# ---- the registry -----------------------------------------------------------------------------------

_KNOWN = {"cpu": "srcad.compiler.backends.numba_cpu:NumbaCPU",
          "cuda": "srcad.compiler.backends.numba_cuda:NumbaCUDA"}     # name -> "module:class", loaded on first use
_BACKENDS = {}
_LOCK = threading.Lock()


def register(backend):
    """Make `backend` (a `Backend` instance) the target named `backend.name`; returns it."""
    if not isinstance(backend, Backend):
        raise TypeError(f"register expects a Backend instance, got {backend!r}")
    with _LOCK:
        _BACKENDS[backend.name] = backend
    return backend


def known():
    """The target names `get` accepts."""
    return sorted(set(_KNOWN) | set(_BACKENDS))


def check(target):
    """`target` if it names a target, without loading its backend (and its compiler); else a ValueError
    naming the targets there are."""
    names = known()
    if target not in names:
        raise ValueError(f"target={target!r} is not available; the targets are {', '.join(map(repr, names))}")
    return target


def get(target):
    """The backend of the target named `target` (loaded on first use); ValueError naming the targets
    there are for any other name."""
    check(target)
    with _LOCK:
        backend = _BACKENDS.get(target)
        if backend is None:
            module, cls = _KNOWN[target].split(":")
            backend = _BACKENDS[target] = getattr(importlib.import_module(module), cls)()
    return backend
