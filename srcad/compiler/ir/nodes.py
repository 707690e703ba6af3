"""The compiler's one intermediate representation: typed statements and expressions.

Every pass takes a `Function` and returns one. Expressions are immutable
trees (structural equality, usable as dict keys); statements are mutable
records with an `origin` (the user line they come from). Statements do one
thing each on simple operands: an `Assign` binds a name, a `Store` writes into
an array, and control flow is `If`, `For` over a range and `While` on a flag.

The constructs reverse mode adds are part of the same language, so that
generated code can be transformed again: `Push` / `Pop` / `Reserve` save and
restore values (a stack per saved quantity; how a stack is stored is the
target's choice, see `backends`), and `Accumulate` adds an adjoint into a
name or an array region (summing over broadcast axes).
"""
from dataclasses import dataclass, field
from itertools import count
from typing import Optional

from .facts import Facts


# ---- expressions --------------------------------------------------------------------------------

class Expr:
    """Base of expressions. Arithmetic operators build trees, so derivative rules read as formulas."""

    __slots__ = ()

    def __add__(self, other):
        return BinOp("+", self, lift(other))

    def __radd__(self, other):
        return BinOp("+", lift(other), self)

    def __sub__(self, other):
        return BinOp("-", self, lift(other))

    def __rsub__(self, other):
        return BinOp("-", lift(other), self)

    def __mul__(self, other):
        return BinOp("*", self, lift(other))

    def __rmul__(self, other):
        return BinOp("*", lift(other), self)

    def __truediv__(self, other):
        return BinOp("/", self, lift(other))

    def __rtruediv__(self, other):
        return BinOp("/", lift(other), self)

    def __pow__(self, other):
        return BinOp("**", self, lift(other))

    def __matmul__(self, other):
        return BinOp("@", self, lift(other))

    def __neg__(self):
        return UnaryOp("-", self)


def lift(v):
    """A Python number as a constant expression; expressions unchanged."""
    return v if isinstance(v, Expr) else Const(v)


@dataclass(frozen=True, slots=True)
class Const(Expr):
    """A literal: int, float, bool or None (None in an index is np.newaxis)."""
    value: object


@dataclass(frozen=True, slots=True)
class Name(Expr):
    """A local variable or parameter."""
    id: str


@dataclass(frozen=True, slots=True)
class Global(Expr):
    """A fixed object of a module, by its path: `np.float64`, `math.pi`."""
    path: str


@dataclass(frozen=True, slots=True)
class Slice(Expr):
    """`lower:upper:step` inside a subscript (None parts are left out)."""
    lower: Optional[Expr] = None
    upper: Optional[Expr] = None
    step: Optional[Expr] = None


@dataclass(frozen=True, slots=True)
class Subscript(Expr):
    """`base[i, j:k, ...]`: an element or a view of an array, an item of a tuple or a shape."""
    base: Expr
    index: tuple


@dataclass(frozen=True, slots=True)
class Attribute(Expr):
    """`base.shape`, `.ndim`, `.size`, `.dtype` of an array."""
    base: Expr
    attr: str


@dataclass(frozen=True, slots=True)
class BinOp(Expr):
    """`left op right`, op one of + - * / // % ** @ & |."""
    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class UnaryOp(Expr):
    """`op operand`, op one of - + not."""
    op: str
    operand: Expr


@dataclass(frozen=True, slots=True)
class Compare(Expr):
    """`left op right`, op one of < <= > >= == != is (is not)."""
    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Call(Expr):
    """A call of a known function by its canonical name (`np.sin`, `math.exp`, `abs`, `np.copy`,
    `srcad.sum_into`...); `keywords` is a tuple of (name, value) pairs."""
    fn: str
    args: tuple = ()
    keywords: tuple = ()

    def keyword(self, name, default=None):
        return next((v for k, v in self.keywords if k == name), default)


@dataclass(frozen=True, slots=True)
class Tuple(Expr):
    """`(a, b, ...)`."""
    items: tuple


@dataclass(frozen=True, slots=True)
class TypeRef(Expr):
    """A Numba type used as a value (the item type of a typed list)."""
    type: object


# ---- statements ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Origin:
    """The user line a statement comes from (helpers name their function). `call`: the inlined calls
    of helpers it lies in, outermost first, one number per call: the statements of one call of a
    helper are those whose `call` starts with that call's."""
    func: str
    file: str
    line: int
    text: str
    helper: bool = False
    call: tuple = ()

    def comment(self):
        where = f"{self.func} line {self.line}" if self.helper else f"line {self.line}"
        return f"# from {where}: {self.text}"


_uids = count()


def new_uid():
    """An identity no statement has had."""
    return next(_uids)


@dataclass(eq=False)
class Stmt:
    """Base of statements. `uid` is a statement's identity for analyses that refer to it: a copy made
    by `visit.clone` keeps it, so decisions keyed by it survive copies (`visit.distinct_ids` gives
    repeated copies in one body their own)."""
    uid: int = field(default_factory=new_uid, kw_only=True, repr=False)


@dataclass(eq=False)
class Assign(Stmt):
    """`target = value`: binds a name (an array value is bound by reference, never copied).
    `inplace`: the user wrote `target op= operand` (value `target op operand`), which updates an
    array in place; the inplace pass turns those on arrays into stores."""
    target: str
    value: Expr
    origin: Optional[Origin] = None
    inplace: bool = False


@dataclass(eq=False)
class Store(Stmt):
    """`array[index] = value`: writes into the memory of `array`."""
    array: str
    index: tuple
    value: Expr
    origin: Optional[Origin] = None


@dataclass(eq=False)
class Accumulate(Stmt):
    """`target += value` for an adjoint: `target` a Name or a Subscript of an array name. `value`
    broadcasts up to the target's shape, or with `reduce` it may be larger (the target was broadcast
    in the primal) and is summed over the broadcast axes."""
    target: Expr
    value: Expr
    reduce: bool = False
    origin: Optional[Origin] = None


@dataclass(eq=False)
class If(Stmt):
    cond: Expr
    body: list
    orelse: list = field(default_factory=list)
    origin: Optional[Origin] = None


@dataclass(eq=False)
class For(Stmt):
    """`for var in range(start, stop, step)`; the bounds are read once, on entry. `parallel`: the
    iterations may run at once (`numba.prange`): each binds its own names, and writes no element
    another iteration reads or writes, except sums (`s += v`) that Numba combines as reductions.
    `phase`: a parallel loop over the threads of a kernel between two barriers (srcad/cuda/phases.py):
    its iterations are independent by CUDA's rules (no thread reads an element another thread of the
    phase writes) whatever indices they use, which no analysis has to prove."""
    var: str
    start: Expr
    stop: Expr
    step: Expr
    body: list
    origin: Optional[Origin] = None
    parallel: bool = False
    phase: bool = False


@dataclass(eq=False)
class While(Stmt):
    """`while cond:`, `cond` a name the body assigns. `bound`: the most iterations it can run, read on
    entry (a `for` loop with a `break` becomes a while loop bounded by its range), None if unknown."""
    cond: str
    body: list
    origin: Optional[Origin] = None
    bound: Optional[Expr] = None


@dataclass(eq=False)
class Effect(Stmt):
    """A call made for what it does, its value dropped (`stack.append(v)`)."""
    call: Expr
    origin: Optional[Origin] = None


@dataclass(eq=False)
class Push(Stmt):
    """Save `value` on top of `stack` (see Function.stacks)."""
    stack: str
    value: Expr
    origin: Optional[Origin] = None


@dataclass(eq=False)
class Pop(Stmt):
    """Take the top of `stack` back into `target` (a Name, or a Subscript to restore array elements)."""
    stack: str
    target: Expr
    origin: Optional[Origin] = None


@dataclass(eq=False)
class Reserve(Stmt):
    """Room on `stack` for `count` more pushes (taken before a loop, so the pushes in it need no check)."""
    stack: str
    count: Expr
    origin: Optional[Origin] = None


# ---- functions ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Stack:
    """A stack of saved values: `item` is a Numba type, a scalar's or an array's (arrays are saved
    as they are: a rebound name's old array, or a copy of an overwritten region); `top` names its
    height. `checked`: pushes may come without a `Reserve` (in while loops), so each must make room.
    `size`: how many values one run pushes, known before the run (a `saving.SaveSize`; set where the
    target's storage cannot grow, see `saving.Policy`). `by_value`: a stack of arrays a copy of each of
    which may stand for it (nothing else sees its memory: `_Reverse._by_value`), which a target may keep
    as copies end to end in one buffer (`saving.Policy.in_buffer`), beside the list named `objects` for
    arrays too big to copy (handed from the forward to the adjoint with the stack and its height)."""
    item: object
    top: str
    checked: bool = False
    size: object = None
    by_value: bool = False
    objects: Optional[str] = None


class Names:
    """Fresh identifiers that clash with nothing the user wrote; `made` are those it gave out, and
    `spelled` the user's own name of those that stand for a user variable (for messages)."""

    def __init__(self, used=()):
        self.used = set(used)
        self.made = set()
        self.spelled = {}

    def fresh(self, base, spelled=None):
        name, k = base, 2
        while name in self.used:
            name = f"{base}{k}"
            k += 1
        self.used.add(name)
        self.made.add(name)
        if spelled is not None:
            self.spelled[name] = self.user(spelled)
        return name

    def user(self, name):
        """The name the user wrote for `name`."""
        return self.spelled.get(name, name)


@dataclass(eq=False)
class Function:
    """One function in the IR.

    `outputs` are the returned expressions (a tuple when `returns_tuple`).
    `types` maps every name to its Numba type once the types pass ran. `stacks`
    declares the stacks Push/Pop use. `facts` holds what analyses found, a typed
    record each (`ir/facts.py`), so later passes read it instead of asking again.
    `workspace` lists the parameters that are stacks handed in by the caller
    (reused from call to call). `sources` are the parsed user functions, for messages.
    """
    name: str
    params: list
    body: list
    outputs: list
    returns_tuple: bool = False
    types: dict = field(default_factory=dict)
    stacks: dict = field(default_factory=dict)
    facts: Facts = field(default_factory=Facts)
    names: Names = field(default_factory=Names)
    workspace: list = field(default_factory=list)
    sources: list = field(default_factory=list)


__all__ = ["Expr", "Const", "Name", "Global", "Slice", "Subscript", "Attribute", "BinOp", "UnaryOp", "Compare",
           "Call", "Tuple", "TypeRef", "Origin", "Stmt", "Assign", "Store", "Accumulate", "If", "For", "While",
           "Effect", "Push", "Pop", "Reserve", "Stack", "Names", "Function", "lift", "new_uid"]
