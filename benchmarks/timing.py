"""Interleaved timing, shared by the benchmarks: every repetition times one block of each variant in turn,
so that a change of load on the machine hits them all alike; medians are reported."""
import statistics
import time


def calibrate(step, block):
    """(calls of `step` that make a block of about `block` seconds, seconds of the one call timed for it):
    run it warm."""
    seconds = time_block(step, 1)
    return max(1, int(block / max(seconds, 1e-7))), seconds


def time_block(step, n):
    """Seconds per call of `step` over `n` calls in a row."""
    start = time.perf_counter()
    for _ in range(n):
        step()
    return (time.perf_counter() - start) / n


def interleaved_samples(variants, reps, block, budget=float("inf"), progress=None):
    """{name: [seconds per call, one per repetition]} of `variants` ({name: step}), `reps` blocks each,
    interleaved. Each variant's block size is calibrated by one call (run them warm), which is its first
    sample when its block is one call; a variant slower than `budget` / `reps` gets only as many blocks as
    fit in `budget` seconds (at least one), the first ones. `progress()` is called after each block."""
    counts, times, wanted = {}, {}, {}
    for name, step in variants.items():
        counts[name], seconds = calibrate(step, block)
        times[name] = [seconds] if counts[name] == 1 else []
        wanted[name] = reps if seconds * reps <= budget else max(1, int(budget / seconds))
    for _ in range(reps):
        for name, step in variants.items():
            if len(times[name]) < wanted[name]:
                times[name].append(time_block(step, counts[name]))
            if progress is not None:
                progress()
    return times


def interleaved(variants, reps, block):
    """{name: median seconds per call} of `variants` ({name: step}), `reps` blocks each, interleaved."""
    return {name: statistics.median(t) for name, t in interleaved_samples(variants, reps, block).items()}
