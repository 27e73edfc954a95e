"""The test suite itself: tests that swap CuPy's allocator or need mpi4py's library leave the
others runnable (a device check runs `pytest -m cuda` over every file at once)."""
import os
import subprocess
import sys

import pytest

import coop

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
#: where the coop these tests import lives (an install, or a checkout built in place): the
#: child pytest must import it, not the checkout's unbuilt source folder
COOP_HOME = os.path.dirname(os.path.dirname(os.path.abspath(coop.__file__)))


def _pytest(*args, env=None, cwd):
    """pytest in a child process run from cwd (not the checkout's root, which `python -m`
    would put first on the path), with the checkout's configuration and tests."""
    args = [os.path.join(ROOT, a) if a.startswith("tests/") else a for a in args]
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-c", os.path.join(ROOT, "pyproject.toml"), "--rootdir", ROOT, *args],
                          cwd=cwd, capture_output=True, text=True, env=env, timeout=300)


def test_every_cupy_test_leaves_cupys_default_pool_as_the_allocator(tmp_path):
    # the fixtures and a finally reset the allocator with set_allocator(None): plain
    # cudaMalloc, so a later test counting the default pool's bytes (test_random's) saw 0
    pytest.importorskip("cupy")
    files = ["tests/test_cupy_backend.py", "tests/test_cupy_pool.py",
             "tests/test_cupy_runtime.py", "tests/test_runtime_cupy.py",
             "tests/test_deterministic.py", "tests/test_compact.py"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([HERE, COOP_HOME, env.get("PYTHONPATH", "")])
    run = _pytest("-p", "_allocator_guard", *files, "-k", "cupy or allocator or pool", env=env,
                  cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "allocator left changed by" not in run.stdout and " passed" in run.stdout


def no_mpi_library(tmp_path):
    """An environment where `import mpi4py.MPI` raises RuntimeError, as mpi4py 4 does where no
    MPI library is installed (a stub package ahead of the real one on the path)."""
    stub = tmp_path / "mpi4py"
    stub.mkdir()
    (stub / "__init__.py").write_text("")
    (stub / "MPI.py").write_text('raise RuntimeError("cannot load MPI library")\n')
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), COOP_HOME, env.get("PYTHONPATH", "")])
    return env


def test_collection_survives_an_mpi4py_without_its_library(tmp_path):
    # pytest.importorskip catches ImportError only: one collection error stopped the run
    env = no_mpi_library(tmp_path)
    probe = subprocess.run([sys.executable, "-c", "import mpi4py.MPI"], env=env,
                           capture_output=True, text=True)
    assert "RuntimeError: cannot load MPI library" in probe.stderr
    run = _pytest("--collect-only", "-m", "cuda", "tests/", env=env, cwd=tmp_path)
    assert run.returncode in (0, 5), run.stdout[-3000:] + run.stderr[-3000:]
    assert "error" not in run.stdout.lower(), run.stdout[-3000:]
    run = _pytest("-rs", "tests/test_distributed.py", env=env, cwd=tmp_path)
    assert run.returncode in (0, 5) and "cannot load MPI library" in run.stdout, run.stdout[-3000:]
