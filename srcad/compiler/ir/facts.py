"""What analyses find about an IR function: one typed record per analysis, on `Function.facts`.

`fn.facts.of(Activity)` returns the record or raises `MissingFact`, naming the
pass that makes it: a pass that runs without a fact it needs fails there,
instead of reading an empty default. `fn.facts.put(record)` stores one. A pass
that changes the IR says which records stay true (`keep`); the others are
dropped, so a stale fact is never read. `copy()` copies the records' sets and
maps, so two copies of a function never share them.
"""
from dataclasses import dataclass, field, fields, replace


class MissingFact(LookupError):
    """A pass needs a fact that no analysis has put on the function (or one a later pass dropped)."""


@dataclass
class Lowered:
    """From the front end (`front/lower.py`): names bound by a helper's result (a move, not an alias), the
    names bound where a function returns early, with their call, and the arrays holding the items of
    lists grown by append (-> the list's name). Code the compiler derives (a gradient function, a tangent)
    has none of them."""
    made_by = "lower"
    moved: set = field(default_factory=set)
    results: dict = field(default_factory=dict)
    lists: dict = field(default_factory=dict)


@dataclass
class Bounds:
    """The index checks `front/bounds.py` inserted: one site (array, axis, line) each; none without checks."""
    made_by = "bounds"
    sites: list = field(default_factory=list)


@dataclass
class Aliasing:
    """`analysis/aliasing.py`: `groups` (name -> the names sharing its memory for sure), `may` (name -> the
    names that may share it) and the parameters the function writes into."""
    made_by = "aliasing"
    groups: dict
    may: dict
    written_params: list


@dataclass
class Activity:
    """`analysis/activity.py`: the names derivatives flow through (`active` = `varied` & `useful`) and
    the parameters being differentiated."""
    made_by = "activity"
    varied: set
    useful: set
    active: set
    params: list


@dataclass
class OptionalValues:
    """`analysis/optional.py`: the flag of each name that may be None, and of each output that may be."""
    made_by = "optional"
    flags: dict
    outputs: dict


@dataclass
class Reverse:
    """`ad/reverse.py`, on the forward and the adjoint it makes: the names of `saved`, the cotangent
    parameters, the forward's stacks, the adjoint names, whether the adjoint consumes `saved` (it
    restores arrays in place: once per forward), and the flags of its zero-cotangent guards
    (`LocalAdjoints.unless_zero`)."""
    made_by = "reverse"
    saved: list
    d_outs: list = field(default_factory=list)
    forward_stacks: dict = field(default_factory=dict)
    adjoints: set = field(default_factory=set)
    once_per_forward: bool = False
    guards: set = field(default_factory=set)


class Facts:
    """The records of one function, by kind."""

    def __init__(self, *records):
        self._records = {}
        for r in records:
            self.put(r)

    def of(self, kind):
        try:
            return self._records[kind]
        except KeyError:
            raise MissingFact(f"the {kind.__name__} facts of this function are missing: the '{kind.made_by}' pass "
                              f"makes them, and must run before (or again after a pass that dropped them)") from None

    def has(self, kind):
        return kind in self._records

    def put(self, record):
        self._records[type(record)] = record
        return record

    def keep(self, *kinds):
        """Drop every record but those of `kinds` (what a pass that changed the IR left true)."""
        self._records = {k: r for k, r in self._records.items() if k in kinds}

    def copy(self):
        return Facts(*(replace(r, **{f.name: _copied(getattr(r, f.name)) for f in fields(r)})
                       for r in self._records.values()))

    def __repr__(self):
        return f"Facts({', '.join(k.__name__ for k in self._records)})"


def _copied(value):
    """`value` with its containers (dict, set, list) copied all the way down; other objects shared."""
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return type(value)(value)
    if isinstance(value, list):
        return [_copied(v) for v in value]
    return value
