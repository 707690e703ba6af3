"""Tape stacks are per thread: concurrent gradients with their own tapes do not interfere."""

import threading

import numpy as np

import srcad as ad

ITERATIONS = 200


def _worker(kind, barrier, shared_var, errors):
    try:
        rng = np.random.default_rng({"sin": 1, "cube": 2}[kind])
        for _ in range(ITERATIONS):
            xv = rng.normal(size=3)
            x = ad.constant(xv)
            barrier.wait()                          # both threads inside their tapes at once
            with ad.GradientTape(persistent=True) as t:
                t.watch(x)
                barrier.wait()
                if kind == "sin":
                    y = np.sum(np.sin(x) * shared_var)
                    expected = np.cos(xv) * shared_var.numpy()
                else:
                    y = np.sum(x ** 3) * shared_var[0]
                    expected = 3 * xv ** 2 * shared_var.numpy()[0]
                barrier.wait()
            assert ad.tape.recording_tapes() == []
            barrier.wait()                          # both compute gradients at the same time
            g = t.gradient(y, x)
            gv = t.gradient(y, shared_var)
            np.testing.assert_allclose(g.numpy(), expected, rtol=1e-12)
            assert gv is not None and gv.shape == (3,)
            assert t.watched_variables() == (shared_var,)
    except Exception as err:  # noqa: BLE001  (reported by the main thread)
        errors.append((kind, err))
        barrier.abort()


def test_two_threads_with_their_own_tapes():
    shared_var = ad.Variable([0.5, -1.0, 2.0])
    barrier = threading.Barrier(2, timeout=60)
    errors = []
    threads = [threading.Thread(target=_worker, args=(kind, barrier, shared_var, errors)) for kind in ("sin", "cube")]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not any(th.is_alive() for th in threads), "a worker thread did not finish within 120 s"
    assert not errors, errors
    assert ad.tape.recording_tapes() == []


def test_tape_on_one_thread_does_not_record_another_threads_ops():
    x = ad.Variable(2.0)
    ready, done = threading.Event(), threading.Event()
    seen = {}

    def other():
        ready.wait(10)
        seen["tapes"] = list(ad.tape.recording_tapes())
        seen["y"] = x * x               # not on the main thread's tape
        done.set()

    th = threading.Thread(target=other)
    th.start()
    with ad.GradientTape() as t:
        ready.set()
        done.wait(10)
        z = x * 3.0
    th.join(10)
    assert seen["tapes"] == []
    assert t.gradient([z, seen["y"]], x).numpy() == 3.0
