"""Which names carry derivatives: forward and backward activity.

A name is *varied* when it is float-valued and computed, through
differentiable operations, from an argument being differentiated; it is
*useful* when an output depends on it through differentiable operations. Only
names that are both (*active*) get adjoints: the reverse sweep spends nothing
on values that feed no output, nor on values no argument changes. Integers
and booleans are never active.

Stores on `fn.facts["activity"]`: `active` (names), `varied`, `useful`, and
`params` (the active parameters).
"""
from numba.core import types as nt

from ..ad.rules import ARRAY_RULES, ELEMENTWISE, JOINS, NONDIFF, OPERATORS, is_elementwise, partials_of
from ..ir import Accumulate, Assign, BinOp, Call, Const, Name, Pop, Push, Store, Tuple, UnaryOp
from ..ir.facts import Activity
from ..ir.forms import data_names, is_atom, is_tree
from ..ir.visit import names_in, walk
from .types import is_float, refuse_complex


def analyse_activity(fn, active_params):
    """Compute activity for `fn` (typed) with the parameters `active_params` differentiated."""
    active_params = [p for p in active_params if p in fn.params]
    varied = _varied(fn, set(active_params))
    useful = _useful(fn, varied)
    fn.facts.put(Activity(varied, useful, varied & useful, active_params))
    return fn


def differentiable_inputs(value):
    """The atoms of an IR value through which derivatives flow (empty: none)."""
    if is_atom(value):
        return [value] if not isinstance(value, Const) else []
    if is_tree(value, is_elementwise):
        return _tree_inputs(value)
    if isinstance(value, BinOp):
        return [value.left, value.right] if value.op in OPERATORS or value.op == "@" else []
    if isinstance(value, UnaryOp):
        return [value.operand] if ("u" + value.op) in OPERATORS else []
    if isinstance(value, Call):
        if value.fn in NONDIFF or value.fn == "srcad.stop_gradient":
            return []
        if value.fn == "srcad.rule_vjp":      # (out, arguments, key): derivatives flow from the arguments,
            return [x for a in value.args[1].items                            # a tuple's from its items
                    for x in (a.items if isinstance(a, Tuple) else (a,)) if not isinstance(x, Const)]
        if value.fn in ELEMENTWISE:
            partials = ELEMENTWISE[value.fn]
            return [a for a, p in zip(value.args, partials) if p is not None]
        if value.fn in ARRAY_RULES:
            return [a for a, t in zip(value.args, ARRAY_RULES[value.fn].transposes) if t is not None]
        if value.fn in JOINS:
            return list(value.args[0].items) if value.args and isinstance(value.args[0], Tuple) else list(value.args)
        return list(value.args)       # no rule: refused by the reverse transform if it needs one
    return []


def _tree_inputs(tree):
    """The leaves of a tree reached through differentiable operands."""
    if is_atom(tree):
        return [tree]
    children, partials = partials_of(tree)
    return [x for child, p in zip(children, partials) if p is not None for x in _tree_inputs(child)]


def flows(s):
    """(the name `s` writes, the atoms whose derivatives flow into it), or None."""
    if isinstance(s, Assign):
        return s.target, differentiable_inputs(s.value)
    if isinstance(s, Store):
        return s.array, differentiable_inputs(s.value)
    if isinstance(s, Accumulate):
        return data_names(s.target)[0], differentiable_inputs(s.value)
    if isinstance(s, Push):
        return s.stack, differentiable_inputs(s.value)
    if isinstance(s, Pop):
        return data_names(s.target)[0], [Name(s.stack)]
    return None


def _varied(fn, start):
    varied = set(start)
    changed = True
    while changed:
        changed = False
        for s in walk(fn.body):
            flow = flows(s)
            if flow is None or flow[0] in varied:
                continue
            refuse_complex(fn, s, flow[0], varied)
            if not _carries_derivatives(fn, flow[0]):
                continue
            if any(n in varied for a in flow[1] for n in data_names(a)):
                varied.add(flow[0])
                changed = True
    return varied


def _carries_derivatives(fn, name):
    """Can `name` hold float values (a stack: by the type of its items, whatever the target stores it as; a
    tuple, as what a function like np.linalg.eigh returns: by the types of its items)?"""
    ty = fn.stacks[name].item if name in fn.stacks else fn.types.get(name)
    if isinstance(ty, nt.BaseTuple):
        return any(is_float(t) for t in ty.types)
    return is_float(ty)


def _useful(fn, varied):
    useful = {n for out in fn.outputs for n in names_in(out) if n in varied}
    changed = True
    while changed:
        changed = False
        for s in walk(fn.body):
            flow = flows(s)
            if flow is None or flow[0] not in useful:
                continue
            for a in flow[1]:
                for n in data_names(a):
                    if n in varied and n not in useful:
                        useful.add(n)
                        changed = True
    return useful


def is_active(fn, atom):
    """Does an atom of `fn` read an active name's value?"""
    return any(n in fn.facts.of(Activity).active for n in data_names(atom))
