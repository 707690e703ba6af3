"""The workloads of `python -m benchmarks`, one module each, exposing `rows(quick) -> Iterable[Row]`.

Imported one by one and guarded (`load`): a module that is missing or fails to import is reported and
the others still run.
"""
import importlib

from ..harness import describe

NAMES = ("eager", "jacobians", "rk4", "gmm", "lstm", "ba")


def load(names=NAMES):
    """{name: module} of the workload modules `names` that import, and {name: why} of those that do not."""
    modules, errors = {}, {}
    for name in names:
        try:
            modules[name] = importlib.import_module(f"{__name__}.{name}")
        except Exception as exc:
            errors[name] = describe(exc)
    return modules, errors
