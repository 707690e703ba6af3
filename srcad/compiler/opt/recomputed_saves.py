"""A saved scalar that a little arithmetic makes from other saved scalars is made again, not saved.

After `saved_when_made.py` a loop of the forward pushes each scalar it makes
and the adjoint pops them all at the top of the iteration's reverse:

    e = math.exp(-t)                        e = stack[...]       (popped)
    push e                                  g = stack[...]       (popped)
    g = 1.0 / (1.0 + e)                     ...
    push g

`g` costs a store in the forward and a load in the adjoint, where the
adjoint could compute `1.0 / (1.0 + e)` again from the `e` it pops: the same
operations on the same values give the same bits. A value qualifies when
its expression is `+ - * /` and negation of constants, of scalars saved this
way earlier in the same body, and of names neither function assigns (the
arguments). It is then computed at the top of the reversed body, after the
pops, in the order the forward made it.
"""
from ..ir import Assign, BinOp, Const, Name, Pop, Push, UnaryOp
from ..ir.visit import defines, names_in, stack_statements, subexpressions, walk
from .cleanup import drop_unread_saved

CHEAP = frozenset({"+", "-", "*", "/"})


def recompute_cheap_saves(forward, adjoint, moved):
    """Rewrite, in place, the saves of `moved` (stacks `save_when_made` moved, in the order pushed) that
    qualify; returns them."""
    pushes, pops = _only(stack_statements(forward, Push)), _only(stack_statements(adjoint, Pop))
    fixed = _assigned_nowhere(forward, adjoint)
    made_again = []
    ready = {}                   # id of a reversed body -> the names its top pops or makes again, in push order
    for stack in moved:
        (block, push), (body, pop) = pushes[stack], pops[stack]
        value = _definition(block, push)
        known = ready.setdefault(id(body), [])
        if value is not None and _cheap(value) and names_in(value) <= fixed | set(known):
            made_again.append((stack, block, push, body, pop, Assign(push.value.id, value, pop.origin)))
        known.append(push.value.id)
    inserted = {}
    for stack, block, push, body, pop, recompute in made_again:
        block.remove(push)
        body.remove(pop)
        at = _pops_at_top(body) + inserted.get(id(body), 0)
        inserted[id(body)] = inserted.get(id(body), 0) + 1
        body.insert(at, recompute)
    if made_again:
        drop_unread_saved(forward, adjoint)
    return [m[0] for m in made_again]


def _only(sites):
    """{stack: its one (block, statement)}: `moved` stacks have one push and one pop."""
    return {stack: found[0] for stack, found in sites.items()}


def _definition(block, push):
    """The value of the assignment just before `push` (which saves what it assigned)."""
    k = next(k for k, s in enumerate(block) if s is push)
    s = block[k - 1] if k else None
    return s.value if isinstance(s, Assign) and s.target == push.value.id else None


def _cheap(expr):
    return all(isinstance(e, (Const, Name)) or isinstance(e, BinOp) and e.op in CHEAP
               or isinstance(e, UnaryOp) and e.op == "-" for e in subexpressions(expr))


def _assigned_nowhere(forward, adjoint):
    """Parameters of both functions that neither assigns: the same value wherever they are read."""
    bound = {n for fn in (forward, adjoint) for s in walk(fn.body) for n in defines(s)}
    return (set(forward.params) & set(adjoint.params)) - bound - set(forward.workspace)


def _pops_at_top(body):
    k = 0
    while k < len(body) and isinstance(body[k], Pop):
        k += 1
    return k
