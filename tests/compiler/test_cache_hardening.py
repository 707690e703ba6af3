"""The on-disk cache of @ad.function: private, verified, self-healing, safe under threads and processes;
module globals frozen at the first compile for the plain call and the tape call alike (issue 9)."""

import errno
import os
import stat
import subprocess
import sys
import textwrap
import types
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

import srcad as ad
from srcad.compiler.backends.cache import CacheWarning

SCALE = 2.0


def scaled_square(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += SCALE * x[i] * x[i]
    return s


def cubes(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i] * x[i]
    return s


def squares_for_threads(x):     # compiled by one test only: the first compile in this process is the race
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return s


X = np.array([1.0, 2.0, 3.0])

# A fresh process calling both functions above (value and gradient), as a user's program would.
SCRIPT = textwrap.dedent("""
    import sys, threading, warnings
    import numpy as np
    sys.path.insert(0, {here!r})
    import srcad as ad
    import test_cache_hardening as m
    warnings.simplefilter("always")
    x = np.array([1.0, 2.0, 3.0])
    lines = []

    def job(pyfunc):
        f = ad.function(pyfunc)
        v = ad.Variable(x)
        with ad.GradientTape() as tape:
            y = f(v)
        lines.append(f"{{pyfunc.__name__}} {{float(f(x).numpy())}} {{float(y.numpy())}} "
                     f"{{tape.gradient(y, v).numpy().tolist()}}")

    jobs = (m.scaled_square, m.cubes) * {copies}
    if {threads}:
        threads = [threading.Thread(target=job, args=(p,)) for p in jobs]
        [t.start() for t in threads]
        [t.join() for t in threads]
    else:
        [job(p) for p in jobs]
    print("\\n".join(lines))
""")


def script(threads=False, copies=1):
    return SCRIPT.format(here=str(Path(__file__).parent), threads=threads, copies=copies)


def numba_cache_of(cache):
    """Where Numba keeps its cache files of the modules in `cache`: next to them, or under NUMBA_CACHE_DIR
    (which the suite sets: tests/conftest.py) in a folder named by the modules' folder."""
    import numba
    from numba.core.caching import _CacheLocator
    if not numba.config.CACHE_DIR:
        return cache / "__pycache__"
    return Path(numba.config.CACHE_DIR) / _CacheLocator.get_suitable_cache_subpath(str(cache / "module.py"))


def run_script(cache, **env_vars):
    """The script in a fresh process, with Numba's optimization level a user's (the suite's own level,
    tests/conftest.py, leaves code Numba does not cache)."""
    env = dict(os.environ, SRCAD_CACHE_DIR=str(cache), **env_vars)
    env.pop("SRCAD_BOUNDSCHECK", None)
    env.pop("NUMBA_OPT", None)
    return subprocess.run([sys.executable, "-c", script()],
                          env=env, capture_output=True, text=True, timeout=120)


def check_output(out):
    assert "scaled_square 28.0 28.0 [4.0, 8.0, 12.0]" in out, out
    assert "cubes 36.0 36.0 [3.0, 12.0, 27.0]" in out, out


def grad_and_value(f, x=X):
    v = ad.Variable(x)
    with ad.GradientTape() as tape:
        y = f(v)
    return float(y.numpy()), tape.gradient(y, v).numpy()


def fill(cache, monkeypatch, *pyfuncs):
    """Compile (value and gradient) into `cache`: the files a later process finds there."""
    monkeypatch.setenv("SRCAD_CACHE_DIR", str(cache))
    for pyfunc in pyfuncs:
        grad_and_value(ad.function(pyfunc))
    return cache


def filled_by_a_process(cache):
    """`cache` as a user's program leaves it (`run_script`), for another such process to find."""
    check_output(run_script(cache).stdout)
    return cache


def modules_of(cache, pyfunc):
    """The generated forward/adjoint modules of `pyfunc` (not the primal): one per set of arguments
    differentiated (the script's plain call has one too: no argument)."""
    return [p for p in Path(cache).glob(f"{pyfunc.__name__}_*.py") if not p.name.endswith("_primal.py")]


def module_of(cache, pyfunc):
    [path] = modules_of(cache, pyfunc)
    return path


def test_cache_directory_and_files_are_private(tmp_path, monkeypatch):
    cache = fill(tmp_path / "new" / "cache", monkeypatch, cubes)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    files = [p for p in cache.iterdir() if p.is_file()]
    assert files and all(stat.S_IMODE(p.stat().st_mode) & 0o077 == 0 for p in files)
    assert module_of(cache, cubes).read_text().splitlines()[-1].startswith("# srcad-sha256: ")


def test_group_writable_cache_directory_is_refused_with_one_warning(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("SRCAD_CACHE_DIR", str(shared))
    with pytest.warns(CacheWarning, match="writable by group or others .*private temporary directory"):
        value, grad = grad_and_value(ad.function(cubes))
    assert value == 36.0
    np.testing.assert_allclose(grad, 3 * X ** 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)      # one warning per directory, not one per compile
        assert ad.function(cubes)(X).numpy() == 36.0
    assert not list(shared.glob("*.py"))


def test_uncreatable_cache_directory_compiles_with_one_warning(monkeypatch):
    monkeypatch.setenv("SRCAD_CACHE_DIR", "/proc/srcad-cannot-exist/cache")
    with pytest.warns(CacheWarning, match="cannot be created"):
        value, grad = grad_and_value(ad.function(cubes))
    assert value == 36.0
    np.testing.assert_allclose(grad, 3 * X ** 2)


def test_full_disk_gives_up_the_directory_with_one_warning(tmp_path, monkeypatch):
    from srcad.compiler.backends import cache as backend

    full = tmp_path / "full"
    write = backend._write_atomic

    def no_space(path, data):
        if full in Path(path).parents:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return write(path, data)

    monkeypatch.setattr(backend, "_write_atomic", no_space)
    monkeypatch.setenv("SRCAD_CACHE_DIR", str(full))
    with pytest.warns(CacheWarning, match="writing into it failed .No space left on device"):
        value, grad = grad_and_value(ad.function(cubes))
    assert value == 36.0
    np.testing.assert_allclose(grad, 3 * X ** 2)


def test_symlinks_planted_at_temporary_and_final_names_are_not_followed(tmp_path, monkeypatch):
    names = [p.name for p in fill(tmp_path / "probe", monkeypatch, cubes).glob("*.py")]
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    victims = []
    for k, name in enumerate(names):
        for planted in (Path(name).with_suffix(f".{os.getpid()}.tmp").name, name):   # old temp name, final name
            victim = tmp_path / f"victim{k}{planted[-4:]}"
            victim.write_text("precious\n")
            (cache / planted).symlink_to(victim)
            victims.append(victim)
    monkeypatch.setenv("SRCAD_CACHE_DIR", str(cache))
    with pytest.warns(CacheWarning, match="cannot open it safely"):
        value, grad = grad_and_value(ad.function(cubes))
    assert value == 36.0
    assert all(v.read_text() == "precious\n" for v in victims)
    assert all(not (cache / n).is_symlink() for n in names)


@pytest.mark.skipif(os.getuid() != 0, reason="planting a file owned by another uid needs root (chown)")
def test_module_planted_by_another_user_or_appended_to_is_never_run(tmp_path):
    cache = filled_by_a_process(tmp_path / "cache")
    marker = tmp_path / "pwned"
    payload = f"\nopen({str(marker)!r}, 'w').write('ran')\n"
    for foreign in modules_of(cache, scaled_square):
        foreign.write_text(foreign.read_text() + payload)
        os.chown(foreign, 12345, 12345)
    for appended in modules_of(cache, cubes):
        appended.write_text(appended.read_text() + payload)
    result = run_script(cache)
    check_output(result.stdout)
    assert not marker.exists()
    assert "owned by uid 12345" in result.stderr and "does not match the hash" in result.stderr, result.stderr


def test_truncated_cache_files_are_discarded_and_recompiled_once(tmp_path):
    cache = filled_by_a_process(tmp_path / "cache")
    for module in modules_of(cache, scaled_square):
        module.write_text(module.read_text()[:200])                        # srcad's module
        meta = module.with_suffix(".json")
        meta.write_text(meta.read_text()[:10])                             # its description
    indexes = list(numba_cache_of(cache).glob("*cubes*.nbi"))              # Numba's index
    assert indexes
    for index in indexes:
        index.write_bytes(index.read_bytes()[:30])
    first = run_script(cache)
    check_output(first.stdout)
    assert "CacheWarning" in first.stderr and "discarded" in first.stderr, first.stderr
    again = run_script(cache)
    check_output(again.stdout)
    assert "Warning" not in again.stderr, again.stderr


def test_every_truncated_cache_file_numba_and_srcad_runtime_helpers_included_is_dropped_and_rebuilt(tmp_path):
    """A full disk or a killed process leaves every kind of cache file truncated: srcad's modules and
    their descriptions, and Numba's index and data files of generated code and of srcad's runtime helpers
    (`srcad.compiler.runtime`, njit(cache=True)), which Numba unpickles. The next process drops each entry
    it cannot load and compiles it again; the one after loads what it wrote, without a warning."""
    cache, numba_cache = tmp_path / "srcad", tmp_path / "numba"
    check_output(run_script(cache, NUMBA_CACHE_DIR=str(numba_cache)).stdout)
    files = [p for d in (cache, numba_cache) for p in d.rglob("*")
             if p.suffix in (".py", ".json", ".nbi", ".nbc") and p.is_file()]
    assert any(p.name.startswith("runtime.") and p.suffix == ".nbi" for p in files), files
    for path in files:
        data = path.read_bytes()
        path.write_bytes(data[:len(data) // 2])
    first = run_script(cache, NUMBA_CACHE_DIR=str(numba_cache))
    check_output(first.stdout)
    assert "UnpicklingError" in first.stderr and "discarded Numba's cache of runtime." in first.stderr, first.stderr
    again = run_script(cache, NUMBA_CACHE_DIR=str(numba_cache))
    check_output(again.stdout)
    assert "Warning" not in again.stderr, again.stderr


def test_threads_making_the_first_call_together_both_succeed(tmp_path, monkeypatch):
    monkeypatch.setenv("SRCAD_CACHE_DIR", str(tmp_path))
    f = ad.function(squares_for_threads)
    barrier = threading.Barrier(2)
    results, errors = [], []

    def work():
        barrier.wait()
        try:
            results.append(grad_and_value(f))
        except Exception as exc:        # reported below with the traceback text
            errors.append(repr(exc))

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 2, errors
    for value, grad in results:
        assert value == 14.0
        np.testing.assert_allclose(grad, 2 * X)


def test_processes_filling_one_cache_at_once_all_get_right_results(tmp_path):
    env = dict(os.environ, SRCAD_CACHE_DIR=str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-c", script(threads=True, copies=2)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert out.count("scaled_square 28.0 28.0 [4.0, 8.0, 12.0]") == 2, out + err
        assert out.count("cubes 36.0 36.0 [3.0, 12.0, 27.0]") == 2, out + err


def test_module_global_is_frozen_at_first_compile_for_plain_and_tape_calls_until_recompile(tmp_path, monkeypatch):
    monkeypatch.setenv("SRCAD_CACHE_DIR", str(tmp_path))
    f = ad.function(scaled_square)
    assert f(X).numpy() == 28.0
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 3.0)
    value, grad = grad_and_value(f)            # the tape call: still SCALE = 2 (Numba's rule)
    assert value == 28.0
    np.testing.assert_allclose(grad, 4 * X)
    f.recompile()
    assert f(X).numpy() == 42.0
    value, grad = grad_and_value(f)
    assert value == 42.0
    np.testing.assert_allclose(grad, 6 * X)


def test_compiler_hash_covers_files_in_subfolders(tmp_path):
    """The cache key changes when any compiler file changes, however deep (stale caches never load)."""
    from srcad.compiler.backends.cache import tree_hash
    (tmp_path / "ir").mkdir()
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "ir" / "nodes.py").write_text("y = 2\n")
    before = tree_hash(tmp_path)
    (tmp_path / "ir" / "nodes.py").write_text("y = 3\n")
    edited = tree_hash(tmp_path)
    (tmp_path / "ir" / "nodes.py").rename(tmp_path / "nodes.py")
    moved = tree_hash(tmp_path)
    assert len({before, edited, moved}) == 3


def test_source_edited_after_definition_is_refused_not_compiled(tmp_path, monkeypatch):
    """A function decorated after its file was edited (lines shifted, another def at its line)
    is refused with a clear message instead of compiling the other function."""
    import importlib
    import sys
    from srcad.source import StaleSourceError
    path = tmp_path / "edited_module.py"
    path.write_text("def total(x, n):\n    return x * n\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("edited_module")
    path.write_text("def other(a, b, c):\n    return a\n\n\ndef total(x, n):\n    return x * n\n")
    import linecache
    linecache.checkcache(str(path))
    with pytest.raises(StaleSourceError, match=r"total: .*edited_module.py was edited after total was defined "
                                               r"\(line 1 now holds `def other\(a, b, c\)`\).*importlib.reload"):
        ad.function(module.total)
    sys.modules.pop("edited_module", None)


def test_a_function_argument_is_keyed_by_its_name_not_its_address():
    """Numba's type of a function argument holds the dispatcher's address, new in every process: the cache
    key names the function instead (its body is inlined in the printed primal), so a later process finds
    the entry; another function gets another key."""
    import numba
    from srcad.compiler.backends.cache import cache_key

    # the same function as another process has it: the same code and name at another address
    again = types.FunctionType(cubes.__code__, cubes.__globals__, "cubes")
    again.__qualname__ = cubes.__qualname__
    first, second, other = numba.njit(cubes), numba.njit(again), numba.njit(scaled_square)
    assert str(numba.typeof(first)) != str(numba.typeof(second))          # Numba's names hold addresses
    key = cache_key("def f(g, x): ...", (numba.typeof(first), numba.float64), (False, True))
    assert key == cache_key("def f(g, x): ...", (numba.typeof(second), numba.float64), (False, True))
    assert key != cache_key("def f(g, x): ...", (numba.typeof(other), numba.float64), (False, True))
