"""srcad's source-to-source compiler: user function -> primal, forward, adjoint.

`transform(pyfunc, arg_types, active)` returns a `Transformed` holding three
Numba dispatchers. Pipeline: frontend (parse, resolve, fence) -> normalize
(three-address IR) -> Numba types of the primal -> activity -> reverse
(forward with saves, adjoint) -> codegen -> backend (files + Numba cache).
"""
from .frontend import TransformError
from .transform import Transformed, transform

__all__ = ["TransformError", "Transformed", "transform"]
