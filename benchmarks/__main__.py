"""`python -m benchmarks`: every workload, every tool, checked then timed in one process; see README.md.

The command line is read before NumPy or any peer is imported: thread pools take their size from the
environment when they start, and the process is pinned to its core(s) first so that no pool sees more.
"""
import argparse
import os
import sys
import time


def command_line(argv=None):
    """The options (README.md: "The command")."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="each workload at its smallest size only")
    ap.add_argument("--tiny", action="store_true",
                    help="as --quick, with only the reference among srcad's formulations and 2 repetitions of "
                         "5 ms blocks: runs every workload and the whole harness in about a minute from empty "
                         "caches (the test suite's run); its times mean little")
    ap.add_argument("--tools", default="", help="comma list of srcad,numba,jax,torch,tensorflow,autograd (all)")
    ap.add_argument("--workloads", default="", help="comma list of workload modules (all: "
                                                     "eager,jacobians,rk4,gmm,lstm,ba)")
    ap.add_argument("--reps", type=int, default=7, help="interleaved repetitions per tool")
    ap.add_argument("--block", type=float, default=None,
                    help="seconds per timed block (default 0.1, 0.03 with --quick)")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds of timing per tool and row: a slower tool gets fewer repetitions "
                         "(default 60, 5 with --quick)")
    ap.add_argument("--threads", type=int, default=1, help="BLAS / intra-op threads per tool, and cores pinned")
    ap.add_argument("--out", default=os.path.join("benchmarks", "RESULTS.md"),
                    help="the report; the chart goes beside it as results.png")
    ap.add_argument("--compile-times", action="store_true",
                    help="also srcad's first gradients in fresh processes, cold and cached (slow)")
    ap.add_argument("--compile-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.block is None:
        args.block = 0.03 if args.quick or args.tiny else 0.1
    if args.budget is None:
        args.budget = 5.0 if args.quick or args.tiny else 60.0
    if args.tiny:
        args.reps = min(args.reps, 2)
        args.block = min(args.block, 0.005)
    return args


def pin(threads):
    """Pin this process to `threads` cores and size every thread pool to `threads`, before any starts."""
    cores = sorted(os.sched_getaffinity(0))[-threads:]
    os.sched_setaffinity(0, cores)
    for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS",
                "TF_NUM_INTRAOP_THREADS"):
        os.environ[var] = str(threads)
    os.environ["TF_NUM_INTEROP_THREADS"] = "1"
    os.environ["XLA_FLAGS"] = (f"--xla_cpu_multi_thread_eigen={'false' if threads == 1 else 'true'} "
                               f"intra_op_parallelism_threads={threads}")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main():
    args = command_line()
    pin(args.threads)
    from . import harness, workloads

    harness.THREADS = args.threads
    harness.SELECTED = set(filter(None, args.tools.split(","))) or None
    names = tuple(filter(None, args.workloads.split(","))) or workloads.NAMES
    modules, errors = workloads.load(names)
    if args.compile_child:
        from .run import compile_child

        return compile_child(modules[args.compile_child], args.quick, args.tiny)
    start = time.perf_counter()
    results, general = measure(modules, args)
    general += [f"workload module {name}: not run: {why}" for name, why in errors.items()]
    general += [f"{name}: not available: {why}" for name, why in harness.PEER_ERRORS.items()]
    compiled = compile_all(modules, args, general) if args.compile_times else {}
    write(results, compiled, general, args, time.perf_counter() - start)
    return 0 if results else 1


def measure(modules, args):
    """Check and time every row of `modules` that the options keep, with a progress bar; a workload that
    fails while building its rows is reported, the others still run."""
    from tqdm import tqdm

    from .harness import describe
    from .run import chosen, time_row

    results, general = [], []
    with tqdm(total=len(modules), unit="workload", file=sys.stderr) as bar:
        for name, module in modules.items():
            try:
                for row in chosen(module.rows(args.quick or args.tiny), args.quick, args.tiny):
                    bar.set_postfix_str(f"{row.workload} {row.size}")
                    try:
                        results.append(time_row(row, args.reps, args.block, args.budget, bar.refresh))
                    except Exception as exc:     # a tool that fails while timed: the row is lost, not the run
                        general.append(f"{row.workload} {row.size}: not timed: {describe(exc)}")
                        tqdm.write(general[-1], file=sys.stderr)
                        continue
                    for message in results[-1].messages:
                        tqdm.write(f"{row.workload} {row.size}: {message}", file=sys.stderr)
            except Exception as exc:             # building the module's next row failed
                general.append(f"workload {name}: stopped: {describe(exc)}")
                tqdm.write(general[-1], file=sys.stderr)
            bar.update(1)
    return results, general


def compile_all(modules, args, general):
    """srcad's cold and cached first gradients of each workload, in fresh processes."""
    from .harness import describe
    from .run import compile_times

    options = [flag for flag, on in (("--quick", args.quick), ("--tiny", args.tiny)) if on]
    compiled = {}
    for name in modules:
        try:
            compiled.update(compile_times(name, options))
        except Exception as exc:
            general.append(f"compile times of {name}: failed: {describe(exc)}")
    return compiled


def write(results, compiled, general, args, elapsed):
    """RESULTS.md at `--out`, results.png beside it, and the table on standard output."""
    from .report import chart, markdown

    text = markdown(results, compiled, general, args, elapsed)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as fh:
        fh.write(text)
    if results:
        chart(results, os.path.join(os.path.dirname(os.path.abspath(args.out)), "results.png"))
    print(text)


if __name__ == "__main__":
    sys.exit(main())
