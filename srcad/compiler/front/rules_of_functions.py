"""Custom derivative rules of compiled functions (`f.defjvp`, `f.defvjp`), as the front end reads them.

A rule is kept on the user's Python function (the attribute `RULE`), so that
the copy of it each compile makes (module globals frozen) carries it along,
and a caller that calls `f` sees it where it inlines `f`.
"""
from dataclasses import dataclass

RULE = "srcad_custom_rule"


@dataclass(frozen=True)
class CustomRule:
    """`jvp(primals, tangents) -> (out, out_tangent)`; or `fwd(*args) -> (out, residuals)` and
    `bwd(residuals, g) -> one cotangent per argument`. Each is plain, compilable Python."""
    jvp: object = None
    fwd: object = None
    bwd: object = None


def rule_of(pyfunc):
    """The custom rule given to `pyfunc` (a plain function), or None."""
    return getattr(pyfunc, RULE, None) if pyfunc is not None else None
