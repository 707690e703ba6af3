"""ADBench GMM value and gradient over many points on a distributed.LocalCluster (srcad.dask).

    python benchmarks/dask_gmm.py                      # d10 K25, 10^6 points, 1 and 2 workers
    python benchmarks/dask_gmm.py --points 10000000 --reps 1

Loss per chunk: ``tests/compiler/adbench_models.gmm_objective`` (loop-style,
compiled by ``@ad.function``) on the chunk's points; ``srcad.dask.value_and_grad``
sums chunks on the cluster.  Reports, per worker count, the round trip of a
call whose chunks are tiny (one per worker: the cluster's overhead per call,
against the floor of one ``client.submit(...).result()``; these calls also
compile the function on every worker), the median time of a call over all the
points (value and gradient of alphas, means, icf), the CPU seconds and chunks
of each worker and the bytes the workers sent during those calls (parameters
copied between workers, partial sums crossing workers, the result), and the
speed-up of 2 workers over 1; first, the time of one chunk in this process
(no Dask).  The data are generated on the workers and persisted, so they never
travel.
"""

import argparse
import os
import pickle
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "compiler"))

import cloudpickle  # noqa: E402
import dask.array as da  # noqa: E402
from distributed import Client, LocalCluster, wait  # noqa: E402

import adbench_models as M  # noqa: E402
import srcad as ad  # noqa: E402
from srcad.dask import value_and_grad  # noqa: E402

gmm = ad.function(M.gmm_objective)


def chunk_loss(alphas, means, icf, x):
    """ADBench's GMM objective on one chunk of points (Wishart gamma 1, m 0)."""
    return gmm(alphas, means, icf, x, 1.0, 0)


def parameters(d, k, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=k), rng.normal(size=(k, d)), 0.1 * rng.normal(size=(k, d * (d + 1) // 2)))


def median_time(call, reps):
    """Median seconds of ``reps`` calls, every time, and the last call's result."""
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - t)
    return statistics.median(times), times, result


def outgoing(client):
    """Bytes and messages the workers have sent so far (to other workers and to the scheduler)."""
    sent = client.run(lambda dask_worker: (dask_worker.transfer_outgoing_bytes_total,
                                           dask_worker.transfer_outgoing_count_total)).values()
    return np.sum(list(sent), axis=0)


def one_chunk_per_worker(client, d):
    """Two points on every worker, scattered there, persisted as one dask array."""
    rng = np.random.default_rng(3)
    futures = [client.scatter(rng.standard_normal((2, d)), workers=[w]) for w in client.scheduler_info()["workers"]]
    tiny = client.persist(da.concatenate([da.from_delayed(f, (2, d), float) for f in futures]))
    wait(tiny)
    return tiny


def worker_cpu():
    """CPU seconds of this worker process and chunks it computed: on a loaded machine the wall
    clock mixes in other processes, the CPU time and the split of the chunks do not."""
    from srcad.dask import worker_stats
    return time.process_time(), worker_stats()["chunks"]


def noop(x):
    return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=float, default=1e6)
    ap.add_argument("--chunk", type=int, default=62_500, help="points per chunk")
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--k", type=int, default=25)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workers", default="1,2")
    args = ap.parse_args()
    n, d, k = int(args.points), args.d, args.k
    params = parameters(d, k)
    n_chunks = -(-n // args.chunk)
    print(f"GMM d{d} K{k}, {n:.0e} points in {n_chunks} chunks of {args.chunk}; median of {args.reps} calls")

    # one chunk in this process, no Dask: the per-chunk time the scaling model uses
    x_chunk = np.random.default_rng(1).normal(size=(args.chunk, d))
    grad_local = lambda: ad_value_and_grad(params, x_chunk)  # noqa: E731
    grad_local()
    t_chunk, _, _ = median_time(grad_local, args.reps)
    print(f"one chunk in-process: {t_chunk * 1e3:.1f} ms ({t_chunk / args.chunk * 1e9:.0f} ns per point)")

    results = {}
    for workers in map(int, args.workers.split(",")):
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            # overhead of a round trip: the same call on tiny chunks, one per worker (compiles on each)
            tiny = one_chunk_per_worker(client, d)
            small = lambda: value_and_grad(chunk_loss, params, tiny, client=client, argnums=(0, 1, 2))  # noqa: E731
            for _ in range(5):
                small()
            t_rt, _, _ = median_time(small, 30)
            t_floor, _, _ = median_time(lambda: client.submit(noop, 1, pure=False).result(), 30)
            print(f"{workers} worker(s): round trip of a call with tiny chunks: {t_rt * 1e3:.1f} ms "
                  f"(floor, one client.submit().result(): {t_floor * 1e3:.1f} ms)")

            x = da.random.default_rng(2).standard_normal((n, d), chunks=(args.chunk, d))
            x = client.persist(x)
            wait(x)                                                    # generated on the workers, kept there
            call = lambda: value_and_grad(chunk_loss, params, x, client=client, argnums=(0, 1, 2))  # noqa: E731
            sent_before, cpu_before = outgoing(client), client.run(worker_cpu)
            t_call, times, (value, grads) = median_time(call, args.reps)
            sent, messages = (outgoing(client) - sent_before) / args.reps
            cpu_after = client.run(worker_cpu)
            results[workers] = t_call
            print(f"   {n:.0e} points: {t_call:.3f} s per call  (calls: {', '.join(f'{t:.3f}' for t in times)};"
                  f" value {value:.6e})")
            scattered = len(cloudpickle.dumps((chunk_loss, tuple(params)))) * workers
            out = len(pickle.dumps((value, grads)))
            print(f"   bytes per call: in {scattered} (function and parameters, once per worker); out of the "
                  f"workers {sent:.0f} in {messages:.0f} transfers (parameters copied to other workers, partial "
                  f"sums crossing workers, the result: {out} of it); the data, {x.nbytes:.2e} bytes on the "
                  f"cluster, are not sent")
            split = {a: (cpu_after[a][0] - cpu_before[a][0], cpu_after[a][1] - cpu_before[a][1]) for a in cpu_after}
            print("   per worker and call: " + "; ".join(f"{c / args.reps:.0f} chunks, {t / args.reps:.2f} s CPU"
                                                       for t, c in split.values()))

    if 1 in results and 2 in results:
        print(f"speed-up 2 workers over 1: {results[1] / results[2]:.2f}x")


def ad_value_and_grad(params, x):
    ps = [ad.constant(p) for p in params]
    with ad.GradientTape() as tape:
        tape.watch(ps)
        y = chunk_loss(*ps, x)
    return y, tape.gradient(y, ps)


if __name__ == "__main__":
    main()
