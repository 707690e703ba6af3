"""The gradient of a function as one IR function: its forward, then its adjoint, in one body.

`vjp_function(forward, adjoint)` (both before their stacks are lowered) is
`f_vjp(*args, *d_outs) -> gradients`: the forward's statements run, the
values it would hand to the adjoint are simply its locals, and the adjoint's
statements follow. Differentiating it again (`pipeline.transform_function`)
gives second derivatives; its stacks are its own, pushed and popped in one
run, and Push / Pop have derivative rules like any statement.
"""
from ..ir import Function
from ..ir.facts import Bounds, Facts, Lowered, Reverse
from ..ir.visit import clone


def vjp_function(forward, adjoint):
    saved = forward.facts.of(Reverse).saved
    d_outs = adjoint.facts.of(Reverse).d_outs
    user_params = [p for p in adjoint.params if p not in saved and p not in d_outs]
    stacks = {**forward.stacks, **adjoint.stacks}
    name = adjoint.name[:-len("_adjoint")] + "_vjp" if adjoint.name.endswith("_adjoint") else adjoint.name + "_vjp"
    types = {**forward.types, **adjoint.types}
    return Function(name, user_params + d_outs, clone(forward.body) + clone(adjoint.body), list(adjoint.outputs),
                    True, types, stacks, Facts(Lowered(), Bounds()), adjoint.names, [], adjoint.sources)
