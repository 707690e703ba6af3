"""Saving decided before code is generated (`ad/plan.py`): the plan is an analysis of the primal IR,
keyed by statement identities that copies keep; choosing to checkpoint a loop writes no code; the
forward and the adjoint are generated once from the plan."""
import numba
import numpy as np

import corpus
from srcad.compiler import pipeline
from srcad.compiler.ad.plan import SavePlan
from srcad.compiler.ad.reverse import reverse
from srcad.compiler.ir import Assign, Const, For, Name
from srcad.compiler.ir.printer import function_text
from srcad.compiler.ir.visit import clone, distinct_ids, walk

RK4 = corpus.case_by_name("rk4_lotka_volterra")
HEAT = corpus.case_by_name("heat_explicit")


def primal_of(case):
    """The typed primal of a corpus case, with the facts reverse mode reads."""
    args = case.make_args()
    flags = [i in case.active for i in range(len(args))]
    return pipeline.run(case.fn, tuple(numba.typeof(a) for a in args), flags, until="optional",
                        boundscheck=False).primal


def test_a_copy_keeps_its_statements_identity_and_repeated_copies_are_told_apart():
    inner = Assign("s", Const(1.0))
    loop = For("i", Const(0), Name("n"), Const(1), [inner])
    (copy,) = clone([loop])
    assert copy is not loop and copy.uid == loop.uid and copy.body[0].uid == inner.uid
    body = [loop, copy]
    distinct_ids(body)
    ids = [s.uid for s in walk(body)]
    assert len(set(ids)) == 4 and ids[:2] == [loop.uid, inner.uid]     # the first of each keeps its own


def planned(plan, stmts, ctx):
    """(statement, the context whose saves it is planned with) for `stmts` and the statements in them."""
    for s in stmts:
        yield s, ctx
        inner = plan.inner.get(s.uid, ctx) if plan.is_checkpoint_in(s, ctx) else ctx
        for block in (getattr(s, "body", []), getattr(s, "orelse", [])):
            yield from planned(plan, block, inner)


def test_the_plan_holds_for_copies_of_the_statements_it_was_made_for():
    fn = primal_of(HEAT)
    plan = SavePlan(fn)

    def decisions(stmts):
        return [(plan.saves(s, ctx), plan.once(s, ctx), plan.is_checkpoint_in(s, ctx), plan.needs_old(s, ctx))
                for s, ctx in planned(plan, stmts, plan.top)]
    decided = decisions(fn.body)
    assert sum(d[0] for d in decided) == 4 and sum(d[2] for d in decided) == 1     # the copy loop is checkpointed
    assert decisions(clone(fn.body)) == decided


def test_choosing_to_checkpoint_a_loop_writes_no_code():
    fn = primal_of(RK4)
    before = set(fn.names.made)
    plan = SavePlan(fn)
    (loop,) = [s for s in walk(fn.body) if isinstance(s, For)]
    assert loop.uid in plan.checkpoints
    assert plan.checkpoints[loop.uid].carried == ["x", "y"]       # an RK4 step starts from the state alone
    made = set(fn.names.made) - before
    assert not any(n.endswith(("_saved", "_stack", "_elems", "_regions")) or "_stack_" in n for n in made), made


def test_the_functions_are_generated_once_from_the_plan():
    """Transforming again gives the same code: the decisions depend on the IR only."""
    texts = []
    for _ in range(2):
        forward, adjoint = reverse(primal_of(HEAT))
        texts.append((function_text(forward), function_text(adjoint)))
    assert texts[0] == texts[1]
    forward = texts[0][0]
    # the branch temporaries an iteration starts from, saved once per iteration (not also before the loop)
    assert forward.count("push(t3_stack, t3)") == 1 and forward.count("push(t7_stack, t7)") == 1
