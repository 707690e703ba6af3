"""The report of `python -m benchmarks`: RESULTS.md (table, machine, versions, command, messages) and a
bar chart, written from the measured rows (benchmarks/run.py's Result)."""
from __future__ import annotations

import datetime
import os
import platform
import sys
from importlib import metadata

from .run import PRIMAL

PACKAGES = ("srcad", "numpy", "numba", "llvmlite", "scipy", "jax", "jaxlib", "torch", "tensorflow-cpu",
            "tensorflow", "autograd", "tqdm", "matplotlib")


def machine():
    """The CPU model from /proc/cpuinfo, the cores of the machine and those this process may run on."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            names = [line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")]
        model = names[0] if names else model
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, pinned to core(s) {sorted(os.sched_getaffinity(0))}"


def versions():
    """'name version' of Python and every package that is installed among PACKAGES."""
    found = [f"Python {platform.python_version()}"]
    for name in PACKAGES:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    return found


def seconds(s):
    """A time in the unit that keeps three significant digits readable."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s * 1e9:.3g} ns"


def ratio(a, b):
    """a / b, three significant digits (whole numbers from 1000 on)."""
    if not b:
        return "-"
    r = a / b
    return f"{r:,.0f}" if r >= 1000 else f"{r:.3g}"


def median(t, reps):
    """The median, with the number of repetitions where the time budget allowed fewer than `reps`."""
    return seconds(t.median) + ("" if len(t.samples) >= reps else f" ({len(t.samples)} reps)")


def table(results, reps):
    """The Markdown table: a line per tool per row, the primal first."""
    lines = ["| workload | size | tool | min | median | x objective | x srcad | first call |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        primal = r.times[PRIMAL].median
        reference = r.times.get(r.reference)
        for label, t in r.times.items():
            if label == PRIMAL:
                lines.append(f"| {r.workload} | {r.size} | Numba primal | {seconds(t.min)} | {median(t, reps)} "
                             f"| 1 | - | {seconds(t.first)} |")
                continue
            own = "" if t.objective is None else f" (own: {seconds(t.objective_median)})"
            objective = primal if t.objective is None else t.objective_median
            vs = ratio(t.median, reference.median) if reference is not None else "-"
            lines.append(f"| {r.workload} | {r.size} | {label} | {seconds(t.min)} | {median(t, reps)} "
                         f"| {ratio(t.median, objective)}{own} | {vs} | {seconds(t.first)} |")
    return lines


def compile_table(compiled):
    """The table of srcad's first gradients in fresh processes: {(row, tool): (cold, cached)}."""
    lines = ["| row | tool | cold (empty caches) | cached |", "| --- | --- | --- | --- |"]
    for (row, tool), (cold, cached) in compiled.items():
        lines.append(f"| {row} | {tool} | {seconds(cold)} | {seconds(cached)} |")
    return lines


def messages(results, general):
    """Every tool left out, failed or dropped, per row, then the run's general messages."""
    lines = [f"* {r.workload} {r.size}: {m}" for r in results for m in r.messages]
    return lines + [f"* {m}" for m in general]


def markdown(results, compiled, general, args, elapsed):
    """The whole of RESULTS.md."""
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = "python -m benchmarks " + " ".join(sys.argv[1:])
    out = ["# Benchmark results", "",
           f"`{command.strip()}`, {when}, {elapsed:.0f} s.", "",
           f"* Machine: {machine()}; {args.threads} BLAS / intra-op thread(s) per tool; "
           f"load average at the end {os.getloadavg()[0]:.2f}.",
           f"* Versions: {', '.join(versions())}.",
           f"* Timing: {args.reps} interleaved repetitions of blocks of about {args.block * 1e3:.0f} ms per tool "
           f"(at least one call), at most {args.budget:.0f} s per tool and row (a slower tool gets fewer); "
           f"min and median of the per-call times. First call: the tool's first "
           f"gradient in this process (compile, warm-up), not in the min and median.",
           "* `x objective`: median time over the row's Numba primal, or over the tool's own objective "
           "where it has one (`own`, the srcad formulation under `numba.njit` or srcad's compiled primal). "
           "`x srcad`: median over the row's reference srcad tool's.",
           "", *table(results, args.reps), ""]
    if compiled:
        out += ["## srcad's first gradient in a fresh process", "",
                "Each workload module in two fresh processes over the same srcad and Numba cache "
                "directories, the first time empty (cold), the second filled (cached). The rows after a "
                "workload's first reuse the code compiled for it (same argument types): their first call is "
                "compiled code's first run.", "",
                *compile_table(compiled), ""]
    explained = [f"* {r.workload} {r.size}: {r.note}" for r in results if r.note]
    if explained:
        out += ["## Notes on rows", "", *explained, ""]
    notes = messages(results, general)
    out += ["## Left out, failed or dropped", "", *(notes or ["None: every tool ran and agreed."]), ""]
    return "\n".join(out)


def chart(results, path):
    """A bar chart, log scale: one group per row, one bar per tool's median gradient time, srcad's tools
    first (and in the strong colours), the row's Numba primal as a black line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = sorted({label for r in results for label in r.times if label != PRIMAL},
                    key=lambda label: (not label.startswith("srcad"), label))
    palette = [plt.get_cmap("tab20")(i) for i in (*range(0, 20, 2), *range(1, 20, 2))]
    colours = {label: palette[i % len(palette)] for i, label in enumerate(labels)}
    fig, ax = plt.subplots(figsize=(max(8.0, 0.75 * len(results) + 3), 6.0))
    width = 0.85
    for i, r in enumerate(results):
        tools = sorted((label for label in r.times if label != PRIMAL), key=labels.index)
        step = width / max(1, len(tools))
        for j, label in enumerate(tools):
            ax.bar(i - width / 2 + (j + 0.5) * step, r.times[label].median, step, color=colours[label],
                   label=label)
        ax.hlines(r.times[PRIMAL].median, i - width / 2, i + width / 2, colors="black", linewidth=1.5)
    handles, names = ax.get_legend_handles_labels()
    unique = dict(zip(names, handles))
    ax.legend([unique[label] for label in labels], labels, fontsize=8, loc="upper left",
              bbox_to_anchor=(1.01, 1.0))
    ax.set_yscale("log")
    ax.set_ylabel("seconds per gradient (median); black line: Numba primal")
    ax.set_xlim(-0.6, len(results) - 0.4)
    ax.set_xticks(range(len(results)))
    ax.set_xticklabels([f"{r.workload}\n{r.size.split(':')[0]}" for r in results], fontsize=7, rotation=40,
                       ha="right")
    ax.grid(axis="y", which="major", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
