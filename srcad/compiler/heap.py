"""Keep memory a call freed for the next call: glibc's malloc thresholds, set once.

A forward keeps the arrays its adjoint reads (a vectorised loop body's temporaries, one per
iteration) and frees them all when the gradient is taken: megabytes at once, in blocks below
glibc's mmap threshold (128 KiB at start). glibc hands the freed top of its heap back to the
system as soon as it exceeds its trim threshold (128 KiB as well), so the next forward takes every
page again from the kernel, zero-filled: at ADBench GMM 1k d10 in NumPy form that was half the
forward's time (1.6 ms against 0.7 ms without it).

glibc raises both thresholds itself once a program frees a block it had mapped, up to a 32 MiB
mmap threshold and twice that for trimming (its "dynamic threshold"), but a program that only
frees smaller blocks never gets there. `keep_freed_memory` sets those same ceilings from the start:
blocks up to 32 MiB come from the heap, and up to 64 MiB of freed heap top stays mapped for reuse.
It does nothing off glibc, or where the user has tuned malloc (`MALLOC_*_` variables or
`GLIBC_TUNABLES`): docs/design.md, "Memory between calls".
"""
import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1           # mallopt's parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20       # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit systems
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD     # what glibc's dynamic threshold pairs with it
USER_SETTINGS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")

_applied = None


def keep_freed_memory():
    """Set glibc's mmap and trim thresholds to the ceilings of its own dynamic thresholds, once per
    process; True where they are set, False where they are left alone (not glibc, or tuned by the user)."""
    global _applied
    if _applied is None:
        _applied = _user_left_malloc_alone() and _set_thresholds()
    return _applied


def _user_left_malloc_alone():
    return not any(name in os.environ for name in USER_SETTINGS) \
        and "glibc.malloc." not in os.environ.get("GLIBC_TUNABLES", "")


def _set_thresholds():
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt     # the C library this process runs on (no library search)
    except (OSError, AttributeError):           # C libraries without mallopt
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
