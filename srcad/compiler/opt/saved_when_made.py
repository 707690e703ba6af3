"""A scalar saved in a loop goes onto its stack when it is made, not when it is next overwritten.

The reverse sweep brings an overwritten value back (`ad/saving.py`): the
forward pushes a scalar's old value just before each assignment, and the
adjoint pops it back at that statement's reverse:

    for i in ...:                           for i in reversed ...:
        e_stack[e_top] = e; e_top += 1          ... reads e ...
        e = math.exp(-t)                        e_top -= 1; e = e_stack[e_top]
        ... reads e ...                         ... (nothing reads e)

The old value has to live from one iteration to the next (across every call
of exp and tanh in between, so in memory), only to be stored. Where the loop
assigns `e` once, and the adjoint reads `e` only in the same iteration's
reverse before that pop, the forward may push the value it just made and the
adjoint pop it at the top of the iteration's reverse instead: each
iteration's reverse reads the value that iteration made, as before, and the
stack holds as many values as before, one iteration later. The values
before the loop and after its reverse are never read.

The pop moves to the top of the reversed body, the pushes stay in their
order, so stacks treated so still merge (`merged_stacks.py`). This runs on
the code compiled only; `Program.ir` keeps the plain saves.
"""
from numba.core import types as nt

from ..ir import Assign, For, Name, Pop, Push, While
from ..ir.visit import defines, names_in, reads, stack_statements, walk


def save_when_made(forward, adjoint):
    """Rewrite, in place, the forward's pushes and the adjoint's pops that qualify; returns the stacks moved."""
    pushes, pops = stack_statements(forward, Push), stack_statements(adjoint, Pop)
    bodies = (_serial_loop_bodies(forward), _serial_loop_bodies(adjoint))
    moved = [stack for stack in pushes if _qualifies(forward, adjoint, stack, pushes, pops, bodies)]
    for stack in moved:                       # in the order pushed: each pop goes in front of those before
        (block, push), (body, pop) = pushes[stack][0], pops[stack][0]
        k = _index(block, push)
        block[k], block[k + 1] = block[k + 1], block[k]
        body.insert(0, body.pop(_index(body, pop)))
    return moved


def _serial_loop_bodies(fn):
    """The bodies of `fn`'s loops whose iterations run one after another (a parallel loop's saves are
    the iteration's own)."""
    return [s.body for s in walk(fn.body) if isinstance(s, While) or isinstance(s, For) and not s.parallel]


def _index(block, stmt):
    return next(k for k, s in enumerate(block) if s is stmt)


def _qualifies(forward, adjoint, stack, pushes, pops, bodies):
    """Is the stack pushed once, in a loop body of the forward (`bodies`: the serial loop bodies of the
    forward, of the adjoint), with a scalar (an array pushed when made might be written after) that the
    next statement assigns, the body's only assignment of it; and popped once into it at the top level of a loop body of
    the adjoint (the reverse sweep mirrors loops: that is the push's loop reversed), its only assignment
    there, and read in the adjoint only before that pop in that body?"""
    if stack not in forward.workspace or isinstance(forward.stacks[stack].item, nt.Array) \
            or len(pushes[stack]) != 1 or len(pops.get(stack, ())) != 1:
        return False
    (block, push), (body, pop) = pushes[stack][0], pops[stack][0]
    k = _index(block, push)
    forward_bodies, adjoint_bodies = bodies
    if not isinstance(push.value, Name) or not any(block is b for b in forward_bodies):
        return False
    name = push.value.id
    if k + 1 == len(block) or not isinstance(block[k + 1], Assign) or block[k + 1].target != name \
            or sum(name in defines(s) for s in walk(block)) != 1:
        return False
    if not any(body is b for b in adjoint_bodies) or not isinstance(pop.target, Name) or pop.target.id != name \
            or sum(name in defines(s) for s in walk(adjoint.body)) != 1:
        return False
    before = {id(s) for s in walk(body[:_index(body, pop)])}
    return not any(name in reads(s) for s in walk(adjoint.body) if id(s) not in before) \
        and not any(name in names_in(o) for o in adjoint.outputs)
