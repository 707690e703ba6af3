"""Which overwritten values the reverse sweep needs: Tapenade's to-be-recorded analysis.

A forward dataflow over the IR. `Req` before a statement is the set of names
whose current value the reverse sweep of some *earlier* statement reads (the
reverse sweep runs later statements first, so when it reaches that earlier
statement the value must be back). A statement that overwrites a name in Req
must save the old value; one that overwrites a name not in Req need not, since
nothing reads it again before it is overwritten:

    Req_out(s) = (Req_in(s) | reads(s)) - kills(s) | after(s)

with `reads(s)` the names the adjoint of `s` reads (values before `s`),
`after(s)` the names the reverse of `s` reads in the state after it (branch
conditions, loop bounds, trip counters, undone increments). Loop bodies are
iterated to a fixpoint over their back edge (iteration i is "earlier" than
i + 1); branches join by union. Opaque statements (loops the reverse sweep
recomputes) are one statement with their own reads and kills.
"""
import ast

from numba.core import types as nt

from .normalize import Assign, For, If, While


def required_before(stmts, reads, kills, after, opaque):
    """{id(stmt): frozenset of names required just before stmt} for every statement
    reached (opaque loops' bodies are not entered)."""
    req_in = {}

    def block(body, req):
        for s in body:
            req = stmt(s, req)
        return req

    def stmt(s, req):
        req_in[id(s)] = req
        if isinstance(s, If):
            return block(s.body, req) | block(s.orelse, req) | after(s)
        if isinstance(s, (For, While)) and not opaque(s):
            head = req
            while True:
                new = head | block(s.body, head - kills(s))
                if new == head:
                    return head | after(s)
                head = new
        return ((req | reads(s)) - kills(s)) | after(s)

    block(stmts, frozenset())
    return req_in


def undoable(s, types, stable):
    """`v = v + c`, `v = c + v` or `v = v - c` on integers, with `c` a constant or a name
    in `stable` (never changes after it is set): the reverse sweep restores `v` by the
    inverse operation, exactly, instead of saving it. Returns (inverse source, c names) or None."""
    if not isinstance(s, Assign) or s.nodiff or not isinstance(types.get(s.target), nt.Integer):
        return None
    v = s.value
    if not isinstance(v, ast.BinOp) or not isinstance(v.op, (ast.Add, ast.Sub)):
        return None

    def is_self(e):
        return isinstance(e, ast.Name) and e.id == s.target

    def is_step(e):
        if isinstance(e, ast.Constant):
            return type(e.value) is int
        return isinstance(e, ast.Name) and e.id != s.target and e.id in stable \
            and isinstance(types.get(e.id), nt.Integer)

    if is_self(v.left) and is_step(v.right):
        step = v.right
    elif isinstance(v.op, ast.Add) and is_self(v.right) and is_step(v.left):
        step = v.left
    else:
        return None
    op = "-" if isinstance(v.op, ast.Add) else "+"
    names = {step.id} if isinstance(step, ast.Name) else set()
    return f"{s.target} = {s.target} {op} {ast.unparse(step)}", names
