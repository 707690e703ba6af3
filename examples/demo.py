"""Every example of TensorFlow's autodiff documents, run on srcad and NumPy.

In order: the advanced autodiff guide, the ``tf.GradientTape`` API reference,
the vector-Jacobian-product Q&A, and the (Chinese) GradientTape tutorial.  The
examples themselves are in ``reference_examples.py`` (one function each, which
returns what its document prints); this script runs them in order, prints what
the documents print and saves the guide's figures as PNG files in
``examples/out/``.

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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # reference_examples.py, and srcad without an install
import reference_examples as ex  # noqa: E402
import srcad as ad  # noqa: E402

import compiled_rk4  # noqa: E402  (examples/, beside this file)
import fit_with_scipy  # noqa: E402

OUT = os.path.join(HERE, "out")
mpl.rcParams["figure.figsize"] = (8, 6)


def section(title):
    print(f"\n=== {title} ===")


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


def print_dz(grad):
    print("dz/dx:", grad["x"])  # 2*x => 4
    print("dz/dy:", grad["y"])


def guide(rng):
    section("guide: Stop recording")
    print_dz(ex.guide_stop_recording())
    section("guide: Reset/start recording from scratch")
    print_dz(ex.guide_reset())
    section("guide: Stop gradient flow with precision")
    print_dz(ex.guide_stop_gradient())

    section("guide: Custom gradients")
    print(ex.guide_custom_gradients()[1])  # calls "backward", which clips 4 to 2
    section("guide: Custom gradients in SavedModel")
    print("skipped: srcad has no SavedModel (tf.saved_model.save / load); a custom gradient lives in the Python "
          "function that defines it.")

    section("guide: Multiple tapes")
    for grad in ex.guide_multiple_tapes():
        print(grad.numpy())  # cos(x) => 1.0, then sigmoid(x1)*(1-sigmoid(x1)) => 0.25

    section("guide: Higher-order gradients")
    dy_dx, d2y_dx2 = ex.guide_higher_order()
    print("dy_dx:", dy_dx.numpy())  # 3 * x**2 => 3.0
    print("d2y_dx2:", d2y_dx2.numpy())  # 6 * x => 6.0

    section("guide: Example: Input gradient regularization")
    print([var.shape for var in ex.guide_input_gradient_regularization(rng)["dg1_mag"]])

    section("guide: Jacobians, scalar source")
    x, y, dy_dx = ex.guide_jacobian_scalar_source()
    print(y.shape)
    print(dy_dx.shape)
    plt.plot(x.numpy(), y, label="y")
    plt.plot(x.numpy(), dy_dx, label="dy/dx")
    plt.legend()
    _ = plt.xlabel("x")
    save("jacobian_sigmoid.png")

    section("guide: Jacobians, tensor source")
    r = ex.guide_jacobian_tensor_source(rng)
    print(r["y"].shape)
    print(r["layer"].kernel.shape)
    print(r["j"].shape)
    print("g.shape:", r["g"].shape)
    print("delta:", r["delta"])

    section("guide: Example: Hessian")
    r = ex.guide_hessian(rng)
    h_mat = r["h_mat"]
    print(f"layer.kernel.shape: {r['layer1'].kernel.shape}")
    print(f"h.shape: {r['h'].shape}")
    print(f"the Hessian is symmetric: max |h_mat - h_mat.T| = {float(np.max(abs(h_mat - h_mat.T))):.3g}")
    imshow_zero_center(h_mat)
    save("hessian.png")
    print(f"Newton step applied: |update| = {float(np.linalg.norm(r['update'])):.4g}")

    section("guide: Batch Jacobian")
    r = ex.guide_batch_jacobian(rng)
    print(r["y"].shape)
    print(r["j"].shape)
    imshow_zero_center(r["j"][:, 0, :, 0])
    _ = plt.title("A (batch, batch) slice")
    save("batch_slice.png")
    plot_as_patches(r["j"])
    _ = plt.title("All (batch, batch) slices are diagonal")
    save("patches_diagonal.png")
    print(r["j_sum"].shape)
    print(r["j_select"].shape)
    print(r["jb"].shape)
    print(r["error"].numpy())

    section("guide: Batch Jacobian through BatchNormalization(training=True)")
    r = ex.guide_batch_jacobian_batch_norm(rng)
    print(f"j.shape: {r['j'].shape}")
    plot_as_patches(r["j"])
    _ = plt.title("These slices are not diagonal")
    _ = plt.xlabel("Don't use `batch_jacobian`")
    save("patches_batchnorm.png")
    print(f"jb.shape: {r['jb'].shape}")


def api_reference(rng):
    section("reference: y = x * x at x = 3.0")
    print("dy_dx:", ex.api_square())
    section("reference: nested tapes")
    dy_dx, d2y_dx2 = ex.api_nested_tapes()
    print("dy_dx:", dy_dx, " d2y_dx2:", d2y_dx2)
    section("reference: persistent tape")
    dz_dx, dy_dx = ex.api_persistent_tape()
    print("dz_dx:", dz_dx, " dy_dx:", dy_dx)
    section("reference: watch_accessed_variables=False")
    grad_a, grad_b = ex.api_watch_accessed_variables_false()
    print("gradient for variable_a:", grad_a)
    print("gradient for variable_b:", grad_b)
    section("reference: watching a layer's variables before it is built")
    print("a.variables were watched before the first call: [] ->", ex.api_layer_variables_before_build(rng)["grads"])
    section("reference: batch_jacobian")
    print(ex.api_batch_jacobian().numpy().tolist())
    section("reference: jacobian")
    print(ex.api_jacobian().numpy().tolist())
    section("reference: reset")
    g1, g2, g_control_flow = ex.api_reset()
    print("both give d(w**3)/dw = 3 w**2 =", g1.numpy(), g2.numpy())
    print("reset inside control flow (loss > k):", g_control_flow.numpy())
    section("reference: stop_recording")
    print("grads:", ex.api_stop_recording()[2][0], " nodes recorded by the gradient:", "none")
    section("reference: errors")
    second_gradient, watch_str = ex.api_errors()
    print("second gradient on a non-persistent tape -> RuntimeError:", second_gradient)
    print(f"watch('x') -> {type(watch_str).__name__}:", watch_str)


def vjp_questions_and_answers(rng):
    section("VJP Q&A: output_gradients is the vector of a vector-Jacobian product")
    for grad in ex.vjp_output_gradients():
        print(grad)  # [4.,12.], then with the default vector of ones [2.0,4.0]
    section("VJP Q&A: a loss measured outside the model (black-box F)")
    losses, _ = ex.vjp_black_box_loss(rng)
    print(f"loss of M(F(x)) vs x: {losses[0]:.4f} at step 0 -> {losses[-1]:.4f} at step {len(losses) - 1}")
    section("VJP Q&A: grad_ys (output_gradients) as the multiplier of each target")
    r = ex.vjp_grad_ys()
    print("d cost / [W, b]:", [float(gr) for gr in r["grads"]])
    print("gradient(pred, [W, b], output_gradients=dcost/dpred):", [float(gr) for gr in r["via_grad_ys"]])
    section("VJP Q&A: breaking the gradient computation into two parts")
    r = ex.vjp_gradient_in_two_parts()
    print("grad:         ", r["grad"].numpy())
    print("grad_by_parts:", r["grad_by_parts"].numpy())
    print("jacobian(out, x).shape:", r["j"].shape)
    print("part_grad_1 @ jacobian:", (r["part_grad_1"] @ np.reshape(r["j"], [5, 10])).numpy())
    section("VJP Q&A: reduce the last dimension of a rank-3 tensor")
    r = ex.vjp_reduce_last_dimension(rng)
    print("y.shape:", r["y"].shape, " d sum(y)/dW shape:", r["grad"].shape)
    print("or keep N and map M -> Q:", r["keep_n"].shape)
    section("VJP Q&A: the gradient of a loss at a variable")
    print(ex.vjp_gradient_of_loss_at_variable())  # Returns 6


def tutorial():
    section("tutorial: computing gradients")
    print(ex.tutorial_computing_gradients().numpy())
    section("tutorial: controlling what the tape watches")
    _, unwatched, watched = ex.tutorial_what_the_tape_watches()
    for g in unwatched + watched:
        print(g)
    section("tutorial: disable automatic tracking")
    for g in ex.tutorial_disable_tracking():
        print(g)
    section("tutorial: multiple gradients (persistent tape)")
    dz_dx, dy_dx = ex.tutorial_multiple_gradients()
    print("First derivative of function y = x ^ 4 at x = 3 is", dz_dx.numpy())
    print("First derivative of function y = x ^ 2 at x = 3 is", dy_dx.numpy())
    section("tutorial: nested gradients")
    dy_dx, d2y_d2x = ex.tutorial_nested_gradients()
    print("Function: y = x * x, x = 3.0")
    print("First Derivative:", dy_dx.numpy())
    print("Second Derivative:", d2y_d2x.numpy())


def main():
    os.makedirs(OUT, exist_ok=True)
    start = time.perf_counter()
    rng = np.random.default_rng(0)  # tf.random.normal: one generator, drawn from in the documents' order
    print("srcad", ad.__version__, "- the examples of TensorFlow's autodiff documents on NumPy")
    guide(rng)
    api_reference(rng)
    vjp_questions_and_answers(rng)
    tutorial()
    section("compiled: @ad.function on an RK4 integrator (examples/compiled_rk4.py)")
    compiled_rk4.main()
    section("functional API: fitting a compiled model with SciPy (examples/fit_with_scipy.py)")
    fit_with_scipy.main()
    print(f"\nall examples ran in {time.perf_counter() - start:.1f} s; figures in {os.path.relpath(OUT)}/")


if __name__ == "__main__":
    main()
