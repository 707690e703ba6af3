"""Compile the forward and adjoint kernels of every case to PTX for sm_90 (no GPU, no simulator) and print,
as JSON, whether each holds a floating-point atomic add: {case: [forward, adjoint]}."""
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import srcad as ad  # noqa: E402
from srcad.cuda.launch import compiling_ptx  # noqa: E402

import _barrier_kernels as B  # noqa: E402
import _cuda_kernels as K  # noqa: E402

ATOMIC_ADD = ("atom.global.add.f64", "red.global.add.f64")
ELEMENTWISE = ad.function(K.elementwise_scale, target="cuda")


def atomics(launch, args, active):
    """[forward, adjoint]: does each hold a floating-point atomic add?"""
    with compiling_ptx((9, 0)) as ptx:
        values = [ad.Variable(a) if i in active else a for i, a in enumerate(args)]
        with ad.GradientTape() as tape:
            outs = launch(*values)
            loss = sum(np.sum(o) for o in (outs if isinstance(outs, tuple) else (outs,)))
        tape.gradient(loss, [values[i] for i in active])
    forward = [v for k, v in ptx.items() if "_forward_" in k]
    adjoint = [v for k, v in ptx.items() if "_adjoint_" in k]
    assert forward and adjoint, list(ptx)
    return [any(a in p for p in forward for a in ATOMIC_ADD), any(a in p for p in adjoint for a in ATOMIC_ADD)]


found = {}
for name, (fn, outputs, blocks, threads, make, active) in sorted(K.CASES.items()):
    found[name] = atomics(ad.kernel(fn, outputs=outputs)[blocks, threads], make(np.random.default_rng(0)), active)
found["block_sums"] = atomics(ad.kernel(B.block_sums, outputs=["out"])[3, 32], [np.ones(70), np.zeros(3)], (0,))
found["halo_stencil"] = atomics(ad.kernel(B.halo_stencil, outputs=["out"])[3, 32],
                                [np.ones(80), np.array([0.7]), np.zeros(80)], (0, 1))
found["elementwise_own"] = atomics(ELEMENTWISE, [np.ones((3, 4)), np.ones((3, 4))], (0, 1))
found["elementwise_spread"] = atomics(ELEMENTWISE, [np.ones((3, 4)), np.ones(4)], (0, 1))
print(json.dumps(found))
