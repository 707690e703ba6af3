"""A module of settings and coefficient tables, read by the kernels of test_numba_values.py as
`constants.FTOL`, as scientific code reads its `constants` / `config` modules."""
import numpy as np

FTOL = 1e-8
MAX_ITER = 4
G = 9.80665
COEF = np.array([1.0, -0.5, 0.25, -0.125])
NAME = "linear"
