"""What a transform hands back and how it is called: the calling convention of compiled code.

`Transformed` holds the compiled primal, forward and adjoint of one function
for one signature and calls them as `@ad.function` and the tests do: the
forward gets buffers for its stacks (kept from call to call in a small pool,
given back when the `Saved` holding them is dropped) and hands back `None`
for optional outputs; the adjoint gets what the forward saved. `Checked`
restates the target compiler's errors and failed index checks on the user's
line; `LazyPrimal` compiles the plain primal only when it is first called.
The target-specific parts (buffers, typing, loading) are the `Backend`'s.
"""
import contextlib
import gc
import threading
from dataclasses import dataclass

import numpy as np

from .backends import cache
from .errors import from_numba, user_exception
from .front.bounds import site_message
from .ir.facts import Bounds
from .runtime import Raised, sum_is_nan

COMPILE_LOCK = threading.RLock()      # one compile at a time in a process (transforms and lazy primals)


@contextlib.contextmanager
def collection_paused():
    """Python's cycle collector off while a function is transformed or compiled, on again after (where
    it was on). A compile makes millions of objects that live until it ends, which every collection
    during it walks again: a fifth of the time of a run of tests that compile (`docs/design.md`)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


@dataclass
class IR:
    """The primal, forward and adjoint of a transform as IR, before target lowering: what another
    target prints, or what a later transform differentiates or inlines."""
    primal: object
    forward: object
    adjoint: object


class Transformed:
    """The compiled primal, forward and adjoint of one function for one signature.

    * ``primal(*args)`` returns exactly what the user function returns (compiled on first use).
    * ``forward(*args)`` returns ``(outputs, saved)``: ``outputs`` as from ``primal``, ``saved`` an
      opaque value for the adjoint. Its stacks are buffers of earlier calls, given back when their
      `saved` is dropped, so repeated gradients do not allocate their saves afresh.
    * ``adjoint(*args, saved, d_out)`` returns one gradient per *active* argument, in argument order;
      ``d_out`` has the structure of the outputs (one float or array, or a tuple). Gradients have the
      argument's shape and dtype (float32 scalars: float32). It leaves ``saved`` as it was, so it may
      run more than once (persistent tapes). Where the target compiled a plain adjoint (no zero-cotangent
      guards, `opt/plain_adjoint.py`), that one runs first, and the guarded one only where its gradients
      hold a nan.

    ``returns_tuple``, ``n_outputs`` and ``output_types`` describe the outputs; ``source(kind)`` gives
    the generated code of "primal", "forward" or "adjoint"; ``written_params`` names the parameters the
    function writes into (an argument sharing memory with one of them is refused by the caller);
    ``dispatchers`` are the primal, the forward and the adjoint that runs first; ``ir`` the IR before
    target lowering (`IR`); ``backend`` the target it was compiled for; ``from_cache`` whether it was
    loaded from the disk cache instead of generated; ``order`` 1 for a function of the user's, n + 1 for
    one derived (`derived.py`) from a transform of order n.
    """

    def __init__(self, name, primal, forward, adjoint, plain_adjoint, meta, active, backend, output_types=None,
                 ir=None, from_cache=False):
        self.name = name
        self.primal = primal
        self._forward, self._adjoint, self._plain_adjoint = forward, adjoint, plain_adjoint
        self.backend = backend
        self.sources = meta["sources"]
        self.returns_tuple = meta["returns_tuple"]
        self.n_outputs = meta["n_outputs"]
        self.output_types = output_types if output_types is not None else [None] * self.n_outputs
        self.active = active
        self.from_cache = from_cache
        self.written_params = tuple(meta["written_params"])
        self._ir = ir                                       # an IR, or how to make it again
        self._workspace = list(meta["workspace"])          # dtypes of the forward's scalar stacks
        self._slots = tuple(meta["slots"])                  # where their final buffers sit in `saved`
        self._once = meta["once_per_forward"]               # the adjoint restores shared buffers in place
        self.restores_in_place = self._once                 # ...perhaps the arguments': `function` hands it copies
        self._optional = [tuple(o) for o in meta["optional_outputs"]]   # (output, slot of its flag, ndim, dtype)
        self._pool = []
        self.derived = {}                                   # functions derived from it (`derived.py`)
        self.order = 1                                      # 1 for the user's function, n + 1 derived from n

    @property
    def ir(self):
        """The primal, forward and adjoint IR before target lowering (an `IR`); where the compiled code
        came from the disk cache, generated again (without compiling) on first use."""
        if callable(self._ir):
            with COMPILE_LOCK:
                if callable(self._ir):
                    self._ir = self._ir()
        return self._ir

    def run_primal(self, *args):
        """The primal on `args`, in the context of a call of the target (the cuda target moves each array
        to the device once for all the kernels of the call)."""
        with self.backend.running(self.backend.call_state(args)):
            return self.primal(*args)

    def forward(self, *args):
        try:
            buffers = self._pool.pop()
        except IndexError:
            buffers = tuple(self.backend.new_buffer(d) for d in self._workspace)
        inputs = _copies(args) if self._once else None
        state = None if self._once else self.backend.call_state(args)     # (a re-run forward starts afresh)
        with self.backend.running(state):
            outputs, saved = self._forward(*args, *buffers)
        if self._optional:
            outputs = self._none_where_flagged(outputs, saved)
        if self._workspace or self._once or state is not None:
            return outputs, Saved(saved, self, inputs, state)
        return outputs, saved

    def _none_where_flagged(self, outputs, saved):
        """Outputs that may be None are None where the forward's flag says so (it computed a placeholder)."""
        outs = list(outputs) if self.returns_tuple else [outputs]
        for k, slot, _, _ in self._optional:
            if saved[slot]:
                outs[k] = None
        return tuple(outs) if self.returns_tuple else outs[0]

    def cotangent_of_none(self, k, lead=()):
        """What the adjoint takes as the cotangent of output `k` where it is None (it is not used)."""
        found = [(ndim, dtype) for j, _, ndim, dtype in self._optional if j == k]
        if not found:          # None on every path: it has no cotangent
            return None
        ndim, dtype = found[0]
        return np.zeros(tuple(lead) + (0,) * ndim, dtype)

    def release(self, saved):
        """Keep the stack buffers of a `saved` nobody needs any more, for the next forward."""
        if len(self._pool) < 2:
            self._pool.append(tuple(saved[i] for i in self._slots))

    def adjoint(self, *args):
        *values, saved, d_out = args
        d_outs = d_out if self.returns_tuple else (d_out,)
        state = None
        if isinstance(saved, Saved):
            if self._once and saved.used:     # the last adjoint took the buffers back: run the forward again
                buffers = (self.backend.new_buffer(d) for d in self._workspace)
                saved.values = self._forward(*_copies(saved.inputs), *buffers)[1]
            saved.used = True
            saved, state = saved.values, saved.state
        with self.backend.running_adjoint(state):
            return plain_first(self._plain_adjoint, self._adjoint, lambda adjoint: adjoint(*values, *saved, *d_outs))

    def adjoint_rows(self, values, saved, d_out_rows, buffers):
        """The adjoint for a batch of cotangents in one compiled call (`rows.py`): `d_out_rows` has one
        per output (leading axis: the rows; None where the adjoint gets None), `buffers` one per active
        argument (leading axis: the rows) to write the gradients into. False where it cannot: an
        adjoint that restores shared buffers in place runs once per forward, so row by row."""
        if self._once:
            return False
        from .rows import Rows
        saved, state = (saved.values, saved.state) if isinstance(saved, Saved) else (saved, None)
        given = tuple(d is not None for d in d_out_rows)

        def run(adjoint):
            key = ("adjoint rows", adjoint is self._plain_adjoint, len(values), len(saved), given)
            with COMPILE_LOCK:
                rows = self.derived.get(key)
                if rows is None:
                    rows = self.derived[key] = Rows(
                        adjoint, self.backend, [f"arg{k}" for k in range(len(values))] +
                        [f"saved{k}" for k in range(len(saved))],
                        [f"d_out{k}_rows" if g else None for k, g in enumerate(given)],
                        [(k, f"grad{k}_rows") for k in range(len(buffers))])
            rows((*values, *saved), d_out_rows, buffers)
            return buffers
        with self.backend.running_adjoint(state):
            plain_first(self._plain_adjoint, self._adjoint, run)
        return True

    @property
    def dispatchers(self):
        return (self.primal, self._forward, self._plain_adjoint or self._adjoint)

    def source(self, kind="adjoint"):
        if kind not in self.sources:
            raise ValueError(f"kind must be one of {sorted(self.sources)}, got {kind!r}")
        return self.sources[kind]

    def __repr__(self):
        return f"<Transformed {self.name} outputs={self.n_outputs} active={self.active} target={self.backend.name}>"


def plain_first(plain, guarded, run, checked=lambda result: result):
    """`run(plain)` (a compiled function with plain products: `opt/plain_adjoint.py`), or `run(guarded)`
    where `plain` is None or the `checked` part of what it gave holds a nan: the two differ only there."""
    if plain is not None:
        result = run(plain)
        if not holds_nan(checked(result)):
            return result
    return run(guarded)


def holds_nan(value):
    """Does `value` (a gradient: a number, an array, or a tuple or list of them, Numba's typed lists
    included) hold a nan? A sum is one pass without a temporary array, compiled (NumPy's costs ten
    times more on the small gradients of a call that takes microseconds); one that is nan from
    inf - inf only makes the caller check again."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "fc":
            return False
        if value.size <= 16:          # a few numbers: summed in Python, cheaper than a call of either
            total = sum(value.ravel().tolist())
            return total != total
        return bool(sum_is_nan(value)) if value.ndim else bool(np.isnan(value.sum()))
    if isinstance(value, (float, complex, np.floating, np.complexfloating)):
        return value != value
    if value is None or isinstance(value, (int, np.integer, np.bool_, str)):
        return False
    for v in value:
        if v != v if type(v) is float else holds_nan(v):    # (a float, the common part, without a call)
            return True
    return False


def _copies(args):
    """The arguments of a call, arrays copied (what a forward that writes into them may run on again)."""
    return tuple(np.copy(a) if isinstance(a, np.ndarray) else a for a in args)


class Saved:
    """What a forward saved for its adjoint. When it is dropped (the tape node that held it is gone),
    its stack buffers go back to the function for the next forward instead of back to the OS."""

    __slots__ = ("values", "used", "inputs", "state", "_owner")

    def __init__(self, values, owner, inputs=None, state=None):
        self.values = values
        self.used = False
        self.inputs = inputs          # the arguments as the forward got them, where it may have to run again
        self.state = state            # what else the call's adjoint shares with its forward (`Backend.call_state`)
        self._owner = owner

    def __del__(self):
        try:
            if self._owner._workspace:
                self._owner.release(self.values)
        except Exception:      # interpreter shutdown: nothing to keep them for
            pass


class Checked:
    """A compiled function whose errors name the user's function and line instead of the generated
    code: the target compiler's errors, and the index checks of `front.bounds` (`sites`). `path`: the
    module it was loaded from; `origins`: the user line of each of its lines; `user_name`: the user's
    function. Other attributes are the dispatcher's."""

    def __init__(self, dispatcher, path, origins, name, backend, sites=()):
        self.dispatcher = dispatcher
        self.path, self.origins, self.user_name, self.sites = path, origins, name, sites
        self._backend = backend
        self._try_cache = True

    def __call__(self, *args):
        if self._try_cache:
            return self._first_call(args)
        try:
            return self.dispatcher(*args)
        except self._backend.errors as exc:
            raise from_numba(exc, self.path, self.origins, self.user_name) from None
        except IndexError as exc:
            raise IndexError(site_message(self.user_name, self.sites, exc)) from None
        except Raised as exc:
            raise user_exception(exc) from None

    def _first_call(self, args):
        """A light (and checked) load from the disk cache, or a compile, then the call: with the cycle
        collector paused (`collection_paused`)."""
        self._try_cache = False
        with collection_paused():
            self._backend.load_cached(self.dispatcher, args)
            return self(*args)

    def __getattr__(self, name):
        return getattr(self.dispatcher, name)


_PRIMALS = {}


def primal_of(fn, arg_types, root, backend):
    """The primal's module (of `fn`, printed as it is), written once per signature and target (shared
    by every active mask), compiled when first called."""
    src, origins = backend.module_source([fn], f"{fn.name}_primal")
    path = root / f"{fn.name}_{cache.cache_key(src, arg_types, (), backend.key())}_primal.py"
    cache.write_module(path, src)
    primal = _PRIMALS.get(path)
    if primal is None:
        sites = fn.facts.of(Bounds).sites
        primal = _PRIMALS[path] = LazyPrimal(path, src, origins, fn.name, sites, backend)
    return primal


class LazyPrimal:
    """The plain compiled primal, imported and compiled (or loaded from the disk cache) only when
    first used: the gradient path never needs it. Calls and attributes are a `Checked` dispatcher's."""

    def __init__(self, path, source, origins, name, sites, backend):
        self.path, self.source, self.origins, self.name, self.sites = path, source, origins, name, sites
        self.backend = backend
        self._checked = None

    @property
    def text(self):
        """The primal function's source, without the module's header."""
        return self.source[self.source.index("def "):]

    @property
    def checked(self):
        with COMPILE_LOCK:
            if self._checked is None:
                dispatcher = self.backend.load(self.path, self.source, self.name)
                self._checked = Checked(dispatcher, self.path, self.origins, self.name, self.backend, self.sites)
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
