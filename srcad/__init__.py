"""srcad: TensorFlow's GradientTape for NumPy, and compiled gradients of loop-heavy Python."""

from . import ops
from .custom import Operation, RegisterGradient, custom_gradient, no_gradient, stop_gradient
from .function import function, show_source
from .tape import GradientTape, UnconnectedGradients
from .tensor import Tensor, Variable, constant, convert_to_tensor
from . import nn
from .nn import clip_by_norm, clip_by_value, relu, sigmoid

__version__ = "0.1.0"


def __getattr__(name):
    # The compiler is imported on first use: eager-only programs never pay for it.
    if name == "TransformError":
        from .compiler import TransformError
        return TransformError
    raise AttributeError(f"module 'srcad' has no attribute {name!r}")
