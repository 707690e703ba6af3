"""Index checks: an index out of range raises IndexError, as in Python; compiled code never reads
garbage or writes out of bounds.

Every element index of an array read or write is checked, once per place
it can change rather than once per access:

* an index that does not change in the loop around the access (`x[k]` in
  a loop over `i`) is checked once before the loop;
* an index that is the loop's own index plus a constant or a value that
  does not change in the loop (`x[i]`, `y[i - 1]`, `w[i + off]`), or a
  counter the loop steps once per iteration (`idx += 1`), is checked once
  before the loop, at its first and last value, when the access runs on
  every iteration;
* any other index (`q[k, idx]` with `idx` a counter, an index read from an
  array) is checked where it is used.

Checks before a loop run only when the loop runs at least once, so they
never fire where Python would not. Slices need none (Python clips them).
Checks are calls of runtime helpers with a site number; `Checked` turns a
failing one into an IndexError naming the function, the line, the array,
the axis and the index (`site_message`).
"""
from ..ir import Assign, BinOp, Call, Const, Effect, For, Name, Slice, Subscript
from ..ir.facts import Bounds
from ..ir.forms import is_shape_entry
from ..ir.visit import assigned, blocks, own_exprs, subexpressions
from .lower import folded

# the calls the checks are made of: they read the array and the index, write nothing, and raise where out of range
INDEX_CHECKS = frozenset({"srcad.check_index", "srcad.check_loop_index"})


def insert_index_checks(fn):
    """Add index checks to `fn`, in place; the sites go on its `Bounds` facts."""
    sites = []
    fn.facts.put(Bounds(sites))
    _block(fn, fn.body, None, sites)
    return fn


def _block(fn, stmts, loop, sites):
    """Check the accesses of `stmts`, which run on every iteration of `loop` (None: once); returns
    the checks that go before `loop`."""
    out, hoisted = [], []
    steps = {}            # names bound so far in this iteration to the loop index plus a fixed offset
    changing = assigned(loop.body) | {loop.var} if loop is not None else set()
    once = {n for n in changing if sum(n in assigned([t]) for t in loop.body) == 1} if loop is not None else set()
    counters = _counters(loop, once) if loop is not None else {}
    stepped = set()       # counters already stepped in this iteration
    for s in stmts:
        before = []
        for array, axis, index in _accesses(s):
            span = _counter_span(loop, array, index, counters, stepped) if index in counters else \
                _loop_span(loop, array, steps.get(index, index))
            if span is None:
                before.append(_check(fn, "srcad.check_index", (Name(array), Const(axis), index), s, sites))
            elif not any(c.call.args[:7] == (Name(array), Const(axis)) + span for c in hoisted):
                # one check before the loop per array, axis and index range
                hoisted.append(_check(fn, "srcad.check_loop_index", (Name(array), Const(axis)) + span, s, sites,
                                      Const(1)))
        if isinstance(s, For):
            for check in _block(fn, s.body, s, sites):
                widest = _widest(check, loop, changing, steps) if loop is not None else None
                if widest is None:
                    before.append(check)
                elif not any(c.call.args[:7] == widest.call.args[:7] for c in hoisted):
                    hoisted.append(_outside(widest, loop))
        else:
            for b in blocks(s):
                _block(fn, b, None, sites)
        if loop is not None and isinstance(s, Assign) and s.target in once and \
                _offset_from(s.value, loop.var, changing) is not None:
            steps[Name(s.target)] = s.value
        if isinstance(s, Assign) and Name(s.target) in counters:
            stepped.add(Name(s.target))
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
                for k, item in enumerate(x.index):
                    if isinstance(item, Const) and item.value is None:
                        continue              # np.newaxis adds an axis of the result, not of the array
                    if isinstance(item, Const) and item.value is Ellipsis:     # what follows counts from the end
                        axis = -sum(1 for i in x.index[k + 1:] if not (isinstance(i, Const) and i.value is None))
                        continue
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


def _counters(loop, once):
    """{Name(v): c} for the names `loop` steps by a constant once per iteration (`v += c` at the top
    level of its body, nothing else binding them), when the loop goes by +1 or -1."""
    if loop.step not in (Const(1), Const(-1)):
        return {}
    found = {}
    for s in loop.body:
        if isinstance(s, Assign) and s.target in once and isinstance(s.value, BinOp) and s.value.op == "+" \
                and s.value.left == Name(s.target) and isinstance(s.value.right, Const) \
                and type(s.value.right.value) is int:
            found[Name(s.target)] = s.value.right.value
    return found


def _counter_span(loop, array, counter, counters, stepped):
    """The span of a stepped counter: at loop index i it holds v0 + c * (i - start) / step (plus c once
    stepped in this iteration), v0 its value on entry."""
    if array in assigned(loop.body):
        return None
    c = counters[counter]
    step = loop.step.value
    extra = c if counter in stepped else 0
    if isinstance(loop.start, Const):
        shift = extra - c * step * loop.start.value
        offset = counter if shift == 0 else BinOp("+", counter, Const(shift))
    else:
        base = counter if extra == 0 else BinOp("+", counter, Const(extra))
        offset = BinOp("-", base, loop.start if c * step == 1 else BinOp("*", Const(c * step), loop.start))
    return loop.start, loop.stop, loop.step, Const(c * step), offset


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


def _check(fn, helper, args, s, sites, *more):
    site = _site(sites, s, fn.names.user(args[0].id), args[1].value)
    return Effect(Call(helper, args + (Const(site),) + more), s.origin)


def _widest(check, loop, changing, steps):
    """`check` (made before an inner loop in `loop`'s body) as one check covering every iteration of
    `loop`, or None. Exact in two cases: it is the same on every iteration; or only the inner loop's
    range moves with `loop`'s index, one end fixed (`range(i + 1, n)`, `range(0, i)`), so the inner
    ranges nest and the widest, at `loop`'s first or last iteration, holds them all."""
    a, axis, start, stop, step, scale, offset, site, runs = check.call.args
    if not _names_of(check.call) & changing:
        return check
    if scale == Const(0) and not any(_names_of(e) & changing for e in (a, axis, step, runs)):
        span = _outer_span(loop, start, stop, step, offset, changing, steps)
        if span is not None:
            first, last, inner = span
            if inner is not None:
                runs = inner if runs == Const(1) else Call("min", (runs, inner))
            return Effect(Call(check.call.fn, (a, axis, first, last, loop.step, Const(1), _offset_from(
                offset, loop.var, changing), site, runs)), check.origin)
    fixed = (a, axis, scale, offset, site, runs)
    if step != Const(1) or loop.step != Const(1) or any(_names_of(e) & changing for e in fixed):
        return None
    start, stop = steps.get(start, start), steps.get(stop, stop)
    moving = [k for k, e in ((0, start), (1, stop)) if _names_of(e) & changing]
    if len(moving) != 1:
        return None
    k = moving[0]
    shift = _offset_from((start, stop)[k], loop.var, changing)
    if shift is None:
        return None
    edge = loop.start if k == 0 else BinOp("-", loop.stop, Const(1))
    at = folded(BinOp("+", edge, shift)) if shift != Const(0) else edge
    bounds = (at, stop) if k == 0 else (start, at)
    return Effect(Call(check.call.fn, (a, axis) + bounds + (step, scale, offset, site, runs)), check.origin)


def _outer_span(loop, start, stop, step, offset, changing, steps):
    """One index per iteration of `loop` (`offset` = its index plus a fixed shift), read in an inner loop
    over range(start, stop, step): (first, last, runs) of the iterations of `loop` on which the inner
    loop runs, as a range of `loop`'s index (`runs`: a trip count the check also needs, or None).
    Exact when the inner range is the same on every iteration, or when one end of it moves with
    `loop`'s index and both step by 1 (`range(i + 1, n)` runs while i < n - 1); else None."""
    if _offset_from(offset, loop.var, changing) is None or not isinstance(loop.step, Const):
        return None
    start, stop = steps.get(start, start), steps.get(stop, stop)
    moving = [k for k, e in ((0, start), (1, stop)) if _names_of(e) & changing]
    if not moving:
        return loop.start, loop.stop, Call("srcad.trip_count", (start, stop, step))
    if len(moving) != 1 or step != Const(1) or loop.step != Const(1):
        return None
    k = moving[0]
    shift = _offset_from((start, stop)[k], loop.var, changing)
    if shift is None:
        return None
    if k == 0:      # range(i + s, stop) runs while i + s < stop
        return loop.start, Call("min", (loop.stop, folded(BinOp("-", stop, shift)))), None
    # range(start, i + s) runs once i + s > start
    return Call("max", (loop.start, folded(BinOp("+", BinOp("-", start, shift), Const(1))))), loop.stop, None


def _outside(check, loop):
    """A check made before `loop` instead of before an inner loop in its body: it must still run only
    when `loop` runs (its last argument counts the runs it depends on)."""
    *args, runs = check.call.args
    trips = Call("srcad.trip_count", (loop.start, loop.stop, loop.step))
    runs = trips if runs == Const(1) else Call("min", (runs, trips))
    return Effect(Call(check.call.fn, tuple(args) + (runs,)), check.origin)


def _names_of(e):
    return {x.id for x in subexpressions(e) if isinstance(x, Name)}


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
