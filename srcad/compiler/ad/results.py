"""Values whose partial is cheaper from their result get a name of their own before differentiating.

In `h = outgate * math.tanh(c)` the adjoint needs tanh(c) twice, once for the
product and once for tanh's own partial, and would call tanh for each. With
the call named in the primal, `tanh_result = math.tanh(c)` then
`h = outgate * tanh_result`, the adjoint reads `tanh_result` for both
(`rules.FROM_RESULT`, `LocalAdjoints.result_read`), and the save analysis
keeps that value like any other. A sigmoid `1.0 / (1.0 + math.exp(-z))` is
named whole (its partial is y (1 - y) of its result y): the value saved is
the sigmoid, not `z` nor the exponential, and no exponential is computed
again (`rules.result_partial`). Calls on arrays are named too
(`np.tanh(g)` of a vector: a library call per element, where the saved result
costs a load), an array whose shape may change from one iteration to the
next too (its adjoint, made again with each shape, is made after the earlier
binding is back: `reverse.py`).

Only on a target that keeps results (`saving.Policy.keeps_results`: a saved
value costs less than a call there), for calls with an active argument
inside the value of a statement derivatives flow through.
"""
from numba.core import types as nt

from ..analysis.types import type_of
from ..ir import Accumulate, Assign, BinOp, Call, Name
from ..ir.facts import Activity
from ..ir.forms import leaves
from ..ir.visit import all_blocks, map_children, names_in, rewrite_top_down
from .local import is_active_atom, result_type, value_type
from .rules import has_result_partial, result_partial
from .saving import loop_facts


def name_results(fn, policy):
    """Give, in place, each such call in `fn`'s statements a temporary of its own, bound just before."""
    if not policy.keeps_results:
        return fn
    activity = fn.facts.of(Activity)
    facts = loop_facts(fn)
    overwritten = set(facts.overwritten)
    for block in all_blocks(fn.body):
        out = []
        for s in block:
            before = []
            if _is_active_value(s, activity.active):
                s.value = _hoisted(fn, s, activity, before, overwritten, facts.innermost.get(s.uid) is not None)
            out += before + [s]
        block[:] = out
    return fn


def _is_active_value(s, active):
    if isinstance(s, Assign):
        return s.target in active
    return isinstance(s, Accumulate) and is_active_atom(s.target, active)


def _hoisted(fn, s, activity, before, overwritten, looped):
    """`s.value` with its values of `result_partial` (calls of `FROM_RESULT`, sigmoids) named, innermost
    first (bound by statements put in `before`), where keeping the result is cheaper than calling again
    (`local.kept_is_cheaper`): outside loops always; in a loop (`looped`), where a temporary is bound
    again each iteration, only a value reading what the reverse sweep may bring back (`overwritten`,
    which the temporaries join). The whole value of an assignment is already named by it. Such a value
    is named whole, after what its argument holds: the exp inside a sigmoid is not named."""
    def name(e):
        if not _worth_naming(fn, e, activity.active) or looped and not names_in(e) & overwritten:
            return e
        t = fn.names.fresh(f"{e.fn.split('.')[-1] if isinstance(e, Call) else 'sigmoid'}_result")
        if looped:
            overwritten.add(t)
        fn.types[t] = result_type(fn, e)
        for names in (activity.varied, activity.useful, activity.active):
            names.add(t)
        before.append(Assign(t, e, s.origin))
        return Name(t)

    def visit(e, whole=False):
        found = result_partial(e) if isinstance(e, (Call, BinOp)) else None
        if found is None:
            return map_children(e, visit)
        argument, inner = found[0], visit(found[0])
        e = rewrite_top_down(e, lambda x: inner if x is argument else None)
        return e if whole else name(e)
    return visit(s.value, whole=isinstance(s, Assign))


def _worth_naming(fn, e, active):
    """A value of `result_partial` on a value derivatives flow through, of a float or of a float array."""
    if not has_result_partial(e):
        return False
    atoms = leaves(result_partial(e)[0])
    ty = value_type(fn, e)
    if isinstance(ty, nt.Array):
        float_valued = isinstance(ty.dtype, nt.Float)
    else:
        float_valued = isinstance(ty, nt.Float) and not any(isinstance(type_of(fn, a), nt.Array) for a in atoms)
    return float_valued and any(is_active_atom(a, active) for a in atoms)
