"""srcad's compiler: a user function -> IR -> passes -> a compiled primal, forward and adjoint.

`transform(pyfunc, arg_types, active, target="cpu")` (`driver.py`) returns a
`Transformed` (`compiled.py`) holding the compiled functions; `pipeline.PASSES`
lists the passes in order, and `pipeline.run` / `pipeline.dump` show the IR
after any of them; `backends/` holds the targets. How it works: docs/design.md.

The names below load on first use (with Numba), so that `@ad.function` can check
its target in the registry (`backends/base.py`) without loading the compiler.
"""
_LAZY = {"TransformError": ".errors", "Transformed": ".compiled", "transform": ".driver"}

__all__ = ["TransformError", "Transformed", "transform"]


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(_LAZY[name], __name__), name)
