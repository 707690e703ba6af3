"""What a workload module hands to `python -m benchmarks`, and the few services they share.

A workload module exposes `rows(quick) -> Iterable[Row]`, lazily (data is read per row), each row
holding the steps of every tool that computes the same gradient. The runner (`__main__.py`) checks
them against each other, times them interleaved and writes the report; a module never times anything
itself, so that every workload is measured the same way.
"""
from __future__ import annotations

import functools
import importlib
import os
import sys
from dataclasses import dataclass, field
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA_DIRS = (os.path.join(HERE, "data", "adbench"), os.path.join(ROOT, "tests", "data", "adbench"))

# Set by the runner before any workload is built: the intra-op threads every peer gets, and the peers the
# command line asked for (None: all).
THREADS = 1
SELECTED = None
# Why each peer that was asked for could not be imported: {name: message}, reported once per run.
PEER_ERRORS: dict[str, str] = {}


@dataclass
class Tool:
    gradient: Callable[[], tuple]          # zero-arg step: computes the gradient (or Jacobian), returns numpy arrays
    objective: Callable[[], object] | None = None   # this tool's own primal, for "ratio to its objective"


@dataclass
class Row:
    workload: str        # "GMM", "LSTM", "BA", "RK4", "eager x*x*x", "Dense", "Dense jacobian", ...
    size: str            # "1k d2 K5"
    primal: Callable[[], object]   # the compiled (Numba) objective, the row's primal for ratios
    tools: dict[str, Tool]         # label -> Tool
    reference: str                 # the label the others are compared with (a srcad one)
    golden: tuple | None = None    # ADBench golden values (tuple of arrays), compared with the reference
    quick: bool = False            # smallest size of its workload: run by --quick
    note: str = ""
    notes: list = field(default_factory=list)   # tools left out while the row was built, one line each


# The `--tools` names and the labels they select (by prefix).
TOOL_PREFIXES = {
    "srcad": ("srcad",), "numba": ("Numba",), "jax": ("JAX",), "torch": ("PyTorch",), "pytorch": ("PyTorch",),
    "tensorflow": ("TensorFlow",), "tf": ("TensorFlow",), "autograd": ("autograd",),
}
# The peer module behind each `--tools` name.
PEER_OF = {"jax": "jax", "torch": "torch", "pytorch": "torch", "tensorflow": "tensorflow", "tf": "tensorflow",
           "autograd": "autograd"}


def selected(label):
    """Whether the command line's `--tools` keeps the tool `label`."""
    if SELECTED is None:
        return True
    return any(label.startswith(p) for name in SELECTED for p in TOOL_PREFIXES.get(name, (name,)))


def peer(name):
    """The peer module `name` ("jax", "torch", "tensorflow", "autograd") set up for `THREADS` intra-op threads
    and float64, or None when it is not installed, fails to import or was not asked for (`--tools`)."""
    if SELECTED is not None and name not in {PEER_OF.get(s) for s in SELECTED}:
        return None
    return _import_peer(name)


@functools.cache
def _import_peer(name):
    """Import and configure a peer once; record why it is missing."""
    try:
        module = importlib.import_module(name)
        _CONFIGURE.get(name, lambda m: None)(module)
        return module
    except Exception as exc:  # an absent or broken peer is reported, never fatal
        PEER_ERRORS[name] = describe(exc)
        return None


def _configure_jax(jax):
    """float64 everywhere; the thread count came from XLA_FLAGS, set before the import."""
    jax.config.update("jax_enable_x64", True)


def _configure_torch(torch):
    """Intra-op threads; inter-op can only be set before the first parallel region."""
    torch.set_num_threads(THREADS)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass


def _configure_tensorflow(tf):
    """Intra-op threads, one inter-op thread (only possible before TensorFlow starts its runtime); its
    Python warnings (AutoGraph's notes on closures it leaves as they are) kept off the progress bar."""
    tf.get_logger().setLevel("ERROR")
    try:
        tf.config.threading.set_intra_op_parallelism_threads(THREADS)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:
        pass


_CONFIGURE = {"jax": _configure_jax, "torch": _configure_torch, "tensorflow": _configure_tensorflow}


def describe(exc):
    """One line for an exception: its type and the first line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


def add_tools(row_tools, notes, makers):
    """Build the tools of `makers` ({label: () -> Tool or None}) that `--tools` keeps, into `row_tools`; a
    maker that raises is left out with a line in `notes`, and one that returns None (its peer is missing,
    reported apart) silently."""
    for label, make in makers.items():
        if not selected(label):
            continue
        try:
            tool = make()
        except Exception as exc:
            notes.append(f"{label}: left out while building: {describe(exc)}")
            continue
        if tool is not None:
            row_tools[label] = tool
    return row_tools


def adbench_path(rel):
    """The path of ADBench file `rel` ("gmm/1k/gmm_d2_K5.txt", "golden/...") in the benchmarks' data or
    the tests' (the tests hold the small files, the benchmarks only what the tests lack)."""
    for root in DATA_DIRS:
        path = os.path.join(root, rel)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"ADBench file {rel} is in none of {', '.join(DATA_DIRS)}")


def adbench_models():
    """tests/compiler/adbench_models.py: the ADBench loop objectives and readers the tests check."""
    path = os.path.join(ROOT, "tests", "compiler")
    if path not in sys.path:
        sys.path.insert(0, path)
    return importlib.import_module("adbench_models")


def golden_gradient(rel, shapes):
    """The golden gradient of data file `rel` split into arrays of `shapes` (in order), or None where it
    was not computed."""
    import numpy as np

    try:
        path = adbench_path("golden/" + adbench_models().golden_gradient_name(rel))
    except FileNotFoundError:
        return None
    flat = np.loadtxt(path, dtype=np.float64).ravel()
    parts, start = [], 0
    for shape in shapes:
        size = int(np.prod(shape))
        parts.append(flat[start:start + size].reshape(shape))
        start += size
    assert start == flat.size, (rel, start, flat.size)
    return tuple(parts)


def arrays(values):
    """A gradient as a tuple of float64 NumPy arrays, whatever framework's tensors it came in."""
    import numpy as np

    if not isinstance(values, (tuple, list)):
        values = (values,)
    out = []
    for v in values:
        if v is None:
            raise ValueError("the gradient is None (not connected)")
        if hasattr(v, "detach"):          # torch
            v = v.detach()
        if hasattr(v, "numpy") and not isinstance(v, np.ndarray):   # srcad, TensorFlow, torch
            v = v.numpy()
        out.append(np.asarray(v, dtype=np.float64))
    return tuple(out)
