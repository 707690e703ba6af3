"""Eager operations: the primitives, their VJP rules, and NumPy dispatch."""

from .registry import Primitive, dispatch_function, dispatch_ufunc, nondifferentiable, primitive  # noqa: F401
from .rules import *  # noqa: F401,F403
from .rules import abs, max, min, round, sum  # noqa: F401  (names shadowing builtins are not in *)
from . import numpy_api  # noqa: F401  (fills the dispatch tables)
