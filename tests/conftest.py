"""Settings of the whole suite, made before Numba loads.

Numba compiles without LLVM's optimizations (NUMBA_OPT=0): the tests check
results, not speed, and compiling is most of the suite's time (the slowest
test, second derivatives through QR and least squares, takes half as long as
at level 1). Code compiled so is not kept in Numba's disk cache ("uses
dynamic globals"): the tests of the disk cache and of PTX run their fresh
processes at a user's level. The generated code and Numba's own cache go to
directories of the tests' own, so that unoptimized code never serves a user's
program or a benchmark (srcad's cache key has the level too). Each can be
overridden from the environment. The GPU tests run under Numba's CUDA
simulator unless SRCAD_GPU=1 says that a GPU is there (set before numba.cuda
loads).
"""
import os

_TESTS_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "srcad-tests")
os.environ.setdefault("NUMBA_OPT", "0")
os.environ.setdefault("SRCAD_CACHE_DIR", _TESTS_CACHE)
os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(_TESTS_CACHE, "numba"))
if os.environ.get("SRCAD_GPU") != "1":         # the GPU tests (tests/cuda) run on Numba's CUDA simulator
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"


import sys                                     # noqa: E402  (after the settings above, which must precede Numba)
import zlib                                    # noqa: E402

import numpy as np                             # noqa: E402
import pytest                                  # noqa: E402

_TESTS = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(autouse=True)
def inputs_of_this_test(request):
    """Every test module's shared `rng` (the test's own and those of the modules whose helpers it calls)
    restarts, for each test, from a seed of the test's name and the module's: a test draws the same inputs
    whichever tests pytest-xdist ran before it in the same worker, so a failure reproduces when run alone."""
    for name, module in list(sys.modules.items()):
        if (isinstance(getattr(module, "rng", None), np.random.Generator)
                and os.path.abspath(getattr(module, "__file__", None) or "/").startswith(_TESTS)):
            module.rng = np.random.default_rng(zlib.crc32(f"{request.node.nodeid} {name}".encode()))


# modules whose tests compile the most code each: run first, so that the workers end on short tests
# (pytest-xdist's worksteal hands out the queue from its end; a long test started last is a tail)
_LONGEST_FIRST = ("test_numba_values.py", "test_kernels.py", "test_barriers.py", "test_random_programs.py",
                  "test_adbench.py", "test_elementwise_loops.py", "test_benchmarks.py")


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: item.path.name not in _LONGEST_FIRST)
