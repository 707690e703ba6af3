"""Numeric kernels written the way other people write them, for ``@ad.function``.

Nobody on the compiler team wrote these: they follow the styles of polybench's
kernels, numerical-methods textbooks, the Numba benchmark suites, libraries
built on Numba and small physics / finance / ML / signal-processing codes
(explicit nested loops, whole-array NumPy, slices with moving bounds, in-place
operators through aliases and helper parameters, helpers returning tuples or
writing into arrays, ``while`` loops with data-dependent trip counts,
``break`` / ``continue`` / early ``return``, module constants, default
arguments, float32).  Each is our own implementation of a well-known
algorithm, with a one-line comment naming it.

Every function is plain Python that also compiles with ``numba.njit``
unchanged (``njit_twins()`` builds the Numba versions; the tests check they
agree with Python).  Functions whose names start with ``_`` are helpers, called
from the kernels and never decorated.
"""
import math
import types

import numpy as np

# ---- module-level constants the kernels read --------------------------------------------------------

SQRT2 = 1.4142135623730951
RSQRT2PI = 0.39894228040143267794
A1 = 0.31938153
A2 = -0.356563782
A3 = 1.781477937
A4 = -1.821255978
A5 = 1.330274429
EPS_STD = 0.1          # polybench correlation's guard against a tiny standard deviation
GRAV = 9.81
RCUT = 2.5             # Lennard-Jones cutoff radius (in units of sigma)
CENTERED = True        # a build-time switch, as in library code
N_QUAD = 16


# =====================================================================================================
# polybench-like linear algebra and stencils
# =====================================================================================================

# polybench gemm: C := alpha*A*B + beta*C, element loops as in the C original
def gemm(alpha, beta, C, A, B):
    C = C.copy()
    ni, nj = C.shape
    nk = A.shape[1]
    for i in range(ni):
        for j in range(nj):
            C[i, j] *= beta
        for k in range(nk):
            for j in range(nj):
                C[i, j] += alpha * A[i, k] * B[k, j]
    return C


# gemm in NumPy row style: a row view of C scaled and accumulated in place through its name
def gemm_rows(alpha, beta, C, A, B):
    C = C.copy()
    for i in range(C.shape[0]):
        row = C[i, :]
        row *= beta
        for k in range(A.shape[1]):
            row += alpha * A[i, k] * B[k, :]
    return C


# polybench 2mm: D := alpha*A*B*C + beta*D, a temporary filled with np.dot, then @ and +=
def two_mm(alpha, beta, A, B, C, D):
    tmp = np.zeros((A.shape[0], B.shape[1]))
    for i in range(A.shape[0]):
        for j in range(B.shape[1]):
            tmp[i, j] = alpha * np.dot(A[i, :], B[:, j])
    out = beta * D
    out += tmp @ C
    return out


# polybench syrk: C := alpha*A*A^T + beta*C on the lower triangle, scalar loops with moving bounds
def syrk(alpha, beta, C, A):
    n, m = A.shape
    C = C.copy()
    for i in range(n):
        for j in range(i + 1):
            C[i, j] *= beta
        for k in range(m):
            for j in range(i + 1):
                C[i, j] += alpha * A[i, k] * A[j, k]
    return C


# polybench syr2k: C := alpha*A*B^T + alpha*B*A^T + beta*C, lower triangle as row slices
def syr2k(alpha, beta, C, A, B):
    n, m = A.shape
    C = C.copy()
    for i in range(n):
        C[i, :i + 1] *= beta
        for k in range(m):
            C[i, :i + 1] += A[:i + 1, k] * alpha * B[i, k] + B[:i + 1, k] * alpha * A[i, k]
    return C


# polybench trmm: B := alpha * A^T * B with A unit lower triangular, B overwritten row by row
def trmm(alpha, A, B):
    m, n = B.shape
    B = B.copy()
    for i in range(m):
        for j in range(n):
            for k in range(i + 1, m):
                B[i, j] += A[k, i] * B[k, j]
            B[i, j] = alpha * B[i, j]
    return B


# polybench symm: C := alpha*A*B + beta*C with A symmetric (lower part stored), int accumulator init
def symm(alpha, beta, C, A, B):
    m, n = C.shape
    C = C.copy()
    for i in range(m):
        for j in range(n):
            temp2 = 0
            for k in range(i):
                C[k, j] += alpha * B[i, j] * A[i, k]
                temp2 += B[k, j] * A[i, k]
            C[i, j] = beta * C[i, j] + alpha * B[i, j] * A[i, i] + alpha * temp2
    return C


# polybench atax: y = A^T (A x), one pass over the rows
def atax(A, x):
    m, n = A.shape
    y = np.zeros(n)
    tmp = np.zeros(m)
    for i in range(m):
        for j in range(n):
            tmp[i] += A[i, j] * x[j]
        for j in range(n):
            y[j] += A[i, j] * tmp[i]
    return y


# polybench bicg: s = A^T r and q = A p, row slices, tuple result
def bicg(A, p, r):
    m, n = A.shape
    s = np.zeros(n)
    q = np.zeros(m)
    for i in range(m):
        s += r[i] * A[i, :]
        q[i] = np.dot(A[i, :], p)
    return s, q


def _matvec_acc(M, v, out):
    for i in range(M.shape[0]):
        for j in range(M.shape[1]):
            out[i] += M[i, j] * v[j]


# polybench mvt: x1 += A y1, x2 += A^T y2, through a helper that accumulates into its argument
def mvt(A, x1, x2, y1, y2):
    x1 = x1.copy()
    x2 = x2.copy()
    _matvec_acc(A, y1, x1)
    _matvec_acc(A.T, y2, x2)
    return x1, x2


def _two_dots(a, b, x):
    s = 0.0
    t = 0.0
    for j in range(x.shape[0]):
        s += a[j] * x[j]
        t += b[j] * x[j]
    return s, t


# polybench gesummv: y = alpha*A*x + beta*B*x, a helper returning a tuple per row
def gesummv(alpha, beta, A, B, x):
    n = A.shape[0]
    y = np.empty(n, dtype=x.dtype)
    for i in range(n):
        tmp, yi = _two_dots(A[i], B[i], x)
        y[i] = alpha * tmp + beta * yi
    return y


# polybench gemver: rank-2 update with np.outer / np.newaxis, then two matrix-vector products
def gemver(alpha, beta, A, u1, v1, u2, v2, y, z):
    Ah = A + np.outer(u1, v1) + u2[:, np.newaxis] * v2[np.newaxis, :]
    x = np.zeros(A.shape[1])
    x += beta * (Ah.T @ y)
    x += z
    w = alpha * np.dot(Ah, x)
    return w, x


# polybench doitgen: A[r, q, :] := A[r, q, :] @ C4 on a 3-D tensor, through a reused sum buffer
def doitgen(A, C4):
    nr, nq, npp = A.shape
    A = A.copy()
    s = np.zeros(npp)
    for r in range(nr):
        for q in range(nq):
            for p in range(npp):
                s[p] = 0.0
                for t in range(npp):
                    s[p] += A[r, q, t] * C4[t, p]
            A[r, q, :] = s
    return A


# polybench covariance: axis reduction, centring with np.newaxis, d.T @ d
def covariance(data):
    n = data.shape[0]
    mean = np.sum(data, axis=0) / n
    d = data - mean[np.newaxis, :]
    return (d.T @ d) / (n - 1.0)


# polybench correlation: standardised columns with the tiny-stddev guard, then the symmetric matrix
def correlation(data):
    n, m = data.shape
    mean = np.zeros(m)
    std = np.zeros(m)
    for j in range(m):
        mean[j] = np.sum(data[:, j]) / n
    for j in range(m):
        std[j] = np.sqrt(np.sum((data[:, j] - mean[j]) ** 2) / n)
        if std[j] <= EPS_STD:
            std[j] = 1.0
    d = data.copy()
    for i in range(n):
        for j in range(m):
            d[i, j] -= mean[j]
            d[i, j] /= math.sqrt(n) * std[j]
    corr = np.zeros((m, m))
    for i in range(m - 1):
        corr[i, i] = 1.0
        for j in range(i + 1, m):
            for k in range(n):
                corr[i, j] += d[k, i] * d[k, j]
            corr[j, i] = corr[i, j]
    corr[m - 1, m - 1] = 1.0
    return corr


# polybench cholesky: in place on the lower triangle (the upper keeps the input)
def cholesky(A):
    A = A.copy()
    n = A.shape[0]
    for i in range(n):
        for j in range(i):
            for k in range(j):
                A[i, j] -= A[i, k] * A[j, k]
            A[i, j] /= A[j, j]
        for k in range(i):
            A[i, i] -= A[i, k] * A[i, k]
        A[i, i] = math.sqrt(A[i, i])
    return A


# polybench lu: Doolittle LU in place, no pivoting
def lu(A):
    A = A.copy()
    n = A.shape[0]
    for i in range(n):
        for j in range(i):
            for k in range(j):
                A[i, j] -= A[i, k] * A[k, j]
            A[i, j] /= A[j, j]
        for j in range(i, n):
            for k in range(i):
                A[i, j] -= A[i, k] * A[k, j]
    return A


# polybench ludcmp: LU with scalar temporaries, then forward and back substitution
def ludcmp(A, b):
    A = A.copy()
    n = A.shape[0]
    for i in range(n):
        for j in range(i):
            w = A[i, j]
            for k in range(j):
                w -= A[i, k] * A[k, j]
            A[i, j] = w / A[j, j]
        for j in range(i, n):
            w = A[i, j]
            for k in range(i):
                w -= A[i, k] * A[k, j]
            A[i, j] = w
    y = np.zeros(n)
    for i in range(n):
        w = b[i]
        for j in range(i):
            w -= A[i, j] * y[j]
        y[i] = w
    x = np.zeros(n)
    for i in range(n - 1, -1, -1):
        w = y[i]
        for j in range(i + 1, n):
            w -= A[i, j] * x[j]
        x[i] = w / A[i, i]
    return x


# polybench trisolv: forward substitution, np.dot on growing slices (empty at i = 0)
def trisolv(L, b):
    n = b.shape[0]
    x = np.zeros_like(b)
    for i in range(n):
        x[i] = (b[i] - np.dot(L[i, :i], x[:i])) / L[i, i]
    return x


# polybench durbin: Levinson-Durbin recursion for a Toeplitz system, slice copy y[:k] = z[:k]
def durbin(r):
    n = r.shape[0]
    y = np.empty_like(r)
    z = np.empty_like(r)
    y[0] = -r[0]
    beta = 1.0
    alpha = -r[0]
    for k in range(1, n):
        beta = (1 - alpha * alpha) * beta
        s = 0.0
        for i in range(k):
            s += r[k - i - 1] * y[i]
        alpha = -(r[k] + s) / beta
        for i in range(k):
            z[i] = y[i] + alpha * y[k - i - 1]
        y[:k] = z[:k]
        y[k] = alpha
    return y


# polybench gramschmidt: modified Gram-Schmidt QR on column slices
def gramschmidt(A):
    m, n = A.shape
    A = A.copy()
    Q = np.zeros((m, n))
    R = np.zeros((n, n))
    for k in range(n):
        nrm = 0.0
        for i in range(m):
            nrm += A[i, k] * A[i, k]
        R[k, k] = math.sqrt(nrm)
        Q[:, k] = A[:, k] / R[k, k]
        for j in range(k + 1, n):
            R[k, j] = np.dot(Q[:, k], A[:, j])
            A[:, j] -= Q[:, k] * R[k, j]
    return Q, R


# polybench jacobi-1d: two buffers updated with shifted slices
def jacobi_1d(A, tsteps):
    A = A.copy()
    B = np.zeros_like(A)
    for t in range(tsteps):
        B[1:-1] = 0.33333 * (A[:-2] + A[1:-1] + A[2:])
        A[1:-1] = 0.33333 * (B[:-2] + B[1:-1] + B[2:])
    return A


# polybench jacobi-2d: 5-point stencil, element loops, two buffers
def jacobi_2d(A, tsteps):
    n = A.shape[0]
    A = A.copy()
    B = A.copy()
    for t in range(tsteps):
        for i in range(1, n - 1):
            for j in range(1, n - 1):
                B[i, j] = 0.2 * (A[i, j] + A[i, j - 1] + A[i, j + 1] + A[i + 1, j] + A[i - 1, j])
        for i in range(1, n - 1):
            for j in range(1, n - 1):
                A[i, j] = 0.2 * (B[i, j] + B[i, j - 1] + B[i, j + 1] + B[i + 1, j] + B[i - 1, j])
    return A


# polybench seidel-2d: Gauss-Seidel 9-point stencil, in place (reads values updated this sweep)
def seidel_2d(A, tsteps):
    n = A.shape[0]
    A = A.copy()
    for t in range(tsteps):
        for i in range(1, n - 1):
            for j in range(1, n - 1):
                A[i, j] = (A[i - 1, j - 1] + A[i - 1, j] + A[i - 1, j + 1]
                           + A[i, j - 1] + A[i, j] + A[i, j + 1]
                           + A[i + 1, j - 1] + A[i + 1, j] + A[i + 1, j + 1]) / 9.0
    return A


def _heat_step(src, dst):
    c = src[1:-1, 1:-1, 1:-1]
    dst[1:-1, 1:-1, 1:-1] = (0.125 * (src[2:, 1:-1, 1:-1] - 2.0 * c + src[:-2, 1:-1, 1:-1])
                             + 0.125 * (src[1:-1, 2:, 1:-1] - 2.0 * c + src[1:-1, :-2, 1:-1])
                             + 0.125 * (src[1:-1, 1:-1, 2:] - 2.0 * c + src[1:-1, 1:-1, :-2])
                             + c)


# polybench heat-3d: 3-D slices, a helper writing into the array it is given, roles swapped
def heat_3d(A, tsteps):
    A = A.copy()
    B = A.copy()
    for t in range(tsteps):
        _heat_step(A, B)
        _heat_step(B, A)
    return A


# polybench fdtd-2d: Yee scheme, in-place slice updates reading the other fields
def fdtd_2d(ex, ey, hz, fict):
    ex = ex.copy()
    ey = ey.copy()
    hz = hz.copy()
    for t in range(fict.shape[0]):
        ey[0, :] = fict[t]
        ey[1:, :] -= 0.5 * (hz[1:, :] - hz[:-1, :])
        ex[:, 1:] -= 0.5 * (hz[:, 1:] - hz[:, :-1])
        hz[:-1, :-1] -= 0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1])
    return ex, ey, hz


# polybench adi: alternating-direction implicit sweeps (column then row tridiagonal solves)
def adi(u, dt, tsteps):
    n = u.shape[0]
    u = u.copy()
    v = np.zeros((n, n))
    p = np.zeros((n, n))
    q = np.zeros((n, n))
    DX = 1.0 / n
    DY = 1.0 / n
    B1 = 2.0
    B2 = 1.0
    mul1 = B1 * dt / (DX * DX)
    mul2 = B2 * dt / (DY * DY)
    a = -mul1 / 2.0
    b = 1.0 + mul1
    c = a
    d = -mul2 / 2.0
    e = 1.0 + mul2
    f = d
    for t in range(tsteps):
        for i in range(1, n - 1):
            v[0, i] = 1.0
            p[i, 0] = 0.0
            q[i, 0] = v[0, i]
            for j in range(1, n - 1):
                p[i, j] = -c / (a * p[i, j - 1] + b)
                q[i, j] = (-d * u[j, i - 1] + (1.0 + 2.0 * d) * u[j, i] - f * u[j, i + 1]
                           - a * q[i, j - 1]) / (a * p[i, j - 1] + b)
            v[n - 1, i] = 1.0
            for j in range(n - 2, 0, -1):
                v[j, i] = p[i, j] * v[j + 1, i] + q[i, j]
        for i in range(1, n - 1):
            u[i, 0] = 1.0
            p[i, 0] = 0.0
            q[i, 0] = u[i, 0]
            for j in range(1, n - 1):
                p[i, j] = -f / (d * p[i, j - 1] + e)
                q[i, j] = (-a * v[i - 1, j] + (1.0 + 2.0 * a) * v[i, j] - c * v[i + 1, j]
                           - d * q[i, j - 1]) / (d * p[i, j - 1] + e)
            u[i, n - 1] = 1.0
            for j in range(n - 2, 0, -1):
                u[i, j] = p[i, j] * u[i, j + 1] + q[i, j]
    return u


# =====================================================================================================
# textbook numerical methods
# =====================================================================================================

# Thomas algorithm for a tridiagonal system (conditional expression, negative index)
def thomas(a, b, c, d):
    n = d.shape[0]
    cp = np.empty(n)
    dp = np.empty(n)
    cp[0] = c[0] / b[0]
    dp[0] = d[0] / b[0]
    for i in range(1, n):
        m = b[i] - a[i] * cp[i - 1]
        cp[i] = c[i] / m if i < n - 1 else 0.0
        dp[i] = (d[i] - a[i] * dp[i - 1]) / m
    x = np.empty(n)
    x[-1] = dp[-1]
    for i in range(n - 2, -1, -1):
        x[i] = dp[i] - cp[i] * x[i + 1]
    return x


# natural cubic spline coefficients (Burden & Faires, algorithm 3.4), a slice view returned
def cubic_spline(x, y):
    n = x.shape[0] - 1
    h = x[1:] - x[:-1]
    alpha = np.zeros(n + 1)
    for i in range(1, n):
        alpha[i] = 3.0 / h[i] * (y[i + 1] - y[i]) - 3.0 / h[i - 1] * (y[i] - y[i - 1])
    l = np.ones(n + 1)
    mu = np.zeros(n + 1)
    z = np.zeros(n + 1)
    for i in range(1, n):
        l[i] = 2.0 * (x[i + 1] - x[i - 1]) - h[i - 1] * mu[i - 1]
        mu[i] = h[i] / l[i]
        z[i] = (alpha[i] - h[i - 1] * z[i - 1]) / l[i]
    c = np.zeros(n + 1)
    b = np.zeros(n)
    d = np.zeros(n)
    for j in range(n - 1, -1, -1):
        c[j] = z[j] - mu[j] * c[j + 1]
        b[j] = (y[j + 1] - y[j]) / h[j] - h[j] * (c[j + 1] + 2.0 * c[j]) / 3.0
        d[j] = (c[j + 1] - c[j]) / (3.0 * h[j])
    return b, c[:-1], d


def _integrand(t, p):
    return p[0] * math.exp(-p[1] * t * t) + math.sin(p[2] * t)


# composite Simpson rule of a parametrised integrand (helper, default argument, % on the index)
def simpson(p, a, b, n=N_QUAD):
    h = (b - a) / n
    s = _integrand(a, p) + _integrand(b, p)
    for i in range(1, n):
        w = 4.0 if i % 2 == 1 else 2.0
        s += w * _integrand(a + i * h, p)
    return s * h / 3.0


# trapezoid rule on sampled data (numpy.trapz), whole-array slices
def trapezoid(y, x):
    return 0.5 * np.sum((y[1:] + y[:-1]) * (x[1:] - x[:-1]))


# cumulative trapezoid (scipy's cumulative_trapezoid), output allocated with dtype=y.dtype
def cumtrapz(y, dx):
    out = np.empty(y.shape[0], dtype=y.dtype)
    out[0] = 0.0
    for i in range(1, y.shape[0]):
        out[i] = out[i - 1] + 0.5 * dx * (y[i] + y[i - 1])
    return out


def _lorenz(y, sigma, rho, beta, out):
    out[0] = sigma * (y[1] - y[0])
    out[1] = y[0] * (rho - y[2]) - y[1]
    out[2] = y[0] * y[1] - beta * y[2]


# classical RK4 on the Lorenz system, stage buffers filled by a helper and reused every step
def rk4_lorenz(y0, sigma, rho, beta, dt, nsteps):
    y = y0.copy()
    k1 = np.empty(3)
    k2 = np.empty(3)
    k3 = np.empty(3)
    k4 = np.empty(3)
    for s in range(nsteps):
        _lorenz(y, sigma, rho, beta, k1)
        _lorenz(y + 0.5 * dt * k1, sigma, rho, beta, k2)
        _lorenz(y + 0.5 * dt * k2, sigma, rho, beta, k3)
        _lorenz(y + dt * k3, sigma, rho, beta, k4)
        y += dt / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
    return y


def _osc(q, p, omega, damping, t):
    return p, -omega * omega * q - damping * p + math.sin(t)


# adaptive Heun-Euler (embedded RK12) with step-size control: while loop, rejected steps
def adaptive_heun(q0, p0, omega, damping, t_end, tol=1e-4):
    t = 0.0
    q = q0
    p = p0
    h = 0.05
    while t_end - t > 1e-12:
        if t + h > t_end:
            h = t_end - t
        fq0, fp0 = _osc(q, p, omega, damping, t)
        qe = q + h * fq0
        pe = p + h * fp0
        fq1, fp1 = _osc(qe, pe, omega, damping, t + h)
        qh = q + 0.5 * h * (fq0 + fq1)
        ph = p + 0.5 * h * (fp0 + fp1)
        err = max(abs(qh - qe), abs(ph - pe))
        if err <= tol:
            t += h
            q = qh
            p = ph
        if err == 0.0:
            h = 2.0 * h
        else:
            h = h * min(2.0, max(0.2, 0.9 * math.sqrt(tol / err)))
    return q, p


# Newton's method for Kepler's equation E - e sin E = M, per element, while with a tolerance
def kepler_newton(M, e, tol=1e-12, maxit=50):
    E_out = np.empty_like(M)
    for i in range(M.shape[0]):
        E = M[i] if e < 0.8 else math.pi
        dE = 1.0
        it = 0
        while abs(dE) > tol and it < maxit:
            dE = (E - e * math.sin(E) - M[i]) / (1.0 - e * math.cos(E))
            E -= dE
            it += 1
        E_out[i] = E
    return E_out


# Horner's rule, vectorised over x (numpy.polyval's coefficient order)
def horner(c, x):
    p = np.zeros_like(x)
    for k in range(c.shape[0]):
        p = p * x + c[k]
    return p


# Chebyshev series by Clenshaw's recurrence, tuple assignment b1, b2 = ..., b1
def clenshaw(c, x):
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        b1 = 0.0
        b2 = 0.0
        for k in range(c.shape[0] - 1, 0, -1):
            b1, b2 = 2.0 * x[i] * b1 - b2 + c[k], b1
        out[i] = x[i] * b1 - b2 + c[0]
    return out


# Gauss-Seidel sweeps with split dot products and a convergence break
def gauss_seidel(A, b, sweeps=25, tol=1e-10):
    n = b.shape[0]
    x = np.zeros(n)
    for s in range(sweeps):
        diff = 0.0
        for i in range(n):
            sigma = np.dot(A[i, :i], x[:i]) + np.dot(A[i, i + 1:], x[i + 1:])
            xi = (b[i] - sigma) / A[i, i]
            diff = max(diff, abs(xi - x[i]))
            x[i] = xi
        if diff < tol:
            break
    return x


# power iteration with normalisation and a Rayleigh quotient
def power_iteration(A, iters):
    n = A.shape[0]
    v = np.ones(n) / math.sqrt(n)
    lam = 0.0
    for it in range(iters):
        w = A @ v
        v = w / np.linalg.norm(w)
        lam = v @ (A @ v)
    return lam, v


# Householder QR (Golub & Van Loan 5.2.1), reflectors applied to trailing blocks with np.outer
def householder_qr(A):
    m, n = A.shape
    R = A.copy()
    Q = np.zeros((m, m))
    for i in range(m):
        Q[i, i] = 1.0
    for k in range(n):
        x = R[k:, k].copy()
        nx = np.linalg.norm(x)
        if x[0] >= 0.0:
            x[0] += nx
        else:
            x[0] -= nx
        v = x / np.linalg.norm(x)
        R[k:, k:] -= 2.0 * np.outer(v, v @ R[k:, k:])
        Q[:, k:] -= 2.0 * np.outer(Q[:, k:] @ v, v)
    return Q, R


def _givens(a, b):
    r = math.hypot(a, b)
    return a / r, -b / r


# Givens-rotation QR, rotating pairs of row slices (copies taken before the rotation)
def givens_qr(A):
    m, n = A.shape
    R = A.copy()
    for j in range(n):
        for i in range(m - 1, j, -1):
            c, s = _givens(R[i - 1, j], R[i, j])
            top = R[i - 1, j:].copy()
            bot = R[i, j:].copy()
            R[i - 1, j:] = c * top - s * bot
            R[i, j:] = s * top + c * bot
    return R


# LU with partial pivoting (row swaps through copies and a tuple swap), then back substitution
def lu_solve_pivot(A, b):
    n = A.shape[0]
    M = A.copy()
    r = b.copy()
    for k in range(n - 1):
        p = k
        best = abs(M[k, k])
        for i in range(k + 1, n):
            if abs(M[i, k]) > best:
                best = abs(M[i, k])
                p = i
        if p != k:
            tmp = M[k, :].copy()
            M[k, :] = M[p, :]
            M[p, :] = tmp
            r[k], r[p] = r[p], r[k]
        for i in range(k + 1, n):
            f = M[i, k] / M[k, k]
            M[i, k:] -= f * M[k, k:]
            r[i] -= f * r[k]
    x = np.zeros(n)
    for i in range(n - 1, -1, -1):
        x[i] = (r[i] - np.dot(M[i, i + 1:], x[i + 1:])) / M[i, i]
    return x


# damped Jacobi (Richardson) iteration, the residual buffer written through a second name
def damped_jacobi(A, b, omega, iters):
    n = b.shape[0]
    x = np.zeros_like(b)
    r = np.empty_like(b)
    res = r
    for it in range(iters):
        res[:] = b - A @ x
        for i in range(n):
            x[i] += omega * r[i] / A[i, i]
    return x


# conjugate gradient (Hestenes-Stiefel) on the symmetric part of A, residual test and break in a while
def conjugate_gradient(A, b, tol=1e-10, maxit=50):
    A = 0.5 * (A + A.T)
    x = np.zeros_like(b)
    r = b - A @ x
    p = r.copy()
    rs = r @ r
    k = 0
    while k < maxit:
        Ap = A @ p
        alpha = rs / (p @ Ap)
        x += alpha * p
        r -= alpha * Ap
        rs_new = r @ r
        if math.sqrt(rs_new) < tol:
            break
        p = r + (rs_new / rs) * p
        rs = rs_new
        k += 1
    return x


# matrix exponential by scaling and squaring with a Taylor series (data-dependent scaling count)
def expm_taylor(A, terms=12):
    n = A.shape[0]
    nrm = np.sum(np.abs(A))
    s = 0
    while nrm > 0.5:
        nrm *= 0.5
        s += 1
    X = A / 2.0 ** s
    E = np.zeros((n, n))
    T = np.zeros((n, n))
    for i in range(n):
        E[i, i] = 1.0
        T[i, i] = 1.0
    for k in range(1, terms):
        T = T @ X / k
        E += T
    for i in range(s):
        E = E @ E
    return E


# exp(x) by its Taylor series until the terms are small (while with a relative tolerance)
def taylor_exp(x, tol=1e-14):
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        term = 1.0
        s = 1.0
        k = 1
        while abs(term) > tol * abs(s):
            term *= x[i] / k
            s += term
            k += 1
        out[i] = s
    return out


# Welford's online mean and variance (int counter, tuple result)
def welford(x):
    mean = 0.0
    m2 = 0.0
    n = 0
    for i in range(x.shape[0]):
        n += 1
        delta = x[i] - mean
        mean += delta / n
        m2 += delta * (x[i] - mean)
    return mean, m2 / (n - 1)


# =====================================================================================================
# Numba-benchmark-like kernels
# =====================================================================================================

# n-body accelerations and potential with softening: continue on i == j, row += on a 2-D array
def nbody(pos, mass, soft=0.1):
    n = pos.shape[0]
    acc = np.zeros_like(pos)
    pot = 0.0
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            dx = pos[j] - pos[i]
            r2 = np.sum(dx * dx) + soft * soft
            inv = 1.0 / (r2 * math.sqrt(r2))
            acc[i] += mass[j] * inv * dx
            if j > i:
                pot -= mass[i] * mass[j] / math.sqrt(r2)
    return acc, pot


def _cnd_erf(d):
    return 0.5 * (1.0 + math.erf(d / SQRT2))


# Black-Scholes call and put, per-option loop with math.erf (scalar style)
def black_scholes(S, K, T, r, sigma):
    n = S.shape[0]
    call = np.empty(n)
    put = np.empty(n)
    for i in range(n):
        sq = sigma * math.sqrt(T[i])
        d1 = (math.log(S[i] / K[i]) + (r + 0.5 * sigma * sigma) * T[i]) / sq
        d2 = d1 - sq
        disc = math.exp(-r * T[i])
        call[i] = S[i] * _cnd_erf(d1) - K[i] * disc * _cnd_erf(d2)
        put[i] = K[i] * disc * _cnd_erf(-d2) - S[i] * _cnd_erf(-d1)
    return call, put


def _cnd_poly(d):
    K = 1.0 / (1.0 + 0.2316419 * np.abs(d))
    ret = RSQRT2PI * np.exp(-0.5 * d * d) * (K * (A1 + K * (A2 + K * (A3 + K * (A4 + K * A5)))))
    return np.where(d > 0, 1.0 - ret, ret)


# Black-Scholes, whole-array form with the polynomial CND of the Numba examples (np.where)
def black_scholes_vec(S, K, T, r, v):
    sqrtT = np.sqrt(T)
    d1 = (np.log(S / K) + (r + 0.5 * v * v) * T) / (v * sqrtT)
    d2 = d1 - v * sqrtT
    cndd1 = _cnd_poly(d1)
    cndd2 = _cnd_poly(d2)
    expRT = np.exp(-r * T)
    call = S * cndd1 - K * expRT * cndd2
    put = K * expRT * (1.0 - cndd2) - S * (1.0 - cndd1)
    return call, put


# Monte-Carlo arithmetic Asian call with pre-drawn normals, scalar path loops, payoff by if
def mc_asian(S0, r, sigma, T, K, Z):
    npaths, nsteps = Z.shape
    dt = T / nsteps
    drift = (r - 0.5 * sigma * sigma) * dt
    vol = sigma * math.sqrt(dt)
    total = 0.0
    for p in range(npaths):
        S = S0
        avg = 0.0
        for t in range(nsteps):
            S = S * math.exp(drift + vol * Z[p, t])
            avg += S
        avg /= nsteps
        if avg > K:
            total += avg - K
    return math.exp(-r * T) * total / npaths


# Monte-Carlo European call, all paths as one array stepped through time (column slices, np.maximum)
def mc_european_vec(S0, r, sigma, T, K, Z):
    npaths, nsteps = Z.shape
    dt = T / nsteps
    S = np.full(npaths, S0)
    for t in range(nsteps):
        S *= np.exp((r - 0.5 * sigma ** 2) * dt + sigma * math.sqrt(dt) * Z[:, t])
    payoff = np.maximum(S - K, 0.0)
    return math.exp(-r * T) * np.mean(payoff)


# Laplace equation by Jacobi relaxation until the update is small (while, np.max of |change|)
def laplace_jacobi(u0, tol=1e-4, maxit=500):
    u = u0.copy()
    err = 1.0
    it = 0
    while err > tol and it < maxit:
        un = u.copy()
        un[1:-1, 1:-1] = 0.25 * (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2])
        err = np.max(np.abs(un - u))
        u = un
        it += 1
    return u


# soft k-means: responsibilities from a softmax of distances, centroid update with axis sums
def soft_kmeans(X, C0, beta, iters):
    C = C0.copy()
    n = X.shape[0]
    k = C.shape[0]
    for it in range(iters):
        D = np.zeros((n, k))
        for j in range(k):
            diff = X - C[j]
            D[:, j] = np.sum(diff * diff, axis=1)
        W = np.exp(-beta * D)
        W /= np.sum(W, axis=1)[:, np.newaxis]
        for j in range(k):
            C[j] = np.sum(W[:, j:j + 1] * X, axis=0) / np.sum(W[:, j])
    return C


# pairwise distances by broadcasting through np.newaxis (a smoothing epsilon under the sqrt)
def pairwise_dist(X):
    diff = X[:, np.newaxis, :] - X[np.newaxis, :, :]
    return np.sqrt(np.sum(diff * diff, axis=2) + 1e-3)


# pairwise distances, the Numba benchmark's triple loop, output of the input's dtype
def pairwise_loops(X, Y):
    M = X.shape[0]
    N = Y.shape[0]
    D = X.shape[1]
    out = np.empty((M, N), dtype=X.dtype)
    for i in range(M):
        for j in range(N):
            d = 0.0
            for k in range(D):
                tmp = X[i, k] - Y[j, k]
                d += tmp * tmp
            out[i, j] = np.sqrt(d)
    return out


# rolling mean over a moving window slice (pandas rolling(w).mean())
def rolling_mean(x, w):
    n = x.shape[0]
    out = np.empty(n - w + 1)
    for i in range(n - w + 1):
        out[i] = np.mean(x[i:i + w])
    return out


# exponentially weighted moving average, pandas' adjust=False recurrence
def ewma(x, alpha):
    out = np.empty_like(x)
    out[0] = x[0]
    for i in range(1, x.shape[0]):
        out[i] = alpha * x[i] + (1.0 - alpha) * out[i - 1]
    return out


# L2-regularised logistic regression loss, whole-array
def logreg_loss(w, b, X, y, lam):
    z = X @ w + b
    loss = np.sum(np.log1p(np.exp(-y * z))) / X.shape[0]
    return loss + 0.5 * lam * np.dot(w, w)


# logistic regression trained by unrolled gradient descent (w -= lr * g), differentiated end to end
def logreg_train(w0, X, y, lr, steps):
    w = w0.copy()
    n = X.shape[0]
    for s in range(steps):
        z = X @ w
        p = 1.0 / (1.0 + np.exp(-z))
        g = X.T @ (p - y) / n
        w -= lr * g
    return w


# softmax cross-entropy with integer labels, stabilised by the row max
def softmax_xent(logits, labels):
    n = logits.shape[0]
    loss = 0.0
    for i in range(n):
        m = np.max(logits[i])
        e = np.exp(logits[i] - m)
        loss += math.log(np.sum(e)) + m - logits[i, labels[i]]
    return loss / n


# 1-D convolution ("valid"), flipped kernel, accumulating into the output
def conv1d(x, k):
    n = x.shape[0]
    m = k.shape[0]
    out = np.zeros(n - m + 1)
    for i in range(n - m + 1):
        for j in range(m):
            out[i] += x[i + j] * k[m - 1 - j]
    return out


# 2-D correlation ("same" with zero padding), windows of a padded copy
def conv2d(img, ker):
    H, W = img.shape
    kh, kw = ker.shape
    ph = kh // 2
    pw = kw // 2
    padded = np.zeros((H + 2 * ph, W + 2 * pw), dtype=img.dtype)
    padded[ph:ph + H, pw:pw + W] = img
    out = np.empty_like(img)
    for i in range(H):
        for j in range(W):
            out[i, j] = np.sum(padded[i:i + kh, j:j + kw] * ker)
    return out


# IIR biquad, transposed direct form II (state in two scalars)
def biquad(x, b0, b1, b2, a1, a2):
    y = np.empty_like(x)
    z1 = 0.0
    z2 = 0.0
    for n in range(x.shape[0]):
        out = b0 * x[n] + z1
        z1 = b1 * x[n] - a1 * out + z2
        z2 = b2 * x[n] - a2 * out
        y[n] = out
    return y


# DFT power spectrum with explicit cos/sin loops (np.pi, integer floor division)
def dft_power(x):
    N = x.shape[0]
    P = np.empty(N // 2 + 1)
    for k in range(N // 2 + 1):
        re = 0.0
        im = 0.0
        for n in range(N):
            ang = 2.0 * np.pi * k * n / N
            re += x[n] * math.cos(ang)
            im -= x[n] * math.sin(ang)
        P[k] = re * re + im * im
    return P


# Goertzel algorithm for the power at one frequency (differentiated w.r.t. the frequency too)
def goertzel(x, freq, fs):
    w = 2.0 * math.pi * freq / fs
    coeff = 2.0 * math.cos(w)
    s1 = 0.0
    s2 = 0.0
    for n in range(x.shape[0]):
        s0 = x[n] + coeff * s1 - s2
        s2 = s1
        s1 = s0
    return s1 * s1 + s2 * s2 - coeff * s1 * s2


# =====================================================================================================
# small physics codes
# =====================================================================================================

def _spring_forces(x, k, L0, out):
    out[:] = 0.0
    for i in range(x.shape[0] - 1):
        f = k * (x[i + 1] - x[i] - L0)
        out[i] += f
        out[i + 1] -= f


# spring-mass chain by velocity Verlet, forces written into a reused buffer by a helper
def spring_chain(x0, v0, k, m, dt, steps, L0=1.0):
    x = x0.copy()
    v = v0.copy()
    f = np.zeros_like(x)
    _spring_forces(x, k, L0, f)
    for s in range(steps):
        v += 0.5 * dt * f / m
        x += dt * v
        _spring_forces(x, k, L0, f)
        v += 0.5 * dt * f / m
    return x, v


# 1-D wave equation, leapfrog with three buffers rotated by tuple assignment
def wave_1d(u0, c, dt, dx, steps):
    C2 = (c * dt / dx) ** 2
    u_prev = u0.copy()
    u = u0.copy()
    u[1:-1] = u0[1:-1] + 0.5 * C2 * (u0[2:] - 2.0 * u0[1:-1] + u0[:-2])
    u_next = np.zeros_like(u0)
    for s in range(steps):
        u_next[1:-1] = 2.0 * u[1:-1] - u_prev[1:-1] + C2 * (u[2:] - 2.0 * u[1:-1] + u[:-2])
        u_prev, u, u_next = u, u_next, u_prev
    return u


def _w_cubic(r, h):
    q = r / h
    sigma = 10.0 / (7.0 * math.pi * h * h)
    if q < 1.0:
        return sigma * (1.0 - 1.5 * q * q + 0.75 * q * q * q)
    elif q < 2.0:
        return sigma * 0.25 * (2.0 - q) ** 3
    return 0.0


# SPH density summation with the 2-D cubic spline kernel (helper with if/elif and early returns)
def sph_density(pos, mass, h):
    n = pos.shape[0]
    rho = np.empty(n)
    for i in range(n):
        rho[i] = mass[i] * _w_cubic(0.0, h)
        for j in range(n):
            if j == i:
                continue
            dx = pos[i, 0] - pos[j, 0]
            dy = pos[i, 1] - pos[j, 1]
            rho[i] += mass[j] * _w_cubic(math.sqrt(dx * dx + dy * dy), h)
    return rho


def _pend_rhs(state, g, L):
    th, om = state
    return om, -(g / L) * math.sin(th)


def _rk4_step(state, dt, g, L):
    th, om = state
    k1 = _pend_rhs(state, g, L)
    k2 = _pend_rhs((th + 0.5 * dt * k1[0], om + 0.5 * dt * k1[1]), g, L)
    k3 = _pend_rhs((th + 0.5 * dt * k2[0], om + 0.5 * dt * k2[1]), g, L)
    k4 = _pend_rhs((th + dt * k3[0], om + dt * k3[1]), g, L)
    return (th + dt / 6.0 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0]),
            om + dt / 6.0 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1]))


# nonlinear pendulum by RK4 with the state carried as a tuple through helpers
def pendulum_rk4(theta0, omega0, L, dt, steps):
    state = (theta0, omega0)
    for s in range(steps):
        state = _rk4_step(state, dt, GRAV, L)
    return state


# Lennard-Jones energy with a cutoff (continue beyond it), row differences and d @ d
def lj_energy(pos, eps, sigma):
    n = pos.shape[0]
    e = 0.0
    rc2 = (RCUT * sigma) ** 2
    for i in range(n - 1):
        for j in range(i + 1, n):
            d = pos[i] - pos[j]
            r2 = d @ d
            if r2 > rc2:
                continue
            sr6 = (sigma * sigma / r2) ** 3
            e += 4.0 * eps * (sr6 * sr6 - sr6)
    return e


# SIR epidemic model by forward Euler, default arguments, int(days / dt) steps, cumulative incidence
def sir(beta, gamma, days, S0=0.99, I0=0.01, dt=0.1):
    S = S0
    I = I0
    R = 0.0
    steps = int(days / dt)
    incidence = 0.0
    for k in range(steps):
        new_inf = beta * S * I
        dS = -new_inf
        dI = new_inf - gamma * I
        S += dt * dS
        I += dt * dI
        R += dt * gamma * I
        incidence += dt * new_inf
    return S, I, R, incidence


# =====================================================================================================
# small ML codes
# =====================================================================================================

# two-layer MLP (tanh hidden layer) and squared loss, all loops, hidden buffer reused per sample
def mlp_loops(X, W1, b1, W2, b2, y):
    n, d = X.shape
    h = W1.shape[1]
    loss = 0.0
    hid = np.empty(h)
    for s in range(n):
        for j in range(h):
            a = b1[j]
            for i in range(d):
                a += X[s, i] * W1[i, j]
            hid[j] = math.tanh(a)
        out = b2
        for j in range(h):
            out += hid[j] * W2[j]
        loss += 0.5 * (out - y[s]) ** 2
    return loss / n


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


# LSTM cell stepped over a sequence: gates from slices of one pre-activation, h written per row
def lstm_seq(xs, h0, c0, Wx, Wh, b):
    H = h0.shape[0]
    h = h0.copy()
    c = c0.copy()
    hs = np.zeros((xs.shape[0], H))
    for t in range(xs.shape[0]):
        z = Wx @ xs[t] + Wh @ h + b
        i = _sigmoid(z[:H])
        f = _sigmoid(z[H:2 * H])
        o = _sigmoid(z[2 * H:3 * H])
        g = np.tanh(z[3 * H:])
        c = f * c + i * g
        h = o * np.tanh(c)
        hs[t] = h
    return hs, c


# scaled dot-product attention: Q K^T, row-max subtraction in place, softmax with newaxis, @ V
def attention(Q, K, V):
    d = Q.shape[1]
    S = Q @ K.T / math.sqrt(d)
    for i in range(S.shape[0]):
        S[i] -= np.max(S[i])
    P = np.exp(S)
    P /= np.sum(P, axis=1)[:, np.newaxis]
    return P @ V


# batch normalisation (training mode) with axis=0 reductions and a default epsilon
def batch_norm(x, gamma, beta, eps=1e-5):
    n = x.shape[0]
    mu = np.sum(x, axis=0) / n
    xc = x - mu
    var = np.sum(xc * xc, axis=0) / n
    xhat = xc / np.sqrt(var + eps)
    return gamma * xhat + beta


# layer normalisation with axis=1 reductions broadcast back through np.newaxis, module switch
def layer_norm(x, gamma, beta):
    d = x.shape[1]
    if CENTERED:
        mu = np.sum(x, axis=1) / d
        xc = x - mu[:, np.newaxis]
    else:
        xc = x.copy()
    var = np.sum(xc * xc, axis=1) / d
    return xc / np.sqrt(var + 1e-5)[:, np.newaxis] * gamma + beta


# Sinkhorn iterations for entropic optimal transport, K.T @ u, transport cost
def sinkhorn(C, a, b, eps, iters):
    K = np.exp(-C / eps)
    u = np.ones_like(a)
    v = np.ones_like(b)
    for it in range(iters):
        u = a / (K @ v)
        v = b / (K.T @ u)
    P = u[:, np.newaxis] * K * v[np.newaxis, :]
    return np.sum(P * C)


# Adam on a quadratic, moments updated in place (m *= b1; m += ...), unrolled end to end
def adam_quadratic(w0, A, lr, steps, beta1=0.9, beta2=0.999, eps=1e-8):
    w = w0.copy()
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for t in range(1, steps + 1):
        g = A @ w - 1.0
        m *= beta1
        m += (1.0 - beta1) * g
        v *= beta2
        v += (1.0 - beta2) * g * g
        mhat = m / (1.0 - beta1 ** t)
        vhat = v / (1.0 - beta2 ** t)
        w -= lr * mhat / (np.sqrt(vhat) + eps)
    return 0.5 * w @ A @ w - np.sum(w)


# =====================================================================================================
# dynamic programming, sorting, filtering, statistics
# =====================================================================================================

# Floyd-Warshall all-pairs shortest paths, relaxation by if (piecewise linear in the weights)
def floyd_warshall(W):
    n = W.shape[0]
    D = W.copy()
    for k in range(n):
        for i in range(n):
            for j in range(n):
                if D[i, k] + D[k, j] < D[i, j]:
                    D[i, j] = D[i, k] + D[k, j]
    return D


# dynamic time warping, np.full with np.inf borders, min of three by ifs
def dtw(x, y):
    n = x.shape[0]
    m = y.shape[0]
    D = np.full((n + 1, m + 1), np.inf)
    D[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            cost = (x[i - 1] - y[j - 1]) ** 2
            best = D[i - 1, j - 1]
            if D[i - 1, j] < best:
                best = D[i - 1, j]
            if D[i, j - 1] < best:
                best = D[i, j - 1]
            D[i, j] = cost + best
    return D[n, m]


# bubble sort with element swaps by tuple assignment and an early-exit break, then a weighted sum
def bubble_sort_weighted(x, w):
    a = x.copy()
    n = a.shape[0]
    for i in range(n):
        swapped = False
        for j in range(n - 1 - i):
            if a[j] > a[j + 1]:
                a[j], a[j + 1] = a[j + 1], a[j]
                swapped = True
        if not swapped:
            break
    return np.sum(a * w)


# insertion sort, inner while with a data-dependent trip count and short-circuit `and`
def insertion_sort(x):
    a = x.copy()
    for i in range(1, a.shape[0]):
        key = a[i]
        j = i - 1
        while j >= 0 and a[j] > key:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = key
    return a


# Cox-Ross-Rubinstein binomial tree for a European put, overlapping slice update V[:i+1] = f(V[1:i+2])
def binomial_put(S0, K, r, sigma, T, steps):
    dt = T / steps
    u = math.exp(sigma * math.sqrt(dt))
    d = 1.0 / u
    p = (math.exp(r * dt) - d) / (u - d)
    disc = math.exp(-r * dt)
    V = np.empty(steps + 1)
    for j in range(steps + 1):
        ST = S0 * u ** j * d ** (steps - j)
        V[j] = max(K - ST, 0.0)
    for i in range(steps - 1, -1, -1):
        V[:i + 1] = disc * (p * V[1:i + 2] + (1.0 - p) * V[:i + 1])
    return V[0]


def _logsumexp(v):
    m = np.max(v)
    return m + math.log(np.sum(np.exp(v - m)))


# HMM forward algorithm in log space, integer observations indexing columns
def hmm_forward(log_pi, log_A, log_B, obs):
    T = obs.shape[0]
    S = log_pi.shape[0]
    alpha = log_pi + log_B[:, obs[0]]
    for t in range(1, T):
        new = np.empty(S)
        for j in range(S):
            new[j] = _logsumexp(alpha + log_A[:, j]) + log_B[j, obs[t]]
        alpha = new
    return _logsumexp(alpha)


# scalar Kalman filter for a random walk, negative log-likelihood, default initial state
def kalman_1d(zs, q, r, x0=0.0, p0=1.0):
    x = x0
    P = p0
    nll = 0.0
    for k in range(zs.shape[0]):
        P = P + q
        S = P + r
        K = P / S
        innov = zs[k] - x
        nll += 0.5 * (math.log(2 * math.pi * S) + innov * innov / S)
        x = x + K * innov
        P = (1.0 - K) * P
    return x, nll


# total-variation denoising energy (ROF) with forward differences on shifted 2-D slices
def tv_energy(u, f, lam):
    dx = u[1:, :-1] - u[:-1, :-1]
    dy = u[:-1, 1:] - u[:-1, :-1]
    tv = np.sum(np.sqrt(dx * dx + dy * dy + 1e-6))
    return 0.5 * np.sum((u - f) ** 2) + lam * tv


# bilinear interpolation on a grid (int() of the coordinates picks the cell)
def bilinear(grid, xs, ys):
    out = np.empty(xs.shape[0])
    for k in range(xs.shape[0]):
        i = int(xs[k])
        j = int(ys[k])
        tx = xs[k] - i
        ty = ys[k] - j
        out[k] = ((1 - tx) * (1 - ty) * grid[i, j] + tx * (1 - ty) * grid[i + 1, j]
                  + (1 - tx) * ty * grid[i, j + 1] + tx * ty * grid[i + 1, j + 1])
    return out


# expanding-window z-score, growing slice x[:i+1] bound to a name
def expanding_zscore(x):
    out = np.zeros_like(x)
    for i in range(1, x.shape[0]):
        w = x[:i + 1]
        mu = np.sum(w) / (i + 1)
        sd = math.sqrt(np.sum((w - mu) ** 2) / i)
        out[i] = (x[i] - mu) / sd
    return out


def _chol_lower(A):
    n = A.shape[0]
    L = np.zeros_like(A)
    for j in range(n):
        s = A[j, j] - np.dot(L[j, :j], L[j, :j])
        L[j, j] = math.sqrt(s)
        for i in range(j + 1, n):
            L[i, j] = (A[i, j] - np.dot(L[i, :j], L[j, :j])) / L[j, j]
    return L


def _forward_sub(L, b, out):
    for i in range(b.shape[0]):
        out[i] = (b[i] - np.dot(L[i, :i], out[:i])) / L[i, i]


# Gaussian-process negative log marginal likelihood (RBF kernel, Cholesky and solve helpers)
def gp_nll(x, y, ell, sf2, sn2):
    n = x.shape[0]
    d = x[:, np.newaxis] - x[np.newaxis, :]
    K = sf2 * np.exp(-0.5 * d * d / (ell * ell))
    for i in range(n):
        K[i, i] += sn2
    L = _chol_lower(K)
    alpha = np.empty(n)
    _forward_sub(L, y, alpha)
    logdet = 0.0
    for i in range(n):
        logdet += math.log(L[i, i])
    return 0.5 * alpha @ alpha + logdet + 0.5 * n * math.log(2.0 * math.pi)


# least-squares polynomial fit by the normal equations: Vandermonde columns, Cholesky, two solves
def polyfit_normal(x, y, deg):
    n = x.shape[0]
    V = np.empty((n, deg + 1))
    V[:, 0] = 1.0
    for k in range(1, deg + 1):
        V[:, k] = V[:, k - 1] * x
    G = V.T @ V
    rhs = V.T @ y
    L = _chol_lower(G)
    z = np.empty(deg + 1)
    _forward_sub(L, rhs, z)
    c = np.empty(deg + 1)
    for i in range(deg, -1, -1):
        c[i] = (z[i] - np.dot(L[i + 1:, i], c[i + 1:])) / L[i, i]
    return c


# value iteration for a small MDP until the sup-norm change is below tol (max over actions by if)
def value_iteration(R, P, gamma, tol=1e-8):
    ns, na = R.shape
    V = np.zeros(ns)
    diff = 1.0
    while diff > tol:
        Vn = np.empty(ns)
        for s in range(ns):
            best = -1e300
            for a in range(na):
                q = R[s, a] + gamma * np.dot(P[s, a], V)
                if q > best:
                    best = q
            Vn[s] = best
        diff = np.max(np.abs(Vn - V))
        V = Vn
    return V


def _bs_call_vega(S, K, T, r, sigma):
    sq = sigma * math.sqrt(T)
    d1 = (math.log(S / K) + (r + 0.5 * sigma * sigma) * T) / sq
    d2 = d1 - sq
    call = S * _cnd_erf(d1) - K * math.exp(-r * T) * _cnd_erf(d2)
    vega = S * math.exp(-0.5 * d1 * d1) / math.sqrt(2.0 * math.pi) * math.sqrt(T)
    return call, vega


# implied volatility by Newton's method with an early return from inside the loop
def implied_vol(price, S, K, T, r, sigma0=0.3):
    sigma = sigma0
    for it in range(50):
        call, vega = _bs_call_vega(S, K, T, r, sigma)
        diff = call - price
        if abs(diff) < 1e-10:
            return sigma
        sigma -= diff / vega
    return sigma


# single-precision saxpy-style loop, output allocated with the input's dtype
def saxpy_f32(a, x, y):
    out = np.empty(x.shape[0], dtype=x.dtype)
    for i in range(x.shape[0]):
        out[i] = a * x[i] + y[i]
    return out * out


# =====================================================================================================
# second batch: more styles (cell lists and index arrays, back-pointers, soft minima, step-size
# control, early returns, helpers writing into their arguments, row views, float32 rows, None)
# =====================================================================================================

# ---- module-level constants of the second batch -----------------------------------------------------

POLY6 = 1.5915494309189535     # 4 / (pi h^8) without the h (2-D poly6 normalisation, simplified)
INV_SQRT2 = 0.7071067811865476
LOG2PI = 1.8378770664093453
MAXIT = 40             # default iteration cap (cg_early_return)
NSMOOTH = 2            # default number of smoothing sweeps (two_grid)


# ---- particles --------------------------------------------------------------------------------------

# SPH density with a linked-cell list (head/next integer arrays, while over the chain)
def sph_cell_list(pos, mass, h, box):
    n = pos.shape[0]
    nc = int(box / h)
    head = np.full(nc * nc, -1, dtype=np.int64)
    nxt = np.full(n, -1, dtype=np.int64)
    cell = np.empty(n, dtype=np.int64)
    for i in range(n):
        cx = min(int(pos[i, 0] / h), nc - 1)
        cy = min(int(pos[i, 1] / h), nc - 1)
        c = cx * nc + cy
        cell[i] = c
        nxt[i] = head[c]
        head[c] = i
    rho = np.zeros(n)
    h2 = h * h
    for i in range(n):
        cx = cell[i] // nc
        cy = cell[i] % nc
        for dx in range(-1, 2):
            for dy in range(-1, 2):
                ax = cx + dx
                ay = cy + dy
                if ax < 0 or ax >= nc or ay < 0 or ay >= nc:
                    continue
                j = head[ax * nc + ay]
                while j >= 0:
                    rx = pos[i, 0] - pos[j, 0]
                    ry = pos[i, 1] - pos[j, 1]
                    r2 = rx * rx + ry * ry
                    if r2 < h2:
                        w = h2 - r2
                        rho[i] += POLY6 * mass[j] * w * w * w
                    j = nxt[j]
    return rho


# bootstrap particle filter, systematic resampling from passed-in offsets (index array gather)
def particle_filter(p0, zs, noise, offsets, sigma):
    n = p0.shape[0]
    T = zs.shape[0]
    p = p0.copy()
    loglik = 0.0
    for t in range(T):
        p = 0.9 * p + noise[t]
        w = np.exp(-0.5 * ((zs[t] - p) / sigma) ** 2) / (sigma * math.sqrt(2.0 * math.pi))
        tot = np.sum(w)
        loglik += math.log(tot / n)
        cw = np.cumsum(w / tot)
        idx = np.empty(n, dtype=np.int64)
        j = 0
        for k in range(n):
            u = (offsets[t] + k) / n
            while j < n - 1 and cw[j] < u:
                j += 1
            idx[k] = j
        p = p[idx]
    return loglik, np.mean(p)


# ---- filtering and dynamic programming --------------------------------------------------------------

def _inv2(M):
    det = M[0, 0] * M[1, 1] - M[0, 1] * M[1, 0]
    out = np.empty((2, 2))
    out[0, 0] = M[1, 1] / det
    out[1, 1] = M[0, 0] / det
    out[0, 1] = -M[0, 1] / det
    out[1, 0] = -M[1, 0] / det
    return out, det


# 2-D constant-velocity Kalman filter on 2-D observations, matrix form, helper returning a tuple
def kalman_cv(zs, q, r, dt):
    F = np.eye(2)
    F[0, 1] = dt
    Q = np.empty((2, 2))
    Q[0, 0] = q * dt ** 3 / 3.0
    Q[0, 1] = q * dt ** 2 / 2.0
    Q[1, 0] = Q[0, 1]
    Q[1, 1] = q * dt
    x = np.zeros(2)
    P = np.eye(2)
    nll = 0.0
    for k in range(zs.shape[0]):
        x = F @ x
        P = F @ P @ F.T + Q
        S = P.copy()
        S[0, 0] += r
        S[1, 1] += r
        Sinv, det = _inv2(S)
        innov = zs[k] - x
        K = P @ Sinv
        x = x + K @ innov
        P = (np.eye(2) - K) @ P
        nll += 0.5 * (math.log(det) + innov @ Sinv @ innov) + LOG2PI
    return nll, x


# HMM Viterbi in log space: psi back-pointers (int 2-D), backtracking with a reversed loop
def viterbi(log_pi, log_A, log_B, obs):
    T = obs.shape[0]
    S = log_pi.shape[0]
    delta = np.empty((T, S))
    psi = np.zeros((T, S), dtype=np.int64)
    delta[0] = log_pi + log_B[:, obs[0]]
    for t in range(1, T):
        for j in range(S):
            best = delta[t - 1, 0] + log_A[0, j]
            arg = 0
            for i in range(1, S):
                v = delta[t - 1, i] + log_A[i, j]
                if v > best:
                    best = v
                    arg = i
            delta[t, j] = best + log_B[j, obs[t]]
            psi[t, j] = arg
    path = np.empty(T, dtype=np.int64)
    last = delta[T - 1]
    k = 0
    for j in range(1, S):
        if last[j] > last[k]:
            k = j
    path[T - 1] = k
    for t in range(T - 1, 0, -1):
        path[t - 1] = psi[t, path[t]]
    return delta[T - 1, k], path


# soft-DTW (Cuturi & Blondel): soft-min of three by hand, R bordered with a large constant
def soft_dtw(x, y, gamma):
    n = x.shape[0]
    m = y.shape[0]
    R = np.full((n + 1, m + 1), 1e10)
    R[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            d = (x[i - 1] - y[j - 1]) ** 2
            a = -R[i - 1, j - 1] / gamma
            b = -R[i - 1, j] / gamma
            c = -R[i, j - 1] / gamma
            mx = max(a, max(b, c))
            s = math.exp(a - mx) + math.exp(b - mx) + math.exp(c - mx)
            R[i, j] = d - gamma * (math.log(s) + mx)
    return R[n, m]


# Smith-Waterman local alignment score with soft similarities and max(0, ...)
def smith_waterman(a, b, gap, temp):
    n = a.shape[0]
    m = b.shape[0]
    H = np.zeros((n + 1, m + 1))
    best = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            sim = 2.0 * math.exp(-(a[i - 1] - b[j - 1]) ** 2 / temp) - 1.0
            h = max(0.0, H[i - 1, j - 1] + sim, H[i - 1, j] - gap, H[i, j - 1] - gap)
            H[i, j] = h
            if h > best:
                best = h
    return best


# American put on a CRR tree, one value array overwritten element by element (reads V[j+1] first)
def american_put(S0, K, r, sigma, T, steps):
    dt = T / steps
    u = math.exp(sigma * math.sqrt(dt))
    d = 1.0 / u
    p = (math.exp(r * dt) - d) / (u - d)
    disc = math.exp(-r * dt)
    V = np.empty(steps + 1)
    for j in range(steps + 1):
        V[j] = max(K - S0 * u ** (2 * j - steps), 0.0)
    for i in range(steps - 1, -1, -1):
        for j in range(i + 1):
            cont = disc * (p * V[j + 1] + (1.0 - p) * V[j])
            ex = K - S0 * u ** (2 * j - i)
            V[j] = cont if cont > ex else ex
    return V[0]


# ---- linear algebra ---------------------------------------------------------------------------------

# Cholesky-Banachiewicz (row by row, scalar loops), log-determinant and a solve with reversed loop
def cholesky_row_solve(A, b):
    n = A.shape[0]
    L = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1):
            s = 0.0
            for k in range(j):
                s += L[i, k] * L[j, k]
            if i == j:
                L[i, j] = math.sqrt(A[i, i] - s)
            else:
                L[i, j] = (A[i, j] - s) / L[j, j]
    y = b.copy()
    for i in range(n):
        for k in range(i):
            y[i] -= L[i, k] * y[k]
        y[i] /= L[i, i]
    x = y
    for i in range(n - 1, -1, -1):
        for k in range(i + 1, n):
            x[i] -= L[k, i] * x[k]
        x[i] /= L[i, i]
    logdet = 0.0
    for i in range(n):
        logdet += 2.0 * math.log(L[i, i])
    return x, logdet


def _rotate(R, i, k, c, s):
    for j in range(R.shape[1]):
        a = R[i, j]
        b = R[k, j]
        R[i, j] = c * a + s * b
        R[k, j] = -s * a + c * b


# Givens QR: rotations applied by a helper that writes into the matrices it is given (R and Q^T)
def givens_helper_qr(A):
    m, n = A.shape
    R = A.copy()
    Qt = np.eye(m)
    for j in range(n):
        for i in range(m - 1, j, -1):
            a = R[i - 1, j]
            b = R[i, j]
            r = math.hypot(a, b)
            c = a / r
            s = b / r
            _rotate(R, i - 1, i, c, s)
            _rotate(Qt, i - 1, i, c, s)
    return R, Qt


def _reflect(v, M):
    for j in range(M.shape[1]):
        col = M[:, j]
        col -= 2.0 * (v @ col) * v


# Householder reflection of a vector onto e1, applied to the columns of a matrix through a helper
def householder_apply(x, M):
    v = x.copy()
    v[0] += math.copysign(np.linalg.norm(x), x[0])
    v /= np.linalg.norm(v)
    R = M.copy()
    _reflect(v, R)
    return R


# conjugate gradient with an early return from inside the for loop (tuple with an int count)
def cg_early_return(A0, b, tol=1e-9, maxit=MAXIT):
    A = 0.5 * (A0 + A0.T)
    x = np.zeros_like(b)
    r = b - A @ x
    p = r.copy()
    rr = r @ r
    for k in range(maxit):
        Ap = A @ p
        alpha = rr / (p @ Ap)
        x += alpha * p
        r -= alpha * Ap
        rr_new = r @ r
        if math.sqrt(rr_new) < tol:
            return x, k + 1
        p = r + (rr_new / rr) * p
        rr = rr_new
    return x, maxit


def _lm_residual(p, t, y):
    return p[0] * np.exp(-p[1] * t) + p[2] - y


def _gauss_solve(M, v):
    n = v.shape[0]
    for k in range(n):
        for i in range(k + 1, n):
            f = M[i, k] / M[k, k]
            M[i, k:] -= f * M[k, k:]
            v[i] -= f * v[k]
    x = np.zeros(n)
    for i in range(n - 1, -1, -1):
        x[i] = (v[i] - np.dot(M[i, i + 1:], x[i + 1:])) / M[i, i]
    return x


# Levenberg-Marquardt on y = a exp(-b t) + c: normal equations solved by a Gaussian elimination helper
def levenberg_marquardt(p0, t, y, lam0, iters):
    p = p0.copy()
    lam = lam0
    r = _lm_residual(p, t, y)
    cost = 0.5 * (r @ r)
    for it in range(iters):
        e = np.exp(-p[1] * t)
        J = np.empty((t.shape[0], 3))
        J[:, 0] = e
        J[:, 1] = -p[0] * t * e
        J[:, 2] = 1.0
        A = J.T @ J
        for i in range(3):
            A[i, i] *= 1.0 + lam
        g = -(J.T @ r)
        delta = _gauss_solve(A, g)
        pn = p + delta
        rn = _lm_residual(pn, t, y)
        cn = 0.5 * (rn @ rn)
        if cn < cost:
            p = pn
            r = rn
            cost = cn
            lam *= 0.3
        else:
            lam *= 2.0
    return p, cost


# Haar wavelet transform: a while loop halving the length, overlapping write x[:2h] = (a, d)
def haar(x):
    y = x.copy()
    n = y.shape[0]
    while n > 1:
        h = n // 2
        a = (y[0:n:2] + y[1:n:2]) * INV_SQRT2
        d = (y[0:n:2] - y[1:n:2]) * INV_SQRT2
        y[:h] = a
        y[h:n] = d
        n = h
    return y


# ---- PDE smoothers and ODE integrators --------------------------------------------------------------

# red-black SOR for the 2-D Poisson equation, step-2 inner loop whose start depends on the colour
def sor_redblack(f, h, omega, sweeps):
    n = f.shape[0]
    u = np.zeros_like(f)
    for s in range(sweeps):
        for color in range(2):
            for i in range(1, n - 1):
                start = 1 + (i + color) % 2
                for j in range(start, n - 1, 2):
                    gs = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - h * h * f[i, j])
                    u[i, j] = (1.0 - omega) * u[i, j] + omega * gs
    return u


def _smooth(u, f, h2, nu, w=0.6666666666666666):
    for k in range(nu):
        u[1:-1] = (1.0 - w) * u[1:-1] + w * 0.5 * (u[:-2] + u[2:] + h2 * f[1:-1])


# two-grid cycle for -u'' = f: in-place weighted-Jacobi helper, full weighting by step-2 slices, even/odd prolongation
def two_grid(f, nu=NSMOOTH, cycles=2):
    n = f.shape[0]
    h = 1.0 / (n - 1)
    u = np.zeros(n)
    for c in range(cycles):
        _smooth(u, f, h * h, nu)
        r = np.zeros(n)
        r[1:-1] = f[1:-1] - (2.0 * u[1:-1] - u[:-2] - u[2:]) / (h * h)
        nc = (n - 1) // 2 + 1
        rc = np.zeros(nc)
        rc[1:-1] = 0.25 * r[1:-2:2] + 0.5 * r[2:-1:2] + 0.25 * r[3::2]
        ec = np.zeros(nc)
        _smooth(ec, rc, 4.0 * h * h, 20)
        e = np.zeros(n)
        e[::2] = ec
        e[1::2] = 0.5 * (ec[:-1] + ec[1:])
        u += e
        _smooth(u, f, h * h, nu)
    return u


def _f_rkf(t, y, k, w):
    return -k * y + math.sin(w * t)


# Runge-Kutta-Fehlberg 4(5) with step-size control, accepted/rejected steps, clamped growth factor
def rkf45(y0, k, w, t_end, tol=1e-6):
    t = 0.0
    y = y0
    h = 0.1
    nacc = 0
    while t < t_end:
        if t + h > t_end:
            h = t_end - t
        k1 = h * _f_rkf(t, y, k, w)
        k2 = h * _f_rkf(t + h / 4, y + k1 / 4, k, w)
        k3 = h * _f_rkf(t + 3 * h / 8, y + 3 * k1 / 32 + 9 * k2 / 32, k, w)
        k4 = h * _f_rkf(t + 12 * h / 13, y + 1932 * k1 / 2197 - 7200 * k2 / 2197 + 7296 * k3 / 2197, k, w)
        k5 = h * _f_rkf(t + h, y + 439 * k1 / 216 - 8 * k2 + 3680 * k3 / 513 - 845 * k4 / 4104, k, w)
        k6 = h * _f_rkf(t + h / 2, y - 8 * k1 / 27 + 2 * k2 - 3544 * k3 / 2565 + 1859 * k4 / 4104 - 11 * k5 / 40,
                        k, w)
        y4 = y + 25 * k1 / 216 + 1408 * k3 / 2565 + 2197 * k4 / 4104 - k5 / 5
        y5 = y + 16 * k1 / 135 + 6656 * k3 / 12825 + 28561 * k4 / 56430 - 9 * k5 / 50 + 2 * k6 / 55
        err = abs(y5 - y4) + 1e-300
        if err <= tol:
            t += h
            y = y4
            nacc += 1
        fac = 0.84 * (tol / err) ** 0.25
        fac = min(4.0, max(0.1, fac))
        h *= fac
    return y


def _sym_step(state, dt, k):
    q, p = state
    p = p - 0.5 * dt * k * np.sin(q)
    q = q + dt * p
    p = p - 0.5 * dt * k * np.sin(q)
    return q, p


# coupled pendula by a symplectic step, array state carried as a tuple through a helper
def pendula_tuple(q0, p0, k, dt, steps):
    state = (q0, p0)
    for s in range(steps):
        state = _sym_step(state, dt, k)
    q, p = state
    return np.sum(0.5 * p * p + k * (1.0 - np.cos(q)))


# ---- optimisation -----------------------------------------------------------------------------------

def _obj(x, A, b):
    return 0.5 * (x @ (A @ x)) - b @ x + np.sum(np.log(np.cosh(x)))


# gradient descent with Armijo backtracking (inner while, helper returning a float)
def armijo_gd(x0, A, b, iters):
    x = x0.copy()
    for it in range(iters):
        g = A @ x - b + np.tanh(x)
        fx = _obj(x, A, b)
        t = 1.0
        gg = g @ g
        while _obj(x - t * g, A, b) > fx - 0.3 * t * gg:
            t *= 0.5
        x = x - t * g
    return _obj(x, A, b), x


# logistic regression trained by SGD epochs over shuffled index arrays (perm rows), row views
def sgd_logreg(w0, b0, X, y, perm, lr, l2):
    w = w0.copy()
    b = b0
    for e in range(perm.shape[0]):
        for k in range(perm.shape[1]):
            i = perm[e, k]
            xi = X[i]
            z = xi @ w + b
            p = 1.0 / (1.0 + math.exp(-z))
            g = p - y[i]
            w -= lr * (g * xi + l2 * w)
            b -= lr * g
    z = X @ w + b
    loss = np.mean(np.log(1.0 + np.exp(-z)) + (1.0 - y) * z)
    return loss, w


# Newton's method for cube roots, vectorised, while True with a break, boolean-mask initial guess
def newton_cbrt(a, tol=1e-13):
    x = a.copy()
    x[x < 1.0] = 1.0
    it = 0
    while True:
        dx = (x * x * x - a) / (3.0 * x * x)
        x -= dx
        it += 1
        if np.max(np.abs(dx)) < tol or it >= 100:
            break
    return x


# ---- ML and statistics ------------------------------------------------------------------------------

# causal softmax attention: masked with -inf written in loops, row max, normalisation per row view
def causal_attention(Q, K, V):
    n, d = Q.shape
    S = Q @ K.T / math.sqrt(d)
    for i in range(n):
        for j in range(i + 1, n):
            S[i, j] = -np.inf
    for i in range(n):
        row = S[i]
        row -= np.max(row)
        e = np.exp(row)
        S[i] = e / np.sum(e)
    return S @ V


# layer norm row by row on float32, view of the output scaled in place (row *= gamma)
def layer_norm_rows(x, gamma, beta, eps=1e-5):
    n, d = x.shape
    out = np.empty_like(x)
    for i in range(n):
        mu = np.sum(x[i]) / d
        c = x[i] - mu
        var = np.sum(c * c) / d
        out[i] = c / np.sqrt(var + eps)
        row = out[i]
        row *= gamma
        row += beta
    return out


# im2col convolution: rows of a column matrix filled from raveled windows, one matrix product, reshape
def im2col_conv(img, ker):
    H, W = img.shape
    k = ker.shape[0]
    oh = H - k + 1
    ow = W - k + 1
    cols = np.empty((oh * ow, k * k))
    r = 0
    for i in range(oh):
        for j in range(ow):
            cols[r, :] = img[i:i + k, j:j + k].copy().ravel()
            r += 1
    out = cols @ ker.ravel()
    return out.reshape((oh, ow))


# bilinear image warp, vectorised: np.floor, astype to int, np.clip, gather from the raveled image
def warp_bilinear(img, fx, fy):
    H, W = img.shape
    flat = img.ravel()
    out = np.empty(fx.shape[0])
    x0 = np.floor(fx)
    y0 = np.floor(fy)
    tx = fx - x0
    ty = fy - y0
    i0 = np.clip(x0.astype(np.int64), 0, H - 2)
    j0 = np.clip(y0.astype(np.int64), 0, W - 2)
    a = flat[i0 * W + j0]
    b = flat[(i0 + 1) * W + j0]
    c = flat[i0 * W + j0 + 1]
    d = flat[(i0 + 1) * W + j0 + 1]
    out[:] = (1 - tx) * (1 - ty) * a + tx * (1 - ty) * b + (1 - tx) * ty * c + tx * ty * d
    return out


# EM step for a 1-D Gaussian mixture: log responsibilities with a per-row logsumexp, M-step by sums
def em_gmm1d(x, mu, var, pi):
    n = x.shape[0]
    K = mu.shape[0]
    logr = np.empty((n, K))
    for k in range(K):
        logr[:, k] = math.log(pi[k]) - 0.5 * (math.log(2.0 * math.pi * var[k]) + (x - mu[k]) ** 2 / var[k])
    ll = 0.0
    for i in range(n):
        m = np.max(logr[i])
        lse = m + math.log(np.sum(np.exp(logr[i] - m)))
        logr[i] -= lse
        ll += lse
    R = np.exp(logr)
    Nk = np.sum(R, axis=0)
    mu_n = (R.T @ x) / Nk
    var_n = np.empty(K)
    for k in range(K):
        var_n[k] = np.sum(R[:, k] * (x - mu_n[k]) ** 2) / Nk[k]
    return mu_n, var_n, Nk / n, ll


# label-smoothed cross entropy with integer labels and a boolean mask of valid rows (label >= 0)
def smoothed_xent(logits, labels, eps=0.1):
    n, K = logits.shape
    valid = labels >= 0
    Z = logits[valid]
    lab = labels[valid]
    m = Z.shape[0]
    tot = 0.0
    for i in range(m):
        row = Z[i]
        mx = np.max(row)
        lse = mx + math.log(np.sum(np.exp(row - mx)))
        tot += (1.0 - eps) * (lse - row[lab[i]]) + eps * (lse - np.mean(row))
    return tot / m


# weighted mean / variance with an optional weight array (None default)
def weighted_moments(x, w=None):
    if w is None:
        w = np.ones_like(x)
    sw = np.sum(w)
    mu = np.sum(w * x) / sw
    var = np.sum(w * (x - mu) ** 2) / sw
    return mu, math.sqrt(var)


# =====================================================================================================
# Numba twins (for checking that every kernel compiles with numba.njit unchanged)
# =====================================================================================================

def kernels():
    """The kernels (public functions of this module), by name."""
    return {k: v for k, v in globals().items()
            if isinstance(v, types.FunctionType) and v.__module__ == __name__
            and not k.startswith("_") and k not in ("kernels", "njit_twins")}


def njit_twins():
    """This module's functions compiled with numba.njit, helpers resolved to their njit twins."""
    import numba
    g = dict(globals())
    funcs = {k: v for k, v in g.items() if isinstance(v, types.FunctionType) and v.__module__ == __name__
             and k not in ("kernels", "njit_twins")}
    for k, v in funcs.items():
        g[k] = numba.njit(types.FunctionType(v.__code__, g, k, v.__defaults__))
    return {k: g[k] for k in kernels()}
