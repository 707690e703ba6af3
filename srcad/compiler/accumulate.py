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
import re

from .normalize import assigned_names

_ACCUMULATION = re.compile(r"^(d_\w+)\[(.+)\] \+= (.+)$")
_FOR = re.compile(r"^for (\w+) in ")


def hoist_invariant_accumulations(lines, fresh, rank_of):
    """Rewrite ``lines`` (innermost loops first).

    ``fresh(base)`` makes new local names; ``rank_of(name)`` is the rank of an
    adjoint array (None if unknown): only whole elements are summed in a local.
    """
    out = []
    i = 0
    while i < len(lines):
        depth, text, origin = lines[i]
        loop = _FOR.match(text)
        end = _block_end(lines, i) if loop else i + 1
        if end > i + 1:
            body = hoist_invariant_accumulations(lines[i + 1:end], fresh, rank_of)
            before, body, after = _hoist(depth, loop.group(1), body, fresh, rank_of)
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
    assigned = {loop_var}
    for _, text, _ in body:
        stored = _stored_names(text)
        if stored is None:  # a line we cannot read: leave the loop as it is
            return [], body, []
        assigned |= stored
    code = [text for _, text, _ in body if not text.lstrip().startswith("#")]
    before, after, rewritten = [], [], []
    for line in body:
        d, text, origin = line
        m = _ACCUMULATION.match(text)
        if d == depth + 1 and m:
            array, index, expr = m.groups()
            names = _element_index_names(index, rank_of(array))
            uses = sum(len(re.findall(rf"\b{array}\b", c)) for c in code)
            if names is not None and uses == 1 and not (names & assigned):
                total = fresh(f"{array}_sum")
                before.append((depth, f"{total} = 0.0", None))
                rewritten.append((d, f"{total} += {expr}", origin))
                after += [(depth, f"if {total} != 0.0:", None), (depth + 1, f"{array}[{index}] += {total}", None)]
                continue
        rewritten.append(line)
    return before, rewritten, after


def _element_index_names(index, rank):
    """The names in ``index`` if it picks one element of an array of ``rank`` (no
    slices, one expression per axis); None otherwise."""
    try:
        subscript = ast.parse(f"a[{index}]", mode="eval").body
    except SyntaxError:
        return None
    parts = subscript.slice.elts if isinstance(subscript.slice, ast.Tuple) else [subscript.slice]
    if rank is None or len(parts) != rank or any(isinstance(p, ast.Slice) for p in parts):
        return None
    return {n.id for p in parts for n in ast.walk(p) if isinstance(n, ast.Name)}


def _stored_names(text):
    """Names a line of generated code assigns (loop headers included); None if unreadable."""
    text = text.strip()
    if not text or text.startswith("#"):
        return set()
    source = text + " pass" if text.endswith(":") else text
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    return assigned_names(tree.body)
