"""Every example of TensorFlow's autodiff documents, run on srcad and NumPy.

In order: the advanced autodiff guide, the ``tf.GradientTape`` API reference,
the vector-Jacobian-product Q&A, and the (Chinese) GradientTape tutorial.  Each
example prints what the document prints; the guide's figures are saved as PNG
files in ``examples/out/``.

The translation is mechanical: ``tf.Variable`` -> ``ad.Variable``,
``tf.constant`` -> ``ad.constant``, ``tf.random.normal`` -> a seeded NumPy
generator, ``tf.reduce_sum`` / ``tf.einsum`` / ``tf.norm`` ... -> ``np.sum`` /
``np.einsum`` / ``np.linalg.norm`` called on srcad tensors (they record on the
tape), ``tf.keras.layers.Dense`` -> ``ad.nn.Dense``.  srcad follows NumPy's
dtypes, so values print as float64 where TensorFlow prints float32.

Run:  python examples/demo.py
"""

import os
import sys
import time

import numpy as np

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib as mpl  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import srcad as ad  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")
mpl.rcParams["figure.figsize"] = (8, 6)
rng = np.random.default_rng(0)


def section(title):
    print(f"\n=== {title} ===")


def normal(*shape):
    """``tf.random.normal(shape)``."""
    return ad.constant(rng.standard_normal(shape))


def save(name):
    path = os.path.join(OUT, name)
    plt.savefig(path, dpi=80)
    plt.close("all")
    print(f"[figure saved: {os.path.relpath(path)}]")


def imshow_zero_center(image, **kwargs):
    lim = np.max(abs(np.asarray(image)))
    plt.imshow(np.asarray(image), vmin=-lim, vmax=lim, cmap="seismic", **kwargs)
    plt.colorbar()


def plot_as_patches(j):
    # Reorder axes so the diagonals will each form a contiguous patch.
    j = np.transpose(j, [1, 0, 3, 2])
    # Pad in between each patch.
    lim = float(np.max(abs(j)))
    j = np.pad(j, [[0, 0], [1, 1], [0, 0], [1, 1]], constant_values=-lim)
    # Reshape to form a single image.
    s = j.shape
    j = np.reshape(j, [s[0] * s[1], s[2] * s[3]])
    imshow_zero_center(j, extent=[-0.5, s[2] - 0.5, s[0] - 0.5, -0.5])


# =====================================================================================
# Advanced automatic differentiation (guide)
# =====================================================================================


def guide_controlling_recording():
    section("guide: Stop recording")
    x = ad.Variable(2.0)
    y = ad.Variable(3.0)
    with ad.GradientTape() as t:
        x_sq = x * x
        with t.stop_recording():
            y_sq = y * y
        z = x_sq + y_sq
    grad = t.gradient(z, {"x": x, "y": y})
    print("dz/dx:", grad["x"])  # 2*x => 4
    print("dz/dy:", grad["y"])

    section("guide: Reset/start recording from scratch")
    x = ad.Variable(2.0)
    y = ad.Variable(3.0)
    reset = True
    with ad.GradientTape() as t:
        y_sq = y * y
        if reset:
            # Throw out all the tape recorded so far.
            t.reset()
        z = x * x + y_sq
    grad = t.gradient(z, {"x": x, "y": y})
    print("dz/dx:", grad["x"])  # 2*x => 4
    print("dz/dy:", grad["y"])

    section("guide: Stop gradient flow with precision")
    x = ad.Variable(2.0)
    y = ad.Variable(3.0)
    with ad.GradientTape() as t:
        y_sq = y ** 2
        z = x ** 2 + ad.stop_gradient(y_sq)
    grad = t.gradient(z, {"x": x, "y": y})
    print("dz/dx:", grad["x"])  # 2*x => 4
    print("dz/dy:", grad["y"])


def guide_custom_gradients():
    section("guide: Custom gradients")

    # Establish an identity operation, but clip during the gradient pass.
    @ad.custom_gradient
    def clip_gradients(y):
        def backward(dy):
            return ad.clip_by_norm(dy, 0.5)
        return y, backward

    v = ad.Variable(2.0)
    with ad.GradientTape() as t:
        output = clip_gradients(v * v)
    print(t.gradient(output, v))  # calls "backward", which clips 4 to 2

    section("guide: Custom gradients in SavedModel")
    print("skipped: srcad has no SavedModel (tf.saved_model.save / load); a custom gradient lives in the Python "
          "function that defines it.")


def guide_multiple_tapes():
    section("guide: Multiple tapes")
    x0 = ad.constant(0.0)
    x1 = ad.constant(0.0)
    with ad.GradientTape() as tape0, ad.GradientTape() as tape1:
        tape0.watch(x0)
        tape1.watch(x1)
        y0 = np.sin(x0)
        y1 = ad.nn.sigmoid(x1)
        y = y0 + y1
        ys = np.sum(y)
    print(tape0.gradient(ys, x0).numpy())  # cos(x) => 1.0
    print(tape1.gradient(ys, x1).numpy())  # sigmoid(x1)*(1-sigmoid(x1)) => 0.25


def guide_higher_order():
    section("guide: Higher-order gradients")
    x = ad.Variable(1.0)  # Create a srcad variable initialized to 1.0
    with ad.GradientTape() as t2:
        with ad.GradientTape() as t1:
            y = x * x * x
        # Compute the gradient inside the outer `t2` context manager
        # which means the gradient computation is differentiable as well.
        dy_dx = t1.gradient(y, x)
    d2y_dx2 = t2.gradient(dy_dx, x)
    print("dy_dx:", dy_dx.numpy())  # 3 * x**2 => 3.0
    print("d2y_dx2:", d2y_dx2.numpy())  # 6 * x => 6.0

    section("guide: Example: Input gradient regularization")
    x = normal(7, 5)
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
    print([var.shape for var in dg1_mag])


def guide_jacobians():
    section("guide: Jacobians, scalar source")
    x = ad.constant(np.linspace(-10.0, 10.0, 200 + 1))
    delta = ad.Variable(0.0)
    with ad.GradientTape() as tape:
        y = ad.nn.sigmoid(x + delta)
    dy_dx = tape.jacobian(y, delta)
    print(y.shape)
    print(dy_dx.shape)
    plt.plot(x.numpy(), y, label="y")
    plt.plot(x.numpy(), dy_dx, label="dy/dx")
    plt.legend()
    _ = plt.xlabel("x")
    save("jacobian_sigmoid.png")

    section("guide: Jacobians, tensor source")
    x = normal(7, 5)
    layer = ad.nn.Dense(10, activation=ad.nn.relu, seed=2)
    with ad.GradientTape(persistent=True) as tape:
        y = layer(x)
    print(y.shape)
    print(layer.kernel.shape)
    j = tape.jacobian(y, layer.kernel)
    print(j.shape)
    g = tape.gradient(y, layer.kernel)
    print("g.shape:", g.shape)
    j_sum = np.sum(j, axis=[0, 1])
    delta = np.max(abs(g - j_sum)).numpy()
    assert delta < 1e-3
    print("delta:", delta)


def guide_hessian():
    section("guide: Example: Hessian")
    x = normal(7, 5)
    layer1 = ad.nn.Dense(8, activation=ad.nn.relu, seed=3)
    layer2 = ad.nn.Dense(6, activation=ad.nn.relu, seed=4)
    with ad.GradientTape() as t2:
        with ad.GradientTape() as t1:
            x = layer1(x)
            x = layer2(x)
            loss = np.mean(x ** 2)
        g = t1.gradient(loss, layer1.kernel)
    h = t2.jacobian(g, layer1.kernel)
    print(f"layer.kernel.shape: {layer1.kernel.shape}")
    print(f"h.shape: {h.shape}")

    n_params = np.prod(layer1.kernel.shape)
    g_vec = np.reshape(g, [n_params, 1])
    h_mat = np.reshape(h, [n_params, n_params])
    asym = float(np.max(abs(h_mat - h_mat.T)))
    print(f"the Hessian is symmetric: max |h_mat - h_mat.T| = {asym:.3g}")
    imshow_zero_center(h_mat)
    save("hessian.png")

    eps = 1e-3
    eye_eps = np.eye(h_mat.shape[0]) * eps
    # X(k+1) = X(k) - (∇²f(X(k)))^-1 @ ∇f(X(k))
    # h_mat = ∇²f(X(k))
    # g_vec = ∇f(X(k))
    update = np.linalg.solve(h_mat + eye_eps, g_vec)
    # Reshape the update and apply it to the variable.
    _ = layer1.kernel.assign_sub(np.reshape(update, layer1.kernel.shape))
    print(f"Newton step applied: |update| = {float(np.linalg.norm(update)):.4g}")


def guide_batch_jacobian():
    section("guide: Batch Jacobian")
    x = normal(7, 5)
    layer1 = ad.nn.Dense(8, activation=ad.nn.elu, seed=5)
    layer2 = ad.nn.Dense(6, activation=ad.nn.elu, seed=6)
    with ad.GradientTape(persistent=True, watch_accessed_variables=False) as tape:
        tape.watch(x)
        y = layer1(x)
        y = layer2(y)
    print(y.shape)
    j = tape.jacobian(y, x)
    print(j.shape)

    imshow_zero_center(j[:, 0, :, 0])
    _ = plt.title("A (batch, batch) slice")
    save("batch_slice.png")

    plot_as_patches(j)
    _ = plt.title("All (batch, batch) slices are diagonal")
    save("patches_diagonal.png")

    j_sum = np.sum(j, axis=2)
    print(j_sum.shape)
    j_select = np.einsum("bxby->bxy", j)
    print(j_select.shape)

    jb = tape.batch_jacobian(y, x)
    print(jb.shape)
    error = np.max(abs(jb - j_sum))
    assert error < 1e-3
    print(error.numpy())

    section("guide: Batch Jacobian through BatchNormalization(training=True)")
    x = normal(7, 5)
    layer1 = ad.nn.Dense(8, activation=ad.nn.elu, seed=7)
    bn = ad.nn.BatchNormalization()
    layer2 = ad.nn.Dense(6, activation=ad.nn.elu, seed=8)
    with ad.GradientTape(persistent=True, watch_accessed_variables=False) as tape:
        tape.watch(x)
        y = layer1(x)
        y = bn(y, training=True)
        y = layer2(y)
    j = tape.jacobian(y, x)
    print(f"j.shape: {j.shape}")

    plot_as_patches(j)
    _ = plt.title("These slices are not diagonal")
    _ = plt.xlabel("Don't use `batch_jacobian`")
    save("patches_batchnorm.png")

    jb = tape.batch_jacobian(y, x)
    print(f"jb.shape: {jb.shape}")


# =====================================================================================
# tf.GradientTape API reference
# =====================================================================================


def reference_examples():
    section("reference: y = x * x at x = 3.0")
    x = ad.constant(3.0)
    with ad.GradientTape() as g:
        g.watch(x)
        y = x * x
    dy_dx = g.gradient(y, x)  # Will compute to 6.0
    print("dy_dx:", dy_dx)

    section("reference: nested tapes")
    x = ad.constant(3.0)
    with ad.GradientTape() as g:
        g.watch(x)
        with ad.GradientTape() as gg:
            gg.watch(x)
            y = x * x
        dy_dx = gg.gradient(y, x)  # Will compute to 6.0
    d2y_dx2 = g.gradient(dy_dx, x)  # Will compute to 2.0
    print("dy_dx:", dy_dx, " d2y_dx2:", d2y_dx2)

    section("reference: persistent tape")
    x = ad.constant(3.0)
    with ad.GradientTape(persistent=True) as g:
        g.watch(x)
        y = x * x
        z = y * y
    dz_dx = g.gradient(z, x)  # 108.0 (4*x^3 at x = 3)
    dy_dx = g.gradient(y, x)  # 6.0
    del g  # Drop the reference to the tape
    print("dz_dx:", dz_dx, " dy_dx:", dy_dx)

    section("reference: watch_accessed_variables=False")
    variable_a = ad.Variable(3.0)
    variable_b = ad.Variable(2.0)
    # (persistent, so that both gradients below can be taken from one tape)
    with ad.GradientTape(persistent=True, watch_accessed_variables=False) as tape:
        tape.watch(variable_a)
        y = variable_a ** 2  # Gradients will be available for `variable_a`.
        z = variable_b ** 3  # No gradients will be available since `variable_b` is
        # not being watched.
    print("gradient for variable_a:", tape.gradient(y, variable_a))
    print("gradient for variable_b:", tape.gradient(z, variable_b))

    section("reference: watching a layer's variables before it is built")
    inputs = normal(4, 3)
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
    print("a.variables were watched before the first call: [] ->", grads)

    section("reference: batch_jacobian")
    with ad.GradientTape() as g:
        x = ad.constant([[1., 2.], [3., 4.]])
        g.watch(x)
        y = x * x
    batch_jacobian = g.batch_jacobian(y, x)
    # batch_jacobian is [[[2,  0], [0,  4]], [[6,  0], [0,  8]]]
    print(batch_jacobian.numpy().tolist())

    section("reference: jacobian")
    with ad.GradientTape() as g:
        x = ad.constant([1.0, 2.0])
        g.watch(x)
        y = x * x
    jacobian = g.jacobian(y, x)
    # jacobian value is [[2., 0.], [0., 4.]]
    print(jacobian.numpy().tolist())

    section("reference: reset")
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
    print("both give d(w**3)/dw = 3 w**2 =", g1.numpy(), g2.numpy())

    k = 1.0
    with ad.GradientTape() as t:
        loss = loss_fn()
        if loss > k:
            t.reset()
        loss = loss + other_loss_fn()
    print("reset inside control flow (loss > k):", t.gradient(loss, w).numpy())

    section("reference: stop_recording")
    model_w = ad.Variable([1.0, -2.0])
    with ad.GradientTape(persistent=True) as t:
        loss = np.sum(model_w ** 2)
        with t.stop_recording():
            # The gradient computation below is not traced, saving memory.
            grads = t.gradient(loss, [model_w])
    print("grads:", grads[0], " nodes recorded by the gradient:", "none")

    section("reference: errors")
    x = ad.constant(3.0)
    with ad.GradientTape() as g:
        g.watch(x)
        y = x * x
    g.gradient(y, x)
    try:
        g.gradient(y, x)
    except RuntimeError as err:
        print("second gradient on a non-persistent tape -> RuntimeError:", err)
    try:
        with ad.GradientTape() as g:
            g.watch("x")
    except (ValueError, TypeError) as err:
        print(f"watch('x') -> {type(err).__name__}:", err)


# =====================================================================================
# Vector-Jacobian products (questions and answers)
# =====================================================================================


def vjp_examples():
    section("VJP Q&A: output_gradients is the vector of a vector-Jacobian product")
    with ad.GradientTape() as g:
        x = ad.constant([1.0, 2.0])
        g.watch(x)
        y = x * x  # y is a length 2 vector
    vec = ad.constant([2.0, 3.0])  # vector in vector jacobian product
    grad = g.gradient(y, x, output_gradients=vec)
    print(grad)  # prints the vector-jacobian product, [4.,12.]

    with ad.GradientTape() as g:
        x = ad.constant([1.0, 2.0])
        g.watch(x)
        y = x * x  # y is a length 2 vector
    grad = g.gradient(y, x)
    print(grad)  # prints the vector-jacobian product with a vector of ones, [2.0,4.0]

    section("VJP Q&A: a loss measured outside the model (black-box F)")
    # F is a black box (hardware): it runs on plain NumPy values, no gradient.
    def F(v):
        return np.tanh(np.asarray(v)) * 0.5 + 0.1 * np.asarray(v)

    examples = rng.uniform(-1.0, 1.0, size=(64, 3))
    M = ad.nn.Dense(3, seed=11)   # trained to be F's inverse: M(F(x)) ~ x
    losses = []
    for step in range(200):
        y = ad.constant(F(examples))        # only the output of F, no gradients
        with ad.GradientTape() as tape:
            pred = M(y)                     # apply the trainable model M to the output of F
            loss = np.mean((examples - pred) ** 2)  # the loss propagates through M and stops at F
        grads = tape.gradient(loss, M.trainable_variables)
        for var, grad in zip(M.trainable_variables, grads):
            var.assign_sub(0.5 * grad)
        losses.append(float(loss))
    print(f"loss of M(F(x)) vs x: {losses[0]:.4f} at step 0 -> {losses[-1]:.4f} at step {len(losses) - 1}")

    section("VJP Q&A: grad_ys (output_gradients) as the multiplier of each target")
    X = ad.constant([[2.0], [3.0]])
    Y = ad.constant([[3.0], [2.0]])
    W = ad.Variable(0.7, name="weight")
    b = ad.Variable(-0.2, name="bias")
    with ad.GradientTape(persistent=True) as tape:
        pred = X * W + b
        cost = 0.5 * np.sum((pred - Y) ** 2)
    grads = tape.gradient(cost, [W, b])
    print("d cost / [W, b]:", [float(gr) for gr in grads])
    # the chain rule with an approximation of dz/dy fed in as output_gradients
    approx = tape.gradient(cost, pred)  # here exact: pred - Y
    via_grad_ys = tape.gradient(pred, [W, b], output_gradients=approx)
    print("gradient(pred, [W, b], output_gradients=dcost/dpred):", [float(gr) for gr in via_grad_ys])

    section("VJP Q&A: breaking the gradient computation into two parts")
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
    print("grad:         ", grad.numpy())
    print("grad_by_parts:", grad_by_parts.numpy())
    # for future readers: the Jacobian, with no sum over the target's dimensions
    j = tape.jacobian(out, x)
    print("jacobian(out, x).shape:", j.shape)
    print("part_grad_1 @ jacobian:", (part_grad_1 @ np.reshape(j, [5, 10])).numpy())

    section("VJP Q&A: reduce the last dimension of a rank-3 tensor")
    batch, N, M_, Q = 4, 6, 20, 8
    features = normal(batch, N, M_)
    W = ad.Variable(rng.standard_normal((N * M_, Q)) * 0.1)
    with ad.GradientTape() as tape:
        x_vec = np.reshape(features, (-1, N * M_))
        y = x_vec @ W
    print("y.shape:", y.shape, " d sum(y)/dW shape:", tape.gradient(y, W).shape)
    print("or keep N and map M -> Q:", (features @ ad.Variable(rng.standard_normal((M_, Q)))).shape)

    section("VJP Q&A: the gradient of a loss at a variable")
    x = ad.Variable(3.0)
    with ad.GradientTape() as tape:
        y = x ** 2
    dy_dx = tape.gradient(y, x)
    print(dy_dx)  # Returns 6


# =====================================================================================
# GradientTape tutorial (zh)
# =====================================================================================


def tutorial_examples():
    section("tutorial: computing gradients")
    x = ad.Variable(3.0)
    with ad.GradientTape() as tape:
        y = x ** 2
    dy_dx = tape.gradient(y, x)
    print(dy_dx.numpy())

    section("tutorial: controlling what the tape watches")
    x0 = ad.Variable(3.0, name="x0")                    # A trainable variable
    x1 = ad.Variable(3.0, name="x1", trainable=False)   # Not trainable
    x2 = ad.Variable(2.0, name="x2") + 1.0              # Not a variable: a variable + tensor is a tensor
    x3 = ad.constant(3.0)                               # Not a variable
    with ad.GradientTape() as tape:
        y = (x0 ** 2) + (x1 ** 2) + (x2 ** 2) + (x3 ** 2)
    grad = tape.gradient(y, [x0, x1, x2, x3])
    for g in grad:
        print(g)

    with ad.GradientTape() as tape:
        tape.watch([x1, x2, x3])
        y = (x0 ** 2) + (x1 ** 2) + (x2 ** 2) + (x3 ** 2)
    grad = tape.gradient(y, [x0, x1, x2, x3])
    for g in grad:
        print(g)

    section("tutorial: disable automatic tracking")
    variable_a = ad.Variable(3.0, name="x1")
    variable_b = ad.Variable(2.0, name="x2")
    with ad.GradientTape(persistent=True, watch_accessed_variables=False) as disable_tracking_tape:
        disable_tracking_tape.watch(variable_a)
        y = variable_a ** 2  # Gradients will be available for `variable_a`.
        z = variable_b ** 3  # No gradients will be available since `variable_b` is not being watched.
    gradient_1 = disable_tracking_tape.gradient(y, variable_a)  # 6.0
    gradient_2 = disable_tracking_tape.gradient(z, variable_b)  # None
    print(gradient_1)
    print(gradient_2)

    section("tutorial: multiple gradients (persistent tape)")
    x = ad.Variable(3.0)
    with ad.GradientTape(persistent=True) as persistent_tape:
        persistent_tape.watch(x)
        y = x * x
        z = y * y
    dz_dx = persistent_tape.gradient(z, x)  # 108.0 (4*x^3 at x = 3)
    dy_dx = persistent_tape.gradient(y, x)  # 6.0
    print("First derivative of function y = x ^ 4 at x = 3 is", dz_dx.numpy())
    print("First derivative of function y = x ^ 2 at x = 3 is", dy_dx.numpy())
    del persistent_tape

    section("tutorial: nested gradients")
    x = ad.Variable(3.0)
    with ad.GradientTape() as tape:
        tape.watch(x)
        with ad.GradientTape() as tape2:
            tape2.watch(x)
            y = x * x
        dy_dx = tape2.gradient(y, x)
    d2y_d2x = tape.gradient(dy_dx, x)
    print("Function: y = x * x, x = 3.0")
    print("First Derivative:", dy_dx.numpy())
    print("Second Derivative:", d2y_d2x.numpy())


def main():
    os.makedirs(OUT, exist_ok=True)
    start = time.perf_counter()
    print("srcad", ad.__version__, "- the examples of TensorFlow's autodiff documents on NumPy")
    guide_controlling_recording()
    guide_custom_gradients()
    guide_multiple_tapes()
    guide_higher_order()
    guide_jacobians()
    guide_hessian()
    guide_batch_jacobian()
    reference_examples()
    vjp_examples()
    tutorial_examples()
    print(f"\nall examples ran in {time.perf_counter() - start:.1f} s; figures in {os.path.relpath(OUT)}/")


if __name__ == "__main__":
    main()
