"""The source of the functions srcad compiles, taken once and kept.

Kept apart from the compiler so that ``@ad.function`` can take the source at
decoration time without importing the compiler (or Numba).
"""
import ast
import inspect
import textwrap
from dataclasses import dataclass


class StaleSourceError(ValueError):
    """The file a function came from was edited after the function was defined."""


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
    _check_matches(pyfunc, "".join(lines), filename, first)
    src = Source("".join(lines), filename, first)
    try:
        pyfunc.__srcad_source__ = src
    except AttributeError:
        pass
    return src


def _check_matches(pyfunc, text, filename, first):
    """Refuse source that is not the running function's: the file was edited after it was defined,
    and compiling what the file says now would compile something else."""
    try:
        tree = ast.parse(textwrap.dedent(text))
    except SyntaxError:
        tree = None
    node = tree.body[0] if tree is not None and tree.body else None
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return
    code = pyfunc.__code__
    params = [a.arg for a in node.args.posonlyargs + node.args.args]
    if node.name == pyfunc.__name__ and params == list(code.co_varnames[:code.co_argcount]):
        return
    raise StaleSourceError(
        f"{pyfunc.__qualname__}: {filename} was edited after {pyfunc.__name__} was defined (line {first} now "
        f"holds `def {node.name}({', '.join(params)})`), so srcad cannot read the source of the function "
        f"that is running. Hint: reload the module (importlib.reload) or restart Python, then call again")

