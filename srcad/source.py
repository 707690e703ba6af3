"""The source of the functions srcad compiles, taken once and kept.

Kept apart from the compiler so that ``@ad.function`` can take the source at
decoration time without importing the compiler (or Numba).
"""
import inspect
from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    """The source of one function as it was when srcad first saw it.

    Taken at decoration time (``@ad.function``) or, for helpers, when the
    compiler first follows them, and kept on the function as
    ``__srcad_source__``: editing the file afterwards never changes what is
    compiled, and a function rebuilt in another process (unpickled) carries
    the source it was shipped with."""
    text: str
    filename: str
    first_line: int


def capture_source(pyfunc):
    """Read and remember `pyfunc`'s source; None when it has none (a prompt, exec)."""
    known = getattr(pyfunc, "__srcad_source__", None)
    if known is not None:
        return known
    try:
        lines, first = inspect.getsourcelines(pyfunc)
        filename = inspect.getsourcefile(pyfunc) or "<unknown>"
    except (OSError, TypeError):
        return None
    src = Source("".join(lines), filename, first)
    try:
        pyfunc.__srcad_source__ = src
    except AttributeError:
        pass
    return src
