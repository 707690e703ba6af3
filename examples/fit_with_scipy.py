"""Fitting a model with SciPy through srcad's functional API.

The model is a damped oscillator integrated with explicit Euler steps in a
plain loop (`@ad.function`); its parameters are fitted to noisy observations
twice: BFGS with `ad.value_and_grad` (value and gradient in one call, as
`scipy.optimize.minimize(..., jac=True)` expects) and Newton-CG with
`ad.hvp` (Hessian-vector products, forward over reverse, through the
compiled code).

Run:  python examples/fit_with_scipy.py
"""
import numpy as np
from scipy.optimize import minimize

import srcad as ad


@ad.function
def simulate(params, n, dt):
    """Positions of x'' = -k x - c x' from x(0) = 1, x'(0) = 0, at n Euler steps of dt."""
    k, c = params[0], params[1]
    x, v = 1.0, 0.0
    out = np.zeros(n)
    for i in range(n):
        a = -k * x - c * v
        x = x + dt * v
        v = v + dt * a
        out[i] = x
    return out


@ad.function
def loss(params, observed, dt):
    predicted = simulate(params, observed.shape[0], dt)
    r = 0.0
    for i in range(observed.shape[0]):
        r += (predicted[i] - observed[i]) ** 2
    return r


def main():
    rng = np.random.default_rng(0)
    truth, dt, n = np.array([4.0, 0.3]), 0.01, 600
    observed = simulate(truth, n, dt).numpy() + 0.01 * rng.normal(size=n)
    start = np.array([2.5, 0.8])

    def f(p):
        return loss(p, observed, dt)

    bfgs = minimize(ad.value_and_grad(f), start, jac=True, method="BFGS")
    newton = minimize(lambda p: float(f(p).numpy()), start, jac=ad.grad(f),
                      hessp=lambda p, v: ad.hvp(f, p, v), method="Newton-CG")
    print(f"true parameters      k = {truth[0]:.4f}, c = {truth[1]:.4f}")
    for name, result in (("BFGS + value_and_grad", bfgs), ("Newton-CG + hvp", newton)):
        print(f"{name:<21} k = {result.x[0]:.4f}, c = {result.x[1]:.4f}  ({result.nit} iterations, "
              f"loss {result.fun:.5f})")
    print("Hessian at the fit:\n", ad.hessian(f)(newton.x))
    return bfgs, newton


if __name__ == "__main__":
    main()
