"""Functions exercising every construct of the compiled subset (used by test_transform.py)."""
import math

import numpy as np

from corpus import energy  # noqa: F401  (DESIGN.md's example, written once in the corpus)
from srcad import stop_gradient

SCALE = 0.5


def straight(x, y):
    a = x * y + math.sin(x)
    b = a / (1.0 + y * y) - math.exp(-x)
    return b ** 2 + math.sqrt(a * a + 1.0) + abs(x - y) + SCALE * max(x, y)


def nested_loops(a, n):
    s = 0.0
    for i in range(n):
        for j in range(i, n):
            s = s + a[i] * a[j] * math.cos(s * 0.1)
    return s


def loop_carried(x, steps):
    h = x.copy()
    for k in range(steps):
        for i in range(1, h.shape[0]):
            h[i] = h[i] * 0.9 + math.tanh(h[i - 1]) * 0.5
    return np.sum(h * h)


def rebind_array(W, b, x0, steps):
    h = x0
    for t in range(steps):
        h = np.tanh(W @ h + b)
    return np.sum(h ** 2)


def newton_sqrt(a):
    x = a
    err = 1.0
    while err > 1e-12:
        nx = 0.5 * (x + a / x)
        err = abs(nx - x)
        x = nx
    return x * x + x


def while_data(x):
    s = x
    n = 0
    while s < 10.0:
        s = s * 1.5 + 0.1
        n += 1
    return s * n


def with_break(x):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] < 0.0:
            break
        s = s + x[i] * s + x[i]
    return s + i


def with_continue(x):
    s = 0.0
    for i in range(x.shape[0]):
        if i % 2 == 1:
            continue
        s = s + math.sin(x[i]) * x[i]
    return s


def early_return(x, y):
    if x > 1.0:
        return x * y
    for i in range(5):
        x = x * 1.1 + y
        if x > 3.0:
            return x * x
    return -x


def branches(x):
    s = 0.0
    for i in range(x.shape[0]):
        v = x[i]
        if v > 0.5:
            s = s + v * v
        elif v > 0.0:
            s = s - math.log(v + 1.0)
        else:
            s = s * 0.5 + v
    return s


def tuple_return(x, y):
    a = x * y
    b = x + y * y
    return a, b * a


def _sq(u):
    return u * u


def _norm2(v):
    s = 0.0
    for i in range(v.shape[0]):
        s = s + _sq(v[i])
    return s


def _both(u, w):
    return _sq(u) + w, u * w


def helpers(x, y):
    p, q = _both(y, x[0])
    return _norm2(x) * p + q


def float32_fn(x, c):
    y = x * c
    return np.sum(np.sin(y)) * c


def int_args(x, n, k):
    s = 0.0
    for i in range(n):
        s = s + x[(i * k) % x.shape[0]] * i
    return s


def stop_grad(x):
    return x * stop_gradient(x * x) + x


def arrays(W, x, b):
    z = W @ x + b
    y = np.exp(-z) * np.dot(x, x)
    return np.sum(y) + np.mean(np.tanh(W)) + np.sum(W * x)


def swap_unpack(x, y):
    a, b = x, y
    for i in range(3):
        a, b = b, a * b + 0.5
    return a - b


def cond_expr(x):
    s = 0.0
    for i in range(x.shape[0]):
        s = s + (x[i] if x[i] > 0 else -x[i] * 0.5)
    return s


def aug_assign(x):
    s = 1.0
    y = np.zeros(x.shape[0])
    for i in range(x.shape[0]):
        s *= x[i]
        s += 1.0
        y[i] += s
    return np.sum(y)


def slices(x):
    y = np.zeros(x.shape[0])
    y[1:] = x[:-1] * 2.0
    y[0] = x[-1]
    return np.sum(y * x)


def matrix_loops(A, x):
    n = A.shape[0]
    y = np.zeros(n)
    for i in range(n):
        for j in range(A.shape[1]):
            y[i] += A[i, j] * x[j]
    return np.dot(y, y)




def integrator(p, x0, n):
    x = x0
    v = 0.0
    for i in range(n):
        a = -p[0] * x - p[1] * v * abs(v)
        x2 = x + 0.01 * v
        v = v + 0.01 * a
        x = x2
    return x * x + v
