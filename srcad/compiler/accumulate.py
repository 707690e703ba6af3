"""Loop-invariant adjoint accumulations go through a local, not through memory.

In a reverse loop such as

    for row in range(d - 1, col, -1):
        d_icf[k, idx] += d_t5 * xc[col]
        d_xc[col] += d_t5 * icf[k, idx]

``d_xc[col]`` is the same element on every iteration, but Numba cannot prove
that the stores into ``d_icf`` leave it alone, so it loads and stores it each
time.  Summing into a local and adding the sum once after the loop keeps the
accumulation in a register:

    d_xc_sum = 0.0
    for row in ...:
        ...
        d_xc_sum += d_t5 * icf[k, idx]
    if d_xc_sum != 0.0:          # the loop ran: its index is valid
        d_xc[col] += d_xc_sum

A line qualifies when it sits directly in a ``for`` body, its index names are
not assigned anywhere in that body, and its array appears on no other line of
the body.  Lines are ``(depth, text, origin)`` as the adjoint writer takes them.
"""

import ast

from .normalize import assigned_names


def hoist_invariant_accumulations(lines, fresh, rank_of):
    """Rewrite ``lines`` (innermost loops first).

    ``fresh(base)`` makes new local names; ``rank_of(name)`` is the rank of an
    adjoint array (None if unknown): only whole elements are summed in a local.
    """
    out = []
    i = 0
    while i < len(lines):
        depth, text, origin = lines[i]
        loop = _parse_line(text)
        loop_var = loop.target.id if isinstance(loop, ast.For) and isinstance(loop.target, ast.Name) else None
        end = _block_end(lines, i) if loop_var else i + 1
        if end > i + 1:
            body = hoist_invariant_accumulations(lines[i + 1:end], fresh, rank_of)
            before, body, after = _hoist(depth, loop_var, body, fresh, rank_of)
            out += before + [(depth, text, origin)] + body + after
            i = end
            continue
        out.append(lines[i])
        i += 1
    return out


def _block_end(lines, start):
    """Index just past the lines nested under ``lines[start]``."""
    depth = lines[start][0]
    end = start + 1
    while end < len(lines) and lines[end][0] > depth:
        end += 1
    return end


def _hoist(depth, loop_var, body, fresh, rank_of):
    parsed = [_parse_line(text) for _, text, _ in body]
    if any(p is False for p in parsed):      # a line we cannot read: leave the loop as it is
        return [], body, []
    statements = [p for p in parsed if p is not None]
    assigned = {loop_var} | assigned_names(statements)
    before, after, rewritten = [], [], []
    for (d, text, origin), node in zip(body, parsed):
        acc = _accumulation(node) if d == depth + 1 else None
        if acc is not None:
            array, index, value = acc
            names = _element_index_names(index, rank_of(array))
            uses = sum(isinstance(n, ast.Name) and n.id == array for t in statements for n in ast.walk(t))
            if names is not None and uses == 1 and not (names & assigned):
                total = fresh(f"{array}_sum")
                element = ast.unparse(ast.Subscript(value=ast.Name(id=array, ctx=ast.Load()), slice=index,
                                                    ctx=ast.Load()))
                before.append((depth, f"{total} = 0.0", None))
                rewritten.append((d, f"{total} += {ast.unparse(value)}", origin))
                after += [(depth, f"if {total} != 0.0:", None), (depth + 1, f"{element} += {total}", None)]
                continue
        rewritten.append((d, text, origin))
    return before, rewritten, after


def _accumulation(node):
    """(array, index, value) of a line `array[index] += value`, else None."""
    if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and isinstance(node.target, ast.Subscript) \
            and isinstance(node.target.value, ast.Name):
        return node.target.value.id, node.target.slice, node.value
    return None


def _element_index_names(index, rank):
    """The names in ``index`` if it picks one element of an array of ``rank`` (no
    slices, one expression per axis); None otherwise."""
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    if rank is None or len(parts) != rank or any(isinstance(p, ast.Slice) for p in parts):
        return None
    return {n.id for p in parts for n in ast.walk(p) if isinstance(n, ast.Name)}


def _parse_line(text):
    """The statement a line of generated code holds (a block header with an empty body), None for a
    comment or an empty line, False if it cannot be read on its own (`else:`)."""
    text = text.strip()
    if not text or text.startswith("#"):
        return None
    try:
        return ast.parse(text + " pass" if text.endswith(":") else text).body[0]
    except SyntaxError:
        return False
