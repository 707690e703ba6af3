"""RK4 Lotka-Volterra: the gradient of x_N^2 + y_N^2 with respect to the 4 parameters, after N steps.

The integrator, the hand-written Numba adjoint and the JAX and PyTorch formulations are
benchmarks/rk4_lotka_volterra.py's. JAX's is `jit(grad)` of a `lax.fori_loop` (a scan, its trip count
static) without unrolling: `unroll` 2, 4 and 8 ran 1.5-40x slower and compiled 2-90x longer here.
"""
from .. import rk4_lotka_volterra as R
from ..harness import Row, Tool, add_tools, peer

SIZES = (10_000, 1_000_000)
TORCH_MAX_STEPS = 20_000   # PyTorch's eager graph: ~40 scalar nodes per step, seconds per 1e4 steps


def _srcad(n):
    import srcad as ad

    f = ad.function(R.rk4_lotka_volterra)
    return Tool(gradient=lambda: (R.srcad_gradient(f, R.PARAMS, n)[1],))


def _hand(n):
    dt = R.dt_for(n)
    return Tool(gradient=lambda: (R.hand_gradient(R.PARAMS, R.X0, R.Y0, dt, n)[1],))


def _jax(n):
    jax = peer("jax")
    if jax is None:
        return None
    grad = jax.jit(jax.grad(R.jax_loss), static_argnums=(1,))
    params, dt = jax.numpy.asarray(R.PARAMS), R.dt_for(n)
    return Tool(gradient=lambda: (grad(params, n, dt).block_until_ready(),))


def _torch(n):
    if peer("torch") is None:
        return None
    if n > TORCH_MAX_STEPS:
        raise RuntimeError(f"eager graph of {n:.0e} steps: minutes per gradient (not timed above "
                           f"{TORCH_MAX_STEPS} steps)")
    return Tool(gradient=lambda: (R.torch_gradient(R.PARAMS, n),))


def rows(quick):
    for n in SIZES[:1] if quick else SIZES:
        dt = R.dt_for(n)
        row = Row("RK4", f"N = {n:.0e}", lambda dt=dt, n=n: R.primal(R.PARAMS, R.X0, R.Y0, dt, n), {},
                  reference="srcad", quick=n == SIZES[0], note="4 parameters, loss x_N^2 + y_N^2")
        add_tools(row.tools, row.notes, {"srcad": lambda: _srcad(n), "Numba hand-written": lambda: _hand(n),
                                         "JAX": lambda: _jax(n), "PyTorch": lambda: _torch(n)})
        yield row
