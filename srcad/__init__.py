"""srcad: TensorFlow's GradientTape for NumPy, and compiled gradients of loop-heavy Python."""

from . import nn
from .accumulator import ForwardAccumulator
from .custom import Operation, RegisterGradient, custom_gradient, no_gradient, stop_gradient
from .function import function, show_source
from .functional import grad, hessian, hvp, jvp, value_and_grad, vjp
from .nn import clip_by_norm, clip_by_value, relu, sigmoid
from .tape import GradientTape, UnconnectedGradients
from .tensor import GradientLostWarning, Tensor, Variable, constant, convert_to_tensor

__version__ = "0.1.0"

__all__ = [
    "Tensor", "Variable", "constant", "convert_to_tensor", "GradientLostWarning",
    "GradientTape", "UnconnectedGradients", "ForwardAccumulator",
    "stop_gradient", "custom_gradient", "RegisterGradient", "no_gradient", "Operation",
    "function", "show_source", "TransformError", "kernel",
    "grad", "value_and_grad", "vjp", "jvp", "hvp", "hessian",
    "nn", "sigmoid", "relu", "clip_by_norm", "clip_by_value",
]


def __getattr__(name):
    # The compiler (and Numba) load on first use: eager-only programs never pay for them.
    if name == "TransformError":
        from .compiler import TransformError
        return TransformError
    if name == "kernel":              # numba.cuda loads only for kernels
        from .cuda import kernel
        return kernel
    raise AttributeError(f"module 'srcad' has no attribute {name!r}")
