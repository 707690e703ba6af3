"""Index checks: an index out of range raises IndexError, as in Python; compiled code never reads
garbage or writes out of bounds.

Every element index of an array read or write is checked, once per place
it can change rather than once per access:

* an index that does not change in the loop around the access (`x[k]` in
  a loop over `i`) is checked once before the loop;
* an index that is the loop's own index plus a constant or a value that
  does not change in the loop (`x[i]`, `y[i - 1]`, `w[i + off]`) is checked
  once before the loop, at its first and last value, when the access runs
  on every iteration;
* any other index (`q[k, idx]` with `idx` a counter, an index read from an
  array) is checked where it is used.

Checks before a loop run only when the loop runs at least once, so they
never fire where Python would not. Slices need none (Python clips them).
Checks are calls of runtime helpers with a site number; `Checked` turns a
failing one into an IndexError naming the function, the line, the array,
the axis and the index (`site_message`).
"""
from ..ir import Assign, BinOp, Call, Const, Effect, For, Name, Slice, Subscript
from ..ir.forms import is_shape_entry
from ..ir.visit import assigned, blocks, own_exprs, subexpressions


def insert_index_checks(fn):
    """Add index checks to `fn`, in place; the sites go on `fn.facts["bounds"]`."""
    sites = []
    fn.facts["bounds"] = {"sites": sites}
    _block(fn, fn.body, None, sites)
    return fn


def _block(fn, stmts, loop, sites):
    """Check the accesses of `stmts`, which run on every iteration of `loop` (None: once); returns
    the checks that go before `loop`."""
    out, hoisted = [], []
    steps = {}            # names bound so far in this iteration to the loop index plus a fixed offset
    changing = assigned(loop.body) | {loop.var} if loop is not None else set()
    once = {n for n in changing if sum(n in assigned([t]) for t in loop.body) == 1} if loop is not None else set()
    for s in stmts:
        before = []
        for array, axis, index in _accesses(s):
            span = _loop_span(loop, array, steps.get(index, index))
            if span is None:
                before.append(_check("srcad.check_index", (Name(array), Const(axis), index), s, sites))
            elif not any(c.call.args[:-1] == (Name(array), Const(axis)) + span for c in hoisted):
                # one check before the loop per array, axis and index range
                hoisted.append(_check("srcad.check_loop_index", (Name(array), Const(axis)) + span, s, sites))
        if isinstance(s, For):
            before += _block(fn, s.body, s, sites)
        else:
            for b in blocks(s):
                _block(fn, b, None, sites)
        if loop is not None and isinstance(s, Assign) and s.target in once and \
                _offset_from(s.value, loop.var, changing) is not None:
            steps[Name(s.target)] = s.value
        out += before + [s]
    stmts[:] = out
    return hoisted


def _accesses(s):
    """(array name, axis, index) for each element index `s` itself reads or writes."""
    exprs = list(own_exprs(s))
    if hasattr(s, "array") and hasattr(s, "index"):
        exprs.append(Subscript(Name(s.array), s.index))
    found = []
    for e in exprs:
        for x in subexpressions(e):
            if isinstance(x, Subscript) and isinstance(x.base, Name) and not is_shape_entry(x):
                axis = 0
                for item in x.index:
                    if isinstance(item, Const) and item.value is None:
                        continue              # np.newaxis adds an axis of the result, not of the array
                    if not isinstance(item, Slice):
                        found.append((x.base.id, axis, item))
                    axis += 1
    return list(dict.fromkeys(found))


def _loop_span(loop, array, index):
    """(start, stop, step, scale, offset) when, on every iteration of `loop`, `index` is
    `scale * i + offset` with `i` the loop's index and `offset` fixed in the loop; else None."""
    if loop is None or not isinstance(loop.step, Const):
        return None
    changing = assigned(loop.body) | {loop.var}
    if array in changing:
        return None
    if not {x.id for x in subexpressions(index) if isinstance(x, Name)} & changing:
        scale, offset = Const(0), index                     # the same index on every iteration
    else:
        scale, offset = Const(1), _offset_from(index, loop.var, changing)
        if offset is None:
            return None
    return loop.start, loop.stop, loop.step, scale, offset


def _offset_from(index, var, changing):
    """`c` when `index` is `var + c`, `c + var` or `var - c` (as `-c`) with `c` fixed in the loop."""
    if index == Name(var):
        return Const(0)

    def fixed(e):
        return isinstance(e, Const) or (isinstance(e, Name) and e.id not in changing)
    if isinstance(index, BinOp) and index.op in ("+", "-"):
        if index.left == Name(var) and fixed(index.right):
            return index.right if index.op == "+" else _negated(index.right)
        if index.op == "+" and index.right == Name(var) and fixed(index.left):
            return index.left
    return None


def _negated(e):
    return Const(-e.value) if isinstance(e, Const) else BinOp("-", Const(0), e)


def _check(helper, args, s, sites):
    site = _site(sites, s, args[0].id, args[1].value)
    return Effect(Call(helper, args + (Const(site),)), s.origin)


def _site(sites, s, array, axis):
    o = s.origin
    sites.append({"func": o.func, "file": o.file, "line": o.line, "text": o.text, "array": array, "axis": axis})
    return len(sites) - 1


def site_message(name, sites, exc):
    """The message of an IndexError raised by a check at one of `sites` (`exc.args`: site, index, size)."""
    try:
        site, index, size = exc.args
        at = sites[site]
    except (ValueError, TypeError, IndexError):
        return f"{name}: an index is out of range in the compiled code ({exc})"
    return (f"{at['func']} ({at['file']}, line {at['line']}): index {index} is out of range for axis {at['axis']} "
            f"of `{at['array']}` (size {size}) in `{at['text']}`")
