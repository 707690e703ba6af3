"""Kernels in the idioms of public Numba code that use Python's statements beyond `for i in range`:
input validation with raise / assert, loops over arrays, enumerate and zip, loop `else:`,
`in` tests on constant tuples, list literals, helpers called with keywords.

Plain functions (helpers as Numba code has them: @numba.njit), so that a test compiles each with `ad.function` and with
`numba.njit` and compares both with Python."""
import collections
import typing

import numba
import numpy as np

xrange = range            # Python 2 style code keeps its spelling
MODES = (1, 3)


class ConvergenceError(RuntimeError):
    """A user's own exception class, raised from compiled code."""


# ---- raise / assert -----------------------------------------------------------------------------

def power_sum(x, n):
    if n < 1:
        raise ValueError("n must be positive")
    s = 0.0
    for i in range(n):
        s += x[i] ** 2
    return s


@numba.njit
def _check_weights(w):
    if np.any(w < 0.0):
        raise ValueError("weights must be non-negative")


def weighted_mean(x, w):
    _check_weights(w)
    return np.sum(x * w) / np.sum(w)


def sqrt_newton(a, maxit):
    """Newton's iteration for sqrt(a), raising when it does not converge (a loop's `else:`)."""
    r = a
    for it in range(maxit):
        step = (r * r - a) / (2.0 * r)
        r = r - step
        if abs(step) < 1e-13 * a:
            break
    else:
        raise ConvergenceError("sqrt_newton did not converge")
    return r


def log_or_raise(x):
    if x > 0.0:
        return np.log(x) * x
    else:
        raise ArithmeticError("log of a non-positive number", 2)


def asserted(x, scale):
    assert scale > 0.0, "scale must be positive"
    assert x.shape[0] >= 2
    return np.sum(np.sin(x) * scale) + x[1]


# ---- loops over sequences --------------------------------------------------------------------------

def sum_of_squares(x):
    s = 0.0
    for v in x:
        s += v * v
    return s


def row_norms(A):
    out = np.zeros(A.shape[0])
    k = 0
    for row in A:
        out[k] = np.sqrt(np.sum(row * row))
        k += 1
    return out


def weighted_positions(x):
    s = 0.0
    for i, v in enumerate(x):
        s += (i + 1) * v * v
    for i, v in enumerate(x[::-1], 1):
        s += i * v
    return s


def polyline_length(xs, ys):
    total = 0.0
    for x0, x1, y0, y1 in zip(xs[:-1], xs[1:], ys[:-1], ys[1:]):
        total += np.sqrt((x1 - x0) ** 2 + (y1 - y0) ** 2)
    return total


def stepped_taps(x, c):
    s = 0.0
    for j, (i, v) in enumerate(zip(xrange(1, 9, 3), c)):
        s += (j + 1) * v * x[i]
    for i in xrange(2):
        s += x[i]
    return s


def first_above(x, level):
    """The first value above `level`, else the last one (a `for ... else`)."""
    found = 0.0
    for v in x:
        if v > level:
            found = v
            break
    else:
        found = x[-1] * 2.0
    return found * x[0]


def halve_until(x, tol):
    y = x
    k = 0
    while k < 30:
        if y < tol:
            break
        y = 0.5 * y
        k += 1
    else:
        y = y * 0.0
    return y


def nested_else(x):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(i):
            if x[j] > 10.0:
                break
        else:
            s += x[i] * i
    return s


def over_table(x):
    s = 0.0
    for c in (0.5, 1.5, 2.5):
        s += c * x
    return s


# ---- in / not in ------------------------------------------------------------------------------------

@numba.njit
def _mode_factor(mode):
    if mode in (1, 2):
        return 2.0
    if mode not in [3, 4]:
        return 0.5
    return 1.0


def by_mode(x, mode):
    y = x * _mode_factor(mode)
    if mode in MODES:
        y = y * y
    return y


# ---- list literals ----------------------------------------------------------------------------------

def spherical_to_cartesian(r, theta, phi):
    v = np.array([r * np.sin(theta) * np.cos(phi), r * np.sin(theta) * np.sin(phi), r * np.cos(theta)])
    R = np.array([[np.cos(phi), -np.sin(phi), 0.0], [np.sin(phi), np.cos(phi), 0.0], [0.0, 0.0, 1.0]])
    return R @ v


def projected(h):
    z = np.sum(np.array([0.0, 0.0, 1.0]) * h)
    w = np.array([1, 2, 3]) * h
    s = 0.0
    for c in [0.25, 0.5]:
        s += c * z
    return s + np.sum(w * w) + np.cross([0.0, 0.0, 1.0], h)[0]


# ---- keyword arguments, defaults, keyword-only parameters ---------------------------------------------

@numba.njit
def _damped(v, rate, scale=1.0, shift=0.0):
    return v * np.exp(-rate * scale) + shift


def damped_sum(x, rate):
    return np.sum(_damped(x, rate, scale=2.0)) + np.sum(_damped(x, rate=rate, shift=0.5)) + \
        np.sum(_damped(x, rate))


def _shifted(v, *, shift, scale=1.0):
    """Keyword-only parameters (plain Python: Numba has none)."""
    return (v + shift) * scale


def keyword_only(x, s):
    return np.sum(_shifted(x, shift=s)) + np.sum(_shifted(x, scale=s, shift=1.0))


# ---- functions as arguments, nested functions -----------------------------------------------------

@numba.njit
def _rk4_step(f, y, t, dt):
    k1 = f(y, t)
    k2 = f(y + 0.5 * dt * k1, t + 0.5 * dt)
    k3 = f(y + 0.5 * dt * k2, t + 0.5 * dt)
    k4 = f(y + dt * k3, t + dt)
    return y + dt / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)


@numba.njit
def _decay(y, t):
    return -0.5 * y + np.sin(t)


@numba.njit
def _rotation(y, t):
    return np.array([y[1], -y[0] * (1.0 + 0.1 * t)])


def integrate_both(y0, dt, n):
    """A module-level function passed to a helper, two different ones."""
    y = y0
    z = np.array([y0, 2.0 * y0])
    for i in range(n):
        y = _rk4_step(_decay, y, i * dt, dt)
        z = _rk4_step(_rotation, z, i * dt, dt)
    return y + np.sum(z * z)


@numba.njit
def _sqdiff(a, b):
    return (a - b) ** 2


@numba.njit
def _absdiff(a, b):
    return abs(a - b)


@numba.njit
def _dtw(x, y, dist):
    n, m = x.shape[0], y.shape[0]
    D = np.full((n + 1, m + 1), np.inf)
    D[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            D[i, j] = dist(x[i - 1], y[j - 1]) + min(D[i - 1, j], D[i, j - 1], D[i - 1, j - 1])
    return D[n, m]


def dtw_two_metrics(x, y):
    """A distance function handed to a dynamic-programming kernel."""
    return _dtw(x, y, _sqdiff) + 0.5 * _dtw(x, y, _absdiff)


def _apply_twice(v, g=_sqdiff):
    return g(g(v, 0.5), 0.25)


def default_function(x):
    """A function as a helper's default value (plain Python: Numba has none)."""
    return _apply_twice(x) + _apply_twice(x, _absdiff)


def logistic_loss(x, w, b):
    """Nested functions: closures over arguments, one calling another, a default value."""
    def model(v):
        return 1.0 / (1.0 + np.exp(-(w * v + b)))

    def loss(v, target=1.0):
        p = model(v)
        return (p - target) ** 2
    s = 0.0
    for v in x:
        s += loss(v) + 0.5 * loss(v, 0.0)
    return s


def running_closure(x):
    """A closure reads the enclosing variable as it is at the call (late binding)."""
    acc = 0.1

    def bump(v):
        return acc + v * acc
    for v in x:
        acc = bump(v)
    return acc


_rk4_python = _rk4_step.py_func      # Python calls it with a closure, which a Numba dispatcher cannot take


def damped_oscillator(y0, k, c, dt, n):
    """A nested function (closing over k and c) passed to a helper."""
    def rhs(y, t):
        return np.array([y[1], -k * y[0] - c * y[1]])
    y = y0
    for i in range(n):
        y = _rk4_python(rhs, y, i * dt, dt)
    return y


def basis_functions(x, c):
    """List comprehensions over constant ranges and tuples, into np.array (rows of a matrix too)."""
    powers = np.array([x ** k for k in range(4)])
    scaled = np.array([c * w for w in (0.5, 1.0, 2.0)])
    V = np.array([[x ** (i + j) for j in range(3)] for i in range(2)])
    return np.sum(powers * c) + np.sum(scaled * scaled) + np.sum(V @ scaled)


def selected_energies(x, threshold):
    """List comprehensions over data-dependent lengths: filtered, over two ranges, over an array, bound to
    a name and used as a list (`len`, `np.array`, indices), and `sum` of one; their loop names stay theirs."""
    n = x.shape[0]
    kept = [v * v for v in x if v > threshold]
    pairs = np.array([x[i] * x[j] for i in range(n) for j in range(i + 1, n) if j - i < 3])
    idx = [i for i in range(n) if x[i] < threshold]
    i = 0.5
    return sum(kept, 0.25) / max(len(kept), 1) + np.sum(pairs) * i + np.sum(x[np.array(idx)] ** 3)


def integrate_with(f, y0, dt, n):
    """A function as an argument of the compiled function, handed on to a helper."""
    y = y0
    for i in range(n):
        y = _rk4_step(f, y, i * dt, dt)
    return y


def euler(f, y0, dt, n):
    """A function as an argument, called directly."""
    y = y0
    for i in range(n):
        y = y + dt * f(y, i * dt)
    return y


def logistic_growth(y, t):
    """A plain Python right-hand side."""
    return 1.5 * y * (1.0 - y) + 0.1 * np.sin(t)


def peaks_above(x, level):
    """A list grown by append in a branch of a loop, then made an array (the count depends on the data)."""
    found = []
    for i in range(1, x.shape[0] - 1):
        if x[i] > x[i - 1] and x[i] > x[i + 1] and x[i] > level:
            found.append(x[i] * x[i])
    out = np.array(found)
    return np.sum(out) + len(found)


def running_means(x, width):
    """Appends past the first storage (more than 16 items), reads by index (the last: acc[-1]), a loop
    over the list, and the list returned as an array."""
    means = []
    total = 0.0
    for i in range(x.shape[0]):
        total += x[i]
        means.append(total / (i + 1))
        if i >= width:
            means[-1] = 0.5 * (means[-1] + means[i - width])
    s = 0.0
    for m in means:
        s += m * m
    return s * np.asarray(means)


def peak_indices(x, level):
    """A peak finder's list of indices (integers: loop indices, their arithmetic), read back by index, by a
    loop over the list, as an index array, and with its length."""
    found = []
    for i in range(1, x.shape[0] - 1):
        if x[i] > x[i - 1] and x[i] > x[i + 1] and x[i] > level:
            found.append(i)
    s = 0.0
    for k in found:
        s += x[k] * x[k - 1]
    idx = np.array(found)
    if len(found) > 0:
        s += x[found[-1]] * len(found)
    return s + np.sum(np.sin(x[idx]))


def gaps_between_crossings(x, counts):
    """Integers from an integer array passed in and from shapes, appended past the first storage."""
    gaps = []
    last = 0
    for i in range(x.shape[0]):
        if x[i] > 0.5:
            gaps.append(i - last + counts[i % counts.shape[0]])
            last = i
    gaps.append(x.shape[0])
    total = 0.0
    for g in gaps:
        total += x[g % x.shape[0]] * g
    return total


def mixed_list(x):
    """An integer appended first, then a float: refused (the list holds one kind)."""
    acc = []
    acc.append(0)
    for i in range(x.shape[0]):
        acc.append(0.5 * x[i])
    return np.sum(np.array(acc))


OscillatorState = collections.namedtuple("OscillatorState", ["pos", "vel", "damping"], defaults=[0.1])


class Spring(typing.NamedTuple):
    k: float
    c: float = 0.5


@numba.njit
def _oscillator_step(s, p, dt):
    acc = -p.k * s.pos - p.c * s.vel - s.damping * s.vel
    return OscillatorState(s.pos + dt * s.vel, s.vel + dt * acc, s.damping)


def damped_spring(x0, v0, k, n):
    """Named tuples as small records: made by position and by keyword, handed to and returned by a helper,
    read by field, by index and unpacked."""
    p = Spring(k, 0.5)
    s = OscillatorState(x0, vel=v0, damping=0.1)
    for i in range(n):
        s = _oscillator_step(s, p, 0.01)
    pos, vel, _ = s
    return pos * pos + s.vel * s[1] + p[0] * vel


def spring_defaults(x):
    """Fields left out take the named tuple's defaults (Numba itself does not fill them in)."""
    p = Spring(x)
    s = OscillatorState(x, x * 2.0)
    return p.k * p.c + s.damping * s.vel


# ---- lambdas, loops over tuples, `in` on arrays, `*` on tuples ----------------------------------------

def _trapezoid(f, a, b, n):
    h = (b - a) / n
    s = 0.5 * (f(a) + f(b))
    for i in range(1, n):
        s += f(a + i * h)
    return s * h


def local_lambdas(k, c):
    """Lambdas bound to names and called there, one calling another (reading `k` and `c` as they are at
    the call), as Numba takes them."""
    damp = lambda t: np.exp(-k * t)
    ramp = lambda t, scale: scale * c * damp(t) * t
    s = 0.0
    for i in range(4):
        s += ramp(0.25 * i, 2.0) + ramp(0.5, 1.0)
    return s + damp(1.0)


def lambdas_passed_on(k, c):
    """A lambda handed to a helper, one made inside another, and one with a default value called by
    keyword (Python takes these; Numba refuses the first two and ignores the keyword)."""
    total = _trapezoid(lambda t: c * np.exp(-k * t) * t, 0.0, 2.0, 16)
    scaled = lambda a: (lambda b: a * b + c)(k)
    ramp = lambda t, scale=2.0: scale * k * t
    return total + scaled(0.5) + ramp(c) + ramp(0.5, scale=c)


def over_tuples(x, y):
    """`for` over a tuple of values: numbers (with a `break`), arrays of different lengths, and zip /
    enumerate of tuples."""
    s = 0.0
    for v in (x[0], 2.0 * x[1], y):
        if v > 10.0:
            break
        s += v * v
    for arr in (x, x[1:] * y):
        s += np.sum(arr ** 2)
    for k, (w, v) in enumerate(zip((0.5, 1.5), (x[2], y))):
        s += (k + w) * v
    return s


def memberships(x, level):
    """`in` / `not in` on an array and on a list grown by append, as Numba tests them."""
    found = []
    for i in range(x.shape[0]):
        if x[i] > level:
            found.append(i)
    s = 0.0
    for i in range(x.shape[0]):
        if i in found:
            s += x[i] * x[i]
        elif float(i) not in x:
            s += level * x[i]
    return s


@numba.njit
def _affine(a, b, c):
    return a * b + c


def spread_tuples(x, y):
    """`*` spreads a tuple into a call's arguments and into a tuple."""
    t = (x, y)
    u = (*t, 2.0)
    return _affine(*t, x * y) + _affine(*u) + np.arctan2(*t)


def constant_fstring(x):
    """An f-string without fields is a constant message, as Numba takes it."""
    if x < 0.0:
        raise ValueError(f"x must be non-negative")  # noqa: F541 (the construct under test)
    return np.sqrt(x)


# ---- lists of arrays grown by append ------------------------------------------------------------------

def trajectory_energy(y0, k, dt, n):
    """An integrator's states kept by appending them (past the list's first storage), read back by index,
    from the end, in a loop, and with len."""
    states = []
    y = y0.copy()
    for i in range(n):
        y = y + dt * np.array([y[1], -k * y[0]])
        states.append(y)
    e = 0.0
    for s in states:
        e += 0.5 * (s[1] ** 2 + k * s[0] ** 2)
    return e + np.sum(states[-1] * states[0]) / len(states)


def stacked_blocks(a, w):
    """Matrices appended and then stacked with np.array, as NumPy stacks a list of arrays (Numba does not
    take np.array of a list of arrays), and a list of lists of numbers."""
    blocks = []
    pairs = []
    for i in range(3):
        blocks.append(a * w ** i)
        pairs.append([w * i, a[0, 0] * i])
    m = np.array(blocks)
    p = np.array(pairs)
    return np.sum(m[:, 0, :] ** 2) + np.sum(m[1] * m[2]) + np.sum(p ** 2)


def ragged_rows(x):
    """Arrays of two shapes in one list: refused when the second shape comes."""
    acc = []
    acc.append(x)
    acc.append(x[1:])
    return np.sum(acc[0])
