"""TensorFlow's guide's Jacobians of Dense layers (guide/advanced_autodiff, "Jacobians"), float64:

* "Dense jacobian": y = relu(x @ W + b), x 7x5, 10 units; `tape.jacobian(y, W)`, 7x10x5x10;
* "Dense batch_jacobian": y = elu(elu(x @ W1 + b1) @ W2 + b2), 8 then 6 units;
  `tape.batch_jacobian(y, x)`, 7x6x5.

srcad's tape (its Dense layers) against TensorFlow's, JAX's jacrev / jacfwd (jit; vmapped over the batch
for the batch Jacobian) and PyTorch's torch.func.
"""
import numba
import numpy as np

from ..harness import Row, Tool, add_tools, peer

BATCH, IN, UNITS, HIDDEN, OUT = 7, 5, 10, 8, 6


def _data():
    """x and the layers' weights, fixed (the guide draws them at random)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, IN))
    w, b = rng.standard_normal((IN, UNITS)) / np.sqrt(IN), 0.3 * rng.standard_normal(UNITS)
    w1, b1 = rng.standard_normal((IN, HIDDEN)) / np.sqrt(IN), 0.3 * rng.standard_normal(HIDDEN)
    w2, b2 = rng.standard_normal((HIDDEN, OUT)) / np.sqrt(HIDDEN), 0.3 * rng.standard_normal(OUT)
    return x, (w, b), (w1, b1, w2, b2)


@numba.njit
def _relu_dense(x, w, b):
    return np.maximum(x @ w + b, 0.0)


@numba.njit
def _elu(z):
    return np.where(z > 0.0, z, np.expm1(z))


@numba.njit
def _two_elu_dense(x, w1, b1, w2, b2):
    return _elu(_elu(x @ w1 + b1) @ w2 + b2)


def _srcad_dense(units, activation, w, b):
    """srcad's Dense layer holding `w`, `b`."""
    from srcad import nn

    import srcad as ad

    layer = nn.Dense(units, activation=activation)
    layer(ad.constant(np.zeros((1, w.shape[0]))))      # built on its first call: then its weights are set
    layer.kernel.assign(w)
    layer.bias.assign(b)
    return layer


def _srcad(kind, x, weights):
    """srcad's tape over its Dense layers: `tape.jacobian(y, kernel)` or `tape.batch_jacobian(y, x)`."""
    import srcad as ad
    from srcad import nn

    xt = ad.constant(x)
    if kind == "jacobian":
        layers = [_srcad_dense(UNITS, nn.relu, *weights)]
        source = layers[0].kernel
    else:
        layers = [_srcad_dense(HIDDEN, nn.elu, *weights[:2]), _srcad_dense(OUT, nn.elu, *weights[2:])]
        source = xt

    def step():
        with ad.GradientTape() as tape:
            tape.watch(source)
            y = xt
            for layer in layers:
                y = layer(y)
        return (getattr(tape, kind)(y, source),)
    return Tool(gradient=step)


def _tensorflow(kind, x, weights, function):
    """TensorFlow's `tape.jacobian` / `tape.batch_jacobian`, eager or under tf.function."""
    tf = peer("tensorflow")
    if tf is None:
        return None
    x = tf.constant(x)
    weights = [tf.Variable(v) for v in weights]
    source = weights[0] if kind == "jacobian" else x

    def step():
        with tf.GradientTape() as tape:
            tape.watch(source)
            if kind == "jacobian":
                y = tf.nn.relu(x @ weights[0] + weights[1])
            else:
                y = tf.nn.elu(tf.nn.elu(x @ weights[0] + weights[1]) @ weights[2] + weights[3])
        return (getattr(tape, kind)(y, source),)
    return Tool(gradient=tf.function(step) if function else step)


def _jax(kind, x, weights, mode):
    """jit(jacrev) or jit(jacfwd) of the layer w.r.t. W; the batch Jacobian as a vmap over the examples."""
    jax = peer("jax")
    if jax is None:
        return None
    transform = getattr(jax, mode)
    if kind == "jacobian":
        b = weights[1]
        jacobian = jax.jit(transform(lambda w: jax.nn.relu(x @ w + b)))
        source = weights[0]
    else:
        w1, b1, w2, b2 = weights
        jacobian = jax.jit(jax.vmap(transform(lambda xi: jax.nn.elu(jax.nn.elu(xi @ w1 + b1) @ w2 + b2))))
        source = x
    return Tool(gradient=lambda: (jacobian(source).block_until_ready(),))


def _torch(kind, x, weights, mode):
    """torch.func.jacrev or jacfwd, the same way as JAX's."""
    torch = peer("torch")
    if torch is None:
        return None
    from torch import func

    transform = getattr(func, mode)
    x, weights = torch.from_numpy(x), [torch.from_numpy(v) for v in weights]
    if kind == "jacobian":
        b = weights[1]
        jacobian = transform(lambda w: torch.relu(x @ w + b))
        source = weights[0]
    else:
        w1, b1, w2, b2 = weights
        elu = torch.nn.functional.elu
        jacobian = func.vmap(transform(lambda xi: elu(elu(xi @ w1 + b1) @ w2 + b2)))
        source = x
    return Tool(gradient=lambda: (jacobian(source),))


def _row(kind, size, primal, x, weights):
    row = Row(f"Dense {kind}", size, primal, {}, reference="srcad", quick=True)
    makers = {"srcad": lambda: _srcad(kind, x, weights),
              "TensorFlow eager": lambda: _tensorflow(kind, x, weights, function=False),
              "TensorFlow function": lambda: _tensorflow(kind, x, weights, function=True)}
    for mode in ("jacrev", "jacfwd"):
        makers[f"JAX {mode}"] = lambda mode=mode: _jax(kind, x, weights, mode)
        makers[f"PyTorch {mode}"] = lambda mode=mode: _torch(kind, x, weights, mode)
    add_tools(row.tools, row.notes, makers)
    return row


def rows(quick):
    """The guide's two examples, one size each (run by --quick too)."""
    x, (w, b), (w1, b1, w2, b2) = _data()
    yield _row("jacobian", f"relu, x {BATCH}x{IN}, {UNITS} units: d y / d W", lambda: _relu_dense(x, w, b),
               x, (w, b))
    yield _row("batch_jacobian", f"elu, elu, x {BATCH}x{IN}, {HIDDEN} then {OUT} units: d y / d x",
               lambda: _two_elu_dense(x, w1, b1, w2, b2), x, (w1, b1, w2, b2))
