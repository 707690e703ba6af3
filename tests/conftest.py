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
