"""Neural-network pieces: activations, clipping, and Keras-like Dense / BatchNormalization.

Everything here is built from srcad operations, so it records on the tape and is
differentiable to any order.  ``sigmoid`` and ``relu`` are primitives of their
own (one NumPy call forward, a short rule backward) because they sit on hot
paths; ``elu`` and ``softplus`` are compositions of existing primitives.

The layers follow Keras: a layer creates its variables the first time it is
called (``built``), exposes ``kernel`` / ``bias`` (Dense) or ``gamma`` / ``beta``
/ ``moving_mean`` / ``moving_variance`` (BatchNormalization), and lists them in
``variables``, ``trainable_variables`` and ``non_trainable_variables``.
"""

import numpy as np

from .ops import rules as _r
from .ops.registry import primitive
from .tensor import Tensor, Variable, convert_to_tensor

__all__ = [
    "relu", "elu", "sigmoid", "softplus", "tanh", "clip_by_norm", "clip_by_value",
    "Layer", "Dense", "BatchNormalization", "get_activation",
]


# -- activations ------------------------------------------------------------------------


def _sigmoid_value(x):
    """1 / (1 + exp(-x)) without overflow: exp is only taken of -|x|."""
    x = np.asarray(x)
    if x.dtype.kind not in "fc":
        x = x.astype(np.float64)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


_sigmoid = primitive(_sigmoid_value, lambda g, ans, x: g * ans * (1 - ans), name="sigmoid")
# The relu rule multiplies by the mask (as TensorFlow's ReluGrad): np.where with a data-dependent
# condition is ~20x slower than a multiply on large arrays (branch mispredictions).
_relu = primitive(lambda x: np.maximum(x, 0), lambda g, ans, x: g * (ans > 0), name="relu")


def sigmoid(x):
    """The logistic function ``1 / (1 + exp(-x))``, stable for any ``x``; its gradient is ``s * (1 - s)``."""
    return _sigmoid(convert_to_tensor(x))


def relu(x):
    """``max(x, 0)``; the gradient at 0 is 0, as in TensorFlow."""
    return _relu(convert_to_tensor(x))


def elu(x, alpha=1.0):
    """``x`` where ``x > 0``, else ``alpha * (exp(x) - 1)``."""
    x = convert_to_tensor(x)
    negative_part = np.expm1(np.minimum(x, 0.0))  # never exp of a large positive number
    if alpha != 1.0:
        negative_part = negative_part * alpha
    return _r.where(x > 0, x, negative_part)


def softplus(x):
    """``log(1 + exp(x))``, computed as ``logaddexp(0, x)`` (no overflow); its gradient is ``sigmoid(x)``."""
    return np.logaddexp(0.0, convert_to_tensor(x))


def tanh(x):
    return np.tanh(convert_to_tensor(x))


def linear(x):
    return convert_to_tensor(x)


_ACTIVATIONS = {"relu": relu, "elu": elu, "sigmoid": sigmoid, "softplus": softplus, "tanh": tanh,
                "linear": linear}


def get_activation(activation):
    """An activation callable from a callable, a name ('relu', 'elu', ...) or None (identity)."""
    if activation is None:
        return None
    if callable(activation):
        return activation
    if isinstance(activation, str) and activation in _ACTIVATIONS:
        return None if activation == "linear" else _ACTIVATIONS[activation]
    raise ValueError(f"Unknown activation {activation!r}: expected None, a callable or one of "
                     f"{sorted(_ACTIVATIONS)}")


# -- clipping (TensorFlow semantics) ---------------------------------------------------------


def clip_by_norm(t, clip_norm, axes=None):
    """Rescale ``t`` so that its L2 norm (over ``axes``, all by default) is at most ``clip_norm``.

    As ``tf.clip_by_norm``: ``t * clip_norm / max(norm(t), clip_norm)``, with a
    zero tensor left unchanged (and a finite gradient there).
    """
    t = convert_to_tensor(t)
    if t.dtype.kind not in "fc":
        raise TypeError(f"clip_by_norm needs a floating tensor, got dtype {t.dtype}")
    if np.ndim(clip_norm) != 0:
        raise ValueError(f"clip_norm must be a scalar, got shape {np.shape(clip_norm)}")
    if isinstance(axes, list):
        axes = tuple(axes)
    l2sum = np.sum(t * t, axis=axes, keepdims=True)
    positive = l2sum.numpy() > 0
    safe = _r.where(positive, l2sum, 1.0)
    l2norm = _r.where(positive, np.sqrt(safe), l2sum)
    return t * clip_norm / np.maximum(l2norm, clip_norm)


def clip_by_value(t, clip_value_min, clip_value_max):
    """Clip ``t`` elementwise to ``[clip_value_min, clip_value_max]`` (as ``tf.clip_by_value``).

    The bounds may be scalars or tensors that broadcast to ``t``'s shape (the
    result keeps ``t``'s shape).  Gradients flow to ``t`` where it lies inside the
    bounds (inclusive) and to a bound where it is the one taken.
    """
    t = convert_to_tensor(t)
    for name, bound in (("clip_value_min", clip_value_min), ("clip_value_max", clip_value_max)):
        shape = np.shape(bound.numpy() if isinstance(bound, Tensor) else bound)
        try:
            ok = np.broadcast_shapes(shape, t.shape) == t.shape
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"{name} of shape {shape} is incompatible with t of shape {t.shape}: it must "
                             f"broadcast to t's shape")
    return np.maximum(np.minimum(t, clip_value_max), clip_value_min)


# -- layers --------------------------------------------------------------------------------


def _initializer(spec):
    """An initializer ``(shape, dtype, rng) -> ndarray`` from a name or a callable."""
    if callable(spec):
        return spec
    if spec == "glorot_uniform":
        return glorot_uniform
    if spec == "zeros":
        return lambda shape, dtype, rng: np.zeros(shape, dtype)
    if spec == "ones":
        return lambda shape, dtype, rng: np.ones(shape, dtype)
    raise ValueError(f"Unknown initializer {spec!r}: expected 'glorot_uniform', 'zeros', 'ones' or a callable "
                     f"(shape, dtype, rng) -> array")


def glorot_uniform(shape, dtype, rng):
    """Uniform on ``[-limit, limit]`` with ``limit = sqrt(6 / (fan_in + fan_out))`` (Keras' default)."""
    fan_in = int(np.prod(shape[:-1])) if len(shape) > 1 else shape[0]
    fan_out = shape[-1]
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=shape).astype(dtype)


class Layer:
    """Keras-like base: variables are created by ``build`` on the first call."""

    def __init__(self, name=None, dtype=None):
        self.name = name or type(self).__name__.lower()
        self.dtype = None if dtype is None else np.dtype(dtype)
        self.built = False
        self._variables = []

    def add_weight(self, name, shape, initializer, trainable=True, rng=None):
        value = _initializer(initializer)(tuple(shape), self.dtype, rng)
        var = Variable(np.asarray(value, dtype=self.dtype), trainable=trainable, name=f"{self.name}/{name}")
        self._variables.append(var)
        return var

    @property
    def variables(self):
        """All variables, trainable first (as Keras' ``weights``); empty before the first call."""
        return self.trainable_variables + self.non_trainable_variables

    @property
    def weights(self):
        return self.variables

    @property
    def trainable_variables(self):
        return [v for v in self._variables if v.trainable]

    @property
    def non_trainable_variables(self):
        return [v for v in self._variables if not v.trainable]

    def build(self, input_shape):
        self.built = True

    def __call__(self, inputs, *args, **kwargs):
        inputs = convert_to_tensor(inputs)
        if not self.built:
            if self.dtype is None:
                self.dtype = inputs.dtype if inputs.dtype.kind == "f" else np.dtype(np.float64)
            self.build(inputs.shape)
            self.built = True
        return self.call(inputs, *args, **kwargs)

    def call(self, inputs):
        raise NotImplementedError

    def __repr__(self):
        return f"<{type(self).__name__} '{self.name}' built={self.built}>"


class Dense(Layer):
    """``activation(inputs @ kernel + bias)``; kernel ``(in, units)`` created on the first call.

    ``seed`` (or ``rng``, a ``numpy.random.Generator``) makes the Glorot-uniform
    kernel reproducible.  Variables take the input's float dtype (float64 for
    integer inputs) unless ``dtype`` is given.
    """

    def __init__(self, units, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", seed=None, rng=None, name=None, dtype=None):
        super().__init__(name=name, dtype=dtype)
        units = int(units)
        if units <= 0:
            raise ValueError(f"Dense needs a positive number of units, got {units}")
        self.units = units
        self.activation = get_activation(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = _initializer(kernel_initializer)
        self.bias_initializer = _initializer(bias_initializer)
        self._rng = rng if rng is not None else np.random.default_rng(seed)
        self.kernel = None
        self.bias = None

    def build(self, input_shape):
        if len(input_shape) < 1:
            raise ValueError(f"Dense needs inputs of rank >= 1, got shape {tuple(input_shape)}")
        self.kernel = self.add_weight("kernel", (input_shape[-1], self.units), self.kernel_initializer,
                                      rng=self._rng)
        if self.use_bias:
            self.bias = self.add_weight("bias", (self.units,), self.bias_initializer, rng=self._rng)

    def call(self, inputs, training=None):
        if inputs.shape[-1:] != self.kernel.shape[:1]:
            raise ValueError(f"Dense layer '{self.name}' was built for inputs with last dimension "
                             f"{self.kernel.shape[0]}, got inputs of shape {inputs.shape}")
        y = inputs @ self.kernel
        if self.use_bias:
            y = y + self.bias
        return self.activation(y) if self.activation is not None else y


class BatchNormalization(Layer):
    """Normalise over every axis but ``axis``; Keras semantics.

    ``training=True``: normalise with the batch mean and (biased) variance --
    differentiable through both -- and move ``moving_mean`` / ``moving_variance``
    towards them by ``1 - momentum`` (not recorded).  Otherwise (``training``
    False or None): normalise with the moving statistics.
    """

    def __init__(self, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True, name=None, dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.axis = axis
        self.momentum = float(momentum)
        self.epsilon = float(epsilon)
        self.center = bool(center)
        self.scale = bool(scale)
        self.gamma = self.beta = self.moving_mean = self.moving_variance = None

    def build(self, input_shape):
        ndim = len(input_shape)
        if ndim < 1:
            raise ValueError("BatchNormalization needs inputs of rank >= 1")
        axes = self.axis if isinstance(self.axis, (list, tuple)) else (self.axis,)
        self._axes = tuple(sorted(a % ndim for a in axes))
        self._reduce = tuple(i for i in range(ndim) if i not in self._axes)
        self._ndim = ndim
        shape = tuple(input_shape[a] for a in self._axes)
        if self.scale:
            self.gamma = self.add_weight("gamma", shape, "ones")
        if self.center:
            self.beta = self.add_weight("beta", shape, "zeros")
        self.moving_mean = self.add_weight("moving_mean", shape, "zeros", trainable=False)
        self.moving_variance = self.add_weight("moving_variance", shape, "ones", trainable=False)

    def _broadcastable(self, t):
        """Reshape a per-feature tensor so it broadcasts against the inputs."""
        shape = [1] * self._ndim
        for a, n in zip(self._axes, t.shape):
            shape[a] = n
        return np.reshape(t, tuple(shape))

    def call(self, inputs, training=None):
        if inputs.ndim != self._ndim:
            raise ValueError(f"BatchNormalization '{self.name}' was built for rank {self._ndim}, got inputs of "
                             f"shape {inputs.shape}")
        if training:
            mean = np.mean(inputs, axis=self._reduce, keepdims=True)
            centered = inputs - mean
            variance = np.mean(centered * centered, axis=self._reduce, keepdims=True)
            m = self.momentum
            self.moving_mean.assign(self.moving_mean.numpy() * m
                                    + np.reshape(mean.numpy(), self.moving_mean.shape) * (1 - m))
            self.moving_variance.assign(self.moving_variance.numpy() * m
                                        + np.reshape(variance.numpy(), self.moving_variance.shape) * (1 - m))
            y = centered / np.sqrt(variance + self.epsilon)
        else:
            mean = self._broadcastable(self.moving_mean)
            variance = self._broadcastable(self.moving_variance)
            y = (inputs - mean) / np.sqrt(variance + self.epsilon)
        if self.scale:
            y = y * self._broadcastable(self.gamma)
        if self.center:
            y = y + self._broadcastable(self.beta)
        return y
