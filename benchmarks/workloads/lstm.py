"""ADBench LSTM (l2/l4 layers x c1024/c4096 characters): the gradient of the loss with respect to
main_params and extra_params, as ADBench takes it.

Two srcad formulations of the same loss: "srcad loops", the scalar loop model the tests check
(`tests/compiler/adbench_models.lstm_objective`), and "srcad matmul", the loss as JAX and PyTorch users
write it (whole gate vectors from one concatenation, elementwise NumPy, the predictions stacked and the
loss taken over all time steps at once). ADBench's LSTM is diagonal, so no gate needs a matrix product:
the vectorised form is the point. The peers compute that vectorised form from one shared definition
(`peer_step`, `peer_loss`, written against a NumPy-like namespace).
"""
import functools
import types

import numba
import numpy as np

from .. import timing
from ..harness import Row, Tool, add_tools, adbench_models, adbench_path, golden_gradient, peer

SIZES = ((2, 1024), (2, 4096), (4, 1024), (4, 4096))
JAX_UNROLLS = (1, 4)


def lstm_matmul(main_params, extra_params, state, sequence):
    """ADBench's diagonal LSTM loss with vector operations: per layer one concatenation makes the gates'
    inputs, predictions are kept per time step and the log-sum-exp loss is taken over all of them."""
    nlayers = main_params.shape[0] // 2
    c = sequence.shape[0]
    b = sequence.shape[1]
    s = state.copy()
    ypred = np.empty((c - 1, b))
    for t in range(c - 1):
        x = sequence[t] * extra_params[0]
        for layer in range(nlayers):
            hidden = s[2 * layer]
            gates = np.concatenate((x, hidden, x, hidden)) * main_params[2 * layer] + main_params[2 * layer + 1]
            sig = 1.0 / (1.0 + np.exp(-gates[:3 * b]))          # forget, ingate, outgate
            cell = s[2 * layer + 1] * sig[:b] + sig[b:2 * b] * np.tanh(gates[3 * b:])
            x = sig[2 * b:] * np.tanh(cell)
            s[2 * layer] = x
            s[2 * layer + 1] = cell
        ypred[t] = x * extra_params[1] + extra_params[2]
    lse = np.log(np.sum(np.exp(ypred), axis=1) + 2.0)
    return -np.sum(sequence[1:] * (ypred - lse[:, np.newaxis])) / ((c - 1) * b)


def peer_step(xp, sigmoid, main_params, extra_params, carry, char):
    """One time step of `lstm_matmul` in the NumPy-like namespace `xp` with the framework's own
    `sigmoid`: carry is the per-layer (hidden, cell, hidden, cell, ...) tuple, char the current input
    character; gives (carry, prediction)."""
    b = char.shape[0]
    x = char * extra_params[0]
    new = []
    for layer in range(len(carry) // 2):
        hidden, cell = carry[2 * layer], carry[2 * layer + 1]
        gates = xp.concatenate((x, hidden, x, hidden)) * main_params[2 * layer] + main_params[2 * layer + 1]
        sig = sigmoid(gates[:3 * b])                              # forget, ingate, outgate
        cell = cell * sig[:b] + sig[b:2 * b] * xp.tanh(gates[3 * b:])
        x = sig[2 * b:] * xp.tanh(cell)
        new += [x, cell]
    return tuple(new), x * extra_params[1] + extra_params[2]


def peer_loss(xp, ypred, sequence):
    """The loss of `lstm_matmul` from the stacked predictions (c - 1, b)."""
    lse = xp.log(xp.sum(xp.exp(ypred), axis=1) + 2.0)
    return -xp.sum(sequence[1:] * (ypred - lse[:, None])) / (ypred.shape[0] * ypred.shape[1])


def peer_objective(xp, sigmoid, main_params, extra_params, state, sequence):
    """`lstm_matmul` as a Python loop over time steps (eager peers)."""
    carry = tuple(state[k] for k in range(state.shape[0]))
    ypred = []
    for t in range(sequence.shape[0] - 1):
        carry, y = peer_step(xp, sigmoid, main_params, extra_params, carry, sequence[t])
        ypred.append(y)
    return peer_loss(xp, xp.stack(ypred), sequence)


# ---------------------------------------------------------------------------
# tools
# ---------------------------------------------------------------------------

@functools.cache
def njit_model(fn):
    """`fn` under numba.njit with the plain helpers it calls (adbench_models' `_sigmoid`) compiled too:
    Numba, unlike `@ad.function`, calls only compiled functions. The module itself is left as it is."""
    namespace = dict(fn.__globals__)
    for name in fn.__code__.co_names:
        value = namespace.get(name)
        if isinstance(value, types.FunctionType):
            namespace[name] = numba.njit(value)
    return numba.njit(types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__))


@functools.cache
def compiled(fn):
    """`fn` under `@ad.function`, made once for all rows (srcad is imported when a row needs it)."""
    import srcad as ad

    return ad.function(fn)


def srcad_tool(fn, args):
    """GradientTape over the compiled `fn`; its objective is the same function under numba.njit."""
    import srcad as ad

    main, extra = ad.Variable(args[0]), ad.Variable(args[1])
    srcad_fn, njit = compiled(fn), njit_model(fn)

    def gradient():
        with ad.GradientTape() as tape:
            loss = srcad_fn(main, extra, args[2], args[3])
        return tuple(g.numpy() for g in tape.gradient(loss, [main, extra]))
    return Tool(gradient, lambda: njit(*args))


def jax_tool(args, facts):
    """jit(grad) of the loss with lax.scan over time steps; unroll 1 or 4, whichever runs faster here,
    named in `facts` (the row's note). Both compile while the row is built: JAX's first call in the
    report has no compile in it."""
    jax = peer("jax")
    if jax is None:
        return None
    import jax.numpy as jnp

    state, sequence = jnp.asarray(args[2]), jnp.asarray(args[3])

    def make(unroll):
        def loss(main_params, extra_params):
            def step(carry, char):
                return peer_step(jnp, jax.nn.sigmoid, main_params, extra_params, carry, char)
            carry = tuple(state[k] for k in range(state.shape[0]))
            _, ypred = jax.lax.scan(step, carry, sequence[:-1], unroll=unroll)
            return peer_loss(jnp, ypred, sequence)
        grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
        main, extra = jnp.asarray(args[0]), jnp.asarray(args[1])
        return lambda: tuple(np.asarray(g) for g in jax.block_until_ready(grad(main, extra)))

    unroll, step = fastest({u: make(u) for u in JAX_UNROLLS})
    facts.append("JAX: lax.scan unroll %d, the faster, compiled while the row was built" % unroll)
    return Tool(step)


def fastest(steps):
    """(key, step) of the step of `steps` ({key: step}) that runs fastest, after a warm call of each (so
    that each has compiled): a build-time choice between variants of one tool, not a measurement the
    report shows."""
    def seconds(item):
        item[1]()
        return min(timing.time_block(item[1], 3) for _ in range(3))
    return min(steps.items(), key=seconds)


def torch_tool(args):
    """PyTorch eager: the vectorised loss in a Python loop, torch.autograd.grad."""
    torch = peer("torch")
    if torch is None:
        return None
    main, extra = (torch.tensor(a, requires_grad=True) for a in args[:2])
    state, sequence = torch.tensor(args[2]), torch.tensor(args[3])

    def gradient():
        loss = peer_objective(torch, torch.sigmoid, main, extra, state, sequence)
        return tuple(g.numpy() for g in torch.autograd.grad(loss, (main, extra)))
    return Tool(gradient)


def tensorflow_tool(args):
    """TensorFlow: GradientTape inside tf.function, tf.scan over time steps (tf.experimental.numpy ops)."""
    tf = peer("tensorflow")
    if tf is None:
        return None
    tnp = tf.experimental.numpy
    main, extra = tf.Variable(args[0]), tf.Variable(args[1])
    state, sequence = tf.constant(args[2]), tf.constant(args[3])

    @tf.function
    def grad():
        with tf.GradientTape() as tape:
            def step(acc, char):
                return peer_step(tnp, tf.sigmoid, main, extra, acc[0], char)
            carry = tuple(state[k] for k in range(state.shape[0]))
            _, ypred = tf.scan(step, sequence[:-1], initializer=(carry, tf.zeros_like(sequence[0])))
            loss = peer_loss(tnp, ypred, sequence)
        return tape.gradient(loss, [main, extra])
    return Tool(lambda: tuple(g.numpy() for g in grad()))


def autograd_tool(args):
    """autograd: the vectorised loss in a Python loop."""
    autograd = peer("autograd")
    if autograd is None:
        return None
    import autograd.numpy as anp

    def sigmoid(z):
        return 1.0 / (1.0 + anp.exp(-z))

    def loss(params):
        return peer_objective(anp, sigmoid, params[0], params[1], args[2], args[3])
    grad = autograd.grad(loss)
    return Tool(lambda: tuple(grad((args[0], args[1]))))


# ---------------------------------------------------------------------------
# rows
# ---------------------------------------------------------------------------

def row(layers, chars):
    """The LSTM row for one data file."""
    M = adbench_models()
    rel = "lstm/lstm_l%d_c%d.txt" % (layers, chars)
    args = M.lstm_args(M.read_lstm(adbench_path(rel)))
    notes, facts = [], ["%d parameters" % (args[0].size + args[1].size)]
    makers = {
        "srcad loops": lambda: srcad_tool(M.lstm_objective, args),
        "srcad matmul": lambda: srcad_tool(lstm_matmul, args),
        "JAX": lambda: jax_tool(args, facts),
        "PyTorch": lambda: torch_tool(args),
        "TensorFlow function": lambda: tensorflow_tool(args),
        "autograd": lambda: autograd_tool(args),
    }
    tools = add_tools({}, notes, makers)
    primal = njit_model(M.lstm_objective)
    return Row("LSTM", "l%d c%d" % (layers, chars), lambda: primal(*args), tools, "srcad loops",
               golden=golden_gradient(rel, (args[0].shape, args[1].shape)), quick=(layers, chars) == SIZES[0],
               note="; ".join(facts), notes=notes)


def rows(quick):
    """One row per ADBench LSTM size (only the smallest when quick), built as it is reached."""
    for layers, chars in SIZES[:1] if quick else SIZES:
        yield row(layers, chars)
