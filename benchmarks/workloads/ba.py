"""ADBench bundle adjustment (ba1..ba5): the sparse Jacobian of the residuals, as its dense blocks.

Each observation i has two reprojection residuals, w_i (project(camera, point) - feature), that depend
on 15 parameters (its camera's 11, its point's 3, its weight), and one weight residual 1 - w_i^2. Every
tool gathers each observation's 15 parameters, then takes the Jacobian of the three residuals batched
over observations: a (p, 3, 15) array, of which the step returns the (p, 2, 15) reprojection blocks and
the p weight derivatives, the values of ADBench's CSR Jacobian (its sparsity pattern depends only on the
observations' indices, so nobody builds it).

srcad: `@ad.function` over the per-observation loop (`observation_residuals`) and
`GradientTape.batch_jacobian`. Peers: the same residuals written once against a NumPy-like namespace
(`peer_residuals`), JAX `vmap(jacfwd)`, PyTorch `torch.func.vmap(jacrev)`, TensorFlow `batch_jacobian`
inside tf.function.
"""
import functools
import math

import numba
import numpy as np

from ..harness import Row, Tool, add_tools, adbench_path, peer

FILES = ("ba1_n49_m7776_p31843", "ba2_n21_m11315_p36455", "ba3_n161_m48126_p182072",
         "ba4_n372_m47423_p204472", "ba5_n257_m65132_p225911")
FIELDS = ("cams", "points", "weights", "obs", "feats")


def read_ba(path):
    """ADBench's compact BA file: n, m, p, then one camera (11), point (3), weight and feature (2), which
    every camera, point and observation repeats; observation i sees camera i mod n and point i mod m."""
    with open(path) as fh:
        tokens = fh.read().split()
    n, m, p = (int(t) for t in tokens[:3])
    values = np.array(tokens[3:], dtype=np.float64)
    assert values.size == 17, (path, values.size)
    index = np.arange(p)
    return dict(cams=np.tile(values[:11], (n, 1)), points=np.tile(values[11:14], (m, 1)),
                weights=np.full(p, values[14]), obs=np.stack((index % n, index % m), axis=1),
                feats=np.tile(values[15:17], (p, 1)))


def arguments(data, convert=np.asarray):
    """The arrays of `read_ba`'s dict in the order the objectives take them, each through `convert`."""
    return [convert(data[k]) for k in FIELDS]


def read_golden_block(path):
    """ADBench's Jacobian block shared by every observation here: rows d(reprojection x, y) over
    [camera, point, weight], then d(weight residual)/dw."""
    with open(path) as fh:
        lines = [np.array(line.split(), dtype=np.float64) for line in fh if line.strip()]
    return np.stack(lines[:2]), float(lines[2][0])


# ---------------------------------------------------------------------------
# the model, loop style: Numba and @ad.function
# ---------------------------------------------------------------------------

@numba.njit
def project(cam, X):
    """ADBench's camera: X minus the centre cam[3:6], rotated by the Rodrigues vector cam[0:3],
    divided by depth, radially distorted by cam[9:11], scaled by cam[6] and shifted by cam[7:9]."""
    x0, x1, x2 = X[0] - cam[3], X[1] - cam[4], X[2] - cam[5]
    r0, r1, r2 = cam[0], cam[1], cam[2]
    sqtheta = r0 * r0 + r1 * r1 + r2 * r2
    if sqtheta != 0.0:
        theta = math.sqrt(sqtheta)
        cos, sin = math.cos(theta), math.sin(theta)
        w0, w1, w2 = r0 / theta, r1 / theta, r2 / theta
        along = (w0 * x0 + w1 * x1 + w2 * x2) * (1.0 - cos)
        y0 = x0 * cos + (w1 * x2 - w2 * x1) * sin + w0 * along
        y1 = x1 * cos + (w2 * x0 - w0 * x2) * sin + w1 * along
        y2 = x2 * cos + (w0 * x1 - w1 * x0) * sin + w2 * along
    else:
        y0 = x0 + r1 * x2 - r2 * x1
        y1 = x1 + r2 * x0 - r0 * x2
        y2 = x2 + r0 * x1 - r1 * x0
    u, v = y0 / y2, y1 / y2
    rsq = u * u + v * v
    distortion = 1.0 + cam[9] * rsq + cam[10] * rsq * rsq
    return u * distortion * cam[6] + cam[7], v * distortion * cam[6] + cam[8]


@numba.njit
def observation_residual(cam, X, w, feat):
    """The three residuals of one observation: reprojection error x, y and weight error."""
    px, py = project(cam, X)
    return w * (px - feat[0]), w * (py - feat[1]), 1.0 - w * w


def observation_residuals(params, feats):
    """The residuals (p, 3) of observations given their gathered parameters (p, 15): what srcad
    differentiates, one observation per loop iteration."""
    out = np.empty((params.shape[0], 3))
    for i in range(params.shape[0]):
        out[i, 0], out[i, 1], out[i, 2] = observation_residual(params[i, :11], params[i, 11:14], params[i, 14],
                                                               feats[i])
    return out


@numba.njit
def ba_objective(cams, points, weights, obs, feats):
    """ADBench's BA objective: reprojection errors (p, 2) and weight errors (p,), the row's primal."""
    p = obs.shape[0]
    reprojection = np.empty((p, 2))
    weight = np.empty(p)
    for i in range(p):
        reprojection[i, 0], reprojection[i, 1], weight[i] = observation_residual(
            cams[obs[i, 0]], points[obs[i, 1]], weights[i], feats[i])
    return reprojection, weight


def gather(xp, take, cams, points, weights, obs):
    """Each observation's 15 parameters (camera, point, weight) as one (p, 15) array; `take(a, rows)`
    indexes rows in the framework `xp`."""
    return xp.concatenate((take(cams, obs[:, 0]), take(points, obs[:, 1]), weights[:, None]), axis=1)


def blocks(jacobian):
    """The (p, 3, 15) per-observation Jacobians as ADBench's values: reprojection blocks, weight terms."""
    return jacobian[:, :2, :], jacobian[:, 2, 14]


def rows_of(a, index):
    """`a[index]`: the rows `gather` takes, in NumPy, JAX and PyTorch (TensorFlow's is tf.gather)."""
    return a[index]


# ---------------------------------------------------------------------------
# the Jacobian by hand, in Numba: ADBench's "Manual" tool
# ---------------------------------------------------------------------------

@numba.njit
def skew(a, k, j):
    """Entry (k, j) of the cross-product matrix of a: (a x b)[k] = sum_j skew(a, k, j) b[j]."""
    if k == j:
        return 0.0
    sign = 1.0 if (j - k) % 3 == 1 else -1.0
    return -sign * a[3 - k - j]


@numba.njit
def rotate_with_jacobians(r, xo, y, d_r, d_xo, scratch):
    """y = R(r) xo by Rodrigues' formula, with d_r = dy/dr and d_xo = dy/dxo (3 x 3), into the arrays
    given; scratch (3, 3) holds the unit axis, the axis cross xo and dy/dtheta."""
    sqtheta = r[0] * r[0] + r[1] * r[1] + r[2] * r[2]
    if sqtheta == 0.0:                  # first order: y = xo + r x xo
        for k in range(3):
            y[k] = xo[k]
            for j in range(3):
                y[k] += skew(r, k, j) * xo[j]
                d_xo[k, j] = (1.0 if k == j else 0.0) + skew(r, k, j)
                d_r[k, j] = -skew(xo, k, j)
        return
    theta = math.sqrt(sqtheta)
    cos, sin = math.cos(theta), math.sin(theta)
    w, cross, d_theta = scratch[0], scratch[1], scratch[2]
    for k in range(3):
        w[k] = r[k] / theta
    along = w[0] * xo[0] + w[1] * xo[1] + w[2] * xo[2]
    for k in range(3):
        cross[k] = skew(w, k, 0) * xo[0] + skew(w, k, 1) * xo[1] + skew(w, k, 2) * xo[2]
        y[k] = xo[k] * cos + cross[k] * sin + w[k] * along * (1.0 - cos)
        d_theta[k] = -xo[k] * sin + cross[k] * cos + w[k] * along * sin
    for k in range(3):
        for j in range(3):
            eye = 1.0 if k == j else 0.0
            d_xo[k, j] = cos * eye + sin * skew(w, k, j) + (1.0 - cos) * w[k] * w[j]
            d_r[k, j] = -sin * skew(xo, k, j) + (1.0 - cos) * (along * eye + w[k] * xo[j])     # dy/dw for now
        # through dw/dr = (I - w w^T) / theta and dtheta/dr = w
        towards = d_r[k, 0] * w[0] + d_r[k, 1] * w[1] + d_r[k, 2] * w[2]
        for j in range(3):
            d_r[k, j] = d_theta[k] * w[j] + (d_r[k, j] - towards * w[j]) / theta


@numba.njit
def hand_jacobian(cams, points, weights, obs, feats):
    """The (p, 3, 15) Jacobian of the residuals, written by hand: Rodrigues' Jacobians, then the chain
    rule through the perspective division, the distortion and the weight."""
    p = obs.shape[0]
    jac = np.zeros((p, 3, 15))
    xo, y = np.empty(3), np.empty(3)
    d_r, d_xo, scratch = np.empty((3, 3)), np.empty((3, 3)), np.empty((3, 3))
    d_y = np.empty((2, 3))
    for i in range(p):
        cam, X, w, feat = cams[obs[i, 0]], points[obs[i, 1]], weights[i], feats[i]
        for k in range(3):
            xo[k] = X[k] - cam[3 + k]
        rotate_with_jacobians(cam[:3], xo, y, d_r, d_xo, scratch)
        u, v = y[0] / y[2], y[1] / y[2]
        rsq = u * u + v * v
        distortion = 1.0 + cam[9] * rsq + cam[10] * rsq * rsq
        d_distortion = 2.0 * (cam[9] + 2.0 * cam[10] * rsq)         # d distortion / d(u or v), over u or v
        f = cam[6]
        # d(px, py)/d(u, v), then through d(u, v)/dy
        pu = ((f * (distortion + u * u * d_distortion), f * u * v * d_distortion),
              (f * u * v * d_distortion, f * (distortion + v * v * d_distortion)))
        for a in range(2):
            d_y[a, 0] = pu[a][0] / y[2]
            d_y[a, 1] = pu[a][1] / y[2]
            d_y[a, 2] = -(pu[a][0] * u + pu[a][1] * v) / y[2]
        projected = (f * distortion * u + cam[7], f * distortion * v + cam[8])
        for a in range(2):
            for j in range(3):
                by_r, by_x = 0.0, 0.0
                for k in range(3):
                    by_r += d_y[a, k] * d_r[k, j]
                    by_x += d_y[a, k] * d_xo[k, j]
                jac[i, a, j] = w * by_r
                jac[i, a, 3 + j] = -w * by_x
                jac[i, a, 11 + j] = w * by_x
            uv = u if a == 0 else v
            jac[i, a, 6] = w * distortion * uv
            jac[i, a, 7 + a] = w
            jac[i, a, 9] = w * f * uv * rsq
            jac[i, a, 10] = w * f * uv * rsq * rsq
            jac[i, a, 14] = projected[a] - feat[a]
        jac[i, 2, 14] = -2.0 * w
    return jac


def hand_tool(data):
    """Numba hand-written: `hand_jacobian`."""
    args = arguments(data)
    return Tool(lambda: blocks(hand_jacobian(*args)))


# ---------------------------------------------------------------------------
# the model for the peers: NumPy-like namespace, batched over leading axes
# ---------------------------------------------------------------------------

def peer_residuals(xp, params, feat):
    """`observation_residual` on params [..., 15] and feat [..., 2] in namespace `xp`: the residuals
    [..., 3]. Both Rodrigues branches are computed and one kept by `where` (vmap and batch_jacobian cannot
    branch on values); the rotation's square norm is replaced by 1 where it is 0, so that the unused
    branch's derivatives stay finite."""
    x0, x1, x2 = (params[..., 11 + k] - params[..., 3 + k] for k in range(3))
    r0, r1, r2 = params[..., 0], params[..., 1], params[..., 2]
    sqtheta = r0 * r0 + r1 * r1 + r2 * r2
    turning = sqtheta != 0.0
    theta = xp.sqrt(xp.where(turning, sqtheta, 1.0))
    cos, sin = xp.cos(theta), xp.sin(theta)
    w0, w1, w2 = r0 / theta, r1 / theta, r2 / theta
    along = (w0 * x0 + w1 * x1 + w2 * x2) * (1.0 - cos)
    y0 = xp.where(turning, x0 * cos + (w1 * x2 - w2 * x1) * sin + w0 * along, x0 + r1 * x2 - r2 * x1)
    y1 = xp.where(turning, x1 * cos + (w2 * x0 - w0 * x2) * sin + w1 * along, x1 + r2 * x0 - r0 * x2)
    y2 = xp.where(turning, x2 * cos + (w0 * x1 - w1 * x0) * sin + w2 * along, x2 + r0 * x1 - r1 * x0)
    u, v = y0 / y2, y1 / y2
    rsq = u * u + v * v
    distortion = 1.0 + params[..., 9] * rsq + params[..., 10] * rsq * rsq
    w = params[..., 14]
    return xp.stack((w * (u * distortion * params[..., 6] + params[..., 7] - feat[..., 0]),
                     w * (v * distortion * params[..., 6] + params[..., 8] - feat[..., 1]),
                     1.0 - w * w), axis=-1)


# ---------------------------------------------------------------------------
# tools
# ---------------------------------------------------------------------------

@functools.cache
def compiled_residuals():
    """`observation_residuals` under `@ad.function` and under numba.njit, made once for all rows."""
    import srcad as ad

    return ad.function(observation_residuals), numba.njit(observation_residuals)


def srcad_tool(data):
    """batch_jacobian of the compiled per-observation loop; its objective is that loop under numba.njit."""
    import srcad as ad

    compiled, njit = compiled_residuals()
    cams, points, weights, obs, feats = arguments(data)

    def gradient():
        params = ad.constant(gather(np, rows_of, cams, points, weights, obs))
        with ad.GradientTape() as tape:
            tape.watch(params)
            residuals = compiled(params, feats)
        return blocks(tape.batch_jacobian(residuals, params).numpy())
    return Tool(gradient, lambda: njit(gather(np, rows_of, cams, points, weights, obs), feats))


def jax_tool(data):
    """jit(vmap(jacfwd)) of one observation's residuals, the gather inside the jit."""
    jax = peer("jax")
    if jax is None:
        return None
    import jax.numpy as jnp

    jacobian = jax.vmap(jax.jacfwd(lambda params, feat: peer_residuals(jnp, params, feat)))

    @jax.jit
    def step(cams, points, weights, obs, feats):
        return jacobian(gather(jnp, rows_of, cams, points, weights, obs), feats)
    args = arguments(data, jnp.asarray)
    return Tool(lambda: blocks(np.asarray(jax.block_until_ready(step(*args)))))


def torch_tool(data):
    """torch.func.vmap(jacrev) of one observation's residuals."""
    torch = peer("torch")
    if torch is None:
        return None
    jacobian = torch.func.vmap(torch.func.jacrev(lambda params, feat: peer_residuals(torch, params, feat)))
    cams, points, weights, obs, feats = arguments(data, torch.tensor)

    def gradient():
        return blocks(jacobian(gather(torch, rows_of, cams, points, weights, obs), feats).numpy())
    return Tool(gradient)


def tensorflow_tool(data):
    """GradientTape.batch_jacobian of the batched residuals, inside tf.function."""
    tf = peer("tensorflow")
    if tf is None:
        return None
    tnp = tf.experimental.numpy

    @tf.function
    def step(cams, points, weights, obs, feats):
        params = gather(tnp, tf.gather, cams, points, weights, obs)
        with tf.GradientTape() as tape:
            tape.watch(params)
            residuals = peer_residuals(tnp, params, feats)
        return tape.batch_jacobian(residuals, params)
    args = arguments(data, tf.constant)
    return Tool(lambda: blocks(step(*args).numpy()))


# ---------------------------------------------------------------------------
# rows
# ---------------------------------------------------------------------------

def row(name):
    """The BA row for one data file."""
    data = read_ba(adbench_path("ba/%s.txt" % name))
    block, weight_term = read_golden_block(adbench_path("golden/ba_block_J.txt"))
    p = data["obs"].shape[0]
    tools, notes = {}, []
    add_tools(tools, notes, {
        "srcad loops": lambda: srcad_tool(data),
        "Numba hand-written": lambda: hand_tool(data),
        "JAX": lambda: jax_tool(data),
        "PyTorch": lambda: torch_tool(data),
        "TensorFlow function": lambda: tensorflow_tool(data),
    })
    args = arguments(data)
    golden = (np.broadcast_to(block, (p, 2, 15)), np.full(p, weight_term))
    n, m = data["cams"].shape[0], data["points"].shape[0]
    return Row("BA", "%s n%d m%d p%d" % (name.split("_")[0], n, m, p), lambda: ba_objective(*args), tools,
               "srcad loops", golden=golden, quick=name == FILES[0],
               note="%d observations: 1 ms is %.1f ns per observation" % (p, 1e6 / p), notes=notes)


def rows(quick):
    """One row per ADBench BA file (only ba1 when quick), built as it is reached."""
    for name in FILES[:1] if quick else FILES:
        yield row(name)
