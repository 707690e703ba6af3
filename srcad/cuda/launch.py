"""Running a generated kernel from the host code around it.

Generated host code runs on NumPy arrays; `run_threads` moves the arrays a
kernel reads to the device, runs the `n` iterations of the parallel loop
the kernel came from on a grid the device holds at once (each thread
striding over them by the grid's size), copies back the arrays the loop
writes, and raises the IndexError of an index check that failed on the
device (worded by `compiled.Checked` like the CPU target's). Buffers only the threads use
(their saved values: `thread_buffer`) live on the device alone, and the
arrays a call was given stay there from its forward to its adjoint
(`Resident`).

`kernel_times()` times each kernel on the device. `compiling_ptx(cc)` is the
other way of running host code: no GPU and no simulator, each launch
compiles its kernel to PTX for compute capability
`cc` (recorded, by kernel name) instead of running it. Tests read what the
generated kernels become on a real GPU from it (atomics where threads share
an element, none where they do not).
"""
import contextlib
import functools
import threading

import numba
import numpy as np
from numba import cuda

THREADS_PER_BLOCK = 128
HOST_NAMES = ("run_threads", "thread_buffer", "check_loop_index", "trip_count")           # what generated host code calls
_PTX = threading.local()
_TIMES = threading.local()
_CALL = threading.local()


def trip_count(start, stop, step):
    """How many iterations range(start, stop, step) runs (host code's twin of the CPU's)."""
    return len(range(start, stop, step))


def check_loop_index(a, axis, start, stop, step, scale, offset, site, runs):
    """The host code's check, before a kernel runs, of the indices `scale * i + offset` its threads take
    in `a` along `axis` for i in range(start, stop, step) (the CPU's `runtime.check_loop_index`):
    the IndexError of the first one out of range."""
    n, trips = a.shape[axis], trip_count(start, stop, step)
    if trips == 0 or runs <= 0:
        return
    first, delta = scale * start + offset, scale * step
    last = first + (trips - 1) * delta
    if not -n <= first < n:
        raise IndexError(site, first, n)
    if not -n <= last < n:           # (the indices move one way: the first out is where they leave)
        k = (n - first + delta - 1) // delta if delta > 0 else (first + n) // -delta + 1
        raise IndexError(site, first + k * delta, n)


def thread_buffer(shape, dtype):
    """Storage that only kernels read and write (each thread its column of saved values)."""
    if getattr(_PTX, "found", None) is not None:
        return np.empty(shape, dtype)
    return cuda.device_array(shape, dtype)


def run_threads(kernel, n, args, written, checked=True):
    """Run `kernel`'s `n` iterations with `args` (arrays, scalars) and, if it makes index checks
    (`checked`), an error record; copy the arrays at positions `written` back into the host arrays given."""
    n = int(n)
    if getattr(_PTX, "found", None) is not None:
        _PTX.found[kernel.__name__] = _ptx(kernel, args, checked)
        return
    on_device = [_to_device(a) for a in args]
    errors = [cuda.to_device(np.zeros(3, np.int64))] if checked else []
    if n > 0:
        blocks = min((n + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK, _resident_blocks())
        timed = getattr(_TIMES, "found", None)
        if timed is not None:
            warm_up()
            start, stop = cuda.event(), cuda.event()
            start.record()
        kernel[blocks, THREADS_PER_BLOCK](n, *on_device, *errors)
        if timed is not None:
            stop.record()
            stop.synchronize()
            timed.setdefault(kernel.__name__, []).append(start.elapsed_time(stop) / 1e3)
    for k in written:
        if on_device[k] is not args[k]:
            _copy_back(on_device[k], args[k])
    site, index, size = errors[0].copy_to_host() if errors else (0, 0, 0)
    if site:
        raise IndexError(int(site) - 1, int(index), int(size))


@functools.cache
def _resident_blocks():
    """How many blocks of THREADS_PER_BLOCK threads the device runs at once (generated kernels loop over
    their iterations by the grid's size: more blocks would only add more partial sums to add)."""
    device = cuda.get_current_device()
    sms = getattr(device, "MULTIPROCESSOR_COUNT", 0) or 16
    per_sm = (getattr(device, "MAX_THREADS_PER_MULTI_PROCESSOR", 0) or 2048) // THREADS_PER_BLOCK
    return sms * per_sm


def _copy_back(device_array, host):
    """The device's values into `host`: straight into it where it is contiguous (no array in between)."""
    if host.flags.c_contiguous:
        device_array.copy_to_host(host)
    else:
        host[...] = device_array.copy_to_host()


def _to_device(a):
    """`a` as a kernel takes it: an array on the device (the call's copy of it if it has one, see
    `Resident`), a bool, or as it is."""
    if isinstance(a, np.ndarray):
        resident = getattr(_CALL, "resident", None)
        if resident is not None:
            return resident.device_copy(a)
        return cuda.to_device(np.ascontiguousarray(a))
    if isinstance(a, (bool, np.bool_)):
        return bool(a)
    return a


class Resident:
    """The device copies of the arrays one call of a generated function was given, made by the first kernel
    that reads or writes each and used by the next kernels of its forward and adjoint: an array is moved to
    the device once per call, not once per kernel. A kernel's writes into one are copied back to the host
    array after it, so both stay the same (the host code writes into no array it was given: a function
    whose adjoint restores arrays in place gets no `Resident`). Arrays the host code makes are moved each
    time."""

    def __init__(self, args):
        self._given = {id(a): a for a in args if isinstance(a, np.ndarray)}
        self._copies = {}

    def device_copy(self, a):
        if self._given.get(id(a)) is not a:
            return cuda.to_device(np.ascontiguousarray(a))
        if id(a) not in self._copies:
            self._copies[id(a)] = cuda.to_device(np.ascontiguousarray(a))
        return self._copies[id(a)]


@contextlib.contextmanager
def resident(state):
    """Within it, kernels read the device copies of the call `state` (a `Resident`) holds."""
    outer = getattr(_CALL, "resident", None)
    _CALL.resident = state
    try:
        yield
    finally:
        _CALL.resident = outer


def warm_up():
    """Before a timing window: wait for the copies to the device, then keep every multiprocessor busy for
    about a millisecond, so that the clocks have left their idle level and the host has launched the next
    kernel before the window opens (the window then holds that kernel alone). On a real GPU only."""
    cuda.synchronize()
    if not numba.config.ENABLE_CUDASIM:
        _spin[_resident_blocks(), THREADS_PER_BLOCK](200000, _sink())


@cuda.jit
def _spin(steps, sink):
    x = 1.0
    for _ in range(steps):
        x = x * 0.9999999 + 1e-9
    if x < 0.0:                         # never: keeps the loop
        sink[0] = x


@functools.cache
def _sink():
    return cuda.device_array(1)


@contextlib.contextmanager
def kernel_times():
    """Within it, each launch's kernel is timed on the device (CUDA events; the copies, the host's launch
    and the clocks' rise from idle not counted: `warm_up`); yields {kernel name: [seconds, ...]}
    (benchmarks/gpu.py compares them with hand-written kernels timed the same way)."""
    _TIMES.found = {}
    try:
        yield _TIMES.found
    finally:
        _TIMES.found = None


@contextlib.contextmanager
def compiling_ptx(cc=(9, 0)):
    """Within it, launches compile their kernels to PTX instead of running; yields {kernel: PTX text}."""
    _PTX.found, _PTX.cc = {}, cc
    try:
        yield _PTX.found
    finally:
        _PTX.found = None


def _ptx(kernel, args, checked):
    types = [numba.int64] + [numba.typeof(np.ascontiguousarray(a) if isinstance(a, np.ndarray) else a)
                             for a in args] + ([numba.int64[::1]] if checked else [])
    ptx, _ = cuda.compile_ptx(kernel.py_func, tuple(types), cc=_PTX.cc)
    return ptx
