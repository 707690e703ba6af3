"""Functions the compiler must refuse (used by test_refusals.py)."""
import math

import numpy as np

COUNTER = 0
TABLE = np.ones(3)


class Box:
    def __init__(self):
        self.v = 1.0


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


def uses_lambda(x):
    f = lambda u: u * 2.0  # noqa: E731
    return f(x)


def uses_generator(x):
    return sum(x[i] for i in range(3))


def uses_listcomp(x):
    a = [x * i for i in range(3)]
    return a[0]


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
    return x * BOX.v


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
    s = "hello"
    return x


def for_over_array(x):
    s = 0.0
    for v in x:
        s = s + v
    return s


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
    return np.sum(np.cumprod(x))


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
