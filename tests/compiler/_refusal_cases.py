"""Functions the compiler must refuse (used by test_refusals.py)."""
import collections
import contextlib
import math

import numpy as np

COUNTER = 0
TABLE = np.array([1.0, "one"], dtype=object)


class Box:
    def __init__(self):
        self.v = 1.0
        self.items = [1.0]


BOX = Box()


def uses_try(x):
    try:
        y = x * 2.0
    except ValueError:
        y = 0.0
    return y


def uses_with(x):
    with open("f") as fh:
        y = x
    return y


def uses_generator(x):
    return sum(x[i] for i in range(3))


def uses_listcomp(x):
    a = [[x * i, x] for i in range(int(x))]
    return a[0][0]


def uses_dict(x):
    d = {"a": x}
    return x


def uses_set(x):
    s = {x, 1.0}
    return x


def uses_class(x):
    class Local:
        pass
    return x


def uses_attribute(x):
    return x * BOX.items[0]


def writes_global(x):
    global COUNTER
    COUNTER = 1
    return x


def uses_yield(x):
    yield x


def recursive(x, n):
    if n == 0:
        return x
    return recursive(x * 2.0, n - 1)


def _ping(x):
    return _pong(x)


def _pong(x):
    return _ping(x)


def mutual(x):
    return _ping(x)


def uses_string(x):
    s = b"hello"
    return x


def for_over_reversed(x):
    s = 0.0
    for v in reversed(x):
        s = s + v
    return s


def bare_raise(x):
    if x < 0.0:
        raise
    return x


def raise_formatted(x):
    if x < 0.0:
        raise ValueError(f"x is {x}")
    return x


def raise_not_a_class(x):
    if x < 0.0:
        raise x
    return x


def empty_list(x):
    return np.sum(x) + len([])


def writes_input(x):
    x[0] = 1.0
    return np.sum(x)


def aliasing(x):
    y = x.copy()
    z = y
    z[0] = 2.0
    return np.sum(y * x)


def view_after_write(x):
    y = x.copy()
    v = y[1:]
    y[0] = 2.0
    y[1] = 3.0
    return np.sum(v * x[1:])


def global_array(x):
    return np.sum(x * TABLE)


def no_rule(x):
    return np.sum(np.linalg.svd(np.outer(x, x))[0])


def typing_error(x):
    y = x + 1.0
    z = math.sin(y)
    return z


def helper_writes_input(x):
    _fill(x)
    return np.sum(x)


def _fill(a):
    a[0] = 0.0


def inplace_input(x):
    x += 1.0
    return np.sum(x)


def inplace_after_copy(x):
    x = x.copy()
    x += 1.0
    return np.sum(x * x)


def none_on_one_path(x, flag):
    extra = None
    if flag > 0:
        extra = x * 2.0
    return np.sum(x * x), extra


def none_then_read(x, flag):
    extra = None
    if flag > 0:
        extra = x * 2.0
    total = np.sum(extra * x)
    return total, extra


def _scaled(v, factor, offset_=0.0):
    return v * factor + offset_


def helper_unknown_keyword(x):
    return _scaled(x, 2.0, offset=1.0)


def helper_missing_argument(x):
    return _scaled(x)


@contextlib.contextmanager
def _managed():
    yield


def calls_context_manager(x):
    guard = _managed()
    return x * 2.0


def function_as_value(x):
    g = _scaled
    return g(x, 2.0)


def nested_function_as_value(x):
    def inner(v):
        return v * 2.0
    h = inner
    return h(x)


def _logged(f):
    return f


def decorated_nested_function(x):
    @_logged
    def inner(v):
        return v * 2.0
    return inner(x)


def _swap_function(f, v):
    f = _scaled
    return f(v, 1.0)


def rebinds_function_parameter(x):
    return _swap_function(_scaled, x)


def appends_to_list(x):
    acc = [x]
    acc.append(2.0 * x)
    return np.sum(np.array(acc))


def _reversed_sum_positive(x):
    s = 0.0
    for v in reversed(x):
        s += v
    return s > 0.0


def failing_helper_in_a_test(x):
    if _reversed_sum_positive(x):
        return np.sum(x)
    return 0.0


def appends_masks(x):
    """A list of boolean arrays: lists hold numbers, or arrays of numbers."""
    acc = []
    for i in range(3):
        acc.append(x > i)
    return np.sum(x[acc[1]])


def kept_under_flag(x, keep):
    """A work array that exists only when `keep` is set, written only under that flag."""
    out = None
    if keep:
        out = np.zeros(x.shape[0])
    s = 0.0
    for i in range(x.shape[0]):
        v = x[i] * x[i]
        if keep:
            out[i] = v * s
        s += v
    if keep:
        s += np.sum(out)
    return s, out


def flag_rebound(x, keep):
    out = None
    if keep:
        out = np.zeros(x.shape[0])
    keep = not keep
    if keep:
        out[0] = x[0]
    return np.sum(x), out


def best_so_far(x, n):
    """`best is None or ...`: the test kept in a name says where `best` holds an array."""
    best = None
    s = 0.0
    for i in range(n):
        cand = x * (i + 1.0) - x * x * i
        if best is None or np.sum(cand) > np.sum(best):
            best = cand
        s += np.sum(best * best)
    return s


def none_after_the_loop(x, n):
    y = x * 2.0
    s = 0.0
    for i in range(n):
        s += np.sum(y) * i
    y = None
    return x * s, y


Pair = collections.namedtuple("Pair", ["first", "second"])


def reads_a_missing_field(x):
    p = Pair(x, 2.0 * x)
    return p.third


def named_tuple_rebound(x):
    p = Pair(x, x)
    p = (x, 2.0 * x)
    return p[0]
