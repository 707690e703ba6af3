"""Gradient control: stop_gradient, custom_gradient, RegisterGradient, no_gradient."""

from .tensor import Tensor


def stop_gradient(x):
    """The value of ``x`` as a constant: no gradient flows back through it."""
    return Tensor._wrap(x._value if isinstance(x, Tensor) else Tensor(x)._value)
