"""srcad: TensorFlow's GradientTape for NumPy, and compiled gradients of loop-heavy Python."""

from . import ops
from .custom import stop_gradient
from .tape import GradientTape, UnconnectedGradients
from .tensor import Tensor, Variable, constant, convert_to_tensor

__version__ = "0.1.0"
