"""Launch a differentiated kernel and its gradient once (on a real GPU), then print, as JSON, how many of the
generated kernels' compiles Numba's disk cache served and how many it missed: {"hits": n, "misses": m}."""
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import srcad as ad  # noqa: E402

import _cuda_kernels as K  # noqa: E402

x = ad.Variable(np.linspace(-1.0, 1.0, 300))
with ad.GradientTape() as tape:
    loss = np.sum(ad.kernel(K.softplus, outputs=["out"])[3, 128](np.array([1.5]), x, np.zeros(300)))
tape.gradient(loss, x)
hits = misses = 0
for name, module in list(sys.modules.items()):
    if name.startswith("srcad_generated_"):
        for value in vars(module).values():
            stats = getattr(value, "stats", None)
            if hasattr(stats, "cache_hits"):
                hits += sum(stats.cache_hits.values())
                misses += sum(stats.cache_misses.values())
print(json.dumps({"hits": hits, "misses": misses}))
