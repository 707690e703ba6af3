"""Compile the forward and adjoint kernels of every case to PTX for sm_90 (no GPU, no simulator) and print,
as JSON, whether each holds a floating-point atomic add: {case: [forward, adjoint]}."""
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import srcad as ad  # noqa: E402
from srcad.cuda.launch import compiling_ptx  # noqa: E402

import _cuda_kernels as K  # noqa: E402

ATOMIC_ADD = ("atom.global.add.f64", "red.global.add.f64")
found = {}
for name, (fn, outputs, blocks, threads, make, active) in sorted(K.CASES.items()):
    args = make(np.random.default_rng(0))
    with compiling_ptx((9, 0)) as ptx:
        values = [ad.Variable(a) if i in active else a for i, a in enumerate(args)]
        with ad.GradientTape() as tape:
            outs = ad.kernel(fn, outputs=outputs)[blocks, threads](*values)
            loss = sum(np.sum(o) for o in (outs if isinstance(outs, tuple) else (outs,)))
        tape.gradient(loss, [values[i] for i in active])
    forward = [v for k, v in ptx.items() if "_forward_" in k]
    adjoint = [v for k, v in ptx.items() if "_adjoint_" in k]
    assert forward and adjoint, (name, list(ptx))
    found[name] = [any(a in p for p in forward for a in ATOMIC_ADD), any(a in p for p in adjoint for a in ATOMIC_ADD)]
print(json.dumps(found))
