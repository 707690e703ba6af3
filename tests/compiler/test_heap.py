"""srcad/compiler/heap.py: memory a call freed stays in the heap for the next call (glibc), unless the
user tuned malloc. Each case runs in a fresh process: the thresholds are process-wide and set once."""
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _glibc():
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    except (AttributeError, ValueError, OSError):
        return False


pytestmark = pytest.mark.skipif(not _glibc(), reason="glibc's malloc only")

# Takes and frees 50 blocks of 80 KB, written to (a vectorised forward's kept arrays at GMM 1k d10),
# five times, after doing what the case says; reports the page faults of the last four rounds: pages
# taken again from the kernel.
FAULTS_OF_REUSE = textwrap.dedent("""
    import ctypes, ctypes.util, resource
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
    libc.free.argtypes = (ctypes.c_void_p,)
    libc.memset.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t)
    {prelude}
    def round_trip():
        blocks = [libc.malloc(80_000) for _ in range(50)]
        for b in blocks:
            libc.memset(b, 1, 80_000)
        for b in reversed(blocks):
            libc.free(b)
    round_trip()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(4):
        round_trip()
    print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")
ROUND_PAGES = 4 * 50 * 80_000 // 4096      # every page of every round, were each taken afresh


def run_case(prelude, env_extra=()):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    env.update(env_extra)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", FAULTS_OF_REUSE.format(prelude=prelude)], env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    return out[0] == "True", int(out[1])


def test_loading_the_cpu_backend_keeps_freed_memory():
    applied, faults = run_case("import srcad.compiler.backends.numba_cpu\n"
                               "from srcad.compiler import heap\napplied = heap.keep_freed_memory()")
    assert applied
    assert faults < ROUND_PAGES / 20           # the blocks come back from the heap


def test_without_it_glibc_gives_the_memory_back():
    applied, faults = run_case("applied = False")
    assert not applied
    assert faults > ROUND_PAGES / 2            # trimmed at 128 KiB, taken again from the kernel


@pytest.mark.parametrize("setting", [{"MALLOC_TRIM_THRESHOLD_": "131072"},
                                     {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"}])
def test_a_user_who_tuned_malloc_keeps_their_settings(setting):
    applied, faults = run_case("from srcad.compiler import heap\napplied = heap.keep_freed_memory()", setting)
    assert not applied
    assert faults > ROUND_PAGES / 2
