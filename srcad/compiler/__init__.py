"""srcad's compiler: a user function -> IR -> passes -> a compiled primal, forward and adjoint.

`transform(pyfunc, arg_types, active)` returns a `Transformed` holding the
compiled functions; `pipeline.PASSES` lists the passes in order, and
`pipeline.run` / `pipeline.dump` show the IR after any of them. How it works:
docs/design.md.
"""
from .errors import TransformError
from .pipeline import Transformed, transform

__all__ = ["TransformError", "Transformed", "transform"]
