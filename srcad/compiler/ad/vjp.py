"""The gradient of a function as one IR function: its forward, then its adjoint, in one body.

`vjp_function(forward, adjoint)` (both before their stacks are lowered) is
`f_vjp(*args, *d_outs) -> gradients`: the forward's statements run, the
values it would hand to the adjoint are simply its locals, and the adjoint's
statements follow. Differentiating it again (`pipeline.transform_function`)
gives second derivatives; its stacks are its own, pushed and popped in one
run, and Push / Pop have derivative rules like any statement.

A zero-cotangent guard (`if d_s != 0.0:`) is no control flow to differentiate:
where `d_s` is exactly 0 the statements it skips add nothing, but their
derivative in whatever `d_s` depends on is not 0. So the gradient function
runs them unguarded, their products kept as `cotangent_times` (0 where the
cotangent is 0, as under the guard, with a derivative in both factors).

With `versioned`, the adjoint goes in as it is compiled, its stretches of
zero-cotangent guards versioned (`opt/zero_guards.py`): differentiated again,
the run with plain products is one branch, where each `cotangent_times` would
be a branch of its own (a Hessian of an RK4 loop: 18x the primal instead of
21x). Beyond second order the versions would double the code compiled at every
order, for little: the gradient of a gradient function, and a gradient function
that more than one tape differentiates (a third derivative on the way), are
made of the adjoint as it is (`derived.gradient_of`).
"""
from dataclasses import replace

from ..ir import Function
from ..ir.facts import Bounds, Facts, Lowered, Reverse
from ..ir.visit import clone
from ..opt.zero_guards import unguarded, version_guarded_stretches


def vjp_function(forward, adjoint, versioned=True):
    from ..pipeline import copy_function          # (the pipeline imports the passes, this module among them)
    adjoint = copy_function(adjoint)
    if versioned:
        version_guarded_stretches(adjoint)
    adjoint.body = unguarded(adjoint.body, adjoint.facts.of(Reverse).guards, plain=False)
    saved = forward.facts.of(Reverse).saved
    d_outs = adjoint.facts.of(Reverse).d_outs
    user_params = [p for p in adjoint.params if p not in saved and p not in d_outs]
    # its arrays saved as objects: a re-run of its pops and pushes by a later transform would write
    # copies where views of older ones may still be read
    stacks = {k: replace(s, by_value=False, objects=None) for k, s in {**forward.stacks, **adjoint.stacks}.items()}
    name = adjoint.name[:-len("_adjoint")] + "_vjp" if adjoint.name.endswith("_adjoint") else adjoint.name + "_vjp"
    types = {**forward.types, **adjoint.types}
    return Function(name, user_params + d_outs, clone(forward.body) + clone(adjoint.body), list(adjoint.outputs),
                    True, types, stacks, Facts(Lowered(), Bounds()), adjoint.names, [], adjoint.sources)
