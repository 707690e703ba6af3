"""Scalar stacks that are pushed together share one buffer and one height.

A loop of the forward that saves several scalars per iteration pushes each
onto a stack of its own:

    exp_result_stack[exp_result_stack_top] = exp_result
    exp_result_stack_top += 1
    forget_stack[forget_stack_top] = forget
    forget_stack_top += 1

With ten such stacks the loop keeps ten heights and ten buffer pointers
live, more than x86 has registers, across the calls of exp and tanh, and
writes ten streams of memory. Stacks of one scalar type that the forward
pushes in one block and the adjoint pops in one block, in exactly the reverse
order, lose nothing by sharing one buffer and one height: an iteration's
values lie side by side and the reverse sweep takes them back last in, first
out, as before. Their room is reserved at once (the sum of their counts). On
ADBench's LSTM in loops this took the taped forward from 2.21 to 2.11 ms and
the gradient from 2.84 to 2.68 ms (`benchmarks/README.md`).

Only scalar stacks the caller hands in and the forward hands on (`Function.workspace`,
on targets whose stacks may grow) are merged, and only on the code compiled:
`Program.ir` keeps one stack per value.
"""
from dataclasses import replace

from numba.core import types as nt

from ..ir import BinOp, Name, Pop, Push, Reserve, Tuple
from ..ir.facts import Reverse
from ..ir.visit import names_in, own_exprs, stack_statements, walk


def merge_stacks(forward, adjoint):
    """Merge, in place, the forward's workspace stacks that qualify; returns {merged stack: the stack kept}."""
    pushes, pops, reserves = _blocks(forward, Push), _blocks(adjoint, Pop), _blocks(forward, Reserve)
    elsewhere = (_blocks(forward, Pop).keys() | _blocks(adjoint, Push).keys() | _blocks(adjoint, Reserve).keys()
                 | _read_otherwise(forward) | _read_otherwise(adjoint))
    candidates = {}
    first_pushed = {name: k for k, name in enumerate(pushes)}
    for name in sorted(forward.workspace, key=lambda n: first_pushed.get(n, -1)):
        stack = forward.stacks[name]
        if name in elsewhere or stack.top in elsewhere or isinstance(stack.item, nt.Array) \
                or len(_distinct(pushes.get(name, ()))) != 1 \
                or len(_distinct(pops.get(name, ()))) != 1 or len(reserves.get(name, ())) > 1:
            continue
        reserved_in = reserves.get(name, [None])[0]          # the block of its one reservation, if any
        if reserved_in is None and not stack.checked:
            continue
        key = (id(pushes[name][0]), id(pops[name][0]), id(reserved_in), stack.item, stack.checked)
        candidates.setdefault(key, []).append(name)
    kept = {}
    for names in candidates.values():
        pushed, popped = pushes[names[0]][0], pops[names[0]][0]
        for group in _mirrored_groups(names, pushed, popped):
            if _reservations_together(reserves, group):
                kept.update((m, group[0]) for m in group[1:])
                _reserve_once(reserves, group)
    if kept:
        _rename(forward, adjoint, kept)
    return kept


def _blocks(fn, kind):
    """{stack: the block of each of `fn`'s statements of `kind` on it}, in the order of `stack_statements`."""
    return {stack: [block for block, _ in found] for stack, found in stack_statements(fn, kind).items()}


def _distinct(blocks):
    return {id(b) for b in blocks}


def _read_otherwise(fn):
    """Names `fn` reads outside pushes, pops and reservations (a stack or height used any other way)."""
    return {n for s in walk(fn.body) if not isinstance(s, (Push, Pop, Reserve)) for e in own_exprs(s)
            for n in names_in(e)}


def _order(block, stacks):
    return [s.stack for s in block if isinstance(s, (Push, Pop)) and s.stack in stacks]


def _mirrored_groups(names, pushed, popped):
    """Groups of `names` (two or more each) whose pops in `popped` are their pushes in `pushed`, reversed;
    each stack, in the order of `names` (pushed first, first), joins the first group it keeps mirrored."""
    groups = []
    for name in names:
        for group in groups:
            if _order(pushed, group + [name])[::-1] == _order(popped, group + [name]):
                group.append(name)
                break
        else:
            groups.append([name])
    return [g for g in groups if len(g) > 1]


def _reservation_indices(reserves, group):
    """(the block, the indices in it) of the group's reservations (one block: the candidates' key)."""
    block = next((reserves[m][0] for m in group if m in reserves), [])
    return block, [k for k, s in enumerate(block) if isinstance(s, Reserve) and s.stack in group]


def _reservations_together(reserves, group):
    """Nothing but reservations between the group's first and last: one reservation for all of them,
    where the first was, reads only what theirs read, and precedes the same pushes."""
    block, at = _reservation_indices(reserves, group)
    return all(isinstance(s, Reserve) for s in block[at[0]:at[-1] + 1]) if at else True


def _reserve_once(reserves, group):
    """The group's reservations become the first, for the sum of their counts."""
    block, at = _reservation_indices(reserves, group)
    if not at:
        return
    first = block[at[0]]
    for k in sorted(at[1:], reverse=True):
        first.count = BinOp("+", first.count, block[k].count)
        del block[k]


def _rename(forward, adjoint, kept):
    """Members' pushes and pops go to one stack named for what it holds; the members leave every list."""
    renamed = {}                 # stack or height -> its new name, or None where it goes
    merged = {}
    for rep in sorted(set(kept.values())):
        old = forward.stacks[rep]
        new = forward.names.fresh(f"saved_{old.item}")
        merged[rep] = (new, replace(old, top=forward.names.fresh(f"{new}_top")))
        renamed.update({rep: new, old.top: merged[rep][1].top})
    renamed.update({n: None for m in kept for n in (m, forward.stacks[m].top)})
    for s in list(walk(forward.body)) + list(walk(adjoint.body)):
        if isinstance(s, (Push, Pop, Reserve)) and s.stack in renamed:
            s.stack = merged[kept.get(s.stack, s.stack)][0]
    for stacks in (forward.stacks, adjoint.stacks, adjoint.facts.of(Reverse).forward_stacks):
        for name in [n for n in stacks if n in renamed]:
            del stacks[name]
        stacks.update(merged.values())
    saved = _renamed(adjoint.facts.of(Reverse).saved, renamed)
    forward.facts.of(Reverse).saved = adjoint.facts.of(Reverse).saved = saved
    forward.outputs[1] = Tuple(tuple(Name(n) for n in saved))
    forward.workspace = _renamed(forward.workspace, renamed)
    forward.params = _renamed(forward.params, renamed)
    adjoint.params = _renamed(adjoint.params, renamed)


def _renamed(names, renamed):
    """`names` with each renamed, and those renamed to None left out."""
    return [renamed.get(n, n) for n in names if renamed.get(n, n) is not None]
