"""srcad.dask on a two-process LocalCluster: distributed gradients equal single-process ones, the
function compiles once per worker, task errors name the user's line, a killed worker is survived, the
chunks of a worker are summed on it, and a call's futures are released by the next call."""

import math
import os
import sys
import time

import numpy as np
import pytest

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
cloudpickle = pytest.importorskip("cloudpickle")

import srcad as ad  # noqa: E402
from srcad.dask import map_gradients, value_and_grad, worker_stats  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "compiler"))
import adbench_models as M  # noqa: E402

gmm = ad.function(M.gmm_objective)


@ad.function
def squared_residuals(w, x, y):
    s = 0.0
    for i in range(x.shape[0]):
        r = y[i]
        for j in range(x.shape[1]):
            r -= w[j] * x[i, j]
        s += r * r
    return s


@ad.function
def counted_loss(w, x, y):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.exp(w[0] * x[i, 0]) - y[i] * w[1]
    return s


@ad.function(boundscheck=True)
def column_loss(w, x, y):
    s = 0.0
    for i in range(x.shape[0]):
        s += w[0] * x[i, int(y[i])]          # y holds column numbers; a bad one raises IndexError
    return s


def eager_loss(w, x, y):
    if np.any(y < 0):
        raise ValueError("negative weights in the data")
    return np.sum(w[0] * x[:, 0] * y)


@ad.function
def bump(p, center):
    s = 0.0
    for j in range(p.shape[0]):
        s += math.sin(p[j] * center[j]) + p[j] * p[j]
    return s


@pytest.fixture(scope="module")
def client():
    this = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(this)   # as from a notebook: the functions travel by value
    try:
        with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                      dashboard_address=None) as cluster, distributed.Client(cluster) as c:
            yield c
    finally:
        cloudpickle.unregister_pickle_by_value(this)


@pytest.fixture(scope="module")
def regression():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(6000, 4))
    w = np.array([0.5, -1.0, 2.0, 0.25])
    y = x @ w + 0.1 * rng.normal(size=6000)
    return x, y, rng.normal(size=4)


def _gmm_problem(n=4000, d=3, k=4, seed=2):
    rng = np.random.default_rng(seed)
    params = (rng.normal(size=k), rng.normal(size=(k, d)), 0.1 * rng.normal(size=(k, d * (d + 1) // 2)))
    return params, rng.normal(size=(n, d))


def _tape_value_and_grad(f, params, *args):
    ps = [ad.constant(p) for p in params]
    with ad.GradientTape() as tape:
        tape.watch(ps)
        y = f(*ps, *args)
    return float(y.numpy()), [g.numpy() for g in tape.gradient(y, ps)]


def _rel(a, b):
    return np.max(np.abs(np.asarray(a) - np.asarray(b))) / np.max(np.abs(b))


def test_gmm_matches_single_process(client):
    params, x = _gmm_problem()
    chunks = 700
    xd = client.persist(da.from_array(x, chunks=chunks))

    def loss(alphas, means, icf, xs):                         # ADBench's objective on every chunk
        return gmm(alphas, means, icf, xs, 1.0, 0)

    value, grads = value_and_grad(loss, params, xd, client=client, argnums=(0, 1, 2))
    expected_value, expected = 0.0, [np.zeros_like(p) for p in params]
    for start in range(0, len(x), chunks):                    # the same sum, serially, in this process
        v, g = _tape_value_and_grad(gmm, params, x[start:start + chunks], 1.0, 0)
        expected_value += v
        expected = [e + gi for e, gi in zip(expected, g)]
    assert isinstance(value, float) and isinstance(grads, tuple) and len(grads) == 3
    assert abs(value - expected_value) <= 1e-12 * abs(expected_value)
    for g, e in zip(grads, expected):
        assert g.shape == e.shape and _rel(g, e) <= 1e-12


def test_loop_loss_matches_whole_data_call(client, regression):
    x, y, w = regression
    data = (client.persist(da.from_array(x, chunks=1000)), client.persist(da.from_array(y, chunks=1500)))
    value, grad = value_and_grad(squared_residuals, w, data, client=client)
    expected_value, (expected,) = _tape_value_and_grad(squared_residuals, [w], x, y)
    assert abs(value - expected_value) <= 1e-12 * abs(expected_value)
    assert isinstance(grad, np.ndarray) and _rel(grad, expected) <= 1e-12
    with dask.config.set(scheduler="threads"):                 # Dask's local scheduler: same call, same result
        local_value, local_grad = value_and_grad(squared_residuals, w, (da.from_array(x, chunks=1000), y))
    assert abs(local_value - expected_value) <= 1e-12 * abs(expected_value) and _rel(local_grad, expected) <= 1e-12


def test_tuple_params_argnums_and_scipy(client, regression):
    from scipy.optimize import minimize

    x, y, _ = regression
    data = (client.persist(da.from_array(x, chunks=1500)), client.persist(da.from_array(y, chunks=1500)))

    def split_loss(head, tail, xs, ys):
        return squared_residuals(np.concatenate([head, tail]), xs, ys)    # eager op + compiled call

    w = np.array([0.1, 0.2, 0.3, 0.4])
    value, grad_tail = value_and_grad(split_loss, (w[:1], w[1:]), data, client=client, argnums=1)
    _, (expected,) = _tape_value_and_grad(squared_residuals, [w], x, y)
    assert grad_tail.shape == (3,) and _rel(grad_tail, expected[1:]) <= 1e-12

    result = minimize(lambda p: value_and_grad(squared_residuals, p, data, client=client),
                      np.zeros(4), jac=True, method="L-BFGS-B")
    np.testing.assert_allclose(result.x, np.linalg.lstsq(x, y, rcond=None)[0], rtol=1e-6, atol=1e-8)


def test_compiles_once_per_worker_not_once_per_task(client):
    rng = np.random.default_rng(3)
    x = client.persist(da.from_array(rng.normal(size=(4000, 2)), chunks=250))     # 16 chunks
    y = client.persist(da.from_array(rng.normal(size=4000), chunks=250))
    before = client.run(worker_stats)
    for w in ([0.1, 0.2], [0.3, -0.1], [0.0, 1.0]):
        value_and_grad(counted_loss, np.array(w), (x, y), client=client)
    after = client.run(worker_stats)
    tasks = {addr: after[addr]["chunks"] - before[addr]["chunks"] for addr in after}
    assert sum(tasks.values()) == 3 * 16 and max(tasks.values()) > 1
    for addr, n in tasks.items():
        if n:
            assert after[addr]["compiled"]["counted_loss"] == 1, (addr, n, after[addr])


def test_task_error_names_the_function_and_line(client):
    x = np.ones((3000, 2))
    y = np.ones(3000)
    y[2345] = 7.0
    data = (client.persist(da.from_array(x, chunks=1000)), client.persist(da.from_array(y, chunks=1000)))
    line = column_loss.python_function.__code__.co_firstlineno      # compiled code reports no line: the def
    with pytest.raises(IndexError, match=rf"column_loss \(.*test_dask\.py, line {line}\) failed on rows "
                                         rf"2000:3000 of the data: IndexError: .*out of range"):
        value_and_grad(column_loss, np.array([1.0]), data, client=client)

    y[2345] = -1.0                                                   # Python code: the failing line itself
    data = (client.persist(da.from_array(x, chunks=1000)), client.persist(da.from_array(y, chunks=1000)))
    line = eager_loss.__code__.co_firstlineno + 2
    with pytest.raises(ValueError, match=rf"eager_loss \(.*test_dask\.py, line {line}\) failed on rows "
                                         rf"2000:3000 of the data: ValueError: negative weights"):
        value_and_grad(eager_loss, np.array([1.0]), data, client=client)


def test_argument_errors_name_the_function(client, regression):
    x, y, w = regression
    data = (da.from_array(x, chunks=3000), da.from_array(y[:-1], chunks=3000))
    with pytest.raises(ValueError, match=r"value_and_grad\(squared_residuals\): every data array must have the "
                                         r"same number of rows"):
        value_and_grad(squared_residuals, w, data, client=client)
    with pytest.raises(ValueError, match=r"value_and_grad\(squared_residuals\): every data array .* at least "
                                         r"one; got shapes \[\(0, 4\)"):
        value_and_grad(squared_residuals, w, da.zeros((0, 4), chunks=1), client=client)
    with pytest.raises(ValueError, match=r"value_and_grad\(squared_residuals\): argnums=2 does not select"):
        value_and_grad(squared_residuals, w, (da.from_array(x), da.from_array(y)), client=client, argnums=2)
    with pytest.raises(ValueError, match=r"map_gradients\(bump\): param_sets must be 2-D"):
        map_gradients(bump, np.zeros(3), np.ones(3), client=client)


def test_map_gradients_ensemble(client):
    rng = np.random.default_rng(4)
    sets = rng.normal(size=(37, 5))
    center = rng.normal(size=5)
    before = client.run(worker_stats)
    grads = map_gradients(bump, sets, center, client=client)
    after = client.run(worker_stats)
    expected = np.cos(sets * center) * center + 2 * sets
    assert grads.shape == sets.shape
    np.testing.assert_allclose(grads, expected, rtol=1e-13)
    assert sum(after[a]["rows"] - before[a]["rows"] for a in after) == len(sets)
    for a in after:                          # every batch of a worker in one compiled call, compiled once
        if after[a]["rows"] > before[a]["rows"]:
            assert after[a]["compiled"]["bump_rows"] == 1
    with dask.config.set(scheduler="sync"):
        np.testing.assert_allclose(map_gradients(bump, sets, center), expected, rtol=1e-13)
        np.testing.assert_allclose(map_gradients(eager_bump, sets, center), expected, rtol=1e-13)
    np.testing.assert_allclose(map_gradients(eager_bump, sets, center, client=client), expected, rtol=1e-13)


def eager_bump(p, center):
    """The same as ``bump`` with NumPy operations on the tape: map_gradients runs it row by row."""
    return np.sum(np.sin(p * center) + p * p)


def _spread_by_hand(client, arrays, chunk):
    """``arrays`` cut into chunks of ``chunk`` rows that alternate between the two workers, persisted."""
    workers = sorted(client.scheduler_info()["workers"])
    out = []
    for a in arrays:
        parts = [client.scatter(a[i:i + chunk], workers=[workers[(i // chunk) % 2]]) for i in range(0, len(a), chunk)]
        out.append(da.concatenate([da.from_delayed(p, (min(chunk, len(a) - i),) + a.shape[1:], a.dtype)
                                   for p, i in zip(parts, range(0, len(a), chunk))]))
    out = client.persist(out)
    distributed.wait(out)
    return tuple(out)


def _sent(client):
    """{worker: (requester, keys) of each transfer it made that carried data, to another worker or to the
    client} (a request for keys already released carries none and is not a transfer)."""
    return client.run(lambda dask_worker: [(t["who"], sorted(map(str, t["keys"])))
                                           for t in dask_worker.transfer_outgoing_log if t["keys"]])


def test_chunks_of_a_worker_are_summed_on_it(regression):
    x, y, w = regression
    expected_value, (expected,) = _tape_value_and_grad(squared_residuals, [w], x, y)
    # work stealing off: tasks run where their chunks lie, so the transfers are the plan's alone
    with dask.config.set({"distributed.scheduler.work-stealing": False}), \
            distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                     dashboard_address=":0") as cluster, distributed.Client(cluster) as client:
        data = _spread_by_hand(client, (x, y), 375)                 # 16 chunks, worker A, B, A, B, ...
        value_and_grad(squared_residuals, w, data, client=client)  # compiled, and the plan made
        before = _sent(client)
        value, grad = value_and_grad(squared_residuals, w, data, client=client)
        # the parameters copied to the second worker, one worker's total to the other, the result; in chunk
        # order each of the two summing tasks of 8 partials would have fetched 4 from the other worker
        sent = [t for worker, log in _sent(client).items() for t in log[len(before.get(worker, ())):]]
        assert len(sent) == 3 and sum(len(keys) for _, keys in sent) == 3, sent
    assert abs(value - expected_value) <= 1e-12 * abs(expected_value) and _rel(grad, expected) <= 1e-12


def test_same_data_other_function_and_same_shapes_other_data(client):
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=(3000, 2)), rng.normal(size=3000)
    data = (client.persist(da.from_array(x, chunks=500)), client.persist(da.from_array(y, chunks=500)))
    w = np.array([0.3, -0.2])
    for f in (squared_residuals, counted_loss, squared_residuals):          # the function changes, not the data
        value, grad = value_and_grad(f, w, data, client=client)
        expected_value, (expected,) = _tape_value_and_grad(f, [w], x, y)
        assert abs(value - expected_value) <= 1e-12 * abs(expected_value) and _rel(grad, expected) <= 1e-12
    x2 = x + 1.0                                                            # other data, same shapes and chunks
    for xs in (da.from_array(x2, chunks=500), client.persist(da.from_array(x2, chunks=500)), data[0]):
        value, grad = value_and_grad(squared_residuals, w, (xs, data[1]), client=client)
        expected_value, (expected,) = _tape_value_and_grad(squared_residuals, [w], x if xs is data[0] else x2, y)
        assert abs(value - expected_value) <= 1e-12 * abs(expected_value) and _rel(grad, expected) <= 1e-12


def test_a_call_releases_the_previous_calls_futures(client, regression):
    x, y, w = regression
    data = (client.persist(da.from_array(x, chunks=1500)), client.persist(da.from_array(y, chunks=1500)))
    distributed.wait(data)
    mine = set(client.refcount)
    workers = len(client.scheduler_info()["workers"])
    value_and_grad(squared_residuals, w, data, client=client)
    first = set(client.refcount) - mine
    totals = [k for k in first if isinstance(k, tuple) and str(k[0]).startswith("srcad-")]
    # its parameters and its results (a total per worker, which the client adds), held until the next call
    assert len(first) == 1 + len(totals) and 1 <= len(totals) <= workers
    value_and_grad(squared_residuals, w, data, client=client)
    second = set(client.refcount) - mine
    assert 2 <= len(second) <= 1 + workers and not first & second
    forgotten = lambda dask_scheduler, keys: not any(k in dask_scheduler.tasks for k in keys)  # noqa: E731
    deadline = time.monotonic() + 10
    while not client.run_on_scheduler(forgotten, keys=list(first)):
        assert time.monotonic() < deadline, "the first call's keys stay on the cluster"
        time.sleep(0.05)
    map_gradients(bump, np.ones((8, 3)), np.ones(3), client=client)
    deadline = time.monotonic() + 10
    while len(set(client.refcount) - mine) != 1:            # map_gradients holds its static data only
        assert time.monotonic() < deadline, set(client.refcount) - mine
        time.sleep(0.05)


def _die_once(block, marker):
    """Kill the worker process computing the first chunk (once per test run; never this process)."""
    try:
        distributed.get_worker()
    except ValueError:               # not on a worker: Dask inferring the output type here
        return block
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return block


def test_killed_worker_is_retried(client, regression, tmp_path):
    x, y, w = regression
    marker = str(tmp_path / "killed")
    xs = da.from_array(x, chunks=1000).map_blocks(_die_once, marker, meta=np.empty((0, 0)))
    value, grad = value_and_grad(squared_residuals, w, (xs, da.from_array(y, chunks=1000)), client=client)
    assert os.path.exists(marker)                             # a worker did die during the call
    expected_value, (expected,) = _tape_value_and_grad(squared_residuals, [w], x, y)
    assert abs(value - expected_value) <= 1e-12 * abs(expected_value) and _rel(grad, expected) <= 1e-12
    client.wait_for_workers(2, timeout=60)
