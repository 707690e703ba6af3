"""TransformError and its formatter: every refusal names the function, the file, the line, the
construct and a fix, and points to the documentation of the supported subset."""
import re
import sys
from pathlib import Path

SUBSET_DOC = "docs/subset.md"


class TransformError(Exception):
    """The function uses something srcad's compiler cannot handle (or would get wrong)."""


class RuleError(TransformError, ValueError):
    """A custom derivative rule (`f.defjvp`, `f.defvjp`) returns the wrong number or shapes of values."""


def where(origin):
    """`func (file, line N)` for an IR origin."""
    return f"{origin.func} ({origin.file}, line {origin.line})"


def refuse(origin, construct, hint, doc=SUBSET_DOC):
    """A TransformError for `construct` at `origin` (an IR Origin): what is refused, and how to fix it."""
    return TransformError(f"{where(origin)}: {construct} is not supported by srcad's compiler. Hint: {hint} "
                          f"(the supported subset: {doc})")


def problem(origin, what, hint):
    """A TransformError for code inside the subset that would still give a wrong result as written."""
    return TransformError(f"{where(origin)}: {what}. Hint: {hint}")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FILE_LINE = re.compile(r'File "([^"]+)", line (\d+)')


def numba_origin(exc, path, origins):
    """The user line (an IR Origin) of the generated line at `path` that a Numba error names, or None
    (`origins[k]` is the user line of generated line k + 1, None for lines srcad added)."""
    for m in _FILE_LINE.finditer(_ANSI.sub("", str(exc))):
        if Path(m.group(1)).name == Path(path).name:
            line = int(m.group(2)) - 1
            while line >= 0 and (line >= len(origins) or origins[line] is None):
                line -= 1
            if line >= 0:
                return origins[line]
    return None


def from_numba(exc, path, origins, func_name):
    """A Numba error raised in generated code at `path`, restated on the user's function and line."""
    text = _ANSI.sub("", str(exc))
    origin = numba_origin(exc, path, origins)
    reason = next((ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("Failed in")),
                  text.strip())
    if origin is None:
        return TransformError(f"{func_name}: Numba cannot compile it: {reason}")
    return TransformError(f"{where(origin)}: Numba cannot compile `{origin.text}`: {reason}")


def user_exception(raised):
    """The exception a `raise` or `assert` in compiled code stands for (`runtime.Raised`: the class's
    import path, its arguments, where): the user's class with the user's arguments, as Python raises
    it, with a note naming the function and line."""
    path, args, at = raised.args
    module, _, qualname = path.partition(":")
    cls = sys.modules.get(module)
    for part in qualname.split("."):
        cls = getattr(cls, part, None)
    if not (isinstance(cls, type) and issubclass(cls, BaseException)):
        cls, args = RuntimeError, (f"{qualname}{args!r}",)
    exc = cls(*args)
    exc.add_note(f"raised in compiled code at {at}")
    return exc
