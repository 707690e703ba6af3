"""How the compiled code saves scalars in loops: when they are made (`opt/saved_when_made.py`), not at
all where a little arithmetic makes them again from other saved ones (`opt/recomputed_saves.py`), and on
one buffer for those pushed together (`opt/merged_stacks.py`). The kept IR keeps a stack per value;
gradients agree with finite differences at first and second order, in for and while loops and with
buffers reused from call to call; stacks whose pops do not mirror their pushes stay apart."""
import math
import re

import numba
import numpy as np
from numba.core import types as nt

import srcad as ad
from srcad.compiler import transform
from srcad.compiler.ir import Const, For, Function, Name, Pop, Push, Reserve, Stack, Tuple
from srcad.compiler.ir.facts import Facts, Reverse
from srcad.compiler.ir.visit import walk
from srcad.compiler.opt.merged_stacks import merge_stacks
from srcad.testing import check_function

from test_ir import second_order_check

rng = np.random.default_rng(3)


def gated(w, h0, n):
    """Per step and element, gates whose sigmoid and tanh values the adjoint reads (an LSTM cell's shape)."""
    h = h0.copy()
    c = np.zeros_like(h0)
    total = 0.0
    for t in range(n):
        for i in range(h.shape[0]):
            forget = 1.0 / (1.0 + math.exp(-(w[0, i] * h[i] + w[1, i])))
            change = math.tanh(w[2, i] * h[i] + w[3, i])
            c[i] = c[i] * forget + (1.0 - forget) * change
            h[i] = math.tanh(c[i]) * forget
        total += np.sum(h * h)
    return total


def until_small(x, scale):
    """A while loop (pushes that check for room as they go) saving three scalars per iteration."""
    y = x
    total = 0.0
    k = 0
    while y > 0.1 and k < 40:
        s = math.sin(y * scale)
        e = math.exp(-y)
        y = y * 0.8 + 0.01 * s * e
        total += s * e
        k += 1
    return total


def _pushed_onto(source):
    return {m.group(1) for m in re.finditer(r"^\s*(\w+)\[\w+_top\] = ", source, re.M)}


def test_the_values_of_an_iteration_go_onto_one_stack():
    w, h0 = rng.uniform(-1.0, 1.0, (4, 3)), rng.uniform(-1.0, 1.0, 3)
    types_ = [numba.typeof(a) for a in (w, h0, 4)]
    program = transform(gated, types_, (True, True, False))
    forward = program.source("forward")
    inner = forward[forward.index("for i in range"):forward.index("total +=")]
    stacks = _pushed_onto(inner)      # the scalars made in the loop, and the array elements it overwrites
    assert len(stacks) == 2 and all(re.fullmatch(r"saved_float64\d*", s) for s in stacks), inner
    # the sigmoid saved when made, its exp not kept: its partial is read from it
    assert re.search(r"forget = 1.0 / \(1.0 \+ math.exp\(.*\)\n\s*saved_float64\d*\[\w+\] = forget\n", inner), inner
    adjoint = program.source("adjoint")
    popped = adjoint.index("forget = saved_float64")
    assert popped < adjoint.index("forget * (1.0 - forget)", popped)
    assert not [line for line in adjoint.splitlines() if "math.exp(" in line and "# from" not in line], adjoint
    kept = {p.stack for p in walk(program.ir.forward.body) if isinstance(p, Push)}
    assert "saved_float64" not in kept and len(kept) >= 5      # the IR differentiated again is unmerged


def test_gradients_of_merged_stacks_at_first_and_second_order():
    w, h0 = rng.uniform(-1.0, 1.0, (4, 3)), rng.uniform(-1.0, 1.0, 3)
    check_function(ad.function(gated), (w, h0, 4), (0, 1))
    second_order_check(gated, (w, h0, 3), (True, True, False))


def test_a_while_loop_and_buffers_reused_at_other_lengths():
    forward = transform(until_small, [numba.float64, numba.float64], (True, True)).source("forward")
    assert re.search(r"s = math.sin\(y \* scale\)\n\s*saved_float64\[\w+\] = s\n", forward), forward
    # y's adjoint reads the value it had before `y = ...`: that one is saved, before the statement
    assert re.search(r"\w+\[\w+\] = y\n\s*\w+_top \+= 1\n\s*y = y \* 0.8", forward), forward
    f = ad.function(until_small)
    for x in (0.5, 3.0, 0.5, 9.0):        # the pooled buffer grows, then serves shorter runs
        check_function(f, (x, 1.3), (0, 1))
    second_order_check(until_small, (2.0, 1.3), (True, True))


def _pair(popped_in_order):
    """A forward pushing x then y in a loop, and an adjoint popping them in `popped_in_order`."""
    stacks = {s: Stack(nt.float64, f"{s}_top") for s in ("x_stack", "y_stack")}
    saved = ["x_stack", "x_stack_top", "y_stack", "y_stack_top"]
    forward_loop = For("i", Const(0), Name("n"), Const(1), [Push("x_stack", Name("x")), Push("y_stack", Name("y"))])
    forward = Function("f_forward", ["n", "x", "y", "x_stack", "y_stack"],
                       [Reserve("x_stack", Name("n")), Reserve("y_stack", Name("n")), forward_loop],
                       [Name("x"), Tuple(tuple(Name(s) for s in saved))], True, {}, dict(stacks),
                       Facts(Reverse(list(saved))), workspace=["x_stack", "y_stack"])
    pops = [Pop(s, Name(s[0])) for s in popped_in_order]
    adjoint = Function("f_adjoint", ["n"] + saved, [For("i", Const(0), Name("n"), Const(1), pops)], [Name("x")],
                       False, {}, dict(stacks), Facts(Reverse(list(saved), forward_stacks=dict(stacks))))
    return forward, adjoint


def test_only_pops_that_mirror_the_pushes_merge():
    forward, adjoint = _pair(["x_stack", "y_stack"])        # x then y again: not last in, first out
    assert merge_stacks(forward, adjoint) == {}
    forward, adjoint = _pair(["y_stack", "x_stack"])
    assert merge_stacks(forward, adjoint) == {"y_stack": "x_stack"}
    assert forward.workspace == ["saved_float64"] and forward.params == ["n", "x", "y", "saved_float64"]
    assert adjoint.params == ["n", "saved_float64", "saved_float64_top"]
    reserve = forward.body[0]
    assert len(forward.body) == 2 and isinstance(reserve, Reserve) and reserve.stack == "saved_float64"
    assert {s.stack for s in walk(adjoint.body) if isinstance(s, Pop)} == {"saved_float64"}
