"""Every example of TensorFlow's autodiff documents, written once, on srcad and NumPy.

The documents (``shared/reference/``), in order: the advanced autodiff guide,
the ``tf.GradientTape`` API reference, the vector-Jacobian-product Q&A and the
(Chinese) GradientTape tutorial.  One function per example, named after it and
in the documents' order; each runs the example as its document does and
returns what the document prints (plus what a check of those values needs).
``examples/demo.py`` prints the returned values and draws the guide's figures;
``tests/test_reference_examples.py`` checks them.

The translation is mechanical: ``tf.Variable`` -> ``ad.Variable``,
``tf.constant`` -> ``ad.constant``, ``tf.random.normal`` -> ``normal(rng, ...)``
with a NumPy generator passed in, ``tf.reduce_sum`` / ``tf.einsum`` /
``tf.norm`` ... -> ``np.sum`` / ``np.einsum`` / ``np.linalg.norm`` called on
srcad tensors (they record on the tape), ``tf.keras.layers.Dense`` ->
``ad.nn.Dense`` (seeded).  srcad follows NumPy's dtypes, so values are float64
where TensorFlow's are float32.
"""

import numpy as np

import srcad as ad


def normal(rng, *shape):
    """``tf.random.normal(shape)``, drawn from the NumPy generator ``rng``."""
    return ad.constant(rng.standard_normal(shape))


# =====================================================================================
# Advanced automatic differentiation (guide)
# =====================================================================================


def guide_stop_recording():
    """-> ``{'x': dz/dx, 'y': dz/dy}``: 4.0 and None."""
    x = ad.Variable(2.0)
    y = ad.Variable(3.0)
    with ad.GradientTape() as t:
        x_sq = x * x
        with t.stop_recording():
            y_sq = y * y
        z = x_sq + y_sq
    return t.gradient(z, {"x": x, "y": y})


def guide_reset():
    """Reset/start recording from scratch -> ``{'x': dz/dx, 'y': dz/dy}``: 4.0 and None."""
    x = ad.Variable(2.0)
    y = ad.Variable(3.0)
    reset = True
    with ad.GradientTape() as t:
        y_sq = y * y
        if reset:
            # Throw out all the tape recorded so far.
            t.reset()
        z = x * x + y_sq
    return t.gradient(z, {"x": x, "y": y})


def guide_stop_gradient():
    """Stop gradient flow with precision -> ``{'x': dz/dx, 'y': dz/dy}``: 4.0 and None."""
    x = ad.Variable(2.0)
    y = ad.Variable(3.0)
    with ad.GradientTape() as t:
        y_sq = y ** 2
        z = x ** 2 + ad.stop_gradient(y_sq)
    return t.gradient(z, {"x": x, "y": y})


# Establish an identity operation, but clip during the gradient pass.
@ad.custom_gradient
def clip_gradients(y):
    def backward(dy):
        return ad.clip_by_norm(dy, 0.5)
    return y, backward


def guide_custom_gradients():
    """-> ``(output, d output / dv)``: 4.0 and 2.0 (``backward`` clips 4 to 2).

    The guide's next example, custom gradients in a SavedModel, has no srcad
    counterpart: srcad has no SavedModel.
    """
    v = ad.Variable(2.0)
    with ad.GradientTape() as t:
        output = clip_gradients(v * v)
    return output, t.gradient(output, v)


def guide_multiple_tapes():
    """-> ``(d ys / d x0, d ys / d x1)``: cos(0) = 1.0 and sigmoid'(0) = 0.25."""
    x0 = ad.constant(0.0)
    x1 = ad.constant(0.0)
    with ad.GradientTape() as tape0, ad.GradientTape() as tape1:
        tape0.watch(x0)
        tape1.watch(x1)
        y0 = np.sin(x0)
        y1 = ad.nn.sigmoid(x1)
        y = y0 + y1
        ys = np.sum(y)
    return tape0.gradient(ys, x0), tape1.gradient(ys, x1)


def guide_higher_order():
    """-> ``(dy_dx, d2y_dx2)`` of x**3 at 1: 3.0 and 6.0."""
    x = ad.Variable(1.0)  # Create a srcad variable initialized to 1.0
    with ad.GradientTape() as t2:
        with ad.GradientTape() as t1:
            y = x * x * x
        # Compute the gradient inside the outer `t2` context manager
        # which means the gradient computation is differentiable as well.
        dy_dx = t1.gradient(y, x)
    d2y_dx2 = t2.gradient(dy_dx, x)
    return dy_dx, d2y_dx2


def guide_input_gradient_regularization(rng):
    """-> dict of x, layer, y, g1_mag and dg1_mag (shapes (5, 10) and (10,))."""
    x = normal(rng, 7, 5)
    layer = ad.nn.Dense(10, activation=ad.nn.relu, seed=1)
    with ad.GradientTape() as t2:
        # The inner tape only takes the gradient with respect to the input,
        # not the variables.
        with ad.GradientTape(watch_accessed_variables=False) as t1:
            t1.watch(x)
            y = layer(x)
            out = np.sum(layer(x) ** 2)
        # 1. Calculate the input gradient.
        g1 = t1.gradient(out, x)
        # 2. Calculate the magnitude of the input gradient.
        g1_mag = np.linalg.norm(g1)
    # 3. Calculate the gradient of the magnitude with respect to the model.
    dg1_mag = t2.gradient(g1_mag, layer.trainable_variables)
    return {"x": x, "layer": layer, "y": y, "g1_mag": g1_mag, "dg1_mag": dg1_mag}


def guide_jacobian_scalar_source():
    """-> ``(x, y, dy_dx)``: y = sigmoid(x + delta) and its Jacobian in delta, both (201,)."""
    x = ad.constant(np.linspace(-10.0, 10.0, 200 + 1))
    delta = ad.Variable(0.0)
    with ad.GradientTape() as tape:
        y = ad.nn.sigmoid(x + delta)
    dy_dx = tape.jacobian(y, delta)
    return x, y, dy_dx


def guide_jacobian_tensor_source(rng):
    """-> dict of x, layer, y (7, 10), j (7, 10, 5, 10), g (5, 10) and delta = max |g - sum j|."""
    x = normal(rng, 7, 5)
    layer = ad.nn.Dense(10, activation=ad.nn.relu, seed=2)
    with ad.GradientTape(persistent=True) as tape:
        y = layer(x)
    j = tape.jacobian(y, layer.kernel)
    g = tape.gradient(y, layer.kernel)
    j_sum = np.sum(j, axis=[0, 1])
    delta = np.max(abs(g - j_sum)).numpy()
    assert delta < 1e-3
    return {"x": x, "layer": layer, "y": y, "j": j, "g": g, "delta": delta}


def guide_hessian(rng):
    """The Hessian of a loss in ``layer1.kernel`` and one Newton step on it.

    -> dict of x (the input), layer1, layer2, g, h (5, 8, 5, 8), g_vec, h_mat
    (40, 40), update and kernel_before (the kernel before the Newton step).
    """
    x = x0 = normal(rng, 7, 5)
    layer1 = ad.nn.Dense(8, activation=ad.nn.relu, seed=3)
    layer2 = ad.nn.Dense(6, activation=ad.nn.relu, seed=4)
    with ad.GradientTape() as t2:
        with ad.GradientTape() as t1:
            x = layer1(x)
            x = layer2(x)
            loss = np.mean(x ** 2)
        g = t1.gradient(loss, layer1.kernel)
    h = t2.jacobian(g, layer1.kernel)

    n_params = np.prod(layer1.kernel.shape)
    g_vec = np.reshape(g, [n_params, 1])
    h_mat = np.reshape(h, [n_params, n_params])

    kernel_before = layer1.kernel.numpy().copy()
    eps = 1e-3
    eye_eps = np.eye(h_mat.shape[0]) * eps
    # X(k+1) = X(k) - (∇²f(X(k)))^-1 @ ∇f(X(k))
    # h_mat = ∇²f(X(k))
    # g_vec = ∇f(X(k))
    update = np.linalg.solve(h_mat + eye_eps, g_vec)
    # Reshape the update and apply it to the variable.
    _ = layer1.kernel.assign_sub(np.reshape(update, layer1.kernel.shape))
    return {"x": x0, "layer1": layer1, "layer2": layer2, "g": g, "h": h, "g_vec": g_vec, "h_mat": h_mat,
            "eye_eps": eye_eps, "update": update, "kernel_before": kernel_before}


def guide_batch_jacobian(rng):
    """-> dict of x, layer1, layer2, y (7, 6), j (7, 6, 7, 5), j_sum, j_select, jb (7, 6, 5) and error."""
    x = normal(rng, 7, 5)
    layer1 = ad.nn.Dense(8, activation=ad.nn.elu, seed=5)
    layer2 = ad.nn.Dense(6, activation=ad.nn.elu, seed=6)
    with ad.GradientTape(persistent=True, watch_accessed_variables=False) as tape:
        tape.watch(x)
        y = layer1(x)
        y = layer2(y)
    j = tape.jacobian(y, x)
    j_sum = np.sum(j, axis=2)
    j_select = np.einsum("bxby->bxy", j)
    jb = tape.batch_jacobian(y, x)
    error = np.max(abs(jb - j_sum))
    assert error < 1e-3
    return {"x": x, "layer1": layer1, "layer2": layer2, "y": y, "j": j, "j_sum": j_sum, "j_select": j_select,
            "jb": jb, "error": error}


def guide_batch_jacobian_batch_norm(rng):
    """Through BatchNormalization(training=True) -> dict of x, layer1, bn, layer2, j (7, 6, 7, 5), jb (7, 6, 5)."""
    x = normal(rng, 7, 5)
    layer1 = ad.nn.Dense(8, activation=ad.nn.elu, seed=7)
    bn = ad.nn.BatchNormalization()
    layer2 = ad.nn.Dense(6, activation=ad.nn.elu, seed=8)
    with ad.GradientTape(persistent=True, watch_accessed_variables=False) as tape:
        tape.watch(x)
        y = layer1(x)
        y = bn(y, training=True)
        y = layer2(y)
    j = tape.jacobian(y, x)
    jb = tape.batch_jacobian(y, x)
    return {"x": x, "layer1": layer1, "bn": bn, "layer2": layer2, "j": j, "jb": jb}


# =====================================================================================
# tf.GradientTape API reference
# =====================================================================================


def api_square():
    """y = x * x at x = 3.0 -> dy_dx: 6.0."""
    x = ad.constant(3.0)
    with ad.GradientTape() as g:
        g.watch(x)
        y = x * x
    dy_dx = g.gradient(y, x)  # Will compute to 6.0
    return dy_dx


def api_nested_tapes(x=None):
    """-> ``(dy_dx, d2y_dx2)`` of x * x at x = 3.0 (a constant unless given): 6.0 and 2.0."""
    x = ad.constant(3.0) if x is None else x
    with ad.GradientTape() as g:
        g.watch(x)
        with ad.GradientTape() as gg:
            gg.watch(x)
            y = x * x
        dy_dx = gg.gradient(y, x)  # Will compute to 6.0
    d2y_dx2 = g.gradient(dy_dx, x)  # Will compute to 2.0
    return dy_dx, d2y_dx2


def api_persistent_tape(x=None):
    """-> ``(dz_dx, dy_dx)`` for y = x * x, z = y * y at x = 3.0 (a constant unless given): 108.0 and 6.0."""
    x = ad.constant(3.0) if x is None else x
    with ad.GradientTape(persistent=True) as g:
        g.watch(x)
        y = x * x
        z = y * y
    dz_dx = g.gradient(z, x)  # 108.0 (4*x^3 at x = 3)
    dy_dx = g.gradient(y, x)  # 6.0
    del g  # Drop the reference to the tape
    return dz_dx, dy_dx


def api_watch_accessed_variables_false():
    """-> the gradients for the watched variable_a (6.0) and the unwatched variable_b (None).

    The tape is persistent, so that both gradients can be taken from it.
    """
    variable_a = ad.Variable(3.0, name="x1")
    variable_b = ad.Variable(2.0, name="x2")
    with ad.GradientTape(persistent=True, watch_accessed_variables=False) as tape:
        tape.watch(variable_a)
        y = variable_a ** 2  # Gradients will be available for `variable_a`.
        z = variable_b ** 3  # No gradients will be available since `variable_b` is
        # not being watched.
    return tape.gradient(y, variable_a), tape.gradient(z, variable_b)


def api_layer_variables_before_build(rng):
    """Watching a layer's variables before it is built -> dict of grads ([None, None]), variables, watched."""
    inputs = normal(rng, 4, 3)
    a = ad.nn.Dense(32, seed=9)
    b = ad.nn.Dense(32, seed=10)
    with ad.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch(a.variables)  # Since `a.build` has not been called at this point
        # `a.variables` will return an empty list and the
        # tape will not be watching anything.
        result = b(a(inputs))
        grads = tape.gradient(result, a.variables)  # The result of this computation will be
        # a list of `None`s since a's variables
        # are not being watched.
    return {"grads": grads, "variables": a.variables, "watched": tape.watched_variables()}


def api_batch_jacobian():
    """-> batch_jacobian: [[[2, 0], [0, 4]], [[6, 0], [0, 8]]]."""
    with ad.GradientTape() as g:
        x = ad.constant([[1., 2.], [3., 4.]])
        g.watch(x)
        y = x * x
    batch_jacobian = g.batch_jacobian(y, x)
    return batch_jacobian


def api_jacobian():
    """-> jacobian: [[2., 0.], [0., 4.]]."""
    with ad.GradientTape() as g:
        x = ad.constant([1.0, 2.0])
        g.watch(x)
        y = x * x
    jacobian = g.jacobian(y, x)
    return jacobian


def api_reset(k=1.0):
    """The two equivalent blocks of ``reset`` and a reset inside control flow.

    -> ``(g1, g2, g_control_flow)``: g1 = g2 = d(w**3)/dw = 3 w**2 at w = 1.5;
    g_control_flow is 3 w**2 too if loss_fn() = w**2 > k (the tape was reset),
    else 2 w + 3 w**2.
    """
    w = ad.Variable(1.5)

    def loss_fn():
        return w * w

    def other_loss_fn():
        return w * w * w

    with ad.GradientTape() as t:
        loss = loss_fn()
    with ad.GradientTape() as t:
        loss += other_loss_fn()
    g1 = t.gradient(loss, w)  # Only differentiates other_loss_fn, not loss_fn

    # The following is equivalent to the above
    with ad.GradientTape() as t:
        loss = loss_fn()
        t.reset()
        loss += other_loss_fn()
    g2 = t.gradient(loss, w)  # Only differentiates other_loss_fn, not loss_fn

    with ad.GradientTape() as t:
        loss = loss_fn()
        if loss > k:
            t.reset()
        loss = loss + other_loss_fn()
    return g1, g2, t.gradient(loss, w)


def api_stop_recording():
    """A gradient taken inside ``stop_recording`` -> ``(tape, model_w, grads)``; grads[0] = 2 w."""
    model_w = ad.Variable([1.0, -2.0])
    with ad.GradientTape(persistent=True) as t:
        loss = np.sum(model_w ** 2)
        with t.stop_recording():
            # The gradient computation below is not traced, saving memory.
            grads = t.gradient(loss, [model_w])
    return t, model_w, grads


def api_errors():
    """The documented errors -> ``(second gradient on a non-persistent tape, watch('x'))``, None if not raised."""
    second_gradient = watch_str = None
    x = ad.constant(3.0)
    with ad.GradientTape() as g:
        g.watch(x)
        y = x * x
    g.gradient(y, x)
    try:
        g.gradient(y, x)
    except RuntimeError as err:
        second_gradient = err
    try:
        with ad.GradientTape() as g:
            g.watch("x")
    except (ValueError, TypeError) as err:
        watch_str = err
    return second_gradient, watch_str


# =====================================================================================
# Vector-Jacobian products (questions and answers)
# =====================================================================================


def vjp_output_gradients():
    """-> ``(vector-Jacobian product with vec = [2, 3], with the default vector of ones)``: [4, 12], [2, 4]."""
    with ad.GradientTape() as g:
        x = ad.constant([1.0, 2.0])
        g.watch(x)
        y = x * x  # y is a length 2 vector
    vec = ad.constant([2.0, 3.0])  # vector in vector jacobian product
    grad = g.gradient(y, x, output_gradients=vec)  # the vector-jacobian product, [4.,12.]

    with ad.GradientTape() as g:
        x = ad.constant([1.0, 2.0])
        g.watch(x)
        y = x * x  # y is a length 2 vector
    grad_ones = g.gradient(y, x)  # the vector-jacobian product with a vector of ones, [2.0,4.0]
    return grad, grad_ones


def vjp_black_box_loss(rng, steps=200):
    """A loss measured outside the model: train M to invert a black box F.

    -> ``(losses, grads)``: the loss of M(F(x)) against x at every step, and
    the last step's gradients in M's variables.
    """
    # F is a black box (hardware): it runs on plain NumPy values, no gradient.
    def F(v):
        return np.tanh(np.asarray(v)) * 0.5 + 0.1 * np.asarray(v)

    examples = rng.uniform(-1.0, 1.0, size=(64, 3))
    M = ad.nn.Dense(3, seed=11)   # trained to be F's inverse: M(F(x)) ~ x
    losses = []
    for _ in range(steps):
        y = ad.constant(F(examples))        # only the output of F, no gradients
        with ad.GradientTape() as tape:
            pred = M(y)                     # apply the trainable model M to the output of F
            loss = np.mean((examples - pred) ** 2)  # the loss propagates through M and stops at F
        grads = tape.gradient(loss, M.trainable_variables)
        for var, grad in zip(M.trainable_variables, grads):
            var.assign_sub(0.5 * grad)
        losses.append(float(loss))
    return losses, grads


def vjp_grad_ys():
    """grad_ys (output_gradients) as the multiplier of each target.

    -> dict of X, Y, W, b, tape (persistent), pred, grads (d cost / [W, b]),
    approx (d cost / d pred) and via_grad_ys (the chain rule with approx as
    output_gradients).
    """
    X = ad.constant([[2.0], [3.0]])
    Y = ad.constant([[3.0], [2.0]])
    W = ad.Variable(0.7, name="weight")
    b = ad.Variable(-0.2, name="bias")
    with ad.GradientTape(persistent=True) as tape:
        pred = X * W + b
        cost = 0.5 * np.sum((pred - Y) ** 2)
    grads = tape.gradient(cost, [W, b])
    # the chain rule with an approximation of dz/dy fed in as output_gradients
    approx = tape.gradient(cost, pred)  # here exact: pred - Y
    via_grad_ys = tape.gradient(pred, [W, b], output_gradients=approx)
    return {"X": X, "Y": Y, "W": W, "b": b, "tape": tape, "pred": pred, "grads": grads, "approx": approx,
            "via_grad_ys": via_grad_ys}


def vjp_gradient_in_two_parts():
    """Breaking the gradient computation into two parts.

    -> dict of grad, part_grad_1 (1, 5), part_grad_2 (5, 10), grad_by_parts
    and j = jacobian(out, x) (1, 5, 1, 10), the answer "for future readers".
    """
    x = ad.constant(np.ones((1, 10)))
    w = ad.Variable(np.full((10, 5), 0.5), name="w")
    out_target = ad.constant(np.zeros(5))
    with ad.GradientTape(persistent=True) as tape:
        tape.watch(x)
        out = x @ w
        loss = np.mean(np.square(out - out_target))
        outs = np.split(out, 5, axis=1)   # split on the tape, so each part is connected to x
    grad = tape.gradient(loss, x)
    part_grad_1 = tape.gradient(loss, out)                                           # (1, 5)
    part_grad_2 = np.concatenate([tape.gradient(o, x) for o in outs], axis=0)        # (5, 10)
    grad_by_parts = part_grad_1 @ part_grad_2
    # for future readers: the Jacobian, with no sum over the target's dimensions
    j = tape.jacobian(out, x)
    return {"grad": grad, "part_grad_1": part_grad_1, "part_grad_2": part_grad_2, "grad_by_parts": grad_by_parts,
            "j": j}


def vjp_reduce_last_dimension(rng):
    """Reduce the last dimension of a rank-3 tensor [batch, N, M] to Q.

    -> dict of x_vec (batch, N*M), y = x_vec @ W (batch, Q), grad = d sum(y) / dW
    and keep_n = features @ W2, the alternative that keeps N (batch, N, Q).
    """
    batch, N, M, Q = 4, 6, 20, 8
    features = normal(rng, batch, N, M)
    W = ad.Variable(rng.standard_normal((N * M, Q)) * 0.1)
    with ad.GradientTape() as tape:
        x_vec = np.reshape(features, (-1, N * M))
        y = x_vec @ W
    grad = tape.gradient(y, W)
    keep_n = features @ ad.Variable(rng.standard_normal((M, Q)))
    return {"x_vec": x_vec, "y": y, "grad": grad, "keep_n": keep_n}


def vjp_gradient_of_loss_at_variable():
    """-> dy_dx of x ** 2 at the variable x = 3.0: 6.0."""
    x = ad.Variable(3.0)
    with ad.GradientTape() as tape:
        y = x ** 2
    dy_dx = tape.gradient(y, x)
    return dy_dx


# =====================================================================================
# GradientTape tutorial (zh)
# =====================================================================================


def tutorial_computing_gradients():
    """-> dy_dx of x ** 2 at the variable x = 3.0: 6.0 (the VJP Q&A's last example)."""
    return vjp_gradient_of_loss_at_variable()


def tutorial_what_the_tape_watches():
    """-> ``(x2, grads without watch, grads with watch([x1, x2, x3]))``: [6, None, None, None], [6, 6, 6, 6]."""
    x0 = ad.Variable(3.0, name="x0")                    # A trainable variable
    x1 = ad.Variable(3.0, name="x1", trainable=False)   # Not trainable
    x2 = ad.Variable(2.0, name="x2") + 1.0              # Not a variable: a variable + tensor is a tensor
    x3 = ad.constant(3.0)                               # Not a variable
    with ad.GradientTape() as tape:
        y = (x0 ** 2) + (x1 ** 2) + (x2 ** 2) + (x3 ** 2)
    unwatched = tape.gradient(y, [x0, x1, x2, x3])

    with ad.GradientTape() as tape:
        tape.watch([x1, x2, x3])
        y = (x0 ** 2) + (x1 ** 2) + (x2 ** 2) + (x3 ** 2)
    watched = tape.gradient(y, [x0, x1, x2, x3])
    return x2, unwatched, watched


def tutorial_disable_tracking():
    """-> ``(gradient_1, gradient_2)``: 6.0 and None (the API reference's example, named as here)."""
    return api_watch_accessed_variables_false()


def tutorial_multiple_gradients():
    """-> ``(dz_dx, dy_dx)``: 108.0 and 6.0 (the API reference's persistent tape, on a variable)."""
    return api_persistent_tape(ad.Variable(3.0))


def tutorial_nested_gradients():
    """-> ``(dy_dx, d2y_d2x)`` of x * x at the variable x = 3.0: 6.0 and 2.0."""
    return api_nested_tapes(ad.Variable(3.0))
