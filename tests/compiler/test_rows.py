"""Jacobians call a compiled adjoint (or tangent) once for a whole batch (`compiler/rows.py`): the
results equal row-by-row calls and finite differences, in both modes, in parallel and serially, and
where a batch cannot share one call (an adjoint that restores buffers in place, a tangent of a function
that writes into its arguments) the rows run one by one."""
import math

import numba
import numpy as np
import pytest

import srcad as ad
from srcad.compiler import rows as rows_module
from srcad.compiler.backends.base import get as get_backend
from srcad.compiler.compiled import Checked
from srcad.function import CompiledSegment
from srcad.testing import finite_differences

rng = np.random.default_rng(5)


@ad.function
def spread(x, a):
    """R^n x R -> R^(n+1), R: out[k] = a sin(x[k]) x[k-1]; and a scalar."""
    n = x.shape[0]
    out = np.zeros(n + 1)
    total = 0.0
    for k in range(n):
        out[k] = a * math.sin(x[k]) * x[k - 1]
        total += out[k] * out[k]
    out[n] = total
    return out, total * a


@ad.function
def one_none(x):
    """Two outputs, the second None on every path."""
    y = x * x
    return y, None


@ad.function
def fill_and_sum(x, work):
    """Writes into its argument `work` (the tangent of each row must start from it as called)."""
    for i in range(x.shape[0]):
        work[i] = work[i] + x[i] * x[i]
    return work * 2.0


def _fill_work(x, ca, k):
    for i in range(ca.shape[0]):
        ca[i] = x[i] * k + 0.5 * ca[i]
    return ca


@ad.function
def work_filled_by_a_helper(x, ca, n):
    """A work array rebound to what a helper fills in it: the adjoint restores it in place, once per
    forward."""
    s = np.zeros(x.shape[0])
    for k in range(n):
        ca = _fill_work(x, ca, k + 1.0)
        s += ca * ca
    return s


def _count_calls(monkeypatch, cls, name):
    calls = []
    original = getattr(cls, name)

    def counted(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)
    monkeypatch.setattr(cls, name, counted)
    return calls


def _jacobian(f, x0, *rest, **options):
    x = ad.constant(x0)
    with ad.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = f(x, *rest)
        y = y[0] if isinstance(y, tuple) else y
    return tape.jacobian(y, x, **options).numpy(), tape.jacobian(y, x, experimental_use_pfor=False).numpy()


def test_reverse_jacobian_is_one_adjoint_call_for_the_batch(monkeypatch):
    from srcad.compiler.derived import Tangent
    x0 = rng.uniform(0.5, 1.5, 6)
    per_row = _count_calls(monkeypatch, CompiledSegment, "_adjoint")
    tangents = _count_calls(monkeypatch, Tangent, "rows")
    x, a = ad.constant(x0), ad.constant(1.3)
    with ad.GradientTape(persistent=True) as tape:
        tape.watch([x, a])
        y, _ = spread(x, a)
    batched = tape.jacobian(y, [x, a])            # 7 sources, 7 targets: reverse mode
    assert not per_row and not tangents           # no adjoint run from Python for the batch
    looped = tape.jacobian(y, [x, a], experimental_use_pfor=False)
    assert len(per_row) == 7                      # pfor off: one sweep per output, as TF
    for b, lo in zip(batched, looped):
        np.testing.assert_allclose(b.numpy(), lo.numpy(), rtol=1e-14, atol=1e-15)   # to rounding
    fd = finite_differences(lambda v: spread(v[0], 1.3)[0].numpy(), (x0,), 0)
    np.testing.assert_allclose(batched[0].numpy(), fd.T, rtol=1e-6, atol=1e-9)


def test_jacobian_of_a_scalar_argument_and_of_chunks():
    x0 = rng.uniform(0.5, 1.5, 5)
    a = ad.constant(0.7)
    x = ad.constant(x0)
    with ad.GradientTape(persistent=True) as tape:
        tape.watch([x, a])
        y, _ = spread(x, a)
    Jx, Ja = tape.jacobian(y, [x, a])
    chunked = tape.jacobian(y, [x, a], parallel_iterations=2)        # three batches of at most two rows
    np.testing.assert_array_equal(chunked[0].numpy(), Jx.numpy())
    np.testing.assert_array_equal(chunked[1].numpy(), Ja.numpy())
    y0 = spread(x0, 0.7)[0].numpy()        # linear in a, but the last output, quadratic
    np.testing.assert_allclose(Ja.numpy(), np.append(y0[:-1] / 0.7, 2.0 * y0[-1] / 0.7), rtol=1e-12)


def test_jacobian_of_a_function_with_an_output_that_is_always_none():
    x0 = rng.uniform(0.5, 1.5, 4)
    batched, looped = _jacobian(one_none, x0)
    np.testing.assert_allclose(batched, looped, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(batched, np.diag(2 * x0))


def test_float32_gradients_keep_their_dtype():
    x0 = rng.uniform(0.5, 1.5, 5).astype(np.float32)
    x, a = ad.constant(x0), ad.constant(np.float32(1.1))
    with ad.GradientTape() as tape:
        tape.watch([x, a])
        y, _ = spread(x, a)
    Jx, Ja = tape.jacobian(y, [x, a])
    assert (Jx.dtype, Ja.dtype) == (np.float32, np.float32)
    fd = finite_differences(lambda v: spread(v[0], 1.1)[0].numpy(), (x0.astype(np.float64),), 0)
    np.testing.assert_allclose(Jx.numpy(), fd.T, rtol=2e-3, atol=1e-4)


def test_batch_jacobian_runs_the_batch_in_one_call(monkeypatch):
    X0 = rng.uniform(0.5, 1.5, (4, 3))

    @ad.function
    def rows_cubed(X):
        out = np.empty_like(X)
        for b in range(X.shape[0]):
            for j in range(X.shape[1]):
                out[b, j] = X[b, j] ** 3 * X[b, (j + 1) % X.shape[1]]
        return out
    per_row = _count_calls(monkeypatch, CompiledSegment, "_adjoint")
    X = ad.constant(X0)
    with ad.GradientTape() as tape:
        tape.watch(X)
        y = rows_cubed(X)
    J = tape.batch_jacobian(y, X).numpy()
    assert not per_row
    for b in range(4):
        fd = finite_differences(lambda v: rows_cubed(v[0]).numpy(), (X0[b:b + 1],), 0)
        np.testing.assert_allclose(J[b], fd.reshape(3, 3).T, rtol=1e-6, atol=1e-9)


def test_an_adjoint_that_restores_buffers_in_place_runs_row_by_row(monkeypatch):
    x0 = rng.uniform(-1.0, 1.0, 4)
    per_row = _count_calls(monkeypatch, CompiledSegment, "_adjoint")
    x = ad.constant(x0)
    with ad.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = work_filled_by_a_helper(x, np.zeros(4), 3)
    (segment,) = [node.op for node in tape._nodes if isinstance(node.op, CompiledSegment)]
    assert segment.transformed.restores_in_place
    batched = tape.jacobian(y, x).numpy()
    assert len(per_row) == 4                                # the batch went row by row
    looped = tape.jacobian(y, x, experimental_use_pfor=False).numpy()
    np.testing.assert_array_equal(batched, looped)
    fd = finite_differences(lambda v: work_filled_by_a_helper(v[0], np.zeros(4), 3).numpy(), (x0,), 0)
    np.testing.assert_allclose(batched, fd.T, rtol=1e-6, atol=1e-9)


# ---- forward mode ------------------------------------------------------------------------------------

@ad.function
def orbit(p, n):
    """R^2 -> R^n."""
    out = np.zeros(n)
    x = p[0]
    for i in range(n):
        x = x + 0.01 * p[1] * math.cos(x)
        out[i] = x
    return out


def test_forward_jacobian_is_one_tangent_call_per_source(monkeypatch):
    from srcad.compiler.derived import Tangent
    p0 = np.array([0.3, 1.7])
    batches = _count_calls(monkeypatch, Tangent, "rows")
    singles = _count_calls(monkeypatch, Tangent, "__call__")
    p = ad.constant(p0)
    with ad.GradientTape(persistent=True) as tape:
        tape.watch(p)
        y = orbit(p, 300)
        z = np.sin(y) * 2.0                        # eager ops after it: their tangents row by row
    forward = tape.jacobian(z, p).numpy()
    assert (len(batches), len(singles)) == (1, 0)
    reverse = tape.jacobian(z, p, experimental_use_pfor=False).numpy()
    np.testing.assert_allclose(forward, reverse, rtol=1e-12, atol=1e-15)
    fd = finite_differences(lambda v: 2.0 * np.sin(orbit(v[0], 300).numpy()), (p0,), 0)
    np.testing.assert_allclose(forward, fd.T, rtol=1e-6, atol=1e-9)


def test_forward_jacobian_of_a_function_writing_into_its_argument_starts_each_row_from_it(monkeypatch):
    from srcad.compiler.derived import Tangent
    x0, w0 = np.array([0.5, 1.5]), np.linspace(1.0, 2.0, 2)
    batches = _count_calls(monkeypatch, Tangent, "rows")
    x = ad.constant(x0)
    work = w0.copy()
    with ad.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = fill_and_sum(x, work)
        z = np.concatenate([y, y * y])     # 4 outputs of 2 inputs: forward mode
    J = tape.jacobian(z, x).numpy()
    assert not batches                              # written arguments: one tangent per row
    np.testing.assert_allclose(work, w0 + x0 ** 2)  # written once, by the call
    y0 = 2.0 * (w0 + x0 ** 2)
    dy = np.diag(4.0 * x0)
    np.testing.assert_allclose(J, np.concatenate([dy, 2.0 * y0[:, None] * dy]), rtol=1e-12)


# ---- in parallel ---------------------------------------------------------------------------------------

@pytest.fixture
def two_threads(monkeypatch):
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("one thread: batches never run in parallel")
    numba.set_num_threads(2)
    monkeypatch.setattr(rows_module, "PAYS_SECONDS", 0.0)       # every measured batch pays
    yield
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)


@pytest.fixture
def parallel_layer(two_threads):
    if not rows_module.layer_allows_threads():
        pytest.skip("Numba has no threading layer here that takes parallel code from several threads")


def test_a_parallel_batch_computes_what_the_serial_one_does(parallel_layer):
    x0 = rng.uniform(0.5, 1.5, 9)
    x, a = ad.constant(x0), ad.constant(0.9)
    with ad.GradientTape(persistent=True) as tape:
        tape.watch([x, a])
        y, _ = spread(x, a)
    results = [tape.jacobian(y, [x, a])[0].numpy() for _ in range(3)]   # serial (compiles), serial, parallel
    (segment,) = [node.op for node in tape._nodes if isinstance(node.op, CompiledSegment)]
    rows = [v for k, v in segment.transformed.derived.items() if k[0] == "adjoint rows"]
    assert len(rows) == 1 and set(rows[0]._functions) == {False, True}
    np.testing.assert_allclose(results[2], results[0], rtol=1e-14, atol=1e-15)
    fd = finite_differences(lambda v: spread(v[0], 0.9)[0].numpy(), (x0,), 0)
    np.testing.assert_allclose(results[2], fd.T, rtol=1e-6, atol=1e-9)


def test_an_error_in_a_parallel_row_is_raised(parallel_layer, tmp_path):
    @numba.njit
    def checked_row(x, i):
        if i == 3.0:
            raise IndexError("row 3 is out of range")
        return (x * i,)
    callee = Checked(checked_row, tmp_path / "rows_test.py", [], "checked_row", get_backend("cpu"))
    rows = rows_module.Rows(callee, get_backend("cpu"), ["x"], ["i_rows"], [(0, "out_rows")])
    x, good = np.ones(2), np.array([0.0, 1.0, 2.0])
    for _ in range(2):                                        # compiled, then measured
        out = rows([x], [good], [np.empty((3, 2))])[0]
    np.testing.assert_array_equal(out, [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]])
    with pytest.raises(IndexError, match="row 3 is out of range"):
        rows([x], [np.arange(6.0)], [np.empty((6, 2))])
    assert set(rows._functions) == {False, True}              # it ran in parallel, then again serially


def test_batches_run_serially_on_a_threading_layer_that_takes_one_thread_at_a_time(two_threads, monkeypatch):
    """workqueue, Numba's fallback layer, aborts the process when two threads start parallel code at once."""
    monkeypatch.setattr(numba.config, "THREADING_LAYER", "workqueue")
    rows_module.layer_allows_threads.cache_clear()
    try:
        assert not rows_module.layer_allows_threads()
        kinds = []
        original = rows_module.Rows._function
        monkeypatch.setattr(rows_module.Rows, "_function", lambda self, parallel: kinds.append(parallel) or
                            original(self, parallel))
        x0 = rng.uniform(0.5, 1.5, 5)
        x, a = ad.constant(x0), ad.constant(0.4)
        with ad.GradientTape(persistent=True) as tape:
            tape.watch([x, a])
            y, _ = spread(x, a)
        results = [tape.jacobian(y, [x, a])[0].numpy() for _ in range(3)]
        assert kinds == [False, False, False]
        np.testing.assert_array_equal(results[2], results[0])
    finally:
        rows_module.layer_allows_threads.cache_clear()


@ad.function
def none_of_it(x):
    return x[:0] * 2.0


def test_jacobian_of_an_empty_target():
    x = ad.constant(np.ones(3))
    with ad.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = none_of_it(x)
    assert tape.jacobian(y, x).shape == (0, 3)
    assert tape.jacobian(y, x, experimental_use_pfor=False).shape == (0, 3)
