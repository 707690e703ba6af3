"""Tensor and Variable: NumPy values that the tape can follow.

A Tensor is an immutable wrapper of a NumPy array (or NumPy scalar).  Its
operators and the NumPy protocols (``__array_ufunc__``, ``__array_function__``)
route every call through ``srcad.ops``, where differentiable operations are
recorded on the recording tapes.  A Variable is a Tensor whose value can be
replaced with ``assign*``; the tape sees a *read* of the variable as a tensor of
its own, so later assignments never change gradients already recorded.
"""

import itertools
import os
import sys
import warnings

import numpy as np

__all__ = ["Tensor", "Variable", "constant", "convert_to_tensor", "GradientLostWarning"]


class GradientLostWarning(UserWarning):
    """NumPy turned a Tensor that a recording tape needs into a plain array (``np.array([t1, t2])``,
    ``np.asarray(t)``): what is computed from that array carries no gradient back to the Tensor."""


def _format_value(value):
    return np.array2string(np.asarray(value), separator=", ", threshold=20) if np.ndim(value) else repr(np.asarray(value).item())


class Tensor:
    """An immutable array value; operations on it are recorded by active tapes.

    ``Tensor(value)`` copies ``value`` (as TensorFlow's eager tensors do), so changing the caller's array
    afterwards cannot change the Tensor.
    """

    __slots__ = ("_value", "__weakref__")
    __array_priority__ = 100

    def __init__(self, value, dtype=None):
        if isinstance(value, Tensor):
            value = value._value
        _reject_non_numeric(value)
        array = np.array(value, dtype=dtype)  # a copy: the caller's array may change later
        if array.dtype.kind not in "biufc":
            raise TypeError(f"Cannot convert {value!r} to a Tensor: got NumPy dtype {array.dtype}, expected a "
                            f"number, a NumPy array or a nested list of numbers (bool, int, float or complex)")
        self._value = array[()] if array.ndim == 0 else array  # rank 0 as a NumPy scalar: fast arithmetic

    @classmethod
    def _wrap(cls, value):
        """Wrap an op's NumPy result without copying or validating it."""
        t = object.__new__(Tensor)
        t._value = value
        return t

    # -- NumPy-like attributes -------------------------------------------------
    def numpy(self):
        """The value as a NumPy array (a NumPy scalar for rank 0)."""
        v = self._value
        return v[()] if isinstance(v, np.ndarray) and v.ndim == 0 else v

    @property
    def shape(self):
        return np.shape(self._value)

    @property
    def dtype(self):
        return self._value.dtype

    @property
    def ndim(self):
        return np.ndim(self._value)

    @property
    def size(self):
        return np.size(self._value)

    @property
    def T(self):
        return _ops.transpose(self)

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a rank-0 Tensor is undefined")
        return self.shape[0]

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a rank-0 Tensor")
        return (self[i] for i in range(self.shape[0]))

    def __array__(self, dtype=None, copy=None):
        tapes = _tape.recording_tapes()
        if tapes and _tape.needs_gradient(self, tapes):
            warnings.warn(
                "A Tensor that a recording GradientTape tracks was converted to a NumPy array (np.array or "
                "np.asarray of it, or a NumPy function given a list holding it): values computed from that array "
                "get no gradient through it. Use np.stack / np.concatenate to combine Tensors, or .numpy() to "
                "drop the gradient on purpose.", GradientLostWarning, stacklevel=_caller_outside_numpy())
        value = np.asarray(self._value)
        return value.astype(dtype) if dtype is not None else value

    def __float__(self):
        return float(self._value)

    def __int__(self):
        return int(self._value)

    def __index__(self):
        return int(self._value)

    def __bool__(self):
        return bool(self._value)

    def __hash__(self):
        return id(self)

    def __repr__(self):
        return f"<ad.Tensor: shape={self.shape}, dtype={self.dtype}, numpy={_format_value(self._value)}>"

    def __str__(self):
        return f"ad.Tensor({_format_value(self._value)}, shape={self.shape}, dtype={self.dtype})"

    # -- methods ---------------------------------------------------------------
    def reshape(self, *shape):
        return _ops.reshape(self, shape[0] if len(shape) == 1 else shape)

    def transpose(self, *axes):
        return _ops.transpose(self, axes[0] if len(axes) == 1 else (axes or None))

    def sum(self, axis=None, keepdims=False):
        return _ops.sum(self, axis=axis, keepdims=keepdims)

    def mean(self, axis=None, keepdims=False):
        return _ops.mean(self, axis=axis, keepdims=keepdims)

    def max(self, axis=None, keepdims=False):
        return _ops.max(self, axis=axis, keepdims=keepdims)

    def min(self, axis=None, keepdims=False):
        return _ops.min(self, axis=axis, keepdims=keepdims)

    def astype(self, dtype):
        return _ops.cast(self, dtype)

    def __getitem__(self, index):
        return _ops.getitem(self, index)

    def __setitem__(self, index, value):
        raise TypeError("Tensor is immutable: build a new one (np.where, ad.concat) or use a Variable's assign")

    # -- operators (the arithmetic ones, + - * / // % ** @ and their reflections, are bound by
    # ops/numpy_api.py, where the primitives they call exist) ------------------------------------
    def __neg__(self):
        return _ops.negative(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return _ops.abs(self)

    def __lt__(self, other):
        return _ops.less(self, other)

    def __le__(self, other):
        return _ops.less_equal(self, other)

    def __gt__(self, other):
        return _ops.greater(self, other)

    def __ge__(self, other):
        return _ops.greater_equal(self, other)

    def __eq__(self, other):
        return _ops.equal(self, other)

    def __ne__(self, other):
        return _ops.not_equal(self, other)

    # -- NumPy protocols -----------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return _ops.dispatch_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return _ops.dispatch_function(func, args, kwargs)


_variable_ids = itertools.count()


class Variable(Tensor):
    """A mutable, named tensor; trainable ones are watched when a tape reads them."""

    __slots__ = ("trainable", "name", "_read", "_order")

    def __init__(self, initial_value, trainable=True, name=None, dtype=None):
        super().__init__(initial_value, dtype=dtype)  # a copy, as tf.Variable's
        self.trainable = bool(trainable)
        self.name = name if name is not None else "Variable"
        self._read = None
        self._order = next(_variable_ids)

    def read_value(self):
        """The tensor that stands for the current value in recorded operations."""
        read = self._read
        if read is None:
            read = self._read = _VariableRead(self)
        return read

    def assign(self, value):
        """Replace the value (not differentiable): later reads see the new value."""
        _reject_non_numeric(value)
        new = np.asarray(value._value if isinstance(value, Tensor) else value, dtype=self.dtype)
        if new.shape != self.shape:
            raise ValueError(f"Cannot assign a value of shape {new.shape} to variable '{self.name}' of shape {self.shape}")
        self._value = new[()] if new.ndim == 0 else np.array(new)
        self._read = None
        return self

    def assign_add(self, delta):
        return self.assign(self._value + self._delta(delta))

    def assign_sub(self, delta):
        return self.assign(self._value - self._delta(delta))

    def _delta(self, delta):
        _reject_non_numeric(delta)
        delta = np.asarray(delta._value if isinstance(delta, Tensor) else delta)
        try:
            fits = np.broadcast_shapes(delta.shape, self.shape) == self.shape
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(f"Cannot assign a value of shape {delta.shape} to variable '{self.name}' of shape {self.shape}")
        return delta

    def __hash__(self):
        return id(self)

    def __repr__(self):
        return f"<ad.Variable '{self.name}' shape={self.shape} dtype={self.dtype}, numpy={_format_value(self._value)}>"


class _VariableRead(Tensor):
    """The value of a Variable between two assignments, as the tape sees it."""

    __slots__ = ("variable",)

    def __init__(self, variable):
        self._value = variable._value
        self.variable = variable


_NUMPY_DIR = os.path.dirname(np.__file__)


def _caller_outside_numpy():
    """The ``stacklevel`` of the first frame above ``__array__`` that is not NumPy's own code."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_code.co_filename.startswith(_NUMPY_DIR):
        frame, level = frame.f_back, level + 1
    return level


def _reject_non_numeric(value):
    if value is None or isinstance(value, (str, bytes)):
        raise TypeError(f"Cannot convert {value!r} of type {type(value).__name__} to a Tensor: expected a number, a NumPy array or a nested list of numbers")


def constant(value, dtype=None):
    """A Tensor holding a copy of ``value``, as ``tf.constant``: changing ``value`` afterwards does not
    change it (NumPy's dtypes: float64 by default for Python floats)."""
    return Tensor(value, dtype=dtype)


def convert_to_tensor(value, dtype=None):
    """``value`` itself if it is already a Tensor of the requested dtype (Tensors are immutable), else a new
    Tensor holding a copy of it: a NumPy array is copied, as TensorFlow's eager ``convert_to_tensor``
    does, so that later changes to the array cannot reach values a tape has recorded."""
    if isinstance(value, Tensor) and (dtype is None or value.dtype == np.dtype(dtype)):
        return value
    return Tensor(value, dtype=dtype)


from . import ops as _ops  # noqa: E402  (operators need the op table; it needs Tensor)
from . import tape as _tape  # noqa: E402  (the tape needs Tensor)
