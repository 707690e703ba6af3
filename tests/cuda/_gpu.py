"""`real_gpu`: the mark of tests that need a real GPU (SRCAD_GPU=1), skipped under Numba's CUDA simulator."""
import os

import pytest

real_gpu = pytest.mark.skipif(os.environ.get("SRCAD_GPU") != "1",
                              reason="needs a real GPU: run with SRCAD_GPU=1 on a machine with one (CI has none)")
