"""Interleaved timing, shared by the benchmarks: every repetition times one block of each variant in turn,
so that a change of load on the machine hits them all alike; medians are reported."""
import statistics
import time


def per_call(step, block):
    """Seconds per call of `step`, over a block of about `block` seconds (the count calibrated by one call)."""
    start = time.perf_counter()
    step()
    n = max(1, int(block / max(time.perf_counter() - start, 1e-7)))
    start = time.perf_counter()
    for _ in range(n):
        step()
    return (time.perf_counter() - start) / n


def interleaved(variants, reps, block):
    """{name: median seconds per call} of `variants` ({name: step}), `reps` blocks each, interleaved."""
    times = {name: [] for name in variants}
    for _ in range(reps):
        for name, step in variants.items():
            times[name].append(per_call(step, block))
    return {name: statistics.median(t) for name, t in times.items()}
