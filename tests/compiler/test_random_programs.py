"""Property test: random programs over the ``@ad.function`` subset.

Hypothesis generates programs as Python source: straight-line scalar code,
``for`` loops (several ``range`` forms) with scalar accumulators, loops that
overwrite array elements written earlier, branches on data (``if/elif/else``,
``and/or/not``, conditional expressions) also inside loops, ``while`` loops
with data-dependent but bounded trip counts, ``break``/``continue``, whole-array
NumPy expressions and slices, and undecorated helpers (some calling other
helpers); and the families that once gave silently wrong gradients: slices
whose shape changes from one loop iteration to the next, in-place operators
through aliases and helper parameters, copies within one array whose source
and destination overlap, branches on module-level constants, and arrays made
afresh in each iteration of a loop then updated region by region (the loop
is run again in the reverse sweep), nested triangular loops whose inner and outer
writes save onto one stack, rows and columns written through views, reads and
writes through arrays of repeated indices and masks, buffers rotated by
rebinding, arguments swapped (the caller's work arrays ``wa``, ``wb`` written then
swapped, the arrays ``x``, ``y`` and the scalars ``a``, ``b`` swapped) and work arrays
filled by a helper that writes into them and returns them (``wa = fill(x, wa, k)``).
Every value stays in a safe domain (no log/sqrt of negatives: ``exp(sin(.))``,
``tanh``, ``log(e*e + 1)``, ``sqrt(e*e + 1)``, ``e / (e*e + 1)``).

Cost: one compile is the expensive part, so each generated *program* is a
module whose entry function holds ``FRAGMENTS`` independent fragments (each a
small program of its own, written inline with its own variable prefix or as a
helper call) and returns one result per fragment as a tuple.  One compile
therefore checks ``FRAGMENTS`` programs; about ``MAX_EXAMPLES * FRAGMENTS`` fragment-programs
per run (96 by default, 200 with ``SRCAD_FULL_SWEEPS=1``), drawn in ``PARTS`` tests with seeds of their own so
that test processes share them out.  The source is written to a file in a temporary
directory and imported (the compiler reads source with ``inspect``).

Check: the results of the compiled forward (under the tape) equal the plain
Python function's (the primal outside a tape is covered by the corpus), the work arrays
``wa``, ``wb`` hold what Python leaves in them after the call and after every gradient, and for
each fragment k on its own, the tape gradient w.r.t. (x, y, a, b) of w_k r_k
equals central finite differences of the plain function (rtol 1e-5,
atol 1e-7 * max(1, |w_k r_k|)).
Finite differences are first checked against a 4th-order stencil so that an
input near a kink (a branch threshold, a tie in max/min, a trip-count change)
is rejected before compiling instead of failing the test.
"""

import itertools
import os
import tempfile

import numpy as np
from hypothesis.errors import UnsatisfiedAssumption
from hypothesis import HealthCheck, Phase, assume, given, seed, settings, strategies as st


import srcad as ad
from srcad.testing import cotangents, finite_differences, fresh, scalarize, value_of
from srcad.compiler.backends.cache import import_module, write_module

N = 6                      # array length of the inputs
FRAGMENTS = int(os.environ.get("SRCAD_RANDPROG_FRAGMENTS", "8"))
MAX_EXAMPLES = int(os.environ.get("SRCAD_RANDPROG_EXAMPLES", "25" if os.environ.get("SRCAD_FULL_SWEEPS") else "10"))
RTOL, ATOL = 1e-5, 1e-7

# ---------------------------------------------------------------------------
# program generator
# ---------------------------------------------------------------------------

_CONST = st.sampled_from(["0.5", "0.75", "1.25", "1.5", "0.3", "2.0", "0.9"])
_THRESH = st.sampled_from(["0.0", "0.2", "-0.3", "0.45", "-0.1"])


class _Gen:
    """Builds source text from hypothesis draws."""

    def __init__(self, draw, prefix, arrays=True):
        self.draw = draw
        self.p = prefix
        self.arrays = arrays        # x, y, a, b visible (False inside helpers)
        self.counter = itertools.count()

    def name(self, base="t"):
        return "%s%s%d" % (self.p, base, next(self.counter))

    def leaf(self, scalars):
        d = self.draw
        kind = d(st.integers(0, 3))
        if not self.arrays and kind in (1, 3):
            kind = 0
        if kind == 0 and scalars:
            return d(st.sampled_from(scalars))
        if kind == 1:
            return d(st.sampled_from(["x", "y"])) + "[%d]" % d(st.integers(-N, N - 1))
        if kind == 2:
            return d(_CONST)
        return d(st.sampled_from(["a", "b"]))

    def expr(self, scalars, depth=2):
        d = self.draw
        if depth <= 0:
            return self.leaf(scalars)
        kind = d(st.integers(0, 14))
        e = lambda: self.expr(scalars, depth - 1)   # noqa: E731
        if kind == 0:
            return self.leaf(scalars)
        if kind == 1:
            return "(%s + %s)" % (e(), e())
        if kind == 2:
            return "(%s - %s)" % (e(), e())
        if kind == 3:
            return "(%s * %s)" % (e(), e())
        if kind == 4:
            u = e()
            return "(%s / (%s * %s + 1.0))" % (e(), u, u)
        if kind == 5:
            f = d(st.sampled_from(["math.sin", "math.cos", "math.tanh", "math.atan"]))
            return "%s(%s)" % (f, e())
        if kind == 6:
            return "math.exp(math.sin(%s))" % e()
        if kind == 7:
            u = e()
            f = d(st.sampled_from(["math.sqrt", "math.log"]))
            return "%s(%s * %s + 1.0)" % (f, u, u)
        if kind == 8:
            return "(-%s)" % e()
        if kind == 9:
            return "%s(%s, %s)" % (d(st.sampled_from(["max", "min"])), e(), e())
        if kind == 10:
            return "(%s if %s > %s else %s)" % (e(), e(), d(_THRESH), e())
        if kind == 11:
            return "%s ** %d" % (self.leaf(scalars), d(st.integers(2, 3)))
        if kind == 12:
            return "(%s * %s)" % (d(_CONST), e())
        if kind == 13:
            return "abs(%s + 0.0625)" % e()
        return "(%s + %s)" % (self.leaf(scalars), e())

    def cond(self, scalars):
        d = self.draw
        c = "%s > %s" % (self.expr(scalars, 1), d(_THRESH))
        kind = d(st.integers(0, 3))
        if kind == 1:
            c = "%s and %s < %s" % (c, self.expr(scalars, 1), d(_CONST))
        elif kind == 2:
            c = "%s or %s < %s" % (c, self.expr(scalars, 1), d(_THRESH))
        elif kind == 3:
            c = "not (%s)" % c
        return c


def _indent(lines, k=1):
    return ["    " * k + ln for ln in lines]


def frag_straight(g, scalars):
    lines = []
    names = list(scalars)
    for _ in range(g.draw(st.integers(1, 4))):
        kind = g.draw(st.integers(0, 3))
        t = g.name()
        if kind == 0 and names:
            v = g.draw(st.sampled_from(names))
            if v in ("a", "b"):
                lines.append("%s = %s" % (t, v))
                v = t
                names.append(t)
            op = g.draw(st.sampled_from(["+=", "-=", "*="]))
            lines.append("%s %s %s" % (v, op, g.expr(names, 1)))
            continue
        if kind == 1:
            t2 = g.name()
            lines.append("%s, %s = %s, %s" % (t, t2, g.expr(names), g.expr(names)))
            names += [t, t2]
            continue
        lines.append("%s = %s" % (t, g.expr(names)))
        names.append(t)
    return lines, g.expr(names, 1)


_RANGES = ["range(n)", "range(1, n)", "range(n - 1, -1, -1)", "range(0, n, 2)",
           "range(n - 1, 0, -2)"]


def frag_loop(g, scalars):
    s = g.name("s")
    rng = g.draw(st.sampled_from(_RANGES))
    inner = scalars + [s, "x[i]", "y[i]"]
    lines = ["%s = %s" % (s, g.expr(scalars, 1)), "for i in %s:" % rng]
    if g.draw(st.booleans()):
        body = ["if %s:" % g.cond(inner),
                "    %s = 0.5 * %s + %s" % (s, s, g.expr(inner)),
                "else:",
                "    %s = math.tanh(%s * %s)" % (s, s, g.expr(inner, 1))]
    else:
        body = ["%s = 0.5 * %s + %s" % (s, s, g.expr(inner))]
    lines += _indent(body)
    if g.draw(st.booleans()):        # a nested loop
        j_body = ["    %s = %s + 0.1 * %s" % (s, s, g.expr(inner + ["x[j]"], 1))]
        lines += _indent(["for j in range(%s):" % g.draw(st.sampled_from(["i", "2", "n - i"]))]
                         + j_body)
    return lines, s


def frag_array_overwrite(g, scalars):
    z = g.name("z")
    alloc = g.draw(st.sampled_from(["x.copy()", "y.copy()", "np.zeros_like(x)",
                                    "np.ones(n)", "np.empty_like(y)"]))
    lines = ["%s = %s" % (z, alloc)]
    if alloc.startswith("np.empty"):
        lines += ["for i in range(n):", "    %s[i] = %s" % (z, g.expr(scalars + ["x[i]"], 1))]
    kind = g.draw(st.integers(0, 3))
    inner = scalars + ["x[i]", "y[i]", "%s[i]" % z]
    if kind == 0:     # recurrence through the array, overwriting in place
        lines += ["for i in range(1, n):",
                  "    %s[i] = 0.5 * %s[i - 1] + %s" % (z, z, g.expr(inner))]
    elif kind == 1:   # read-modify-write, twice
        lines += ["for i in range(n):", "    %s[i] = %s" % (z, g.expr(inner)),
                  "for i in range(n - 1, -1, -1):",
                  "    %s[i] = math.sin(%s[i]) * %s" % (z, z, g.expr(inner, 1))]
    elif kind == 2:   # few slots, overwritten many times
        w = g.name("w")
        lines = ["%s = np.zeros(3)" % w, "for i in range(n):",
                 "    %s[i %% 3] = 0.5 * %s[i %% 3] + %s" % (w, w, g.expr(scalars + ["x[i]", "%s[i %% 3]" % w])),
                 "%s = %s" % (z, alloc if not alloc.startswith("np.empty") else "x.copy()")]
        lines += ["for i in range(3):", "    %s[i] = %s[i] * %s[i]" % (z, z, w)]
    else:             # slice writes
        lines += ["%s[1:] = %s[:-1] * %s + x[1:]" % (z, z, g.expr(scalars, 1)),
                  "%s[0] = %s" % (z, g.expr(scalars, 1)),
                  "%s[::2] = np.sin(%s[::2])" % (z, z)]
    red = g.draw(st.sampled_from(["np.sum(%s * y)", "np.dot(%s, x)", "%s[n - 1] + np.mean(%s)",
                                  "np.sum(np.tanh(%s))"]))
    return lines, red.replace("%s", z)


def frag_branch(g, scalars):
    t = g.name()
    lines = ["if %s:" % g.cond(scalars), "    %s = %s" % (t, g.expr(scalars))]
    if g.draw(st.booleans()):
        lines += ["elif %s:" % g.cond(scalars), "    %s = %s" % (t, g.expr(scalars))]
    lines += ["else:", "    %s = %s" % (t, g.expr(scalars))]
    if g.draw(st.booleans()):   # early-return style branch folded into a value
        lines += ["if %s > 5.0:" % t, "    %s = 5.0 + 0.0 * %s" % (t, t)]
    return lines, t


def frag_while(g, scalars):
    s, k = g.name("s"), g.name("k")
    lim = g.draw(st.sampled_from(["1.5", "2.5", "4.0"]))
    maxit = g.draw(st.integers(3, 12))
    e = g.expr(scalars + [s, "x[%s %% n]" % k], 1)
    lines = ["%s = %s" % (s, g.expr(scalars, 1)), "%s = 0" % k,
             "while %s < %s and %s < %d:" % (s, lim, k, maxit),
             "    %s = %s + %s * %s + 0.05" % (s, s, e, e),
             "    %s += 1" % k]
    return lines, "%s * %s + %s" % (s, g.expr(scalars, 1), k)


def frag_break_continue(g, scalars):
    s = g.name("s")
    inner = scalars + [s, "x[i]", "y[i]"]
    lines = ["%s = 0.0" % s, "for i in range(n):",
             "    if x[i] > %s:" % g.draw(_THRESH), "        continue",
             "    %s = %s + %s" % (s, s, g.expr(inner)),
             "    if %s > %s:" % (s, g.draw(st.sampled_from(["1.0", "2.0", "3.5"]))),
             "        break"]
    return lines, s


def frag_numpy(g, scalars):
    def arr(depth):
        k = g.draw(st.integers(0, 6 if depth > 0 else 1))
        if k == 0:
            return "x"
        if k == 1:
            return "y"
        sub = lambda: arr(depth - 1)   # noqa: E731
        if k == 2:
            return "np.%s(%s)" % (g.draw(st.sampled_from(["sin", "cos", "tanh"])), sub())
        if k == 3:
            return "(%s * %s)" % (sub(), sub())
        if k == 4:
            return "(%s + %s * %s)" % (sub(), g.leaf(scalars), sub())
        if k == 5:
            return "np.exp(np.sin(%s))" % sub()
        return "(%s / (%s * %s + 1.0))" % (sub(), "x", "x")
    red = g.draw(st.integers(0, 3))
    if red == 0:
        return [], "np.sum(%s)" % arr(2)
    if red == 1:
        return [], "np.dot(%s, %s)" % (arr(2), arr(1))
    if red == 2:
        return [], "np.mean(%s) * %s" % (arr(2), g.leaf(scalars))
    u = g.name("u")
    return ["%s = %s" % (u, arr(2))], "np.sum(%s[1:] * %s[:-1]) + %s[0]" % (u, u, u)


def frag_moving_slices(g, scalars):
    """Array temporaries whose shape changes from one iteration to the next."""
    z = g.name("z")
    k = g.draw(st.integers(1, N - 1))
    c = g.expr(scalars, 1)
    kind = g.draw(st.integers(0, 2))
    lines = ["%s = %s.copy()" % (z, g.draw(st.sampled_from(["x", "y"]))), "for i in range(%d):" % k]
    if kind == 0:      # shrinking
        lines.append("    %s[i:] = %s[i:] + (%s) * x[i:] * x[i]" % (z, z, c))
    elif kind == 1:    # growing, in place
        lines.append("    %s[:i + 1] += y[:i + 1] * x[i] * (%s)" % (z, c))
    else:              # a named temporary of varying shape
        t = g.name("w")
        lines += ["    %s = %s[i:] * x[i] + y[i:]" % (t, z), "    %s[i:] = np.sin(%s) * (%s)" % (z, t, c)]
    return lines, "np.sum(%s * y)" % z


def frag_inplace_alias(g, scalars, helpers):
    """In-place operators through an alias or a helper's parameter."""
    w = g.name("w")
    lines = ["%s = x * (%s)" % (w, g.expr(scalars, 1))]
    if g.draw(st.booleans()):
        v = g.name("v")
        op = g.draw(st.sampled_from(["*=", "+=", "-="]))
        lines += ["%s = %s" % (v, w), "%s %s %s" % (v, op, g.expr(scalars, 1)), "%s += y" % v]
    else:
        hname = "ip_helper%d_%s" % (len(helpers.names), g.p.strip("_"))
        helpers.defs.append("\n".join(["def %s(B, alpha):" % hname, "    B *= alpha",
                                        "    B -= np.mean(B) * 0.5"]))
        helpers.names.append(hname)
        lines.append("%s(%s, %s)" % (hname, w, g.expr(scalars, 1)))
    return lines, "np.sum(%s * x) + %s[0]" % (w, w)


def frag_overlap_copy(g, scalars):
    """Copies within one array whose source and destination overlap."""
    z = g.name("z")
    lines = ["%s = y * (%s)" % (z, g.expr(scalars, 1)),
             "for k in range(%d):" % g.draw(st.integers(1, 3))]
    if g.draw(st.booleans()):
        lines += ["    %s[1:] = %s[:-1]" % (z, z), "    %s[0] = %s" % (z, g.expr(scalars + ["x[k]"], 1))]
    else:
        lines += ["    %s[:-1] = %s[1:]" % (z, z), "    %s[n - 1] = %s" % (z, g.expr(scalars + ["x[k]"], 1))]
    i, j = g.draw(st.integers(0, N - 1)), g.draw(st.integers(0, N - 1))
    lines.append("%s[%d] = %s[%d]" % (z, i, z, j))
    return lines, "np.sum(%s * x)" % z


def frag_constant_branch(g, scalars):
    """Branches on module-level constants, with names only the dead branch uses."""
    s = g.name("s")
    inner = scalars + [s, "x[i]", "y[i]"]
    lines = ["%s = %s" % (s, g.expr(scalars, 1)), "for i in range(n):",
             "    if ORDER > 1:", "        %s = 0.5 * %s + %s" % (s, s, g.expr(inner)),
             "    else:", "        %s = %s + never_defined_%s" % (s, s, g.p.strip("_")),
             "    if DAMPED:", "        %s = math.log(%s)" % (s, s)]
    return lines, s


def frag_rerun_regions(g, scalars):
    """An outer loop whose iterations make a fresh array and update it in place, region after region:
    checkpointed, the reverse sweep runs each iteration again and saves the regions it overwrites."""
    s, w = g.name("s"), g.name("w")
    k = g.draw(st.integers(1, 3))
    region = g.draw(st.sampled_from(["[1:] = %s[:-1] * 0.5 + np.sin(%s[1:])", "[:-1] = np.tanh(%s[1:]) + %s[:-1]",
                                     "[::2] = %s[::2] * %s[::2]"]))
    lines = ["%s = 0.0" % s, "for i in range(%d):" % g.draw(st.integers(1, 3)),
             "    %s = %s * (%s + x[i])" % (w, g.draw(st.sampled_from(["x", "y"])), g.expr(scalars, 1)),
             "    for j in range(%d):" % k,
             "        %s%s" % (w, region % (w, w)),
             "    %s += np.sum(%s * y)" % (s, w)]
    return lines, s


def frag_triangular(g, scalars):
    """Nested triangular loops updating one array element by element, with a write after each inner
    loop (LU and triangular-solve style): the saves of the inner and the outer loop share one stack."""
    z = g.name("z")
    lines = ["%s = %s * (%s)" % (z, g.draw(st.sampled_from(["x", "y"])), g.expr(scalars, 1)),
             "for i in range(n):",
             "    for j in range(%s):" % g.draw(st.sampled_from(["i", "i + 1"])),
             "        %s[i] -= %s[j] * x[j] * (%s)" % (z, z, g.draw(_CONST)),
             "    %s[i] = %s" % (z, g.draw(st.sampled_from(["%s[i] / (1.0 + %s[i] * %s[i])" % (z, z, z),
                                                            "np.tanh(%s[i]) * y[i]" % z])))]
    return lines, "np.sum(%s * y)" % z


def frag_views(g, scalars):
    """Rows and columns of a matrix bound to names and updated through them in place, and a view read
    after its array was written (it sees the new values, as in NumPy)."""
    m, r, v = g.name("m"), g.name("r"), g.name("v")
    axis = g.draw(st.sampled_from(["%s[i, :]", "%s[:, i]", "%s[i]"]))
    lines = ["%s = np.outer(x, y) * (%s)" % (m, g.expr(scalars, 1)),
             "%s = %s[1:, 0]" % (v, m),
             "for i in range(%d):" % g.draw(st.integers(1, N)),
             "    %s = %s" % (r, axis % m),
             "    %s *= %s" % (r, g.expr(scalars + ["x[i]"], 1)),
             "    %s[1:] += %s[:-1] * y[i]" % (r, r)]
    return lines, "np.sum(%s * %s) + np.sum(%s * x[1:])" % (m, m, v)


def frag_index_arrays(g, scalars):
    """Reads and writes through an array of indices with repeated entries, and through a mask."""
    idx, picked, z = g.name("idx"), g.name("g"), g.name("z")
    lines = ["%s = (np.arange(n) * %d) %% %d" % (idx, g.draw(st.integers(1, 3)), g.draw(st.integers(2, N - 1))),
             "%s = x[%s] * (%s)" % (picked, idx, g.expr(scalars, 1)),
             "%s = y * 1.0" % z,
             "%s[%s] = np.sin(%s) + y[%s]" % (z, idx, picked, idx)]
    return lines, "np.sum(%s * x) + np.sum(x[x > %s] ** 2)" % (z, g.draw(_THRESH))


def frag_rotation(g, scalars):
    """Two or three buffers rotated by rebinding, updated whole or element by element."""
    p, q, r = g.name("p"), g.name("q"), g.name("r")
    lines = ["%s = x * (%s)" % (p, g.expr(scalars, 1)), "%s = y * 1.0" % q, "%s = np.zeros_like(x)" % r,
             "for t in range(%d):" % g.draw(st.integers(1, 3))]
    if g.draw(st.booleans()):
        lines += ["    for i in range(n):",
                  "        %s[i] = np.sin(%s[i]) * 0.9 + %s[i] * y[i]" % (r, p, q)]
    else:
        lines.append("    %s[:] = np.sin(%s) * 0.9 + %s * y" % (r, p, q))
    lines.append("    %s, %s, %s = %s, %s, %s" % ((p, q, r, r, p, q) if g.draw(st.booleans()) else (p, r, q, r, q, p)))
    return lines, "np.sum(%s * y) + np.sum(%s)" % (p, q)


def frag_argument_swap(g, scalars):
    """The caller's work arrays written, then swapped (`wa, wb = wb, wa`), as a speech-analysis routine
    swaps its coefficient buffers; or the differentiated arrays and scalars swapped and read."""
    s = g.name("s")
    lines = ["%s = %s" % (s, g.expr(scalars, 1)), "for t in range(%d):" % g.draw(st.integers(1, 3))]
    if g.draw(st.booleans()):
        lines += ["    for i in range(n):",
                  "        wa[i] = 0.5 * wb[i] + %s" % g.expr(scalars + ["x[i]", "y[i]"], 1),
                  "    wa, wb = wb, wa",
                  "    %s = %s + wa[t] * %s" % (s, s, g.expr(scalars, 1))]
        return lines, "%s + np.sum(wb * x)" % s
    lines += ["    x, y = y, x", "    a, b = b, a * %s" % g.draw(_CONST),
              "    %s = 0.5 * %s + np.sum(x * y[::-1]) * a" % (s, s)]
    return lines, "%s + b" % s


def frag_workspace_helper(g, scalars, helpers):
    """A work array the caller passes, filled by a helper that writes into it and returns it."""
    s = g.name("s")
    hname = "ws_helper%d_%s" % (len(helpers.names), g.p.strip("_"))
    helpers.defs.append("\n".join(["def %s(v, ca, k):" % hname, "    for i in range(ca.shape[0]):",
                                     "        ca[i] = v[i] * k + 0.5 * ca[i]", "    return ca"]))
    helpers.names.append(hname)
    work = g.draw(st.sampled_from(["wa", "wb"]))
    lines = ["%s = 0.0" % s, "for t in range(%d):" % g.draw(st.integers(1, 3)),
             "    %s = %s(%s * (%s), %s, t + 1.0)" % (work, hname, g.draw(st.sampled_from(["x", "y"])),
                                                     g.expr(scalars, 1), work),
             "    %s += np.sum(%s * %s)" % (s, work, work)]
    return lines, s


class _Helpers:
    def __init__(self):
        self.defs = []
        self.names = []


def frag_helper(g, scalars, helpers):
    d = g.draw
    hname = "helper%d_%s" % (len(helpers.names), g.p.strip("_"))
    kind = d(st.integers(0, 1))
    if kind == 0:     # scalar helper, maybe calling an earlier helper
        body_lines, ret = frag_straight(_Gen(d, "h_", arrays=False), ["u", "v"])
        callee = [h for h in helpers.names if h.startswith("s")]
        if callee and d(st.booleans()):
            body_lines.append("h_c = %s(%s, u)" % (d(st.sampled_from(callee)), ret))
            ret = "h_c * 0.5 + %s" % ret
        src = ["def s%s(u, v):" % hname] + _indent(body_lines) + ["    return %s" % ret]
        helpers.defs.append("\n".join(src))
        helpers.names.append("s" + hname)
        return [], "s%s(%s, %s)" % (hname, g.expr(scalars, 1), g.expr(scalars, 1))
    # array helper with a loop and an inner call of a scalar helper
    callee = [h for h in helpers.names if h.startswith("s")]
    call = ("%s(arr[i], acc)" % d(st.sampled_from(callee))) if callee else "math.sin(arr[i] * acc)"
    src = ["def a%s(arr, c):" % hname,
           "    acc = c",
           "    for i in range(arr.shape[0]):",
           "        acc = 0.5 * acc + arr[i] * %s" % call,
           "    return acc"]
    helpers.defs.append("\n".join(src))
    helpers.names.append("a" + hname)
    return [], "a%s(%s, %s)" % (hname, d(st.sampled_from(["x", "y"])), g.expr(scalars, 1))


_FRAGS = [frag_straight, frag_loop, frag_array_overwrite, frag_branch, frag_while,
          frag_break_continue, frag_numpy, "helper", frag_moving_slices, "inplace_alias", frag_overlap_copy,
          frag_constant_branch, frag_rerun_regions, frag_triangular, frag_views, frag_index_arrays, frag_rotation,
          frag_argument_swap, "workspace_helper"]


@st.composite
def programs(draw, fragments=FRAGMENTS):
    """(helper definitions, [(kind, body lines, result expr)], input seed)."""
    helpers = _Helpers()
    frags = []
    for k in range(fragments):
        frag = draw(st.sampled_from(_FRAGS))
        g = _Gen(draw, "f%d_" % k)
        scalars = ["a", "b"]
        if frag == "helper":
            lines, res = frag_helper(g, scalars, helpers)
            kind = "helper"
        elif frag == "inplace_alias":
            lines, res = frag_inplace_alias(g, scalars, helpers)
            kind = "inplace_alias"
        elif frag == "workspace_helper":
            lines, res = frag_workspace_helper(g, scalars, helpers)
            kind = "workspace_helper"
        else:
            lines, res = frag(g, scalars)
            kind = frag.__name__[5:]
        frags.append((kind, lines, res))
    seed = draw(st.integers(0, 2 ** 16))
    return tuple(helpers.defs), tuple(frags), seed


def build_source(helper_defs, frags):
    """Module source: helpers, then ``prog`` returning one value per fragment."""
    body = []
    results = []
    for k, (kind, lines, res) in enumerate(frags):
        r = "r%d" % k
        body += ["# fragment %d: %s" % (k, kind)] + list(lines) + ["%s = %s" % (r, res)]
        results.append(r)
    src = ["import math", "import numpy as np", "", "ORDER = 2", "DAMPED = False", ""]
    for h in helper_defs:
        src += [h, ""]
    src += ["def prog(x, y, a, b, n, wa, wb):"] + _indent(body)
    src += ["    return " + ", ".join(results) + ("," if len(results) == 1 else "")]
    return "\n".join(src) + "\n"


# ---------------------------------------------------------------------------
# running a program
# ---------------------------------------------------------------------------

_TMP = tempfile.mkdtemp(prefix="srcad_randprog_")
_counter = itertools.count()


def load_program(src):
    """The program as an imported module (a file, so that srcad can read the functions' source)."""
    return import_module(write_module(os.path.join(_TMP, "randprog_%d.py" % next(_counter)), src))


def make_inputs(seed):
    r = np.random.default_rng(seed)
    return (r.uniform(-1.0, 1.0, N), r.uniform(-1.0, 1.0, N),
            float(r.uniform(-1.0, 1.0)), float(r.uniform(-1.0, 1.0)), N,
            r.uniform(-1.0, 1.0, N), r.uniform(-1.0, 1.0, N))


WORK = (5, 6)      # the work arrays: not differentiated, written by the program


ACTIVE = (0, 1, 2, 3)


def reference(py, args):
    """Plain Python outputs, their cotangents, and the FD gradient of each
    output's weighted sum (one column per fragment); None if the point is
    unusable (non-finite values, or within FD reach of a kink)."""
    out = py(*fresh(args))
    outs = out if isinstance(out, tuple) else (out,)
    vals = [np.asarray(o, dtype=np.float64) for o in outs]
    if not all(np.all(np.isfinite(v)) and np.all(np.abs(v) < 1e6) for v in vals):
        return None
    ws = cotangents(outs)

    def phis(a):
        o = py(*fresh(a))
        return np.array([scalarize((ok,), (wk,)) for ok, wk in zip(o if isinstance(o, tuple) else (o,), ws)])

    scale = np.maximum(1.0, np.abs(phis(args)))
    fds = []
    for i in ACTIVE:
        fd = finite_differences(phis, args, i)
        fd4 = finite_differences(phis, args, i, step=1e-4, order=4)
        if not np.all(np.abs(fd - fd4) <= 0.1 * (RTOL * np.abs(fd4) + ATOL * scale)):
            return None
        fds.append(fd)
    return out, ws, fds, scale


def check_program(src, seed):
    """Compiled results equal Python's, and each fragment's gradient (its own
    backward sweep) equals its own finite differences."""
    mod = load_program(src)
    args = make_inputs(seed)
    ref = reference(mod.prog, args)
    assume(ref is not None)
    expected, ws, fds, scale = ref
    in_python = fresh(args)
    mod.prog(*in_python)

    f = ad.function(mod.prog)
    targs = list(fresh(args))
    srcs = [ad.constant(targs[i]) for i in ACTIVE]
    for i, t in zip(ACTIVE, srcs):
        targs[i] = t
    with ad.GradientTape(persistent=True) as tape:
        for t in srcs:
            tape.watch(t)
        out = f(*targs)
    # the forward's results (the primal outside a tape is checked by the corpus;
    # skipping it here saves one Numba compile per program)
    assert isinstance(out, tuple) and len(out) == len(expected)
    for k, (gv, ev) in enumerate(zip(out, expected)):
        np.testing.assert_allclose(value_of(gv), np.asarray(ev), rtol=1e-12, atol=1e-12,
                                   err_msg="result r%d: compiled forward vs Python\n%s" % (k, src))
    _check_work_arrays(targs, in_python, "after the call", src)
    for k, w in enumerate(ws):
        grads = tape.gradient(out[k], srcs, output_gradients=ad.constant(w))
        for i, g, fd in zip(ACTIVE, grads, fds):
            gv = np.zeros(fd.shape[:-1]) if g is None else np.asarray(g.numpy(), dtype=np.float64)
            np.testing.assert_allclose(
                gv, fd[..., k], rtol=RTOL, atol=ATOL * scale[k],
                err_msg="fragment r%d: gradient w.r.t. %s (seed %d)\n%s" % (k, "xyab"[i], seed, src))
        _check_work_arrays(targs, in_python, "after the gradient of r%d" % k, src)


def _check_work_arrays(got, python, when, src):
    """The caller's work arrays hold what the plain Python function leaves in them."""
    for i in WORK:
        np.testing.assert_allclose(got[i], python[i], rtol=1e-12, atol=1e-12,
                                   err_msg="work array w%s %s: compiled vs Python\n%s" % ("ab"[i - 5], when, src))


def localize(helper_defs, frags, seed):
    """After a failure: check each fragment alone (one compile each) and
    return the failing ones' sources and messages."""
    out = []
    for k, frag in enumerate(frags):
        src = build_source(helper_defs, [frag])
        try:
            check_program(src, seed)
        except UnsatisfiedAssumption:
            out.append("fragment %d (%s): alone, its input is too near a kink to check" % (k, frag[0]))
        except Exception as e:   # noqa: BLE001 - collected for the report
            msg = "\n".join(ln for ln in str(e).splitlines() if ln.strip() and not ln.startswith(
                ("import", "def ", "    ", "#", "E ")))
            out.append("fragment %d (%s) fails alone: %s: %s\n%s" % (
                k, frag[0], type(e).__name__, msg[:1500], src))
    return out


# Shrinking would recompile at every step (minutes); instead a failure is
# localized to its fragments, each reported as a standalone program. The programs are drawn in PARTS
# tests of their own, with fixed seeds, so that test processes (pytest-xdist) share them out.
PARTS = 4


def _random_program_test(part):
    @seed(20261125 + part)
    @settings(max_examples=-(-MAX_EXAMPLES // PARTS), deadline=None, database=None,
              phases=[Phase.explicit, Phase.generate],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                     HealthCheck.data_too_large])
    @given(programs())
    def test(prog):
        helper_defs, frags, seed_ = prog
        src = build_source(helper_defs, frags)
        try:
            check_program(src, seed_)
        except UnsatisfiedAssumption:
            raise
        except Exception as e:   # noqa: BLE001 - localized, then re-raised
            alone = localize(helper_defs, frags, seed_)
            raise AssertionError("%s: %s" % (type(e).__name__, e) + "\n\n=== localized (%d of %d fragments fail "
                                 "alone) ===\n" % (len(alone), len(frags)) + "\n".join(alone)) from None
    return test


test_random_program_gradient_0 = _random_program_test(0)
test_random_program_gradient_1 = _random_program_test(1)
test_random_program_gradient_2 = _random_program_test(2)
test_random_program_gradient_3 = _random_program_test(3)


def test_enough_programs():
    assert PARTS * -(-MAX_EXAMPLES // PARTS) * FRAGMENTS >= (200 if os.environ.get("SRCAD_FULL_SWEEPS") else 96)
