"""Checking and timing the rows of the workloads: what `python -m benchmarks` does between its command line
and its report.

Per row: every tool runs once (its first call, timed apart as its compile / warm-up time) and its result
is compared with the reference tool's and with the golden values; a tool that disagrees or fails is
dropped from the row with a message. The survivors, the row's primal and the tools' own objectives are
then timed in one interleaved loop (benchmarks/timing.py), so that a change of load hits all alike.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np

from . import harness, timing
from .harness import arrays, describe

TOLERANCE = 1e-8
PRIMAL = "primal"


@dataclass
class Timed:
    """One tool's times in a row, seconds."""
    first: float                  # the first call: compile and warm-up, excluded from the rest
    samples: list                 # seconds per call, one per repetition
    objective: list | None = None  # its own objective's samples, where it has one

    @property
    def min(self):
        return min(self.samples)

    @property
    def median(self):
        return statistics.median(self.samples)

    @property
    def objective_median(self):
        return None if self.objective is None else statistics.median(self.objective)


@dataclass
class Result:
    """A row as measured: times per tool (the primal under PRIMAL) and what was left out, and why."""
    workload: str
    size: str
    reference: str
    times: dict = field(default_factory=dict)
    messages: list = field(default_factory=list)
    note: str = ""


def disagreement(a, b):
    """Largest relative disagreement of gradients `a` and `b` (tuples of arrays), each array measured as
    max|a - b| / max(max|b|, tiny); inf where their structure differs."""
    if len(a) != len(b):
        return float("inf")
    worst = 0.0
    for x, y in zip(a, b):
        if x.size != y.size:
            return float("inf")
        x, y = x.ravel(), y.ravel()
        scale = max(float(np.max(np.abs(y), initial=0.0)), np.finfo(np.float64).tiny)
        worst = max(worst, float(np.max(np.abs(x - y), initial=0.0)) / scale)
    return worst


def first_call(step):
    """(seconds, result) of one call."""
    start = time.perf_counter()
    result = step()
    return time.perf_counter() - start, result


def check(row, result):
    """Run every tool once; return {label: first-call seconds} of those that ran and agree with the
    reference tool (checked first against the golden values) and the golden values, within TOLERANCE."""
    firsts, values = {}, {}
    for label, tool in row.tools.items():
        try:
            firsts[label], value = first_call(tool.gradient)
            values[label] = arrays(value)
            if tool.objective is not None:
                first_call(tool.objective)
        except Exception as exc:
            result.messages.append(f"{label}: failed: {describe(exc)}")
            firsts.pop(label, None)
            values.pop(label, None)
    golden = None if row.golden is None else arrays(row.golden)
    reference = values.get(row.reference)
    if reference is None:
        result.messages.append(f"{row.reference} (the reference): missing, tools compared with the golden "
                               f"values only" if golden is not None else
                               f"{row.reference} (the reference): missing, tools not compared")
    order = sorted(values, key=lambda label: label != row.reference)   # the reference first
    for label in order:
        for against, name in ((golden, "the golden values"), (reference, row.reference)):
            if against is None or label == name:
                continue
            rel = disagreement(values[label], against)
            if not rel <= TOLERANCE:
                result.messages.append(f"{label}: dropped, disagrees with {name}: relative difference {rel:.2e}")
                firsts.pop(label)
                if label == row.reference:
                    reference = None
                break
    return firsts


def time_row(row, reps, block, budget, progress=None):
    """Check the row's tools, then time the survivors, its primal and their objectives interleaved."""
    result = Result(row.workload, row.size, row.reference, messages=list(row.notes), note=row.note)
    firsts = check(row, result)
    primal_first, _ = first_call(row.primal)
    variants = {PRIMAL: row.primal}
    for label in firsts:
        variants[label] = row.tools[label].gradient
        if row.tools[label].objective is not None:
            variants[label + " objective"] = row.tools[label].objective
    samples = timing.interleaved_samples(variants, reps, block, budget, progress)
    result.times[PRIMAL] = Timed(primal_first, samples[PRIMAL])
    for label, first in firsts.items():
        result.times[label] = Timed(first, samples[label], samples.get(label + " objective"))
    return result


# -- compile times of srcad's tools, cold and from the disk cache, in fresh processes ---------------------


def chosen(rows, quick, tiny):
    """The rows the options keep, each with the tools that `--tools` keeps: only the smallest size of each
    workload with `quick` or `tiny`, and with `tiny` only the reference among srcad's formulations (one
    compile per workload)."""
    for row in rows:
        if (quick or tiny) and not row.quick:
            continue
        row.tools = {label: tool for label, tool in row.tools.items() if harness.selected(label)
                     and not (tiny and label.startswith("srcad") and label != row.reference)}
        yield row


def compile_child(module, quick, tiny):
    """Run in a fresh process: print, as JSON lines, the first call of every srcad tool of `module`."""
    harness.SELECTED = {"srcad"}
    for row in chosen(module.rows(quick or tiny), quick, tiny):
        for label, tool in row.tools.items():
            if label.startswith("srcad"):
                seconds, _ = first_call(tool.gradient)
                print("COMPILE " + json.dumps({"row": f"{row.workload} {row.size}", "tool": label, "s": seconds}),
                      flush=True)


def compile_times(name, options):
    """{(row, tool): (cold s, cached s)} of workload `name`'s srcad tools: two fresh processes over the same,
    first empty, srcad and Numba cache directories."""
    cache = tempfile.mkdtemp(prefix="srcad_bench_cache_")
    env = dict(os.environ, SRCAD_CACHE_DIR=cache, NUMBA_CACHE_DIR=os.path.join(cache, "numba"))
    command = [sys.executable, "-m", "benchmarks", "--compile-child", name, *options]
    out = {}
    try:
        for _ in ("cold", "cached"):
            done = subprocess.run(command, env=env, capture_output=True, text=True,
                                  cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            if done.returncode != 0:
                raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no output")
            for line in done.stdout.splitlines():
                if line.startswith("COMPILE "):
                    record = json.loads(line[len("COMPILE "):])
                    out.setdefault((record["row"], record["tool"]), []).append(record["s"])
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return {key: tuple(v) for key, v in out.items() if len(v) == 2}
